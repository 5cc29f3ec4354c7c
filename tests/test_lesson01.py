"""Lesson 01: reference numbers, and the hidden tests against mutants and correct variants."""
import numpy as np
import pytest

from lessons import assert_rejected, each_draw, mutant, student
from qkv import attention, lookup
from qkv.checks import lesson01 as visible
from qkv_grading import lesson01 as hidden

LESSON = "01-lookup"


# ---------------------------------------------------------------- reference

def test_softmax_is_stable_and_sums_to_one_along_axis():
    x = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
    for axis in (0, 1):
        s = attention.softmax(x, axis=axis)
        assert np.all(np.isfinite(s)) and np.allclose(s.sum(axis=axis), 1)
    assert np.allclose(attention.softmax([1.0, 2.0, 3.0]), [0.09003057, 0.24472847, 0.66524096])


def test_soft_lookup_reproduces_the_worked_example_without_scaling():
    q = np.array([1.0, 0.0, 1.0, 0.0])
    K = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 0]], dtype=float)
    V = np.array([[10, 0], [0, 5], [2, 2]], dtype=float)
    weights, output = lookup.soft_lookup(q, K, V, temperature=2.0)  # temperature sqrt(d_k) = 2
    assert np.allclose(weights, [0.5065, 0.1863, 0.3072], atol=1e-4)
    assert np.allclose(output, [5.68, 1.55], atol=5e-3)


def test_hard_lookup_matches_exactly_or_raises_key_error():
    K, V = visible.HARD_LOOKUP_KEYS, visible.HARD_LOOKUP_VALUES
    assert lookup.hard_lookup(np.array([1.0, 1.0]), K, V) == 30
    with pytest.raises(KeyError, match="no key equals"):
        lookup.hard_lookup(np.array([1.0, 0.5]), K, V)


def test_low_temperature_soft_lookup_becomes_the_hard_lookup():
    rng = np.random.default_rng(1)
    K = rng.normal(size=(6, 4))
    V = rng.normal(size=(6, 3))
    q = K[2] * 2
    best = V[np.argmax(K @ q)]
    outputs = lookup.soft_lookup_by_temperature(q, K, V, [10, 1, 0.1, 0.01])
    gaps = np.abs(outputs - best).max(axis=1)
    assert np.all(np.diff(gaps) < 0) and gaps[-1] < 1e-6


def test_library_rejects_wrong_shapes_with_a_message_naming_them():
    with pytest.raises(ValueError, match=r"keys must be \[n, d_k\] with d_k = 4.*\(3, 2\)"):
        lookup.soft_lookup(np.zeros(4), np.zeros((3, 2)), np.zeros((3, 2)))


# ---------------------------------------------------------------- mutants the hidden tests must reject

SOFTMAX_MUTANTS = {
    "no max subtraction": """
def softmax(x, axis=-1):
    e = np.exp(np.asarray(x, dtype=float))
    return e / e.sum(axis=axis, keepdims=True)
""",
    "wrong axis": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
""",
    "global max (rows far apart underflow)": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max())
    return e / e.sum(axis=axis, keepdims=True)
""",
    "normalise raw scores by their sum": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    return x / x.sum(axis=axis, keepdims=True)
""",
    "sum over the whole array": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max())
    return e / e.sum()
""",
    "blank stub": "def softmax(x, axis=-1):\n    raise NotImplementedError()\n",
    "returns None": "def softmax(x, axis=-1):\n    e = np.exp(x - np.max(x, axis=axis, keepdims=True))\n",
    "returns a list": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).tolist()
""",
    "calls the reference": ("import qkv.attention\ndef softmax(x, axis=-1):\n"
                            "    return qkv.attention.softmax(x, axis)\n"),
    "fails on lists": """
def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
""",
    "is the reference": "from qkv.attention import softmax\n",
}

SOFT_LOOKUP_MUTANTS = {
    "multiplies by the temperature": """
def soft_lookup(query, keys, values, temperature=1.0):
    w = softmax(keys @ query * temperature)
    return w, w @ values
""",
    "blends the keys": """
def soft_lookup(query, keys, values, temperature=1.0):
    w = softmax(keys @ query / temperature)
    return w, w @ keys
""",
    "returns the weights only": """
