"""Hidden tests for lesson 01, designed from each function's contract rather than from a list of mistakes.

Every test has FIXED adversarial cases (so a mistake they expose is caught on every draw) and fresh
random ones whose dimensions are all different (never equal by chance), at both magnitude extremes, with
every documented argument also passed with a non-default value.
"""
import numpy as np

from qkv import attention as ref_attention, lookup
from qkv.checks import lesson01 as visible
from qkv.checking import check_against, seal
from qkv_grading import answer_of, distinct_sizes, fresh_rng

# withheld from the student's kernel while this lesson is graded: each computes a graded answer
GRADED_REFERENCES = ("qkv.attention.softmax", "qkv.attention.masked_softmax", "qkv.lookup.hard_lookup",
                     "qkv.lookup.soft_lookup", "qkv.lookup.soft_lookup_by_temperature")

# ---------------------------------------------------------------- softmax

SOFTMAX_FIXED = [
    # rows of very different size: one shift by the array's max leaves row 0 as exp(-1000) / exp(-1000) = 0/0
    ((np.array([[0.0, 0.0, 1.0], [1000.0, 1000.0, 999.0]]),), {}),
    # each row spans more than 709 (exp(709) overflows), with a near tie between its two largest scores
    ((np.array([[-750.0, 0.0, 1e-3], [800.0, 800.0 - 1e-3, 20.0]]),), {}),
    # the same along axis 0: columns of very different size
    ((np.array([[0.0, 1000.0, -3.0], [0.5, 1000.0, 720.0]]),), {"axis": 0}),
]


def _softmax_cases(rng):
    a, b, c = distinct_sizes(rng, 3)
    mixed = rng.normal(size=(a, b))
    mixed[0] *= 1e4    # a row of huge scores next to
    mixed[-1] *= 1e-4  # a row of tiny ones (all but uniform)
    return [
        ((rng.normal(size=a),), {}),
        ((mixed,), {}),
        ((rng.normal(size=(b, a)) * 3,), {"axis": 0}),
        ((rng.normal(size=(a, b, c)) * 2,), {"axis": 1}),
        ((rng.normal(size=(c, a, b)) * 500,), {"axis": -2}),  # spans far beyond 709
        ((rng.normal(size=(b, c)).astype(np.float32) * 40,), {}),
        ((rng.normal(size=(c, a)).tolist(),), {"axis": 0}),  # the exercise accepts lists
    ]


def softmax(student_softmax):
    for args, kwargs in SOFTMAX_FIXED + _softmax_cases(fresh_rng()):
        check_against(student_softmax, ref_attention.softmax, args, kwargs, declared=visible.SOFTMAX)


# ---------------------------------------------------------------- hard_lookup

# keys whose dot products with the query collide or beat the query's own key ([2, 4, 0] = 2 x [1, 2, 0]),
# keys that share some components or are permutations of others, and the zero key
HARD_KEYS = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [2.0, 4.0, 0.0], [1.0, 2.0, 1.0], [0.0, 0.0, 0.0]])
HARD_VALUES = np.array([[10.0, -1.0], [20.0, -2.0], [30.0, -3.0], [40.0, -4.0], [50.0, -5.0]])
HARD_FOUND = [1, 3, 4, 0]
HARD_MISSES = [np.array([1.0, 2.0, 1e-3]),   # a near miss of key 0
               # a near miss inside np.allclose's default tolerance (1e-8 + 1e-5 * 2): fixed, since a random one
               # moved a component near 0 as often as not and let "close enough" pass on some draws
               np.array([1.0, 2.0 + 1e-6, 0.0]),
               np.array([1.0, 2.0, 1e-12]),  # closer to key 0 than any tolerance (np.isclose's atol is 1e-8)
               np.array([0.0, 2.0, 1.0])]    # a permutation of key 0 that is not a key


def _random_table(rng):
    """Distinct integer keys, one of them twice another (its dot product with the query beats the query's own)."""
    n, d_k, d_v = distinct_sizes(rng, 3, 2, 7)
    grid = np.unique(rng.integers(-2, 3, size=(6 * n, d_k)).astype(float), axis=0)
    grid = grid[np.any(grid != 0, axis=1)]
    keys = grid[rng.permutation(len(grid))[:n]]
    if not np.any(np.all(keys == 2 * keys[0], axis=1)):
        keys[-1] = 2 * keys[0]
    order = rng.permutation(len(keys))
    return keys[order], rng.normal(size=(len(keys), d_v)), int(np.flatnonzero(order == 0)[0])


