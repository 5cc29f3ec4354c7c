"""Lesson 02: the worked example's numbers, and the hidden tests against mutants and correct variants."""
import numpy as np
import pytest

from lessons import assert_rejected, mutant, student
from qkv import attention
from qkv.checking import check_against
from qkv.checks import lesson02 as visible
from qkv_grading import draws_of, lesson02 as hidden

LESSON = "02-by-hand"
Q, K, V = visible.WORKED_Q, visible.WORKED_K, visible.WORKED_V


# ---------------------------------------------------------------- reference: the seed's worked example

def test_worked_example_step_by_step():
    assert np.allclose(attention.dot_scores(Q, K), [[2, 0, 1]])
    assert np.allclose(attention.scaled_scores(Q, K), [[1, 0, 0.5]])
    weights = attention.attention_weights(Q, K)
    assert np.allclose(weights, [[0.5065, 0.1863, 0.3072]], atol=1e-4)
    # the seed prints 0.308; the value rounds to 0.307 and the honest roundings add to 0.999
    assert round(float(weights[0, 2]), 3) == 0.307
    assert round(float(np.round(weights, 3).sum()), 3) == 0.999
    assert np.allclose(attention.attention(Q, K, V), [[5.68, 1.55]], atol=5e-3)


def test_gpt2_small_head_shapes_and_asymmetry():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 768))
    W_Q, W_K, W_V = (rng.normal(size=(768, 64)) / np.sqrt(768) for _ in range(3))
    Qg, Kg, Vg = attention.project_qkv(X, W_Q, W_K, W_V)
    scores = attention.dot_scores(Qg, Kg)
    assert Qg.shape == (5, 64) and scores.shape == (5, 5)
    assert attention.self_attention(X, W_Q, W_K, W_V).shape == (5, 64)
    assert np.abs(scores - scores.T).max() > 1
    same = attention.dot_scores(*attention.project_qkv(X, W_Q, W_Q, W_V)[:2])
    assert np.allclose(same, same.T)


def test_visible_examples_are_non_square():
    n_q, d_k = visible.SMALL_Q.shape
    n_k, d_v = visible.SMALL_V.shape
    assert n_q != n_k and d_k != d_v
    T, d_model = visible.SMALL_X.shape
    d_k, d_v = visible.SMALL_W_Q.shape[1], visible.SMALL_W_V.shape[1]
    assert T != d_model and d_k != d_v and d_k != d_model and d_v != d_model
    for n_q, n_k, d_k, d_v in hidden.SHAPES[1:]:
        assert n_q != n_k and d_k != d_v


# ---------------------------------------------------------------- mutants the hidden tests must reject

BLANK = "def {name}({args}):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"

DOT_SCORES_MUTANTS = {
    "transposed (K @ Q.T)": "def dot_scores(Q, K):\n    return np.asarray(K, float) @ np.asarray(Q, float).T\n",
    "already scaled": """
def dot_scores(Q, K):
    Q, K = np.asarray(Q, float), np.asarray(K, float)
    return Q @ K.T / np.sqrt(Q.shape[1])
""",
    "Q.T @ K": "def dot_scores(Q, K):\n    return np.asarray(Q, float).T @ np.asarray(K, float)\n",
    "does not accept lists": "def dot_scores(Q, K):\n    return Q @ K.T\n",
    "returns a list": "def dot_scores(Q, K):\n    return (np.asarray(Q, float) @ np.asarray(K, float).T).tolist()\n",
    "hard-codes the worked example": "def dot_scores(Q, K):\n    return np.array([[2.0, 0.0, 1.0]])\n",
    "calls the reference": "import qkv.attention\ndef dot_scores(Q, K):\n    return qkv.attention.dot_scores(Q, K)\n",
    "is the reference": "from qkv.attention import dot_scores\n",
    "blank stub": BLANK.format(name="dot_scores", args="Q, K"),
}

SCALED_SCORES_MUTANTS = {
    "no sqrt(d_k)": "def scaled_scores(Q, K):\n    return dot_scores(Q, K)\n",
    "divides by d_k": "def scaled_scores(Q, K):\n    return dot_scores(Q, K) / np.shape(Q)[-1]\n",
    "divides by sqrt(n_k)": "def scaled_scores(Q, K):\n    return dot_scores(Q, K) / np.sqrt(len(K))\n",
    "multiplies by sqrt(d_k)": "def scaled_scores(Q, K):\n    return dot_scores(Q, K) * np.sqrt(np.shape(Q)[-1])\n",
    "returns None": "def scaled_scores(Q, K):\n    s = dot_scores(Q, K) / np.sqrt(np.shape(Q)[-1])\n",
    "hard-codes the worked example": "def scaled_scores(Q, K):\n    return np.array([[1.0, 0.0, 0.5]])\n",
    "calls the reference": ("import qkv.attention\ndef scaled_scores(Q, K):\n"
                            "    return qkv.attention.scaled_scores(Q, K)\n"),
    "blank stub": BLANK.format(name="scaled_scores", args="Q, K"),
}