def soft_lookup(query, keys, values, temperature=1.0):
    return softmax(keys @ query / temperature)
""",
    "normalises raw scores": """
def soft_lookup(query, keys, values, temperature=1.0):
    s = keys @ query / temperature
    return s / s.sum(), (s / s.sum()) @ values
""",
    "hard-codes the worked example": """
def soft_lookup(query, keys, values, temperature=1.0):
    return np.array([0.506, 0.186, 0.308]), np.array([5.68, 1.55])
""",
    "calls the reference": """
from qkv import lookup as _lookup
def soft_lookup(query, keys, values, temperature=1.0):
    return _lookup.soft_lookup(query, keys, values, temperature)
""",
}

HARD_LOOKUP_MUTANTS = {
    "best match instead of exact match": """
def hard_lookup(query, keys, values):
    return values[np.argmax(keys @ query)]
""",
    "any component matches": """
def hard_lookup(query, keys, values):
    for k, v in zip(keys, values):
        if np.any(k == query):
            return v
    raise KeyError(f"no key matches {query}")
""",
    "returns None when nothing matches": """
def hard_lookup(query, keys, values):
    for k, v in zip(keys, values):
        if np.array_equal(k, query):
            return v
""",
    "IndexError instead of KeyError": """
def hard_lookup(query, keys, values):
    return values[np.flatnonzero(np.all(keys == query, axis=1))[0]]
""",
}

SWEEP_MUTANTS = {
    "reversed rows": """
def soft_lookup_by_temperature(query, keys, values, temperatures):
    return np.array([soft_lookup(query, keys, values, t)[1] for t in temperatures[::-1]])
""",
    "weights instead of outputs": """
def soft_lookup_by_temperature(query, keys, values, temperatures):
    return np.array([soft_lookup(query, keys, values, t)[0] for t in temperatures])
""",
}

CASES = ([("softmax", hidden.softmax, name, src) for name, src in SOFTMAX_MUTANTS.items()]
         + [("soft_lookup", hidden.soft_lookup, name, src) for name, src in SOFT_LOOKUP_MUTANTS.items()]
         + [("hard_lookup", hidden.hard_lookup, name, src) for name, src in HARD_LOOKUP_MUTANTS.items()]
         + [("soft_lookup_by_temperature", hidden.soft_lookup_by_temperature, name, src)
            for name, src in SWEEP_MUTANTS.items()])


@pytest.mark.parametrize("grade, check, name, source", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_hidden_tests_reject_mutant(grade, check, name, source):
    assert_rejected(check, mutant(LESSON, grade, source))


@pytest.mark.parametrize("grade, check, name, source",
                         [c for c in CASES
                          if c[2] not in ("hard-codes the worked example", "global max (rows far apart underflow)")],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_visible_checks_reject_mutant(grade, check, name, source):
    visible_check = {"softmax": visible.softmax, "soft_lookup": visible.soft_lookup,
                     "hard_lookup": visible.hard_lookup,
                     "soft_lookup_by_temperature": visible.soft_lookup_by_temperature}[grade]
    assert_rejected(visible_check, mutant(LESSON, grade, source))


def test_hints_name_the_likely_mistake():
    no_max = mutant(LESSON, "softmax", SOFTMAX_MUTANTS["no max subtraction"])
    assert "Subtract the maximum" in assert_rejected(hidden.softmax, no_max)
    wrong_axis = mutant(LESSON, "softmax", SOFTMAX_MUTANTS["wrong axis"])
    assert "wrong axis" in assert_rejected(visible.softmax, wrong_axis)
    as_list = mutant(LESSON, "softmax", SOFTMAX_MUTANTS["returns a list"])
    assert "returned a list; expected an array of shape (3,)" in assert_rejected(visible.softmax, as_list)
    as_none = mutant(LESSON, "softmax", SOFTMAX_MUTANTS["returns None"])
    assert "returned None" in assert_rejected(visible.softmax, as_none)
    calls_ref = mutant(LESSON, "softmax", SOFTMAX_MUTANTS["calls the reference"])
    assert "calls qkv's reference `softmax`" in assert_rejected(hidden.softmax, calls_ref)
    temp = mutant(LESSON, "soft_lookup", SOFT_LOOKUP_MUTANTS["multiplies by the temperature"])
    assert "divide them by it" in assert_rejected(visible.soft_lookup, temp)


# ---------------------------------------------------------------- correct variants the hidden tests must accept

VARIANTS = {
    "softmax": {
        "loops over slices": """
