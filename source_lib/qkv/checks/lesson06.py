"""Visible checks for lesson 06, sinks: the first-token share, contributions, occlusion, sliding windows,
perplexity, head-pattern scores and head ablation."""
import dataclasses
import functools

import numpy as np

from qkv import sinks as ref_sinks
from qkv.attention import masked_softmax
from qkv.checking import (Check, Hint, Probes, before_check, call, call_text, certain_diagnosis, check_against,
                          expect_array, seal)
from qkv.checks.lesson06_ablation import check_ablation, gqa_inputs
from qkv.masking import causal_mask


# ---------------------------------------------------------------- inputs

def causal_weights(rng, H, T, sharpness=2.0):
    """Random attention weights of one layer [H, T, T], rows summing to 1 over the visible keys."""
    return masked_softmax(rng.normal(size=(H, T, T)) * sharpness, causal_mask(T))


def full_weights(rng, H, T, sharpness=2.0):
    """Random weights without a mask (every key visible): makes "reads the future" mistakes visible."""
    return masked_softmax(rng.normal(size=(H, T, T)) * sharpness)


def toy_logprob(rng, vocab=12, decay=0.7):
    """A synthetic next-token-log-probability function of token ids, importable by the grader."""
    return functools.partial(ref_sinks.toy_next_token_logprob, token_values=rng.normal(size=vocab) * 1.5, decay=decay)


def sink_logprob(rng, vocab=12, sink_bonus=3.0):
    return functools.partial(ref_sinks.toy_first_token_logprob, token_values=rng.normal(size=vocab),
                             sink_bonus=sink_bonus)


# ---------------------------------------------------------------- first_token_share

FIRST_TOKEN_SHARE_MISTAKES = [
    (lambda w: np.asarray(w)[:, :, 0].mean(),
     "query 0 is included. Query 0 can only look at key 0 (weight 1 by construction), so it says nothing about "
     "a preference: average over queries 1..T-1 only."),
    (lambda w: np.asarray(w)[:, 1:, :].mean(),
     "this averages over all keys, not the weight on key 0: take column 0 of every query row (weights[:, 1:, 0])."),
    (lambda w: np.asarray(w)[:, 0, :].mean(),
     "this reads row 0 (what query 0 looks at); the sink is column 0 (what every query gives key 0)."),
    (lambda w: np.asarray(w)[:, -1, 0].mean(),
     "this is the last query's weight on key 0 only; average over every query 1..T-1."),
    (lambda w: np.asarray(w)[:, 1:, 0].mean(axis=1).sum(),
     "the heads are summed, not averaged: the share is a mean over heads and queries."),
]


# Rows that sum to 1 make "the mean over all keys" and "row 0" the same number (1/T) on every input: a diagnosis
# between them is confirmed on weights that do not (the mean of column 0 is defined for any array).
FIRST_TOKEN_SHARE_CONFIRMATIONS = [((np.random.default_rng(600).uniform(size=(2, 5, 5)),), {}),
                                   ((np.random.default_rng(601).uniform(size=(3, 4, 4)),), {})]

FIRST_TOKEN_SHARE = Check(name="first_token_share", diagnoses=FIRST_TOKEN_SHARE_MISTAKES,
                          confirm_with=FIRST_TOKEN_SHARE_CONFIRMATIONS)


def first_token_share(student_fn):
    rng = np.random.default_rng(60)
    check_against(student_fn, ref_sinks.first_token_share, (causal_weights(rng, 3, 5),), declared=FIRST_TOKEN_SHARE)
    check_against(student_fn, ref_sinks.first_token_share, (causal_weights(rng, 1, 2),), declared=FIRST_TOKEN_SHARE)
    check_against(student_fn, ref_sinks.first_token_share,
                  (np.broadcast_to(np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None], (2, 4, 4)).astype(np.float32),),
                  declared=FIRST_TOKEN_SHARE)
    print("first_token_share: all visible checks passed.")


# ---------------------------------------------------------------- contribution_norms

def _norms(w, v, W_O, use_weight=True, use_W_O=True, square=False):
    w, v, W_O = (np.asarray(a, dtype=float) for a in (w, v, W_O))
    vectors = v @ W_O if use_W_O else v
    if use_weight:
        vectors = w[:, None] * vectors
    norms = np.linalg.norm(vectors, axis=-1)
    return norms ** 2 if square else norms


