"""Scaled dot-product attention: the reference every lesson and the model build on.

Conventions used throughout qkv:
- rows are queries, columns are keys: scores and weights are [..., n_q, n_k];
- a mask is a boolean array broadcastable to [..., n_q, n_k], True where a query MAY attend a key (any other
  dtype is refused: an additive mask, 0 or -inf, cast to bool would be inverted);
- a query whose keys are all masked out gets all-zero weights and a zero output, never NaN.
Leading batch/head dimensions ("...") pass through every function unchanged; Q, K and V must have the same ones (a mask
may broadcast). Query heads that share a key/value head are lesson 05's grouped-query attention, which repeats the
shared heads: a broadcast here would hand that exercise out as one call plus reshapes (issue 41).
"""
import math

import numpy as np

from qkv.shapes import as_float_array, boolean_mask, require


def softmax(x, axis=-1):
    # [...] -> [...], positive, summing to 1 along `axis`
    x = as_float_array(x, "x")
    # exp overflows above ~709; subtracting the max changes nothing mathematically
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def masked_softmax(scores, mask=None, axis=-1):
    # [..., n_q, n_k], bool [..., n_q, n_k] -> [..., n_q, n_k]; fully masked rows -> zeros
    scores = as_float_array(scores, "scores")
    if mask is None:
        return softmax(scores, axis=axis)
    mask = boolean_mask(mask)
    try:
        mask = np.broadcast_to(mask, scores.shape)
    except ValueError:
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to scores of shape {scores.shape}") from None
    visible_max = np.max(np.where(mask, scores, -np.inf), axis=axis, keepdims=True)
    # a row with nothing visible has max -inf; shift it by 0 so no inf - inf = NaN appears
    visible_max = np.where(np.isfinite(visible_max), visible_max, 0.0)
    e = np.where(mask, np.exp(scores - visible_max), 0.0)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def dot_scores(Q, K):
    # [..., n_q, d_k], [..., n_k, d_k] -> [..., n_q, n_k]
    Q, K = as_float_array(Q, "Q"), as_float_array(K, "K")
    require(Q.ndim >= 2 and K.ndim >= 2, f"Q and K must be at least 2-D [n, d_k]; got Q {Q.shape}, K {K.shape}")
    require(Q.shape[-1] == K.shape[-1], f"Q {Q.shape} and K {K.shape} must share the last dimension d_k")
    require(Q.shape[:-2] == K.shape[:-2],
            f"Q {Q.shape} and K {K.shape} must have the same leading (batch, head) axes {Q.shape[:-2]}: each query "
            f"head reads its own key head. To share key heads among query heads, repeat them first (lesson 05)")
    return Q @ np.swapaxes(K, -1, -2)


def scaled_scores(Q, K):
    # [..., n_q, d_k], [..., n_k, d_k] -> [..., n_q, n_k]
    d_k = np.shape(Q)[-1]
    return dot_scores(Q, K) / math.sqrt(d_k)  # a Python float keeps float32 scores float32


def attention_weights(Q, K, mask=None):
    # [..., n_q, d_k], [..., n_k, d_k] -> [..., n_q, n_k]
    scores = scaled_scores(Q, K)
    # unmasked attention needs lesson 01's softmax only, so it still runs where masked_softmax is an open exercise
    return softmax(scores) if mask is None else masked_softmax(scores, mask)


def attention(Q, K, V, mask=None):
    # [..., n_q, d_k], [..., n_k, d_k], [..., n_k, d_v] -> [..., n_q, d_v]
    V = as_float_array(V, "V")
    require(V.ndim >= 2 and V.shape[-2] == np.shape(K)[-2],
            f"V {V.shape} must have one row per key; K is {np.shape(K)}")
    require(V.shape[:-2] == np.shape(K)[:-2],
            f"V {V.shape} and K {np.shape(K)} must have the same leading (batch, head) axes: each key has its value")
    return attention_weights(Q, K, mask) @ V


def project_qkv(X, W_Q, W_K, W_V):
    # [T, d_model], [d_model, d_k], [d_model, d_k], [d_model, d_v] -> [T, d_k], [T, d_k], [T, d_v]
    X = as_float_array(X, "X")
    projections = []
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V)):
        W = as_float_array(W, name)
        require(W.ndim == 2 and W.shape[0] == X.shape[-1],
                f"{name} must be [d_model, d] with d_model = {X.shape[-1]} to match X {X.shape}; got {W.shape}")
        projections.append(X @ W)
    return tuple(projections)


def self_attention(X, W_Q, W_K, W_V, mask=None):
    # [T, d_model], [d_model, d_k], [d_model, d_k], [d_model, d_v] -> [T, d_v]
    return attention(*project_qkv(X, W_Q, W_K, W_V), mask=mask)
