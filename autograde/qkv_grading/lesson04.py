"""Hidden tests for lesson 04, the causal mask, designed from each function's contract: fresh random inputs
whose dimensions all differ, several T, batches whose size differs from T and equals it, float32, visible
scores beyond exp's range (both signs), huge hidden scores, fully masked rows; and fixed adversarial cases
so that a mistake is caught on every draw."""
import functools

import numpy as np

from qkv import masking, probes
from qkv.checking import check_against, check_boolean, seal
from qkv.checks import lesson04 as visible, lesson04_probe as probe_checks
from qkv_grading import answer_of, distinct_sizes, fresh_rng

# withheld from the student's kernel while this lesson is graded: each computes a graded answer
GRADED_REFERENCES = ("qkv.masking.causal_mask", "qkv.attention.masked_softmax", "qkv.masking.causal_self_attention",
                     "qkv.masking.padding_mask", "qkv.masking.causal_padding_mask", "qkv.masking.dependence_matrix")


def _some_lengths(rng):
    return [int(rng.integers(1, 4)), 2, 3, int(rng.integers(5, 9)), int(rng.integers(10, 33))]


def causal_mask(student_causal_mask):
    rng = fresh_rng()
    for T in [1] + _some_lengths(rng) + [np.int64(rng.integers(2, 7))]:
        check_boolean(student_causal_mask, masking.causal_mask, (T,), declared=visible.CAUSAL_MASK)


def _loud_hidden(rng, scores, mask, loudness):
    """Give every hidden entry a score far above the visible ones: it must still get no weight."""
    return np.where(mask, scores, scores + loudness * (1 + rng.random(scores.shape)))


MASKED_SOFTMAX_FIXED = [
    # the VISIBLE scores are far beyond exp's range: row 0 near +1000 (spanning 750), row 1 near -800 (an exp
    # without the shift by the visible maximum gives 0/0), row 2 fully masked under a huge hidden score
    (np.array([[1000.0, 0.0, 250.0, 999.5], [-800.0, -800.2, 5.0, -801.0], [3.0, 900.0, -2.0, 1.0]]),
     np.array([[True, False, True, True], [True, True, False, True], [False, False, False, False]])),
    # a batch of 2 score matrices [2, 3, 3] under one causal mask, rows of very different size
    (np.array([[[0.0, 5.0, 9.0], [1000.0, 999.0, 7.0], [-1000.0, -999.0, -1001.0]],
               [[2.0, 1.0, 0.0], [0.5, 0.25, 800.0], [300.0, -400.0, 100.0]]]), masking.causal_mask(3)),
]


def masked_softmax(student_masked_softmax):
    rng = fresh_rng()
    T = int(rng.integers(3, 8))
    causal = masking.causal_mask(T)
    cases = [(rng.normal(size=(T, T)) * 2, causal)]
    # an arbitrary mask with one row fully masked, on a rectangular [n_q, n_k] score matrix
    mask = rng.random((4, 6)) < 0.6
    fully_masked = int(rng.integers(4))
    mask[fully_masked] = False
    mask[(fully_masked + 1) % 4, rng.integers(6)] = True
    cases.append((rng.normal(size=(4, 6)), mask))
    # a padded batch: scores [B, T, T], causal & padding mask, a sequence of length 0 (every row masked)
    lengths = [T, int(rng.integers(1, T)), 0]
    cases.append((rng.normal(size=(3, T, T)), masking.causal_padding_mask(lengths, T)))
    # one [T, T] mask broadcast over a batch and heads, float32
    cases.append((rng.normal(size=(2, 3, T, T)).astype(np.float32), causal))
    # a key-padding mask [B, 1, T] broadcast over the queries
    cases.append((rng.normal(size=(3, T, T)), masking.padding_mask(lengths, T)[:, :1, :]))
    # hidden scores far larger than the visible ones (float64 and float32): they must not matter
    cases.append((_loud_hidden(rng, rng.normal(size=(T, T)), causal, 1000.0), causal))
    cases.append((_loud_hidden(rng, rng.normal(size=(T, T)), causal, 200.0).astype(np.float32), causal))
    # nothing hidden: the plain softmax
    cases.append((rng.normal(size=(3, 5)), np.ones((3, 5), dtype=bool)))
    for scores, mask in MASKED_SOFTMAX_FIXED + cases:
        check_against(student_masked_softmax, visible.MASKED_SOFTMAX_REFERENCE, (scores, mask),
                      declared=visible.MASKED_SOFTMAX)


