"""SmolLM2's own attention answers only SmolLM2's own projections (issue 41), as own_attention answers only the
running forward pass's q, k and v.

qkv.model.layer_attention (and so attention_block without attention=, forward, block_steps, generate, qkv.kv_cache's
steps and own_attention) computes grouped-query attention of q, k, v projected from x by a layer's attn_norm, W_q,
W_k and W_v. On a layer made up for it (identity projections, a column that makes each row's RMS 1, RoPE turned off
by cos = 1, sin = 0) it would be lesson 05's open exercise grouped_query_attention, and lesson 07's attention_step on
one query, for arrays of a caller's choosing. So it runs only on the very arrays load() returned for the verified
download (`adopt`), which can never be written (read-only memory maps, or an immutable buffer, `frozen`, when the
float32 cache could not be written): remembered by identity, checked in microseconds, never hashed. A copied,
changed or made-up projection raises NotTheModelsWeights; a caller's own attention (attention=) runs on any weights.
W_o, the MLP, the norm after attention, the embedding and the config stay the caller's to change (ablations).

Left open on purpose: SmolLM2's own W_q inverted (an x crafted so that its queries are given ones; grow= or the cache
hands in keys and values) still gives grouped-query attention, but only with SmolLM2's 9 query heads over 3 key/value
heads of width 64; fitting other head counts onto that grouping is the exercise's own work (which query head reads
which key/value head), as it is with the handed-out attention of lessons 02 and 04.
"""
import numpy as np

from qkv import model_cache
from qkv.readable_errors import ThreeLineError

PROJECTIONS = ("attn_norm", "W_q", "W_k", "W_v")  # what decides the q, k, v the model's attention attends with
_own = {}  # id(array) -> array: the PROJECTIONS of every layer of an adopted load (kept, so no id is reused)


class NotTheModelsWeights(ThreeLineError):
    """The model's own attention called with projections that are not the loaded model's (three lines)."""

    lines = ("qkv.model's own attention runs only with SmolLM2's own attn_norm, W_q, W_k and W_v, the very arrays "
             "model.load() returned.",
             "Why: with projections of your own it would compute grouped-query attention of your own q, k, v, an "
             "open exercise.",
             "What to do: pass your own attention with attention= (model.forward, model.attention_block); copied or "
             "changed weights work there.")


def frozen(arrays):
    """{name: array} with each array moved into an immutable bytes buffer, which numpy can never make writeable (a
    verified load kept in memory is then as safe as its read-only memory maps). One array at a time: the extra
    memory is the largest array's, not the model's."""
    for name in list(arrays):
        array = np.ascontiguousarray(arrays[name])
        arrays[name] = np.frombuffer(array.tobytes(), array.dtype).reshape(array.shape)
    return arrays


def adopt(model):
    """Remember `model`'s projections as SmolLM2's own when qkv.model_cache trusts it (load() of the verified
    download, every array of it never writeable); returns `model`."""
    if model_cache.is_trusted(model):
        _own.update({id(getattr(layer, name)): getattr(layer, name)
                     for layer in model.weights.layers for name in PROJECTIONS})
    return model


def require_own_projections(layer):
    """NotTheModelsWeights unless `layer`'s attn_norm, W_q, W_k and W_v are an adopted load's very arrays."""
    for name in PROJECTIONS:
        array = getattr(layer, name, None)
        if _own.get(id(array)) is not array:  # identity: a copy, a view or an array of one's own is not the model's
            raise NotTheModelsWeights()
