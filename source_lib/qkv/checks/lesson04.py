"""Visible checks for lesson 04, the causal mask.

Contracts the checks enforce (stated the same way in the notebook):
- a mask is a numpy array of dtype bool, True where a query MAY attend a key (rows queries, columns keys);
- masked_softmax: hidden entries get exactly zero weight, however large their scores; a row with at
  least one visible key sums to 1; a fully masked row (no visible key) is all zeros, never NaN or uniform;
- dependence_matrix: D[i, j] is True when adding `delta` to every component of input row j moves some
  component of output row i by more than `tol`.
"""
import functools

import numpy as np

from qkv import attention as ref_attention, masking, probes
from qkv.checking import Check, check_against, check_boolean, seal
from qkv.checking.diagnosis import OVERFLOW, with_ordinary_magnitudes
from qkv.tables import show
# dependence_matrix's catalogue, confirmations and declaration live in lesson04_probe; re-exported for the
# notebook's `check`, the hidden tests and the student edition, which read them here
from qkv.checks.lesson04_probe import (  # noqa: F401
    DEPENDENCE_MATRIX, DEPENDENCE_MISTAKES, PROBE_ALLOWED, check_dependence, dependence_confirmations,
    readout_targets)

WORDS = ["Hà", "Nội", "là", "thủ", "đô"]


def quietly(reference_fn):
    """The reference, without the harmless overflow warning of exp on hidden entries that are then dropped."""
    def reference(*args, **kwargs):
        with np.errstate(over="ignore"):
            return reference_fn(*args, **kwargs)
    return reference


# ---------------------------------------------------------------- causal_mask

def _tril(T, k=0):
    return np.tril(np.ones((T, T), dtype=bool), k)


CAUSAL_MASK_MISTAKES = [
    # through _tril (withheld while lesson 04 is open): an upper triangle, transposed, is the answer
    (lambda T: _tril(T).T,
     "query i may attend keys j >= i, its future: the lower triangle is hidden instead of the upper. "
     "A causal mask is True on and BELOW the diagonal."),
    (lambda T: _tril(T, -1),
     "the diagonal is False, so no position may attend itself and the first token sees nothing at all. "
     "Keep the diagonal (np.tril with k=0, or j <= i)."),
    (lambda T: _tril(T, 1),
     "query i may attend key i + 1, one step into the future: off by one. The diagonal is the last "
     "allowed column (k=0, or j <= i rather than j <= i + 1)."),
    (lambda T: ~_tril(T),
     "the mask is inverted: True marks the hidden future. True must mean MAY attend."),
    (lambda T: np.ones((T, T), dtype=bool),
     "every entry is True, so nothing hides the future."),
]
CAUSAL_MASK_ALL_TRUE = CAUSAL_MASK_MISTAKES[-1][0]  # with padding, the same as "the causal part is missing"
CAUSAL_MASK = Check(name="causal_mask", diagnoses=CAUSAL_MASK_MISTAKES,
                    meaning="query i may attend key j exactly when j <= i")


def causal_mask(student_causal_mask):
    for T in (5, 1, 3, np.int64(6)):  # a numpy integer is a whole number too
        check_boolean(student_causal_mask, masking.causal_mask, (T,), declared=CAUSAL_MASK)
    print("causal_mask: all visible checks passed.")
    show(masking.mask_table(student_causal_mask(5), WORDS))   # a real table (issue 44)


# ---------------------------------------------------------------- masked_softmax

def _minus_1e9(scores, mask):
    scores = np.asarray(scores)
    return ref_attention.softmax(scores + np.where(mask, 0.0, -1e9).astype(scores.dtype))


