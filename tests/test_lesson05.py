"""Lesson 05: reference numbers, and the hidden tests against mutants and correct variants."""
import numpy as np
import pytest

from lessons import (assert_rejected, each_draw, error_outputs_of_a_graded_perfect_notebook, mutant,
                     mutant_rejection_tests, student)
from qkv import attention, heads, model, plots, scaling
from qkv.checks import lesson05 as visible
from qkv_grading import lesson05 as hidden

LESSON = "05-heads"


# ---------------------------------------------------------------- reference

def test_split_heads_gives_each_head_a_block_of_neighbouring_columns():
    x = np.tile(np.arange(12.0), (2, 1))
    split = heads.split_heads(x, 3)
    assert split.shape == (3, 2, 4)
    for h in range(3):
        assert np.array_equal(split[h], x[:, 4 * h:4 * h + 4])
    assert np.array_equal(heads.merge_heads(split), x)


def test_library_rejects_bad_splits_with_the_shapes_named():
    with pytest.raises(ValueError, match=r"\(2, 10\).*3 heads"):
        heads.split_heads(np.zeros((2, 10)), 3)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        heads.merge_heads(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="W_O"):
        heads.multi_head_attention(np.zeros((3, 4)), *[np.zeros((4, 4))] * 3, np.zeros((5, 4)), 2)


def test_multi_head_attention_is_per_head_attention_concatenated_then_projected():
    rng = np.random.default_rng(0)
    X, W_Q, W_K, W_V, W_O, n_heads = visible.mha_case(rng, 5, 12, 3, 4)
    mask = visible.causal(5)
    per_head = [attention.self_attention(X, W_Q[:, 4 * h:4 * h + 4], W_K[:, 4 * h:4 * h + 4],
                                         W_V[:, 4 * h:4 * h + 4], mask) for h in range(3)]
    expected = np.concatenate(per_head, axis=1) @ W_O
    assert np.allclose(heads.multi_head_attention(X, W_Q, W_K, W_V, W_O, 3, mask), expected)


