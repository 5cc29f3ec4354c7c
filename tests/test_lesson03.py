"""Lesson 03: reference numbers, and the hidden tests against mutants and correct variants."""
import numpy as np
import pytest

from lessons import assert_rejected, each_draw, mutant, student
from qkv import attention, scaling
from qkv.checks import lesson03 as visible
from qkv_grading import lesson03 as hidden

LESSON = "03-scaling"


# ---------------------------------------------------------------- reference

def test_variance_of_unit_dot_products_grows_like_d_k_and_the_scale_brings_it_to_one():
    for d_k in (1, 16, 256):
        variance = scaling.dot_product_variance(d_k, 40_000, np.random.default_rng(d_k))
        assert variance == pytest.approx(d_k, rel=0.05)
        assert variance * scaling.scale_for_unit_variance(d_k) ** 2 == pytest.approx(1, rel=0.05)
    assert scaling.scale_for_unit_variance(64) == 0.125  # the seed's d_k = 64: divide by 8


def test_variance_is_reproducible_from_the_generator_alone():
    a = scaling.dot_product_variance(8, 100, np.random.default_rng(5))
    b = scaling.dot_product_variance(8, 100, np.random.default_rng(5))
    c = scaling.dot_product_variance(8, 100, np.random.default_rng(6))
    assert a == b and a != c


def test_softmax_of_the_seed_examples():
    assert np.allclose(attention.softmax([1.0, 2.0, 3.0]), [0.090, 0.245, 0.665], atol=5e-4)
    big = attention.softmax([10.0, 20.0, 30.0])
    assert np.allclose(big, [2.1e-9, 4.5e-5, 0.99995], rtol=0.03)


def test_entropy_in_nats_with_zero_weights():
    assert scaling.entropy([0.5, 0.5]) == pytest.approx(np.log(2))
    assert scaling.entropy(np.full(8, 1 / 8)) == pytest.approx(np.log(8))
    one_hot = scaling.entropy([[0.0, 1.0, 0.0]])
    assert np.all(np.isfinite(one_hot)) and one_hot[0] == 0.0 and not np.signbit(one_hot[0])
    with pytest.raises(ValueError, match="non-negative"):
        scaling.entropy([-0.1, 1.1])


def test_jacobians_match_finite_differences():
    rng = np.random.default_rng(0)
    x = rng.normal(size=5)
    assert np.allclose(scaling.softmax_jacobian(x), scaling.numerical_jacobian(attention.softmax, x), atol=1e-8)
    q, K = rng.normal(size=3), rng.normal(size=(5, 3))

    def weights_of(v):
        return attention.attention_weights(v[None, :], K)[0]

    assert np.allclose(scaling.query_jacobian(q, K), scaling.numerical_jacobian(weights_of, q), atol=1e-8)
    # the query Jacobian is not symmetric even when square: that is why the grader checks it
    square = rng.normal(size=(4, 4))
    J = scaling.query_jacobian(rng.normal(size=4), square)
    assert not np.allclose(J, J.T, atol=1e-3)


def test_saturation_and_vanishing_jacobian_without_scaling():
    stats = scaling.saturation_by_dimension([4, 512], 100, 16, np.random.default_rng(1))
    assert stats["max_unscaled"][1] > 0.9 > stats["max_scaled"][1]
    assert stats["entropy_unscaled"][1] < 0.3 < 2.0 < stats["entropy_scaled"][1]
    small, large = (np.linalg.norm(scaling.softmax_jacobian(s)) for s in ([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]))
    assert small > 0.3 and large < 1e-4


def test_library_rejects_wrong_shapes_with_a_message_naming_them():
    with pytest.raises(ValueError, match=r"keys must be \[n_k, d_k\] with d_k = 4.*\(3, 2\)"):
        scaling.query_jacobian(np.zeros(4), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="positive whole number"):
        scaling.scale_for_unit_variance(0)


# ---------------------------------------------------------------- mutants the hidden tests must reject

