"""Visible checks for lesson 03, why attention divides by sqrt(d_k)."""
import numpy as np

from qkv import attention as ref_attention, scaling
from qkv.checking import Check, Hint, call, call_text, check_against, close, expect_number, seal

# The lesson hands out the library's softmax; every other step is the student's own.
TOOLS = (ref_attention.softmax,)


# ---------------------------------------------------------------- dot_product_variance

def _draw(d_k, n_samples, rng):
    # the draw the exercise prescribes: all of q, then all of k, from the generator given
    return rng.standard_normal((n_samples, d_k)), rng.standard_normal((n_samples, d_k))


def _dots(d_k, n_samples, rng):
    q, k = _draw(d_k, n_samples, rng)
    return np.sum(q * k, axis=1)


VARIANCE_MISTAKES = [
    (lambda d, n, rng: np.var(np.sum(np.multiply(*_draw(d, n, rng)), axis=0)),
     "the products are summed over the samples (axis 0), not over the d_k components of each pair: each "
     "dot product q.k sums over axis 1 (or -1), and the variance is taken over the n_samples of them."),
    (lambda d, n, rng: np.var(np.multiply(*_draw(d, n, rng))),
     "this is the variance of the single products q_i k_i (about 1), not of the dot products: sum each row "
     "of q * k first (axis 1), then take the variance over the samples."),
    (lambda d, n, rng: np.var(np.matmul(*(lambda q, k: (q, k.T))(*_draw(d, n, rng)))),
     "this is the variance of q @ k.T, every query against every key; the exercise pairs row i of q with "
     "row i of k only: np.sum(q * k, axis=1)."),
    (lambda d, n, rng: np.std(_dots(d, n, rng)),
     "this is the standard deviation (np.std); the exercise asks for the variance (np.var)."),
    (lambda d, n, rng: np.var(_dots(d, n, rng) / np.sqrt(d)),
     "the dot products are already divided by sqrt(d_k); this function measures the raw, unscaled q.k."),
    (lambda d, n, rng: np.mean(_dots(d, n, rng) ** 2),
     "this is the mean of the squared dot products; the variance subtracts their sample mean first "
     "(np.var does it for you)."),
]

IGNORES_GENERATOR = ("two generators made with the same seed gave different results, so q and k are not "
                     "drawn from `rng`: use rng.standard_normal(...), not np.random.* or a new "
                     "np.random.default_rng().")
FIXED_GENERATOR = ("generators with different seeds gave exactly the same result, so the answer does not "
                   "depend on the `rng` you are given: draw q and k from it rather than from a generator "
                   "with a fixed seed of your own.")


def _variance_shown(d_k, n_samples, seed):
    return f"dot_product_variance({d_k}, {n_samples}, np.random.default_rng({seed}))"


def variance_result(student_fn, d_k, n_samples, seed):
    """The student's variance for a fresh generator with this seed, validated as one finite number."""
    shown = _variance_shown(d_k, n_samples, seed)
    generator = np.random.default_rng(seed)
    try:
        raw = call(student_fn, d_k, n_samples, generator, name="dot_product_variance", allowed=TOOLS)
    except Hint as hint:  # name the generator by its seed rather than by its address
        raise Hint(str(hint).replace(call_text("dot_product_variance", (d_k, n_samples, generator)), shown)) from None
    if raw is None:
        raise Hint(f"{shown} returned None; expected a number. Is a `return` missing?")
    return expect_number(raw, f"the result of {shown}")


def _right_answers(d_k, n_samples, seed):
    expected = scaling.dot_product_variance(d_k, n_samples, np.random.default_rng(seed))
    unbiased = expected * n_samples / (n_samples - 1) if n_samples > 1 else expected
    return expected, unbiased


def _confirming_seeds(seed):
    return (seed, seed + 7919, seed + 104729)


