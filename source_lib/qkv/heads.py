"""Multi-head and grouped-query attention: several attentions side by side on split dimensions."""
import numpy as np

from qkv.attention import attention, attention_weights
from qkv.shapes import as_float_array, require


def repeat_kv_heads(x, n_query_heads):
    # [H_kv, T, d] -> [H_q, T, d]; query head h reads key/value head h // (H_q // H_kv)
    x = as_float_array(x, "k/v")
    n_kv_heads = x.shape[0]
    require(n_query_heads % n_kv_heads == 0,
            f"{n_query_heads} query heads cannot be shared evenly among {n_kv_heads} key/value heads")
    return np.repeat(x, n_query_heads // n_kv_heads, axis=0)


def _check_gqa_shapes(q, k, v):
    q, k, v = as_float_array(q, "q"), as_float_array(k, "k"), as_float_array(v, "v")
    require(q.ndim == 3 and k.ndim == 3 and v.ndim == 3,
            f"q, k, v must be [heads, T, d_head]; got q {q.shape}, k {k.shape}, v {v.shape}")
    require(k.shape == v.shape, f"k {k.shape} and v {v.shape} must have the same shape")
    require(q.shape[2] == k.shape[2], f"q {q.shape} and k {k.shape} must have the same d_head")
    return q, k, v


def grouped_query_weights(q, k, mask=None):
    # [H_q, T_q, d], [H_kv, T_k, d] -> [H_q, T_q, T_k]
    q, k, _ = _check_gqa_shapes(q, k, k)
    return attention_weights(q, repeat_kv_heads(k, q.shape[0]), mask)


def grouped_query_attention(q, k, v, mask=None):
    # [H_q, T_q, d], [H_kv, T_k, d], [H_kv, T_k, d_v] -> [H_q, T_q, d_v]
    q, k, v = _check_gqa_shapes(q, k, v)
    n_query_heads = q.shape[0]
    return attention(q, repeat_kv_heads(k, n_query_heads), repeat_kv_heads(v, n_query_heads), mask)
