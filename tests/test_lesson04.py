"""Lesson 04, the causal mask: reference facts, and the hidden tests against mutants and correct variants."""
import numpy as np
import pytest

from lessons import assert_rejected, each_draw, mutant, student
from qkv import attention, masking
from qkv.checks import lesson04 as visible
from qkv_grading import lesson04 as hidden

LESSON = "04-masking"
WORDS = ["Hà", "Nội", "là", "thủ", "đô"]


# ---------------------------------------------------------------- reference

def test_causal_mask_is_the_seeds_grid():
    grid = masking.mask_grid_text(masking.causal_mask(5), WORDS)
    rows = [line.split() for line in grid.splitlines()]
    assert rows[0] == WORDS
    assert rows[1] == ["Hà", "✓", "✗", "✗", "✗", "✗"]
    assert rows[5] == ["đô", "✓", "✓", "✓", "✓", "✓"]
    for T in (1, 5, 8):
        mask = masking.causal_mask(T)
        assert mask.dtype == bool and (~mask).sum() == T * (T - 1) // 2
        assert np.array_equal(mask, np.tril(np.ones((T, T), dtype=bool)))


def test_mask_enters_before_the_softmax_and_fill_values_compare_as_taught():
    X, W_Q, W_K, W_V = visible.sentence_inputs()
    scores = attention.scaled_scores(X @ W_Q, X @ W_K)
    mask = masking.causal_mask(5)

    def weights(fill):
        return attention.softmax(scores + masking.additive_mask(mask, fill))

    assert weights(0.0)[~mask].max() > 0.1                       # a 0 "mask" leaves weight on the future
    assert 0 < weights(-10.0)[~mask].max() < 1e-3                # a small negative fill only shrinks the leak
    assert np.array_equal(weights(-1e9), weights(-np.inf))       # -1e9 and -inf agree exactly
    assert np.allclose(weights(-np.inf), attention.masked_softmax(scores, mask))
    assert np.allclose(weights(-np.inf).sum(axis=1), 1)
    assert np.array_equal(weights(-np.inf)[0], [1, 0, 0, 0, 0])  # the first row sees only itself


def test_fully_masked_rows_are_zero_not_nan():
    rng = np.random.default_rng(0)
    mask = masking.causal_padding_mask([3, 0, 2], 4)
    weights = attention.masked_softmax(rng.normal(size=(3, 4, 4)), mask)
    assert np.all(np.isfinite(weights)) and np.all(weights[1] == 0)
    with np.errstate(invalid="ignore"):
        assert np.isnan(attention.softmax(np.zeros(3) + masking.additive_mask([False] * 3))).all()
    # -1e9 shifts a fully masked row as a whole: float64 gives the unmasked weights, float32 uniform ones
    row = np.array([0.3, 0.1, -0.2])
    assert np.allclose(attention.softmax(row + masking.additive_mask([False] * 3, -1e9)), attention.softmax(row))
    row32 = row.astype(np.float32) + masking.additive_mask([False] * 3, -1e9).astype(np.float32)
    assert np.allclose(attention.softmax(row32), 1 / 3)


def test_causal_self_attention_matches_the_masked_reference():
    X, W_Q, W_K, W_V = visible.sentence_inputs()
    out = masking.causal_self_attention(X, W_Q, W_K, W_V)
    assert np.allclose(out, attention.self_attention(X, W_Q, W_K, W_V, mask=masking.causal_mask(5)))
    assert np.allclose(out[0], X[0] @ W_V)                       # the first token can only read itself
    batch = np.stack([X, X[::-1]])
    assert np.allclose(masking.causal_self_attention(batch, W_Q, W_K, W_V)[1],
                       masking.causal_self_attention(X[::-1], W_Q, W_K, W_V))


def test_probe_finds_the_leak_without_the_mask_and_none_with_it():
    X, W_Q, W_K, W_V = visible.sentence_inputs()
    causal = masking.dependence_matrix(lambda x: masking.causal_self_attention(x, W_Q, W_K, W_V), X)
    full = masking.dependence_matrix(lambda x: attention.self_attention(x, W_Q, W_K, W_V), X)
    assert np.array_equal(causal, masking.causal_mask(5))
    assert full.all()
    assert masking.future_leaks(full).tolist() == [True, True, True, True, False]
    assert not masking.future_leaks(causal).any()


