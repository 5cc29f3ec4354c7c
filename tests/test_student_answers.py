"""Answers a student would really write, held to both layers of their exercise (issue 32: 'Wrong answers that pass
the hidden tests', 'A right answer is refused').

For the exercises of lessons 01-07, WRONG answers, each a different algorithm rather than a small slip (a softmax
shifted by the whole array's one maximum, a probe that compares outputs with np.allclose, an online softmax whose
running max starts at 0, a cosine similarity for a dot product, ...), must fail BOTH the visible check and the hidden
test; RIGHT answers written in unusual styles (a dictionary for a hard lookup, einsum, a list of heads, ...) must pass
both. Each answer is the student's source text, run in an otherwise perfect notebook as tests/lessons.py builds it:
no graded class, a few seconds in all.
"""
import contextlib
import importlib
import io
import warnings

import numpy as np
import pytest

from lessons import assert_rejected, mutant

# lesson -> exercise -> {"wrong": {what the student did: source}, "right": {style: source}}
ANSWERS = {
    "01-lookup": {
        "hard_lookup": {
            "wrong": {
                "a key whose dot product with the query equals the query's own": '''
def hard_lookup(query, keys, values):
    query, keys = np.asarray(query, dtype=float), np.asarray(keys, dtype=float)
    for key, value in zip(keys, values):
        if key @ query == query @ query:
            return value
    raise KeyError(f"no key equals the query {query.tolist()}")
''',
                "a key with the same components in any order": '''
def hard_lookup(query, keys, values):
    for key, value in zip(keys, values):
        if sorted(key) == sorted(query):
            return value
    raise KeyError(f"no key equals the query {list(query)}")
''',
                "equal up to np.allclose's tolerance": '''
def hard_lookup(query, keys, values):
    for key, value in zip(keys, values):
        if np.allclose(key, query):
            return value
    raise KeyError(f"no key equals the query {list(query)}")
''',
                "the nearest key, if nearer than 1e-6": '''
def hard_lookup(query, keys, values):
    distances = np.linalg.norm(np.asarray(keys, dtype=float) - np.asarray(query, dtype=float), axis=1)
    nearest = int(np.argmin(distances))
    if distances[nearest] > 1e-6:
        raise KeyError(f"no key equals the query {list(query)}")
    return np.asarray(values)[nearest]
''',
            },
            "right": {
                "a Python dictionary of tuples": '''
def hard_lookup(query, keys, values):
    table = {tuple(np.asarray(key).tolist()): value for key, value in zip(keys, values)}
    try:
        return table[tuple(np.asarray(query).tolist())]
    except KeyError:
        raise KeyError(f"no key equals the query {np.asarray(query).tolist()}") from None
''',
            },
        },
        "softmax": {
            "wrong": {
                "shifted by the mean of each slice": '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.mean(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
''',
                "shifted by the array's one maximum": '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.max(x))
    return e / np.sum(e, axis=axis, keepdims=True)
''',
            },
            "right": {
                "log-sum-exp": '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    m = np.max(x, axis=axis, keepdims=True)
    return np.exp(x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)))
''',
                "the axis moved last, then one row at a time": '''
def softmax(x, axis=-1):
    rows = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    out = np.empty_like(rows)
    for index in np.ndindex(rows.shape[:-1]):
        e = np.exp(rows[index] - rows[index].max())
        out[index] = e / e.sum()
    return np.moveaxis(out, -1, axis)
''',
            },
        },
        "soft_lookup": {
            "wrong": {
                "cosine similarity for the scores": '''
def soft_lookup(query, keys, values, temperature=1.0):
    query, keys = np.asarray(query, dtype=float), np.asarray(keys, dtype=float)
    scores = keys @ query / (np.linalg.norm(keys, axis=1) * np.linalg.norm(query))
    weights = softmax(scores / temperature)
    return weights, weights @ np.asarray(values, dtype=float)
''',
                "minus the squared distance for the scores": '''
def soft_lookup(query, keys, values, temperature=1.0):
    query, keys = np.asarray(query, dtype=float), np.asarray(keys, dtype=float)
    weights = softmax(-np.sum((keys - query) ** 2, axis=1) / temperature)
    return weights, weights @ np.asarray(values, dtype=float)
''',
            },
            "right": {
                "the temperature folded into the query": '''
def soft_lookup(query, keys, values, temperature=1.0):
    weights = softmax(np.asarray(keys, dtype=float) @ (np.asarray(query, dtype=float) / temperature))
    return weights, np.einsum("n,nd->d", weights, np.asarray(values, dtype=float))
''',
            },
        },
        "soft_lookup_by_temperature": {
            "wrong": {
                "the weights of each temperature instead of its output": '''
def soft_lookup_by_temperature(query, keys, values, temperatures):
    return np.array([soft_lookup(query, keys, values, temperature=t)[0] for t in temperatures])
''',
                "a hard lookup (argmax) standing in for small temperatures": '''
def soft_lookup_by_temperature(query, keys, values, temperatures):
    scores = np.asarray(keys, dtype=float) @ np.asarray(query, dtype=float)
    return np.array([np.asarray(values, dtype=float)[np.argmax(scores)] if t < 0.01
                     else soft_lookup(query, keys, values, t)[1] for t in temperatures])
''',
            },
            "right": {
                "vectorised over the temperatures": '''
def soft_lookup_by_temperature(query, keys, values, temperatures):
    temperatures = np.asarray(temperatures, dtype=float)
    scores = np.asarray(keys, dtype=float) @ np.asarray(query, dtype=float)
    return softmax(scores[None, :] / temperatures[:, None], axis=1) @ np.asarray(values, dtype=float)
''',
            },
        },
    },
    "02-by-hand": {
        "dot_scores": {
            "wrong": {
                "each query with its own key only": '''
def dot_scores(Q, K):
    Q, K = np.asarray(Q, dtype=float), np.asarray(K, dtype=float)
    return np.sum(Q[:, None, :] * K[None, :, :], axis=-1).T
''',
            },
            "right": {
                "einsum": '''
def dot_scores(Q, K):
    return np.einsum("qd,kd->qk", np.asarray(Q, dtype=float), np.asarray(K, dtype=float))
''',
            },
        },
        "scaled_scores": {
            "wrong": {
                "normalised by the scores' own norm": '''
def scaled_scores(Q, K):
    scores = dot_scores(Q, K)
    return scores / np.linalg.norm(scores)
''',
            },
            "right": {
                "a power of d_k": '''
def scaled_scores(Q, K):
    return dot_scores(Q, K) * np.shape(Q)[-1] ** -0.5
''',
            },
        },
        "attention_weights": {
            "wrong": {
                "own softmax shifted by the matrix's one maximum": '''
def attention_weights(Q, K):
    scores = scaled_scores(Q, K)
    e = np.exp(scores - np.max(scores))
    return e / e.sum(axis=-1, keepdims=True)
''',
                "one-hot on each row's best key (hard attention)": '''
def attention_weights(Q, K):
    scores = scaled_scores(Q, K)
    return (scores == scores.max(axis=-1, keepdims=True)).astype(float)
''',
            },
            "right": {
                "own softmax shifted by each row's maximum": '''
def attention_weights(Q, K):
    scores = scaled_scores(Q, K)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
''',
            },
        },
        "attention": {
            "wrong": {
                "own softmax shifted by the matrix's one maximum, inline": '''
def attention(Q, K, V):
    scores = np.asarray(Q, dtype=float) @ np.asarray(K, dtype=float).T / np.sqrt(np.shape(Q)[-1])
    e = np.exp(scores - scores.max())
    return e / e.sum(axis=1, keepdims=True) @ np.asarray(V, dtype=float)
''',
            },
            "right": {
                "one query at a time": '''
def attention(Q, K, V):
    V = np.asarray(V, dtype=float)
    return np.array([attention_weights(np.asarray(q, dtype=float)[None, :], K)[0] @ V for q in np.asarray(Q)])
''',
            },
        },
        "self_attention": {
            "wrong": {
                "attention of X on itself, no projections": '''
def self_attention(X, W_Q, W_K, W_V):
    return attention(X, X, X)
''',
            },
            "right": {
                "the projections by einsum": '''
def self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, dtype=float)
    Q, K, V = (np.einsum("tm,md->td", X, np.asarray(W, dtype=float)) for W in (W_Q, W_K, W_V))
    return attention(Q, K, V)
''',
            },
        },
    },
    "03-scaling": {
        "dot_product_variance": {
            "wrong": {
                "every query with every key (q @ k.T), not the pairs": '''
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return float(np.var(q @ k.T))
''',
                "the theory's d_k instead of a measurement": '''
def dot_product_variance(d_k, n_samples, rng):
    return float(d_k)
''',
            },
            "right": {
                "products summed by hand, ddof=1": '''
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return float(np.var((q * k).sum(axis=1), ddof=1))
''',
            },
        },
        "entropy": {
            "wrong": {
                "in bits (log2)": '''
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(np.where(w > 0, w * np.log2(np.where(w > 0, w, 1.0)), 0.0), axis=-1)
''',
            },
            "right": {
                "nansum over 0 * log 0": '''
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(w * np.log(w), axis=-1)
''',
            },
        },
        "softmax_jacobian": {
            "wrong": {
                "s_i (1 - s_j) everywhere": '''
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=float))
    return np.outer(s, 1 - s)
