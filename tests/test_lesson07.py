"""Lesson 07: reference numbers, the KV cache inside SmolLM2, and the hidden tests against mutants and variants."""
import tracemalloc

import numpy as np
import pytest

from lessons import assert_rejected, mutant, mutant_rejection_tests, student
from qkv import attention, checking, cost, heads, kv_cache, model
from qkv.checks import lesson07 as visible
from qkv.masking import causal_mask
from qkv.sinks import sliding_window_mask
from qkv_grading import lesson07 as hidden

LESSON = "07-cost"


@pytest.fixture(scope="module")
def smol():
    return model.load()


# ---------------------------------------------------------------- reference: counting and fitting

def test_seed_counts_and_ratios():
    assert [cost.score_count(T) for T in (8, 16, 32)] == [64, 256, 1024]   # seed 003: "over a thousand" at 32
    assert cost.score_count(1024) == 1_048_576                              # GPT-2: "over a million" per head per layer
    assert cost.score_count(1024, 12, 12) == 144 * 1_048_576
    assert cost.cost_ratio(4096, 16384) == 16                               # seed 002's question
    assert cost.cost_ratio(2048, 8192) == 16                                # seed 002's self-check
    assert cost.cost_ratio(100, 50) == 0.25


def test_fit_exponent_recovers_a_power_law_and_its_noise_free_slope():
    sizes = np.array([128, 256, 512, 1024, 2048])
    assert np.isclose(cost.fit_exponent(sizes, 3e-6 * sizes ** 2.0), 2.0)
    assert np.isclose(cost.fit_exponent(list(sizes), list(7 * sizes ** 1.0)), 1.0)
    with pytest.raises(ValueError, match="positive"):
        cost.fit_exponent([1, 2], [0.0, 1.0])
    with pytest.raises(ValueError, match="same length"):
        cost.fit_exponent([1, 2, 3], [1.0, 2.0])


def test_smollm2_attention_products_overtake_the_rest_at_3072_tokens(smol):
    c = smol.config
    assert cost.crossover_length(c) == 3072
    flops = cost.layer_flops(c, 3072)
    assert flops["attention products"] == flops["projections"] + flops["MLP"]
    # the lesson-05 count is reused: projections + products is heads.attention_flops
    assert (flops["projections"] + flops["attention products"]
            == heads.attention_flops(3072, c.d_model, c.n_heads, c.d_head, c.n_kv_heads))


def test_a_measured_layer_splits_the_counted_products_from_the_uncounted_softmax(smol):
    seconds = cost.layer_seconds(smol, 64)
    parts = [seconds[p] for p in ("Q K^T", "mask and softmax", "weights @ V")]
    assert all(p > 0 for p in parts) and sum(parts) < seconds["attention block"]


def test_flop_counts_of_the_recurrence_and_the_cache_size_of_this_cpu(tmp_path):
    assert cost.rnn_flops(5, 3, 4) == 2 * 5 * (3 * 4 + 4 * 4)
    for index, size in (("index0", "32K"), ("index2", "512K"), ("index3", "32768K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert cost.largest_cache_bytes(str(tmp_path)) == 32 * 2**20
    assert cost.largest_cache_bytes(str(tmp_path / "absent")) is None


def test_a_probe_that_would_not_fit_is_refused_before_anything_is_allocated():
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"T = 100000 would need about .* GiB.*choose T <= \d+"):
            cost.measure_attention(cost.naive_attention, 100_000)
        assert tracemalloc.get_traced_memory()[1] < 2**20
    finally:
        tracemalloc.stop()
    cost.check_probe_fits(8192, limit=4 * 2**30)          # the lesson's largest size fits the default limit
    with pytest.raises(ValueError, match="whole number"):
        cost.check_probe_fits(0)


def test_measured_peak_memory_is_that_of_the_tt_arrays():
    seconds, peak = cost.measure_attention(cost.naive_attention, 512)
    assert seconds > 0 and 2 * 512 * 512 * 8 <= peak <= 6 * 512 * 512 * 8
    _, chunked_peak = cost.measure_attention(cost.chunked_attention, 512, chunk=32)
    assert chunked_peak < peak / 4


def test_call_with_peak_memory_counts_what_the_call_allocates():
    def allocate(n):
        return np.ones((n, n)).sum()

    result, peak = checking.call_with_peak_memory(allocate, 512)
    assert result == 512 * 512 and peak >= 512 * 512 * 8


def test_rnn_and_path_lengths():
    rng = np.random.default_rng(0)
    X, W_x, W_h = rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4, 4))
    h, expected = np.zeros(4), []
    for x in X:
        h = np.tanh(h @ W_h + x @ W_x)
        expected.append(h)
    assert np.allclose(cost.rnn_forward(X, W_x, W_h), expected)
    assert cost.path_length(499, 0, "recurrent") == 499 and cost.path_length(499, 0, "attention") == 1


# ---------------------------------------------------------------- reference: cache and online softmax

def test_attention_step_is_the_last_row_of_causal_gqa():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(6, 5, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 4))
    full = heads.grouped_query_attention(q, k, v, causal_mask(5))
    assert np.allclose(cost.attention_step(q[:, -1:], k, v), full[:, -1:])