VARIANCE_MUTANTS = {
    "variance over the wrong axis": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return np.var(np.sum(q * k, axis=0))
""",
    "variance of the single products": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return np.var(q * k)
""",
    "ignores the generator: np.random": """
def dot_product_variance(d_k, n_samples, rng):
    q = np.random.standard_normal((n_samples, d_k))
    k = np.random.standard_normal((n_samples, d_k))
    return np.var(np.sum(q * k, axis=1))
""",
    "ignores the generator: a new default_rng()": """
def dot_product_variance(d_k, n_samples, rng):
    own = np.random.default_rng()
    q = own.standard_normal((n_samples, d_k))
    k = own.standard_normal((n_samples, d_k))
    return np.var(np.sum(q * k, axis=1))
""",
    "ignores the generator: a fixed seed of its own": """
def dot_product_variance(d_k, n_samples, rng):
    own = np.random.default_rng(0)
    q = own.standard_normal((n_samples, d_k))
    k = own.standard_normal((n_samples, d_k))
    return np.var(np.sum(q * k, axis=1))
""",
    "draws pairs interleaved": """
def dot_product_variance(d_k, n_samples, rng):
    dots = [rng.standard_normal(d_k) @ rng.standard_normal(d_k) for _ in range(n_samples)]
    return np.var(dots)
""",
    "scales the dot products": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return np.var(np.sum(q * k, axis=1) / np.sqrt(d_k))
""",
    "standard deviation": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return np.std(np.sum(q * k, axis=1))
""",
    "float32 draws (a different stream)": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k), dtype=np.float32)
    k = rng.standard_normal((n_samples, d_k), dtype=np.float32)
    return np.var(np.sum(q * k, axis=1))
""",
    "returns the theory": "def dot_product_variance(d_k, n_samples, rng):\n    return float(d_k)\n",
    "hard-codes the worked example": "def dot_product_variance(d_k, n_samples, rng):\n    return 63.93\n",
    "blank stub": ("def dot_product_variance(d_k, n_samples, rng):\n"
                   "    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    "returns None": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    variance = np.var(np.sum(q * k, axis=1))
""",
    "calls the reference": """
from qkv import scaling as _scaling
def dot_product_variance(d_k, n_samples, rng):
    return _scaling.dot_product_variance(d_k, n_samples, rng)
""",
    "is the reference": "from qkv.scaling import dot_product_variance\n",
}

SCALE_MUTANTS = {
    "divides by d_k": "def scale_for_unit_variance(d_k):\n    return 1.0 / d_k\n",
    "returns sqrt(d_k)": "def scale_for_unit_variance(d_k):\n    return np.sqrt(d_k)\n",
    "returns 1/d_k**2": "def scale_for_unit_variance(d_k):\n    return 1.0 / d_k ** 2\n",
    "hard-codes the worked example": "def scale_for_unit_variance(d_k):\n    return 0.125\n",
    "blank stub": "def scale_for_unit_variance(d_k):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": """
import qkv.scaling
def scale_for_unit_variance(d_k):
    return qkv.scaling.scale_for_unit_variance(d_k)
""",
}

ENTROPY_MUTANTS = {
    "log base 2": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(np.where(w > 0, w * np.log2(np.where(w > 0, w, 1)), 0), axis=-1)
""",
    "log base 10": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(np.where(w > 0, w * np.log10(np.where(w > 0, w, 1)), 0), axis=-1)
""",
    "0 log 0 gives NaN": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(w * np.log(w), axis=-1)
""",
    "sign flipped": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0), axis=-1)
""",
    "sums over axis 0": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0), axis=0)
""",
    "sums everything": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0))
""",
    "hard-codes the worked example": "def entropy(weights):\n    return np.log(2)\n",
    "blank stub": "def entropy(weights):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": """
from qkv.scaling import entropy as _entropy
def entropy(weights):
    return _entropy(weights)
""",
}