def _shifted_by_one_max(scores, mask):
    # a masked softmax written by hand, shifted by the largest visible score of the whole array, not of each row
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(scores))
    visible = np.where(mask, scores, -np.inf)
    top = np.max(visible) if np.isfinite(np.max(visible)) else 0.0
    e = np.where(mask, np.exp(visible - top), 0.0)
    total = np.sum(e, axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _one_matrix_row_by_row(scores, mask):
    # a masked softmax written for one [n_q, n_k] matrix, a loop over its rows: given a batch, each step takes a
    # whole matrix scores[i] and hides the keys of ONE row of the mask, mask[i], in every one of its rows
    return np.stack([ref_attention.masked_softmax(s, m) for s, m in zip(np.asarray(scores, float), np.asarray(mask))])


MASKED_SOFTMAX_MISTAKES = [
    (lambda s, m: ref_attention.softmax(s) * m,
     "the hidden entries are 0 but the rows no longer sum to 1: the mask was applied after the softmax. "
     "Hide the scores before it (np.where(mask, scores, -np.inf)), so the visible ones share all the weight."),
    (lambda s, m: ref_attention.softmax(np.where(m, s, 0.0)),
     "hidden keys still receive weight: their scores were set to 0, and 0 is an ordinary score "
     "(exp(0) = 1). Use -inf, whose exponential is exactly 0."),
    (lambda s, m: ref_attention.softmax(s),
     "this is the plain softmax: the mask was ignored."),
    (lambda s, m: ref_attention.masked_softmax(s, ~np.asarray(m, dtype=bool)),
     "the weight lands exactly where the mask is False: True means MAY attend, so hide where it is False."),
    (_shifted_by_one_max,
     "a row whose visible scores lie far below another row's came out all 0 (or 0/0): the scores were shifted "
     "by ONE maximum of the whole array, so exp underflows across that row. Shift each row by the maximum of its "
     "own visible scores (axis=-1, keepdims=True)."),
    (_minus_1e9,
     "a row with no visible key came back with weights, as if nothing were masked (or uniform, in float32): "
     "adding -1e9 to every score of a row shifts them all equally, and the softmax ignores a common shift. "
     "The contract for a fully masked row is all zeros: multiply the weights by the mask, or set such rows to 0."),
    (_one_matrix_row_by_row,
     "right on one matrix [n_q, n_k], wrong on a batch [B, n_q, n_k] under one mask [n_q, n_k]: a loop over the "
     "rows takes a whole matrix scores[i] at each step and hides in it the keys of ONE row of the mask, mask[i]. "
     "Let the mask broadcast over the leading axes (np.where(mask, scores, -np.inf)) and reduce along axis=-1."),
]

FULLY_MASKED_ROW = ("a fully masked row (no visible key) computed -inf - (-inf) or 0/0; the contract for such a row "
                    "is all zeros, so handle it (e.g. divide only where the sum is > 0).")
HIDDEN_AFTER_EXP = ("the mask was applied after the exponential or softmax: a huge hidden score then pushes every "
                    "visible weight to 0 before the division. Hide the scores first and take the maximum over the "
                    "visible scores only.")
FUTURE_AFTER_SOFTMAX = ("the future was hidden after the softmax: when a future score is far larger than the visible "
                        "ones, every visible weight underflows to 0 and the renormalisation divides 0 by 0. Hide the "
                        "future scores before the softmax.")
A_KEY_MADE_VISIBLE = "with a key made visible in every fully masked row your function gives finite values:"


def with_a_key_in_every_row(args, kwargs):
    """(scores, mask) with every fully masked row of the mask made visible, or None when no row is fully masked."""
    if len(args) < 2 or args[1] is None:
        return None
    mask = np.array(np.broadcast_to(np.asarray(args[1], dtype=bool), np.shape(args[0])))
    fully_masked = ~mask.any(axis=-1)
    if not fully_masked.any():
        return None
    mask[fully_masked] = True
    return (args[0], mask, *args[2:]), kwargs


# said when neither cause alone takes the NaN away (the input has both)
MASKED_SOFTMAX_NONFINITE = f"two usual causes: (1) {FULLY_MASKED_ROW} (2) {HIDDEN_AFTER_EXP}"


def _masked_softmax_properties(got, args, kwargs):
    scores, mask = args
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(scores))
    if np.any(np.abs(got[~mask]) > 1e-9):
        return "some hidden entries (mask False) received weight; they must get exactly 0."
    visible_rows = mask.any(axis=-1)
    sums = got.sum(axis=-1)
    if not np.allclose(sums[visible_rows], 1, atol=1e-4):
        return "rows with visible keys do not sum to 1."
    if np.any(np.abs(got[~visible_rows]) > 1e-9):
        return "a fully masked row must be all zeros (the contract), not uniform or anything else."
    return None