def softmax(x, axis=-1):
    x = np.moveaxis(np.array(x, dtype=float), axis, -1)
    out = np.empty_like(x)
    for index in np.ndindex(x.shape[:-1]):
        row = x[index]
        e = [np.exp(v - max(row)) for v in row]
        out[index] = [v / sum(e) for v in e]
    return np.moveaxis(out, -1, axis)
""",
        "float32 in, float32 out": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
""",
        "log-sum-exp": """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    m = x.max(axis=axis, keepdims=True)
    return np.exp(x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True)))
""",
    },
    "soft_lookup": {
        "einsum": """
def soft_lookup(query, keys, values, temperature=1.0):
    w = softmax(np.einsum('nd,d->n', keys, query) / temperature)
    return w, np.einsum('n,nv->v', w, values)
""",
        "loops": """
def soft_lookup(query, keys, values, temperature=1.0):
    scores = np.array([sum(k_i * q_i for k_i, q_i in zip(k, query)) for k in keys]) / temperature
    w = softmax(scores)
    out = np.zeros(len(values[0]))
    for weight, value in zip(w, values):
        out += weight * np.asarray(value)
    return w, out
""",
    },
    "hard_lookup": {
        "vectorised": """
def hard_lookup(query, keys, values):
    hits = np.flatnonzero((np.asarray(keys) == np.asarray(query)).all(axis=1))
    if len(hits) == 0:
        raise KeyError(f"nothing matches the query {query}")
    return values[hits[0]]
""",
        "via a dict": """
def hard_lookup(query, keys, values):
    table = {tuple(k): v for k, v in zip(np.asarray(keys).tolist(), values)}
    try:
        return table[tuple(np.asarray(query).tolist())]
    except KeyError:
        raise KeyError(f"no key equals {list(query)}") from None
""",
    },
}

VARIANT_CASES = [(g, n, s) for g, d in VARIANTS.items() for n, s in d.items()]
HIDDEN = {"softmax": hidden.softmax, "soft_lookup": hidden.soft_lookup, "hard_lookup": hidden.hard_lookup}


@pytest.mark.parametrize("grade, name, source", VARIANT_CASES, ids=[f"{g}:{n}" for g, n, _ in VARIANT_CASES])
def test_hidden_tests_accept_correct_variant(grade, name, source):
    HIDDEN[grade](mutant(LESSON, grade, source))


def test_perfect_student_passes_every_hidden_test_and_answer():
    ns = student(LESSON)
    hidden.softmax(ns["softmax"])
    hidden.hard_lookup(ns["hard_lookup"])
    hidden.soft_lookup(ns["soft_lookup"])
    hidden.soft_lookup_by_temperature(ns["soft_lookup_by_temperature"])
    for name in hidden.ANSWERS:
        hidden.answer(name, ns[name])


def test_wrong_answers_are_rejected():
    assert_rejected(lambda v: hidden.answer("lookup_on_miss", v), "a")
    assert_rejected(lambda v: hidden.answer("blended_output", v), 5.0)
    assert_rejected(lambda v: hidden.answer("blended_output", v), None)


# ---------------------------------------------------------------- issue 12, item 8: the headline mistakes, visibly

def test_visible_softmax_check_names_a_shift_by_one_global_max():
    message = assert_rejected(visible.softmax, mutant(LESSON, "softmax",
                                                      SOFTMAX_MUTANTS["global max (rows far apart underflow)"]))
    assert "ONE maximum of the whole array" in message, message


def test_visible_soft_lookup_check_names_an_ignored_temperature():
    ignores = """
def soft_lookup(query, keys, values, temperature=1.0):
    w = softmax(np.asarray(keys) @ query)
    return w, w @ values
"""
    message = assert_rejected(visible.soft_lookup, mutant(LESSON, "soft_lookup", ignores))
    assert "temperature is ignored" in message, message


