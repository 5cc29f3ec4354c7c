"""Naming a known mistake only when it is certain: the student's answer is that mistake's on EVIDENCE_NEEDED
inputs that tell it apart from the reference, from every other listed mistake and from every plausible mistake
that has no hint of its own (the failing input, then `Probes`: inputs like it on which the student's function is
called again). And, for an answer that is NaN or infinite, where the NaN comes from (`nonfinite_cause`): the
student's function called again on the input with its likely cause taken away."""
import itertools
import types

import numpy as np

from qkv.checking.calling import call
from qkv.checking.hints import Hint

EVIDENCE_NEEDED = 2  # inputs on which the student's answer is the mistake's, and only that mistake's


def as_result(value, shape):
    """A result as float64 of the expected shape (NaN allowed), or None when it is not one."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if array.shape == tuple(shape) else None


def _mistaken(mistake_fn, args, kwargs):
    with np.errstate(all="ignore"):
        try:
            return np.asarray(mistake_fn(*args, **kwargs), dtype=np.float64)
        except Exception:
            return None


def _same(a, b):
    """Equal results, NaN and infinity included (a mistake's NaN is part of its fingerprint)."""
    return (a is not None and b is not None and a.shape == b.shape
            and bool(np.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)))


def certain_diagnosis(got, expected, args, kwargs, diagnoses, probes, plausible=()):
    """The hint of the one listed mistake the student's function reproduces on EVIDENCE_NEEDED inputs that
    tell it apart from the reference, from every other listed mistake and from every `plausible` mistake (functions
    of the same arguments, never named: a constant where a size belongs, the worked example's size hard-coded);
    None when no mistake is certain."""
    if got is None or not diagnoses:
        return None
    return _certain(got, expected, args, kwargs, diagnoses, lambda: probes, plausible, other_shape=False)


def _as_any_shape(value):
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def certain_shape_diagnosis(raw, expected, args, kwargs, diagnoses, probes, plausible=()):
    """The hint of the one listed mistake whose answer, of another shape than the reference's, the student's function
    gives on EVIDENCE_NEEDED inputs, told apart from every other listed and `plausible` mistake there (keys blended
    instead of values: a [d_k] output where [d_v] belongs). None when no mistake is certain: the wrong shape is said."""
    got = _as_any_shape(raw)
    if got is None or got.shape == np.shape(expected) or not diagnoses:
        return None
    rows = lambda: ((a, k, _as_any_shape(g), e) for a, k, g, e in probes.raw())  # noqa: E731 - the answers as given
    return _certain(got, expected, args, kwargs, diagnoses, rows, plausible, other_shape=True)


def _certain(got, expected, args, kwargs, diagnoses, rows, plausible, other_shape):
    # both diagnoses: the mistakes whose answer has the reference's shape (other_shape False; told apart by value) or
    # another shape (True); rows() gives the probes afresh, (args, kwargs, the student's answer, the reference's)
    for index, (mistake_fn, hint) in enumerate(diagnoses):
        if not _same(got, _mistaken(mistake_fn, args, kwargs)):
            continue
        # two ways of writing the same mistake share its hint and need not be told apart
        others = [fn for i, (fn, other_hint) in enumerate(diagnoses) if i != index and other_hint != hint]
        others += list(plausible)  # an input where the answer could be a mistake nobody hinted says nothing
        evidence = 0
        for probe_args, probe_kwargs, probe_got, probe_expected in itertools.chain(
                [(args, kwargs, got, expected)], rows()):
            mistaken = _mistaken(mistake_fn, probe_args, probe_kwargs)
            if mistaken is None or _same(mistaken, probe_expected):
                continue  # this input cannot tell the mistake from a right answer
            if (mistaken.shape != np.shape(probe_expected)) != other_shape:
                continue  # there the mistake's shape is the other kind's: said as a wrong shape, or diagnosed by value
            if not np.any(np.isfinite(mistaken)):
                continue  # NaN everywhere is what every overflowing mistake gives: no fingerprint of this one
            if any(_same(mistaken, _mistaken(other, probe_args, probe_kwargs)) for other in others):
                continue  # nor from another mistake
            if not _same(probe_got, mistaken):
                break  # the student's function is not this mistake, only close to it here
            evidence += 1
            if evidence >= EVIDENCE_NEEDED:
                return hint
    return None


