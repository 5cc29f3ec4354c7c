"""SmolLM2-135M-Instruct in numpy: a real Llama-architecture language model in one file.

    model = load()                                   # config, float32 weights, tokenizer
    ids = encode(model, "The capital of France is")
    out = forward(model, ids, return_weights=True)   # out.logits [T, vocab], out.weights[layer] [H_q, T, T]
    decode(model, generate(model, ids, 5))           # greedy continuation

Architecture (every number read from the GGUF metadata): token embedding -> n_layers x [RMSNorm -> grouped-query
self-attention with RoPE -> residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> logits by the tied embedding.

Weights come from the Q4_1 GGUF that `qkv.fetch` downloads (read by `qkv.gguf_weights`), stored as [d_in, d_out] so
every projection reads `x @ W`, like the lessons' W_Q [d_model, d_k]. With a key/value cache: `qkv.kv_cache`.

Its attention (layer_attention) is built from lessons 01-04's functions (qkv.attention.attention_weights), never a
copy (in an earlier week the model runs through their stubs), and answers only SmolLM2's own query, key and value
projections, the arrays load() returned (qkv.own_weights): on a made-up layer it would be lesson 05's open exercise
(issue 41). A lesson plugs its own attention in with `attention=`, on any weights; a wrapper of the model's own
wraps own_attention (qkv.own_attention says why).

    python -m qkv.model          # fetch the GGUF if needed and build its float32 cache (make model)
"""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tokenizers import Tokenizer

from qkv import fetch, gguf_weights, model_cache, own_weights
from qkv.attention import attention_weights
from qkv.fetch import GGUF_SHA256, is_verified, model_path
from qkv.own_attention import own_attention, running  # noqa: F401 - own_attention is qkv.model.own_attention
from qkv.shapes import boolean_mask, require, token_ids, whole_number


# --------------------------------------------------------------------------- containers

@dataclass(frozen=True)
class Config:
    n_layers: int
    d_model: int
    n_heads: int          # query heads, H_q
    n_kv_heads: int       # key/value heads, H_kv; query head h reads kv head h // (H_q // H_kv)
    d_head: int
    d_ffn: int
    vocab_size: int
    context_length: int
    rope_base: float
    rms_eps: float
    bos_id: int
    eos_id: int


class LayerWeights(NamedTuple):
    attn_norm: np.ndarray  # [d_model]
    W_q: np.ndarray        # [d_model, H_q * d_head]
    W_k: np.ndarray        # [d_model, H_kv * d_head]
    W_v: np.ndarray        # [d_model, H_kv * d_head]
    W_o: np.ndarray        # [H_q * d_head, d_model]
    ffn_norm: np.ndarray   # [d_model]
    W_gate: np.ndarray     # [d_model, d_ffn]
    W_up: np.ndarray       # [d_model, d_ffn]
    W_down: np.ndarray     # [d_ffn, d_model]


class Weights(NamedTuple):
    token_embedding: np.ndarray     # [vocab, d_model]; also the output matrix (tied embeddings)
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray          # [d_model]


class Model(NamedTuple):
    config: Config
    weights: Weights
    tokenizer: Tokenizer


@dataclass(frozen=True)
class Forward:
    logits: np.ndarray                   # [T, vocab]
    weights: list[np.ndarray] | None     # per layer [H_q, T, T], or None
    hidden: list[np.ndarray] | None = None  # the residual stream [T, d_model]: the embeddings, then after each layer


# --------------------------------------------------------------------------- the maths