def test_padded_batch_gives_each_sentence_its_own_outputs():
    rng = np.random.default_rng(1)
    W_Q, W_K, W_V = (rng.normal(size=(4, 3)) for _ in range(3))
    lengths, T = [5, 3, 2], 5
    sequences = [rng.normal(size=(L, 4)) for L in lengths]
    pad = rng.normal(size=4)
    batch = np.stack([np.vstack([s, np.tile(pad, (T - len(s), 1))]) for s in sequences])
    left = np.stack([np.vstack([np.tile(pad, (T - len(s), 1)), s]) for s in sequences])
    right_mask = masking.padding_mask(lengths, T)
    out_full = attention.self_attention(batch, W_Q, W_K, W_V, mask=right_mask)
    out_causal = attention.self_attention(batch, W_Q, W_K, W_V, mask=masking.causal_padding_mask(lengths, T))
    left_mask = right_mask[:, :, ::-1] & masking.causal_mask(T)
    out_left = attention.self_attention(left, W_Q, W_K, W_V, mask=left_mask)
    for b, (s, L) in enumerate(zip(sequences, lengths)):
        assert np.allclose(out_full[b, :L], attention.self_attention(s, W_Q, W_K, W_V))
        assert np.allclose(out_causal[b, :L], masking.causal_self_attention(s, W_Q, W_K, W_V))
        assert np.allclose(out_left[b, T - L:], masking.causal_self_attention(s, W_Q, W_K, W_V))
        assert np.all(out_left[b, :T - L] == 0)                  # fully masked pad rows: zeros, no NaN


def test_library_rejects_bad_input_with_a_message_naming_it():
    with pytest.raises(ValueError, match="T must be a positive whole number"):
        masking.causal_mask(0)
    with pytest.raises(ValueError, match=r"every length must lie in 0..T = 0..4; got \[5, 2\]"):
        masking.padding_mask([5, 2], 4)
    with pytest.raises(ValueError, match=r"lengths must be a 1-D list.*\(2, 1\)"):
        masking.padding_mask([[1], [2]], 4)
    with pytest.raises(ValueError, match=r"one output row per input row.*\(3,\)"):
        masking.dependence_matrix(lambda x: x.sum(axis=1), np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"need 2 query labels.*\(2, 2\)"):
        masking.mask_grid_text(np.ones((2, 2), dtype=bool), ["a"])


# ---------------------------------------------------------------- mutants the hidden tests must reject

CAUSAL_MASK_MUTANTS = {
    "lower triangle masked instead of the upper": ("def causal_mask(T):\n"
                                                   "    return np.triu(np.ones((T, T), dtype=bool))\n"),
    "diagonal masked out": "def causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool), k=-1)\n",
    "off by one, k=1": "def causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool), k=1)\n",
    "off by one, k=-1 via j < i": "def causal_mask(T):\n    i = np.arange(T)\n    return i[:, None] > i[None, :]\n",
    "inverted": "def causal_mask(T):\n    return np.triu(np.ones((T, T), dtype=bool), k=1)\n",
    "float 0/1 instead of bool": "def causal_mask(T):\n    return np.tril(np.ones((T, T)))\n",
    "blank stub": "def causal_mask(T):\n    raise NotImplementedError()\n",
    "returns a list": "def causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool)).tolist()\n",
    "hard-codes the worked example": """
def causal_mask(T):
    return np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool)
""",
    "calls the reference": "from qkv import masking as _m\ndef causal_mask(T):\n    return _m.causal_mask(T)\n",
    "is the reference": "from qkv.masking import causal_mask\n",
}

