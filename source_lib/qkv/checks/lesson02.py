"""Visible checks for lesson 02, attention by hand and in matrix form.

The student is handed `qkv.attention.softmax` as a tool, so every check passes it in `allowed`;
every other function of qkv's reference modules stays off limits inside the student's code.
"""
import numpy as np

from qkv import attention as ref_attention
from qkv.checking import Check, check_against, seal

TOOLS = (ref_attention.softmax,)  # handed to the student in the notebook's import cell

# The seed's worked example: one query, three keys, d_k = 4, d_v = 2.
WORKED_Q = np.array([[1.0, 0.0, 1.0, 0.0]])
WORKED_K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
WORKED_V = np.array([[10.0, 0.0], [0.0, 5.0], [2.0, 2.0]])

# A fixed non-square case: n_q = 2, n_k = 5, d_k = 3, d_v = 6, so transposes and wrong axes show, and every size
# differs from the others and from the worked example's d_k = 4: a scale taken from the wrong size (or the worked
# example's sqrt(4) = 2 hard-coded) gives a different wrong answer for each mistake (issue 32).
SMALL_Q = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])
SMALL_K = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [-1.0, 0.0, 2.0], [2.0, -1.0, 0.0]])
SMALL_V = np.array([[1.0, 0.0, 2.0, -1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0, 2.0, -1.0], [2.0, 2.0, 1.0, 0.0, -1.0, 0.0],
                    [-1.0, 3.0, 0.0, 2.0, 1.0, 1.0], [0.0, -2.0, 1.0, 1.0, 0.0, 3.0]])

# The same in float32 (float32 in, float32 out) and as whole numbers, as the hidden tests also pass them.
SMALL_QK_TYPED = [(SMALL_Q.astype(np.float32), SMALL_K.astype(np.float32)),
                  (SMALL_Q.astype(np.int64), SMALL_K.astype(np.int64))]

# Self-attention: T = 2 tokens, d_model = 5, d_k = 3, d_v = 2: sqrt(d_model) is neither d_k, sqrt(d_k), sqrt(T)
# nor the worked example's 2 or 4, so scaling by the width of X is told apart from scaling by d_k, and d_k from a
# hard-coded 2 (issue 32). d_v = T on purpose: returning the weights [T, T] then has the output's shape, and is named.
SMALL_X = np.array([[1.0, 0.0, 2.0, -1.0, 1.0], [0.0, 1.0, 1.0, 0.0, -1.0]])
SMALL_W_Q = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, -1.0], [0.0, -1.0, 0.0], [1.0, 0.0, 2.0]])
SMALL_W_K = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [-1.0, 1.0, 0.0], [1.0, 0.0, -1.0], [0.0, 1.0, 1.0]])
SMALL_W_V = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0], [1.0, 1.0], [-1.0, 0.0]])
# Square weights [5, 5]: X @ W.T has the right shape here, so that mistake is named rather than crashing.
SQUARE_W_Q, SQUARE_W_K, SQUARE_W_V = np.random.default_rng(2).integers(-2, 3, size=(3, 5, 5)).astype(float)

# Rows of very different size: query 1's scores reach 1039 while query 0's stay near 0, so a softmax shifted by the
# matrix's one maximum underflows to 0/0 on row 0 (each row must be shifted by its own maximum).
UNEVEN_Q = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 900.0]])

NONFINITE = ("is an exp overflowing (use the `softmax` imported from qkv.attention: it subtracts each row's "
             "maximum first) or a sum near zero being divided by?")


# ---------------------------------------------------------------- what the known mistakes compute

def _array(x):
    return np.asarray(x, dtype=float)


def _raw(Q, K):
    return _array(Q) @ _array(K).T


def _d_k(Q):
    return np.shape(Q)[-1]


def _rows_softmax(scores):
    return ref_attention.softmax(scores, axis=-1)


def _columns_softmax(scores):
    return ref_attention.softmax(scores, axis=0)


def _divided_by_sum(scores):
    return scores / np.sum(scores, axis=-1, keepdims=True)


def _shifted_by_one_max(scores):
    # a softmax written by hand that subtracts the whole matrix's maximum, not each row's
    e = np.exp(scores - np.max(scores))
    return e / np.sum(e, axis=-1, keepdims=True)