def _random_projections(rng, d_model, d_k, d_v):
    W_Q, W_K = (rng.normal(size=(d_model, d_k)) / np.sqrt(d_model) for _ in range(2))
    return W_Q, W_K, rng.normal(size=(d_model, d_v)) / np.sqrt(d_model)


def causal_self_attention(student_attention):
    def check(args):
        check_against(student_attention, visible.CAUSAL_ATTENTION_REFERENCE, args,
                      declared=visible.CAUSAL_SELF_ATTENTION)

    rng = fresh_rng()
    # fixed first: the lesson's sentence, and its first query facing a hidden score 1500 above its own
    X, W_Q, W_K, W_V = visible.sentence_inputs(seed=14)
    check((X, W_Q, W_K, W_V))
    loud = visible.loud_future_input(np.random.default_rng(14), len(X), W_Q, W_K)
    check((loud, W_Q, W_K, W_V))
    drawn = tuple(distinct_sizes(rng, 4, 2, 10))
    for T, d_model, d_k, d_v in [drawn, (1, 5, 3, 2), (int(rng.integers(10, 17)), 7, 9, 4)]:
        W = _random_projections(rng, d_model, d_k, d_v)
        check((rng.normal(size=(T, d_model)), *W))
    W = _random_projections(rng, 6, 4, 4)
    T = int(rng.integers(3, 8))
    batch = rng.normal(size=(T + 1, T, 6))  # batch size != T: a mask built from the wrong axis cannot fit
    check((batch, *W))
    square = rng.normal(size=(T, T, 6))     # batch size == T: a mask built from the wrong axis fits but is wrong
    check((square, *W))
    W32 = tuple(w.astype(np.float32) for w in W)
    check((batch[:2].astype(np.float32), *W32))
    check((visible.loud_future_input(rng, T, W[0], W[1]), *W))


def _lengths(rng, B, T):
    lengths = rng.integers(0, T + 1, size=B)
    lengths[0], lengths[-1] = T, 0
    return rng.permutation(lengths)


# fixed: batch size == T (an axis mix-up between batch and positions keeps the right shape), then != T
PADDING_FIXED = [([4, 0, 2, 3], 4), ([5, 3, 2], 5)]


def _padding_cases(rng):
    """(lengths, T) pairs, each given twice: as a list and as an array."""
    cases = [(np.array(lengths), T) for lengths, T in PADDING_FIXED]
    for B, T in [(3, int(rng.integers(4, 9))), (1, 1), (5, int(rng.integers(9, 20)))]:
        cases.append((_lengths(rng, B, T), T))
    return [(form, T) for lengths, T in cases for form in (lengths.tolist(), lengths)]


def padding_mask(student_padding_mask):
    for args in _padding_cases(fresh_rng()):
        check_boolean(student_padding_mask, masking.padding_mask, args, declared=visible.PADDING_MASK)


def causal_padding_mask(student_causal_padding_mask):
    for args in _padding_cases(fresh_rng()):
        check_boolean(student_causal_padding_mask, masking.causal_padding_mask, args,
                      declared=visible.CAUSAL_PADDING_MASK)


def _clear_cut(attend, X):
    """Every real dependence moves the output by far more than any threshold a student might choose."""
    return np.array_equal(masking.dependence_matrix(attend, X, tol=1e-9),
                          masking.dependence_matrix(attend, X, tol=1e-4))


def _attention_targets(rng, T, d_model):
    """Targets with attention's dependence structures (causal, none, random mask), as plain data; redrawn until
    every dependence is clear-cut."""
    for _ in range(20):
        X = rng.normal(size=(T, d_model))
        W_Q, W_K, W_V = _random_projections(rng, d_model, 4, 3)
        random_mask = (rng.random((T, T)) < 0.5) | np.eye(T, dtype=bool)
        # mixes with attention's dependence structures: attention under a mask needs masked_softmax, which the
        # sandboxed kernel does not have while lesson 04 is graded
        weights = np.abs(rng.normal(size=(T, T))) + 0.1
        targets = [functools.partial(probes.mixed_readout, mix=np.where(mask, weights, 0.0), readout=W_V)
                   for mask in (masking.causal_mask(T), np.ones((T, T), dtype=bool), random_mask)]
        if all(_clear_cut(attend, X) for attend in targets):
            break
    return X, targets