MASKED_SOFTMAX_MUTANTS = {
    "mask after the softmax": """
def masked_softmax(scores, mask):
    return softmax(scores) * mask
""",
    "mask after the softmax, renormalised": """
def masked_softmax(scores, mask):
    w = softmax(scores) * mask
    return w / w.sum(axis=-1, keepdims=True)
""",
    "mask after the exponential, max over all scores": """
def masked_softmax(scores, mask):
    scores = np.asarray(scores)
    e = np.where(mask, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
""",
    "0 instead of -inf": """
def masked_softmax(scores, mask):
    return softmax(np.where(mask, scores, 0.0))
""",
    "multiplies the scores by the mask": """
def masked_softmax(scores, mask):
    return softmax(scores * mask)
""",
    "fully masked row gives NaN (-inf not handled)": """
def masked_softmax(scores, mask):
    return softmax(np.where(mask, scores, -np.inf))
""",
    "fully masked row gives NaN (own softmax)": """
def masked_softmax(scores, mask):
    s = np.where(mask, scores, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
""",
    "-1e9 added, fully masked row not zeroed": """
def masked_softmax(scores, mask):
    return softmax(scores + np.where(mask, 0.0, -1e9))
""",
    "ignores the mask": "def masked_softmax(scores, mask):\n    return softmax(scores)\n",
    "inverted mask": """
def masked_softmax(scores, mask):
    w = softmax(scores + np.where(mask, -1e9, 0.0))
    return w * ~np.asarray(mask)
""",
    "blank stub": "def masked_softmax(scores, mask):\n    raise NotImplementedError()\n",
    "hard-codes the worked example": """
def masked_softmax(scores, mask):
    return np.array([[1.0, 0.0, 0.0], [0.2891, 0.7109, 0.0], [0.2447, 0.09, 0.6652]])
""",
    "calls the reference": """
import qkv.attention
def masked_softmax(scores, mask):
    return qkv.attention.masked_softmax(scores, mask)
""",
}

CAUSAL_ATTENTION_MUTANTS = {
    "no mask": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])) @ V
""",
    "mask after the softmax": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return (softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])) * causal_mask(X.shape[-2])) @ V
""",
    "mask after the softmax, renormalised": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    w = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])) * causal_mask(X.shape[-2])
    return w / w.sum(axis=-1, keepdims=True) @ V
""",
    "0 instead of -inf": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return softmax(np.where(causal_mask(X.shape[-2]), s, 0.0)) @ V
""",
    "diagonal masked out (NaN in row 0)": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return softmax(np.where(np.tril(np.ones((T, T), dtype=bool), k=-1), s, -np.inf)) @ V
""",
    "diagonal masked out (masked_softmax)": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return masked_softmax(s, np.tril(np.ones((T, T), dtype=bool), k=-1)) @ V
""",
    "lower triangle masked": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    return masked_softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), np.triu(np.ones((T, T), dtype=bool))) @ V
""",
    "off by one, k=1": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    return masked_softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]),
                          np.tril(np.ones((T, T), dtype=bool), 1)) @ V
""",
    "not scaled": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return masked_softmax(Q @ np.swapaxes(K, -1, -2), causal_mask(X.shape[-2])) @ V
""",
    "K.T breaks batches": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return masked_softmax(Q @ K.T / np.sqrt(Q.shape[-1]), causal_mask(X.shape[-2])) @ V
""",
    "blank stub": "def causal_self_attention(X, W_Q, W_K, W_V):\n    raise NotImplementedError()\n",
    "hard-codes the worked example": """
def causal_self_attention(X, W_Q, W_K, W_V):
    return np.array([[0.2361, 1.5346, -0.7196], [0.3718, 1.0667, -0.1074], [0.5289, -0.1369, -0.1889],
                     [0.4447, 0.3891, -0.1445], [-0.2781, -1.9421, -1.4871]])
""",
    "calls the reference": """
from qkv import masking as _m
def causal_self_attention(X, W_Q, W_K, W_V):
    return _m.causal_self_attention(X, W_Q, W_K, W_V)
""",
    "calls the library's self_attention with its mask": """
def causal_self_attention(X, W_Q, W_K, W_V):
    return self_attention(X, W_Q, W_K, W_V, mask=causal_mask(np.shape(X)[-2]))
""",
}