ATTENTION_WEIGHTS_MUTANTS = {
    "no sqrt(d_k)": "def attention_weights(Q, K):\n    return softmax(dot_scores(Q, K), axis=-1)\n",
    "divides by d_k": "def attention_weights(Q, K):\n    return softmax(dot_scores(Q, K) / np.shape(Q)[-1])\n",
    "softmax over axis 0": "def attention_weights(Q, K):\n    return softmax(scaled_scores(Q, K), axis=0)\n",
    "raw scores normalised by their sum": """
def attention_weights(Q, K):
    s = scaled_scores(Q, K)
    return s / s.sum(axis=-1, keepdims=True)
""",
    "own softmax without the max (overflows)": """
def attention_weights(Q, K):
    e = np.exp(scaled_scores(Q, K))
    return e / e.sum(axis=-1, keepdims=True)
""",
    "transposed": "def attention_weights(Q, K):\n    return softmax(scaled_scores(K, Q), axis=0)\n",
    "hard-codes the worked example": "def attention_weights(Q, K):\n    return np.array([[0.506, 0.186, 0.308]])\n",
    "calls the reference": """
import qkv.attention
def attention_weights(Q, K):
    return qkv.attention.attention_weights(Q, K)
""",
    "calls the reference masked_softmax": """
from qkv.attention import masked_softmax
def attention_weights(Q, K):
    return masked_softmax(scaled_scores(Q, K))
""",
    "blank stub": BLANK.format(name="attention_weights", args="Q, K"),
}

ATTENTION_MUTANTS = {
    "no sqrt(d_k)": "def attention(Q, K, V):\n    return softmax(dot_scores(Q, K)) @ np.asarray(V, float)\n",
    "divides by d_k": """
def attention(Q, K, V):
    return softmax(dot_scores(Q, K) / np.shape(Q)[-1]) @ np.asarray(V, float)
""",
    "weights applied to K": "def attention(Q, K, V):\n    return attention_weights(Q, K) @ np.asarray(K, float)\n",
    "weights.T @ V": "def attention(Q, K, V):\n    return attention_weights(Q, K).T @ np.asarray(V, float)\n",
    "raw scores normalised by their sum": """
def attention(Q, K, V):
    s = dot_scores(Q, K)
    return (s / s.sum(axis=-1, keepdims=True)) @ np.asarray(V, float)
""",
    "softmax over axis 0": """
def attention(Q, K, V):
    return softmax(scaled_scores(Q, K), axis=0) @ np.asarray(V, float)
""",
    "returns the weights": "def attention(Q, K, V):\n    return attention_weights(Q, K)\n",
    "returns a list": "def attention(Q, K, V):\n    return (attention_weights(Q, K) @ np.asarray(V, float)).tolist()\n",
    "hard-codes the worked example": "def attention(Q, K, V):\n    return np.array([[5.68, 1.55]])\n",
    "calls the reference": ("import qkv.attention\ndef attention(Q, K, V):\n"
                            "    return qkv.attention.attention(Q, K, V)\n"),
    "is the reference": "from qkv.attention import attention\n",
    "blank stub": BLANK.format(name="attention", args="Q, K, V"),
}

PROJECT_QKV_MUTANTS = {
    "W.T": """
def project_qkv(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return X @ np.asarray(W_Q, float).T, X @ np.asarray(W_K, float).T, X @ np.asarray(W_V, float).T
""",
    "W_K for Q": """
def project_qkv(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return X @ np.asarray(W_K, float), X @ np.asarray(W_K, float), X @ np.asarray(W_V, float)
""",
    "Q and K swapped": """
def project_qkv(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return X @ np.asarray(W_K, float), X @ np.asarray(W_Q, float), X @ np.asarray(W_V, float)
""",
    "W @ X.T": """
def project_qkv(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return tuple((np.asarray(W, float).T @ X.T) for W in (W_Q, W_K, W_V))
""",
    "returns a list": """
def project_qkv(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return [X @ np.asarray(W, float) for W in (W_Q, W_K, W_V)]
""",
    "hard-codes the visible example": """
def project_qkv(X, W_Q, W_K, W_V):
    from qkv.checks import lesson02 as c
    return c.SMALL_X @ c.SMALL_W_Q, c.SMALL_X @ c.SMALL_W_K, c.SMALL_X @ c.SMALL_W_V
""",
    "calls the reference": """
import qkv.attention
def project_qkv(X, W_Q, W_K, W_V):
    return qkv.attention.project_qkv(X, W_Q, W_K, W_V)
""",
    "blank stub": BLANK.format(name="project_qkv", args="X, W_Q, W_K, W_V"),
}