def _variance_mistake_confirmed(student_fn, index, d_k, n_samples, seed, got, right_answers):
    """True when the student's numbers are mistake `index`'s on two seeds where that mistake differs from
    the right answer (np.var, ddof 0 or 1, `right_answers` by seed) and from every other listed mistake."""
    evidence = 0
    for attempt, case_seed in enumerate(_confirming_seeds(seed)):
        mistaken = [fn(d_k, n_samples, np.random.default_rng(case_seed)) for fn, _ in VARIANCE_MISTAKES]
        if any(close(mistaken[index], right) for right in right_answers[case_seed]):
            continue
        if any(close(mistaken[index], other, 1e-4, 1e-6) for i, other in enumerate(mistaken) if i != index):
            continue
        value = got if attempt == 0 else variance_result(student_fn, d_k, n_samples, case_seed)
        if not close(value, mistaken[index], 1e-4, 1e-6):
            return False
        evidence += 1
        if evidence >= 2:
            return True
    return False


def compare_variance(student_fn, d_k, n_samples, seed):
    """Same seed, same draw: the student's number must equal the reference's (np.var, ddof 0 or 1)."""
    got = variance_result(student_fn, d_k, n_samples, seed)
    # the right answers on the seeds a diagnosis is confirmed on too, whatever the student answered: the student
    # edition replays the reference from what it was asked with a right answer (qkv_edition.fixtures)
    right_answers = {case_seed: _right_answers(d_k, n_samples, case_seed) for case_seed in _confirming_seeds(seed)}
    expected, unbiased = right_answers[seed]
    if close(got, expected) or close(got, unbiased):
        return got
    shown = _variance_shown(d_k, n_samples, seed)
    for index, (mistake_fn, hint) in enumerate(VARIANCE_MISTAKES):
        mistaken = mistake_fn(d_k, n_samples, np.random.default_rng(seed))
        if (close(got, mistaken, 1e-4, 1e-6)
                and _variance_mistake_confirmed(student_fn, index, d_k, n_samples, seed, got, right_answers)):
            raise Hint(f"{shown} is wrong: {hint}")
    raise Hint(f"{shown} returned {got:.6g}; drawing q then k from that generator as the docstring says "
               f"gives {expected:.6g}. Check the order of the draws (all of q, then all of k) and their "
               f"shapes (n_samples, d_k).")


SEED_IGNORED = ("generators with different seeds gave exactly the same result, so the answer does not depend on "
                "the `rng` you are given: draw q and k from it.")


def _looks_measured(value, d_k, n_samples):
    """A sample variance of n_samples dot products of d_k-dim unit normals: within 5 standard errors of d_k
    (E(q.k)^4 = 3 d^2 + 6 d, so the error is sqrt((2 d^2 + 6 d) / n)), and not exactly the theoretical d_k."""
    return value != d_k and abs(value - d_k) < 5 * np.sqrt((2.0 * d_k ** 2 + 6.0 * d_k) / n_samples)


def uses_the_generator(student_fn, d_k, n_samples, seed, other_seed):
    first = variance_result(student_fn, d_k, n_samples, seed)
    again = variance_result(student_fn, d_k, n_samples, seed)
    if first != again:
        raise Hint(f"{_variance_shown(d_k, n_samples, seed)}: {IGNORES_GENERATOR}")
    other = variance_result(student_fn, d_k, n_samples, other_seed)
    if other == first:
        # "a fixed seed of your own" only when it is certain: on a second size too, the number ignores the seed
        # yet looks like a real measurement (not a constant, not the theoretical d_k)
        d_k2, n2 = d_k + 3, 2 * n_samples
        second = variance_result(student_fn, d_k2, n2, seed)
        certain = (_looks_measured(first, d_k, n_samples) and _looks_measured(second, d_k2, n2)
                   and variance_result(student_fn, d_k2, n2, other_seed) == second)
        raise Hint(f"{_variance_shown(d_k, n_samples, seed)}: {FIXED_GENERATOR if certain else SEED_IGNORED}")


def dot_product_variance(student_fn):
    uses_the_generator(student_fn, 8, 500, 0, 1)
    for d_k, n_samples, seed in [(16, 2000, 0), (3, 50, 1), (1, 10, 2)]:
        compare_variance(student_fn, d_k, n_samples, seed)
    got = compare_variance(student_fn, 64, 20000, 3)
    print(f"dot_product_variance: all visible checks passed; at d_k = 64 you measured {got:.2f}.")


