"""Hidden tests for lesson 01."""
import numpy as np

from qkv import attention as ref, lookup
from qkv.checks import lesson01 as visible
from qkv.checking import check_against, seal
from qkv_grading import expect_answer, fresh_rng


def softmax(student_softmax):
    rng = fresh_rng()
    check = dict(name="softmax", diagnoses=visible.SOFTMAX_MISTAKES, extra_checks=[visible._sums_to_one],
                 nonfinite_hint=visible.SOFTMAX_OVERFLOW)
    cases = [
        ((rng.normal(size=7),), {}),
        ((rng.normal(size=(4, 6)),), {}),
        ((rng.normal(size=(4, 6)),), {"axis": 0}),
        ((rng.normal(size=(3, 5, 4)),), {"axis": 1}),
        ((rng.normal(size=(5, 5)).astype(np.float32),), {}),
        ((1000.0 + rng.normal(size=(3, 4)),), {}),
        ((np.array([[-1000.0, -999.0, -1001.0], [1000.0, 999.0, 998.0]]),), {}),  # rows far apart
        ((np.array([[5.0, 5.0, 5.0, 5.0]]),), {}),
        ((rng.normal(size=(2, 3)).tolist(),), {"axis": 0}),  # the exercise accepts lists
    ]
    for args, kwargs in cases:
        check_against(student_softmax, ref.softmax, args, kwargs, **check)


def hard_lookup(student_hard_lookup):
    rng = fresh_rng()
    keys = rng.integers(0, 3, size=(6, 4)).astype(float)
    keys = np.unique(keys, axis=0)
    values = rng.normal(size=(len(keys), 3))
    for index in rng.permutation(len(keys))[:3]:
        check_against(student_hard_lookup, lookup.hard_lookup, (keys[index].copy(), keys, values),
                      name="hard_lookup", diagnoses=visible.HARD_LOOKUP_MISTAKES)
    partial = keys[0].copy()
    partial[0] = 7.0  # shares every other component with keys[0]
    visible.expect_lookup_error(student_hard_lookup, partial, keys, values)
    visible.expect_lookup_error(student_hard_lookup, rng.normal(size=4) + 0.5, keys, values)


def soft_lookup(student_soft_lookup):
    rng = fresh_rng()
    check = dict(name="soft_lookup", diagnoses=visible.SOFT_LOOKUP_MISTAKES, outputs=("weights", "output"),
                 nonfinite_hint=visible.SOFTMAX_OVERFLOW)
    for n, d_k, d_v, temperature in [(5, 4, 3, 1.0), (7, 8, 2, 0.3), (3, 2, 6, 4.0)]:
        q, K, V = rng.normal(size=d_k), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
        check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), {"temperature": temperature}, **check)
    q, K, V = rng.normal(size=4), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    check_against(student_soft_lookup, lookup.soft_lookup, (q, K, V), **check)
    check_against(student_soft_lookup, lookup.soft_lookup, (q * 300, K, V), {"temperature": 0.01}, **check)


def temperature_sweep(student_sweep):
    rng = fresh_rng()
    q, K, V = rng.normal(size=4), rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    temperatures = np.array([5.0, 1.0, 0.2, 0.05, 0.001])
    check_against(student_sweep, lookup.soft_lookup_by_temperature, (q, K, V, temperatures),
                  name="soft_lookup_by_temperature", nonfinite_hint=visible.SOFTMAX_OVERFLOW)


ANSWERS = {
    "lookup_on_miss": ("c", None),
    "blended_output": (10 * np.exp(2) / (np.exp(2) + 1), 0.01),
    "why_separate": ("b", None),
}


def answer(name, value):
    correct, tolerance = ANSWERS[name]
    expect_answer(value, correct, name, tolerance)


seal(__name__)