def rms_norm(x, gain, eps):
    # [T, d_model], [d_model] -> [T, d_model]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def rope_angles(n_positions, d_head, base):
    # -> cos, sin, each [T, d_head // 2]; pair i turns at frequency base^(-2i / d_head)
    frequencies = base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)
    angles = np.outer(np.arange(n_positions, dtype=np.float64), frequencies)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x, cos, sin):
    # [H, T, d_head], [T, d_head // 2], [T, d_head // 2] -> [H, T, d_head]
    # Rotates ADJACENT pairs (2i, 2i+1). Hugging Face's Llama rotates halves (i, i + d_head/2),
    # but llama.cpp's converter permutes each head's rows of W_q and W_k, HF order (2, d_head/2)
    # -> GGUF order (d_head/2, 2), so on GGUF weights adjacent pairs are right (llama.cpp's
    # rope "NORM" mode). Measured (tests/test_model.py keeps checking it): undoing that
    # permutation and rotating halves reproduces these logits to 4e-5. Rotating halves on the
    # weights as stored is wrong yet sneaky: after "The capital of France is" it still says
    # " Paris" (5 positions barely rotate), but its logits correlate 0.963 with llama.cpp's
    # there (adjacent pairs: 0.9999998) and 0.78 on the 19-token chat prompt, where it answers
    # "<|im_end|>" at once.
    require(x.shape[-1] % 2 == 0 and cos.shape == sin.shape == (x.shape[-2], x.shape[-1] // 2),
            f"apply_rope needs x [H, T, d_head] and cos, sin [T, d_head // 2]; "
            f"got x {x.shape}, cos {cos.shape}, sin {sin.shape}")
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = np.empty_like(x)
    rotated[..., 0::2] = even * cos - odd * sin
    rotated[..., 1::2] = even * sin + odd * cos
    return rotated


def silu(x):
    # [...] -> [...]; x * sigmoid(x), with sigmoid via tanh so large |x| never overflows exp
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


def swiglu_mlp(x, W_gate, W_up, W_down):
    # [T, d_model] -> [T, d_model]
    return (silu(x @ W_gate) * (x @ W_up)) @ W_down


def attention_inputs(x, layer, config, cos, sin):
    # [T, d_model] -> q [H_q, T, d_head], k [H_kv, T, d_head], v [H_kv, T, d_head]: RoPE on q and k only;
    # head h owns columns h*d_head .. (h+1)*d_head - 1 of each projection
    h = rms_norm(x, layer.attn_norm, config.rms_eps)
    T, d = len(x), config.d_head
    q = apply_rope((h @ layer.W_q).reshape(T, config.n_heads, d).transpose(1, 0, 2), cos, sin)
    k = apply_rope((h @ layer.W_k).reshape(T, config.n_kv_heads, d).transpose(1, 0, 2), cos, sin)
    v = (h @ layer.W_v).reshape(T, config.n_kv_heads, d).transpose(1, 0, 2)
    return q, k, v


def layer_attention(x, layer, config, cos, sin, mask=None, grow=None, return_weights=False, heads=False):
    # x [n, d_model], the n newest tokens (at cos and sin's positions) -> out [n, d_model], weights [H_q, n, T] or
    # None: the model's own attention sub-block. grow(k, v) -> (k, v) [H_kv, T, d_head] adds the earlier tokens'
    # keys and values (a KV cache), or None: these n tokens alone; mask bool [n, T], or None: causal. The weights are
    # the lessons' own attention_weights (no copy of softmax here: in a week where one is open, it runs its stub);
    # each group of query heads reads its shared key/value head repeated (qkv.attention does not broadcast heads).
    # heads=True: out is every head's output before W_o, [H_q, n, d_head] (what own_attention hands a wrapper)
    own_weights.require_own_projections(layer)   # SmolLM2's own attn_norm, W_q, W_k, W_v only (qkv.own_weights)
    q, k, v = attention_inputs(x, layer, config, cos, sin)
    k, v = (k, v) if grow is None else grow(k, v)
    n, T, group = len(x), k.shape[1], len(q) // len(k)                     # group: query heads per key/value head
    mask = np.tri(n, T, T - n, dtype=bool) if mask is None else mask      # query i sits at position T - n + i
    weights = attention_weights(q, np.repeat(k, group, axis=0), mask)          # [H_q, n, T]
    out = weights @ np.repeat(v, group, axis=0)                                # [H_q, n, d_head]
    out = out if heads else out.transpose(1, 0, 2).reshape(n, -1) @ layer.W_o  # heads side by side, then W_o
    return out, weights if return_weights else None


def attention_block(x, layer, config, cos, sin, mask, attention=None, return_weights=False):
    # [T, d_model] -> [T, d_model], and [H_q, T, T] weights or None; attention(q, k, v, mask) -> [H_q, T, d_head]
    # in every head's place, or None: the model's own (layer_attention). The weights are always the model's own
    if attention is None:
        return layer_attention(x, layer, config, cos, sin, mask, return_weights=return_weights)
    q, k, v = attention_inputs(x, layer, config, cos, sin)
    with running(functools.partial(layer_attention, x, layer, config, cos, sin, mask, heads=True), q, k, v, mask):
        out = np.asarray(attention(q, k, v, mask))
    if out.shape != q.shape:
        raise ValueError(f"attention(q {q.shape}, k {k.shape}, v {v.shape}, mask {np.shape(mask)}) "
                         f"must return {q.shape}; got {out.shape}")
    weights = layer_attention(x, layer, config, cos, sin, mask, return_weights=True)[1] if return_weights else None
    return out.astype(np.float32, copy=False).transpose(1, 0, 2).reshape(len(x), -1) @ layer.W_o, weights


def logits_from_hidden(x, params, config):
    # [T, d_model] -> [T, vocab]; tied embeddings: the input matrix is reused as the output one
    return rms_norm(x, params.final_norm, config.rms_eps) @ params.token_embedding.T


def forward(model, ids, attention=None, return_weights=False, return_hidden=False, mask=None,
            attention_takes_layer=False):
    """Logits for every position of `ids` (and optionally every layer's attention weights).

    return_hidden=True also keeps the residual stream: hidden[0] is the token embeddings, hidden[i]
    the output of layer i - 1 (n_layers + 1 arrays of [T, d_model], before the final RMSNorm).

    `attention(q, k, v, mask) -> out` replaces the attention inside every layer: q is
    [H_q, T, d_head], k and v [H_kv, T, d_head] (RoPE already applied), mask bool [T, T] True
    where a query may attend a key; out must be [H_q, T, d_head]. Without it, the model's own
    (layer_attention) runs; the weights returned are always the model's own.

    mask: bool [T, T] to use in every layer instead of the causal mask (e.g. a sliding window,
    qkv.sinks.sliding_window_mask). attention_takes_layer=True calls attention(q, k, v, mask, layer)
    with the layer's index 0..n_layers-1, for attention that differs by layer (qkv.sinks.ablate_heads).

    A call that involves nothing but qkv's own model and attention is read back from qkv.model_cache when
    it was computed before on this machine (the same numbers, byte for byte); any other call computes.
    """
    ids = check_ids(ids, model.config)
    mask = None if mask is None else _check_mask(mask, len(ids))
    weights_tag = model_cache.reference_call(model, attention, attention_takes_layer)
    if weights_tag is None:
        return _forward(model, ids, attention, return_weights, return_hidden, mask, attention_takes_layer)
    entry = model_cache.key(model, weights_tag, ids, mask, return_weights, return_hidden)
    if model_cache.mode() != "refresh":
        stored = model_cache.read(entry, model.config, len(ids), return_weights, return_hidden)
        if stored is not None:
            return _forward_of(stored, model.config, return_weights, return_hidden)
    result = _forward(model, ids, attention, return_weights, return_hidden, mask, attention_takes_layer)
    model_cache.write(entry, _arrays_of(result))
    return result


def _arrays_of(result):
    # Forward -> {name: array}, in the order model_cache stores them
    arrays = {"logits": result.logits}
    arrays.update({f"weights.{i}": w for i, w in enumerate(result.weights or [])})
    arrays.update({f"hidden.{i}": h for i, h in enumerate(result.hidden or [])})
    return arrays


def _forward_of(arrays, config, return_weights, return_hidden):
    weights = [arrays[f"weights.{i}"] for i in range(config.n_layers)] if return_weights else None
    hidden = [arrays[f"hidden.{i}"] for i in range(config.n_layers + 1)] if return_hidden else None
    return Forward(logits=arrays["logits"], weights=weights, hidden=hidden)


def _forward(model, ids, attention, return_weights, return_hidden, mask, attention_takes_layer):
    # forward's computation, on checked ids and mask (None: causal)
    config, params = model.config, model.weights
    T = len(ids)
    cos, sin = rope_angles(T, config.d_head, config.rope_base)
    mask = np.tri(T, dtype=bool) if mask is None else mask           # causal: query i sees keys 0..i
    x = params.token_embedding[ids]                                   # [T, d_model]
    all_weights = [] if return_weights else None
    hidden = [x] if return_hidden else None
    for index, layer in enumerate(params.layers):
        attend = _with_layer(attention, index) if attention_takes_layer and attention is not None else attention
        attended, layer_weights = attention_block(x, layer, config, cos, sin, mask, attend, return_weights)
        x = x + attended
        x = x + swiglu_mlp(rms_norm(x, layer.ffn_norm, config.rms_eps), layer.W_gate, layer.W_up, layer.W_down)
        if return_weights:
            all_weights.append(layer_weights)
        if return_hidden:
            hidden.append(x)
    return Forward(logits=logits_from_hidden(x, params, config), weights=all_weights, hidden=hidden)


def generate(model, ids_or_text, n_new, attention=None):
    """Greedy decoding: the `n_new` next token ids (fewer if the model emits end-of-text).

    Each step re-runs the whole sequence (no key/value cache), so what you see is exactly
    `forward` applied again and again.
    """
    ids, n_new = prompt_ids(model, ids_or_text), whole_number(n_new, "n_new", 0)
    new_ids = []
    for _ in range(n_new):
        next_id = int(np.argmax(forward(model, ids + new_ids, attention=attention).logits[-1]))
        new_ids.append(next_id)
        if next_id == model.config.eos_id:
            break
    return new_ids


def block_steps(model, ids, layer_index=0, attention=None):
    """Inside one block, on real inputs: [(step name, array), ...] in the order the block computes them.

    x [T, d_model] -> RMSNorm -> attention [T, d_model] -> x + attention -> RMSNorm -> MLP hidden
    [T, d_ffn] -> MLP [T, d_model] -> x + MLP, the block's output [T, d_model]. The input is
    forward's hidden[layer_index] and the output equals its hidden[layer_index + 1]; shapes in
    equal shapes out, which is what lets blocks stack.
    """
    config, params = model.config, model.weights
    ids = check_ids(ids, config)
    layer_index = whole_number(layer_index, "layer_index", 0)
    require(layer_index < config.n_layers, f"layer_index must lie in [0, {config.n_layers}); got {layer_index}")
    layer = params.layers[layer_index]
    x = (forward(model, ids, attention=attention, return_hidden=True).hidden[layer_index] if layer_index
         else params.token_embedding[ids])                                      # [T, d_model]
    cos, sin = rope_angles(len(ids), config.d_head, config.rope_base)
    steps = [("input x", x), ("RMSNorm(x)", rms_norm(x, layer.attn_norm, config.rms_eps))]
    attended, _ = attention_block(x, layer, config, cos, sin, np.tri(len(ids), dtype=bool), attention)
    x = x + attended
    steps += [("attention", attended), ("x + attention (residual add)", x)]
    h = rms_norm(x, layer.ffn_norm, config.rms_eps)
    inner = silu(h @ layer.W_gate) * (h @ layer.W_up)      # the SwiGLU MLP of swiglu_mlp, cut after its first half
    mlp = inner @ layer.W_down
    steps += [("RMSNorm", h), ("MLP hidden", inner), ("MLP", mlp), ("x + MLP (residual add) = output", x + mlp)]
    return steps


def _with_layer(attention, layer_index):
    def attention_of_this_layer(q, k, v, mask):
        return attention(q, k, v, mask, layer_index)
    return attention_of_this_layer


def _check_mask(mask, T):
    array = boolean_mask(mask)
    require(array.shape == (T, T), f"mask must be [T, T] = [{T}, {T}] for {T} tokens; got shape {array.shape}")
    return array


def check_ids(ids, config, allow_empty=False):
    # token ids for this model -> int64 [T]
    return token_ids(ids, config.vocab_size, config.context_length, min_length=0 if allow_empty else 1)


def prompt_ids(model, ids_or_text):
    # a prompt given as text or as token ids -> a list of token ids
    if isinstance(ids_or_text, str):
        return encode(model, ids_or_text)
    return check_ids(ids_or_text, model.config).tolist()


# --------------------------------------------------------------------------- tokenizer

def encode(model, text):
    """Token ids of `text`, as llama.cpp gives them (control tokens like <|im_start|> recognised)."""
    require(isinstance(text, str), f"text must be a str; got {type(text).__name__}")
    return model.tokenizer.encode(text, add_special_tokens=False).ids


def decode(model, ids):
    """The text of `ids` (control tokens included, as in the chat template)."""
    return model.tokenizer.decode(check_ids(ids, model.config, allow_empty=True).tolist(), skip_special_tokens=False)


def tokens(model, ids):
    """Each token as the text it stands for ("Ġcat" -> " cat"); a token holding part of a
    multi-byte character shows as "�"."""
    return [model.tokenizer.decode([i], skip_special_tokens=False)
            for i in check_ids(ids, model.config, allow_empty=True).tolist()]


# --------------------------------------------------------------------------- loading

def _assemble(config, tokenizer, arrays):
    if "output" in arrays:
        raise ValueError("this GGUF has an untied output matrix; qkv.model supports tied embeddings only")
    layers = tuple(LayerWeights(**{name: arrays[name][i] for name in gguf_weights.LAYER_TENSORS})
                   for i in range(config.n_layers))
    weights = Weights(token_embedding=arrays["token_embedding"], layers=layers, final_norm=arrays["final_norm"])
    return Model(config=config, weights=weights, tokenizer=tokenizer)


@functools.lru_cache(maxsize=2)
def _load(gguf_path):
    folder = gguf_weights.cache_folder(gguf_path)
    cached = gguf_weights.read_cache(folder, gguf_path, Config)
    if cached is None:
        config, tokenizer, arrays = gguf_weights.read_gguf(gguf_path, Config)
        try:
            gguf_weights.write_cache(folder, gguf_path, config, tokenizer, arrays)
            cached = gguf_weights.read_cache(folder, gguf_path, Config)
        except OSError:  # read-only cache folder: keep the arrays in memory instead, as unwritable as memory maps
            pass
        if cached is None:
            cached = config, tokenizer, own_weights.frozen(arrays)
    model = _assemble(*cached)
    # only the verified download's arrays, never writeable (model_cache.trust checks), are cached and SmolLM2's own
    return own_weights.adopt(model_cache.trust(model, f"{GGUF_SHA256}/float32 format {gguf_weights.CACHE_FORMAT}")) \
        if is_verified(gguf_path) else model


def load(path=None):
    """The model from `path` (default: the verified download, see `qkv.fetch`).

    The first load dequantizes the GGUF (~5-10 s) and saves float32 arrays next to it (~0.5 GB; `python -m qkv.model`
    does this already); later loads memory-map them and take ~0.2 s. Repeated calls return the same Model. Its arrays
    are read-only: experiment on a copy (`layer.W_q.copy()`; of attn_norm, W_q, W_k or W_v, with your attention=).
    """
    path = Path(model_path() if path is None else path).expanduser().resolve()
    require(path.is_file(), f"no model file at {path}; run `python -m qkv.fetch` (or `make model`)")
    return _load(path)


def main() -> int:
    # `python -m qkv.model`: the verified GGUF (fetched if missing, as `python -m qkv.fetch` does), then its float32
    # cache, so the first load() in a notebook is fast
    if fetch.main() != 0:
        return 1
    load(model_path())
    print("float32 weights cached for qkv.model")
    return 0


# The functions forward runs through, as imported: a notebook that replaces one computes with its own, uncached
# (forward(..., attention=own_attention), or qkv.heads.grouped_query_attention, is cached too).
model_cache.watch(*(importlib.import_module(f"qkv.{name}")
                    for name in ("model", "own_attention", "own_weights", "heads", "attention", "masking", "shapes")))


if __name__ == "__main__":
    sys.exit(importlib.import_module("qkv.model").main())  # the module qkv.model, not this copy named __main__