''',
            },
            "right": {
                "two loops and a Kronecker delta": '''
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=float))
    J = np.zeros((len(s), len(s)))
    for i in range(len(s)):
        for j in range(len(s)):
            J[i, j] = s[i] * ((i == j) - s[j])
    return J
''',
            },
        },
    },
    "04-masking": {
        "masked_softmax": {
            "wrong": {
                "a large negative number added where hidden (-1e9)": '''
def masked_softmax(scores, mask):
    scores = np.asarray(scores, dtype=float)
    shifted = scores + np.where(np.asarray(mask, dtype=bool), 0.0, -1e9)
    e = np.exp(shifted - shifted.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
''',
                "shifted by the largest visible score of the whole array": '''
def masked_softmax(scores, mask):
    scores = np.asarray(scores, dtype=float)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
    visible = np.where(mask, scores, -np.inf)
    top = visible.max() if np.isfinite(visible.max()) else 0.0
    e = np.where(mask, np.exp(visible - top), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
''',
                "the softmax of every score, the hidden ones then zeroed and the rest renormalised": '''
def masked_softmax(scores, mask):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    w = np.where(mask, e / e.sum(axis=-1, keepdims=True), 0.0)
    total = w.sum(axis=-1, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)
''',
            },
            "right": {
                "masked arrays (numpy.ma)": '''
def masked_softmax(scores, mask):
    scores = np.asarray(scores, dtype=float)
    hidden = ~np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
    s = np.ma.masked_array(scores, mask=hidden)
    e = np.ma.exp(s - s.max(axis=-1, keepdims=True))
    return np.ma.filled(e / e.sum(axis=-1, keepdims=True), 0.0)
''',
            },
        },
        "causal_self_attention": {
            "wrong": {
                "the causal mask sized from the batch axis": '''
def causal_self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X)
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return masked_softmax(scores, causal_mask(len(X))) @ V
''',
            },
            "right": {
                "-1e9 added above the diagonal (no row is ever fully masked)": '''
def causal_self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, dtype=float)
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    T = X.shape[-2]
    scores = scores + np.triu(np.full((T, T), -1e9), 1)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ V
