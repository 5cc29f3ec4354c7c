"""Visible checks for lesson 01, the lookup analogy."""
import numpy as np

from qkv import lookup, attention as ref_attention
from qkv.checking import Check, Hint, call, check_against, describe, seal

SOFTMAX_OVERFLOW = ("exp overflowed. Subtract the maximum along `axis` (keepdims=True) before "
                    "exponentiating; it cancels out in the ratio.")


def _other_axis(x, axis):
    return 0 if axis % np.ndim(x) == np.ndim(x) - 1 else -1


WHOLE_ARRAY = ("the result is normalised over the whole array; each slice along `axis` must sum to 1 "
               "(use keepdims=True).")

SOFTMAX_MISTAKES = [
    (lambda x, axis=-1: ref_attention.softmax(x, axis=_other_axis(x, axis)),
     "the result sums to 1 along the wrong axis: normalise along `axis`, not a fixed one."),
    (lambda x, axis=-1: np.asarray(x) / np.sum(x, axis=axis, keepdims=True),
     "these are the inputs divided by their sum. Softmax exponentiates first, then normalises."),
    (lambda x, axis=-1: np.exp(x),
     "the exponentials are right but not normalised: divide by their sum along `axis`."),
    # on one slice (a 1-D input) this and the whole-array sum below give the same NaN: only an input with
    # several slices, one of them overflowing, tells them apart (SOFTMAX_CONFIRMATIONS)
    (lambda x, axis=-1: np.exp(x) / np.sum(np.exp(x), axis=axis, keepdims=True),
     SOFTMAX_OVERFLOW),
    (lambda x, axis=-1: np.exp(x) / np.sum(np.exp(x)), WHOLE_ARRAY),
    (lambda x, axis=-1: (lambda e: e / np.sum(e))(np.exp(x - np.max(x))), WHOLE_ARRAY),  # the same, with a max
    (lambda x, axis=-1: (lambda e: e / np.sum(e))(_shifted_exp(x, axis)), WHOLE_ARRAY),
    (lambda x, axis=-1: _shifted_by_global_max(x, axis),
     "the scores were shifted by ONE maximum of the whole array, so a slice far below it underflows to "
     "exp(-1000) / sum = 0/0. Subtract each slice's own maximum: np.max(x, axis=axis, keepdims=True)."),
]


def _shifted_exp(x, axis):
    # the exponentials shifted by each slice's own maximum: softmax's numerator, done right (its own function, so
    # the student edition withholds it while lesson 01 is open: qkv_autograde.kernels.holdings.TWINS)
    return np.exp(x - np.max(x, axis=axis, keepdims=True))


def _shifted_by_global_max(x, axis):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.max(x))
    return e / np.sum(e, axis=axis, keepdims=True)


# Several slices, one of them far above the rest: without the max the large slice overflows to NaN while
# the others stay right, summing over the whole array zeroes them, one global max zeroes the small ones.
SOFTMAX_CONFIRMATIONS = [((np.array([[1000.0, 1001.0, 999.0], [1.0, 2.0, 0.5]]),), {}),
                         ((np.array([[3.0, 800.0], [1.0, 802.0], [0.0, 801.0]]),), {"axis": 0})]


def sums_to_one(got, args, kwargs):
    axis = kwargs.get("axis", args[1] if len(args) > 1 else -1)
    if not np.allclose(np.sum(got, axis=axis), 1, atol=1e-4):
        return "the slices along `axis` do not sum to 1."
    return None


SOFTMAX = Check(name="softmax", diagnoses=SOFTMAX_MISTAKES, extra_checks=(sums_to_one,),
                nonfinite_hint=SOFTMAX_OVERFLOW, confirm_with=SOFTMAX_CONFIRMATIONS)


# [2, 3, 5]: every size distinct, so an axis mixed up changes the shape normalised; -40 gives a weight near 1e-18
_MIDDLE_AXIS_SCORES = np.arange(30.0).reshape(2, 3, 5) % 7 - np.array([0.0, 40.0, 2.0])[:, None]


