"""The machinery behind every graded check: call the student's function safely, validate what came
back, compare it with the reference and, when it differs, say what is probably wrong.

Every failure is a `Hint`, an AssertionError whose message is written for a student: one sentence
naming the call, what was expected and what came back. Visible checks (qkv.checks.*) and the
instructor's hidden tests (autograde/qkv_grading) are both thin layers over `check_against`.
"""
import ast
import builtins
import contextlib
import functools
import glob
import importlib
import itertools
import linecache
import os
import re
import sys
import threading
import traceback
import types

import numpy as np

# Files holding reference implementations, and the checks' own helpers (which compute right answers
# too); a student's function that calls into them is not graded.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
REFERENCE_MODULES = ("attention", "lookup", "scaling", "masking", "heads", "sinks", "cost")
_REFERENCE_FILES = ({os.path.join(_PACKAGE_DIR, name + ".py") for name in REFERENCE_MODULES}
                    | set(glob.glob(os.path.join(_PACKAGE_DIR, "checks", "*.py"))))


class Hint(AssertionError):
    """A failed check, phrased for the student."""


# ---------------------------------------------------------------- the library must be the library

# Grading compares with qkv's reference and numpy's own functions; a notebook that replaces them
# (qkv.attention.softmax = my_softmax, np.allclose = lambda *a: True) would grade itself.
_REFERENCE = {name: importlib.import_module(f"qkv.{name}") for name in REFERENCE_MODULES}
_ORIGINAL = {(module, attr): value for module, m in _REFERENCE.items() for attr, value in vars(m).items()
             if callable(value)}
_TRUSTED_DIRS = tuple({_PACKAGE_DIR, os.path.dirname(np.__file__), sys.prefix, sys.base_prefix})
_NUMPY_ORIGINAL = dict(vars(np))
_FIRST_SEEN = {}  # (module, attribute) -> object, for modules imported after this one


def _foreign(value):
    """Defined in the notebook (or wrapping something that was), not by qkv, numpy or Python."""
    if isinstance(value, functools.partial):
        return True
    code = getattr(value, "__code__", None)
    if code is not None:
        grading = sys.modules.get("qkv_grading")
        trusted = _TRUSTED_DIRS + ((os.path.dirname(grading.__file__),) if grading else ())
        return not os.path.abspath(code.co_filename).startswith(trusted)
    return getattr(type(value), "__module__", None) == "__main__"


def _watched_modules():
    for name, module in list(sys.modules.items()):
        if module is not None and (name in ("numpy", "qkv", "qkv_grading") or name.startswith(("qkv.", "qkv_grading."))):
            yield name, module


class _SealedModule(types.ModuleType):
    """A module of the grader: a notebook may add names to it but not replace or delete any."""

    def __setattr__(self, name, value):
        if name in self.__dict__:
            raise AttributeError(f"`{self.__name__}.{name}` belongs to the grader; a notebook cannot replace it")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        raise AttributeError(f"`{self.__name__}.{name}` belongs to the grader; a notebook cannot delete it")


def seal(module_name):
    """Make the named module's functions impossible to replace by plain assignment (hidden tests, checks)."""
    sys.modules[module_name].__class__ = _SealedModule


def assert_untampered():
    """Refuse to grade when a qkv, qkv_grading or numpy function is not the one the library was loaded with."""
    for name, module in _watched_modules():
        short = name.split(".")[-1]
        for attr, value in list(vars(module).items()):
            if not callable(value):  # module-level data may change; functions and classes may not
                continue
            if name == "numpy":
                original = _NUMPY_ORIGINAL.get(attr, value)
            elif name.startswith("qkv.") and (short, attr) in _ORIGINAL:
                original = _ORIGINAL[(short, attr)]
            else:
                original = _FIRST_SEEN.setdefault((name, attr), value)
            if value is not original or _foreign(value):
                raise Hint(f"`{name}.{attr}` has been replaced in this notebook; grading needs the original "
                           f"library, so remove the code that changes it and restart the kernel.")


# ---------------------------------------------------------------- describing calls and values

def describe(value):
    if isinstance(value, np.ndarray):
        return f"array{tuple(value.shape)} {value.dtype}"
    if isinstance(value, (list, tuple)) and (len(value) > 6 or any(isinstance(v, (np.ndarray, list, tuple)) for v in value)):
        inner = ", ".join(describe(v) for v in value) if len(value) <= 4 else f"{len(value)} items"
        return f"{type(value).__name__} of {inner}"
    if callable(value):
        return getattr(value, "__name__", "function")
    return repr(value)