PADDING_MASK_MUTANTS = {
    "wrong axis (queries instead of keys)": """
def padding_mask(lengths, T):
    real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    return np.repeat(real[:, :, None], T, axis=2)
""",
    "both axes": """
def padding_mask(lengths, T):
    real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    return real[:, :, None] & real[:, None, :]
""",
    "off by one (j <= length)": """
def padding_mask(lengths, T):
    real = np.arange(T)[None, :] <= np.asarray(lengths)[:, None]
    return np.repeat(real[:, None, :], T, axis=1)
""",
    "inverted": """
def padding_mask(lengths, T):
    pad = np.arange(T)[None, :] >= np.asarray(lengths)[:, None]
    return np.repeat(pad[:, None, :], T, axis=1)
""",
    "returns [B, T]": """
def padding_mask(lengths, T):
    return np.arange(T)[None, :] < np.asarray(lengths)[:, None]
""",
    "blank stub": "def padding_mask(lengths, T):\n    raise NotImplementedError()\n",
    "hard-codes the worked example": """
def padding_mask(lengths, T):
    rows = [[True] * 5, [True] * 3 + [False] * 2, [True] * 2 + [False] * 3]
    return np.array([[r] * 5 for r in rows])
""",
    "calls the reference": ("from qkv import masking as _m\ndef padding_mask(lengths, T):\n"
                            "    return _m.padding_mask(lengths, T)\n"),
}

CAUSAL_PADDING_MUTANTS = {
    "OR instead of AND": "def causal_padding_mask(lengths, T):\n    return padding_mask(lengths, T) | causal_mask(T)\n",
    "padding only": "def causal_padding_mask(lengths, T):\n    return padding_mask(lengths, T)\n",
    "causal only": """
def causal_padding_mask(lengths, T):
    return np.broadcast_to(causal_mask(T), (len(lengths), T, T))
""",
    "padding on the query axis": """
def causal_padding_mask(lengths, T):
    real = np.arange(T)[None, :] < np.asarray(lengths)[:, None]
    return real[:, :, None] & causal_mask(T)
""",
    "lower triangle instead of causal": ("def causal_padding_mask(lengths, T):\n"
                                         "    return padding_mask(lengths, T) & ~causal_mask(T)\n"),
    "blank stub": "def causal_padding_mask(lengths, T):\n    raise NotImplementedError()\n",
    "hard-codes the worked example": """
def causal_padding_mask(lengths, T):
    c = np.tril(np.ones((5, 5), dtype=bool))
    return np.stack([c, c & (np.arange(5) < 3), c & (np.arange(5) < 2)])
""",
    "calls the reference": """
import qkv.masking
def causal_padding_mask(lengths, T):
    return qkv.masking.causal_padding_mask(lengths, T)
""",
}

PROBE_MUTANTS = {
    # the contract fixes the nudge (delta on every component) and the threshold (tol): both are passed
    # with non-default values by the hidden tests
    "random nudges and an own threshold (ignores delta and tol)": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    rng = np.random.default_rng(0)
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j] += rng.normal(size=X.shape[1])
        D[:, j] = np.abs(attend(Y) - base).max(axis=1) > 1e-7
    return D
""",
    "exact inequality (ignores tol)": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    base = attend(np.asarray(X, dtype=float))
    columns = []
    for j in range(len(X)):
        Y = np.array(X, dtype=float); Y[j] += delta
        columns.append(np.any(attend(Y) != base, axis=1))
    return np.array(columns, dtype=int).T
""",
    "nudges component 0 only": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j, 0] += delta
        D[:, j] = np.abs(attend(Y) - base).max(axis=1) > tol
    return D
""",
    "signed change (no absolute value)": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j] += delta
        D[:, j] = (attend(Y) - base).max(axis=1) > tol
    return D
""",
    "transposed": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j] += delta
        D[j, :] = np.abs(attend(Y) - base).max(axis=1) > tol
    return D
