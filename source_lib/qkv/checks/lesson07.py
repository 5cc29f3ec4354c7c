"""Visible checks for lesson 07, the cost of attention: counting, fitting, the KV cache, online softmax."""
import math

import numpy as np

from qkv import attention as ref_attention, cost as ref_cost
from qkv.checking import Check, Hint, call, call_text, check_against, expect_array, expect_number, seal
# the chunked exercises' catalogues and declarations live in lesson07_chunked; re-exported for the hidden tests
# and the student edition, which read a lesson's Checks here
from qkv.checks.lesson07_chunked import (  # noqa: F401
    CAUSAL_CHUNKED_ATTENTION, CAUSAL_CHUNKED_ATTENTION_OVERFLOW, CAUSAL_MISTAKES, CHUNKED_ATTENTION,
    CHUNKED_ATTENTION_OVERFLOW, CHUNKED_MISTAKES)
from qkv.checks.lesson07_memory import memory_of_causal, memory_of_chunked

# The KV-cache step hands out the library's softmax: the lesson is about what is cached, not about softmax.
TOOLS = (ref_attention.softmax,)


# ---------------------------------------------------------------- cost_ratio

COST_RATIO_MISTAKES = [
    (lambda n_old, n_new: n_new / n_old,
     "this is how many times longer the context got; the score matrix is [n, n], so its size grows by the "
     "square of that ratio."),
    (lambda n_old, n_new: n_new ** 2 - n_old ** 2,
     "this is how many scores were added, not how many times more there are: divide instead of subtracting."),
    (lambda n_old, n_new: (n_old / n_new) ** 2,
     "this is upside down: the ratio is new cost / old cost, (n_new / n_old)^2."),
    (lambda n_old, n_new: 2 * n_new / n_old,
     "doubling the ratio is not squaring it: (n_new / n_old)^2."),
]

COST_RATIO = Check(name="cost_ratio", diagnoses=COST_RATIO_MISTAKES, rtol=1e-9, atol=1e-9)


def cost_ratio(student_cost_ratio):
    check_against(student_cost_ratio, ref_cost.cost_ratio, (8, 16), declared=COST_RATIO)
    check_against(student_cost_ratio, ref_cost.cost_ratio, (1024, 3072), declared=COST_RATIO)
    check_against(student_cost_ratio, ref_cost.cost_ratio, (100.0, 50.0), declared=COST_RATIO)  # floats are accepted
    print("cost_ratio: all visible checks passed.")


# ---------------------------------------------------------------- fit_exponent

def _slope(x, y):
    return float(np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)[0])


FIT_EXPONENT_MISTAKES = [
    (lambda s, v: _slope(s, v),
     "this is the slope of the values themselves against the sizes; a power law is a straight line only on "
     "log-log axes: fit np.log(values) against np.log(sizes)."),
    (lambda s, v: _slope(np.log(v), np.log(s)),
     "the axes are swapped: this is the slope of log(sizes) against log(values), 1 / exponent. Put log(sizes) "
     "on x and log(values) on y."),
    (lambda s, v: _slope(s, np.log(v)),
     "only the values are on a log axis; take the log of the sizes too."),
    (lambda s, v: _slope(np.log(s), v),
     "only the sizes are on a log axis; take the log of the values too."),
    (lambda s, v: float(np.polyfit(np.log(np.asarray(s, float)), np.log(np.asarray(v, float)), 1)[1]),
     "this is the intercept of the fitted line, log(c); the exponent is its slope (np.polyfit gives the slope "
     "first)."),
    (lambda s, v: float(np.log(np.asarray(v, float)[-1] / np.asarray(v, float)[0])
                        / np.log(np.asarray(s, float)[-1] / np.asarray(s, float)[0])),
     "this uses only the first and the last point; fit a line through all the points by least squares."),
]

FIT_EXPONENT = Check(name="fit_exponent", diagnoses=FIT_EXPONENT_MISTAKES, rtol=1e-6, atol=1e-9)


