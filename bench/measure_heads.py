"""Lesson 05's measurements on SmolLM2, printed: where the last token of the seed sentence looks in each
head of the last layer (top 3 and entropy), and how much the heads of each layer differ.

    .venv/bin/python bench/measure_heads.py
"""
import time

import numpy as np

from qkv import model, plots, scaling

SENTENCE = "Hà Nội là thủ đô của Việt Nam. Thành phố này nằm ở miền Bắc."


def main():
    m = model.load()
    c = m.config
    ids = model.encode(m, SENTENCE)
    labels = plots.readable_token_labels(lambda i: model.decode(m, i), ids)
    start = time.perf_counter()
    run = model.forward(m, ids, return_weights=True)
    seconds = time.perf_counter() - start
    print(f"SmolLM2: {c.n_layers} layers, d_model {c.d_model} = {c.n_heads} query heads x {c.d_head}, "
          f"{c.n_kv_heads} key/value heads; {len(ids)} tokens; forward with weights {seconds:.2f} s")
    print(f"uniform weights over {len(ids)} tokens would have entropy ln {len(ids)} = {np.log(len(ids)):.3f} nats\n")

    last_rows = run.weights[-1][:, -1, :]
    entropy = scaling.entropy(last_rows)
    print(f"layer {c.n_layers - 1}, last token {labels[-1]!r}: three most-attended tokens per head")
    for head, row in enumerate(last_rows):
        top = np.argsort(row)[::-1][:3]
        cells = " · ".join(f"{j}:{labels[j]!r} {row[j]:.4f}" for j in top)
        print(f"  head {head}: {cells:<62} entropy {entropy[head]:.3f}")

    all_entropy = np.array([scaling.entropy(w[:, -1, :]) for w in run.weights])
    gaps = all_entropy.max(axis=1) - all_entropy.min(axis=1)
    first_token_share = np.array([w[:, -1, 0].mean() for w in run.weights])
    print("\nper layer: entropy of the last token's weights, most concentrated / most spread head "
          "(nats), and mean weight on the first token")
    for layer, (row, share) in enumerate(zip(all_entropy, first_token_share)):
        print(f"  layer {layer:2d}: min {row.min():.2f} (head {row.argmin()})  max {row.max():.2f} "
              f"(head {row.argmax()})  gap {row.max() - row.min():.2f}  first-token share {share:.2f}")
    print(f"median gap between the heads of a layer: {np.median(gaps):.2f} nats")


if __name__ == "__main__":
    main()