CONTRIBUTION_MISTAKES = [
    (lambda w, v, W_O: _norms(w, v, W_O, use_W_O=False),
     "this is ||w_j v_j||, before the output projection. What key j adds to the residual stream is w_j v_j W_O: "
     "multiply by W_O_head before taking the norm."),
    (lambda w, v, W_O: _norms(w, v, W_O, use_weight=False),
     "this is ||v_j W_O||, the size of the vector key j COULD add; multiply it by the weight w_j the query gives it."),
    (lambda w, v, W_O: _norms(w, v, W_O, use_weight=False, use_W_O=False),
     "this is ||v_j||: neither the weight nor the output projection is applied."),
    (lambda w, v, W_O: _norms(w, v, W_O, square=True),
     "these are squared norms: take the square root (np.linalg.norm(..., axis=-1))."),
]

CONTRIBUTION_NORMS = Check(name="contribution_norms", diagnoses=CONTRIBUTION_MISTAKES)


def contribution_case(rng, T, d_head, d_model):
    weights = masked_softmax(rng.normal(size=T) * 2)  # one query's row
    return weights, rng.normal(size=(T, d_head)), rng.normal(size=(d_head, d_model)) / np.sqrt(d_head)


def contribution_norms(student_fn):
    rng = np.random.default_rng(61)
    for case in (contribution_case(rng, 4, 3, 5), contribution_case(rng, 6, 2, 7),
                 (np.array([1.0], np.float32), np.ones((1, 2), np.float32), np.eye(2, dtype=np.float32))):
        check_against(student_fn, ref_sinks.contribution_norms, case, declared=CONTRIBUTION_NORMS)
    print("contribution_norms: all visible checks passed.")


# ---------------------------------------------------------------- occlusion_effects

def _delete(ids, i):
    return np.delete(np.asarray(ids), i)


OCCLUSION_MISTAKES = [
    (lambda fn, ids: np.array([fn(_delete(ids, i)) for i in range(len(ids))]),
     "these are the new log-probabilities; report the DROP: log p(full sequence) - log p(sequence without i)."),
    (lambda fn, ids: np.array([fn(_delete(ids, i)) - fn(np.asarray(ids)) for i in range(len(ids))]),
     "the sign is flipped: the drop is log p(full) - log p(without i), positive when deleting i hurts."),
    (lambda fn, ids: np.array([fn(ids) - fn(_delete(ids, (i + 1) % len(ids))) for i in range(len(ids))]),
     "entry i deletes position i + 1: check your slicing (ids[:i] + ids[i+1:] removes exactly position i)."),
    (lambda fn, ids: np.array([fn(ids) - fn(_delete(ids, i - 1)) for i in range(len(ids))]),
     "entry i deletes position i - 1: check your slicing (ids[:i] + ids[i+1:] removes exactly position i)."),
    (lambda fn, ids: np.array([fn(ids) - fn(np.asarray(ids)[:max(i, 1)]) for i in range(len(ids))]),
     "this cuts the sequence at i instead of deleting position i alone: keep everything after i too."),
]

# its confirmations are drawn from each check's own generator (occlusion_confirmations), so given per call
OCCLUSION_EFFECTS = Check(name="occlusion_effects", diagnoses=OCCLUSION_MISTAKES)


def occlusion_confirmations(rng):
    """Further inputs on which a diagnosed occlusion mistake must show too (the checker cannot move a
    function or token ids a little by itself)."""
    return [((toy_logprob(rng, 10, decay=0.8), np.array([4, 9, 1, 7, 2, 6])), {}),
            ((sink_logprob(rng, 10), np.array([3, 8, 5, 0])), {})]


def occlusion_effects(student_fn):
    rng = np.random.default_rng(62)
    confirm = occlusion_confirmations(rng)
    check_against(student_fn, ref_sinks.occlusion_effects, (toy_logprob(rng), np.array([3, 1, 4, 1, 5])),
                  declared=OCCLUSION_EFFECTS, confirm_with=confirm)
    check_against(student_fn, ref_sinks.occlusion_effects, (sink_logprob(rng), np.array([7, 2, 9])),
                  declared=OCCLUSION_EFFECTS, confirm_with=confirm)
    check_against(student_fn, ref_sinks.occlusion_effects, (toy_logprob(rng), [2, 11]), declared=OCCLUSION_EFFECTS,
                  confirm_with=confirm)
    print("occlusion_effects: all visible checks passed.")


# ---------------------------------------------------------------- sliding_window_mask

def _window(T, window, n_sink=0, le=False, causal_sinks=True, sinks_inside=False):
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    width = window - n_sink if sinks_inside else window
    recent = (i - j <= width) if le else (i - j < width)
    sink = (j < n_sink) & (j <= i) if causal_sinks else (j < n_sink)
    return ((j <= i) & recent) | sink