def call_text(name, args=(), kwargs=None):
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"


def _copy(value):
    return value.copy() if isinstance(value, np.ndarray) else value


# ---------------------------------------------------------------- the reference tripwire

_PROFILER_OFF = object()


@contextlib.contextmanager
def _no_reference_calls(allowed=()):
    """Record calls made from outside qkv's reference files into them while the body runs.

    `allowed`: functions the student may call (tools handed out, functions passed as arguments).
    Threads started meanwhile are watched too; switching the profiler off counts as an offence.
    """
    # a functools.partial handed over (a qkv function with some arguments bound) allows the function it wraps
    allowed_codes = {getattr(getattr(fn, "func", fn), "__code__", None) for fn in allowed} - {None}
    offenders = []
    previous, previous_threads = sys.getprofile(), threading.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in _REFERENCE_FILES:
            caller = frame.f_back
            from_reference = caller is not None and caller.f_code.co_filename in _REFERENCE_FILES
            if not from_reference and frame.f_code not in allowed_codes:
                offenders.append(frame.f_code.co_name)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield offenders
    finally:
        if sys.getprofile() is not profile:
            offenders.append(_PROFILER_OFF)
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


def _is_reference(fn):
    module = getattr(fn, "__module__", "") or ""
    return module == "qkv" or module.startswith("qkv.")


# ---------------------------------------------------------------- calling the student's function

