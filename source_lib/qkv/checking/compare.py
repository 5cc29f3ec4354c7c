"""Comparing the student's result with the reference's: `check_against` (numbers) and `check_boolean` (masks), read
from a `Check` declaration."""
import dataclasses

import numpy as np

from qkv.checking.calling import call
from qkv.checking.diagnosis import (NONFINITE_CAUSES, Probes, as_result, certain_diagnosis, certain_shape_diagnosis,
                                    nonfinite_cause)
from qkv.checking.hints import Hint, call_text, describe
from qkv.checking.validation import expect_array

# Rounding in single precision, amplified by a sharp softmax, reaches about 3e-5 of an answer's scale (worst of
# 20,000 draws of lesson 02's sharp self-attention case, computed in float32): a float32 answer may be that far off.
SINGLE_PRECISION_SLACK = 1e-4

# Filled only while the instructor records the student edition's fixtures (autograde/qkv_edition/fixtures.py): each
# is called with (reference_fn, args, kwargs, check) as a check starts (`before_check`), to compute everything a
# diagnosis may ask for. Empty, and so doing nothing, everywhere else.
RECORDERS = []


def before_check(reference_fn, args, kwargs, check):
    """A check of `reference_fn` on these inputs, read from the Check `check`, starts: tell the RECORDERS. A check
    that compares by its own code (qkv.checks.lesson06.mask_check) calls it as check_against does."""
    for recorder in RECORDERS:
        recorder(reference_fn, args, kwargs, check)


def close(a, b, rtol=1e-4, atol=1e-5):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


@dataclasses.dataclass(frozen=True)
class Check:
    """How a graded function's answer is checked, everything but the functions and the inputs.

    name: the function's name in hints (default: the student's function's __name__).
    diagnoses: (mistake_fn, hint) pairs; mistake_fn(*args, **kwargs) computes what a known mistake
        would return. The hint is given only when the diagnosis is certain: the student's answer matches
        that mistake on at least two inputs on which the mistake differs from the reference and from every
        other listed mistake (this input, and inputs like it the student's function is called on again,
        through `call`, only when its answer is wrong). Otherwise the generic largest difference is named.
    plausible: mistake functions with no hint (a constant where a size belongs): never named, but an input on which
        a listed mistake gives the same answer as one of them is no evidence for the listed one.
    rtol, atol: the tolerances of the comparison (atol is widened for a float32 answer, `SINGLE_PRECISION_SLACK`).
    allowed: qkv functions the exercise hands the student as tools (the tripwire lets them be called).
    extra_checks: functions (student_result, args, kwargs) -> hint or None, for mistakes that are
        recognised by a property (rows not summing to 1) rather than by an exact value.
    allow_list: a list (or tuple) is accepted in place of an array.
    outputs: names of the parts when the function returns a tuple, e.g. ("weights", "output").
    nonfinite_hint: said when the student's result holds NaN or infinity (e.g. an overflowing exp); where the NaN
        goes away on the same input scaled down, after saying so (`qkv.checking.diagnosis.nonfinite_cause`).
    nonfinite_causes: the check's own (transform, observed, advice) causes of a NaN, tried before the usual ones
        (mask=None, overflow): the first whose transform of the input takes the NaN away is said.
    confirm_with: further (args, kwargs) on which to confirm a diagnosis, tried before inputs made by moving
        this one a little (needed where a small move leaves the contract, e.g. a query that must equal a key).
    meaning: for a boolean answer (`check_boolean`), how to read one entry, said when pointing at a wrong one
        ("query i may attend key j exactly when j <= i").
    """
    name: str = None
    diagnoses: tuple = ()
    plausible: tuple = ()
    rtol: float = 1e-4
    atol: float = 1e-5
    allowed: tuple = ()
    extra_checks: tuple = ()
    allow_list: bool = False
    outputs: tuple = None
    nonfinite_hint: str = None
    nonfinite_causes: tuple = ()
    confirm_with: tuple = ()
    meaning: str = None


