"""Lessons 01 and 02, measured: prints the numbers the notebooks show. Asserts nothing.

    .venv/bin/python bench/measure_lookup_and_by_hand.py
"""
import numpy as np

from qkv import attention, lookup

q = np.array([[1.0, 0.0, 1.0, 0.0]])
K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
V = np.array([[10.0, 0.0], [0.0, 5.0], [2.0, 2.0]])
print("worked example (seed 001)")
print("  raw scores    ", attention.dot_scores(q, K).ravel())
print("  scaled scores ", attention.scaled_scores(q, K).ravel())
print("  weights       ", np.round(attention.attention_weights(q, K).ravel(), 4))
print("  output        ", np.round(attention.attention(q, K, V).ravel(), 4))

print("\nsoft lookup of the same query as the temperature falls (distance to the hard lookup of the best key)")
best = V[np.argmax(K @ q[0])]
for t, out in zip([10, 2, 1, 0.1, 0.01], lookup.soft_lookup_by_temperature(q[0], K, V, [10, 2, 1, 0.1, 0.01])):
    weights, _ = lookup.soft_lookup(q[0], K, V, t)
    print(f"  T = {t:5}: largest weight {weights.max():.4f}, |soft - hard| = {np.abs(out - best).max():.2e}")

rng = np.random.default_rng(0)
X = rng.normal(size=(5, 768))
W_Q, W_K, W_V = (rng.normal(size=(768, 64)) / np.sqrt(768) for _ in range(3))
Q, K5, V5 = attention.project_qkv(X, W_Q, W_K, W_V)
scores = attention.dot_scores(Q, K5)
print("\nGPT-2 small shapes, one head (random weights)")
print(f"  X {X.shape}, W_Q {W_Q.shape} -> Q {Q.shape}, K {K5.shape}, V {V5.shape}, scores {scores.shape}")
print(f"  raw score std {scores.std():.2f}, scaled {(scores / 8).std():.2f}")
print(f"  largest |S - S^T| = {np.abs(scores - scores.T).max():.2f}  (asking is not answering)")
same = attention.dot_scores(*attention.project_qkv(X, W_Q, W_Q, W_V)[:2])
print(f"  with W_K = W_Q the matrix is symmetric: largest |S - S^T| = {np.abs(same - same.T).max():.1e}")