SELF_ATTENTION_MUTANTS = {
    "W.T": """
def self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return attention(X @ np.asarray(W_Q).T, X @ np.asarray(W_K).T, X @ np.asarray(W_V).T)
""",
    "W_K for Q": """
def self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    return attention(X @ np.asarray(W_K), X @ np.asarray(W_K), X @ np.asarray(W_V))
""",
    "no sqrt(d_k)": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return softmax(Q @ K.T) @ V
""",
    "divides by d_k": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return softmax(Q @ K.T / Q.shape[1]) @ V
""",
    "weights applied to K": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return attention_weights(Q, K) @ K
""",
    "weights.T @ V": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return attention_weights(Q, K).T @ V
""",
    "softmax over axis 0": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return softmax(Q @ K.T / np.sqrt(Q.shape[1]), axis=0) @ V
""",
    "raw scores normalised by their sum": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    s = Q @ K.T
    return s / s.sum(axis=-1, keepdims=True) @ V
""",
    "returns the weights": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return attention_weights(Q, K)
""",
    "hard-codes the visible example": """
def self_attention(X, W_Q, W_K, W_V):
    from qkv.checks import lesson02 as c
    return attention(c.SMALL_X @ c.SMALL_W_Q, c.SMALL_X @ c.SMALL_W_K, c.SMALL_X @ c.SMALL_W_V)
""",
    "calls the reference": """
import qkv.attention
def self_attention(X, W_Q, W_K, W_V):
    return qkv.attention.self_attention(X, W_Q, W_K, W_V)
""",
    "calls the reference attention on its own projection": """
import qkv.attention
def self_attention(X, W_Q, W_K, W_V):
    return qkv.attention.attention(*project_qkv(X, W_Q, W_K, W_V))
""",
    "blank stub": BLANK.format(name="self_attention", args="X, W_Q, W_K, W_V"),
}

MUTANTS = {
    "dot_scores": (hidden.dot_scores, visible.dot_scores, DOT_SCORES_MUTANTS),
    "scaled_scores": (hidden.scaled_scores, visible.scaled_scores, SCALED_SCORES_MUTANTS),
    "attention_weights": (hidden.attention_weights, visible.attention_weights, ATTENTION_WEIGHTS_MUTANTS),
    "attention": (hidden.attention, visible.attention, ATTENTION_MUTANTS),
    "project_qkv": (hidden.project_qkv, visible.project_qkv, PROJECT_QKV_MUTANTS),
    "self_attention": (hidden.self_attention, visible.self_attention, SELF_ATTENTION_MUTANTS),
}
CASES = [(grade, name, source) for grade, (_, _, mutants) in MUTANTS.items() for name, source in mutants.items()]
IDS = [f"{grade}:{name}" for grade, name, _ in CASES]
# the visible checks are fixed examples; only a mutant tuned to them may slip through
VISIBLE_BLIND_SPOTS = {"hard-codes the visible example"}


@pytest.mark.parametrize("grade, name, source", CASES, ids=IDS)
def test_hidden_tests_reject_mutant(grade, name, source):
    assert_rejected(MUTANTS[grade][0], mutant(LESSON, grade, source))


@pytest.mark.parametrize("grade, name, source", [c for c in CASES if c[1] not in VISIBLE_BLIND_SPOTS],
                         ids=[i for i, c in zip(IDS, CASES) if c[1] not in VISIBLE_BLIND_SPOTS])
def test_visible_checks_reject_mutant(grade, name, source):
    assert_rejected(MUTANTS[grade][1], mutant(LESSON, grade, source))


def _hint(grade, name, check=None):
    hidden_check, visible_check, mutants = MUTANTS[grade]
    return assert_rejected(check or visible_check, mutant(LESSON, grade, mutants[name]))


def test_hints_name_the_likely_mistake():
    assert "not scaled: divide Q @ K.T by sqrt(d_k)" in _hint("scaled_scores", "no sqrt(d_k)")
    assert "divided by d_k; divide by its square root" in _hint("scaled_scores", "divides by d_k")
    assert "square root of the number of keys" in _hint("scaled_scores", "divides by sqrt(n_k)")
    assert "already divided by sqrt(d_k)" in _hint("dot_scores", "already scaled")
    assert "returned shape (3, 1); expected (1, 3)" in _hint("dot_scores", "transposed (K @ Q.T)")
    assert "calls qkv's reference `dot_scores`" in _hint("dot_scores", "calls the reference")
    assert "qkv's reference implementation, not yours" in _hint("dot_scores", "is the reference")
    assert "returned a list" in _hint("dot_scores", "returns a list")
    assert "returned None" in _hint("scaled_scores", "returns None")
    assert "is not written yet" in _hint("attention", "blank stub")
    assert "each column sums to 1 instead of each row" in _hint("attention_weights", "softmax over axis 0")
    assert "divided by their row sum, not a softmax" in _hint("attention_weights", "raw scores normalised by their sum")
    assert "exp overflowing" in _hint("attention_weights", "own softmax without the max (overflows)")
    assert "calls qkv's reference `masked_softmax`" in _hint("attention_weights", "calls the reference masked_softmax")
    assert "not scaled" in _hint("attention", "no sqrt(d_k)")
    # a wrong shape that is a known mistake's answer says which (issue 41)
    assert "expected (2, 6): the weights blend the keys" in _hint("attention", "weights applied to K")
    assert "expected (2, 6): these are the attention weights" in _hint("attention", "returns the weights")
    assert "this is X @ W.T" in _hint("project_qkv", "W.T")
    assert "this is X @ W.T" in _hint("project_qkv", "W.T", hidden.project_qkv)
    assert "this is X @ W.T" in _hint("self_attention", "W.T", hidden.self_attention)
    assert "blend the keys" in _hint("attention", "weights applied to K", hidden.attention)
    assert "weights are transposed" in _hint("attention", "weights.T @ V", hidden.attention)
    assert "Q was made with W_K" in _hint("project_qkv", "W_K for Q")
    assert "expected a tuple (Q, K, V)" in _hint("project_qkv", "returns a list")
    assert "Q was made with W_K" in _hint("self_attention", "W_K for Q")
    assert "calls qkv's reference `attention`" in _hint("self_attention",
                                                        "calls the reference attention on its own projection")


def test_square_inputs_name_the_transposition_mistakes():
    """When shapes cannot tell (n_q = n_k = d_k = d_v), the diagnosis still names the mistake."""
    rng = np.random.default_rng(3)
    Qs, Ks, Vs = (rng.normal(size=(4, 4)) for _ in range(3))
    cases = [("weights applied to K", "blend the keys"), ("weights.T @ V", "weights are transposed"),
             ("returns the weights", "these are the attention weights")]
    for name, text in cases:
        fn = mutant(LESSON, "attention", ATTENTION_MUTANTS[name])
        assert text in assert_rejected(lambda f: check_against(f, attention.attention, (Qs, Ks, Vs),
                                                               diagnoses=visible.ATTENTION_MISTAKES,
                                                               allowed=visible.TOOLS), fn)
    fn = mutant(LESSON, "attention_weights", ATTENTION_WEIGHTS_MUTANTS["transposed"])
    assert "transposed" in assert_rejected(lambda f: check_against(f, attention.attention_weights, (Qs, Ks),
                                                                   diagnoses=visible.ATTENTION_WEIGHTS_MISTAKES,
                                                                   allowed=visible.TOOLS), fn)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "dot_scores": {
        "double loop": """
def dot_scores(Q, K):
    return np.array([[sum(a * b for a, b in zip(q, k)) for k in K] for q in Q], dtype=float)
""",
        "einsum": ("def dot_scores(Q, K):\n"
                   "    return np.einsum('id,jd->ij', np.asarray(Q, float), np.asarray(K, float))\n"),
        "float32 throughout": """
def dot_scores(Q, K):
    return np.asarray(Q, np.float32) @ np.asarray(K, np.float32).T
""",
        "np.dot with transpose": "def dot_scores(Q, K):\n    return np.dot(Q, np.transpose(K))\n",
    },
    "scaled_scores": {
        "loops": """
import math
def scaled_scores(Q, K):
    d_k = len(Q[0])
    return np.array([[sum(a * b for a, b in zip(q, k)) / math.sqrt(d_k) for k in K] for q in Q])
""",
        "einsum, own scale": """
def scaled_scores(Q, K):
    Q, K = np.asarray(Q, float), np.asarray(K, float)
    return np.einsum('id,jd->ij', Q / Q.shape[1] ** 0.25, K / K.shape[1] ** 0.25)
""",
    },
    "attention_weights": {
        "row by row": """
def attention_weights(Q, K):
    return np.array([softmax(row) for row in scaled_scores(Q, K)])
""",
        "own stable softmax": """
def attention_weights(Q, K):
    s = scaled_scores(Q, K)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
""",
        "float32 throughout": """
def attention_weights(Q, K):
    Q, K = np.asarray(Q, np.float32), np.asarray(K, np.float32)
    return softmax(Q @ K.T / np.float32(np.sqrt(Q.shape[1])), axis=-1)
""",
    },
    "attention": {
        "explicit loops": """
def attention(Q, K, V):
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    out = np.zeros((len(Q), V.shape[1]))
    for i, q in enumerate(Q):
        scores = np.array([sum(a * b for a, b in zip(q, k)) for k in K]) / np.sqrt(len(q))
        weights = softmax(scores)
        for j, v in enumerate(V):
            out[i] += weights[j] * v
    return out
""",
        "einsum": """
def attention(Q, K, V):
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    w = softmax(np.einsum('qd,kd->qk', Q, K) / np.sqrt(Q.shape[-1]), axis=-1)
    return np.einsum('qk,kv->qv', w, V)
""",
        "float32 throughout": """
def attention(Q, K, V):
    Q, K, V = (np.asarray(a, dtype=np.float32) for a in (Q, K, V))
    return softmax(Q @ K.T / np.sqrt(np.float32(Q.shape[-1]))) @ V
""",
    },
    "project_qkv": {
        "loop over tokens": """
def project_qkv(X, W_Q, W_K, W_V):
    rows = [np.asarray(x, float) for x in X]
    return tuple(np.array([x @ np.asarray(W, float) for x in rows]) for W in (W_Q, W_K, W_V))
""",
        "einsum": """
def project_qkv(X, W_Q, W_K, W_V):
    return tuple(np.einsum('td,dk->tk', np.asarray(X, float), np.asarray(W, float)) for W in (W_Q, W_K, W_V))
""",
        "np.matmul, float32 kept": """
def project_qkv(X, W_Q, W_K, W_V):
    return np.matmul(X, W_Q), np.matmul(X, W_K), np.matmul(X, W_V)
""",
    },
    "self_attention": {
        "inline": """
def self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    Q, K, V = X @ np.asarray(W_Q, float), X @ np.asarray(W_K, float), X @ np.asarray(W_V, float)
    return softmax(Q @ K.T / np.sqrt(Q.shape[1])) @ V
""",
        "loop over tokens": """
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = project_qkv(X, W_Q, W_K, W_V)
    return np.array([softmax(K @ q / np.sqrt(len(q))) @ V for q in Q])
""",
        "einsum, float32": """
def self_attention(X, W_Q, W_K, W_V):
    X, W_Q, W_K, W_V = (np.asarray(a, np.float32) for a in (X, W_Q, W_K, W_V))
    Q, K, V = (np.einsum('td,dk->tk', X, W) for W in (W_Q, W_K, W_V))
    return np.einsum('qk,kv->qv', softmax(np.einsum('qd,kd->qk', Q, K) / np.sqrt(np.float32(Q.shape[1]))), V)
""",
    },
}
VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_and_visible_tests_accept_correct_variant(grade, name, source, repeat):
    fn = mutant(LESSON, grade, source)
    with draws_of(LESSON, f"draw-{repeat}"):  # hidden: each repeat draws as a student of its own
        MUTANTS[grade][0](fn)
    MUTANTS[grade][1](fn)


def test_perfect_student_passes_every_hidden_test_and_answer():
    ns = student(LESSON)
    assert ns["softmax"] is attention.softmax  # the tool handed out in the import cell
    for grade, (hidden_check, visible_check, _) in MUTANTS.items():
        hidden_check(ns[grade])
        visible_check(ns[grade])
    for name in hidden.ANSWERS:
        hidden.answer(name, ns[name])


def test_wrong_answers_are_rejected():
    for name, wrong in [("score_shape", "a"), ("dot_products", 25), ("dot_products", 50), ("dot_products", 6400),
                        ("scale_d128", 8), ("scale_d128", 64), ("scale_d128", 128), ("is_symmetric", "a"),
                        ("is_symmetric", None), ("scale_d128", None)]:
        assert_rejected(lambda v, name=name: hidden.answer(name, v), wrong)