def power_law(rng, n, exponent, noise):
    sizes = np.sort(rng.choice(np.arange(16, 20000), size=n, replace=False)).astype(float)
    values = 3e-7 * sizes ** exponent * np.exp(rng.normal(scale=noise, size=n))
    return sizes, values


def fit_exponent(student_fit_exponent):
    rng = np.random.default_rng(70)
    sizes = np.array([128.0, 256, 512, 1024])
    check_against(student_fit_exponent, ref_cost.fit_exponent, (sizes, 5 * sizes ** 2), declared=FIT_EXPONENT)
    check_against(student_fit_exponent, ref_cost.fit_exponent, power_law(rng, 6, 1.5, 0.2), declared=FIT_EXPONENT)
    check_against(student_fit_exponent, ref_cost.fit_exponent, ([10, 20, 40, 80, 160], [2.0, 3.1, 8.0, 14.0, 40.0]),
                  declared=FIT_EXPONENT)
    print("fit_exponent: all visible checks passed.")


# ---------------------------------------------------------------- attention_step

def _step(q, k, v, tiled=False, scale=True, drop_newest=False, only_newest=False, softmax_axis=-1, one_max=False):
    """attention_step with one thing changed, to recognise a mistake. Its switches are plain data: the student
    edition withholds it (with no switch on it is the answer) and replays the catalogue's calls from fixtures."""
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    if drop_newest:
        k, v = k[:, :-1], v[:, :-1]
    if only_newest:
        k, v = k[:, -1:], v[:, -1:]
    n_q, n_kv = q.shape[0], k.shape[0]
    index = np.arange(n_q) % n_kv if tiled else np.arange(n_q) // (n_q // n_kv)
    scores = q @ k[index].swapaxes(-1, -2) / (np.sqrt(q.shape[-1]) if scale else 1.0)
    if one_max:  # a softmax written by hand, shifted by the maximum over every head instead of each head's own
        e = np.exp(scores - np.max(scores))
        return e / np.sum(e, axis=-1, keepdims=True) @ v[index]
    return ref_attention.softmax(scores, axis=softmax_axis) @ v[index]   # scores [H_q, 1, T]


# lesson 01's mistake, in the shapes of a generation step: over the heads (axis 0) or over the one query (axis 1,
# which makes every weight 1)
STEP_WRONG_AXIS = ("the weights sum to 1 along the wrong axis: the scores are [H_q, 1, T] and each new query's "
                   "softmax runs over the T cached positions, the last axis (softmax's default axis=-1), not over "
                   "the heads or the single query.")

ATTENTION_STEP_MISTAKES = [
    (lambda q, k, v: _step(q, k, v, scale=False),
     "the scores are not scaled: divide q_new @ k^T by sqrt(d_head) before the softmax, as in every attention."),
    (lambda q, k, v: _step(q, k, v, drop_newest=True),
     "the new token does not see itself: the cache already holds its key and value (they are appended before "
     "the step), so attend to every cached position, the last one included."),
    (lambda q, k, v: _step(q, k, v, only_newest=True),
     "the new token attends only to its own key: the point of the cache is to attend to every earlier token too."),
    (lambda q, k, v: _step(q, k, v, tiled=True),
     "query head h used key/value head h % H_kv (np.tile's order); consecutive query heads share a key/value "
     "head, h // (H_q // H_kv), which is np.repeat's order (lesson 05)."),
    (lambda q, k, v: _step(q, k, v, one_max=True),
     "the heads whose scores lie far below another head's came out 0/0: the scores were shifted by ONE maximum "
     "over every head, so exp underflows to 0 across those heads. Shift each head's scores by their own maximum "
     "(np.max(scores, axis=-1, keepdims=True)), or use the `softmax` imported from qkv.attention."),
] + [(lambda q, k, v, axis=axis: _step(q, k, v, softmax_axis=axis), STEP_WRONG_AXIS) for axis in (0, 1)]

ATTENTION_STEP = Check(name="attention_step", diagnoses=ATTENTION_STEP_MISTAKES, allowed=TOOLS)


