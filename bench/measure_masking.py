"""Lesson 04's measured figures, from the reference implementation. Prints; asserts nothing.

    .venv/bin/python bench/measure_masking.py

- the ✓/✗ causal grid of "Hà Nội là thủ đô" (rows are queries);
- what each fill value (0, -1, -10, -1e9, -inf) leaves on the future, and whether rows sum to 1;
- the future-leak probe: which outputs move when a later input is nudged, without and with the mask;
- a fully masked row under -inf, -1e9 (float64 and float32) and masked_softmax.
"""
import numpy as np

from qkv import attention, masking
from qkv.checks.lesson04 import WORDS, sentence_inputs


def grid_text(matrix, labels):
    return masking.mask_grid_text(matrix, labels)


def main():
    T = len(WORDS)
    mask = masking.causal_mask(T)
    print("causal mask (rows = queries, columns = keys):")
    print(grid_text(mask, WORDS))

    X, W_Q, W_K, W_V = sentence_inputs()
    scores = attention.scaled_scores(X @ W_Q, X @ W_K)
    print("\nfill value | largest weight on a future key | largest |row sum - 1| | weight of row 0 on itself")
    for fill in (0.0, -1.0, -10.0, -1e9, -np.inf):
        weights = attention.softmax(scores + masking.additive_mask(mask, fill))
        print(f"{fill:>10g} | {weights[~mask].max():>30.3g} | {np.abs(weights.sum(axis=1) - 1).max():>21.1e} | "
              f"{weights[0, 0]:.6f}")

    def unmasked(x):
        return attention.self_attention(x, W_Q, W_K, W_V)

    def causal(x):
        return masking.causal_self_attention(x, W_Q, W_K, W_V)

    print("\nfuture-leak probe: D[i, j] = output i moves when input j is nudged (delta 1.0, tol 1e-9)")
    for name, fn in (("no mask", unmasked), ("causal", causal)):
        D = masking.dependence_matrix(fn, X)
        leaking = [w for w, leaks in zip(WORDS, masking.future_leaks(D)) if leaks]
        print(f"\n{name}: outputs that depend on a later input: {leaking}")
        print(grid_text(D, WORDS))
        nudged = X.copy()
        nudged[-1] += 1.0
        moved = np.abs(fn(nudged) - fn(X)).max(axis=1)
        print(f"how far each output moves when '{WORDS[-1]}' is nudged: {np.array2string(moved, precision=4)}")

    print("\na fully masked row (scores [0.5, 0.1, -0.4], every key hidden):")
    row = np.array([[0.5, 0.1, -0.4]])
    hidden = np.zeros((1, 3), dtype=bool)
    with np.errstate(invalid="ignore"):
        print("  softmax with -inf      :", attention.softmax(row + masking.additive_mask(hidden))[0])
    print("  softmax with -1e9, f64 :", attention.softmax(row + masking.additive_mask(hidden, -1e9))[0])
    row32 = row.astype(np.float32) + masking.additive_mask(hidden, -1e9).astype(np.float32)
    print("  softmax with -1e9, f32 :", attention.softmax(row32)[0])
    print("  masked_softmax         :", attention.masked_softmax(row, hidden)[0])


if __name__ == "__main__":
    main()