@pytest.mark.parametrize("wrong_soft_lookup", ["multiplies by the temperature", "normalises raw scores"])
def test_sweep_failing_through_a_wrong_soft_lookup_says_so(wrong_soft_lookup):
    namespace = student(LESSON, {"soft_lookup": SOFT_LOOKUP_MUTANTS[wrong_soft_lookup]})
    message = assert_rejected(visible.soft_lookup_by_temperature, namespace["soft_lookup_by_temperature"])
    assert "your soft_lookup (exercise 3), which it calls" in message, message


def test_sweep_with_its_own_mistake_is_not_blamed_on_soft_lookup():
    message = assert_rejected(visible.soft_lookup_by_temperature, mutant(LESSON, "soft_lookup_by_temperature",
                                                                SWEEP_MUTANTS["reversed rows"]))
    assert "reverse order" in message and "exercise 3" not in message, message


# ---------------------------------------------------------------- issue 8: mistakes only a contract's hard inputs show

CONTRACT_MUTANTS = [
    ("softmax", hidden.softmax, "shift by the row minimum (overflows when a row spans > 709)", """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.min(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
"""),
    ("soft_lookup", hidden.soft_lookup, "hard argmax at small temperatures", """
def soft_lookup(query, keys, values, temperature=1.0):
    scores = np.asarray(keys, dtype=float) @ np.asarray(query, dtype=float) / temperature
    w = np.eye(len(scores))[np.argmax(scores)] if temperature < 0.05 else softmax(scores)
    return w, w @ np.asarray(values, dtype=float)
"""),
    ("hard_lookup", hidden.hard_lookup, "compares sorted components (a permutation matches)", """
def hard_lookup(query, keys, values):
    for key, value in zip(np.asarray(keys), np.asarray(values)):
        if np.array_equal(np.sort(key), np.sort(query)):
            return value
    raise KeyError(f"no key equals the query {list(query)}")
"""),
    ("hard_lookup", hidden.hard_lookup, "close enough counts (np.allclose, atol 1e-3)", """
def hard_lookup(query, keys, values):
    for key, value in zip(np.asarray(keys), np.asarray(values)):
        if np.allclose(key, query, atol=1e-3):
            return value
    raise KeyError(f"no key equals the query {list(query)}")
"""),
    ("hard_lookup", hidden.hard_lookup, "the zero key never matches (truthiness)", """
def hard_lookup(query, keys, values):
    for key, value in zip(np.asarray(keys), np.asarray(values)):
        if np.array_equal(key, query) and np.any(key):
            return value
    raise KeyError(f"no key equals the query {list(query)}")
"""),
    ("soft_lookup_by_temperature", hidden.soft_lookup_by_temperature, "sorts the temperatures first", """
def soft_lookup_by_temperature(query, keys, values, temperatures):
    return np.array([soft_lookup(query, keys, values, t)[1] for t in sorted(temperatures, reverse=True)])
"""),
]


@pytest.mark.parametrize("grade, check, name, source", CONTRACT_MUTANTS, ids=[c[2] for c in CONTRACT_MUTANTS])
def test_hidden_tests_reject_mistakes_only_hard_inputs_show(grade, check, name, source):
    for _ in each_draw(LESSON):  # on every draw
        assert_rejected(check, mutant(LESSON, grade, source))


# ---------------------------------------------------------------- issue 20: an overflow gets the overflow hint

@pytest.mark.parametrize("check", [visible.softmax, hidden.softmax], ids=["visible", "hidden"])
def test_softmax_without_the_max_is_told_it_overflowed_not_that_it_sums_the_whole_array(check):
    # with keepdims=True, on one slice, it gives the very NaN that summing over the whole array gives
    message = assert_rejected(check, mutant(LESSON, "softmax", SOFTMAX_MUTANTS["no max subtraction"]))
    assert visible.SOFTMAX_OVERFLOW in message and "whole array" not in message, message


def test_summing_over_the_whole_array_is_still_named_as_such():
    whole = """
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum()
"""
    message = assert_rejected(visible.softmax, mutant(LESSON, "softmax", whole))
    assert "normalised over the whole array" in message, message


def test_summing_over_the_whole_array_without_the_max_is_named_too():
    whole = """
def softmax(x, axis=-1):
    return np.exp(x) / np.sum(np.exp(x))
"""
    message = assert_rejected(visible.softmax, mutant(LESSON, "softmax", whole))
    assert "normalised over the whole array" in message, message