# ---------------------------------------------------------------- scale_for_unit_variance

SCALE_MISTAKES = [
    (lambda d: 1.0 / d, "this is 1/d_k. Multiplying q.k by c multiplies its variance by c^2, so 1/d_k leaves a "
                        "variance of 1/d_k, not 1: the factor is 1/sqrt(d_k)."),
    (lambda d: np.sqrt(d), "this is sqrt(d_k), the number attention divides by; return the factor the scores "
                           "are multiplied by, 1/sqrt(d_k)."),
    (lambda d: float(d), "this is d_k itself; the factor that brings a variance of d_k back to 1 is 1/sqrt(d_k)."),
    (lambda d: 1.0 / d ** 2, "this is 1/d_k^2; the factor is 1/sqrt(d_k), because variance scales with the "
                             "square of the factor."),
]

SCALE_FOR_UNIT_VARIANCE = Check(name="scale_for_unit_variance", diagnoses=SCALE_MISTAKES, allowed=TOOLS)


def scale_for_unit_variance(student_fn):
    for d_k in (64, 2, 128, np.int64(32)):  # a numpy integer is a whole number too
        check_against(student_fn, scaling.scale_for_unit_variance, (d_k,), declared=SCALE_FOR_UNIT_VARIANCE)
    print("scale_for_unit_variance: all visible checks passed.")


# ---------------------------------------------------------------- entropy

ENTROPY_ZERO_HINT = ("0 * log(0) gave NaN. The term of a zero weight is 0 by definition (w log w -> 0 as w -> 0): "
                     "leave zero weights out, e.g. with np.where(w > 0, ..., 0) or a mask.")

ENTROPY_MISTAKES = [
    (lambda w: scaling.entropy(w) / np.log(2),
     "this is the entropy in bits (log base 2); the exercise measures it in nats: use the natural log, np.log."),
    (lambda w: scaling.entropy(w) / np.log(10),
     "this is the entropy with log base 10; the exercise measures it in nats: use the natural log, np.log."),
    (lambda w: -scaling.entropy(w),
     "the sign is flipped: log w is negative for weights below 1, so the entropy is MINUS the sum of w log w."),
    (lambda w: scaling.entropy(w, axis=0),
     "the sum runs over axis 0; each row (the last axis) is one distribution, so sum along axis -1."),
    (lambda w: scaling.entropy(w) / np.shape(w)[-1],
     "this is the mean of -w log w; the entropy is their sum."),
]

ENTROPY = Check(name="entropy", diagnoses=ENTROPY_MISTAKES, nonfinite_hint=ENTROPY_ZERO_HINT, allowed=TOOLS)


def check_entropy(student_fn, weights):
    """check_against, with the axis named when a batch of rows comes back with the wrong shape."""
    try:
        check_against(student_fn, scaling.entropy, (weights,), declared=ENTROPY)
    except Hint as hint:
        named = any(cause in str(hint) for _, cause in ENTROPY_MISTAKES)  # the axis is already said
        if np.ndim(weights) > 1 and not named and ("returned shape" in str(hint) or "single number" in str(hint)):
            raise Hint(f"{hint} Each row (the last axis) is one set of weights and gets its own entropy: "
                       f"sum along axis=-1 only.") from None
        raise


ENTROPY_BATCHES = np.stack([np.full((3, 5), 0.2),
                            [[0.0, 0.0, 1.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.6, 0.1], [0.6, 0.1, 0.1, 0.1, 0.1]]])


def entropy(student_fn):
    check_entropy(student_fn, np.array([0.5, 0.5]))
    check_entropy(student_fn, np.array([0.7, 0.2, 0.1]))
    check_entropy(student_fn, np.array([0.0, 1.0, 0.0]))
    check_entropy(student_fn, np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5]]))
    # a batch of batches [2, 3, 5] (one row one-hot: an entropy of 0 beside others), and float32 in, float32 out
    check_entropy(student_fn, ENTROPY_BATCHES)
    check_entropy(student_fn, np.array([[0.6, 0.3, 0.1, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]], dtype=np.float32))
    print(f"entropy: all visible checks passed; uniform weights over 2 keys have {np.log(2):.4f} nats.")