# ---------------------------------------------------------------- where a NaN comes from

OVERFLOW = ("on the same input with every number scaled down your function gives finite values, so large numbers "
            "overflow:")
OVERFLOW_ADVICE = "is exp taken of a large score? Subtract each row's maximum before exponentiating."
MASK_NONE = ("with mask=None every key is visible, and with a mask that hides nothing your function gives finite "
             "values: is mask=None handled (np.where(None, ...) hides every key)?")
LARGE = 20.0  # exp(x) overflows past 709; scores (products of inputs) reach that from inputs of a few tens


def with_ordinary_magnitudes(args, kwargs):
    """The input with every real array and number scaled down to at most 1 in size, or None when nothing in it is
    large enough to overflow (NaN on a small input is not an overflow)."""
    values = [v for v in (*args, *kwargs.values()) if _is_real(v)]
    largest = max((float(np.max(np.abs(np.asarray(v, dtype=np.float64)), initial=0.0)) for v in values), default=0.0)
    if not np.isfinite(largest) or largest <= LARGE:
        return None
    def scaled(v):
        return (np.asarray(v) / largest).astype(np.asarray(v).dtype) if _is_real(v) else v
    return tuple(scaled(v) for v in args), {k: scaled(v) for k, v in kwargs.items()}


def with_a_mask(args, kwargs):
    """The input with mask=None (given, or left to its default) replaced by a mask that hides nothing (True broadcast
    to every query and key), or None when a mask is given: with no mask every key is visible, so the two must give
    the same answer. (A function with no `mask`, or given one by position, refuses the keyword: no cause found.)"""
    if kwargs.get("mask") is not None:
        return None
    return args, {**kwargs, "mask": np.ones((1, 1), dtype=bool)}


# (transform, what is observed when it takes the NaN away, the advice: None for the check's own nonfinite hint,
# which says how to keep that check's numbers in range)
NONFINITE_CAUSES = ((with_a_mask, MASK_NONE, ""), (with_ordinary_magnitudes, OVERFLOW, None))


def nonfinite_cause(student_fn, args, kwargs, name, allowed, declared=None, causes=NONFINITE_CAUSES):
    """The hint of the first of `causes` whose transform of the input (None: the cause is not in this input) makes
    the student's function give finite values everywhere: that NaN comes from there. None when no cause is told
    apart. `declared`: the check's own nonfinite hint, the advice of a cause that has none of its own."""
    for transform, observed, advice in causes:
        moved = transform(args, kwargs)
        if moved is None:
            continue
        try:
            with np.errstate(all="ignore"):
                result = call(student_fn, *moved[0], name=name, allowed=allowed, **moved[1])
        except Hint:
            continue  # a crash on the moved input tells nothing about the NaN on this one
        if _all_finite(result):
            advice = (declared or OVERFLOW_ADVICE) if advice is None else advice
            return f"{observed} {advice}".strip()
    return None


def _is_real(value):
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (float, np.floating)):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size > 0


def _all_finite(result):
    parts = result if isinstance(result, tuple) else (result,)
    try:
        return all(np.all(np.isfinite(np.asarray(part, dtype=np.float64))) for part in parts)
    except (TypeError, ValueError):
        return False


