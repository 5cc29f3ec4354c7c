"""SmolLM2's weights from the GGUF file `qkv.fetch` downloads, and the float32 copy that makes later loads fast.

`qkv.model.load` calls these: the first load dequantizes the GGUF (~5-10 s) and saves float32 arrays next to it
(~0.5 GB); later loads memory-map them (~0.2 s). The model itself (its Config and the forward pass) is qkv.model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# Bump when the layout of the float32 cache changes, so old caches are rebuilt, not misread.
CACHE_FORMAT = 1

# Our name for each per-layer matrix -> the GGUF tensor name, and whether to transpose.
# GGUF (like PyTorch) stores a linear layer as [d_out, d_in]; we want [d_in, d_out].
LAYER_TENSORS = {
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



# --------------------------------------------------------------------------- reading

def read_gguf(gguf_path, config_class):
    """config_class(...) (qkv.model.Config), the tokenizer and float32 arrays stacked over layers: the GGUF, ~5 s."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(gguf_path))

    def meta(key):
        return reader.fields[key].contents()

    arch = meta("general.architecture")
    n_heads = int(meta(f"{arch}.attention.head_count"))
    d_model = int(meta(f"{arch}.embedding_length"))
    token_strings = meta("tokenizer.ggml.tokens")
    config = config_class(
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
    for ours, (theirs, transpose) in LAYER_TENSORS.items():
        arrays[ours] = np.stack([float32(f"blk.{i}.{theirs}.weight", transpose) for i in range(config.n_layers)])
    if "output.weight" in tensors:  # untied output matrix; SmolLM2 ties it to the embedding
        arrays["output"] = float32("output.weight")
    return config, tokenizer, arrays


def cache_folder(gguf_path):
    return gguf_path.with_name(gguf_path.stem + ".float32")


def _cache_key(gguf_path):
    stat = gguf_path.stat()
    return {"format": CACHE_FORMAT, "gguf": gguf_path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def write_cache(folder, gguf_path, config, tokenizer, arrays):
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


def cache_is_current(folder, gguf_path):
    """True when `folder` holds the float32 cache of this very GGUF file (its stamp, source.json: nothing is read)."""
    try:
        return json.loads((folder / "source.json").read_text()) == _cache_key(gguf_path)
    except (OSError, ValueError):
        return False


def read_cache(folder, gguf_path, config_class):
    """A config_class, the tokenizer and memory-mapped arrays from the float32 cache, or None if stale."""
    try:
        if not cache_is_current(folder, gguf_path):
            return None
        config = config_class(**json.loads((folder / "config.json").read_text()))
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        arrays = {path.stem: np.load(path, mmap_mode="r") for path in folder.glob("*.npy")}
    except (OSError, ValueError, TypeError):
        return None
    return config, tokenizer, arrays