''',
            },
        },
        "dependence_matrix": {
            "wrong": {
                "each output row compared with np.allclose": '''
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    depends = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        nudged[j] += delta
        moved = np.asarray(attend(nudged))
        for i in range(len(X)):
            depends[i, j] = not np.allclose(moved[i], baseline[i])
    return depends
''',
                "compared with np.isclose at atol=tol": '''
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    columns = []
    for j in range(len(X)):
        nudged = X.copy()
        nudged[j] += delta
        columns.append(~np.all(np.isclose(np.asarray(attend(nudged)), baseline, atol=tol), axis=1))
    return np.stack(columns, axis=1)
''',
            },
            "right": {
                "the nudged inputs built by broadcasting": '''
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    nudges = np.eye(len(X))[:, :, None] * delta          # nudges[j] moves row j only
    changes = [np.max(np.abs(np.asarray(attend(X + nudge)) - baseline), axis=1) for nudge in nudges]
    return np.array(changes).T > tol
''',
            },
        },
    },
    "05-heads": {
        "split_heads": {
            "wrong": {
                "each head every n_heads-th column": '''
def split_heads(x, n_heads):
    x = np.asarray(x)
    T, width = x.shape
    return x.reshape(T, width // n_heads, n_heads).transpose(2, 0, 1)
''',
            },
            "right": {
                "np.split, then stacked": '''
def split_heads(x, n_heads):
    return np.stack(np.split(np.asarray(x), n_heads, axis=1))
''',
            },
        },
        "merge_heads": {
            "right": {
                "the heads concatenated side by side": '''
def merge_heads(x):
    return np.concatenate(list(np.asarray(x)), axis=1)
''',
            },
        },
        "multi_head_attention": {
            "wrong": {
                "own softmax shifted by one maximum over every head": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    X = np.asarray(X)
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max())
    return merge_heads(e / e.sum(axis=-1, keepdims=True) @ v) @ W_O
''',
                "one attention over the full width, scaled by d_head": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    X = np.asarray(X)
    q, k, v = X @ W_Q, X @ W_K, X @ W_V
    return masked_softmax(q @ k.T / np.sqrt(q.shape[-1] // n_heads), mask) @ v @ W_O
''',
            },
            "right": {
                "a loop over the heads' column slices": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    X = np.asarray(X, dtype=float)
    d_head = np.shape(W_Q)[1] // n_heads
    heads = []
    for h in range(n_heads):
        columns = slice(h * d_head, (h + 1) * d_head)
        q, k, v = X @ W_Q[:, columns], X @ W_K[:, columns], X @ W_V[:, columns]
        heads.append(masked_softmax(q @ k.T / np.sqrt(d_head), mask) @ v)
    return np.concatenate(heads, axis=1) @ W_O
''',
            },
        },
        "grouped_query_attention": {
            "wrong": {
                "own softmax shifted by one maximum over every head": '''
def grouped_query_attention(q, k, v, mask=None):
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max())
    return e / e.sum(axis=-1, keepdims=True) @ v
''',
                "one key/value head averaged from all of them": '''
def grouped_query_attention(q, k, v, mask=None):
    k = np.broadcast_to(np.mean(k, axis=0), (q.shape[0],) + np.shape(k)[1:])
    v = np.broadcast_to(np.mean(v, axis=0), (q.shape[0],) + np.shape(v)[1:])
    return masked_softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), mask) @ v
''',
            },
            "right": {
                "query heads reshaped into groups, einsum": '''
def grouped_query_attention(q, k, v, mask=None):
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    H_q, T_q, d = q.shape
    H_kv = k.shape[0]
    grouped = q.reshape(H_kv, H_q // H_kv, T_q, d)
    scores = np.einsum("hgtd,hsd->hgts", grouped, k).reshape(H_q, T_q, -1) / np.sqrt(d)
    weights = masked_softmax(scores, mask).reshape(H_kv, H_q // H_kv, T_q, -1)
    return np.einsum("hgts,hsd->hgtd", weights, v).reshape(H_q, T_q, -1)
''',
            },
        },
        "kv_cache_bytes_per_token": {
            "wrong": {
                "d_head taken as d_model / n_heads": '''
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_layers * config.n_kv_heads * (config.d_model // config.n_heads) * bytes_per_element
''',
            },
        },
    },
    "06-sinks": {
        "first_token_share": {
            "wrong": {
                "the largest head's share instead of the mean": '''
def first_token_share(weights):
    return float(np.asarray(weights)[:, 1:, 0].mean(axis=1).max())
''',
            },
            "right": {
                "a sum over a count": '''
def first_token_share(weights):
    w = np.asarray(weights)
    return float(w[:, 1:, 0].sum() / (w.shape[0] * (w.shape[1] - 1)))
''',
            },
        },
        "contribution_norms": {
            "wrong": {
                "the weight times the norm of v, without W_O": '''
def contribution_norms(weights, v, W_O_head):
    return np.asarray(weights) * np.linalg.norm(np.asarray(v), axis=-1)
''',
            },
            "right": {
                "the weight outside the norm": '''
def contribution_norms(weights, v, W_O_head):
    return np.abs(np.asarray(weights)) * np.linalg.norm(np.asarray(v) @ np.asarray(W_O_head), axis=1)
''',
            },
        },
        "occlusion_effects": {
            "wrong": {
                "the token replaced by id 0 instead of deleted": '''
def occlusion_effects(next_token_logprob, ids):
    ids = list(ids)
    full = next_token_logprob(ids)
    return np.array([full - next_token_logprob(ids[:i] + [0] + ids[i + 1:]) for i in range(len(ids))])
''',
            },
            "right": {
                "np.delete": '''
def occlusion_effects(next_token_logprob, ids):
    ids = np.asarray(ids)
    full = next_token_logprob(ids.tolist())
    return np.array([full - next_token_logprob(np.delete(ids, i).tolist()) for i in range(len(ids))])
''',
            },
        },
        "sliding_window_mask": {
            "wrong": {
                "the sinks visible to queries before them": '''
def sliding_window_mask(T, window, n_sink):
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return ((j <= i) & (i - j < window)) | (j < n_sink)
''',
            },
            "right": {
                "two loops": '''
def sliding_window_mask(T, window, n_sink):
    mask = np.zeros((T, T), dtype=bool)
    for i in range(T):
        for j in range(i + 1):
            mask[i, j] = i - j < window or j < n_sink
    return mask
''',
            },
        },
        "perplexity": {
            "wrong": {
                "log-softmax shifted by the array's one maximum": '''
def perplexity(logits, ids):
    logits, ids = np.asarray(logits, dtype=float), np.asarray(ids)
    x = logits[:-1]
    log_p = x - x.max() - np.log(np.exp(x - x.max()).sum(axis=-1, keepdims=True))
    return float(np.exp(-np.mean(log_p[np.arange(len(ids) - 1), ids[1:]])))
''',
                "1 / the mean probability of the next token": '''
def perplexity(logits, ids):
    logits, ids = np.asarray(logits, dtype=float), np.asarray(ids)
    x = logits[:-1]
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return float(1 / np.mean(p[np.arange(len(ids) - 1), ids[1:]]))
''',
            },
            "right": {
                "one position at a time": '''
def perplexity(logits, ids):
    total = 0.0
    for t in range(len(ids) - 1):
        row = np.asarray(logits[t], dtype=float)
        top = row.max()
        total += top + np.log(np.sum(np.exp(row - top))) - row[ids[t + 1]]
    return float(np.exp(total / (len(ids) - 1)))
''',
            },
        },
        "diagonal_score": {
            "wrong": {
                "the trace over all T queries": '''
def diagonal_score(weights):
    w = np.asarray(weights)
    return np.trace(w, axis1=1, axis2=2) / w.shape[1]
''',
            },
            "right": {
                "np.diagonal": '''
def diagonal_score(weights):
    return np.diagonal(np.asarray(weights), axis1=1, axis2=2)[:, 1:].mean(axis=-1)
''',
            },
        },
        "previous_token_score": {
            "wrong": {
                "the next token's key (offset +1)": '''
def previous_token_score(weights):
    return np.diagonal(np.asarray(weights), offset=1, axis1=1, axis2=2).mean(axis=-1)
''',
            },
            "right": {
                "np.diagonal at offset -1": '''
def previous_token_score(weights):
    return np.diagonal(np.asarray(weights), offset=-1, axis1=1, axis2=2).mean(axis=-1)
''',
            },
        },
        "induction_score": {
            "wrong": {
                "the key of the copied token itself (i - period)": '''
def induction_score(weights, period):
    w = np.asarray(weights)
    i = np.arange(w.shape[1] - period, w.shape[1])
    return w[:, i, i - period].mean(axis=-1)
''',
            },
            "right": {
                "np.diagonal at offset 1 - period": '''
def induction_score(weights, period):
    w = np.asarray(weights)
    return np.diagonal(w, offset=1 - period, axis1=1, axis2=2)[:, -period:].mean(axis=-1)
''',
            },
        },
    },
    "07-cost": {
        "cost_ratio": {
            "right": {
                "the squares divided": '''
def cost_ratio(n_old, n_new):
    return float(n_new * n_new) / (n_old * n_old)
''',
            },
        },
        "fit_exponent": {
            "wrong": {
                "the slope between the first and last points": '''
def fit_exponent(sizes, values):
    sizes, values = np.asarray(sizes, dtype=float), np.asarray(values, dtype=float)
    return float(np.log(values[-1] / values[0]) / np.log(sizes[-1] / sizes[0]))
''',
                "the mean of the slopes between neighbours": '''
def fit_exponent(sizes, values):
    x, y = np.log(np.asarray(sizes, dtype=float)), np.log(np.asarray(values, dtype=float))
    return float(np.mean(np.diff(y) / np.diff(x)))
''',
            },
            "right": {
                "least squares by covariance": '''
def fit_exponent(sizes, values):
    x, y = np.log(np.asarray(sizes, dtype=float)), np.log(np.asarray(values, dtype=float))
    return float(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
''',
            },
        },
        "attention_step": {
            "wrong": {
                "own softmax shifted by one maximum over every head": '''
def attention_step(q_new, k_cache, v_cache):
    group = q_new.shape[0] // k_cache.shape[0]
    k, v = np.repeat(k_cache, group, axis=0), np.repeat(v_cache, group, axis=0)
    scores = q_new @ k.transpose(0, 2, 1) / np.sqrt(q_new.shape[-1])
    e = np.exp(scores - scores.max())
    return e / e.sum(axis=-1, keepdims=True) @ v
''',
            },
            "right": {
                "one query head at a time": '''
def attention_step(q_new, k_cache, v_cache):
    group = q_new.shape[0] // k_cache.shape[0]
    return np.stack([softmax(q_new[h] @ k_cache[h // group].T / np.sqrt(q_new.shape[-1])) @ v_cache[h // group]
                     for h in range(q_new.shape[0])])
''',
            },
        },
        "append_to_cache": {
            "right": {
                "np.hstack (axis 1 of a 3-D array)": '''
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return np.hstack([k_cache, k_new]), np.hstack([v_cache, v_new])
''',
            },
        },
        "chunked_attention": {
            "wrong": {
                "the running max started at 0": '''
def chunked_attention(Q, K, V, chunk):
    scale = 1 / np.sqrt(Q.shape[1])
    m = np.zeros((Q.shape[0], 1))
    l = np.zeros((Q.shape[0], 1))
    acc = np.zeros((Q.shape[0], V.shape[1]))
    for start in range(0, K.shape[0], chunk):
        scores = Q @ K[start:start + chunk].T * scale
        m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
        rescale = np.exp(m - m_new)
        p = np.exp(scores - m_new)
        l = l * rescale + p.sum(axis=1, keepdims=True)
        acc = acc * rescale + p @ V[start:start + chunk]
        m = m_new
    return acc / l
''',
            },
            "right": {
                "the first chunk starts the running values": '''
def chunked_attention(Q, K, V, chunk):
    scale = 1 / np.sqrt(Q.shape[1])
    m = l = acc = None
    for start in range(0, K.shape[0], chunk):
        scores = Q @ K[start:start + chunk].T * scale
        block_max = scores.max(axis=1, keepdims=True)
        if m is None:
            p = np.exp(scores - block_max)
            m, l, acc = block_max, p.sum(axis=1, keepdims=True), p @ V[start:start + chunk]
            continue
        m_new = np.maximum(m, block_max)
        p = np.exp(scores - m_new)
        l = l * np.exp(m - m_new) + p.sum(axis=1, keepdims=True)
        acc = acc * np.exp(m - m_new) + p @ V[start:start + chunk]
        m = m_new
    return acc / l
''',
            },
        },
    },
}