class Probes:
    """Inputs like the one that failed, and the student's answers on them, for confirming a diagnosis.

    Made lazily (only a wrong answer that looks like a known mistake costs further calls), from plain data
    only, and the student's function is called through `call` as in the check itself, so a function that
    runs elsewhere (a proxy to the student's kernel) is probed the same way. Yields (args, kwargs, the
    student's result or None, the reference's result).
    """
    VARIANTS = ((1, False), (2, False), (3, True), (4, True), (5, True))  # (seed, shift whole numbers too)

    def __init__(self, student_fn, reference_fn, args, kwargs, name, allowed, index=None, cache=None,
                 confirm_with=()):
        self.student_fn, self.reference_fn, self.name, self.allowed = student_fn, reference_fn, name, allowed
        self.args, self.kwargs, self.index = args, kwargs, index
        self.cache = [] if cache is None else cache  # shared by the parts of a tuple result
        self.inputs = [(tuple(a), dict(k or {})) for a, k in confirm_with] + list(self.VARIANTS)

    def part(self, index):
        part = Probes(self.student_fn, self.reference_fn, self.args, self.kwargs, self.name, self.allowed,
                      index, self.cache)
        part.inputs = self.inputs
        return part

    def _results(self):
        for position, source in enumerate(self.inputs):
            if position == len(self.cache):
                self.cache.append(self._probe(*source))
            if self.cache[position] is not None:
                yield self.cache[position]

    def confirming_inputs(self):
        """The (args, kwargs) of each input a diagnosis may be confirmed on, in order (None for a move that changes
        nothing): the inputs the student's function and the reference are called on again."""
        return [self._input(*source) for source in self.inputs]

    def _input(self, first, second):
        if isinstance(first, tuple):  # given: (args, kwargs)
            return first, second
        # (seed, shift whole numbers too): this input, moved a little
        rng = np.random.default_rng(first)
        changed = []
        args = tuple(_perturbed(a, rng, second, changed) for a in self.args)
        kwargs = {k: _perturbed(v, rng, second, changed) for k, v in self.kwargs.items()}
        return (args, kwargs) if changed else None  # the same input again is no new evidence

    def _probe(self, first, second):
        given = self._input(first, second)
        if given is None:
            return None
        args, kwargs = given
        with np.errstate(all="ignore"):
            try:
                expected = self.reference_fn(*args, **kwargs)
            except Exception:
                return None  # outside the function's contract: no probe
        try:
            got = call(self.student_fn, *args, name=self.name, allowed=self.allowed, **kwargs)
        except Hint:
            got = None
        return args, kwargs, got, expected

    def raw(self):
        """As iterating, with the student's answer as it came back (any shape; None when it is not numbers)."""
        for args, kwargs, got, expected in self._results():
            if self.index is not None:
                got = got[self.index] if isinstance(got, tuple) and len(got) > self.index else None
                expected = expected[self.index]
            yield args, kwargs, got, np.asarray(expected, dtype=np.float64)

    def __iter__(self):
        for args, kwargs, got, expected in self.raw():
            yield args, kwargs, as_result(got, expected.shape), expected


def _perturbed(value, rng, shift_ints, changed):
    """`value` moved a little, same type, shape and dtype: real numbers by noise of their own size (kept
    non-negative when they are), whole numbers by one when `shift_ints`; booleans, strings and
    functions unchanged."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
        spread = float(np.std(value)) or float(np.max(np.abs(value))) or 1.0
        if np.all(value >= 0):
            moved = value * np.exp(0.3 * rng.normal(size=value.shape))
        else:
            moved = value + 0.3 * spread * rng.normal(size=value.shape)
        changed.append(True)
        return moved.astype(value.dtype)
    if isinstance(value, list):
        array = np.asarray(value) if value else None
        if array is not None and array.dtype.kind == "f":
            return _perturbed(array, rng, shift_ints, changed).tolist()
        return value
    if isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, (float, np.floating)):
        changed.append(True)
        return type(value)(value * float(np.exp(0.3 * rng.normal())))
    if isinstance(value, (int, np.integer)) and shift_ints:
        shift = 1 + 3 * len(changed) + int(rng.integers(3))  # each by its own amount: equal numbers part
        changed.append(True)
        return type(value)(value + shift)
    if isinstance(value, tuple) and hasattr(value, "_replace"):  # a NamedTuple of the library (a config)
        fields = {f: _perturbed(getattr(value, f), rng, shift_ints, changed) for f in value._fields}
        return value._replace(**fields)
    if isinstance(value, types.SimpleNamespace):
        return types.SimpleNamespace(**{k: _perturbed(v, rng, shift_ints, changed) for k, v in vars(value).items()})
    return value
