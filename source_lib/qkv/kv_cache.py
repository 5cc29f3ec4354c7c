"""SmolLM2 with a key/value cache (lesson 07): the prompt runs once, then every new token computes only its own
keys and values and attends to the ones kept from earlier steps.

    step = forward_step(model, ids, empty_kv_cache(model))   # step.logits [T, vocab], step.cache per layer
    step = forward_step(model, [next_id], step.cache)        # one more token: [1, vocab]
    generate_with_cache(model, ids, 5)                       # the same ids as qkv.model.generate(model, ids, 5)

One layer's cache operations (empty_cache, append_to_cache, attention_step, evict) are lesson 07's exercises
and live in qkv.cost; this module runs yours through the whole model of qkv.model when you pass them, and the
model's own attention (qkv.model.layer_attention, which keeps its keys and values itself) when you do not.
"""
from typing import NamedTuple

import numpy as np

from qkv import cost
from qkv.model import (attention_block, check_ids, layer_attention, logits_from_hidden, prompt_ids, rms_norm,
                       rope_angles, swiglu_mlp)
from qkv.shapes import require, whole_number


class Step(NamedTuple):
    logits: np.ndarray   # [n, vocab]: one row per token fed in
    cache: tuple         # per layer (k [H_kv, T, d_head], v [H_kv, T, d_head]); T = tokens seen so far, RoPE applied


def empty_kv_cache(model):
    """The cache before the first token: every layer's keys and values, each [H_kv, 0, d_head]."""
    c = model.config
    return tuple(cost.empty_cache(c.n_kv_heads, c.d_head) for _ in range(c.n_layers))


def _check_kv_cache(cache, config):
    require(isinstance(cache, (tuple, list)) and len(cache) == config.n_layers
            and all(isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in cache),
            f"the cache must hold one (k, v) pair per layer, {config.n_layers} of them; got "
            f"{len(cache) if isinstance(cache, (tuple, list)) else type(cache).__name__}: is it one layer's cache "
            f"instead of the model's?")
    lengths = set()
    for index, (k, v) in enumerate(cache):
        expected = (config.n_kv_heads, np.shape(k)[1] if np.ndim(k) == 3 else -1, config.d_head)
        require(np.shape(k) == expected and np.shape(v) == expected,
                f"layer {index}'s cache holds k {np.shape(k)} and v {np.shape(v)}; this model keeps "
                f"[{config.n_kv_heads}, T, {config.d_head}]: is the cache from another model?")
        lengths.add(np.shape(k)[1])
    require(len(lengths) == 1, f"the layers' caches hold different numbers of tokens {sorted(lengths)}: "
                               f"a layer's cache was swapped with another's or appended twice")
    return lengths.pop()


def forward_step(model, ids, cache, attention_step=None, append_to_cache=None):
    """Logits of `ids`, the tokens that come after the ones in `cache`, and the cache grown by their keys and values.

    Each layer projects only the new tokens, appends their keys and values to its cache with
    `append_to_cache(k_cache, v_cache, k_new, v_new) -> (k_cache, v_cache)`, then attends. One new token
    (generation) goes through `attention_step(q_new [H_q, 1, d_head], k_cache, v_cache) -> [H_q, 1, d_head]`,
    with nothing to mask: the cache holds only the past and the token itself. Several (a prompt) go through
    grouped-query attention with the causal mask shifted by the cached length. Without your functions, the
    model's own attention does both (qkv.model.layer_attention: the same numbers as qkv.cost's).
    """
    config, params = model.config, model.weights
    ids = check_ids(ids, config)
    past, n = _check_kv_cache(cache, config), len(ids)
    require(past + n <= config.context_length,
            f"{past} cached + {n} new tokens exceed the model's context length {config.context_length}")
    cos, sin = rope_angles(past + n, config.d_head, config.rope_base)
    cos, sin = cos[past:], sin[past:]                       # the new tokens sit at positions past .. past + n - 1
    append = None if append_to_cache is None else _checked_append(append_to_cache, config, past, n)
    x = params.token_embedding[ids]
    grown = []
    for layer, layer_cache in zip(params.layers, cache):
        # the caller's append_to_cache gets the cache as given; concatenation keeps it float32, like the model
        layer_cache = tuple(layer_cache) if append else tuple(np.asarray(a, dtype=np.float32) for a in layer_cache)
        grow = _grower(layer_cache, append, grown)
        if n == 1 and attention_step is not None:
            attended, _ = attention_block(x, layer, config, cos, sin, None, _stepping(attention_step, grow))
        else:
            attended, _ = layer_attention(x, layer, config, cos, sin, grow=grow)
        x = x + attended
        x = x + swiglu_mlp(rms_norm(x, layer.ffn_norm, config.rms_eps), layer.W_gate, layer.W_up, layer.W_down)
    return Step(logits=logits_from_hidden(x, params, config), cache=tuple(grown))


def _checked_append(append_to_cache, config, past, n):
    # the caller's append_to_cache, its result as float32 and checked to hold the past and the n new tokens
    def append(k_cache, v_cache, k_new, v_new):
        k_all, v_all = (np.asarray(a, dtype=np.float32) for a in append_to_cache(k_cache, v_cache, k_new, v_new))
        expected = (config.n_kv_heads, past + n, config.d_head)
        if k_all.shape != expected or v_all.shape != expected:
            raise ValueError(f"append_to_cache must give k and v of shape {expected} here (the {past} cached "
                             f"tokens, then the {n} new); got k {k_all.shape}, v {v_all.shape}")
        return k_all, v_all
    return append


def _stepping(attention_step, grow):
    # -> attention(q, k, v, mask) for attention_block: the caller's attention_step of one new token, on the cache
    # grown by its key and value; nothing to mask
    return lambda q, k, v, mask: attention_step(q, *grow(k, v))


def _grower(layer_cache, append, grown):
    # -> grow(k_new, v_new) -> (k, v): one layer's cache grown by the new tokens' keys and values (with the caller's
    # append, or concatenated), also kept in `grown`
    def grow(k_new, v_new):
        k_cache, v_cache = layer_cache
        kv = (np.concatenate((k_cache, k_new), axis=1), np.concatenate((v_cache, v_new), axis=1)) if append is None \
            else append(k_cache, v_cache, k_new, v_new)
        grown.append(kv)
        return kv
    return grow


def generate_with_cache(model, ids_or_text, n_new, attention_step=None, append_to_cache=None, return_logits=False):
    """Greedy decoding like `generate`, but the prompt runs once and every new token only computes its own
    keys and values (forward_step). With return_logits=True also the logits each step chose from, [n, vocab]."""
    ids, n_new = prompt_ids(model, ids_or_text), whole_number(n_new, "n_new", 0)
    new_ids, rows = [], []
    step = forward_step(model, ids, empty_kv_cache(model), attention_step, append_to_cache)
    for _ in range(n_new):
        rows.append(step.logits[-1].copy())   # not a view: the prompt's [T, vocab] logits can go
        next_id = int(np.argmax(step.logits[-1]))
        new_ids.append(next_id)
        if next_id == model.config.eos_id or len(new_ids) == n_new:
            break
        step = forward_step(model, [next_id], step.cache, attention_step, append_to_cache)
    if return_logits:
        return new_ids, np.array(rows).reshape(len(rows), model.config.vocab_size)
    return new_ids