SOFTMAX_JACOBIAN_MUTANTS = {
    "no outer-product term": """
def softmax_jacobian(scores):
    return np.diag(softmax(np.asarray(scores, dtype=float)))
""",
    "diagonal only": """
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=float))
    return np.diag(s * (1 - s))
""",
    "no diag term": """
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=float))
    return -np.outer(s, s)
""",
    "sign flipped": """
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=float))
    return np.outer(s, s) - np.diag(s)
""",
    "uses the scores, not the weights": """
def softmax_jacobian(scores):
    x = np.asarray(scores, dtype=float)
    return np.diag(x) - np.outer(x, x)
""",
    "hard-codes the worked example": """
def softmax_jacobian(scores):
    s = softmax(np.array([1.0, 2.0, 3.0]))  # the worked example, whatever the input
    return np.diag(s) - np.outer(s, s)
""",
    "blank stub": "def softmax_jacobian(scores):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": """
from qkv import scaling as _s
def softmax_jacobian(scores):
    return _s.softmax_jacobian(scores)
""",
}

QUERY_JACOBIAN_MUTANTS = {
    "transposed (K.T @ J)": """
def query_jacobian(query, keys):
    d_k = len(query)
    return keys.T @ softmax_jacobian(keys @ query / np.sqrt(d_k)) / np.sqrt(d_k)
""",
    "transposed, filled by loops": """
def query_jacobian(query, keys):
    d_k = len(query)
    J = softmax_jacobian(keys @ query / np.sqrt(d_k))
    out = np.zeros((d_k, len(keys)))
    for i in range(len(keys)):
        for j in range(d_k):
            out[j, i] = sum(J[i, m] * keys[m, j] for m in range(len(keys))) / np.sqrt(d_k)
    return out.T if out.shape[0] != out.shape[1] else out
""",
    "no outer-product term": """
def query_jacobian(query, keys):
    d_k = len(query)
    w = softmax(keys @ query / np.sqrt(d_k))
    return np.diag(w) @ keys / np.sqrt(d_k)
""",
    "scales by d_k instead of sqrt(d_k)": """
def query_jacobian(query, keys):
    d_k = len(query)
    return softmax_jacobian(keys @ query / d_k) @ keys / d_k
""",
    "no scale at all": """
def query_jacobian(query, keys):
    return softmax_jacobian(keys @ query) @ keys
""",
    "forgets the chain-rule factor's scale": """
def query_jacobian(query, keys):
    d_k = len(query)
    return softmax_jacobian(keys @ query / np.sqrt(d_k)) @ keys
""",
    "stops at the scores": """
def query_jacobian(query, keys):
    return softmax_jacobian(keys @ query / np.sqrt(len(query)))
""",
    "hard-codes the worked example": """
_q = np.array([1.0, 0.0, 1.0, 0.0])
_K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
_J = softmax_jacobian(_K @ _q / 2) @ _K / 2  # the worked example, whatever the input
def query_jacobian(query, keys):
    return _J
""",
    "blank stub": "def query_jacobian(query, keys):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
    "calls the reference": """
import qkv.scaling
def query_jacobian(query, keys):
    return qkv.scaling.query_jacobian(query, keys)
""",
}

HIDDEN = {"dot_product_variance": hidden.dot_product_variance,
          "scale_for_unit_variance": hidden.scale_for_unit_variance, "entropy": hidden.entropy,
          "softmax_jacobian": hidden.softmax_jacobian, "query_jacobian": hidden.query_jacobian}
VISIBLE = {"dot_product_variance": visible.dot_product_variance,
           "scale_for_unit_variance": visible.scale_for_unit_variance, "entropy": visible.entropy,
           "softmax_jacobian": visible.softmax_jacobian, "query_jacobian": visible.query_jacobian}
MUTANTS = {"dot_product_variance": VARIANCE_MUTANTS, "scale_for_unit_variance": SCALE_MUTANTS,
           "entropy": ENTROPY_MUTANTS, "softmax_jacobian": SOFTMAX_JACOBIAN_MUTANTS,
           "query_jacobian": QUERY_JACOBIAN_MUTANTS}
CASES = [(grade, name, source) for grade, mutants in MUTANTS.items() for name, source in mutants.items()]