def call(fn, *args, name=None, allowed=(), **kwargs):
    """Call a student's function on copies of the inputs; turn every way it can go wrong into a Hint.

    `allowed` lists qkv functions the exercise hands the student as tools (e.g. softmax in lesson 02).
    """
    name = name or getattr(fn, "__name__", "your function")
    # The tamper check and the tripwire guard this process against the student's code running in it. The grader's
    # stand-in for a function in the sandboxed kernel (qkv_autograde.student_kernel.RemoteFunction) runs that code
    # elsewhere, where the references are withheld: here the tripwire would only time the grader's own messaging.
    elsewhere = getattr(type(fn), "runs_in_another_process", False) is True
    if not elsewhere:
        assert_untampered()
    if not callable(fn):
        raise Hint(f"`{name}` should be a function, but it is {describe(fn)}.")
    if _is_reference(fn):
        raise Hint(f"`{name}` is qkv's reference implementation, not yours: define `{name}` in this "
                   f"notebook and make sure no later cell imports the library's version over it.")
    shown = call_text(name, args, kwargs)
    args = tuple(_copy(a) for a in args)
    kwargs = {k: _copy(v) for k, v in kwargs.items()}
    handed_over = [a for a in (*args, *kwargs.values()) if callable(a)]
    try:
        with contextlib.nullcontext([]) if elsewhere else _no_reference_calls((*allowed, *handed_over)) as offenders:
            result = fn(*args, **kwargs)
    except NotImplementedError:
        raise Hint(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your code.") from None
    except Hint:
        raise
    except Exception as error:
        raise Hint(f"{shown} raised {type(error).__name__}: {error}{_where(error)}{_likely_cause(error)}") from error
    if offenders:
        if _PROFILER_OFF in offenders:
            raise Hint(f"{shown} switched off the profiler that checks it does not call qkv's reference; "
                       f"leave sys.setprofile alone.")
        used = ", ".join(sorted({name.replace("<lambda>", "a helper") for name in offenders}))
        raise Hint(f"{shown} calls qkv's reference `{used}`; the exercise is to compute it yourself "
                   f"with numpy.")
    return result


def _likely_cause(error):
    """The keepdims advice, only when the failing line broadcasts a reduction over an axis (without
    keepdims) against that reduction's own input: `x - x.max(axis=1)`, or `x - m` after `m = x.max(axis=1)`."""
    if isinstance(error, ValueError) and "could not be broadcast" in str(error):
        line, earlier = _failing_source(error)
        if line and _reduction_against_its_input(line, earlier):
            return (". A sum or max over an axis drops that axis; keepdims=True keeps it so the result "
                    "broadcasts back against the input")
    return ""


_REDUCTIONS = {"sum", "max", "min", "mean", "amax", "amin", "std", "var", "prod", "nansum", "nanmax", "nanmin",
               "nanmean", "logsumexp", "median", "average"}


def _failing_source(error):
    """(the student's failing line, the lines of their code before it) as text, or ("", [])."""
    where = getattr(error, "where_in_student_code", None)
    if where is not None:  # raised in the student's kernel: only the line travelled with it
        found = re.search(r"`(.*)`\)?\s*$", where)
        return (found.group(1) if found else ""), []
    own = [frame for frame in traceback.extract_tb(error.__traceback__)
           if not frame.filename.startswith(_PACKAGE_DIR) and "site-packages" not in frame.filename]
    if not own:
        return "", []
    frame = own[-1]
    line = frame.line or linecache.getline(frame.filename, frame.lineno)
    return line, linecache.getlines(frame.filename)[max(0, frame.lineno - 31):frame.lineno - 1]


def _parsed(line):
    text = line.strip()
    for candidate in (text, text.rstrip(":") + ": pass" if text.endswith(":") else None):
        if candidate:
            try:
                return ast.parse(candidate)
            except SyntaxError:
                continue
    return None


def _reduced_input(node, bound):
    """The source of what `node` reduces over an axis without keepdims=True, or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _REDUCTIONS):
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    keepdims = keywords.get("keepdims")
    if isinstance(keepdims, ast.Constant) and keepdims.value is True:
        return None
    is_function = isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy")
    source = node.args[0] if is_function and node.args else (None if is_function else node.func.value)
    has_axis = "axis" in keywords or len(node.args) > (1 if is_function else 0)
    return ast.unparse(source) if source is not None and has_axis else None


def _reduction_against_its_input(line, earlier):
    bound = {}  # names holding a reduction without keepdims, from the lines before
    for text in earlier:
        tree = _parsed(text)
        statement = tree.body[0] if tree and tree.body else None
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            reduced = _reduced_input(statement.value, {})
            if reduced:
                bound[statement.targets[0].id] = reduced
            else:
                bound.pop(statement.targets[0].id, None)
    tree = _parsed(line)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                reduced = _reduced_input(side, bound)
                if reduced:
                    reduced_names = {n.id for n in ast.walk(ast.parse(reduced, mode="eval")) if isinstance(n, ast.Name)}
                    other_names = {n.id for n in ast.walk(other) if isinstance(n, ast.Name)}
                    if reduced in ast.unparse(other) or (reduced_names - {"np", "numpy"}) & other_names:
                        return True
    return False


def _where(error):
    """' (your line 4: `return x @ k`)' for the innermost frame of the student's own code."""
    if hasattr(error, "where_in_student_code"):  # raised in the student's kernel, located there (qkv.wire)
        return error.where_in_student_code
    own = [frame for frame in traceback.extract_tb(error.__traceback__)
           if not frame.filename.startswith(_PACKAGE_DIR) and "site-packages" not in frame.filename]
    if not own:
        return ""
    frame = own[-1]
    line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    return f" (in your code, line {frame.lineno}: `{line}`)" if line else ""



def call_with_peak_memory(fn, *args, **kwargs):
    """(result, peak bytes): `call(fn, ...)` traced by tracemalloc, the peak counted from just before the call
    (so it includes the copies of the inputs that `call` hands over, and everything numpy allocates inside)."""
    if hasattr(fn, "peak_memory_of_last_call"):  # a student's function in a sandboxed kernel: measured there
        fn.measure_memory = True
        try:
            result = call(fn, *args, **kwargs)
        finally:
            fn.measure_memory = False
        return result, fn.peak_memory_of_last_call
    import tracemalloc
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = call(fn, *args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, peak


# ---------------------------------------------------------------- validating what came back

def expect_array(result, shape, shown, allow_list=False):
    """The result must be a finite numeric array of the given shape (None in `shape` = any size)."""
    expected = "an array of shape " + _shape_text(shape)
    if result is None:
        raise Hint(f"{shown} returned None; expected {expected}. Is a `return` missing?")
    if isinstance(result, (list, tuple)) and not allow_list:
        raise Hint(f"{shown} returned a {type(result).__name__}; expected {expected} "
                   f"(a numpy array: np.array(...) or numpy operations give you one).")
    if np.isscalar(result) and shape != ():
        raise Hint(f"{shown} returned the single number {result!r}; expected {expected}.")
    try:
        array = np.asarray(result)
    except ValueError:
        raise Hint(f"{shown} returned something ragged that is not an array; expected {expected}.") from None
    if array.dtype.kind not in "biuf":
        raise Hint(f"{shown} returned values of type {array.dtype}; expected {expected} of numbers.")
    if not _shape_matches(array.shape, shape):
        raise Hint(f"{shown} returned shape {tuple(array.shape)}; expected {_shape_text(shape)}.")
    if not np.all(np.isfinite(array)):
        where = "NaN" if np.any(np.isnan(array)) else "infinity"
        raise Hint(f"{shown} returned {where} in its result; expected finite numbers everywhere.")
    return array.astype(np.float64)


def expect_number(result, shown):
    if result is None:
        raise Hint(f"{shown} is None; expected a number.")
    array = np.asarray(result)
    if array.dtype.kind not in "biuf" or array.size != 1:
        raise Hint(f"{shown} is {describe(result)}; expected a single number.")
    value = float(array.reshape(()))
    if not np.isfinite(value):
        raise Hint(f"{shown} is {value}; expected a finite number.")
    return value


def _shape_matches(actual, expected):
    return len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected))