def _readout_targets(rng, T, d_in):
    """Targets whose dependences are exact by construction (qkv.probes.mixed_readout): outputs that only
    rise, outputs that only fall and ignore input component 0, and weak dependences below a threshold."""
    mix = (rng.random((T, T)) < 0.5) | np.eye(T, dtype=bool)
    readout = rng.uniform(0.5, 1.5, size=(d_in, d_in + 1))
    weak = np.where(mix, 1.0, 1e-4)  # every pair depends, but the 1e-4 ones move by less than tol below
    X = rng.normal(size=(T, d_in))
    return X, [
        ((functools.partial(probes.mixed_readout, mix=mix.astype(float), readout=readout), X), {}),
        ((functools.partial(probes.mixed_readout, mix=mix.T.astype(float), readout=-readout, ignored=[0]), X), {}),
        ((functools.partial(probes.mixed_readout, mix=weak, readout=readout), X), {"delta": 1e-3, "tol": 1e-5}),
    ]


# fixed: outputs that only fall, input component 0 unread, and a dependence only on the future
READOUT_FIXED = (np.arange(12.0).reshape(4, 3) / 7,
                 np.array([[1.0, 0, 0, 1], [0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]]),
                 -np.array([[1.0, 2.0], [0.5, 1.0], [1.0, 0.25]]))


def dependence_matrix(student_probe):
    rng = fresh_rng()
    X, mix, readout = READOUT_FIXED
    fixed = functools.partial(probes.mixed_readout, mix=mix, readout=readout, ignored=[0])
    probe_checks.check_dependence(student_probe, fixed, X)
    # fixed: every output near 0 with dependences of 1e-4 below tol, then outputs near 1e3 whose dependences of 1e-5
    # still move them by 1e-5 > tol: a tolerance relative to the outputs (np.allclose) misses one side
    weak = functools.partial(probes.mixed_readout, mix=np.where(mix > 0, 1.0, 1e-4), readout=-readout)
    probe_checks.check_dependence(student_probe, weak, np.zeros_like(X), delta=1e-3, tol=1e-5)
    faint = functools.partial(probes.mixed_readout, mix=np.where(mix > 0, 1.0, 1e-5), readout=readout)
    probe_checks.check_dependence(student_probe, faint, X - 600.0)
    T, d_in = distinct_sizes(rng, 2, 3, 9)
    X, targets = _readout_targets(rng, T, d_in)
    for args, kwargs in targets:
        probe_checks.check_dependence(student_probe, *args, **kwargs)
    for T, d_model in [(int(rng.integers(4, 9)), 6), (1, 4)]:
        X, targets = _attention_targets(rng, T, d_model)
        for attend in targets:
            probe_checks.check_dependence(student_probe, attend, X)


ANSWERS = {
    "causal_blocks": ("b", None),
    "blocked_pairs": (lambda p: p["T"] * (p["T"] - 1) / 2, 0.01),  # canonical T = 8
    # word number `position` (from 1) of T words, all scores equal: (T - position) later words of 1/T each
    "future_share_zero_mask": (lambda p: (p["T"] - p["position"]) / p["T"], 0.005),  # canonical T = 5, position 1
    "why_meaningless": ("c", None),
}

# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered.
EXPLANATIONS = {
    "causal_blocks": "Query i may read keys j <= i (the past and itself); the mask hides the future, j > i.",
    "blocked_pairs": "The hidden pairs are the strict upper triangle of a T x T grid: T (T - 1) / 2.",
    "future_share_zero_mask": "Adding 0 changes nothing: T equal scores give 1/T each, so the words after "
                              "the query keep 1/T each of the weight.",
    "why_meaningless": "The target of each position is the next input token, so unmasked attention can copy it: "
                       "the loss falls without learning to predict, and there is nothing to copy when generating.",
}


answer = answer_of(ANSWERS)


seal(__name__)