@pytest.mark.parametrize("grade, name, source", CASES, ids=[f"{g}:{n}" for g, n, _ in CASES])
def test_hidden_tests_reject_mutant(grade, name, source):
    # twice: the hidden tests draw fresh inputs, and a mutant must fail whatever the draw
    for _ in range(2):
        assert_rejected(HIDDEN[grade], mutant(LESSON, grade, source))


# Mutants the visible checks are not expected to catch: a hard-coded answer to a visible example is
# exactly what only unseen inputs can expose.
VISIBLE_MISSES = {("entropy", "hard-codes the worked example"), ("softmax_jacobian", "hard-codes the worked example"),
                  ("query_jacobian", "hard-codes the worked example")}


@pytest.mark.parametrize("grade, name, source", [c for c in CASES if c[:2] not in VISIBLE_MISSES],
                         ids=[f"{g}:{n}" for g, n, _ in CASES if (g, n) not in VISIBLE_MISSES])
def test_visible_checks_reject_mutant(grade, name, source):
    assert_rejected(VISIBLE[grade], mutant(LESSON, grade, source))


def test_a_transposed_query_jacobian_is_caught_on_square_keys_by_its_values():
    # every square case has the right shape, so only the values can expose the transpose
    fn = mutant(LESSON, "query_jacobian", QUERY_JACOBIAN_MUTANTS["transposed, filled by loops"])
    q, K = np.array([0.5, -1.0, 1.0]), np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]])
    message = assert_rejected(lambda f: visible.check_query_jacobian(f, scaling.query_jacobian, q, K), fn)
    assert "transposed" in message
    rectangular = mutant(LESSON, "query_jacobian", QUERY_JACOBIAN_MUTANTS["transposed (K.T @ J)"])
    message = assert_rejected(visible.query_jacobian, rectangular)
    # the wrong shape is the catalogued transposition's answer, so its hint says so (issue 41)
    assert "returned shape (4, 3)" in message and "it is transposed" in message