def softmax(student_softmax):
    small = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    check_against(student_softmax, ref_attention.softmax, (np.array([2.0, 1.0, 0.1]),), declared=SOFTMAX)
    check_against(student_softmax, ref_attention.softmax, (small,), declared=SOFTMAX)
    check_against(student_softmax, ref_attention.softmax, (small,), {"axis": 0}, declared=SOFTMAX)
    check_against(student_softmax, ref_attention.softmax, (np.array([1000.0, 1001.0, 1002.0]),), declared=SOFTMAX)
    # rows of very different size: each must be shifted by its own maximum
    check_against(student_softmax, ref_attention.softmax, (np.array([[0.0, 0.0], [1000.0, 1000.0]]),), declared=SOFTMAX)
    check_against(student_softmax, ref_attention.softmax,
                  (np.array([[0.0, 1000.0], [1.0, 1000.0]]),), {"axis": 0}, declared=SOFTMAX)
    # lists are accepted
    check_against(student_softmax, ref_attention.softmax, ([[1.0, 2.0], [3.0, 5.0]],), declared=SOFTMAX)
    # a row spanning more than 709: a shift by anything but its own maximum (its mean, first or smallest score)
    # leaves exp(> 709), which overflows
    check_against(student_softmax, ref_attention.softmax, (np.array([[-3.0, 1500.0, 2.0], [0.5, 0.0, 1.0]]),),
                  declared=SOFTMAX)
    # a middle axis of a 3-D array (transposing is right only in 1-D and 2-D), and weights that all but vanish
    check_against(student_softmax, ref_attention.softmax, (_MIDDLE_AXIS_SCORES,), {"axis": 1}, declared=SOFTMAX)
    # float32 in, float32 out
    check_against(student_softmax, ref_attention.softmax, (np.array([[1.0, 2.0, 3.0], [-20.0, 0.0, 5.0]], np.float32),),
                  declared=SOFTMAX)
    print("softmax: all visible checks passed.")


HARD_LOOKUP_KEYS = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
HARD_LOOKUP_VALUES = np.array([[10.0], [20.0], [30.0]])


def expect_lookup_error(student_hard_lookup, query, keys, values):
    """A query that matches no key must raise KeyError with a message, as a dict does."""
    shown = f"hard_lookup({query.tolist()}, ...)"
    try:
        result = call(student_hard_lookup, query, keys, values, name="hard_lookup")
    except Hint as hint:
        error = hint.__cause__
        if isinstance(error, KeyError):
            if len(str(error).strip("'\" ")) < 10:
                raise Hint("hard_lookup raised a KeyError for a missing key, but its message is empty or "
                           "too short: say which query found no match.") from None
            return
        if error is None:  # not written yet, or a call into the reference: the Hint says so
            raise
        raise Hint(f"{shown} with no matching key raised {type(error).__name__}: {error}; expected a KeyError "
                   f"saying that nothing matched.") from None
    # a query a hair's breadth from a key: the likely cause is a comparison with a tolerance
    approximate = (" It is within 1e-5 of a key but not equal to it: is the comparison approximate (np.allclose, "
                   "np.isclose, a distance below a threshold)? A hard lookup needs every component equal."
                   if np.any(np.all(np.abs(np.asarray(keys) - query) <= 1e-5, axis=1)) else "")
    raise Hint(f"{shown} returned {describe(result)} although no key equals the query; "
               f"a hard lookup must fail (raise KeyError) when nothing matches.{approximate}")


HARD_LOOKUP_MISTAKES = [
    (lambda q, K, V: V[np.argmax(K @ q)],
     "it returns the best-scoring key's value; a hard lookup needs the key to be equal to the query."),
    (lambda q, K, V: V[np.flatnonzero(np.any(K == q, axis=1))[0]],
     "it accepts a key that equals the query in only some components; every component must match."),
]

# A table where the best-scoring key is not the equal one, and other keys share some components with each query:
# both mistakes answer wrong on every query but the first, in different ways (a diagnosis is confirmed on them)
HARD_LOOKUP_TABLE = (np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [1.0, 2.0, 1.0]]),
                     np.array([[10.0], [20.0], [30.0], [40.0]]))
HARD_LOOKUP_CONFIRMATIONS = [((key.copy(), *HARD_LOOKUP_TABLE), {}) for key in HARD_LOOKUP_TABLE[0][2:]]
HARD_LOOKUP = Check(name="hard_lookup", diagnoses=HARD_LOOKUP_MISTAKES, confirm_with=HARD_LOOKUP_CONFIRMATIONS)


def hard_lookup(student_hard_lookup):
    K, V = HARD_LOOKUP_KEYS, HARD_LOOKUP_VALUES
    for query in ([0.0, 1.0], [1.0, 1.0]):
        check_against(student_hard_lookup, lookup.hard_lookup, (np.array(query), K, V), declared=HARD_LOOKUP)
    check_against(student_hard_lookup, lookup.hard_lookup, (np.array([1.0, 2.0, 0.0]), *HARD_LOOKUP_TABLE),
                  declared=HARD_LOOKUP)
    expect_lookup_error(student_hard_lookup, np.array([0.5, 0.5]), K, V)
    expect_lookup_error(student_hard_lookup, np.array([1.0, 1.0 + 1e-12]), K, V)  # equal only "up to a tolerance"
    print("hard_lookup: all visible checks passed.")