MASKED_SOFTMAX_REFERENCE = quietly(ref_attention.masked_softmax)
MASKED_SOFTMAX = Check(name="masked_softmax", diagnoses=MASKED_SOFTMAX_MISTAKES,
                       extra_checks=[_masked_softmax_properties], nonfinite_hint=MASKED_SOFTMAX_NONFINITE,
                       # the two causes of a NaN told apart: a fully masked row, or a huge hidden score
                       nonfinite_causes=((with_a_key_in_every_row, A_KEY_MADE_VISIBLE, FULLY_MASKED_ROW),
                                         (with_ordinary_magnitudes, OVERFLOW, HIDDEN_AFTER_EXP)),
                       allowed=(ref_attention.softmax,))


def masked_softmax(student_masked_softmax):
    scores = np.array([[2.0, 1.0, 0.5], [0.3, 1.2, -0.4], [1.0, 0.0, 2.0]])
    causal = masking.causal_mask(3)
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (scores, causal), declared=MASKED_SOFTMAX)
    # the hidden keys have by far the largest scores: they still must not matter
    loud_future = np.array([[0.0, 900.0, 1000.0], [1.0, 2.0, 800.0], [0.5, 0.5, 0.5]])
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (loud_future, causal), declared=MASKED_SOFTMAX)
    # a padded row: nothing visible, so all zeros
    padded = np.array([[True, True, False], [False, False, False]])
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (scores[:2], padded), declared=MASKED_SOFTMAX)
    # one [3, 3] mask for a batch of two score matrices
    batch = np.stack([scores, scores[::-1]]).astype(np.float32)
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (batch, causal), declared=MASKED_SOFTMAX)
    # scores [B=2, H=5, 3, 3] of a batch of heads under one causal mask; a key-padding mask [B, 1, 3] per sequence
    heads = np.arange(90.0).reshape(2, 5, 3, 3) % 7 - 3
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (heads, causal), declared=MASKED_SOFTMAX)
    # rows of very different size: row 0 sees only 1000, row 1 sees scores near 0 (each row its own maximum)
    uneven = np.array([[1000.0, 999.0, 5.0], [0.5, 0.2, 3.0], [-2.0, 0.0, 1.0]])
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (uneven, causal), declared=MASKED_SOFTMAX)
    key_padding = np.array([[[True, True, True]], [[True, False, False]]])
    check_against(student_masked_softmax, MASKED_SOFTMAX_REFERENCE, (batch.astype(float), key_padding),
                  declared=MASKED_SOFTMAX)
    print("masked_softmax: all visible checks passed.")


# ---------------------------------------------------------------- causal_self_attention

def _attention_with(weights_of):
    """A mistaken causal self-attention: weights_of(scaled scores [..., T, T], T) replaces the masked softmax."""
    def mistaken(X, W_Q, W_K, W_V):
        Q, K, V = ref_attention.project_qkv(X, W_Q, W_K, W_V)
        return weights_of(ref_attention.scaled_scores(Q, K), np.shape(X)[-2]) @ V
    return mistaken


def _unscaled(X, W_Q, W_K, W_V):
    Q, K, V = ref_attention.project_qkv(X, W_Q, W_K, W_V)
    return ref_attention.masked_softmax(ref_attention.dot_scores(Q, K), masking.causal_mask(np.shape(X)[-2])) @ V


CAUSAL_ATTENTION_MISTAKES = [
    (lambda X, W_Q, W_K, W_V: ref_attention.self_attention(X, W_Q, W_K, W_V),
     "early outputs mix in later positions: this is attention without the causal mask."),
    (_unscaled, "the scores are not divided by sqrt(d_k), the size of a query/key vector."),
    (_attention_with(lambda s, T: ref_attention.softmax(s) * masking.causal_mask(T)),
     "the weights were masked after the softmax, so each row sums to less than 1. Hide the future scores "
     "before the softmax."),
    (_attention_with(lambda s, T: ref_attention.softmax(np.where(masking.causal_mask(T), s, 0.0))),
     "the future still gets weight: its scores were set to 0 (an ordinary score) instead of -inf."),
    (_attention_with(lambda s, T: ref_attention.masked_softmax(s, _tril(T, -1))),
     "the first output is zero and every position ignores itself: the diagonal is masked out. Each "
     "position may attend itself (j <= i)."),
    (_attention_with(lambda s, T: ref_attention.masked_softmax(s, np.triu(np.ones((T, T), dtype=bool)))),
     "the outputs read the future, not the past: the lower triangle was masked instead of the upper."),
    (_attention_with(lambda s, T: ref_attention.masked_softmax(s, _tril(T, 1))),
     "each position also reads the next one: the mask is off by one (j <= i + 1)."),
]

