"""Naming a known mistake only when it is certain: the student's answer is that mistake's on EVIDENCE_NEEDED
inputs that tell it apart from the reference and from every other listed mistake (the failing input, then
`Probes`: inputs like it on which the student's function is called again)."""
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


def certain_diagnosis(got, expected, args, kwargs, diagnoses, probes):
    """The hint of the one listed mistake the student's function reproduces on EVIDENCE_NEEDED inputs that
    tell it apart from the reference and from every other listed mistake; None when no mistake is certain."""
    if got is None or not diagnoses:
        return None
    for index, (mistake_fn, hint) in enumerate(diagnoses):
        if not _same(got, _mistaken(mistake_fn, args, kwargs)):
            continue
        # two ways of writing the same mistake share its hint and need not be told apart
        others = [fn for i, (fn, other_hint) in enumerate(diagnoses) if i != index and other_hint != hint]
        evidence = 0
        for probe_args, probe_kwargs, probe_got, probe_expected in itertools.chain(
                [(args, kwargs, got, expected)], probes):
            mistaken = _mistaken(mistake_fn, probe_args, probe_kwargs)
            if mistaken is None or _same(mistaken, probe_expected):
                continue  # this input cannot tell the mistake from a right answer
            if mistaken.shape != np.shape(probe_expected):
                continue  # there the mistake gives another shape, which is reported as such, not diagnosed
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

    def __iter__(self):
        for args, kwargs, got, expected in self._results():
            if self.index is not None:
                parts_ok = isinstance(got, tuple) and len(got) > self.index
                got, expected = (got[self.index] if parts_ok else None), expected[self.index]
            expected = np.asarray(expected, dtype=np.float64)
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