SOFT_LOOKUP_MISTAKES = [
    (lambda q, K, V, temperature=1.0: lookup.soft_lookup(q, K, V, 1.0 / temperature),
     "the scores are multiplied by the temperature; divide them by it (a small temperature sharpens)."),
    (lambda q, K, V, temperature=1.0: (lambda w: (w, w @ K))(lookup.soft_lookup(q, K, V, temperature)[0]),
     "the weights blend the keys; the output is a blend of the values (weights @ values)."),
    (lambda q, K, V, temperature=1.0: (lambda s: (s / s.sum(), s / s.sum() @ V))(np.asarray(K) @ q / temperature),
     "the weights are the raw scores divided by their sum; use softmax so they are positive."),
    (lambda q, K, V, temperature=1.0: lookup.soft_lookup(q, K, V, temperature * np.sqrt(len(q))),
     "the scores are scaled by sqrt(d_k); lesson 01's soft lookup divides by the temperature only "
     "(the sqrt(d_k) scale arrives in lesson 02)."),
    (lambda q, K, V, temperature=1.0: lookup.soft_lookup(q, K, V),
     "the result is the same as at temperature 1: the temperature is ignored. Divide the scores by "
     "`temperature` before the softmax."),
]


def _sweep(mistake, q, K, V, temperatures):
    # the temperature sweep of soft_lookup's catalogued mistake number `mistake` (plain data, so that the student
    # edition records it and withholds it while lesson 01 is open: with the right soft_lookup it is the answer)
    soft_lookup_mistake = SOFT_LOOKUP_MISTAKES[mistake][0]
    return np.stack([soft_lookup_mistake(q, K, V, t)[1] for t in np.asarray(temperatures, dtype=float)])


def _sweep_of(mistake):
    def sweep(q, K, V, temperatures):
        return _sweep(mistake, q, K, V, temperatures)
    return sweep


# A sweep calls the student's own soft_lookup: when its rows are what a mistaken soft_lookup gives, the
# mistake is there, not in the loop.
SWEEP_MISTAKES = [
    (lambda q, K, V, t: lookup.soft_lookup_by_temperature(q, K, V, t)[::-1],
     "the rows are in reverse order: row i belongs to temperatures[i]."),
] + [(_sweep_of(mistake), "each row is what soft_lookup gives when " + hint[0].lower() + hint[1:] +
      " The loop is probably right; your soft_lookup (exercise 3), which it calls, is not: make it pass "
      "its own check first.")
     for mistake, (_, hint) in enumerate(SOFT_LOOKUP_MISTAKES)]

SWEEP_NONFINITE = ("at a small temperature the scores / temperature are huge, and an exp without the max "
                   "subtracted overflows. If your soft_lookup passes its own check, look at the loop; otherwise "
                   "fix soft_lookup (exercise 3) first: the sweep calls it.")

SOFT_LOOKUP = Check(name="soft_lookup", diagnoses=SOFT_LOOKUP_MISTAKES, outputs=("weights", "output"),
                    nonfinite_hint=SOFTMAX_OVERFLOW)
SOFT_LOOKUP_BY_TEMPERATURE = Check(name="soft_lookup_by_temperature", diagnoses=SWEEP_MISTAKES,
                                   nonfinite_hint=SWEEP_NONFINITE)


def soft_lookup(student_soft_lookup):
    q = np.array([1.0, 0.0, 1.0, 0.0])
    K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    V = np.array([[10.0, 0.0], [0.0, 5.0], [2.0, 2.0]])
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), declared=SOFT_LOOKUP)
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), {"temperature": 0.25}, declared=SOFT_LOOKUP)
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), {"temperature": 0.001}, declared=SOFT_LOOKUP)
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), {"temperature": 4.0}, declared=SOFT_LOOKUP)
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V, 0.5), declared=SOFT_LOOKUP)  # by position
    print("soft_lookup: all visible checks passed.")


def soft_lookup_by_temperature(student_sweep):
    q = np.array([1.0, 0.0, 1.0, 0.0])
    K = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    V = np.array([[10.0, 0.0], [0.0, 5.0], [2.0, 2.0]])
    temperatures = np.array([10.0, 1.0, 0.1, 0.01])
    # a plain list, with a temperature so small that the scores / temperature pass exp's range
    check_against(student_sweep, lookup.soft_lookup_by_temperature, (q, K, V, [3.0, 0.001, 0.5]),
                  declared=SOFT_LOOKUP_BY_TEMPERATURE)
    # two keys in a near tie: at T = 0.001 the weights are still 0.88 / 0.12, so no argmax stands in for small T
    near_tie = (np.array([1.0, 0.0]), np.array([[1.0, 0.0], [0.998, 1.0]]), np.array([[10.0, 0.0], [0.0, 5.0]]))
    check_against(student_sweep, lookup.soft_lookup_by_temperature, (*near_tie, np.array([0.002, 0.001])),
                  declared=SOFT_LOOKUP_BY_TEMPERATURE)
    got = check_against(student_sweep, lookup.soft_lookup_by_temperature, (q, K, V, temperatures),
                        declared=SOFT_LOOKUP_BY_TEMPERATURE)
    print(f"soft_lookup_by_temperature: passed; at T=0.01 the output is {np.round(got[-1], 3)}, "
          f"the hard lookup gives {lookup.hard_lookup(q, K, V)}.")


# The name this check had in releases before 2026-12-02: a notebook fetched then still calls it.
temperature_sweep = soft_lookup_by_temperature


seal(__name__)