CAUSAL_ATTENTION_NONFINITE = ("either a row of the weights had no visible key (is the diagonal masked out? position i "
                              f"must see keys 0..i), or {FUTURE_AFTER_SOFTMAX}")

CAUSAL_ATTENTION_REFERENCE = quietly(masking.causal_self_attention)
CAUSAL_SELF_ATTENTION = Check(name="causal_self_attention", diagnoses=CAUSAL_ATTENTION_MISTAKES,
                              nonfinite_hint=CAUSAL_ATTENTION_NONFINITE,
                              nonfinite_causes=((with_ordinary_magnitudes, OVERFLOW, FUTURE_AFTER_SOFTMAX),),
                              allowed=(ref_attention.softmax,))


def sentence_inputs(seed=4, d_model=6, d_k=4, d_v=3):
    """Seeded embeddings for the five words of "Hà Nội là thủ đô" and a set of projections."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(len(WORDS), d_model))
    W_Q, W_K = (rng.normal(size=(d_model, d_k)) / np.sqrt(d_model) for _ in range(2))
    W_V = rng.normal(size=(d_model, d_v)) / np.sqrt(d_model)
    return X, W_Q, W_K, W_V


def loud_future_input(rng, T, W_Q, W_K, gap=1500.0):
    """An X [T, d_model] whose last token's key matches the first query so well that this hidden score beats
    the first query's only visible score, its own, by `gap`: masking after the softmax underflows to 0/0."""
    X = rng.normal(size=(T, W_Q.shape[0]))
    q0 = X[0] @ W_Q
    X[-1] = (q0 / (q0 @ q0)) @ np.linalg.pinv(W_K)           # then q0 . (X[-1] @ W_K) = 1 (d_model >= d_k)
    d_k = W_Q.shape[1]
    own = (X[0] @ W_Q) @ (X[0] @ W_K) / np.sqrt(d_k)
    X[-1] *= (own + gap) * np.sqrt(d_k)
    return X


def causal_self_attention(student_attention):
    X, W_Q, W_K, W_V = sentence_inputs()
    check_against(student_attention, CAUSAL_ATTENTION_REFERENCE, (X, W_Q, W_K, W_V), declared=CAUSAL_SELF_ATTENTION)
    check_against(student_attention, CAUSAL_ATTENTION_REFERENCE, (X[:1], W_Q, W_K, W_V), declared=CAUSAL_SELF_ATTENTION)
    batch = np.stack([X, X[::-1]]).astype(np.float32)
    check_against(student_attention, CAUSAL_ATTENTION_REFERENCE, (batch, W_Q, W_K, W_V), declared=CAUSAL_SELF_ATTENTION)
    single = tuple(a.astype(np.float32) for a in (X, W_Q, W_K, W_V))  # float32 in, float32 out
    check_against(student_attention, CAUSAL_ATTENTION_REFERENCE, single, declared=CAUSAL_SELF_ATTENTION)
    # the last word's key matches the first query far better than anything it may see: it must still not count
    loud = loud_future_input(np.random.default_rng(0), 5, W_Q, W_K)
    check_against(student_attention, CAUSAL_ATTENTION_REFERENCE, (loud, W_Q, W_K, W_V), declared=CAUSAL_SELF_ATTENTION)
    print("causal_self_attention: all visible checks passed.")


# ---------------------------------------------------------------- padding masks

def _real_keys(lengths, T):
    return np.arange(T)[None, :] < np.asarray(lengths)[:, None]           # [B, T]


def _rows_not_columns(lengths, T):
    return np.broadcast_to(_real_keys(lengths, T)[:, :, None], (len(lengths), T, T))


PADDING_MASK_MISTAKES = [
    (_rows_not_columns,
     "the padded QUERIES' rows are hidden, while the padded keys stay visible: the mask is on the wrong "
     "axis. Padding hides keys, the columns: mask[b, i, j] = j < lengths[b]."),
    (lambda lengths, T: _real_keys(lengths, T)[:, :, None] & _real_keys(lengths, T)[:, None, :],
     "the padded queries' rows are hidden as well. Here the padding mask hides keys only (columns); the "
     "outputs of padded positions are simply ignored later."),
    (lambda lengths, T: masking.padding_mask(np.minimum(np.asarray(lengths) + 1, T), T),
     "one padded key per sequence is still visible: off by one (j < lengths[b], not j <= lengths[b])."),
    (lambda lengths, T: ~masking.padding_mask(lengths, T),
     "the mask is inverted: True marks the padding. True must mean MAY attend."),
    (lambda lengths, T: np.ones((len(lengths), T, T), dtype=bool),
     "every entry is True, so the lengths were ignored."),
]