def _cases(kind):
    return [pytest.param(lesson, grade, source, id=f"{lesson[:2]}:{grade}:{name}")
            for lesson, exercises in ANSWERS.items() for grade, answers in exercises.items()
            for name, source in answers.get(kind, {}).items()]


def _layers(lesson):
    """The visible checks and the hidden tests of `lesson`, each exercise a function of the same name."""
    number = lesson[:2]
    return (importlib.import_module(f"qkv.checks.lesson{number}"),
            importlib.import_module(f"qkv_grading.lesson{number}"))


@contextlib.contextmanager
def _quietly():
    # the checks print their verdicts and a wrong answer's numpy may warn: neither is what is tested
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("lesson, grade, source", _cases("wrong"))
def test_a_wrong_algorithm_fails_the_visible_check_and_the_hidden_test(lesson, grade, source):
    answer = mutant(lesson, grade, source)
    for layer in _layers(lesson):
        with _quietly():
            assert_rejected(getattr(layer, grade), answer)


@pytest.mark.parametrize("lesson, grade, source", _cases("right"))
def test_an_unusual_right_answer_passes_the_visible_check_and_the_hidden_test(lesson, grade, source):
    answer = mutant(lesson, grade, source)
    for layer in _layers(lesson):
        with _quietly():
            getattr(layer, grade)(answer)


def _lesson_variants():
    """Every correct variant of the lessons' own tests (VARIANTS in tests/test_lessonNN.py), whose hidden tests they
    are held to there."""
    cases = []
    for lesson in ANSWERS:
        variants = importlib.import_module(f"test_lesson{lesson[:2]}").VARIANTS
        cases += [pytest.param(lesson, grade, source, id=f"{lesson[:2]}:{grade}:{name}")
                  for grade, styles in variants.items() for name, source in styles.items()]
    return cases


@pytest.mark.parametrize("lesson, grade, source", _lesson_variants())
def test_every_correct_variant_of_the_lesson_tests_passes_the_visible_check(lesson, grade, source):
    # a visible case that a right answer cannot pass (lesson 05's uneven GQA case refused a float32 answer by 1e-5)
    # costs the student a correct exercise before grading even starts
    visible, _ = _layers(lesson)
    with _quietly():
        getattr(visible, grade)(mutant(lesson, grade, source))