def hard_lookup(student_hard_lookup):
    for index in HARD_FOUND:
        # a query moved a little matches no key, so a diagnosis is confirmed on the table's other queries
        others = [((HARD_KEYS[i].copy(), HARD_KEYS, HARD_VALUES), {}) for i in HARD_FOUND if i != index]
        check_against(student_hard_lookup, lookup.hard_lookup, (HARD_KEYS[index].copy(), HARD_KEYS, HARD_VALUES),
                      declared=visible.HARD_LOOKUP, confirm_with=others)
    for query in HARD_MISSES:
        visible.expect_lookup_error(student_hard_lookup, query, HARD_KEYS, HARD_VALUES)
    rng = fresh_rng()
    keys, values, doubled = _random_table(rng)
    other = int(rng.choice([i for i in range(len(keys)) if i != doubled]))
    for index, other_index in ((doubled, other), (other, doubled)):
        check_against(student_hard_lookup, lookup.hard_lookup, (keys[index].copy(), keys, values),
                      declared=visible.HARD_LOOKUP, confirm_with=[((keys[other_index].copy(), keys, values), {})])
    near_miss = keys[other].copy()
    near_miss[rng.integers(len(near_miss))] += 1e-6
    visible.expect_lookup_error(student_hard_lookup, near_miss, keys, values)


# ---------------------------------------------------------------- soft_lookup

# two keys whose scores differ by 1e-3 at temperature 1e-3: the weights are e/(1+e) and 1/(1+e), not one-hot,
# so a hard argmax (or a temperature ignored) is caught
NEAR_TIE_QUERY = np.array([1.0, 0.0, 0.0])
NEAR_TIE_KEYS = np.array([[1.0, 0.0, 0.0], [0.999, 0.5, 0.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 2.0]])
NEAR_TIE_VALUES = np.array([[10.0, 0.0], [0.0, 5.0], [2.0, 2.0], [-4.0, 1.0]])


def _soft_cases(rng):
    n, d_k, d_v = distinct_sizes(rng, 3)
    q, K, V = rng.normal(size=d_k), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    return [
        ((NEAR_TIE_QUERY, NEAR_TIE_KEYS, NEAR_TIE_VALUES), {"temperature": 1e-3}),
        ((NEAR_TIE_QUERY, NEAR_TIE_KEYS, NEAR_TIE_VALUES), {"temperature": 7.0}),
        ((q, K, V), {}),
        ((q, K, V, float(rng.uniform(0.2, 0.6))), {}),  # the temperature passed by position
        ((q * 300, K, V), {"temperature": 0.01}),       # scores / temperature span far beyond 709
        ((q * 1e-4, K, V), {"temperature": float(rng.uniform(2, 5))}),  # nearly uniform weights
    ]


def soft_lookup(student_soft_lookup):
    for args, kwargs in _soft_cases(fresh_rng()):
        check_against(student_soft_lookup, lookup.soft_lookup, args, kwargs, declared=visible.SOFT_LOOKUP)


# ---------------------------------------------------------------- soft_lookup_by_temperature

def soft_lookup_by_temperature(student_sweep):
    rng = fresh_rng()
    # not sorted, so an answer in another order cannot pass; 1e-3 is the near tie's unsaturated temperature
    fixed = [3.0, 1e-3, 0.5, 1e-4, 20.0]
    check_against(student_sweep, lookup.soft_lookup_by_temperature,
                  (NEAR_TIE_QUERY, NEAR_TIE_KEYS, NEAR_TIE_VALUES, np.array(fixed)),
                  declared=visible.SOFT_LOOKUP_BY_TEMPERATURE)
    n, d_k, d_v, n_t = distinct_sizes(rng, 4)
    q, K, V = rng.normal(size=d_k) * 3, rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    temperatures = rng.permutation(np.exp(rng.uniform(np.log(0.005), np.log(10), size=n_t)))
    check_against(student_sweep, lookup.soft_lookup_by_temperature, (q, K, V, temperatures.tolist()),
                  declared=visible.SOFT_LOOKUP_BY_TEMPERATURE)


ANSWERS = {
    "lookup_on_miss": ("c", None),
    # your numbers (qkv.your_numbers): q = [x, 0], v1, temperature T; canonical x = 2, v1 = 10, T = 1
    "blended_output": (lambda p: p["v1"] * np.exp(p["x"] / p["T"]) / (np.exp(p["x"] / p["T"]) + 1), 0.01),
    "why_separate": ("b", None),
}

# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered.
EXPLANATIONS = {
    "lookup_on_miss": "A softmax gives every key a positive weight, so a soft lookup always returns a blend of "
                      "all the values; there is no 'no match'.",
    "blended_output": "Scores q.k are x and 0, divided by the temperature T, so the weights are e^(x/T)/(e^(x/T)+1) "
                      "and 1/(e^(x/T)+1); the output is v1 times the first weight.",
    "why_separate": "The key decides who is found and the value what is handed over; keeping them apart lets the "
                    "two differ.",
}


answer = answer_of(ANSWERS)


seal(__name__)
