"""Multi-head and grouped-query attention: several attentions side by side on split dimensions."""
from typing import NamedTuple

import numpy as np

from qkv.attention import attention, attention_weights, project_qkv
from qkv.shapes import as_float_array, require, whole_number


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
    # v may be narrower or wider than k (d_v != d_head), as PyTorch's scaled_dot_product_attention allows
    require(k.shape[:2] == v.shape[:2],
            f"k {k.shape} and v {v.shape} must have the same heads and keys [H_kv, T_k, ...]")
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


# ---------------------------------------------------------------- multi-head attention

def split_heads(x, n_heads):
    # [T, n_heads * d_head] -> [n_heads, T, d_head]; head h owns columns h*d_head .. (h+1)*d_head - 1
    x = as_float_array(x, "x")
    require(x.ndim == 2, f"x must be [T, n_heads * d_head]; got shape {x.shape}")
    n_heads = whole_number(n_heads, "n_heads", 1)
    require(x.shape[1] % n_heads == 0,
            f"x of shape {x.shape} has {x.shape[1]} columns, which {n_heads} heads cannot share evenly")
    T, width = x.shape
    return x.reshape(T, n_heads, width // n_heads).transpose(1, 0, 2)


def merge_heads(x):
    # [n_heads, T, d_head] -> [T, n_heads * d_head]; the inverse of split_heads (heads side by side, in order)
    x = as_float_array(x, "x")
    require(x.ndim == 3, f"x must be [n_heads, T, d_head]; got shape {x.shape}")
    n_heads, T, d_head = x.shape
    return x.transpose(1, 0, 2).reshape(T, n_heads * d_head)


def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    # [T, d_model], [d_model, H*d_head] x 3, [H*d_head, d_model] -> [T, d_model]
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    require(Q.shape == K.shape == V.shape,
            f"W_Q, W_K, W_V must give equal widths for multi-head attention; got Q {Q.shape}, K {K.shape}, V {V.shape}")
    W_O = as_float_array(W_O, "W_O")
    require(W_O.ndim == 2 and W_O.shape[0] == V.shape[1],
            f"W_O must be [n_heads * d_head, d_model] = [{V.shape[1]}, d_model]; got {W_O.shape}")
    # every head runs the whole scaled dot-product attention on its own d_head-wide slice
    heads = attention(split_heads(Q, n_heads), split_heads(K, n_heads), split_heads(V, n_heads), mask)
    return merge_heads(heads) @ W_O


# ---------------------------------------------------------------- what heads cost

class AttentionShape(NamedTuple):
    """The numbers of a model's attention that decide its size; any object with these attributes will do
    (qkv.model's Config has them too)."""
    name: str
    n_layers: int
    d_model: int
    n_heads: int      # query heads, H_q
    n_kv_heads: int   # key/value heads, H_kv (= n_heads for classic multi-head attention)
    d_head: int


# Published configurations (GPT-2 small: 12 blocks of 12 heads; Qwen2.5-0.5B: 24 layers, 14 query heads
# sharing 2 key/value heads). SmolLM2's is read from the loaded model, never typed in.
GPT2_SMALL = AttentionShape("GPT-2 small", n_layers=12, d_model=768, n_heads=12, n_kv_heads=12, d_head=64)
QWEN25_05B = AttentionShape("Qwen2.5-0.5B", n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, d_head=64)


def as_multi_head(config):
    # the same model with one key/value head per query head: what the KV cache would be without GQA
    if config.n_kv_heads == config.n_heads:
        return config
    return AttentionShape(getattr(config, "name", "model") + " as MHA", config.n_layers, config.d_model,
                          config.n_heads, config.n_heads, config.d_head)


def kv_cache_bytes_per_token(config, bytes_per_element):
    # config -> bytes; every layer keeps a key AND a value vector of d_head numbers per key/value head
    return 2 * config.n_layers * config.n_kv_heads * config.d_head * bytes_per_element


def attention_parameter_count(d_model, n_heads, d_head, n_kv_heads=None):
    # weights of one layer's W_Q, W_K, W_V, W_O (biases left out)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    return d_model * n_heads * d_head * 2 + d_model * n_kv_heads * d_head * 2


def attention_flops(T, d_model, n_heads, d_head, n_kv_heads=None):
    # floating-point operations of one layer on T tokens, a multiply-add counted as 2 (softmax left out)
    projections = 2 * T * attention_parameter_count(d_model, n_heads, d_head, n_kv_heads)
    scores_and_mixing = 2 * (2 * T * T * d_head) * n_heads  # Q K^T, then weights @ V, in every head
    return projections + scores_and_mixing