""",
    "only the future": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j] += delta
        D[:j, j] = np.abs(attend(Y) - base)[:j].max(axis=1, initial=0) > tol
    return D
""",
    "nudges accumulate (no fresh copy)": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.array(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        X[j] += delta
        D[:, j] = np.abs(attend(X) - base).max(axis=1) > tol
    return D
""",
    "nudges a feature column instead of a position": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[:, j % X.shape[1]] += delta
        D[:, j] = np.abs(attend(Y) - base).max(axis=1) > tol
    return D
""",
    "hard-codes the causal answer": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    return np.tril(np.ones((len(X), len(X)), dtype=bool))
""",
    "blank stub": "def dependence_matrix(attend, X, delta=1.0, tol=1e-9):\n    raise NotImplementedError()\n",
    "calls the reference": """
from qkv import masking as _m
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    return _m.dependence_matrix(attend, X, delta, tol)
""",
}

HIDDEN = {"causal_mask": hidden.causal_mask, "masked_softmax": hidden.masked_softmax,
          "causal_self_attention": hidden.causal_self_attention, "padding_mask": hidden.padding_mask,
          "causal_padding_mask": hidden.causal_padding_mask, "dependence_matrix": hidden.dependence_matrix}
VISIBLE = {"causal_mask": visible.causal_mask, "masked_softmax": visible.masked_softmax,
           "causal_self_attention": visible.causal_self_attention, "padding_mask": visible.padding_mask,
           "causal_padding_mask": visible.causal_padding_mask, "dependence_matrix": visible.dependence_matrix}
MUTANTS = {"causal_mask": CAUSAL_MASK_MUTANTS, "masked_softmax": MASKED_SOFTMAX_MUTANTS,
           "causal_self_attention": CAUSAL_ATTENTION_MUTANTS, "padding_mask": PADDING_MASK_MUTANTS,
           "causal_padding_mask": CAUSAL_PADDING_MUTANTS, "dependence_matrix": PROBE_MUTANTS}
CASES = [(grade, name, source) for grade, mutants in MUTANTS.items() for name, source in mutants.items()]


@pytest.mark.parametrize("grade, name, source", CASES, ids=[f"{g}:{n}" for g, n, _ in CASES])
def test_hidden_tests_reject_mutant(grade, name, source):
    assert_rejected(HIDDEN[grade], mutant(LESSON, grade, source))


# the visible checks use fixed examples; a hard-coded answer to them is caught only by the hidden tests
VISIBLE_CASES = [c for c in CASES if c[1] != "hard-codes the worked example"]


@pytest.mark.parametrize("grade, name, source", VISIBLE_CASES, ids=[f"{g}:{n}" for g, n, _ in VISIBLE_CASES])
def test_visible_checks_reject_mutant(grade, name, source):
    assert_rejected(VISIBLE[grade], mutant(LESSON, grade, source))


@pytest.mark.parametrize("grade, name, expected", [
    ("causal_mask", "lower triangle masked instead of the upper", "lower triangle is hidden instead of the upper"),
    ("causal_mask", "diagonal masked out", "the diagonal is False"),
    ("causal_mask", "off by one, k=1", "off by one"),
    ("causal_mask", "float 0/1 instead of bool", "a mask must be boolean"),
    ("causal_mask", "calls the reference", "calls qkv's reference `causal_mask`"),
    ("masked_softmax", "mask after the softmax", "applied after the softmax"),
    ("masked_softmax", "mask after the softmax, renormalised", "applied after the exponential or softmax"),
    ("masked_softmax", "0 instead of -inf", "0 is an ordinary score"),
    ("masked_softmax", "-1e9 added, fully masked row not zeroed", "ignores a common shift"),
    ("masked_softmax", "fully masked row gives NaN (own softmax)", "all zeros"),
    ("masked_softmax", "calls the reference", "calls qkv's reference `masked_softmax`"),
    ("causal_self_attention", "no mask", "without the causal mask"),
    ("causal_self_attention", "diagonal masked out (masked_softmax)", "diagonal is masked out"),
    ("causal_self_attention", "lower triangle masked", "lower triangle was masked"),
    ("causal_self_attention", "not scaled", "sqrt(d_k)"),
    ("causal_self_attention", "0 instead of -inf", "scores were set to 0"),
    ("padding_mask", "wrong axis (queries instead of keys)", "wrong axis"),
    ("padding_mask", "off by one (j <= length)", "off by one"),
    ("causal_padding_mask", "OR instead of AND", "OR"),
    ("dependence_matrix", "transposed", "rows and columns are swapped"),
    ("dependence_matrix", "nudges accumulate (no fresh copy)", "accumulate"),
])
def test_hints_name_the_likely_mistake(grade, name, expected):
    message = assert_rejected(VISIBLE[grade], mutant(LESSON, grade, MUTANTS[grade][name]))
    assert expected in message, message


def test_renormalised_after_softmax_fails_on_a_loud_future_in_attention():
    # mathematically equal on ordinary inputs; both layers include a hidden score that dominates
    bad = mutant(LESSON, "causal_self_attention", CAUSAL_ATTENTION_MUTANTS["mask after the softmax, renormalised"])
    for check in (visible.causal_self_attention, hidden.causal_self_attention):
        assert "hidden after the softmax" in assert_rejected(check, bad)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "causal_mask": {
        "np.tril": "def causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool))\n",
        "not np.triu(k=1)": "def causal_mask(T):\n    return ~np.triu(np.ones((T, T), dtype=bool), k=1)\n",
        "np.tril == 1": "def causal_mask(T):\n    return np.tril(np.ones((T, T))) == 1\n",
        "np.tri": "def causal_mask(T):\n    return np.tri(T, dtype=bool)\n",
        "loops": """
def causal_mask(T):
    mask = np.zeros((T, T), dtype=bool)
    for i in range(T):
        for j in range(T):
            mask[i, j] = j <= i
    return mask
""",
    },
    "masked_softmax": {
        "np.where -inf, fully masked row handled": """
def masked_softmax(scores, mask):
    s = np.where(mask, scores, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0.0)
""",
        "adds -1e9, then multiplies by the mask": """
def masked_softmax(scores, mask):
    return softmax(scores + np.where(mask, 0.0, -1e9)) * mask
""",
        "library softmax of -inf, NaN rows zeroed": """
def masked_softmax(scores, mask):
    with np.errstate(invalid="ignore"):
        w = softmax(np.where(mask, scores, -np.inf))
    return np.nan_to_num(w, nan=0.0)
""",
        "float32 in, float32 out": """
def masked_softmax(scores, mask):
    scores = np.asarray(scores)
    s = np.where(mask, scores, np.float32(-1e9)).astype(scores.dtype)
    e = np.exp(s - s.max(axis=-1, keepdims=True)) * mask
    total = e.sum(axis=-1, keepdims=True)
    return (e / np.maximum(total, np.finfo(scores.dtype).tiny)).astype(scores.dtype)
""",
        "loops over rows": """
def masked_softmax(scores, mask):
    scores = np.asarray(scores, dtype=float)
    mask = np.broadcast_to(mask, scores.shape)
    out = np.zeros_like(scores)
    for index in np.ndindex(scores.shape[:-1]):
        visible = [k for k in range(scores.shape[-1]) if mask[index][k]]
        if not visible:
            continue
        top = max(scores[index][k] for k in visible)
        e = {k: np.exp(scores[index][k] - top) for k in visible}
        for k in visible:
            out[index][k] = e[k] / sum(e.values())
    return out
""",
    },
    "causal_self_attention": {
        "adds a -1e9 mask": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]) + np.triu(np.full((T, T), -1e9), k=1)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ V
""",
        "np.where -inf with the library softmax": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    T = X.shape[-2]
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    return softmax(np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)) @ V
""",
        "einsum": """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = (np.einsum('...td,de->...te', X, W) for W in (W_Q, W_K, W_V))
    s = np.einsum('...id,...jd->...ij', Q, K) / np.sqrt(Q.shape[-1])
    return np.einsum('...ij,...jv->...iv', masked_softmax(s, causal_mask(X.shape[-2])), V)