def step_case(rng, n_q, n_kv, T, d_head):
    return (rng.normal(size=(n_q, 1, d_head)) * 1.5, rng.normal(size=(n_kv, T, d_head)) * 1.5,
            rng.normal(size=(n_kv, T, d_head)))


def uneven_step_case(n_q, n_kv, T, d_head, top=1000.0):
    """Fixed: the query heads of key/value head 0 score near `top`, the others near 0, so one maximum over every
    head leaves the others at exp(-top) = 0: 0/0 (each head must be shifted by its own maximum)."""
    rng = np.random.default_rng(n_q * 100 + T)
    q, k, v = step_case(rng, n_q, n_kv, T, d_head)
    q[: n_q // n_kv, 0, 0], k[0, :, 0] = 20.0, top * math.sqrt(d_head) / 20.0 + rng.normal(size=T)
    return q, k, v


def attention_step(student_attention_step):
    rng = np.random.default_rng(71)
    for case in (step_case(rng, 4, 2, 5, 3), step_case(rng, 6, 3, 3, 4), step_case(rng, 2, 2, 1, 4),
                 tuple(a.astype(np.float32) for a in step_case(rng, 6, 2, 3, 5))):  # the last in float32
        check_against(student_attention_step, ref_cost.attention_step, case, declared=ATTENTION_STEP)
    check_against(student_attention_step, ref_cost.attention_step, uneven_step_case(4, 2, 5, 3),
                  declared=ATTENTION_STEP)
    print("attention_step: all visible checks passed.")


# ---------------------------------------------------------------- append_to_cache

def _appended(kc, vc, kn, vn, only_new=False, new_first=False, swapped=False):
    """append_to_cache with one thing changed, to recognise a mistake (withheld by the student edition, like _step:
    with no switch on it is the answer)."""
    if only_new:
        return np.asarray(kn, float), np.asarray(vn, float)
    if new_first:
        return np.concatenate([kn, kc], axis=1), np.concatenate([vn, vc], axis=1)
    if swapped:
        return np.concatenate([vc, vn], axis=1), np.concatenate([kc, kn], axis=1)
    return np.concatenate([kc, kn], axis=1), np.concatenate([vc, vn], axis=1)


APPEND_MISTAKES = [
    (lambda kc, vc, kn, vn: _appended(kc, vc, kn, vn, only_new=True),
     "this is only the new token's key and value: the cache must keep every earlier one too (append, do not "
     "overwrite)."),
    (lambda kc, vc, kn, vn: _appended(kc, vc, kn, vn, new_first=True),
     "the new keys and values come first: the cache is in time order, so they go at the END (axis 1)."),
    (lambda kc, vc, kn, vn: _appended(kc, vc, kn, vn, swapped=True),
     "k and v are swapped: return (k_cache, v_cache) in that order."),
]

APPEND_TO_CACHE = Check(name="append_to_cache", diagnoses=APPEND_MISTAKES, outputs=("k_cache", "v_cache"))


def cache_case(rng, n_kv, T, n_new, d_head, d_v=None):
    d_v = d_head if d_v is None else d_v
    return (rng.normal(size=(n_kv, T, d_head)), rng.normal(size=(n_kv, T, d_v)),
            rng.normal(size=(n_kv, n_new, d_head)), rng.normal(size=(n_kv, n_new, d_v)))


def append_to_cache(student_append):
    rng = np.random.default_rng(72)
    for case in (cache_case(rng, 2, 3, 1, 4), cache_case(rng, 3, 2, 2, 4, d_v=5), cache_case(rng, 2, 0, 1, 3),
                 tuple(a.astype(np.float32) for a in cache_case(rng, 3, 2, 1, 5))):  # the last in float32
        check_against(student_append, ref_cost.append_to_cache, case, declared=APPEND_TO_CACHE)
    print("append_to_cache: all visible checks passed.")


# ---------------------------------------------------------------- the student's cache inside SmolLM2

VISIBLE_PROMPT = "The capital of France is"


def _student_step(student_attention_step):
    def attention_step(q_new, k_cache, v_cache):
        shown = call_text("attention_step", (q_new, k_cache, v_cache))
        result = call(student_attention_step, q_new, k_cache, v_cache, name="attention_step", allowed=TOOLS)
        return expect_array(result, q_new.shape, f"inside SmolLM2, {shown}").astype(np.float32)
    return attention_step


def _student_append(student_append):
    def append_to_cache(k_cache, v_cache, k_new, v_new):
        shown = call_text("append_to_cache", (k_cache, v_cache, k_new, v_new))
        result = call(student_append, k_cache, v_cache, k_new, v_new, name="append_to_cache")
        if not isinstance(result, tuple) or len(result) != 2:
            raise Hint(f"inside SmolLM2, {shown} returned {type(result).__name__}; "
                       "expected a tuple (k_cache, v_cache).")
        grown = (k_cache.shape[0], k_cache.shape[1] + k_new.shape[1], k_cache.shape[2])
        return tuple(expect_array(part, grown, f"inside SmolLM2, {shown}, its {name},").astype(np.float32)
                     for part, name in zip(result, ("k_cache", "v_cache")))
    return append_to_cache


def generation_matches(student_attention_step, student_append, prompt=VISIBLE_PROMPT, n_new=4, atol=1e-4):
    """Greedy generation with the student's cache must give the tokens and logits of generation without one."""
    from qkv import kv_cache, model

    m = model.load()
    ids = model.encode(m, prompt)
    try:
        new_ids, logits = kv_cache.generate_with_cache(m, ids, n_new,
                                                       attention_step=_student_step(student_attention_step),
                                                       append_to_cache=_student_append(student_append),
                                                       return_logits=True)
    except Hint:
        raise
    except ValueError as error:
        raise Hint(f"SmolLM2 could not generate with your attention_step and append_to_cache: {error}") from None
    # without a cache, step i re-runs the whole sequence; causality makes its last row row i of one forward pass
    reference = model.forward(m, ids + new_ids[:-1]).logits[len(ids) - 1:]
    expected_ids = [int(i) for i in np.argmax(reference, axis=1)]
    gap = float(np.max(np.abs(logits - reference)))
    expect_number(gap, "the largest logit difference")
    if new_ids != expected_ids:
        step = next(i for i, (a, b) in enumerate(zip(new_ids, expected_ids)) if a != b)
        words = model.tokens(m, [expected_ids[step], new_ids[step]])
        raise Hint(f"with your cache SmolLM2 generates {words[1]!r} at step {step + 1} after {prompt!r}; without a "
                   f"cache it generates {words[0]!r} (largest logit difference {gap:.3g}). Check that each step "
                   f"appends the new key and value at the end and attends to all of them.")
    if gap > atol:
        raise Hint(f"with your cache SmolLM2 generates the same {len(new_ids)} tokens after {prompt!r}, but its "
                   f"logits differ from generation without a cache by up to {gap:.3g} (allowed {atol:g}): the same "
                   f"tokens are not proof. Check the sqrt(d_head) scale and which cached positions you attend to.")
    return model.decode(m, new_ids), gap


def generation_with_cache(student_attention_step, student_append):
    text, gap = generation_matches(student_attention_step, student_append)
    print(f"SmolLM2 with your KV cache continues {VISIBLE_PROMPT!r} with {text!r}, exactly as without a cache; "
          f"largest logit difference {gap:.2g}.")


# ---------------------------------------------------------------- chunked_attention (lesson07_chunked)

def overflow_case(rng, n_q, n_k, d, d_v, top=1000.0):
    """Scores up to about `top`, far past exp's limit of 709, with every query's largest score on the first key: the
    running max is found at once and never grows, so only an exp without the max subtracted can overflow here."""
    Q = np.abs(rng.normal(size=(n_q, d))) + 1.0                # every query points into the positive orthant
    K = rng.normal(size=(n_k, d))
    K[0] = top * math.sqrt(d) / Q.sum(axis=1).min()             # q . k_0 / sqrt(d) >= top for every query
    return Q, K, rng.normal(size=(n_k, d_v))


def sunken_case(n_q, n_k, d, d_v, depth=1000.0):
    """Every score of queries 1.. lies near -depth, far below 0 (exp(-depth) underflows to 0), and query 0's near
    +depth: a running max started at 0 instead of -inf gives those rows 0/0, and query 0 stays right. Fixed."""
    rng = np.random.default_rng(int(depth) + n_k)
    Q = np.abs(rng.normal(size=(n_q, d))) + 1.0                # every query points into the positive orthant
    K = rng.normal(size=(n_k, d)) - depth * math.sqrt(d) / Q.sum(axis=1).min()
    Q[0] *= -1.0
    return Q, K, rng.normal(size=(n_k, d_v))


def chunked_case(rng, n_q, n_k, d, d_v, spread=2.0, rising=False):
    Q, K, V = rng.normal(size=(n_q, d)), rng.normal(size=(n_k, d)) * spread, rng.normal(size=(n_k, d_v))
    if rising:  # every later chunk scores higher: the running max keeps growing, so rescaling is exercised
        K = K + np.linspace(0, 6, n_k)[:, None] * Q.mean(axis=0)
    return Q, K, V


def chunked_attention(student_chunked):
    rng = np.random.default_rng(73)
    check_against(student_chunked, ref_cost.chunked_attention,
                  (*chunked_case(rng, 3, 8, 4, 2, rising=True), 4), declared=CHUNKED_ATTENTION)
    check_against(student_chunked, ref_cost.chunked_attention,
                  (*chunked_case(rng, 4, 10, 3, 5, rising=True), 4), declared=CHUNKED_ATTENTION)
    check_against(student_chunked, ref_cost.chunked_attention, (*chunked_case(rng, 2, 5, 4, 3), 1),
                  declared=CHUNKED_ATTENTION)
    check_against(student_chunked, ref_cost.chunked_attention, (*map(np.float32, chunked_case(rng, 2, 5, 4, 3)), 8),
                  declared=CHUNKED_ATTENTION)  # float32 in, float32 out
    check_against(student_chunked, ref_cost.chunked_attention, (*overflow_case(rng, 3, 9, 4, 2), 4),
                  declared=CHUNKED_ATTENTION_OVERFLOW)
    check_against(student_chunked, ref_cost.chunked_attention, (*sunken_case(3, 7, 4, 2), 3),
                  declared=CHUNKED_ATTENTION)
    memory_of_chunked(student_chunked)
    print("chunked_attention: all visible checks passed (and it never holds the whole score matrix).")


# ---------------------------------------------------------------- causal_chunked_attention (lesson07_chunked)

def causal_case(rng, T, d, d_v, spread=2.0):
    return rng.normal(size=(T, d)), rng.normal(size=(T, d)) * spread, rng.normal(size=(T, d_v))


def causal_chunked_attention(student_causal):
    rng = np.random.default_rng(74)
    for T, d, d_v, chunk, dtype in [(8, 4, 3, 2, float), (7, 3, 2, 3, float), (5, 4, 2, 5, np.float32)]:
        case = tuple(a.astype(dtype) for a in causal_case(rng, T, d, d_v))  # the last in float32
        check_against(student_causal, ref_cost.causal_chunked_attention, (*case, chunk),
                      declared=CAUSAL_CHUNKED_ATTENTION)
    check_against(student_causal, ref_cost.causal_chunked_attention, (*overflow_case(rng, 9, 9, 4, 2), 3),
                  declared=CAUSAL_CHUNKED_ATTENTION_OVERFLOW)
    check_against(student_causal, ref_cost.causal_chunked_attention, (*sunken_case(7, 7, 4, 2), 3),
                  declared=CAUSAL_CHUNKED_ATTENTION)
    memory_of_causal(student_causal)
    print("causal_chunked_attention: all visible checks passed (and it never holds more than a block of scores).")


seal(__name__)
