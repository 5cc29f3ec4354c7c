"""Lesson 06's measurements on SmolLM2, printed, and the lesson notebook's end-to-end time:

- the seed-002 table (last token's top 4 at the first, a middle and the last layer), the first-token share of every
  layer against the no-preference baseline, content vs position of the sink;
- the first token's share of the weight vs of the contribution ||w v W_O||, per layer;
- occlusion on the lesson's prompts: Spearman(weight, effect), how often most-attended != most needed;
- perplexity over 768 tokens of lesson text: full causal, window 64, window 64 + 1 and + 4 sinks, with the time of
  each 768-token forward pass and where that time goes (profiled);
- the top diagonal / previous-token / induction heads, and the second-copy loss with the top-5 induction heads
  ablated vs 5 random heads;
- solutions/06-sinks/06-sinks.ipynb run top to bottom with nbclient (skip it with --no-notebook).

    .venv/bin/python bench/measure_sinks.py [--no-notebook]
"""
import cProfile
import os
import pathlib
import pstats
import sys
import time

import numpy as np

from qkv import model, plots, sinks

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "06-sinks" / "06-sinks.ipynb"
SENTENCE = "Hà Nội là thủ đô của Việt Nam. Thành phố này nằm ở miền Bắc."


def notebook_prompts():
    """The occlusion prompts, read from the notebook so the bench measures exactly what the lesson does."""
    import ast
    import nbformat
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code" and cell.source.lstrip().startswith("prompts = ["):
            return ast.literal_eval(cell.source.split("=", 1)[1].split("]", 1)[0] + "]")
    raise LookupError("no `prompts = [...]` cell in the lesson notebook")


def sink_table(m, c):
    ids = model.encode(m, SENTENCE)
    labels = plots.readable_token_labels(lambda i: model.decode(m, i), ids)
    run = model.forward(m, ids, return_weights=True)
    print(f"seed-002 sentence, {len(ids)} tokens: last token's four most-attended tokens (mean over heads)")
    for layer in (0, c.n_layers // 2, c.n_layers - 1):
        row = run.weights[layer][:, -1, :].mean(axis=0)
        print(f"  layer {layer:2d}: " + " · ".join(f"{labels[j]!r} {row[j]:.4f}" for j in sinks.top_attended(row, 4)))
    shares = np.array([sinks.first_token_share(w) for w in run.weights])
    print("first-token share per layer: " + " ".join(f"{s:.2f}" for s in shares))
    peak = int(np.argmax(shares))
    print(f"  baseline (no preference) {sinks.uniform_first_token_share(len(ids)):.3f}; peak layer {peak} "
          f"{shares[peak]:.3f}; median {np.median(shares):.3f}; layers above 0.5: {int(np.sum(shares > 0.5))}")
    for text in (" Paris", ".", "\n"):
        first = model.encode(m, text)[0]
        weights = model.forward(m, [first] + list(ids[1:]), return_weights=True).weights
        mean_share = np.mean([sinks.first_token_share(w) for w in weights])
        print(f"  first token replaced by {text!r}: mean share {mean_share:.3f} "
              f"(original {shares.mean():.3f})")
    return ids, run


def weight_vs_contribution(m, c, ids, run):
    recorded = []

    def recording(q, k, v, mask):
        recorded.append(v)
        return model.own_attention(q, k, v, mask)   # the model's own, on the layer it is computing

    model.forward(m, ids, attention=recording)
    group, T = c.n_heads // c.n_kv_heads, len(ids)
    weight, contribution = [], []
    for layer in range(c.n_layers):
        W_o = m.weights.layers[layer].W_o
        w_parts, c_parts = [], []
        for head in range(c.n_heads):
            W_O_head = W_o[head * c.d_head:(head + 1) * c.d_head]
            for i in range(T - 10, T):
                norms = sinks.contribution_norms(run.weights[layer][head, i, :i + 1],
                                                 recorded[layer][head // group][:i + 1], W_O_head)
                w_parts.append(run.weights[layer][head, i, 0])
                c_parts.append(norms[0] / norms.sum())
        weight.append(np.mean(w_parts))
        contribution.append(np.mean(c_parts))
    print("first token, share of weight per layer:       " + " ".join(f"{s:.2f}" for s in weight))
    print("first token, share of contribution per layer: " + " ".join(f"{s:.2f}" for s in contribution))
    print(f"  mean over layers: weight {np.mean(weight):.3f}, contribution {np.mean(contribution):.3f}; contribution "
          f"below weight in {int(np.sum(np.array(contribution) < np.array(weight)))} of {len(weight)} layers")


def occlusion(m, fewest_for_a_rank_correlation=5):
    # as the lesson compares them: positions 1..T-2 (neither the sink nor the query itself), Spearman only with
    # at least `fewest_for_a_rank_correlation` of them
    rhos, disagree, compared, query_first, started = [], 0, 0, 0, time.perf_counter()
    prompts = notebook_prompts()
    for prompt in prompts:
        ids = model.encode(m, prompt)
        out = model.forward(m, ids, return_weights=True)
        target = int(np.argmax(out.logits[-1]))
        weight = np.mean([w[:, -1, :] for w in out.weights], axis=(0, 1))
        sequences = [ids] + [ids[:i] + ids[i + 1:] for i in range(len(ids))]
        logprobs = sinks.packed_next_token_logprobs(m, target, sequences)
        effect = logprobs[0] - logprobs[1:]
        query_first += int(np.argmax(weight[1:])) + 1 == len(ids) - 1
        between = slice(1, len(ids) - 1)
        if len(ids) - 2 >= 2:
            compared += 1
            disagree += int(np.argmax(weight[between])) != int(np.argmax(effect[between]))
        if len(ids) - 2 >= fewest_for_a_rank_correlation:
            rhos.append(sinks.spearman(weight[between], effect[between]))
    print(f"occlusion on {len(prompts)} prompts: the query itself most attended in {query_first}; most attended != "
          f"most needed (positions 1..T-2) in {disagree}/{compared}; Spearman over the {len(rhos)} prompts with >= "
          f"{fewest_for_a_rank_correlation} positions: mean {np.mean(rhos):.3f}, median {np.median(rhos):.3f} "
          f"({time.perf_counter() - started:.1f} s, packed passes)")


def streaming(m):
    ids = model.encode(m, sinks.course_text())[:768]
    L = len(ids)
    print(f"perplexity over {L} tokens of lesson text:")
    for name, mask in (("full causal", None), ("window 64", sinks.sliding_window_mask(L, 64, 0)),
                       ("window 64 + 1 sink", sinks.sliding_window_mask(L, 64, 1)),
                       ("window 64 + 4 sinks", sinks.sliding_window_mask(L, 64, 4))):
        started = time.perf_counter()
        logits = model.forward(m, ids, mask=mask).logits
        seconds = time.perf_counter() - started
        print(f"  {name:>20}: {sinks.perplexity(logits, ids):7.2f}   (forward {seconds:.1f} s)")
    profile = cProfile.Profile()
    profile.enable()
    model.forward(m, ids)
    profile.disable()
    stats = pstats.Stats(profile)
    total = sum(row[2] for row in stats.stats.values())
    parts = {}
    for (filename, _, function), row in stats.stats.items():
        if filename.endswith(("model.py", "attention.py", "heads.py")):
            parts[function] = row[2]  # own time
    print(f"  where one 768-token forward spends its {total:.1f} s (own time per function):")
    for function, seconds in sorted(parts.items(), key=lambda item: -item[1])[:6]:
        print(f"    {function:>22}: {seconds:5.2f} s ({seconds / total:.0%})")


def perplexity_memory(T=768, vocab=49152):
    """Peak memory of the lesson solution's perplexity on a real model's logits size (the grading sandbox has 2 GiB),
    against the library's, which builds the full log-softmax in float64."""
    import nbformat
    import tracemalloc
    source = next(cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells
                  if cell.metadata.get("nbgrader", {}).get("grade_id") == "perplexity")
    namespace = {"np": np}
    exec(source, namespace)
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(T, vocab)) * 3).astype(np.float32)
    ids = rng.integers(0, vocab, size=T)
    print(f"peak memory of perplexity on logits [{T}, {vocab}] float32 ({logits.nbytes / 2**20:.0f} MiB):")
    for name, fn in (("lesson solution", namespace["perplexity"]), ("qkv.sinks.perplexity", sinks.perplexity)):
        tracemalloc.start()
        value = fn(logits, ids)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  {name:>22}: {peak / 2**20:6.0f} MiB = {peak / logits.nbytes:.1f} x the logits "
              f"(perplexity {value:.2f})")


def head_patterns(m, c, run):
    period = 40
    repeated = np.tile(np.random.default_rng(6).integers(1000, 20000, size=period), 2)
    repeat_run = model.forward(m, repeated, return_weights=True)
    maps = {"diagonal": np.array([sinks.diagonal_score(w) for w in run.weights]),
            "previous token": np.array([sinks.previous_token_score(w) for w in run.weights]),
            "induction": np.array([sinks.induction_score(w, period) for w in repeat_run.weights])}
    for name, scores in maps.items():
        print(f"top {name} heads: " + ", ".join(f"L{l}.H{h} {scores[l, h]:.2f}" for l, h in sinks.top_heads(scores, 4)))

    def second_copy_loss(heads):
        logits = model.forward(m, repeated, attention=sinks.ablate_heads(model.own_attention, heads),
                               attention_takes_layer=True).logits
        return float(np.log(sinks.perplexity(logits[period:], repeated[period:])))

    top = sinks.top_heads(maps["induction"], 5)
    others = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads) if (l, h) not in top]
    draws = np.random.default_rng(7)
    random_losses = [second_copy_loss([others[i] for i in draws.choice(len(others), 5, replace=False)])
                     for _ in range(3)]
    print(f"second-copy loss (nats): intact {second_copy_loss([]):.2f}, top-5 induction heads ablated "
          f"{second_copy_loss(top):.2f}, 5 random heads ablated " + ", ".join(f"{x:.2f}" for x in random_losses))


def notebook_time():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_path = os.pathsep.join(p for p in (str(ROOT / "autograde"), os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONPATH"] = env_path  # the hidden-test cells import qkv_grading, as under nbgrader
    started = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    seconds = time.perf_counter() - started
    print(f"lesson 06 notebook end to end (nbclient, hidden tests included): {seconds:.0f} s (goal <= 90 s); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def main():
    m = model.load()
    c = m.config
    print(f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    ids, run = sink_table(m, c)
    print()
    weight_vs_contribution(m, c, ids, run)
    print()
    occlusion(m)
    perplexity_memory()
    print()
    streaming(m)
    print()
    head_patterns(m, c, run)
    if "--no-notebook" not in sys.argv:
        print()
        notebook_time()


if __name__ == "__main__":
    main()