def test_gqa_is_multi_head_attention_on_repeated_key_value_heads():
    rng = np.random.default_rng(1)
    q, k, v = visible.gqa_case(rng, 6, 2, 4, 3)
    out = heads.grouped_query_attention(q, k, v, visible.causal(4))
    for h in range(6):
        assert np.allclose(out[h], attention.attention(q[h], k[h // 3], v[h // 3], visible.causal(4)))
    assert list(np.repeat(np.arange(3), 3)) != list(np.tile(np.arange(3), 3))  # the mutant really differs


def test_gqa_values_may_be_wider_or_narrower_than_the_keys_as_its_shape_comment_says():
    # [H_kv, T_k, d_v] with d_v != d_head, as PyTorch's scaled_dot_product_attention(enable_gqa=True) allows
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(4, 3, 5)), rng.normal(size=(2, 6, 5))
    for d_v in (2, 7):
        v = rng.normal(size=(2, 6, d_v))
        out = heads.grouped_query_attention(q, k, v)
        assert out.shape == (4, 3, d_v)
        for h in range(4):
            assert np.allclose(out[h], attention.attention(q[h], k[h // 2], v[h // 2]))
    with pytest.raises(ValueError, match=r"k \(2, 6, 5\) and v \(2, 5, 5\) must have the same heads and keys"):
        heads.grouped_query_attention(q, k, rng.normal(size=(2, 5, 5)))


def test_seed_widths_split_into_heads_of_64_and_smollm2_reads_its_own():
    assert heads.GPT2_SMALL.n_heads * heads.GPT2_SMALL.d_head == heads.GPT2_SMALL.d_model == 768
    assert heads.QWEN25_05B.n_heads * heads.QWEN25_05B.d_head == heads.QWEN25_05B.d_model == 896
    c = model.load().config
    assert (c.d_model, c.n_heads, c.n_kv_heads, c.d_head) == (576, 9, 3, 64)


def test_splitting_into_heads_costs_no_parameters_and_no_flops():
    for shape in (heads.GPT2_SMALL, heads.QWEN25_05B):
        assert heads.attention_parameter_count(shape.d_model, shape.n_heads, shape.d_head) == 4 * shape.d_model ** 2
        assert (heads.attention_flops(1024, shape.d_model, shape.n_heads, shape.d_head)
                == heads.attention_flops(1024, shape.d_model, 1, shape.d_model))
    layer = model.load().weights.layers[0]
    stored = sum(getattr(layer, name).size for name in ("W_q", "W_k", "W_v", "W_o"))
    assert stored == heads.attention_parameter_count(576, 9, 64, 3) == 884_736


def test_kv_cache_numbers():
    assert heads.kv_cache_bytes_per_token(heads.QWEN25_05B, 2) == 12_288
    assert heads.kv_cache_bytes_per_token(heads.as_multi_head(heads.QWEN25_05B), 2) == 7 * 12_288
    smol = model.load().config
    assert heads.kv_cache_bytes_per_token(smol, 2) == 2 * 30 * 3 * 64 * 2 == 23_040
    assert heads.kv_cache_bytes_per_token(heads.as_multi_head(smol), 2) == 3 * 23_040
    assert heads.as_multi_head(heads.GPT2_SMALL) is heads.GPT2_SMALL


def test_entropy_is_zero_for_one_hot_and_log_n_for_uniform():
    assert scaling.entropy([0.0, 1.0, 0.0]) == 0
    assert np.isclose(scaling.entropy(np.full(8, 1 / 8)), np.log(8))


def test_readable_labels_name_the_pieces_of_a_split_character():
    m = model.load()
    ids = model.encode(m, "Hà Nội là")
    labels = plots.readable_token_labels(lambda i: model.decode(m, i), ids)
    assert len(labels) == len(ids) and "\ufffd" not in "".join(labels)
    assert labels[:6] == ["H", "à", " N", "ộ₁", "ộ₂", "i"]


# ---------------------------------------------------------------- mutants the hidden tests must reject

SPLIT_MUTANTS = {
    "reshape to [T, d_head, H]": """
def split_heads(x, n_heads):
    T, width = x.shape
    return x.reshape(T, width // n_heads, n_heads).transpose(2, 0, 1)
""",
    "reshape straight to [H, T, d_head]": """
def split_heads(x, n_heads):
    T, width = x.shape
    return x.reshape(n_heads, T, width // n_heads)
""",
    "forgets the transpose": """
def split_heads(x, n_heads):
    T, width = x.shape
    return x.reshape(T, n_heads, width // n_heads)
""",
    "blank stub": "def split_heads(x, n_heads):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "returns None": "def split_heads(x, n_heads):\n    x.reshape(len(x), n_heads, -1).transpose(1, 0, 2)\n",
    "hard-codes the worked example": """
def split_heads(x, n_heads):
    return np.arange(24.0).reshape(2, 12).reshape(2, 3, 4).transpose(1, 0, 2)
""",
    "calls the reference": """
import qkv.heads
def split_heads(x, n_heads):
    return qkv.heads.split_heads(x, n_heads)
""",
    "is the reference": "from qkv.heads import split_heads\n",
}

MERGE_MUTANTS = {
    "heads interleaved": """
def merge_heads(x):
    H, T, d = x.shape
    return x.transpose(1, 2, 0).reshape(T, H * d)
""",
    "reshape without transpose": """
def merge_heads(x):
    H, T, d = x.shape
    return x.reshape(T, H * d)
""",
    "heads merged in reverse order": """
def merge_heads(x):
    return np.concatenate(list(x[::-1]), axis=1)
""",
    "blank stub": "def merge_heads(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "hard-codes the worked example": """
def merge_heads(x):
    return np.arange(24.0).reshape(3, 2, 4).transpose(1, 0, 2).reshape(2, 12)
""",
    "calls the reference": """
from qkv import heads as _h
def merge_heads(x):
    return _h.merge_heads(x)
""",
}

MHA_MUTANTS = {
    "scales by sqrt(d_model)": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(X.shape[1])
    return merge_heads(masked_softmax(scores, mask) @ v) @ W_O
""",
    "scales by sqrt(n_heads * d_head)": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(W_Q.shape[1])
    return merge_heads(masked_softmax(scores, mask) @ v) @ W_O
""",
    "no output projection": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    return merge_heads(masked_softmax(scores, mask) @ v)
""",
    "heads merged in the wrong order": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    out = masked_softmax(scores, mask) @ v
    return np.concatenate(list(out[::-1]), axis=1) @ W_O
""",
    "heads cut as [T, d_head, H]": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    T = X.shape[0]
    q, k, v = ((X @ W).reshape(T, -1, n_heads).transpose(2, 0, 1) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    return merge_heads(masked_softmax(scores, mask) @ v) @ W_O
""",
    "no scaling": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    return merge_heads(masked_softmax(q @ k.transpose(0, 2, 1), mask) @ v) @ W_O
""",
    "ignores the mask": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    return merge_heads(softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])) @ v) @ W_O
""",
    "one wide head": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return masked_softmax(Q @ K.T / np.sqrt(Q.shape[1] // n_heads), mask) @ V @ W_O
""",
    "blank stub": ("def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "hard-codes the worked example": f"""
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    return np.array({heads.multi_head_attention(*visible.mha_case(np.random.default_rng(50), 4, 6, 2, 3)).tolist()})
""",
    "calls the reference": """
from qkv.heads import multi_head_attention as _mha
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    return _mha(X, W_Q, W_K, W_V, W_O, n_heads, mask)
""",
    "calls the reference attention per head": """
from qkv.attention import attention as _attention
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    return merge_heads(_attention(q, k, v, mask)) @ W_O
""",
}

GQA_MUTANTS = {
    "tile instead of repeat": """
def grouped_query_attention(q, k, v, mask=None):
    g = q.shape[0] // k.shape[0]
    k, v = np.tile(k, (g, 1, 1)), np.tile(v, (g, 1, 1))
    return masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), mask) @ v
""",
    "divides by H_kv instead of the group size": """
def grouped_query_attention(q, k, v, mask=None):
    index = np.arange(q.shape[0]) // k.shape[0]
    k, v = k[index], v[index]
    return masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), mask) @ v
""",
    "scales by sqrt(d_model)": """
def grouped_query_attention(q, k, v, mask=None):
    g = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    return masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[0] * q.shape[-1]), mask) @ v
""",
    "ignores the mask": """
def grouped_query_attention(q, k, v, mask=None):
    g = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    return softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])) @ v