def test_append_to_cache_grows_in_time_order():
    k, v = cost.empty_cache(2, 3)
    for t in range(3):
        k, v = cost.append_to_cache(k, v, np.full((2, 1, 3), t, np.float32), np.full((2, 1, 3), -t, np.float32))
    assert k.shape == v.shape == (2, 3, 3) and k.dtype == np.float32
    assert list(k[0, :, 0]) == [0, 1, 2] and list(v[1, :, 0]) == [0, -1, -2]


def test_bad_input_gets_one_sentence_each():
    k, v = np.zeros((3, 4, 64)), np.zeros((3, 4, 64))
    with pytest.raises(ValueError, match="another layer or another model"):
        cost.append_to_cache(k, v, np.zeros((3, 1, 32)), np.zeros((3, 1, 32)))
    with pytest.raises(ValueError, match="cached keys have width 64"):
        cost.attention_step(np.zeros((9, 1, 32)), k, v)
    with pytest.raises(ValueError, match=r"one new query per head"):
        cost.attention_step(np.zeros((9, 2, 64)), k, v)
    with pytest.raises(ValueError, match="chunk must be a positive whole number; got 0"):
        cost.chunked_attention(np.zeros((2, 4)), np.zeros((3, 4)), np.zeros((3, 2)), 0)
    with pytest.raises(ValueError, match="chunk must be"):
        cost.causal_chunked_attention(np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((3, 2)), -2)
    with pytest.raises(ValueError, match="must share d_k"):
        cost.chunked_attention(np.zeros((2, 4)), np.zeros((3, 5)), np.zeros((3, 2)), 2)
    with pytest.raises(ValueError, match="same number"):
        cost.chunked_attention(np.zeros((2, 4)), np.zeros((3, 4)), np.zeros((4, 2)), 2)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 11, 50])
def test_chunked_attention_equals_naive_attention(chunk):
    rng = np.random.default_rng(chunk)
    Q, K, V = rng.normal(size=(5, 4)), rng.normal(size=(11, 4)) * 5, rng.normal(size=(11, 3))
    assert np.allclose(cost.chunked_attention(Q, K, V, chunk), attention.attention(Q, K, V), rtol=0, atol=1e-12)
    out = cost.chunked_attention(Q.astype(np.float32), K.astype(np.float32), V.astype(np.float32), chunk)
    assert out.dtype == np.float32


@pytest.mark.parametrize("T, chunk", [(1, 1), (10, 1), (10, 3), (10, 5), (10, 10), (10, 16)])
def test_causal_chunked_attention_skips_the_upper_blocks(T, chunk):
    rng = np.random.default_rng(T * chunk)
    Q, K, V = rng.normal(size=(T, 4)), rng.normal(size=(T, 4)) * 5, rng.normal(size=(T, 2))
    out, blocks = cost.causal_chunked_attention(Q, K, V, chunk)
    assert np.allclose(out, attention.attention(Q, K, V, causal_mask(T)), rtol=0, atol=1e-12)
    assert blocks == cost.causal_block_counts(T, chunk)[0]
    assert cost.causal_block_counts(8192, 256) == (528, 1024)


def test_an_evicting_cache_is_lesson_06s_window_with_sinks():
    rng = np.random.default_rng(4)
    T, window, n_sink = 40, 8, 3
    q, k, v = (rng.normal(size=(1, T, 4)) for _ in range(3))
    mask = sliding_window_mask(T, window, n_sink)
    k_cache, v_cache = cost.empty_cache(1, 4, dtype=np.float64)
    for t in range(T):
        k_cache, v_cache = cost.evict(*cost.append_to_cache(k_cache, v_cache, k[:, t:t + 1], v[:, t:t + 1]),
                                      window, n_sink)
        assert k_cache.shape[1] == min(t + 1, window + n_sink)
        expected = attention.attention(q[0, t:t + 1], k[0], v[0], mask[t:t + 1])
        assert np.allclose(cost.attention_step(q[:, t:t + 1], k_cache, v_cache)[0], expected)


# ---------------------------------------------------------------- the KV cache inside SmolLM2

def test_generation_with_the_cache_gives_exactly_the_tokens_and_logits_without_it(smol):
    prompt = "The capital of France is"
    ids = model.encode(smol, prompt)
    without = model.generate(smol, ids, 8)
    with_cache, logits = kv_cache.generate_with_cache(smol, ids, 8, return_logits=True)
    assert with_cache == without
    reference = model.forward(smol, ids + without[:-1]).logits[len(ids) - 1:]   # row i: the logits of step i
    assert np.max(np.abs(logits - reference)) < 1e-4


def test_forward_step_on_a_longer_prompt_matches_forward(smol):
    ids = [int(i) for i in np.random.default_rng(0).integers(0, smol.config.vocab_size, size=40)]
    first = kv_cache.forward_step(smol, ids[:30], kv_cache.empty_kv_cache(smol))
    second = kv_cache.forward_step(smol, ids[30:], first.cache)          # several new tokens at once, offset mask
    third = kv_cache.forward_step(smol, [5], second.cache)
    full = model.forward(smol, ids + [5]).logits
    assert np.max(np.abs(np.concatenate([first.logits, second.logits, third.logits]) - full)) < 1e-4
    assert third.cache[0][0].shape == (smol.config.n_kv_heads, 41, smol.config.d_head)