SLIDING_WINDOW_MISTAKES = [
    (lambda T, w, s=0: _window(T, w, s, le=True),
     "each query sees window + 1 recent keys: with i - j <= window the window is one too wide. Query i keeps "
     "keys i - window + 1 .. i, so the test is i - j < window."),
    (lambda T, w, s=0: _window(T, w, s, causal_sinks=False),
     "the sink keys are visible to queries BEFORE them (j < n_sink without j <= i): a future leak. A sink is "
     "still a key in the past: keep j <= i."),
    (lambda T, w, s=0: _window(T, w, s, sinks_inside=True),
     "the sinks were counted inside the window (window - n_sink recent keys). The sinks come on top: each "
     "query keeps its last `window` keys AND the first n_sink."),
    (lambda T, w, s=0: _window(T, w, 0),
     "the sink keys are missing: keys j < n_sink must stay visible (to queries at or after them)."),
    (lambda T, w, s=0: np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) < w,
     "the mask lets queries read the future: only keys j <= i may be visible."),
]


# Masks on which every two listed mistakes differ (several sinks, a window wider than the sinks, queries past
# both): a diagnosis made on one case is confirmed on these before it is named. On a case with n_sink = 1 alone,
# "the sinks counted inside the window" is the same mask as a window one too narrow.
SLIDING_WINDOW_CONFIRMATIONS = [((9, 4, 2), {}), ((11, 3, 3), {})]

# read by mask_check (a mask is compared exactly, as booleans), not by check_against
SLIDING_WINDOW_MASK = Check(name="sliding_window_mask", diagnoses=SLIDING_WINDOW_MISTAKES,
                            confirm_with=SLIDING_WINDOW_CONFIRMATIONS)


def mask_check(student_fn, args, declared=SLIDING_WINDOW_MASK, **options):
    """check_against for a boolean mask, read from `declared` (its fields given as keywords on top)."""
    check = dataclasses.replace(declared, **options)
    before_check(ref_sinks.sliding_window_mask, args, {}, check)
    name, shown = check.name, call_text(check.name, args)
    raw = call(student_fn, *args, name=name)
    expected = ref_sinks.sliding_window_mask(*args)
    got = expect_array(raw, expected.shape, shown)
    if np.asarray(raw).dtype != bool:
        raise Hint(f"{shown} returned a mask of {np.asarray(raw).dtype}; a mask must be boolean (True where the "
                   f"query may read the key): build it from comparisons such as j <= i, combined with & and |.")
    if np.array_equal(np.asarray(raw), expected):
        return
    probes = Probes(student_fn, ref_sinks.sliding_window_mask, args, {}, name, (), confirm_with=check.confirm_with)
    named = certain_diagnosis(got, expected.astype(float), args, {}, check.diagnoses, probes)
    if named:
        raise Hint(f"{shown} is wrong: {named}")
    wrong = np.argwhere(np.asarray(raw) != expected)[0]
    i, j = int(wrong[0]), int(wrong[1])
    raise Hint(f"{shown} is wrong: query {i} {'may' if got[i, j] else 'may not'} read key {j}; it should "
               f"{'' if expected[i, j] else 'not '}(j <= i and (i - j < window or j < n_sink)).")


def sliding_window_mask(student_fn):
    for args in [(6, 2, 1), (5, 3, 0), (7, 2, 2), (4, 4, 1), (3, 1, 0)]:
        mask_check(student_fn, args, declared=SLIDING_WINDOW_MASK)
    print("sliding_window_mask: all visible checks passed.")


# ---------------------------------------------------------------- perplexity

def _log_softmax(logits, axis=-1):
    logits = np.asarray(logits, dtype=float)
    shifted = logits - logits.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _nll(logits, ids, shift=1, axis=-1):
    ids = np.asarray(ids)
    log_p = _log_softmax(logits, axis)
    if shift == 1:
        return -log_p[np.arange(len(ids) - 1), ids[1:]]
    if shift == 0:
        return -log_p[np.arange(len(ids)), ids]
    return -log_p[np.arange(1, len(ids)), ids[:-1]]  # shift == -1: logits[1:] against ids[:-1]


def _nll_over_positions_of_the_predicting_rows(logits, ids):
    # the wrong axis again, but the rows sliced (logits[:-1]) before the softmax over them
    ids = np.asarray(ids)
    return -_log_softmax(np.asarray(logits)[:-1], axis=0)[np.arange(len(ids) - 1), ids[1:]]