# ---------------------------------------------------------------- softmax_jacobian

def _from_weights(fn):
    return lambda scores: fn(ref_attention.softmax(np.asarray(scores, dtype=float)))


SOFTMAX_JACOBIAN_MISTAKES = [
    (_from_weights(np.diag),
     "only diag(s) is there: the outer-product term - s s^T is missing, so the off-diagonal entries "
     "(d s_i / d x_j = -s_i s_j) are 0 and the diagonal is s_i instead of s_i (1 - s_i)."),
    (_from_weights(lambda s: -np.outer(s, s)),
     "only - s s^T is there: add diag(s), the s_i of d s_i / d x_i = s_i (1 - s_i)."),
    (_from_weights(lambda s: np.outer(s, s) - np.diag(s)),
     "the sign is flipped: the Jacobian is diag(s) - s s^T, positive on the diagonal."),
    (_from_weights(lambda s: np.diag(s * (1 - s))),
     "the diagonal s_i (1 - s_i) is right but the off-diagonal entries are 0; they are -s_i s_j."),
    (lambda x: np.diag(np.asarray(x, float)) - np.outer(x, x),
     "this is diag(x) - x x^T of the scores themselves; use the weights s = softmax(scores)."),
    (_from_weights(lambda s: np.diag(s) - np.outer(s, s) / len(s)),
     "the outer product is divided by n; the Jacobian is exactly diag(s) - s s^T."),
    (_from_weights(lambda s: np.diag(s[:, None]) - np.outer(s, s)),
     "np.diag of a column s [n, 1] does not build a diagonal matrix: it returns the diagonal of that [n, 1] array, "
     "the single number s_0, which is then added to every entry of - s s^T. Build diag from "
     "the flat vector, np.diag(s.ravel()) (s @ s.T on the column is the right outer product)."),
]

SOFTMAX_JACOBIAN_OVERFLOW = ("the softmax inside your Jacobian overflows on large scores: subtract the largest score "
                             "before np.exp, or use the `softmax` imported from qkv.attention, which does.")


def rows_sum_to_zero(got, args, kwargs):
    if not np.allclose(got.sum(axis=1), 0, atol=1e-5):
        return ("a row of the Jacobian does not sum to 0. The weights always sum to 1, so however the scores "
                "move, the changes of the weights cancel: each row (and column) must sum to 0.")
    return None


SOFTMAX_JACOBIAN = Check(name="softmax_jacobian", diagnoses=SOFTMAX_JACOBIAN_MISTAKES, allowed=TOOLS,
                         extra_checks=(rows_sum_to_zero,), nonfinite_hint=SOFTMAX_JACOBIAN_OVERFLOW)


def softmax_jacobian(student_fn):
    check_against(student_fn, scaling.softmax_jacobian, ([1.0, 2.0, 3.0],), declared=SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([0.5, -1.0, 2.0, 0.3]),),
                  declared=SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([0.0, 0.0]),), declared=SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([10.0, 20.0, 30.0]),),
                  # tiny entries judged relatively; 1 - s cancels, so float32 work is only good to ~1e-3
                  declared=SOFTMAX_JACOBIAN, atol=1e-9, rtol=5e-3)
    # scores spanning more than 709: softmax without its max overflows; and float32 in, float32 out
    check_against(student_fn, scaling.softmax_jacobian, (np.array([-760.0, 0.0, 1.5]),), declared=SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([800.0, 799.0, 0.0]),), declared=SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([0.5, -1.0, 2.0, 0.3, 1.2], dtype=np.float32),),
                  declared=SOFTMAX_JACOBIAN)
    print("softmax_jacobian: all visible checks passed.")


# ---------------------------------------------------------------- query_jacobian

def _scaled(q, K):
    return np.asarray(K, float) @ np.asarray(q, float) / np.sqrt(np.shape(q)[-1])