def test_forward_step_refuses_a_wrong_cache(smol):
    ids = model.encode(smol, "Hello")
    step = kv_cache.forward_step(smol, ids, kv_cache.empty_kv_cache(smol))
    with pytest.raises(ValueError, match="one layer's cache"):
        kv_cache.forward_step(smol, [5], step.cache[0])
    with pytest.raises(ValueError, match="another model"):
        kv_cache.forward_step(smol, [5], tuple((k[:, :, :32], v[:, :, :32]) for k, v in step.cache))
    swapped = list(step.cache)
    swapped[3] = cost.append_to_cache(*swapped[3], swapped[3][0][:, :1], swapped[3][1][:, :1])
    with pytest.raises(ValueError, match="different numbers of tokens"):
        kv_cache.forward_step(smol, [5], tuple(swapped))
    forward = model.forward(smol, ids)                  # the old entry point is unchanged
    assert forward.logits.shape == (len(ids), smol.config.vocab_size)


# ---------------------------------------------------------------- mutants the hidden tests must reject

COST_RATIO_MUTANTS = {
    "ratio of lengths, not squared": "def cost_ratio(n_old, n_new):\n    return n_new / n_old\n",
    "difference of squares": "def cost_ratio(n_old, n_new):\n    return n_new ** 2 - n_old ** 2\n",
    "upside down": "def cost_ratio(n_old, n_new):\n    return (n_old / n_new) ** 2\n",
    "hard-coded 16": "def cost_ratio(n_old, n_new):\n    return 16.0\n",
    "blank stub": "def cost_ratio(n_old, n_new):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": ("from qkv.cost import cost_ratio as _r\ndef cost_ratio(n_old, n_new):\n"
                            "    return _r(n_old, n_new)\n"),
}

FIT_MUTANTS = {
    "fits the values, not their logs": """
def fit_exponent(sizes, values):
    return float(np.polyfit(sizes, values, 1)[0])
""",
    "axes swapped": """
def fit_exponent(sizes, values):
    return float(np.polyfit(np.log(values), np.log(sizes), 1)[0])
""",
    "returns the intercept": """
def fit_exponent(sizes, values):
    return float(np.polyfit(np.log(sizes), np.log(values), 1)[1])
""",
    "first and last point only": """
def fit_exponent(sizes, values):
    return float(np.log(values[-1] / values[0]) / np.log(sizes[-1] / sizes[0]))
""",
    "log of the values only": """
def fit_exponent(sizes, values):
    return float(np.polyfit(np.asarray(sizes, float), np.log(values), 1)[0])
""",
    "blank stub": "def fit_exponent(sizes, values):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": ("import qkv.cost\ndef fit_exponent(sizes, values):\n"
                            "    return qkv.cost.fit_exponent(sizes, values)\n"),
}