def _weights(Q, K, divisor=None, normalise=_rows_softmax):
    # the weights a student gets with the given scale (default sqrt(d_k)) and normalisation
    divisor = np.sqrt(_d_k(Q)) if divisor is None else divisor
    return normalise(_raw(Q, K) / divisor)


NO_SCALE = "the scores are not scaled: divide Q @ K.T by sqrt(d_k), the square root of Q.shape[-1]."
BY_D_K = "the scores are divided by d_k; divide by its square root, np.sqrt(d_k)."
BY_N_K = ("the scores are divided by the square root of the number of keys; d_k is the width of the "
          "query and key vectors, Q.shape[-1].")
BY_N_Q = ("the scores are divided by the square root of the number of queries, len(Q); d_k is the width of the "
          "query and key vectors, Q.shape[-1].")
TIMES = "the scores are multiplied by sqrt(d_k); divide by it instead."
BY_D_MODEL = ("the scores are divided by the square root of d_model, the width of X; d_k is the width of the "
              "queries and keys, W_Q.shape[1].")
ONE_MAX = ("a row whose scores lie far below another row's came out 0/0: the scores were shifted by ONE "
           "maximum of the whole matrix, so exp underflows to 0 across that row. Shift each row by its own maximum "
           "(np.max(scores, axis=-1, keepdims=True)), or use the `softmax` imported from qkv.attention.")
COLUMNS = ("each column sums to 1 instead of each row: a query's weights are its row, so take the softmax "
           "along the keys (axis=-1).")
BY_SUM = ("these are the scaled scores divided by their row sum, not a softmax: use `softmax`, which "
          "exponentiates first so every weight is positive.")
TRANSPOSED = "the result is transposed: rows are queries and columns are keys, so compute Q @ K.T."

DOT_SCORES_MISTAKES = [
    (lambda Q, K: _raw(Q, K) / np.sqrt(_d_k(Q)),
     "these are already divided by sqrt(d_k); dot_scores returns the raw dot products Q @ K.T."),
    (lambda Q, K: _raw(Q, K).T, TRANSPOSED),
    (lambda Q, K: _raw(K, Q), TRANSPOSED),
]

SCALED_SCORES_MISTAKES = [
    (_raw, NO_SCALE),
    (lambda Q, K: _raw(Q, K) / _d_k(Q), BY_D_K),
    (lambda Q, K: _raw(Q, K) / np.sqrt(np.shape(K)[0]), BY_N_K),
    (lambda Q, K: _raw(Q, K) / np.sqrt(len(Q)), BY_N_Q),
    (lambda Q, K: _raw(Q, K) * np.sqrt(_d_k(Q)), TIMES),
    (lambda Q, K: (_raw(Q, K) / np.sqrt(_d_k(Q))).T, TRANSPOSED),
    (lambda Q, K: _weights(Q, K),
     "these are already softmaxed weights; scaled_scores stops after the division by sqrt(d_k)."),
]

# Plausible mistakes with no hint of their own: the worked example's sqrt(d_k) = 2 hard-coded. Where it gives the
# same answer as a listed mistake (sqrt(n_k) = 2 when there are 4 keys, d_k = 2), that input cannot say which of
# the two the student made, so it is no evidence for the listed one (issue 32). (A hard-coded 4 is the worked
# example's d_k, and there "divided by d_k" is what the student did.)
WORKED_CONSTANTS = (2.0,)
SCALED_SCORES_PLAUSIBLE = tuple((lambda Q, K, c=c: _raw(Q, K) / c) for c in WORKED_CONSTANTS)
ATTENTION_WEIGHTS_PLAUSIBLE = tuple((lambda Q, K, c=c: _weights(Q, K, c)) for c in WORKED_CONSTANTS)

ATTENTION_WEIGHTS_MISTAKES = [
    (lambda Q, K: _weights(Q, K, 1.0), NO_SCALE),
    (lambda Q, K: _weights(Q, K, _d_k(Q)), BY_D_K),
    (lambda Q, K: _weights(Q, K, np.sqrt(np.shape(K)[0])), BY_N_K),
    (lambda Q, K: _weights(Q, K, np.sqrt(len(Q))), BY_N_Q),
    (lambda Q, K: _weights(Q, K, normalise=_columns_softmax), COLUMNS),
    (lambda Q, K: _weights(Q, K, normalise=_divided_by_sum), BY_SUM),
    (lambda Q, K: _weights(Q, K, normalise=_shifted_by_one_max), ONE_MAX),
    (lambda Q, K: _weights(Q, K).T, TRANSPOSED),
]