PERPLEXITY_WRONG_AXIS = ("the softmax is taken over the positions (axis 0), not over the vocabulary: row t of the "
                         "logits is one prediction, a distribution over the vocabulary, so normalise each row "
                         "(axis=-1). Lesson 01 met this mistake: a softmax along the wrong axis.")

PERPLEXITY_MISTAKES = [
    (lambda logits, ids: np.exp(np.mean(_nll(logits, ids, shift=0))),
     "logits and ids are not shifted: row t of the logits predicts the NEXT token, so compare logits[:-1] "
     "with ids[1:]."),
    (lambda logits, ids: np.exp(np.mean(_nll(logits, ids, shift=-1))),
     "shifted the wrong way: logits[t] predicts ids[t + 1], so compare logits[:-1] with ids[1:]."),
    (lambda logits, ids: np.exp(np.mean(_nll(logits, ids)) / np.log(2)),
     "the bases are mixed: the mean is in bits (log2) but exponentiated with e. Use natural logs throughout "
     "(np.log and np.exp), or 2 ** (mean in bits)."),
    (lambda logits, ids: np.exp(np.sum(_nll(logits, ids)) / len(ids)),
     "the mean is over T positions, but only T - 1 tokens are predicted (position 0 has nothing before it): "
     "divide by T - 1."),
    (lambda logits, ids: np.exp(np.sum(_nll(logits, ids))),
     "this is exp of the SUM of the losses (the inverse probability of the whole text); perplexity is exp of "
     "the MEAN loss per token."),
    (lambda logits, ids: np.mean(np.exp(_nll(logits, ids))),
     "this is the mean of exp(loss); perplexity is exp of the mean loss."),
    (lambda logits, ids: np.exp(np.mean(_nll(logits, ids, axis=0))), PERPLEXITY_WRONG_AXIS),
    (lambda logits, ids: np.exp(np.mean(_nll_over_positions_of_the_predicting_rows(logits, ids))),
     PERPLEXITY_WRONG_AXIS),
]


def possible_perplexity(got, args, kwargs):
    """Every probability is at most 1, so every loss -ln p is at least 0 and a perplexity at least 1."""
    if float(got) < 1 - 1e-9:
        return (f"a perplexity of {float(got):.4g} is impossible: below 1 it would need probabilities above 1. "
                f"Is the loss's sign flipped (the loss is -ln p, which is never negative), or are the logits not "
                f"turned into log-probabilities over the vocabulary (axis=-1) first? (Exactly 0: a row far below "
                f"the largest logit gave log(0); shift each row by its own maximum, not the array's one maximum.)")
    return None

OVERFLOW_HINT = ("np.exp of large logits overflows. Subtract each row's maximum before exponentiating "
                 "(log softmax = x - max - log(sum(exp(x - max)))); it changes nothing mathematically.")

PERPLEXITY = Check(name="perplexity", diagnoses=PERPLEXITY_MISTAKES, nonfinite_hint=OVERFLOW_HINT,
                   extra_checks=(possible_perplexity,))


def perplexity_case(rng, T, vocab, scale=3.0, offset=0.0):
    """Logits [T, vocab], rows shifted from 0 to `offset` (exp overflows; one global max underflows), ids [T]."""
    shift = rng.permutation(np.linspace(0.0, offset, T))[:, None]
    return rng.normal(size=(T, vocab)) * scale + shift, rng.integers(0, vocab, size=T)


def perplexity(student_fn):
    rng = np.random.default_rng(63)
    check_against(student_fn, ref_sinks.perplexity, perplexity_case(rng, 5, 7), declared=PERPLEXITY)
    check_against(student_fn, ref_sinks.perplexity, perplexity_case(rng, 2, 4), declared=PERPLEXITY)
    check_against(student_fn, ref_sinks.perplexity, perplexity_case(rng, 6, 5, offset=1500.0), declared=PERPLEXITY)
    uniform = check_against(student_fn, ref_sinks.perplexity, (np.zeros((4, 10), np.float32), np.array([1, 2, 3, 4])),
                            declared=PERPLEXITY)
    print(f"perplexity: all visible checks passed (uniform logits over 10 tokens give {float(uniform):.4g}).")


# ---------------------------------------------------------------- head-pattern scores

def _offset_score(w, offset, first_query=1):
    w = np.asarray(w, dtype=float)
    T = w.shape[1]
    i = np.arange(first_query, T)
    j = i + offset
    keep = (j >= 0) & (j < T)
    return w[:, i[keep], j[keep]].mean(axis=-1)