STEP_MUTANTS = {
    "forgets the scale": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    k, v = np.repeat(k_cache, g, axis=0), np.repeat(v_cache, g, axis=0)
    return softmax(q_new @ k.transpose(0, 2, 1)) @ v
""",
    "attends to the cache without the new token": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    k, v = np.repeat(k_cache[:, :-1], g, axis=0), np.repeat(v_cache[:, :-1], g, axis=0)
    return softmax(q_new @ k.transpose(0, 2, 1) / np.sqrt(q_new.shape[-1])) @ v
""",
    "repeats kv heads with tile": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    k, v = np.tile(k_cache, (g, 1, 1)), np.tile(v_cache, (g, 1, 1))
    return softmax(q_new @ k.transpose(0, 2, 1) / np.sqrt(q_new.shape[-1])) @ v
""",
    "attends only to its own key": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    return np.repeat(v_cache[:, -1:], g, axis=0)
""",
    "softmax over the heads axis": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    k, v = np.repeat(k_cache, g, axis=0), np.repeat(v_cache, g, axis=0)
    s = q_new @ k.transpose(0, 2, 1) / np.sqrt(q_new.shape[-1])
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return (e / e.sum(axis=0, keepdims=True)) @ v
""",
    "softmax over the single query's axis": """
def attention_step(q_new, k_cache, v_cache):
    g = q_new.shape[0] // k_cache.shape[0]
    k, v = np.repeat(k_cache, g, axis=0), np.repeat(v_cache, g, axis=0)
    return softmax(q_new @ k.transpose(0, 2, 1) / np.sqrt(q_new.shape[-1]), axis=1) @ v
""",
    "blank stub": ("def attention_step(q_new, k_cache, v_cache):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "calls the reference": """
from qkv import cost as _c
def attention_step(q_new, k_cache, v_cache):
    return _c.attention_step(q_new, k_cache, v_cache)
""",
    "calls lesson 05's reference": """
from qkv.heads import grouped_query_attention as _gqa
def attention_step(q_new, k_cache, v_cache):
    return _gqa(q_new, k_cache, v_cache)
""",
}

APPEND_MUTANTS = {
    "overwrites instead of appending": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return k_new, v_new
""",
    "prepends the new entries": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return np.concatenate([k_new, k_cache], axis=1), np.concatenate([v_new, v_cache], axis=1)
""",
    "returns k and v swapped": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return np.concatenate([v_cache, v_new], axis=1), np.concatenate([k_cache, k_new], axis=1)
""",
    "appends along the head axis": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return np.concatenate([k_cache, k_new], axis=0), np.concatenate([v_cache, v_new], axis=0)
""",
    "blank stub": ("def append_to_cache(k_cache, v_cache, k_new, v_new):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "calls the reference": """
import qkv.cost
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return qkv.cost.append_to_cache(k_cache, v_cache, k_new, v_new)
""",
}


def _online_source(update_l="l * rescale + p.sum(axis=1, keepdims=True)",
                   update_acc="acc * rescale + p @ V[s:s + chunk]", rescale="np.exp(m - m_new)",
                   starts="range(0, K.shape[0], chunk)", scale="/ np.sqrt(Q.shape[1])"):
    return f"""
def chunked_attention(Q, K, V, chunk):
    m = np.full((Q.shape[0], 1), -np.inf)
    l = np.zeros((Q.shape[0], 1))
    acc = np.zeros((Q.shape[0], V.shape[1]))
    for s in {starts}:
        scores = Q @ K[s:s + chunk].T {scale}
        m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
        rescale = {rescale}
        p = np.exp(scores - m_new)
        l = {update_l}
        acc = {update_acc}
        m = m_new
    return acc / l
"""


CHUNKED_MUTANTS = {
    "running sum not rescaled": _online_source(update_l="l + p.sum(axis=1, keepdims=True)"),
    "running output not rescaled": _online_source(update_acc="acc + p @ V[s:s + chunk]"),
    "nothing rescaled": _online_source(update_l="l + p.sum(axis=1, keepdims=True)",
                                       update_acc="acc + p @ V[s:s + chunk]"),
    "rescales with exp(new - old)": _online_source(rescale="np.exp(m_new - m)"),
    "rescales with exp(new - old), max started at the first chunk": """
def chunked_attention(Q, K, V, chunk):
    scores = Q @ K[:chunk].T / np.sqrt(Q.shape[1])
    m = scores.max(axis=1, keepdims=True)
    p = np.exp(scores - m)
    l, acc = p.sum(axis=1, keepdims=True), p @ V[:chunk]
    for s in range(chunk, K.shape[0], chunk):
        scores = Q @ K[s:s + chunk].T / np.sqrt(Q.shape[1])
        m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
        p = np.exp(scores - m_new)
        l = l * np.exp(m_new - m) + p.sum(axis=1, keepdims=True)
        acc = acc * np.exp(m_new - m) + p @ V[s:s + chunk]
        m = m_new
    return acc / l
""",
    "last partial chunk dropped": _online_source(starts="range(0, K.shape[0] - chunk + 1, chunk)"),
    "last partial chunk dropped (floor division)":
        _online_source(starts="(i * chunk for i in range(K.shape[0] // chunk))"),
    "forgets the scale": _online_source(scale=""),
    "materialises the whole score matrix": """
def chunked_attention(Q, K, V, chunk):
    scores = Q @ K.T / np.sqrt(Q.shape[1])
    m = scores.max(axis=1, keepdims=True)
    out = np.zeros((Q.shape[0], V.shape[1]))
    total = np.zeros((Q.shape[0], 1))
    for s in range(0, K.shape[0], chunk):
        p = np.exp(scores[:, s:s + chunk] - m)
        total += p.sum(axis=1, keepdims=True)
        out += p @ V[s:s + chunk]
    return out / total
""",
    "plain exp, no max at all": """
def chunked_attention(Q, K, V, chunk):
    l = np.zeros((Q.shape[0], 1))
    acc = np.zeros((Q.shape[0], V.shape[1]))
    for s in range(0, K.shape[0], chunk):
        p = np.exp(Q @ K[s:s + chunk].T / np.sqrt(Q.shape[1]))
        l += p.sum(axis=1, keepdims=True)
        acc += p @ V[s:s + chunk]
    return acc / l
""",
    "chunks the queries, full softmax over every key": """
def chunked_attention(Q, K, V, chunk):
    out = np.zeros((Q.shape[0], V.shape[1]))
    for s in range(0, Q.shape[0], chunk):
        scores = Q[s:s + chunk] @ K.T / np.sqrt(Q.shape[1])
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[s:s + chunk] = (e / e.sum(axis=1, keepdims=True)) @ V
    return out
""",
    "blank stub": "def chunked_attention(Q, K, V, chunk):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls lesson 02's attention": """
from qkv.attention import attention as _attention
def chunked_attention(Q, K, V, chunk):
    return _attention(Q, K, V)
""",
    "calls the reference": """
from qkv.cost import chunked_attention as _chunked
def chunked_attention(Q, K, V, chunk):
    return _chunked(Q, K, V, chunk)
""",
}


def _causal_source(key_starts="range(0, q_end, chunk)", mask="True", count="blocks += 1",
                   query_starts="range(0, T, chunk)"):
    return f"""
def causal_chunked_attention(Q, K, V, chunk):
    T = Q.shape[0]
    out = np.zeros((T, V.shape[1]))
    blocks = 0
    for q_start in {query_starts}:
        q_end = min(q_start + chunk, T)
        m = np.full((q_end - q_start, 1), -np.inf)
        l = np.zeros((q_end - q_start, 1))
        acc = np.zeros((q_end - q_start, V.shape[1]))
        for k_start in {key_starts}:
            k_end = min(k_start + chunk, T)
            scores = Q[q_start:q_end] @ K[k_start:k_end].T / np.sqrt(Q.shape[1])
            if {mask}:
                future = np.arange(q_start, q_end)[:, None] < np.arange(k_start, k_end)[None, :]
                scores = np.where(future, -np.inf, scores)
            m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
            p = np.exp(scores - m_new)
            l = l * np.exp(m - m_new) + p.sum(axis=1, keepdims=True)
            acc = acc * np.exp(m - m_new) + p @ V[k_start:k_end]
            m = m_new
            {count}
        out[q_start:q_end] = acc / l
    return out, blocks
"""


CAUSAL_MUTANTS = {
    "skips the diagonal chunk": _causal_source(key_starts="range(0, q_start, chunk)"),
    "skips the diagonal chunk, guarded against 0 / 0": _causal_source(key_starts="range(0, q_start, chunk)").replace(
        "out[q_start:q_end] = acc / l", "out[q_start:q_end] = np.divide(acc, l, out=np.zeros_like(acc), where=l > 0)"),
    "masks every block instead of skipping": _causal_source(key_starts="range(0, T, chunk)"),
    "no mask on the diagonal block": _causal_source(mask="False"),
    "last partial query chunk dropped": _causal_source(query_starts="range(0, T - chunk + 1, chunk)"),
    "counts nothing": _causal_source(count="pass"),
    "plain exp, no max at all": """
def causal_chunked_attention(Q, K, V, chunk):
    T = Q.shape[0]
    out = np.zeros((T, V.shape[1]))
    blocks = 0
    for q_start in range(0, T, chunk):
        q_end = min(q_start + chunk, T)
        l = np.zeros((q_end - q_start, 1))
        acc = np.zeros((q_end - q_start, V.shape[1]))
        for k_start in range(0, q_end, chunk):
            k_end = min(k_start + chunk, T)
            scores = Q[q_start:q_end] @ K[k_start:k_end].T / np.sqrt(Q.shape[1])
            future = np.arange(q_start, q_end)[:, None] < np.arange(k_start, k_end)[None, :]
            p = np.where(future, 0.0, np.exp(scores))
            l += p.sum(axis=1, keepdims=True)
            acc += p @ V[k_start:k_end]
            blocks += 1
        out[q_start:q_end] = acc / l
    return out, blocks
""",
    "full masked [T, T] attention, count b(b+1)/2": """
def causal_chunked_attention(Q, K, V, chunk):
    T = Q.shape[0]
    s = Q @ K.T / np.sqrt(Q.shape[1])
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    b = -(-T // chunk)
    return (e / e.sum(axis=1, keepdims=True)) @ V, b * (b + 1) // 2
""",
    "chunks only the queries, full softmax over the past": """
def causal_chunked_attention(Q, K, V, chunk):
    T = Q.shape[0]
    out = np.zeros((T, V.shape[1]))
    blocks = 0
    for q_start in range(0, T, chunk):
        q_end = min(q_start + chunk, T)
        scores = Q[q_start:q_end] @ K[:q_end].T / np.sqrt(Q.shape[1])
        future = np.arange(q_start, q_end)[:, None] < np.arange(q_end)[None, :]
        scores = np.where(future, -np.inf, scores)
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[q_start:q_end] = (e / e.sum(axis=1, keepdims=True)) @ V[:q_end]
        blocks += -(-q_end // chunk)
    return out, blocks
""",
    "blank stub": ("def causal_chunked_attention(Q, K, V, chunk):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "calls the reference": """
import qkv.cost
def causal_chunked_attention(Q, K, V, chunk):
    return qkv.cost.causal_chunked_attention(Q, K, V, chunk)
""",
    "masked attention and a made-up count": """
from qkv.masking import causal_mask
def causal_chunked_attention(Q, K, V, chunk):
    s = Q @ K.T / np.sqrt(Q.shape[1])
    s = np.where(causal_mask(len(Q)), s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    b = -(-len(Q) // chunk)
    return (e / e.sum(axis=1, keepdims=True)) @ V, b * (b + 1) // 2
""",
}

test_hidden_tests_reject_mutant, test_visible_checks_reject_mutant = mutant_rejection_tests(
    LESSON, hidden, visible, {"cost_ratio": COST_RATIO_MUTANTS, "fit_exponent": FIT_MUTANTS,
                              "attention_step": STEP_MUTANTS, "append_to_cache": APPEND_MUTANTS,
                              "chunked_attention": CHUNKED_MUTANTS, "causal_chunked_attention": CAUSAL_MUTANTS})


# issue 20: mistakes that earned credit without the idea, or got only "got ..., expected ...": each is named by the
# visible check (so the student learns of it before grading) and by the hidden test
NAMED_MISTAKES = [
    ("attention_step", STEP_MUTANTS, "softmax over the heads axis", "wrong axis"),
    ("attention_step", STEP_MUTANTS, "softmax over the single query's axis", "wrong axis"),
    ("chunked_attention", CHUNKED_MUTANTS, "plain exp, no max at all", "above 709"),
    ("chunked_attention", CHUNKED_MUTANTS, "chunks the queries, full softmax over every key", "chunks of the queries"),
    ("causal_chunked_attention", CAUSAL_MUTANTS, "plain exp, no max at all", "above 709"),
    ("causal_chunked_attention", CAUSAL_MUTANTS, "full masked [T, T] attention, count b(b+1)/2", "strip of scores"),
    ("causal_chunked_attention", CAUSAL_MUTANTS, "chunks only the queries, full softmax over the past",
     "strip of scores"),
]


@pytest.mark.parametrize("grade, mutants, name, words", NAMED_MISTAKES,
                         ids=[f"{g}:{n}" for g, _, n, _ in NAMED_MISTAKES])
@pytest.mark.parametrize("layer", ["visible", "hidden"])
def test_a_mistake_without_the_idea_gets_its_own_hint(layer, grade, mutants, name, words):
    check = getattr(visible if layer == "visible" else hidden, grade)
    assert words in assert_rejected(check, mutant(LESSON, grade, mutants[name]))


def test_the_memory_probes_leave_room_for_every_correct_variant():
    # the bounds are half of the [n_q, n_k] matrix and 3/4 of a [chunk, T] strip; a right answer stays far below
    for grade, probe, bound in (("chunked_attention", visible.memory_of_chunked, 32 * 16384 * 8 / 2),
                                ("causal_chunked_attention", visible.memory_of_causal, 0.75 * 32 * 2048 * 8)):
        for source in [None, *VARIANTS[grade].values()]:
            fn = student(LESSON)[grade] if source is None else mutant(LESSON, grade, source)
            assert probe(fn) < bound / 1.5


def test_hints_name_the_likely_mistake():
    def hint(check, grade, source):
        return assert_rejected(check, mutant(LESSON, grade, source))

    assert "square" in hint(hidden.cost_ratio, "cost_ratio", COST_RATIO_MUTANTS["ratio of lengths, not squared"])
    assert "swapped" in hint(hidden.fit_exponent, "fit_exponent", FIT_MUTANTS["axes swapped"])
    assert "log-log" in hint(hidden.fit_exponent, "fit_exponent", FIT_MUTANTS["fits the values, not their logs"])
    assert "np.tile" in hint(hidden.attention_step, "attention_step", STEP_MUTANTS["repeats kv heads with tile"])
    assert "see itself" in hint(hidden.attention_step, "attention_step",
                                STEP_MUTANTS["attends to the cache without the new token"])
    assert "returned shape (3, 1, 4); expected (3, " in hint(hidden.append_to_cache, "append_to_cache",
                                                            APPEND_MUTANTS["overwrites instead of appending"])
    assert "running sum is not rescaled" in hint(hidden.chunked_attention, "chunked_attention",
                                                 CHUNKED_MUTANTS["running sum not rescaled"])
    assert "exp(old_max - new_max)" in hint(hidden.chunked_attention, "chunked_attention",
                                            CHUNKED_MUTANTS["rescales with exp(new - old)"])
    assert "last, shorter chunk" in hint(hidden.chunked_attention, "chunked_attention",
                                         CHUNKED_MUTANTS["last partial chunk dropped"])
    assert "whole [32, 16384] float64 score matrix" in hint(visible.chunked_attention, "chunked_attention",
                                                            CHUNKED_MUTANTS["materialises the whole score matrix"])
    assert "diagonal" in hint(hidden.causal_chunked_attention, "causal_chunked_attention",
                              CAUSAL_MUTANTS["skips the diagonal chunk"])
    assert "skip it" in hint(hidden.causal_chunked_attention, "causal_chunked_attention",
                             CAUSAL_MUTANTS["masks every block instead of skipping"])


# ---------------------------------------------------------------- the student's cache inside SmolLM2

GENERATION_MUTANTS = [("attention_step", STEP_MUTANTS["attends to the cache without the new token"]),
                      ("attention_step", STEP_MUTANTS["repeats kv heads with tile"]),
                      ("append_to_cache", APPEND_MUTANTS["overwrites instead of appending"]),
                      # (prepending is not among them: RoPE is applied before caching, and attention does not
                      # depend on the order of its keys, so only the graded append test can catch it)
                      ("append_to_cache", APPEND_MUTANTS["returns k and v swapped"]),
                      ("append_to_cache", APPEND_MUTANTS["blank stub"])]


@pytest.mark.parametrize("grade, source", GENERATION_MUTANTS,
                         ids=[f"{g}:{i}" for i, (g, _) in enumerate(GENERATION_MUTANTS)])
def test_generation_check_rejects_mutant(grade, source):
    ns = student(LESSON, {grade: source})
    assert_rejected(hidden.generation_with_cache, ns["attention_step"], ns["append_to_cache"])


def test_hidden_generation_prompts_differ_from_the_visible_one_and_pass():
    ns = student(LESSON)
    assert visible.VISIBLE_PROMPT not in hidden.HIDDEN_PROMPTS
    for prompt in hidden.HIDDEN_PROMPTS:
        visible.generation_matches(ns["attention_step"], ns["append_to_cache"], prompt=prompt)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "cost_ratio": {
        "squares first": "def cost_ratio(n_old, n_new):\n    return n_new ** 2 / n_old ** 2\n",
        "np.square": "def cost_ratio(n_old, n_new):\n    return np.square(n_new / n_old)\n",
    },
    "fit_exponent": {
        "log10": "def fit_exponent(sizes, values):\n    return np.polyfit(np.log10(sizes), np.log10(values), 1)[0]\n",
        "lstsq": """
def fit_exponent(sizes, values):
    x, y = np.log2(np.asarray(sizes, float)), np.log2(np.asarray(values, float))
    A = np.stack([x, np.ones_like(x)], axis=1)
    return float(np.linalg.lstsq(A, y, rcond=None)[0][0])
""",
        "covariance over variance": """
def fit_exponent(sizes, values):
    x, y = np.log(np.array(sizes, dtype=float)), np.log(np.array(values, dtype=float))
    return ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
""",
    },
    "attention_step": {
        "loop over query heads": """
def attention_step(q_new, k_cache, v_cache):
    group = q_new.shape[0] // k_cache.shape[0]
    out = []
    for h in range(q_new.shape[0]):
        w = softmax(q_new[h] @ k_cache[h // group].T / np.sqrt(q_new.shape[-1]))
        out.append(w @ v_cache[h // group])
    return np.stack(out)
""",
        "einsum over groups": """
def attention_step(q_new, k_cache, v_cache):
    H_q, _, d = q_new.shape
    H_kv = k_cache.shape[0]
    g = q_new.reshape(H_kv, H_q // H_kv, d)
    w = softmax(np.einsum('cgd,ctd->cgt', g, k_cache) / np.sqrt(d))
    return np.einsum('cgt,ctd->cgd', w, v_cache).reshape(H_q, 1, d)
""",
        "float32 with its own softmax": """
def attention_step(q_new, k_cache, v_cache):
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (q_new, k_cache, v_cache))
    g = q.shape[0] // k.shape[0]
    s = q @ np.repeat(k, g, axis=0).transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ np.repeat(v, g, axis=0)
""",
    },
    "append_to_cache": {
        "np.append": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    return np.append(k_cache, k_new, axis=1), np.append(v_cache, v_new, axis=1)
""",
        "hstack": ("def append_to_cache(k_cache, v_cache, k_new, v_new):\n"
                   "    return np.hstack([k_cache, k_new]), np.hstack([v_cache, v_new])\n"),
        "preallocate and copy": """
def append_to_cache(k_cache, v_cache, k_new, v_new):
    H, T, d = k_cache.shape
    n = k_new.shape[1]
    k = np.empty((H, T + n, d), dtype=k_cache.dtype); v = np.empty((H, T + n, v_cache.shape[2]), dtype=v_cache.dtype)
    k[:, :T], k[:, T:], v[:, :T], v[:, T:] = k_cache, k_new, v_cache, v_new
    return k, v
""",
    },
    "chunked_attention": {
        "float32 in and out": """
def chunked_attention(Q, K, V, chunk):
    # works in the inputs' own precision: float32 in, float32 out (float64 stays float64, as the contract asks)
    dtype = np.result_type(Q, K, V)
    Q, K, V = (np.asarray(a, dtype=dtype) for a in (Q, K, V))
    m = np.full((len(Q), 1), -np.inf, dtype=dtype)
    l = np.zeros((len(Q), 1), dtype=dtype)
    acc = np.zeros((len(Q), V.shape[1]), dtype=dtype)
    for s in range(0, len(K), chunk):
        scores = Q @ K[s:s + chunk].T / dtype.type(np.sqrt(Q.shape[1]))
        m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
        p = np.exp(scores - m_new)
        l = l * np.exp(m - m_new) + p.sum(axis=1, keepdims=True)
        acc = acc * np.exp(m - m_new) + p @ V[s:s + chunk]
        m = m_new
    return acc / l
""",
        "np.logaddexp accumulators": """
def chunked_attention(Q, K, V, chunk):
    log_sum = np.full((len(Q), 1), -np.inf)        # log of the running sum of exp(scores)
    out = np.zeros((len(Q), V.shape[1]))            # the running normalised output
    for s in range(0, len(K), chunk):
        scores = Q @ K[s:s + chunk].T / np.sqrt(Q.shape[1])
        chunk_log_sum = np.logaddexp.reduce(scores, axis=1, keepdims=True)
        new_log_sum = np.logaddexp(log_sum, chunk_log_sum)
        out = out * np.exp(log_sum - new_log_sum) + np.exp(scores - new_log_sum) @ V[s:s + chunk]
        log_sum = new_log_sum
    return out
""",
        "loop over the chunks of a list": """
def chunked_attention(Q, K, V, chunk):
    pieces = [(K[s:s + chunk], V[s:s + chunk]) for s in range(0, len(K), chunk)]
    m, l, acc = None, None, None
    for K_c, V_c in pieces:
        scores = np.einsum('qd,kd->qk', Q, K_c) / np.sqrt(Q.shape[1])
        if m is None:
            m = scores.max(axis=1, keepdims=True)
            p = np.exp(scores - m)
            l, acc = p.sum(axis=1, keepdims=True), p @ V_c
            continue
        m_new = np.maximum(m, scores.max(axis=1, keepdims=True))
        p = np.exp(scores - m_new)
        l = l * np.exp(m - m_new) + p.sum(axis=1, keepdims=True)
        acc = acc * np.exp(m - m_new) + p @ V_c
        m = m_new
    return acc / l
""",
        "one query row at a time": """
def chunked_attention(Q, K, V, chunk):
    out = np.zeros((len(Q), V.shape[1]))
    for i, q in enumerate(Q):
        m, l, acc = -np.inf, 0.0, np.zeros(V.shape[1])
        for s in range(0, len(K), chunk):
            scores = K[s:s + chunk] @ q / np.sqrt(len(q))
            m_new = max(m, scores.max())
            p = np.exp(scores - m_new)
            l = l * np.exp(m - m_new) + p.sum()
            acc = acc * np.exp(m - m_new) + p @ V[s:s + chunk]
            m = m_new
        out[i] = acc / l
    return out
""",
    },
    "causal_chunked_attention": {
        "mask only the diagonal block, float32": _causal_source(mask="k_start == q_start").replace(
            "    T = Q.shape[0]\n",
            "    Q, K, V = (np.asarray(a, dtype=np.result_type(Q, K, V, np.float32)) for a in (Q, K, V))\n"
            "    T = Q.shape[0]\n"),  # the inputs' own precision, float32 at least (float64 stays float64)
        "np.logaddexp accumulators": """
def causal_chunked_attention(Q, K, V, chunk):
    T = len(Q)
    out = np.zeros((T, V.shape[1]))
    count = 0
    for i in range(0, T, chunk):
        qs = slice(i, min(i + chunk, T))
        log_sum = np.full((qs.stop - i, 1), -np.inf)
        o = np.zeros((qs.stop - i, V.shape[1]))
        for j in range(0, i + 1, chunk):
            ks = slice(j, min(j + chunk, T))
            scores = Q[qs] @ K[ks].T / np.sqrt(Q.shape[1])
            scores[np.arange(qs.start, qs.stop)[:, None] < np.arange(ks.start, ks.stop)[None, :]] = -np.inf
            new_log_sum = np.logaddexp(log_sum, np.logaddexp.reduce(scores, axis=1, keepdims=True))
            o = o * np.exp(log_sum - new_log_sum) + np.exp(scores - new_log_sum) @ V[ks]
            log_sum = new_log_sum
            count += 1
        out[qs] = o
    return out, count
""",
    },
}

VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]
HIDDEN = {"cost_ratio": hidden.cost_ratio, "fit_exponent": hidden.fit_exponent,
          "attention_step": hidden.attention_step, "append_to_cache": hidden.append_to_cache,
          "chunked_attention": hidden.chunked_attention, "causal_chunked_attention": hidden.causal_chunked_attention}


@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_tests_accept_correct_variant(grade, name, source):
    HIDDEN[grade](mutant(LESSON, grade, source))


@pytest.mark.parametrize("name", ["float32 with its own softmax"])
def test_generation_check_accepts_correct_variant(name):
    ns = student(LESSON, {"attention_step": VARIANTS["attention_step"][name],
                          "append_to_cache": VARIANTS["append_to_cache"]["preallocate and copy"]})
    hidden.generation_with_cache(ns["attention_step"], ns["append_to_cache"])


def test_perfect_student_passes_every_hidden_test_and_answer():
    ns = student(LESSON)
    for grade, check in HIDDEN.items():
        check(ns[grade])
    hidden.generation_with_cache(ns["attention_step"], ns["append_to_cache"])
    hidden.answer("context_growth", ns["context_growth"])
    hidden.answer("more_important_reason", ns["more_important_reason"])
    hidden.answer("smollm2_cache_mib", ns["smollm2_cache_mib"])
    assert ns["smollm2_cache_mib"] == heads.kv_cache_bytes_per_token(model.load().config, 2) * 8192 / 2**20
    sizes = [1024, 2048, 4096]
    peaks = [cost.measure_attention(cost.naive_attention, T)[1] for T in sizes]
    hidden.answer("memory_exponent", ns["fit_exponent"](sizes, peaks))


def test_wrong_answers_are_rejected():
    assert_rejected(lambda v: hidden.answer("context_growth", v), 4)
    assert_rejected(lambda v: hidden.answer("more_important_reason", v), "a")
    assert_rejected(lambda v: hidden.answer("memory_exponent", v), 1.0)
    assert_rejected(lambda v: hidden.answer("smollm2_cache_mib", v), 540.0)   # as if without GQA
    assert_rejected(lambda v: hidden.answer("smollm2_cache_mib", v), None)


def test_graded_references_name_real_functions():
    import importlib
    for dotted in hidden.GRADED_REFERENCES:
        module, name = dotted.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name))