BLENDS_KEYS = "the weights blend the keys; the output blends the values: weights @ V."
WEIGHTS_TRANSPOSED = ("the weights are transposed before blending: weights has one row per query, "
                      "so the output is weights @ V (not weights.T @ V).")
RETURNS_WEIGHTS = "these are the attention weights; the output is one step further: weights @ V."

ATTENTION_MISTAKES = [
    (lambda Q, K, V: _weights(Q, K, 1.0) @ _array(V), NO_SCALE),
    (lambda Q, K, V: _weights(Q, K, _d_k(Q)) @ _array(V), BY_D_K),
    (lambda Q, K, V: _weights(Q, K, np.sqrt(len(Q))) @ _array(V), BY_N_Q),
    (lambda Q, K, V: _weights(Q, K, normalise=_columns_softmax) @ _array(V), COLUMNS),
    (lambda Q, K, V: _weights(Q, K, normalise=_divided_by_sum) @ _array(V), BY_SUM),
    (lambda Q, K, V: _weights(Q, K, normalise=_shifted_by_one_max) @ _array(V), ONE_MAX),
    (lambda Q, K, V: _weights(Q, K) @ _array(K), BLENDS_KEYS),
    (lambda Q, K, V: _weights(Q, K).T @ _array(V), WEIGHTS_TRANSPOSED),
    (lambda Q, K, V: _weights(Q, K), RETURNS_WEIGHTS),
]
ATTENTION_PLAUSIBLE = tuple((lambda Q, K, V, c=c: _weights(Q, K, c) @ _array(V)) for c in WORKED_CONSTANTS)


def _projected(X, W_Q, W_K, W_V, how):
    X, W = _array(X), {"Q": _array(W_Q), "K": _array(W_K), "V": _array(W_V)}
    return how(X, W)


# checked part by part (Q, then K, then V), so each hint names the one projection it is about
PROJECT_QKV_MISTAKES = [
    (lambda X, W_Q, W_K, W_V: _projected(X, W_Q, W_K, W_V, lambda X, W: (X @ W["Q"].T, X @ W["K"].T, X @ W["V"].T)),
     "this is X @ W.T: the weights are stored [d_model, d], so a row of X times W is already right (X @ W)."),
    (lambda X, W_Q, W_K, W_V: _projected(X, W_Q, W_K, W_V, lambda X, W: (X @ W["K"], X @ W["K"], X @ W["V"])),
     "Q was made with W_K: each projection has its own matrix, Q = X @ W_Q."),
    (lambda X, W_Q, W_K, W_V: _projected(X, W_Q, W_K, W_V, lambda X, W: (X @ W["Q"], X @ W["Q"], X @ W["V"])),
     "K was made with W_Q: each projection has its own matrix, K = X @ W_K."),
    (lambda X, W_Q, W_K, W_V: _projected(X, W_Q, W_K, W_V, lambda X, W: (X @ W["Q"], X @ W["K"], X @ W["K"])),
     "V was made with W_K: each projection has its own matrix, V = X @ W_V."),
]


def _self_attention_mistake(attention_mistake, projection=None):
    # a self-attention mistake = a wrong projection or a wrong attention step on the right projection
    def mistaken(X, W_Q, W_K, W_V):
        Q, K, V = projection(X, W_Q, W_K, W_V) if projection else ref_attention.project_qkv(X, W_Q, W_K, W_V)
        return attention_mistake(Q, K, V)
    return mistaken


def _reference_attention(Q, K, V):
    return ref_attention.attention(Q, K, V)


def _scaled_by_d_model(X, W_Q, W_K, W_V):
    # the width of X where the width of Q and K belongs
    Q, K, V = ref_attention.project_qkv(X, W_Q, W_K, W_V)
    return _weights(Q, K, np.sqrt(np.shape(X)[-1])) @ V


SELF_ATTENTION_MISTAKES = (
    [(_self_attention_mistake(_reference_attention, projection), hint) for projection, hint in PROJECT_QKV_MISTAKES]
    # blending the keys is, in self-attention, the same computation as "V made with W_K" (listed above)
    # (a softmax shifted by one maximum is attention's mistake: self_attention's inputs never give rows that uneven)
    + [(_self_attention_mistake(mistake), hint) for mistake, hint in ATTENTION_MISTAKES
       if hint not in (BLENDS_KEYS, ONE_MAX)]
    + [(_scaled_by_d_model, BY_D_MODEL)]
)
SELF_ATTENTION_PLAUSIBLE = tuple(_self_attention_mistake(mistake) for mistake in ATTENTION_PLAUSIBLE)