QUERY_JACOBIAN_MISTAKES = [
    (lambda q, K: scaling.query_jacobian(q, K).T,
     "it is transposed. Rows index the weights and columns the query components, J[i, j] = d w_i / d q_j: "
     "the chain rule gives J_softmax @ K / sqrt(d_k) (shape [n_k, d_k]), not K.T @ J_softmax / sqrt(d_k)."),
    (lambda q, K: scaling.query_jacobian(q, K, scale=1.0),
     "the 1/sqrt(d_k) is missing. The scores are K @ q / sqrt(d_k): use them inside the softmax AND multiply "
     "the chain-rule factor K by 1/sqrt(d_k)."),
    (lambda q, K: scaling.query_jacobian(q, K, scale=1.0) / np.sqrt(np.shape(q)[-1]),
     "the chain-rule factor K / sqrt(d_k) is there, but the softmax was taken of the unscaled scores K @ q; "
     "take it of K @ q / sqrt(d_k)."),
    (lambda q, K: scaling.query_jacobian(q, K) * np.sqrt(np.shape(q)[-1]),
     "the weights are right but the chain-rule factor is K instead of K / sqrt(d_k): the scores move by "
     "K / sqrt(d_k) per unit of the query."),
    (lambda q, K: scaling.query_jacobian(q, K, scale=1.0 / np.shape(q)[-1]),
     "the scores are divided by d_k; attention divides them by sqrt(d_k)."),
    (lambda q, K: np.diag(ref_attention.softmax(_scaled(q, K))) @ np.asarray(K, float) / np.sqrt(np.shape(q)[-1]),
     "the outer-product term of the softmax Jacobian is missing: use diag(w) - w w^T, not diag(w)."),
    (lambda q, K: scaling.softmax_jacobian(_scaled(q, K)),
     "this is the softmax Jacobian with respect to the scores; chain it with d scores / d q = K / sqrt(d_k)."),
]

QUERY_JACOBIAN = Check(name="query_jacobian", diagnoses=QUERY_JACOBIAN_MISTAKES, allowed=TOOLS)


def _transposed_shape(q, K):
    return f"returned shape ({np.shape(K)[1]}, {np.shape(K)[0]});"


def check_query_jacobian(student_fn, reference_fn, q, K, atol=QUERY_JACOBIAN.atol):
    """check_against, with a sharper hint for the transposed shape [d_k, n_k]; `atol` for an input that needs
    its own."""
    try:
        return check_against(student_fn, reference_fn, (q, K), declared=QUERY_JACOBIAN, atol=atol)
    except Hint as hint:
        if any(cause in str(hint) for _, cause in QUERY_JACOBIAN_MISTAKES):
            raise  # the wrong shape is a known mistake's, and says so
        if np.shape(K)[0] != np.shape(K)[1] and _transposed_shape(q, K) in str(hint):
            raise Hint(f"{hint} That is the transpose: rows index the {np.shape(K)[0]} weights and columns the "
                       f"{np.shape(K)[1]} query components, J[i, j] = d w_i / d q_j, so the chain rule reads "
                       f"J_softmax @ K / sqrt(d_k).") from None
        if np.shape(K)[0] != np.shape(K)[1] and f"returned shape ({np.shape(K)[0]}, {np.shape(K)[0]});" in str(hint):
            raise Hint(f"{hint} That is the shape of the softmax Jacobian with respect to the scores: chain it "
                       f"with d scores / d q = K / sqrt(d_k).") from None
        raise


def query_jacobian(student_fn):
    q = np.array([1.0, 0.0, 1.0, 0.0])
    K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    check_query_jacobian(student_fn, scaling.query_jacobian, q, K)
    square = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]])
    check_query_jacobian(student_fn, scaling.query_jacobian, np.array([0.5, -1.0, 1.0]), square)
    check_query_jacobian(student_fn, scaling.query_jacobian, np.array([0.5, -1.0, 1.0], dtype=np.float32),
                         square[:2].astype(np.float32))  # float32 in, float32 out
    # a component every key shares moves no weight: its column of the Jacobian is 0
    check_query_jacobian(student_fn, scaling.query_jacobian, np.array([0.5, -1.0, 1.0]), square * [1, 1, 0] + [0, 0, 5])
    print("query_jacobian: all visible checks passed.")


seal(__name__)
