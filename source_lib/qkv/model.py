"""SmolLM2-135M-Instruct in numpy: a real Llama-architecture language model in one file.

    model = load()                                   # config, float32 weights, tokenizer
    ids = encode(model, "The capital of France is")
    out = forward(model, ids, return_weights=True)   # out.logits [T, vocab], out.weights[layer] [H_q, T, T]
    decode(model, generate(model, ids, 5))           # greedy continuation

Architecture (every number is read from the GGUF metadata, none is hard-coded): token
embedding -> n_layers x [RMSNorm -> grouped-query self-attention with RoPE -> residual ->
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> logits through the (tied) embedding matrix.

Weights come from the Q4_1 GGUF that `qkv.fetch` downloads. Matrices are stored here as
[d_in, d_out] so every projection reads `x @ W`, like the lessons' W_Q [d_model, d_k].
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from qkv import model_cache
from qkv.heads import grouped_query_attention, grouped_query_weights, merge_heads, split_heads
from qkv.masking import causal_mask
from qkv.shapes import require

# Bump when the layout of the float32 cache changes, so old caches are rebuilt, not misread.
CACHE_FORMAT = 1


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


# Our name for each per-layer matrix -> the GGUF tensor name, and whether to transpose.
# GGUF (like PyTorch) stores a linear layer as [d_out, d_in]; we want [d_in, d_out].
_LAYER_TENSORS = {
    "attn_norm": ("attn_norm", False),
    "W_q": ("attn_q", True),
    "W_k": ("attn_k", True),
    "W_v": ("attn_v", True),
    "W_o": ("attn_output", True),
    "ffn_norm": ("ffn_norm", False),
    "W_gate": ("ffn_gate", True),
    "W_up": ("ffn_up", True),
    "W_down": ("ffn_down", True),
}


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


def attention_block(x, layer, config, cos, sin, mask, attention, return_weights):
    # [T, d_model] -> [T, d_model], and [H_q, T, T] weights or None
    h = rms_norm(x, layer.attn_norm, config.rms_eps)
    q = apply_rope(split_heads(h @ layer.W_q, config.n_heads), cos, sin)     # [H_q, T, d_head]
    k = apply_rope(split_heads(h @ layer.W_k, config.n_kv_heads), cos, sin)  # [H_kv, T, d_head]
    v = split_heads(h @ layer.W_v, config.n_kv_heads)                        # [H_kv, T, d_head]
    out = np.asarray(attention(q, k, v, mask))
    if out.shape != q.shape:
        raise ValueError(f"attention(q {q.shape}, k {k.shape}, v {v.shape}, mask {mask.shape}) "
                         f"must return {q.shape}; got {out.shape}")
    weights = np.asarray(grouped_query_weights(q, k, mask), dtype=np.float32) if return_weights else None
    return merge_heads(out.astype(np.float32, copy=False)) @ layer.W_o, weights


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
    where a query may attend a key; out must be [H_q, T, d_head].

    mask: bool [T, T] to use in every layer instead of the causal mask (e.g. a sliding window,
    qkv.sinks.sliding_window_mask). attention_takes_layer=True calls attention(q, k, v, mask, layer)
    with the layer's index 0..n_layers-1, for attention that differs by layer (qkv.sinks.ablate_heads).

    A call that involves nothing but qkv's own model and attention is read back from qkv.model_cache when
    it was computed before on this machine (the same numbers, byte for byte); any other call computes.
    """
    ids = _check_ids(ids, model.config)
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
    attention = grouped_query_attention if attention is None else attention
    T = len(ids)
    cos, sin = rope_angles(T, config.d_head, config.rope_base)
    mask = causal_mask(T) if mask is None else mask
    x = params.token_embedding[ids]                                   # [T, d_model]
    all_weights = [] if return_weights else None
    hidden = [x] if return_hidden else None
    for index, layer in enumerate(params.layers):
        layer_attention = _with_layer(attention, index) if attention_takes_layer else attention
        attended, layer_weights = attention_block(x, layer, config, cos, sin, mask, layer_attention, return_weights)
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
    ids = encode(model, ids_or_text) if isinstance(ids_or_text, str) else [int(i) for i in ids_or_text]
    require(int(n_new) >= 0, f"n_new must be >= 0; got {n_new}")
    new_ids = []
    for _ in range(int(n_new)):
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
    ids = _check_ids(ids, config)
    require(0 <= int(layer_index) < config.n_layers, f"layer_index must lie in [0, {config.n_layers}); got {layer_index}")
    attention = grouped_query_attention if attention is None else attention
    layer = params.layers[int(layer_index)]
    x = (forward(model, ids, attention=attention, return_hidden=True).hidden[int(layer_index)] if layer_index
         else params.token_embedding[ids])                                      # [T, d_model]
    cos, sin = rope_angles(len(ids), config.d_head, config.rope_base)
    steps = [("input x", x), ("RMSNorm(x)", rms_norm(x, layer.attn_norm, config.rms_eps))]
    attended, _ = attention_block(x, layer, config, cos, sin, causal_mask(len(ids)), attention, False)
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
    array = np.asarray(mask)
    require(array.dtype == bool, f"mask must be boolean (True where a query may attend a key); got dtype {array.dtype}")
    require(array.shape == (T, T), f"mask must be [T, T] = [{T}, {T}] for {T} tokens; got shape {array.shape}")
    return array


