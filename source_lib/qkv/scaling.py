"""Lesson 03: why attention divides the scores by sqrt(d_k).

Three measurements carry the argument: the variance of q.k grows like d_k; large scores saturate
the softmax (one weight near 1, entropy near 0); and a saturated softmax has a Jacobian near zero,
so almost no gradient flows back into the queries and keys.
"""
import numpy as np

from qkv.attention import dot_scores, scaled_scores, softmax
from qkv.shapes import as_float_array, require, whole_number


def dot_product_variance(d_k, n_samples, rng):
    # d_k, n_samples, Generator -> a number: the sample variance of q.k for unit-variance q, k
    d_k, n_samples = whole_number(d_k, "d_k", 1), whole_number(n_samples, "n_samples", 1)
    # q first, then k, both from the caller's generator, so a student can reproduce the draw exactly
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return float(np.var(np.sum(q * k, axis=1)))


def scale_for_unit_variance(d_k):
    # d_k -> a number c such that var(c * q.k) = 1 when var(q.k) = d_k
    return 1.0 / np.sqrt(whole_number(d_k, "d_k", 1))


def entropy(weights, axis=-1):
    # [..., n] -> [...], in nats (natural log), with 0 * log 0 = 0
    weights = as_float_array(weights, "weights")
    require(np.all(weights >= 0), f"weights must be non-negative; got a minimum of {weights.min()}")
    positive = weights > 0
    # log(1) = 0 stands in for log(0), whose term is 0 by continuity (w log w -> 0 as w -> 0)
    terms = weights * np.log(np.where(positive, weights, 1))
    return 0.0 - np.sum(terms, axis=axis)  # 0.0 - turns -0.0 (a one-hot row) into 0.0


def _jacobian_of_weights(weights):
    # [n] softmax output -> [n, n], J[i, j] = d w_i / d x_j = w_i (delta_ij - w_j)
    return np.diag(weights) - np.outer(weights, weights)


def softmax_jacobian(scores):
    # [n] -> [n, n], J[i, j] = d softmax(scores)_i / d scores_j (symmetric)
    scores = as_float_array(scores, "scores")
    require(scores.ndim == 1, f"scores must be one vector [n]; got shape {scores.shape}")
    return _jacobian_of_weights(softmax(scores))


def query_jacobian(query, keys, scale=None):
    # [d_k], [n_k, d_k] -> [n_k, d_k], J[i, j] = d w_i / d query_j with w = softmax(keys @ query * scale)
    query, keys = as_float_array(query, "query"), as_float_array(keys, "keys")
    require(query.ndim == 1, f"query must be one vector [d_k]; got shape {query.shape}")
    require(keys.ndim == 2 and keys.shape[1] == query.shape[0],
            f"keys must be [n_k, d_k] with d_k = {query.shape[0]} to match the query; got {keys.shape}")
    scale = scale_for_unit_variance(query.shape[0]) if scale is None else scale
    weights = softmax(keys @ query * scale)
    # chain rule: the scores keys @ query * scale move by keys * scale per unit of query
    return _jacobian_of_weights(weights) @ keys * scale


def numerical_jacobian(fn, x, step=1e-6):
    # fn: [m] -> [n], x [m] -> [n, m] by central differences, column j = d fn / d x_j
    x = np.asarray(x, dtype=np.float64)
    columns = []
    for j in range(x.size):
        nudge = np.zeros_like(x)
        nudge[j] = step
        columns.append((np.asarray(fn(x + nudge), np.float64) - np.asarray(fn(x - nudge), np.float64)) / (2 * step))
    return np.stack(columns, axis=-1)


def random_attention_weights(d_k, n_queries, n_keys, rng, scaled=True):
    # d_k, n_q, n_k, Generator -> [n_q, n_k]: weights of unit-variance random queries over random keys
    Q = rng.standard_normal((n_queries, whole_number(d_k, "d_k", 1)))
    K = rng.standard_normal((n_keys, d_k))
    return softmax(scaled_scores(Q, K) if scaled else dot_scores(Q, K))


def saturation_by_dimension(d_ks, n_queries, n_keys, rng):
    # [n_d] -> dict of [n_d] arrays: mean largest weight and mean entropy, scaled and unscaled
    rows = {"max_unscaled": [], "max_scaled": [], "entropy_unscaled": [], "entropy_scaled": []}
    for d_k in d_ks:
        for label, scaled in (("unscaled", False), ("scaled", True)):
            weights = random_attention_weights(d_k, n_queries, n_keys, rng, scaled=scaled)
            rows["max_" + label].append(weights.max(axis=-1).mean())
            rows["entropy_" + label].append(entropy(weights).mean())
    return {name: np.array(values) for name, values in rows.items()}