""",
    "blank stub": ("def grouped_query_attention(q, k, v, mask=None):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "hard-codes the worked example": f"""
def grouped_query_attention(q, k, v, mask=None):
    return np.array({heads.grouped_query_attention(*visible.gqa_case(np.random.default_rng(51), 4, 2, 3, 2)).tolist()})
""",
    "calls the reference": """
import qkv.heads
def grouped_query_attention(q, k, v, mask=None):
    return qkv.heads.grouped_query_attention(q, k, v, mask)
""",
    "uses the reference's repeat_kv_heads": """
from qkv.heads import repeat_kv_heads
def grouped_query_attention(q, k, v, mask=None):
    k, v = repeat_kv_heads(k, q.shape[0]), repeat_kv_heads(v, q.shape[0])
    return masked_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), mask) @ v
""",
    "is the reference": "from qkv.heads import grouped_query_attention\n",
}

KV_MUTANTS = {
    "forgets the factor 2 for K and V": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return config.n_layers * config.n_kv_heads * config.d_head * bytes_per_element
""",
    "ignores GQA (n_heads instead of n_kv_heads)": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_layers * config.n_heads * config.d_head * bytes_per_element
""",
    "one layer only": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_kv_heads * config.d_head * bytes_per_element
""",
    "ignores bytes_per_element (counts numbers)": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_layers * config.n_kv_heads * config.d_head