DIAGONAL_MISTAKES = [
    (lambda w: _offset_score(w, 0, first_query=0),
     "query 0 is included: it can only read itself (weight 1 by construction); average over queries 1..T-1."),
    (lambda w: _offset_score(w, -1),
     "this reads key i - 1 (the previous token); the diagonal is key i, the query itself."),
]

PREVIOUS_TOKEN_MISTAKES = [
    (lambda w: _offset_score(w, 1, first_query=0),
     "this reads key i + 1, the token AFTER the query (the upper diagonal); the previous token is key i - 1."),
    (lambda w: _offset_score(w, -2, first_query=2),
     "this reads key i - 2; the previous token is key i - 1."),
    (lambda w: _offset_score(w, 0),
     "this reads key i (the diagonal); the previous token is key i - 1."),
    (lambda w: _offset_score(w, -1, first_query=2),
     "query 1 is left out: every query i >= 1 has a previous token (query 1's is key 0)."),
]


def _induction(w, period, offset=1, all_queries=False):
    w = np.asarray(w, dtype=float)
    T = w.shape[1]
    i = np.arange(period if all_queries else T - period, T)
    j = i - period + offset
    return w[:, i, j].mean(axis=-1)


INDUCTION_MISTAKES = [
    (lambda w, p: _induction(w, p, offset=0),
     "this reads key i - period, the EARLIER COPY of the query's own token (a duplicate-token head). An induction "
     "head reads the token that came AFTER it: key i - period + 1."),
    (lambda w, p: _induction(w, p, offset=2),
     "this reads key i - period + 2, one too far: the token after the earlier occurrence is key i - period + 1."),
    (lambda w, p: _induction(w, p, offset=-1),
     "this reads key i - period - 1, the token BEFORE the earlier occurrence; use key i - period + 1."),
]

DIAGONAL_SCORE = Check(name="diagonal_score", diagnoses=DIAGONAL_MISTAKES)
PREVIOUS_TOKEN_SCORE = Check(name="previous_token_score", diagnoses=PREVIOUS_TOKEN_MISTAKES)
INDUCTION_SCORE = Check(name="induction_score", diagnoses=INDUCTION_MISTAKES)


def scores_case(rng, H, T, causal=True):
    return (causal_weights if causal else full_weights)(rng, H, T)


def diagonal_score(student_fn):
    rng = np.random.default_rng(64)
    for weights in (scores_case(rng, 3, 5), scores_case(rng, 2, 4, causal=False), np.float32([np.eye(3)] * 2)):
        check_against(student_fn, ref_sinks.diagonal_score, (weights,), declared=DIAGONAL_SCORE)
    print("diagonal_score: all visible checks passed.")


def previous_token_score(student_fn):
    rng = np.random.default_rng(65)
    check_against(student_fn, ref_sinks.previous_token_score, (scores_case(rng, 3, 5),),
                  declared=PREVIOUS_TOKEN_SCORE)
    check_against(student_fn, ref_sinks.previous_token_score, (scores_case(rng, 2, 6, causal=False),),
                  declared=PREVIOUS_TOKEN_SCORE)
    shifted = np.eye(4, k=-1, dtype=np.float32)
    shifted[0, 0] = 1.0  # a perfect previous-token head: query i reads key i - 1 (query 0 reads itself)
    check_against(student_fn, ref_sinks.previous_token_score, (shifted[None],), declared=PREVIOUS_TOKEN_SCORE)
    print("previous_token_score: all visible checks passed.")


def induction_score(student_fn):
    rng = np.random.default_rng(66)
    check_against(student_fn, ref_sinks.induction_score, (scores_case(rng, 3, 8), 4), declared=INDUCTION_SCORE)
    check_against(student_fn, ref_sinks.induction_score, (scores_case(rng, 2, 6, causal=False).astype(np.float32), 3),
                  declared=INDUCTION_SCORE)
    check_against(student_fn, ref_sinks.induction_score, (scores_case(rng, 1, 2), 1), declared=INDUCTION_SCORE)
    print("induction_score: all visible checks passed.")


# ---------------------------------------------------------------- ablate_heads (lesson06_ablation)

def ablate_heads(student_fn):
    rng = np.random.default_rng(67)
    heads = [(1, 0), (1, 4), (2, 2)]
    cases = [(*gqa_inputs(rng, 6, 2, 4, 3), layer) for layer in (0, 1, 2)]
    check_ablation(student_fn, ref_sinks.stand_in_attention, heads, cases)  # not lesson 05's GQA: issue 41
    print("ablate_heads: all visible checks passed.")


seal(__name__)