CAUSAL_PADDING_MISTAKES = [
    (lambda lengths, T: masking.padding_mask(lengths, T) | masking.causal_mask(T),
     "too much is allowed: the two masks were combined with OR. A key is visible only if BOTH allow it (&)."),
    (lambda lengths, T: masking.padding_mask(lengths, T),
     "queries still see the future: the causal part is missing (or the causal_mask it uses is all True)."),
    (lambda lengths, T: np.broadcast_to(masking.causal_mask(T), (len(lengths), T, T)),
     "padded keys are still visible: the padding part is missing."),
    (lambda lengths, T: _rows_not_columns(lengths, T) & masking.causal_mask(T),
     "the padding part hides queries (rows) instead of keys (columns)."),
]

# causal_padding_mask usually calls the student's own causal_mask: when its causal part is wrong exactly the
# way a known causal_mask mistake is, the fix belongs there
CAUSAL_PADDING_MISTAKES += [
    (lambda lengths, T, wrong=wrong: masking.padding_mask(lengths, T) & wrong(T),
     "its causal part is wrong the way causal_mask would be: " + hint + " If causal_padding_mask calls your "
     "causal_mask, fix causal_mask first (exercise 1); the & of the two masks is probably right.")
    for wrong, hint in CAUSAL_MASK_MISTAKES if wrong is not CAUSAL_MASK_ALL_TRUE
]

PADDING_MASK = Check(name="padding_mask", diagnoses=PADDING_MASK_MISTAKES,
                     meaning="in sequence b, key j is visible exactly when j < lengths[b]")
CAUSAL_PADDING_MASK = Check(name="causal_padding_mask", diagnoses=CAUSAL_PADDING_MISTAKES,
                            meaning="key j is visible to query i of sequence b when j <= i and j < lengths[b]")

LENGTHS = [5, 3, 2]


def padding_mask(student_padding_mask):
    for lengths, T in ((LENGTHS, 5), ([1, 4], 4), (np.array([2]), 3)):
        check_boolean(student_padding_mask, masking.padding_mask, (lengths, T), declared=PADDING_MASK)
    print("padding_mask: all visible checks passed.")


def causal_padding_mask(student_causal_padding_mask):
    for lengths, T in ((LENGTHS, 5), ([1, 4], 4), (np.array([3]), 3)):
        check_boolean(student_causal_padding_mask, masking.causal_padding_mask, (lengths, T),
                      declared=CAUSAL_PADDING_MASK)
    print("causal_padding_mask: all visible checks passed.")


# ---------------------------------------------------------------- the future-dependence probe (lesson04_probe)

def named(fn, name):
    fn.__name__ = name
    return fn


def probe_targets(W_Q, W_K, W_V):
    """Functions of X with the dependence structures of causal, full and window-of-2 attention, built as fixed mixes
    of the rows (qkv.probes): attention itself needs lesson 04's masked softmax, which the grader withholds while
    this lesson is graded, and the grader hands targets to the student's kernel as plain data."""
    T = len(WORDS)
    weights = np.abs(np.random.default_rng(11).normal(size=(T, T))) + 0.1
    below = np.tril(np.ones((T, T), dtype=bool))
    structures = {"causal_attention": below, "unmasked_attention": np.ones((T, T), dtype=bool),
                  "previous_token_attention": below & ~np.tril(np.ones((T, T), dtype=bool), -2)}
    return [named(functools.partial(probes.mixed_readout, mix=np.where(mask, weights, 0.0), readout=W_V), name)
            for name, mask in structures.items()]


def dependence_matrix(student_probe):
    X, W_Q, W_K, W_V = sentence_inputs()
    for attend in probe_targets(W_Q, W_K, W_V):
        check_dependence(student_probe, attend, X)
    for args, kwargs in readout_targets():
        check_dependence(student_probe, *args, **kwargs)
    print("dependence_matrix: all visible checks passed.")


seal(__name__)