""",
        "float32 throughout": """
def causal_self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, dtype=np.float32)
    Q, K, V = X @ np.float32(W_Q), X @ np.float32(W_K), X @ np.float32(W_V)
    s = Q @ np.swapaxes(K, -1, -2) / np.float32(np.sqrt(Q.shape[-1]))
    return masked_softmax(s, causal_mask(X.shape[-2])) @ V
""",
        "loops over positions": """
def causal_self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, dtype=float)
    out = np.zeros(X.shape[:-1] + (np.shape(W_V)[1],))
    for index in np.ndindex(X.shape[:-2]):
        x = X[index]
        Q, K, V = x @ W_Q, x @ W_K, x @ W_V
        for i in range(len(x)):
            s = np.array([Q[i] @ K[j] for j in range(i + 1)]) / np.sqrt(len(Q[i]))
            w = np.exp(s - s.max())
            out[index][i] = (w / w.sum()) @ V[:i + 1]
    return out
""",
    },
    "padding_mask": {
        "loops": """
def padding_mask(lengths, T):
    mask = np.zeros((len(lengths), T, T), dtype=bool)
    for b, L in enumerate(lengths):
        mask[b, :, :L] = True
    return mask
""",
        "broadcast view": """
def padding_mask(lengths, T):
    real = np.arange(T) < np.asarray(lengths)[:, None, None]
    return np.broadcast_to(real, (len(lengths), T, T))
""",
        "np.tile": """