def rows_sum_to_one(got, args, kwargs):
    if np.any(got < -1e-9):
        return "some weights are negative; softmax makes every weight positive."
    if not np.allclose(np.sum(got, axis=-1), 1, atol=1e-4):
        return "the rows do not sum to 1: each query's weights come from a softmax along its row (axis=-1)."
    return None


# ---------------------------------------------------------------- each graded function's check, declared once

DOT_SCORES = Check(name="dot_scores", diagnoses=DOT_SCORES_MISTAKES, allowed=TOOLS)
# The worked example has one query, where sqrt(len(Q)) = 1 gives the unscaled answer: a diagnosis made there is
# confirmed on two queries (n_q = 2, d_k = 3, n_k = 5 and 6: no two candidate scales agree), not on moved copies alone
_MORE_K, _MORE_V = np.vstack([SMALL_K, [[1.0, -1.0, 1.0]]]), np.vstack([SMALL_V, -SMALL_V[:1]])
SCALE_CONFIRMATIONS = (((SMALL_Q, SMALL_K), {}), ((SMALL_Q[::-1], _MORE_K), {}))
ATTENTION_CONFIRMATIONS = (((SMALL_Q, SMALL_K, SMALL_V), {}), ((SMALL_Q[::-1], _MORE_K, _MORE_V), {}))
SCALED_SCORES = Check(name="scaled_scores", diagnoses=SCALED_SCORES_MISTAKES, plausible=SCALED_SCORES_PLAUSIBLE,
                      allowed=TOOLS, confirm_with=SCALE_CONFIRMATIONS)
ATTENTION_WEIGHTS = Check(name="attention_weights", diagnoses=ATTENTION_WEIGHTS_MISTAKES,
                          plausible=ATTENTION_WEIGHTS_PLAUSIBLE, allowed=TOOLS, extra_checks=(rows_sum_to_one,),
                          nonfinite_hint=NONFINITE, confirm_with=SCALE_CONFIRMATIONS)
ATTENTION = Check(name="attention", diagnoses=ATTENTION_MISTAKES, plausible=ATTENTION_PLAUSIBLE, allowed=TOOLS,
                  nonfinite_hint=NONFINITE, confirm_with=ATTENTION_CONFIRMATIONS)
PROJECT_QKV = Check(name="project_qkv", diagnoses=PROJECT_QKV_MISTAKES, allowed=TOOLS, outputs=("Q", "K", "V"))
SELF_ATTENTION = Check(name="self_attention", diagnoses=SELF_ATTENTION_MISTAKES, plausible=SELF_ATTENTION_PLAUSIBLE,
                       allowed=TOOLS, nonfinite_hint=NONFINITE)


# ---------------------------------------------------------------- the visible checks

def dot_scores(student_dot_scores):
    got = check_against(student_dot_scores, ref_attention.dot_scores, (WORKED_Q, WORKED_K), declared=DOT_SCORES)
    check_against(student_dot_scores, ref_attention.dot_scores, (SMALL_Q, SMALL_K), declared=DOT_SCORES)
    check_against(student_dot_scores, ref_attention.dot_scores, (SMALL_Q.tolist(), SMALL_K.tolist()),
                  declared=DOT_SCORES)
    for args in SMALL_QK_TYPED:
        check_against(student_dot_scores, ref_attention.dot_scores, args, declared=DOT_SCORES)
    print(f"dot_scores: all visible checks passed; the worked example's raw scores are {got.ravel()}.")


def scaled_scores(student_scaled_scores):
    got = check_against(student_scaled_scores, ref_attention.scaled_scores, (WORKED_Q, WORKED_K),
                        declared=SCALED_SCORES)
    check_against(student_scaled_scores, ref_attention.scaled_scores, (SMALL_Q, SMALL_K), declared=SCALED_SCORES)
    check_against(student_scaled_scores, ref_attention.scaled_scores, (SMALL_Q.tolist(), SMALL_K.tolist()),
                  declared=SCALED_SCORES)
    for args in SMALL_QK_TYPED:
        check_against(student_scaled_scores, ref_attention.scaled_scores, args, declared=SCALED_SCORES)
    print(f"scaled_scores: all visible checks passed; the worked example's scaled scores are {got.ravel()}.")