def _check_ids(ids, config, allow_empty=False):
    array = np.asarray(ids)
    if allow_empty and array.size == 0:
        return array.astype(np.int64).reshape(0)
    require(array.ndim == 1 and array.size > 0, f"ids must be a non-empty 1-D sequence of token ids; got shape {array.shape}")
    require(array.dtype.kind in "iu", f"ids must be integers; got dtype {array.dtype}")
    require(array.min() >= 0 and array.max() < config.vocab_size,
            f"token ids must lie in [0, {config.vocab_size}); got min {array.min()}, max {array.max()}")
    require(array.size <= config.context_length,
            f"{array.size} tokens exceed the model's context length {config.context_length}")
    return array.astype(np.int64)


# --------------------------------------------------------------------------- tokenizer

def encode(model, text):
    """Token ids of `text`, as llama.cpp gives them (control tokens like <|im_start|> recognised)."""
    require(isinstance(text, str), f"text must be a str; got {type(text).__name__}")
    return model.tokenizer.encode(text, add_special_tokens=False).ids


def decode(model, ids):
    """The text of `ids` (control tokens included, as in the chat template)."""
    return model.tokenizer.decode(_check_ids(ids, model.config, allow_empty=True).tolist(), skip_special_tokens=False)


def tokens(model, ids):
    """Each token as the text it stands for ("Ġcat" -> " cat"); a token holding part of a
    multi-byte character shows as "�"."""
    return [model.tokenizer.decode([i], skip_special_tokens=False)
            for i in _check_ids(ids, model.config, allow_empty=True).tolist()]


def build_tokenizer(token_strings, merges, control_token_ids):
    """Byte-level BPE from the GGUF's own vocabulary, split like llama.cpp's "smollm" pre-tokenizer:
    every digit alone, then GPT-2's regex ('s|'t|...| ?\\p{L}+| ?\\p{N}+|...)."""
    vocab = {token: i for i, token in enumerate(token_strings)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(merge.split(" ")) for merge in merges])
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token_strings[i], special=True, normalized=False)
                                  for i in control_token_ids])
    return tokenizer


# --------------------------------------------------------------------------- loading

