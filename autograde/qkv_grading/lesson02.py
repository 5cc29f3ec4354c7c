"""Hidden tests for lesson 02, designed from each function's contract: fresh random inputs, mostly non-square
(n_q != n_k, d_k != d_v, and one draw where every size differs) so that transposes and wrong axes cannot hide,
plus float32, lists of lists, integer inputs, a single key, scores far beyond exp's range, a near tie between
two large scores and tiny scores (near-uniform weights)."""
import numpy as np

from qkv import attention as ref_attention
from qkv.checks import lesson02 as visible
from qkv.checking import check_against, seal
from qkv_grading import answer_of, distinct_sizes, fresh_rng

# withheld from the student's kernel while this lesson is graded: each computes a graded answer (softmax is a
# tool handed out by the lesson)
GRADED_REFERENCES = ("qkv.attention.dot_scores", "qkv.attention.scaled_scores", "qkv.attention.attention_weights",
                     "qkv.attention.attention", "qkv.attention.project_qkv", "qkv.attention.self_attention",
                     "qkv.attention.masked_softmax")

# (n_q, n_k, d_k, d_v): a square case first, where a transposed answer has the right shape and so gets
# its diagnosis; then non-square ones, where no transposition or wrong axis can pass
SHAPES = [(4, 4, 4, 4), (3, 5, 4, 2), (6, 2, 8, 3), (1, 7, 16, 5)]


def _large_scores(rng):
    # orthogonal directions of length 60: query i meets key i head on (scaled score ~ 60*60/sqrt(6) ~ 1470,
    # beyond the 709 where a naive exp overflows) and every other key at a score near 0, so the weights are
    # one-hot by a wide margin and float32 rounding of the large scores cannot move them
    directions, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    Q = 60 * directions[:3]
    K = 60 * directions[[0, 1, 2, 3]] + 0.5 * rng.normal(size=(4, 6))
    return Q, K


def _near_tie(rng):
    """Two keys whose scaled scores with the query are both near 1000 and differ by 0.5: the weights are
    0.62 / 0.38, not one-hot, so an argmax (or a float32 rounding of the big scores' difference) shows."""
    query = np.zeros((1, 4))
    query[0, 0] = 10.0
    keys = np.array([[200.0, 1.0, 0.0, 0.0], [199.9, 0.0, 5.0, 0.0], [0.0, 0.0, 0.0, 9.0]])
    return query, keys


def _query_key_cases(rng, large=False):
    n_q, n_k, d_k = distinct_sizes(rng, 3)
    cases = [(rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k))) for n_q, n_k, d_k, _ in SHAPES]
    cases.append((rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k))))  # drawn: all three sizes differ
    cases.append((rng.normal(size=(n_k, d_k)) * 1e-3, rng.normal(size=(n_q, d_k))))  # tiny scores: near-uniform weights
    Q, K = rng.normal(size=(2, 3)), rng.normal(size=(5, 3))
    cases += [
        (Q.astype(np.float32), K.astype(np.float32)),
        (Q.tolist(), K.tolist()),
        (rng.integers(-3, 4, size=(3, 2)), rng.integers(-3, 4, size=(4, 2))),  # integer inputs
        (rng.normal(size=(3, 4)), rng.normal(size=(1, 4))),  # a single key
    ]
    # after the softmax only: raw scores this large carry float32 rounding errors above the tolerance
    return cases + [_large_scores(rng), _near_tie(rng)] if large else cases


def _attention_cases(rng):
    cases = [tuple(rng.normal(size=(4, 4)) for _ in range(3))]  # square everywhere, diagnosed first
    for (Q, K) in _query_key_cases(rng, large=True):
        n_k, d_v = np.shape(K)[0], int(rng.integers(2, 6))
        if d_v == np.shape(K)[1]:
            d_v += 1  # keep d_v != d_k
        V = rng.normal(size=(n_k, d_v))
        if isinstance(Q, list):
            V = V.tolist()
        elif np.asarray(Q).dtype == np.float32:
            V = V.astype(np.float32)
        cases.append((Q, K, V))
    return cases


# fixed, so that a mistake is caught on every draw: square (a transpose keeps the shape and is named), then
# n_q != n_k and d_k != d_v
FIXED_QK = [(np.arange(16.0).reshape(4, 4) % 5 - 2, np.arange(16.0).reshape(4, 4)[::-1] % 3 - 1),
            (visible.SMALL_Q, visible.SMALL_K)]