def check_against(student_fn, reference_fn, args=(), kwargs=None, declared=None, **options):
    """Run student and reference on the same inputs; raise a Hint that says what is probably wrong.

    How: `declared`, a `Check`, with any of its fields given as keywords (`name=`, `diagnoses=`, ...) on top.
    Returns the student's result as float64 array(s).
    """
    check = dataclasses.replace(declared or Check(), **options)
    kwargs = dict(kwargs or {})
    before_check(reference_fn, args, kwargs, check)
    name = check.name or getattr(student_fn, "__name__", "your function")
    shown = call_text(name, args, kwargs)
    raw = call(student_fn, *args, name=name, allowed=check.allowed, **kwargs)
    # computed only after the student's function has returned, so no stack frame holds the answer
    expected = reference_fn(*args, **kwargs)
    probes = Probes(student_fn, reference_fn, args, kwargs, name, check.allowed, confirm_with=check.confirm_with)
    if check.outputs is None:
        expected = np.asarray(expected, np.float64)
        got = _validated(raw, expected, shown, check, args, kwargs, probes)
        _compare(got, expected, shown, check, args, kwargs, _at_its_precision(raw, expected, check.atol), probes)
        return got
    outputs = check.outputs
    if not isinstance(raw, tuple) or len(raw) != len(outputs):
        raise Hint(f"{shown} returned {describe(raw)}; expected a tuple ({', '.join(outputs)}).")
    shapes = [_shape_or_none(r) for r in raw]  # a ragged part is reported by _validated below
    wanted = [np.shape(e) for e in expected]
    if shapes != wanted and sorted(map(str, shapes)) == sorted(map(str, wanted)):
        raise Hint(f"{shown} returned parts of shapes {shapes}; expected ({', '.join(outputs)}) of shapes "
                   f"{wanted}: are the parts in the wrong order?")
    parts = [dataclasses.replace(check, diagnoses=[(_part(fn, index), hint) for fn, hint in check.diagnoses],
                                 plausible=[_part(fn, index) for fn in check.plausible],
                                 extra_checks=[_part_check(extra, index) for extra in check.extra_checks])
             for index in range(len(outputs))]
    gots = []
    for index, (r, e, part) in enumerate(zip(raw, expected, outputs)):
        gots.append(_validated(r, np.asarray(e, np.float64), f"{shown}, its {part},", parts[index], args, kwargs,
                               probes.part(index)))
    for index, part in enumerate(outputs):
        part_expected = np.asarray(expected[index], np.float64)
        _compare(gots[index], part_expected, f"{shown}, its {part},", parts[index], args, kwargs,
                 _at_its_precision(raw[index], part_expected, check.atol), probes.part(index))
    return tuple(gots)


def check_boolean(student_fn, reference_fn, args=(), kwargs=None, declared=None, require_bool=True, **options):
    """The student's boolean array (a mask, a dependence pattern) must equal the reference's; known mistakes are
    named. Reads `declared`, a `Check` (name, diagnoses, allowed, meaning), with fields given as keywords on top.

    require_bool: masks must have dtype bool (they are combined with & and ~); otherwise 0/1 numbers pass.
    """
    check = dataclasses.replace(declared or Check(), **options)
    kwargs = dict(kwargs or {})
    before_check(reference_fn, args, kwargs, check)
    name = check.name or getattr(student_fn, "__name__", "your function")
    shown = call_text(name, args, kwargs)
    raw = call(student_fn, *args, name=name, allowed=check.allowed, **kwargs)
    expected = np.asarray(reference_fn(*args, **kwargs), dtype=bool)
    values = expect_array(raw, expected.shape, shown)
    if not np.all((values == 0) | (values == 1)):
        raise Hint(f"{shown} returned values other than True/False (or 0/1); expected a boolean array.")
    got = values.astype(bool)
    if not np.array_equal(got, expected):
        # a mistake is named only when it is certain: matched here and on inputs like this one
        probes = Probes(student_fn, reference_fn, args, kwargs, name, check.allowed, confirm_with=check.confirm_with)
        named = certain_diagnosis(got.astype(float), expected.astype(float), args, kwargs, check.diagnoses, probes,
                                  check.plausible)
        if named:
            raise Hint(f"{shown} is wrong: {named}")
        index = tuple(int(i) for i in np.argwhere(got != expected)[0])
        raise Hint(f"{shown} is wrong at index {index}: got {got[index]}, expected {expected[index]}"
                   f"{' (' + check.meaning + ')' if check.meaning else ''}.")
    if require_bool and np.asarray(raw).dtype != bool:
        raise Hint(f"{shown} has the right pattern but dtype {np.asarray(raw).dtype}; a mask must be boolean "
                   f"(it is combined with & and ~): build it from a comparison, or finish with .astype(bool).")
    return got