def attention_weights(student_attention_weights):
    got = check_against(student_attention_weights, ref_attention.attention_weights, (WORKED_Q, WORKED_K),
                        declared=ATTENTION_WEIGHTS)
    check_against(student_attention_weights, ref_attention.attention_weights, (SMALL_Q, SMALL_K),
                  declared=ATTENTION_WEIGHTS)
    check_against(student_attention_weights, ref_attention.attention_weights,
                  (SMALL_Q.tolist(), SMALL_K.tolist()), declared=ATTENTION_WEIGHTS)
    check_against(student_attention_weights, ref_attention.attention_weights, (100 * SMALL_Q, 100 * SMALL_K),
                  declared=ATTENTION_WEIGHTS)
    check_against(student_attention_weights, ref_attention.attention_weights, (UNEVEN_Q, SMALL_K),
                  declared=ATTENTION_WEIGHTS)
    for args in SMALL_QK_TYPED:
        check_against(student_attention_weights, ref_attention.attention_weights, args, declared=ATTENTION_WEIGHTS)
    print(f"attention_weights: all visible checks passed; the worked example's weights are "
          f"{np.round(got.ravel(), 4)}.")


def attention(student_attention):
    # as many queries as keys first: weights.T @ V then has the right shape, and its values say the weights were
    # transposed (on the worked example's one query it is a numpy error)
    check_against(student_attention, ref_attention.attention, (SMALL_Q, SMALL_K[:2], SMALL_V[:2]), declared=ATTENTION)
    got = check_against(student_attention, ref_attention.attention, (WORKED_Q, WORKED_K, WORKED_V),
                        declared=ATTENTION)
    check_against(student_attention, ref_attention.attention, (SMALL_Q, SMALL_K, SMALL_V), declared=ATTENTION)
    check_against(student_attention, ref_attention.attention,
                  (SMALL_Q.tolist(), SMALL_K.tolist(), SMALL_V.tolist()), declared=ATTENTION)
    check_against(student_attention, ref_attention.attention, (UNEVEN_Q, SMALL_K, SMALL_V), declared=ATTENTION)
    for Q, K in SMALL_QK_TYPED:
        check_against(student_attention, ref_attention.attention, (Q, K, SMALL_V.astype(Q.dtype)), declared=ATTENTION)
    # scores far past exp's range: a softmax without its max overflows
    check_against(student_attention, ref_attention.attention, (100 * SMALL_Q, 100 * SMALL_K, SMALL_V),
                  declared=ATTENTION)
    print(f"attention: all visible checks passed; the worked example's output is {np.round(got.ravel(), 4)}.")


def project_qkv(student_project_qkv):
    check_against(student_project_qkv, ref_attention.project_qkv,
                  (SMALL_X, SQUARE_W_Q, SQUARE_W_K, SQUARE_W_V), declared=PROJECT_QKV)
    args = (SMALL_X, SMALL_W_Q, SMALL_W_K, SMALL_W_V)
    check_against(student_project_qkv, ref_attention.project_qkv, args, declared=PROJECT_QKV)
    check_against(student_project_qkv, ref_attention.project_qkv, tuple(a.tolist() for a in args),
                  declared=PROJECT_QKV)
    check_against(student_project_qkv, ref_attention.project_qkv, tuple(a.astype(np.float32) for a in args),
                  declared=PROJECT_QKV)
    print("project_qkv: all visible checks passed.")


def self_attention(student_self_attention):
    check_against(student_self_attention, ref_attention.self_attention,
                  (SMALL_X, SQUARE_W_Q, SQUARE_W_K, SQUARE_W_V), declared=SELF_ATTENTION)
    args = (SMALL_X, SMALL_W_Q, SMALL_W_K, SMALL_W_V)
    check_against(student_self_attention, ref_attention.self_attention, args, declared=SELF_ATTENTION)
    check_against(student_self_attention, ref_attention.self_attention, tuple(a.tolist() for a in args),
                  declared=SELF_ATTENTION)
    check_against(student_self_attention, ref_attention.self_attention, tuple(a.astype(np.float32) for a in args),
                  declared=SELF_ATTENTION)
    print("self_attention: all visible checks passed.")


seal(__name__)