def padding_mask(lengths, T):
    real = np.arange(T)[None, :] < np.reshape(lengths, (-1, 1))
    return np.tile(real[:, None, :], (1, T, 1))
""",
    },
    "causal_padding_mask": {
        "np.logical_and with np.tril": """
def causal_padding_mask(lengths, T):
    return np.logical_and(padding_mask(lengths, T), np.tril(np.ones((T, T), dtype=bool)))
""",
        "loops": """
def causal_padding_mask(lengths, T):
    mask = np.zeros((len(lengths), T, T), dtype=bool)
    for b, L in enumerate(lengths):
        for i in range(T):
            for j in range(T):
                mask[b, i, j] = j <= i and j < L
    return mask
""",
    },
    "dependence_matrix": {
        "np.allclose as the test": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, dtype=float)
    base = attend(X)
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        Y = X.copy(); Y[j] = Y[j] + delta
        out = attend(Y)
        for i in range(len(X)):
            D[i, j] = not np.allclose(out[i], base[i], rtol=0, atol=tol)
    return D
""",
        "any component over tol, 0/1 ints": """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    base = attend(np.asarray(X, dtype=float))
    columns = []
    for j in range(len(X)):
        Y = np.array(X, dtype=float); Y[j] += delta
        columns.append(np.any(np.abs(attend(Y) - base) > tol, axis=1))
    return np.array(columns, dtype=int).T
""",
    },
}

VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]


@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_and_visible_checks_accept_correct_variant(grade, name, source):
    fn = mutant(LESSON, grade, source)
    for _ in each_draw(LESSON):  # three students' draws
        HIDDEN[grade](fn)
    VISIBLE[grade](fn)


def test_perfect_student_passes_every_check_and_answer():
    ns = student(LESSON)
    for grade in HIDDEN:
        VISIBLE[grade](ns[grade])
        HIDDEN[grade](ns[grade])
    for name in hidden.ANSWERS:
        hidden.answer(name, ns[name])


def test_wrong_answers_are_rejected():
    assert_rejected(lambda v: hidden.answer("causal_blocks", v), "a")
    assert_rejected(lambda v: hidden.answer("blocked_pairs", v), 36)
    assert_rejected(lambda v: hidden.answer("blocked_pairs", v), 10)
    assert_rejected(lambda v: hidden.answer("future_share_zero_mask", v), 0.0)
    assert_rejected(lambda v: hidden.answer("why_meaningless", v), "b")
    assert_rejected(lambda v: hidden.answer("why_meaningless", v), None)


# ---------------------------------------------------------------- issue 12, item 8: the headline mistakes, visibly

@pytest.mark.parametrize("wrong_causal_mask", ["off by one, k=1", "diagonal masked out", "inverted"])
def test_causal_padding_mask_failing_through_a_wrong_causal_mask_says_so(wrong_causal_mask):
    namespace = student(LESSON, {"causal_mask": CAUSAL_MASK_MUTANTS[wrong_causal_mask]})
    message = assert_rejected(visible.causal_padding_mask, namespace["causal_padding_mask"])
    assert "fix causal_mask first" in message, message


def test_a_causal_padding_mask_without_the_causal_part_is_not_blamed_on_causal_mask():
    message = assert_rejected(visible.causal_padding_mask, mutant(LESSON, "causal_padding_mask",
                                                                  CAUSAL_PADDING_MUTANTS["padding only"]))
    assert "causal part is missing" in message and "fix causal_mask first" not in message, message


# ---------------------------------------------------------------- issue 8: mistakes only a contract's hard inputs show

CONTRACT_MUTANTS = [
    ("causal_self_attention", "mask sized by the first axis (the batch when X is [B, T, d])", """
def causal_self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    T = X.shape[0]
    return masked_softmax(s, causal_mask(T)) @ V
"""),
    ("masked_softmax", "no shift (exp of the raw visible scores)", """
def masked_softmax(scores, mask):
    e = np.where(mask, np.exp(np.where(mask, scores, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
"""),
]


@pytest.mark.parametrize("grade, name, source", CONTRACT_MUTANTS, ids=[c[1] for c in CONTRACT_MUTANTS])
def test_hidden_tests_reject_mistakes_only_hard_inputs_show(grade, name, source):
    for _ in each_draw(LESSON):  # on every draw
        assert_rejected(HIDDEN[grade], mutant(LESSON, grade, source))