# rows of very different size, fixed: query 1's scaled scores reach 900 while queries 0 and 2 stay near 0, so a softmax
# shifted by the matrix's one maximum gives 0/0 on rows 0 and 2
UNEVEN_QK = (np.array([[0.2, -0.1, 0.3, 0.0], [40.0, 50.0, 0.0, 0.0], [0.0, 0.1, 0.0, 0.2]]),
             np.array([[20.0, 25.0, 1.0, 0.0], [24.0, 20.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 2.0, -1.0]]))
UNEVEN_V = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.0], [2.0, 1.0]])


def dot_scores(student_dot_scores):
    for args in FIXED_QK + _query_key_cases(fresh_rng()):
        check_against(student_dot_scores, ref_attention.dot_scores, args, declared=visible.DOT_SCORES)


def scaled_scores(student_scaled_scores):
    for args in FIXED_QK + _query_key_cases(fresh_rng()):
        check_against(student_scaled_scores, ref_attention.scaled_scores, args, declared=visible.SCALED_SCORES)


def attention_weights(student_attention_weights):
    for args in _query_key_cases(fresh_rng(), large=True) + [UNEVEN_QK]:
        check_against(student_attention_weights, ref_attention.attention_weights, args,
                      declared=visible.ATTENTION_WEIGHTS)


def attention(student_attention):
    for args in _attention_cases(fresh_rng()) + [(*UNEVEN_QK, UNEVEN_V)]:
        check_against(student_attention, ref_attention.attention, args, declared=visible.ATTENTION)


def _projection_cases(rng):
    # (T, d_model, d_k, d_v); the first is square so that X @ W.T has the right shape and is diagnosed
    cases = []
    for T, d_model, d_k, d_v in [(4, 4, 4, 4), (5, 6, 4, 3), (2, 8, 8, 2), (1, 5, 3, 4), distinct_sizes(rng, 4, 2, 10)]:
        cases.append((rng.normal(size=(T, d_model)), rng.normal(size=(d_model, d_k)),
                      rng.normal(size=(d_model, d_k)), rng.normal(size=(d_model, d_v))))
    X, W_Q, W_K, W_V = rng.normal(size=(3, 5)), *(rng.normal(size=(5, d)) for d in (2, 2, 3))
    cases.append(tuple(a.astype(np.float32) for a in (X, W_Q, W_K, W_V)))
    cases.append(tuple(a.tolist() for a in (X, W_Q, W_K, W_V)))
    return cases


def project_qkv(student_project_qkv):
    for args in _projection_cases(fresh_rng()):
        check_against(student_project_qkv, ref_attention.project_qkv, args, declared=visible.PROJECT_QKV)


def self_attention(student_self_attention):
    rng = fresh_rng()
    cases = _projection_cases(rng)
    X, W_Q, W_K, W_V = rng.normal(size=(4, 6)), *(4 * rng.normal(size=(6, d)) for d in (5, 5, 3))
    cases.append((X, W_Q, W_K, W_V))  # scaled scores near 100: sharp, nearly one-hot weights
    for args in cases:
        check_against(student_self_attention, ref_attention.self_attention, args, declared=visible.SELF_ATTENTION)


ANSWERS = {
    "score_shape": ("b", None),
    "dot_products": (lambda p: float(p["T"] ** 2), 0.5),  # canonical T = 10
    "scale_d128": (lambda p: float(np.sqrt(p["d_k"])), 0.01),  # canonical d_k = 128
    "is_symmetric": ("c", None),
}

# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered.
EXPLANATIONS = {
    "score_shape": "Q @ K.T is [T, d_k] @ [d_k, T]: one score per (query, key) pair, shape [T, T].",
    "dot_products": "One dot product per (query, key) pair: T queries x T keys = T^2.",
    "scale_d128": "Scores are divided by sqrt(d_k), the square root of the head width.",
    "is_symmetric": "Entry (i, j) uses the query of i and the key of j, entry (j, i) the query of j and the key "
                    "of i: different vectors, so not symmetric in general.",
}


answer = answer_of(ANSWERS)


seal(__name__)