def test_hints_name_the_likely_mistake():
    def hint(grade, name, check=None):
        return assert_rejected(check or HIDDEN[grade], mutant(LESSON, grade, MUTANTS[grade][name]))

    assert "different results" in hint("dot_product_variance", "ignores the generator: np.random")
    assert "different results" in hint("dot_product_variance", "ignores the generator: a new default_rng()")
    assert "different seeds" in hint("dot_product_variance", "ignores the generator: a fixed seed of its own")
    assert "summed over the samples" in hint("dot_product_variance", "variance over the wrong axis")
    assert "order of the draws" in hint("dot_product_variance", "draws pairs interleaved")
    assert "is not written yet" in hint("dot_product_variance", "blank stub")
    assert "returned None" in hint("dot_product_variance", "returns None")
    assert "calls qkv's reference `dot_product_variance`" in hint("dot_product_variance", "calls the reference")
    assert "reference implementation, not yours" in hint("dot_product_variance", "is the reference")
    assert "1/sqrt(d_k)" in hint("scale_for_unit_variance", "divides by d_k", visible.scale_for_unit_variance)
    assert "bits" in hint("entropy", "log base 2", visible.entropy)
    assert "base 10" in hint("entropy", "log base 10", visible.entropy)
    assert "0 * log(0) gave NaN" in hint("entropy", "0 log 0 gives NaN", visible.entropy)
    assert "outer-product term" in hint("softmax_jacobian", "no outer-product term", visible.softmax_jacobian)
    assert "sum along axis -1" in hint("entropy", "sums over axis 0")
    assert "softmax Jacobian with respect to the scores" in hint("query_jacobian", "stops at the scores")
    assert "default_rng(" in hint("dot_product_variance", "calls the reference") and " at 0x" not in hint(
        "dot_product_variance", "calls the reference")
    assert "divided by d_k" in hint("query_jacobian", "scales by d_k instead of sqrt(d_k)", visible.query_jacobian)
    assert "1/sqrt(d_k) is missing" in hint("query_jacobian", "no scale at all", visible.query_jacobian)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "dot_product_variance": {
        "loops": """
def dot_product_variance(d_k, n_samples, rng):
    q = [rng.standard_normal(d_k) for _ in range(n_samples)]  # row by row: the same stream as one big draw
    k = [rng.standard_normal(d_k) for _ in range(n_samples)]
    dots = [sum(a * b for a, b in zip(q_row, k_row)) for q_row, k_row in zip(q, k)]
    mean = sum(dots) / n_samples
    return sum((x - mean) ** 2 for x in dots) / n_samples
""",
        "einsum, ddof=1": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    return np.var(np.einsum('nd,nd->n', q, k), ddof=1)
""",
        "one draw of shape (2, n, d), cast to float32": """
def dot_product_variance(d_k, n_samples, rng):
    q, k = rng.standard_normal((2, n_samples, d_k)).astype(np.float32)
    return np.var((q * k).sum(axis=-1, dtype=np.float64))
""",
        "rng.normal, returns a 0-d array": """
def dot_product_variance(d_k, n_samples, rng):
    q = rng.normal(0.0, 1.0, size=(n_samples, d_k))
    k = rng.normal(size=(n_samples, d_k))
    return np.asarray(((q * k).sum(1) - (q * k).sum(1).mean()) @ ((q * k).sum(1) - (q * k).sum(1).mean()) / n_samples)
""",
    },
    "scale_for_unit_variance": {
        "power": "def scale_for_unit_variance(d_k):\n    return d_k ** -0.5\n",
        "math.sqrt": "import math\ndef scale_for_unit_variance(d_k):\n    return 1 / math.sqrt(d_k)\n",
        "float32": "def scale_for_unit_variance(d_k):\n    return np.float32(1) / np.sqrt(np.float32(d_k))\n",
    },
    "entropy": {
        "masking with a loop": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    flat = w.reshape(-1, w.shape[-1])
    out = np.zeros(len(flat))
    for r, row in enumerate(flat):
        for p in row:
            if p > 0:
                out[r] -= p * np.log(p)
    return out.reshape(w.shape[:-1])
""",
        "np.log with where=": """
def entropy(weights):
    w = np.asarray(weights)
    logs = np.log(w, out=np.zeros_like(w), where=w > 0)
    return -(w * logs).sum(axis=-1)
""",
        "np.where on the terms (warns, still right)": """
def entropy(weights):
    w = np.asarray(weights, dtype=float)
    with np.errstate(divide='ignore', invalid='ignore'):
        terms = np.where(w > 0, w * np.log(w), 0.0)
    return -terms.sum(axis=-1)
""",
        "float32, einsum": """
def entropy(weights):
    w = np.asarray(weights, dtype=np.float32)
    return -np.einsum('...i,...i->...', w, np.log(np.maximum(w, np.float32(1e-30))))
""",
    },
    "softmax_jacobian": {
        "loops": """
def softmax_jacobian(scores):
    s = softmax(np.array(scores, dtype=float))
    n = len(s)
    J = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            J[i, j] = s[i] * ((1.0 if i == j else 0.0) - s[j])
    return J
""",
        "einsum, float32": """
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, dtype=np.float32))
    return np.einsum('i,ij->ij', s, np.eye(len(s), dtype=np.float32)) - np.einsum('i,j->ij', s, s)
""",
        "its own softmax": """
def softmax_jacobian(scores):
    x = np.asarray(scores, dtype=float)
    e = np.exp(x - x.max())
    s = e / e.sum()
    return np.diag(s) - s[:, None] * s[None, :]
""",
    },
    "query_jacobian": {
        "loops": """
def query_jacobian(query, keys):
    d_k, n_k = len(query), len(keys)
    J = softmax_jacobian(np.asarray(keys) @ np.asarray(query) / np.sqrt(d_k))
    out = np.zeros((n_k, d_k))
    for i in range(n_k):
        for j in range(d_k):
            out[i, j] = sum(J[i, m] * keys[m][j] for m in range(n_k)) / np.sqrt(d_k)
    return out
""",
        "einsum, weights written out": """
def query_jacobian(query, keys):
    scale = 1 / np.sqrt(query.shape[-1])
    w = softmax(np.einsum('nd,d->n', keys, query) * scale)
    return (np.einsum('i,id->id', w, keys) - np.einsum('i,j,jd->id', w, w, keys)) * scale
""",
        "the transpose of (K.T @ J), J symmetric": """
def query_jacobian(query, keys):
    scale = len(query) ** -0.5
    return (keys.T @ softmax_jacobian(keys @ query * scale)).T * scale
""",
        "float32": """
def query_jacobian(query, keys):
    q, K = np.asarray(query, np.float32), np.asarray(keys, np.float32)
    scale = np.float32(1 / np.sqrt(len(q)))
    return softmax_jacobian(K @ q * scale).astype(np.float32) @ K * scale
""",
        "its own finite differences": """
def query_jacobian(query, keys):
    q, K, h = np.asarray(query, float), np.asarray(keys, float), 1e-6
    f = lambda v: softmax(K @ v / np.sqrt(len(q)))
    return np.stack([(f(q + h * e) - f(q - h * e)) / (2 * h) for e in np.eye(len(q))], axis=1)
""",
    },
}

VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]


@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_and_visible_tests_accept_correct_variant(grade, name, source):
    fn = mutant(LESSON, grade, source)
    for _ in each_draw(LESSON):  # three students' draws
        HIDDEN[grade](fn)
    VISIBLE[grade](fn)


def test_perfect_student_passes_every_hidden_test_and_answer():
    ns = student(LESSON)
    for grade, check in HIDDEN.items():
        check(ns[grade])
    for name in hidden.ANSWERS:
        hidden.answer(name, ns[name])


def test_wrong_answers_are_rejected():
    assert_rejected(lambda v: hidden.answer("why_scale", v), "c")
    assert_rejected(lambda v: hidden.answer("without_scaling", v), "a")
    assert_rejected(lambda v: hidden.answer("variance_at_128", v), np.sqrt(128))
    assert_rejected(lambda v: hidden.answer("entropy_uniform_8", v), 3.0)  # log2(8): bits, not nats
    assert_rejected(lambda v: hidden.answer("entropy_uniform_8", v), None)


def test_widget_builds_and_draws_with_the_students_functions():
    ns = student(LESSON)
    calls = []

    def scale(d_k):
        calls.append(d_k)
        return ns["scale_for_unit_variance"](d_k)

    from qkv import widgets
    box = widgets.scaling_explorer(scale, ns["entropy"], n_keys=5, max_d_k=256)
    box.children[0].value = 256
    assert 256 in calls


# ---------------------------------------------------------------- issue 8, item 3: a named diagnosis is certain

def test_a_fixed_seed_of_its_own_is_named_only_when_certain():
    fixed = mutant(LESSON, "dot_product_variance",
                   MUTANTS["dot_product_variance"]["ignores the generator: a fixed seed of its own"])
    assert "fixed seed of your own" in assert_rejected(visible.dot_product_variance, fixed)
    # the same seed-blindness, but a constant: no claim about a seed of its own
    constant = mutant(LESSON, "dot_product_variance",
                      "def dot_product_variance(d_k, n_samples, rng):\n    return 7.5\n")
    message = assert_rejected(visible.dot_product_variance, constant)
    assert "does not depend on the `rng`" in message and "fixed seed of your own" not in message


def test_a_variance_mistake_is_named_only_when_a_second_seed_confirms_it():
    wrong_axis = mutant(LESSON, "dot_product_variance", MUTANTS["dot_product_variance"]["variance over the wrong axis"])
    assert "summed over the samples" in assert_rejected(visible.dot_product_variance, wrong_axis)
    # right on every seed but one, where it gives exactly what the wrong axis gives: the generic hint
    source = '''
def dot_product_variance(d_k, n_samples, rng):
    q = rng.standard_normal((n_samples, d_k))
    k = rng.standard_normal((n_samples, d_k))
    axis = 0 if (d_k, n_samples) == (16, 2000) and abs(q[0, 0] - 0.12573022) < 1e-6 else 1
    return float(np.var(np.sum(q * k, axis=axis)))
'''
    once = mutant(LESSON, "dot_product_variance", source)
    message = assert_rejected(visible.dot_product_variance, once)
    assert "summed over the samples" not in message and "order of the draws" in message, message