def _at_its_precision(raw, expected, atol):
    """The absolute tolerance for an answer computed in float32 (or float16): widened to its precision, in
    proportion to the size of the expected values. A float64 answer keeps `atol`."""
    dtype = getattr(raw, "dtype", None)
    if dtype is None or dtype.kind != "f" or dtype.itemsize >= 8 or not expected.size:
        return atol
    scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=0.0))
    return max(atol, SINGLE_PRECISION_SLACK * scale)


def _shape_or_none(value):
    try:
        return np.shape(value)
    except ValueError:
        return None


def _part(mistake_fn, index):
    return lambda *a, **k: mistake_fn(*a, **k)[index]


def _part_check(check, index):
    return lambda got, a, k: check(got, a, k, index)


def _validated(raw, expected, shown, check, args, kwargs, probes):
    expected = np.asarray(expected)
    try:
        return expect_array(raw, expected.shape, shown, allow_list=check.allow_list)
    except Hint as hint:
        if "returned shape" in str(hint):
            # a wrong shape that is a known mistake's answer (the keys blended instead of the values) names it
            named = certain_shape_diagnosis(raw, expected, args, kwargs, check.diagnoses, probes, check.plausible)
            if named:
                raise Hint(f"{str(hint).rstrip('.')}: {named}") from None
        if "finite" not in str(hint):
            raise
        # a known mistake may produce exactly this NaN (e.g. a softmax shifted by one global maximum)
        named = certain_diagnosis(as_result(raw, expected.shape), expected, args, kwargs, check.diagnoses, probes,
                                  check.plausible)
        if named:
            raise Hint(f"{shown} returned NaN or infinity: {named}") from None
        # where the NaN comes from, when taking one cause out of the input takes it away
        cause = nonfinite_cause(probes.student_fn, args, kwargs, probes.name, probes.allowed, check.nonfinite_hint,
                                (*check.nonfinite_causes, *NONFINITE_CAUSES))
        if cause:
            raise Hint(f"{shown} returned NaN or infinity: {cause}") from None
        if check.nonfinite_hint:
            raise Hint(f"{shown} returned NaN or infinity: {check.nonfinite_hint}") from None
        raise


def _compare(got, expected, shown, check, args, kwargs, atol, probes):
    if close(got, expected, check.rtol, atol):
        return
    named = certain_diagnosis(got, expected, args, kwargs, check.diagnoses, probes, check.plausible)
    if named:
        raise Hint(f"{shown} is wrong: {named}")
    for property_check in check.extra_checks:
        hint = property_check(got, args, kwargs)
        if hint:
            raise Hint(f"{shown} is wrong: {hint}")
    raise Hint(f"{shown} is wrong: {mismatch_text(got, expected)}")


def mismatch_text(got, expected):
    diff = np.abs(got - expected)
    index = np.unravel_index(np.argmax(diff), diff.shape) if diff.ndim else ()
    at = f" at index {tuple(int(i) for i in index)}" if index else ""
    return (f"the largest difference from the expected result is {diff.max():.4g}{at} "
            f"(got {got[index]:.6g}, expected {expected[index]:.6g}).")