def _read_gguf(gguf_path):
    """Config, tokenizer and float32 arrays (stacked over layers) straight from the GGUF (~5 s)."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(gguf_path))

    def meta(key):
        return reader.fields[key].contents()

    arch = meta("general.architecture")
    n_heads = int(meta(f"{arch}.attention.head_count"))
    d_model = int(meta(f"{arch}.embedding_length"))
    token_strings = meta("tokenizer.ggml.tokens")
    config = Config(
        n_layers=int(meta(f"{arch}.block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(meta(f"{arch}.attention.head_count_kv")),
        d_head=d_model // n_heads,
        d_ffn=int(meta(f"{arch}.feed_forward_length")),
        vocab_size=len(token_strings),
        context_length=int(meta(f"{arch}.context_length")),
        rope_base=float(meta(f"{arch}.rope.freq_base")),
        rms_eps=float(meta(f"{arch}.attention.layer_norm_rms_epsilon")),
        bos_id=int(meta("tokenizer.ggml.bos_token_id")),
        eos_id=int(meta("tokenizer.ggml.eos_token_id")),
    )
    control = [i for i, kind in enumerate(meta("tokenizer.ggml.token_type")) if kind == gguf.TokenType.CONTROL]
    tokenizer = build_tokenizer(token_strings, meta("tokenizer.ggml.merges"), control)

    tensors = {tensor.name: tensor for tensor in reader.tensors}

    def float32(name, transpose=False):
        array = dequantize(tensors[name].data, tensors[name].tensor_type).astype(np.float32, copy=False)
        return np.ascontiguousarray(array.T) if transpose else array

    arrays = {"token_embedding": float32("token_embd.weight"), "final_norm": float32("output_norm.weight")}
    for ours, (theirs, transpose) in _LAYER_TENSORS.items():
        arrays[ours] = np.stack([float32(f"blk.{i}.{theirs}.weight", transpose) for i in range(config.n_layers)])
    if "output.weight" in tensors:  # untied output matrix; SmolLM2 ties it to the embedding
        arrays["output"] = float32("output.weight")
    return config, tokenizer, arrays


def _cache_folder(gguf_path):
    return gguf_path.with_name(gguf_path.stem + ".float32")


def _cache_key(gguf_path):
    stat = gguf_path.stat()
    return {"format": CACHE_FORMAT, "gguf": gguf_path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _write_cache(folder, gguf_path, config, tokenizer, arrays):
    # Written into a scratch folder and renamed, so a crash never leaves a half cache behind.
    scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".partial-"))
    os.chmod(scratch, 0o755)  # mkdtemp makes it private; the GGUF beside it is not
    try:
        for name, array in arrays.items():
            np.save(scratch / f"{name}.npy", array)
        tokenizer.save(str(scratch / "tokenizer.json"))
        (scratch / "config.json").write_text(json.dumps(config.__dict__))
        (scratch / "source.json").write_text(json.dumps(_cache_key(gguf_path)))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read_cache(folder, gguf_path):
    """Config, tokenizer and memory-mapped arrays from the float32 cache, or None if stale."""
    try:
        if json.loads((folder / "source.json").read_text()) != _cache_key(gguf_path):
            return None
        config = Config(**json.loads((folder / "config.json").read_text()))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        arrays = {path.stem: np.load(path, mmap_mode="r") for path in folder.glob("*.npy")}
    except (OSError, ValueError, TypeError):
        return None
    return config, tokenizer, arrays


def _assemble(config, tokenizer, arrays):
    if "output" in arrays:
        raise ValueError("this GGUF has an untied output matrix; qkv.model supports tied embeddings only")
    layers = tuple(LayerWeights(**{name: arrays[name][i] for name in _LAYER_TENSORS}) for i in range(config.n_layers))
    weights = Weights(token_embedding=arrays["token_embedding"], layers=layers, final_norm=arrays["final_norm"])
    return Model(config=config, weights=weights, tokenizer=tokenizer)


@functools.lru_cache(maxsize=2)
def _load(gguf_path):
    folder = _cache_folder(gguf_path)
    cached = _read_cache(folder, gguf_path)
    if cached is None:
        config, tokenizer, arrays = _read_gguf(gguf_path)
        try:
            _write_cache(folder, gguf_path, config, tokenizer, arrays)
            cached = _read_cache(folder, gguf_path)
        except OSError:  # read-only cache folder: keep the arrays in memory instead
            pass
        if cached is None:
            cached = config, tokenizer, arrays
    from qkv.fetch import GGUF_SHA256, is_verified
    # only the verified download's read-only memory maps (model_cache.trust checks they can never be written)
    return model_cache.trust(_assemble(*cached), f"{GGUF_SHA256}/float32 format {CACHE_FORMAT}") \
        if is_verified(gguf_path) else _assemble(*cached)


def load(path=None):
    """The model from `path` (default: the verified download, see `qkv.fetch`).

    The first load dequantizes the GGUF (~5-10 s) and saves float32 arrays next to it
    (~0.5 GB; `python -m qkv.fetch` does this already); later loads memory-map them and take
    ~0.2 s. Repeated calls in one process return the same Model. The arrays are read-only:
    copy one (`W = layer.W_q.copy()`) to experiment with it.
    """
    if path is None:
        from qkv.fetch import model_path
        path = model_path()
    path = Path(path).expanduser().resolve()
    require(path.is_file(), f"no model file at {path}; run `python -m qkv.fetch` (or `make model`)")
    return _load(path)


# --------------------------------------------------------------------------- generation with a key/value cache

class Step(NamedTuple):
    logits: np.ndarray   # [n, vocab]: one row per token fed in
    cache: tuple         # per layer (k [H_kv, T, d_head], v [H_kv, T, d_head]); T = tokens seen so far, RoPE applied


def empty_kv_cache(model):
    """The cache before the first token: every layer's keys and values, each [H_kv, 0, d_head]."""
    from qkv.cost import empty_cache
    c = model.config
    return tuple(empty_cache(c.n_kv_heads, c.d_head) for _ in range(c.n_layers))


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
    grouped-query attention with the causal mask shifted by the cached length. Defaults: qkv.cost's.
    """
    from qkv import cost
    config, params = model.config, model.weights
    ids = _check_ids(ids, config)
    attention_step = cost.attention_step if attention_step is None else attention_step
    append_to_cache = cost.append_to_cache if append_to_cache is None else append_to_cache
    past, n = _check_kv_cache(cache, config), len(ids)
    require(past + n <= config.context_length,
            f"{past} cached + {n} new tokens exceed the model's context length {config.context_length}")
    cos, sin = rope_angles(past + n, config.d_head, config.rope_base)
    cos, sin = cos[past:], sin[past:]                       # the new tokens sit at positions past .. past + n - 1
    mask = causal_mask(past + n)[past:]                     # [n, past + n]
    x = params.token_embedding[ids]
    grown = []

    def attend(q, k, v, mask):
        k_all, v_all = (np.asarray(a, dtype=np.float32) for a in append_to_cache(*grown.pop(), k, v))
        expected = (config.n_kv_heads, past + n, config.d_head)
        if k_all.shape != expected or v_all.shape != expected:
            raise ValueError(f"append_to_cache must give k and v of shape {expected} here (the {past} cached "
                             f"tokens, then the {n} new); got k {k_all.shape}, v {v_all.shape}")
        grown.append((k_all, v_all))
        if n == 1:
            return attention_step(q, k_all, v_all)
        return grouped_query_attention(q, k_all, v_all, mask)

    for layer, layer_cache in zip(params.layers, cache):
        grown.append(tuple(layer_cache))
        attended, _ = attention_block(x, layer, config, cos, sin, mask, attend, False)
        x = x + attended
        x = x + swiglu_mlp(rms_norm(x, layer.ffn_norm, config.rms_eps), layer.W_gate, layer.W_up, layer.W_down)
    return Step(logits=logits_from_hidden(x, params, config), cache=tuple(grown))


def generate_with_cache(model, ids_or_text, n_new, attention_step=None, append_to_cache=None, return_logits=False):
    """Greedy decoding like `generate`, but the prompt runs once and every new token only computes its own
    keys and values (forward_step). With return_logits=True also the logits each step chose from, [n, vocab]."""
    ids = encode(model, ids_or_text) if isinstance(ids_or_text, str) else [int(i) for i in ids_or_text]
    require(int(n_new) >= 0, f"n_new must be >= 0; got {n_new}")
    new_ids, rows = [], []
    step = forward_step(model, ids, empty_kv_cache(model), attention_step, append_to_cache)
    for _ in range(int(n_new)):
        rows.append(step.logits[-1].copy())   # not a view: the prompt's [T, vocab] logits can go
        next_id = int(np.argmax(step.logits[-1]))
        new_ids.append(next_id)
        if next_id == model.config.eos_id or len(new_ids) == int(n_new):
            break
        step = forward_step(model, [next_id], step.cache, attention_step, append_to_cache)
    if return_logits:
        return new_ids, np.array(rows).reshape(len(rows), model.config.vocab_size)
    return new_ids


# The functions forward runs through, as imported: a notebook that replaces one computes with its own, uncached.
model_cache.watch(*(importlib.import_module(f"qkv.{name}") for name in ("model", "heads", "attention", "masking", "shapes")))