def _shape_text(shape):
    return "(" + ", ".join("any" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


# ---------------------------------------------------------------- comparing with the reference

def close(a, b, rtol=1e-4, atol=1e-5):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def check_against(student_fn, reference_fn, args=(), kwargs=None, name=None, diagnoses=(),
                  rtol=1e-4, atol=1e-5, allowed=(), extra_checks=(), allow_list=False,
                  outputs=None, nonfinite_hint=None, confirm_with=()):
    """Run student and reference on the same inputs; raise a Hint that says what is probably wrong.

    diagnoses: (mistake_fn, hint) pairs; mistake_fn(*args, **kwargs) computes what a known mistake
        would return. The hint is given only when the diagnosis is certain: the student's answer matches
        that mistake on at least two inputs on which the mistake differs from the reference and from every
        other listed mistake (this input, and inputs like it the student's function is called on again,
        through `call`, only when its answer is wrong). Otherwise the generic largest difference is named.
    extra_checks: functions (student_result, args, kwargs) -> hint or None, for mistakes that are
        recognised by a property (rows not summing to 1) rather than by an exact value.
    outputs: names of the parts when the function returns a tuple, e.g. ("weights", "output").
    nonfinite_hint: said when the student's result holds NaN or infinity (e.g. an overflowing exp).
    confirm_with: further (args, kwargs) on which to confirm a diagnosis, tried before inputs made by moving
        this one a little (needed where a small move leaves the contract, e.g. a query that must equal a key).
    Returns the student's result as float64 array(s).
    """
    kwargs = dict(kwargs or {})
    name = name or getattr(student_fn, "__name__", "your function")
    shown = call_text(name, args, kwargs)
    raw = call(student_fn, *args, name=name, allowed=allowed, **kwargs)
    # computed only after the student's function has returned, so no stack frame holds the answer
    expected = reference_fn(*args, **kwargs)
    probes = _Probes(student_fn, reference_fn, args, kwargs, name, allowed, confirm_with=confirm_with)
    if outputs is None:
        expected = np.asarray(expected, np.float64)
        got = _validated(raw, expected, shown, allow_list, nonfinite_hint, diagnoses, args, kwargs, probes)
        _compare(got, expected, shown, args, kwargs, diagnoses, extra_checks, rtol,
                 _at_its_precision(raw, expected, atol), probes)
        return got
    if not isinstance(raw, tuple) or len(raw) != len(outputs):
        raise Hint(f"{shown} returned {describe(raw)}; expected a tuple ({', '.join(outputs)}).")
    shapes = [_shape_or_none(r) for r in raw]  # a ragged part is reported by _validated below
    wanted = [np.shape(e) for e in expected]
    if shapes != wanted and sorted(map(str, shapes)) == sorted(map(str, wanted)):
        raise Hint(f"{shown} returned parts of shapes {shapes}; expected ({', '.join(outputs)}) of shapes "
                   f"{wanted}: are the parts in the wrong order?")
    gots = []
    for index, (r, e, part) in enumerate(zip(raw, expected, outputs)):
        part_diagnoses = [(_part(fn, index), hint) for fn, hint in diagnoses]
        gots.append(_validated(r, np.asarray(e, np.float64), f"{shown}, its {part},", allow_list, nonfinite_hint,
                               part_diagnoses, args, kwargs, probes.part(index)))
    for index, part in enumerate(outputs):
        part_diagnoses = [(_part(fn, index), hint) for fn, hint in diagnoses]
        part_checks = [_part_check(check, index) for check in extra_checks]
        part_expected = np.asarray(expected[index], np.float64)
        _compare(gots[index], part_expected, f"{shown}, its {part},", args, kwargs, part_diagnoses, part_checks,
                 rtol, _at_its_precision(raw[index], part_expected, atol), probes.part(index))
    return tuple(gots)


# Rounding in single precision, amplified by a sharp softmax, reaches about 3e-5 of an answer's scale (worst of
# 20,000 draws of lesson 02's sharp self-attention case, computed in float32): a float32 answer may be that far off.
SINGLE_PRECISION_SLACK = 1e-4


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


def _validated(raw, expected, shown, allow_list, nonfinite_hint, diagnoses=(), args=(), kwargs=None, probes=()):
    expected = np.asarray(expected)
    try:
        return expect_array(raw, expected.shape, shown, allow_list=allow_list)
    except Hint as hint:
        if "finite" not in str(hint):
            raise
        # a known mistake may produce exactly this NaN (e.g. a softmax shifted by one global maximum)
        named = _certain_diagnosis(_as_result(raw, expected.shape), expected, args, kwargs or {}, diagnoses, probes)
        if named:
            raise Hint(f"{shown} returned NaN or infinity: {named}") from None
        if nonfinite_hint:
            raise Hint(f"{shown} returned NaN or infinity: {nonfinite_hint}") from None
        raise


def _compare(got, expected, shown, args, kwargs, diagnoses, extra_checks, rtol, atol, probes=()):
    if close(got, expected, rtol, atol):
        return
    named = _certain_diagnosis(got, expected, args, kwargs, diagnoses, probes)
    if named:
        raise Hint(f"{shown} is wrong: {named}")
    for property_check in extra_checks:
        hint = property_check(got, args, kwargs)
        if hint:
            raise Hint(f"{shown} is wrong: {hint}")
    raise Hint(f"{shown} is wrong: {mismatch_text(got, expected)}")


# ---------------------------------------------------------------- naming a mistake only when it is certain

EVIDENCE_NEEDED = 2  # inputs on which the student's answer is the mistake's, and only that mistake's


def _as_result(value, shape):
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


def _certain_diagnosis(got, expected, args, kwargs, diagnoses, probes):
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


class _Probes:
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
        part = _Probes(self.student_fn, self.reference_fn, self.args, self.kwargs, self.name, self.allowed,
                       index, self.cache)
        part.inputs = self.inputs
        return part

    def _results(self):
        for position, source in enumerate(self.inputs):
            if position == len(self.cache):
                self.cache.append(self._probe(*source))
            if self.cache[position] is not None:
                yield self.cache[position]

    def _probe(self, first, second):
        if isinstance(first, tuple):  # given: (args, kwargs)
            args, kwargs = first, second
        else:  # (seed, shift whole numbers too): this input, moved a little
            rng = np.random.default_rng(first)
            changed = []
            args = tuple(_perturbed(a, rng, second, changed) for a in self.args)
            kwargs = {k: _perturbed(v, rng, second, changed) for k, v in self.kwargs.items()}
            if not changed:
                return None  # the same input again is no new evidence
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
            yield args, kwargs, _as_result(got, expected.shape), expected


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


def mismatch_text(got, expected):
    diff = np.abs(got - expected)
    index = np.unravel_index(np.argmax(diff), diff.shape) if diff.ndim else ()
    at = f" at index {tuple(int(i) for i in index)}" if index else ""
    return (f"the largest difference from the expected result is {diff.max():.4g}{at} "
            f"(got {got[index]:.6g}, expected {expected[index]:.6g}).")


# ---------------------------------------------------------------- self-check questions

SELF_STUDY_VARIABLE = "QKV_SELF_STUDY"
# what an ANSWERS table may use besides numpy: it is read as data, never run as a module
_PLAIN_BUILTINS = {name: getattr(builtins, name) for name in ("float", "int", "abs", "round", "min", "max", "sum")}


def self_study():
    """Is self-study mode on? Set QKV_SELF_STUDY=1 (the public Binder launch does, in `start`).

    In self-study mode a self-check question says at once whether the answer is right, with a one-line
    explanation; in a graded class (the variable unset) it only records the answer, graded at collection.
    """
    return os.environ.get(SELF_STUDY_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def _answer_key_folder():
    """autograde/qkv_grading of the course checkout this library was installed from (Binder clones the
    whole repository) or above the notebook's folder; $QKV_AUTOGRADE names another autograde/ folder."""
    override = os.environ.get("QKV_AUTOGRADE")
    candidates = [os.path.join(override, "qkv_grading")] if override else []
    for start in () if override else (os.path.dirname(os.path.dirname(_PACKAGE_DIR)), os.getcwd()):
        folder = os.path.abspath(start)
        while True:
            candidates.append(os.path.join(folder, "autograde", "qkv_grading"))
            if os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
    return next((c for c in candidates if os.path.isfile(os.path.join(c, "__init__.py"))), None)


def _answer_key():
    """{question name: (right answer, tolerance, explanation)}, or a reason string why there is none."""
    folder = _answer_key_folder()
    if folder is None:
        return "the course's autograde/ folder is not in this installation"
    return _read_answer_key(folder)


@functools.lru_cache(maxsize=4)
def _read_answer_key(folder):
    # the ANSWERS and EXPLANATIONS dicts of qkv_grading/lessonNN.py, read as data: the hidden-test
    # modules themselves are never imported into the student's kernel
    key = {}
    for path in sorted(glob.glob(os.path.join(folder, "lesson*.py"))):
        tables = {}
        try:
            for node in ast.parse(open(path, encoding="utf-8").read()).body:
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in (["ANSWERS"], ["EXPLANATIONS"]):
                    expression = compile(ast.Expression(node.value), path, "eval")
                    tables[node.targets[0].id] = eval(expression, {"np": np, "__builtins__": _PLAIN_BUILTINS})
        except (OSError, SyntaxError, NameError, TypeError, ValueError):
            continue  # a lesson whose answers cannot be read as plain data is graded at collection only
        for name, (correct, tolerance) in tables.get("ANSWERS", {}).items():
            key[name] = (correct, tolerance, tables.get("EXPLANATIONS", {}).get(name, ""))
    return key if key else f"no ANSWERS found in {folder}"


def answer_tolerance(correct, tolerance=None):
    """How far a numeric self-check answer may be from the right one: the one rule of grading and self-study."""
    return tolerance if tolerance is not None else 1e-6 + 1e-3 * abs(correct)


def _is_right(value, correct, tolerance):
    if isinstance(correct, str):
        return value == correct
    return abs(float(value) - correct) <= answer_tolerance(correct, tolerance)


def _verdict(name, value, shown):
    """Record the answer, or in self-study mode say right (print) or wrong (Hint), with the explanation."""
    if not self_study():
        print(f"{name}: answer recorded ({shown}); it is graded when the notebook is collected.")
        return
    key = _answer_key()
    if isinstance(key, str) or name not in key:
        reason = key if isinstance(key, str) else f"no right answer for `{name}` is stored"
        print(f"{name}: answer recorded ({shown}). Self-study mode is on, but {reason}, so this answer can only "
              f"be graded when the notebook is collected.")
        return
    correct, tolerance, explanation = key[name]
    if not _is_right(value, correct, tolerance):
        raise Hint(f"`{name}` = {shown} is not right. {explanation}".rstrip())
    print(f"{name}: right ({shown}). {explanation}".rstrip())


def answered_choice(answer, choices, name):
    """Visible check of a multiple-choice answer: its form always; right or wrong in self-study mode only
    (otherwise its correctness is graded by the hidden tests)."""
    if answer is None or (isinstance(answer, str) and answer.strip() == ""):
        raise Hint(f"`{name}` is not answered yet: set it to one of {', '.join(map(repr, choices))}.")
    if answer not in choices:
        raise Hint(f"`{name}` is {answer!r}; it must be one of {', '.join(map(repr, choices))}.")
    _verdict(name, answer, repr(answer))


def answered_number(answer, name):
    """Visible check of a numeric answer: its form always; right or wrong in self-study mode only."""
    value = expect_number(answer, f"`{name}`")
    _verdict(name, value, f"{value:.6g}")


# ---------------------------------------------------------------- short failures in notebooks

def _show_hint(shell, etype, value, tb, tb_offset=None):
    # A Hint is the whole message: a traceback through the checking code would only bury it (and
    # would print the hidden tests' source into the student's feedback).
    short = [f"\x1b[0;31m{etype.__name__}\x1b[0m: {value}"]
    shell._showtraceback(etype, value, short)  # IPython leaves displaying a custom traceback to us
    return short


def _install_short_hints():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((Hint,), _show_hint)


_install_short_hints()
_ORIGINAL.update({("checking", attr): value for attr, value in dict(globals()).items() if callable(value)})
seal(__name__)