""",
    "counts bits": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_layers * config.n_kv_heads * config.d_head * bytes_per_element * 8
""",
    "blank stub": ("def kv_cache_bytes_per_token(config, bytes_per_element):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "hard-codes the worked example": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 256
""",
    "calls the reference": """
from qkv import heads as _h
def kv_cache_bytes_per_token(config, bytes_per_element):
    return _h.kv_cache_bytes_per_token(config, bytes_per_element)
""",
}

test_hidden_tests_reject_mutant, test_visible_checks_reject_mutant = mutant_rejection_tests(
    LESSON, hidden, visible, {"split_heads": SPLIT_MUTANTS, "merge_heads": MERGE_MUTANTS,
                              "multi_head_attention": MHA_MUTANTS, "grouped_query_attention": GQA_MUTANTS,
                              "kv_cache_bytes_per_token": KV_MUTANTS})


def test_hints_name_the_likely_mistake():
    def hint(check, grade, source):
        return assert_rejected(check, mutant(LESSON, grade, source))

    assert "every n_heads-th column" in hint(hidden.split_heads, "split_heads",
                                             SPLIT_MUTANTS["reshape to [T, d_head, H]"])
    assert "reverse order" in hint(hidden.merge_heads, "merge_heads", MERGE_MUTANTS["heads merged in reverse order"])
    assert "sqrt(d_model)" in hint(hidden.multi_head_attention, "multi_head_attention",
                                   MHA_MUTANTS["scales by sqrt(d_model)"])
    assert "output projection" in hint(hidden.multi_head_attention, "multi_head_attention",
                                       MHA_MUTANTS["no output projection"])
    assert "np.tile" in hint(hidden.grouped_query_attention, "grouped_query_attention",
                             GQA_MUTANTS["tile instead of repeat"])
    assert "factor 2" in hint(hidden.kv_cache_bytes_per_token, "kv_cache_bytes_per_token",
                              KV_MUTANTS["forgets the factor 2 for K and V"])
    assert "n_kv_heads" in hint(hidden.kv_cache_bytes_per_token, "kv_cache_bytes_per_token",
                                KV_MUTANTS["ignores GQA (n_heads instead of n_kv_heads)"])
    assert "calls qkv's reference `grouped_query_attention`" in hint(
        hidden.grouped_query_attention, "grouped_query_attention", GQA_MUTANTS["calls the reference"])
    assert "not written yet" in hint(hidden.split_heads, "split_heads", SPLIT_MUTANTS["blank stub"])


# ---------------------------------------------------------------- the student's GQA inside SmolLM2

SMOLLM2_MUTANTS = ["tile instead of repeat", "scales by sqrt(d_model)", "ignores the mask", "blank stub",
                   "calls the reference", "is the reference", "hard-codes the worked example"]


@pytest.mark.parametrize("name", SMOLLM2_MUTANTS)
def test_smollm2_check_rejects_mutant(name):
    assert_rejected(hidden.plugged_into_smollm2, mutant(LESSON, "grouped_query_attention", GQA_MUTANTS[name]))


def test_smollm2_check_says_what_the_wrong_grouping_predicts():
    tiled = mutant(LESSON, "grouped_query_attention", GQA_MUTANTS["tile instead of repeat"])
    assert "' Paris'" in assert_rejected(visible.smollm2, tiled)


def test_hidden_smollm2_prompts_differ_from_the_visible_one_and_all_pass():
    gqa = student(LESSON)["grouped_query_attention"]
    assert visible.VISIBLE_PROMPT not in hidden.HIDDEN_PROMPTS
    for prompt in hidden.HIDDEN_PROMPTS:
        visible.plugged_into_smollm2(gqa, prompt=prompt)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "split_heads": {
        "loop over heads": """
def split_heads(x, n_heads):
    d = x.shape[1] // n_heads
    return np.array([x[:, h * d:(h + 1) * d] for h in range(n_heads)])
""",
        "np.split": "def split_heads(x, n_heads):\n    return np.stack(np.split(x, n_heads, axis=1))\n",
        "transpose first": """
def split_heads(x, n_heads):
    T, width = x.shape
    return x.T.reshape(n_heads, width // n_heads, T).transpose(0, 2, 1)
""",
        "einsum, float32": """
def split_heads(x, n_heads):
    T, width = x.shape
    return np.einsum('thd->htd', np.asarray(x, dtype=np.float32).reshape(T, n_heads, -1))
""",
    },
    "merge_heads": {
        "concatenate": "def merge_heads(x):\n    return np.concatenate(list(x), axis=1)\n",
        "loops": """
def merge_heads(x):
    H, T, d = x.shape
    out = np.zeros((T, H * d))
    for h in range(H):
        for t in range(T):
            out[t, h * d:(h + 1) * d] = x[h, t]
    return out
""",
        "einsum": "def merge_heads(x):\n    H, T, d = x.shape\n    return np.einsum('htd->thd', x).reshape(T, H * d)\n",
    },
    "multi_head_attention": {
        "loop over heads with per-head weight slices": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    d = W_Q.shape[1] // n_heads
    outputs = []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        q, k, v = X @ W_Q[:, cols], X @ W_K[:, cols], X @ W_V[:, cols]
        outputs.append(masked_softmax(q @ k.T / np.sqrt(d), mask) @ v)
    return np.concatenate(outputs, axis=1) @ W_O
""",
        "einsum": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    q, k, v = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = np.einsum('hqd,hkd->hqk', q, k) / np.sqrt(q.shape[-1])
    return merge_heads(np.einsum('hqk,hkd->hqd', masked_softmax(scores, mask), v)) @ W_O
""",
        "float32 with its own masking": """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    X = np.asarray(X, dtype=np.float32)
    q, k, v = (split_heads(X @ np.asarray(W, dtype=np.float32), n_heads) for W in (W_Q, W_K, W_V))
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(q.shape[-1]))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return merge_heads(softmax(scores) @ v) @ np.asarray(W_O, dtype=np.float32)
""",
    },
    "grouped_query_attention": {
        "loop over query heads": """
def grouped_query_attention(q, k, v, mask=None):
    group = q.shape[0] // k.shape[0]
    out = []
    for h in range(q.shape[0]):
        scores = q[h] @ k[h // group].T / np.sqrt(q.shape[-1])
        out.append(masked_softmax(scores, mask) @ v[h // group])
    return np.stack(out)
""",
        "einsum over groups without copying": """
def grouped_query_attention(q, k, v, mask=None):
    H_q, T, d = q.shape
    H_kv = k.shape[0]
    g = q.reshape(H_kv, H_q // H_kv, T, d)
    scores = np.einsum('cgqd,ckd->cgqk', g, k) / np.sqrt(d)
    out = np.einsum('cgqk,ckd->cgqd', masked_softmax(scores, mask), v)
    return out.reshape(H_q, T, v.shape[-1])
""",
        "float32 with its own softmax": """
def grouped_query_attention(q, k, v, mask=None):
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (q, k, v))
    g = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
""",
    },
    "kv_cache_bytes_per_token": {
        "K and V counted separately": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    per_layer = config.n_kv_heads * config.d_head * bytes_per_element
    return config.n_layers * (per_layer + per_layer)
""",
        "float result": """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return float(2 * config.n_layers * config.n_kv_heads * config.d_head) * bytes_per_element
""",
    },
}

VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]
HIDDEN = {"split_heads": hidden.split_heads, "merge_heads": hidden.merge_heads,
          "multi_head_attention": hidden.multi_head_attention,
          "grouped_query_attention": hidden.grouped_query_attention,
          "kv_cache_bytes_per_token": hidden.kv_cache_bytes_per_token}


@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_tests_accept_correct_variant(grade, name, source):
    HIDDEN[grade](mutant(LESSON, grade, source))


@pytest.mark.parametrize("name", list(VARIANTS["grouped_query_attention"]))
def test_smollm2_check_accepts_correct_variant(name):
    hidden.plugged_into_smollm2(mutant(LESSON, "grouped_query_attention", VARIANTS["grouped_query_attention"][name]))


def test_perfect_student_passes_every_hidden_test_and_answer():
    ns = student(LESSON)
    for grade, check in HIDDEN.items():
        check(ns[grade])
    hidden.plugged_into_smollm2(ns["grouped_query_attention"])
    for name in hidden.ANSWERS:
        hidden.answer(name, ns[name])


def test_wrong_answers_are_rejected():
    assert_rejected(lambda v: hidden.answer("design_choice", v), "d")
    assert_rejected(lambda v: hidden.answer("gqa_saves", v), "a")
    assert_rejected(lambda v: hidden.answer("qwen_kv_bytes_per_token", v), 6144)   # forgot K and V
    assert_rejected(lambda v: hidden.answer("qwen_kv_bytes_per_token", v), 86016)  # ignored GQA
    assert_rejected(lambda v: hidden.answer("qwen_kv_saving_factor", v), 2)
    assert_rejected(lambda v: hidden.answer("qwen_kv_saving_factor", v), None)


# ---------------------------------------------------------------- issue 12, item 8: the headline mistakes, visibly

def test_visible_kv_check_tells_ignored_bytes_from_a_forgotten_factor_2():
    ignores_bytes = mutant(LESSON, "kv_cache_bytes_per_token", KV_MUTANTS["ignores bytes_per_element (counts numbers)"])
    forgets_two = mutant(LESSON, "kv_cache_bytes_per_token", KV_MUTANTS["forgets the factor 2 for K and V"])
    bytes_hint = assert_rejected(visible.kv_cache_bytes_per_token, ignores_bytes)
    two_hint = assert_rejected(visible.kv_cache_bytes_per_token, forgets_two)
    assert "multiply by bytes_per_element" in bytes_hint and "factor 2" not in bytes_hint
    assert "factor 2" in two_hint and "bytes_per_element" not in two_hint


def test_visible_kv_check_accepts_an_object_with_only_the_named_attributes():
    visible.kv_cache_bytes_per_token(student(LESSON)["kv_cache_bytes_per_token"])


def test_missing_output_projection_is_named_from_its_shape():
    no_projection = mutant(LESSON, "multi_head_attention", MHA_MUTANTS["no output projection"])
    assert "output projection" in assert_rejected(visible.multi_head_attention, no_projection)


# ---------------------------------------------------------------- issue 8: mistakes only a contract's hard inputs show

def test_hidden_kv_test_rejects_d_head_derived_from_fields_the_exercise_does_not_name():
    derived = """
def kv_cache_bytes_per_token(config, bytes_per_element):
    return 2 * config.n_layers * config.n_kv_heads * (config.d_model // config.n_heads) * bytes_per_element
"""
    for _ in each_draw(LESSON):
        assert_rejected(hidden.kv_cache_bytes_per_token, mutant(LESSON, "kv_cache_bytes_per_token", derived))


def test_hidden_mha_test_rejects_a_scale_by_the_model_width_on_every_draw():
    for _ in each_draw(LESSON):
        assert_rejected(hidden.multi_head_attention,
                        mutant(LESSON, "multi_head_attention", MHA_MUTANTS["scales by sqrt(d_model)"]))


# ---------------------------------------------------------------- issue 20: a perfect notebook's feedback has no error

@pytest.mark.grading_class
def test_a_perfect_notebook_graded_in_the_sandbox_shows_no_error_in_any_cell(tmp_path):
    # the forward passes are withheld during grading (they use this lesson's references): the cells that use
    # their results must stop with the grader's note, not with a NameError cascade and empty plots
    errors = error_outputs_of_a_graded_perfect_notebook(LESSON, tmp_path)
    assert not errors, "\n\n".join(f"cell {where}: {text}" for where, text in errors)
