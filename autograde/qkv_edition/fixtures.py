"""What the visible checks of a lesson ask of the functions the student edition withholds, recorded from the full
library: `record(lesson) -> {key: entry}`, read back in the edition by qkv.checking.replay.

How. Every withheld function (default: the lesson's hidden tests' GRADED_REFERENCES; pass `withheld` to add twins)
is intercepted in place for the time of the recording: its code object is swapped for one that records the call
and runs the original, so every way of reaching it (module attribute, `from ... import`, a partial, a Check's
`allowed`) is seen and the tamper guard still finds the very same function objects. Only the outermost withheld
call is recorded (in the edition the stub answers it, and nothing inside runs), and never a call made while the
student's function runs (the reference tripwire's profiler is on then): in the edition the student's code is the
student's own.

Exhaustive. The lesson's visible checks (those its solution notebook's test cells call) run with the solution's own
functions, and, at each `check_against` / `check_boolean` (the qkv.checking.compare.RECORDERS hook), the reference
and every catalogued mistake (`Check.diagnoses`, and `Check.plausible`) are computed on the checked input and on
every input a diagnosis may be confirmed on (`confirm_with`, then `Probes.VARIANTS`), whatever the student would
answer. A check whose diagnosis is its own code must ask the reference what it needs whatever the answer (lesson 03's
dot_product_variance computes the right answers on its confirming seeds up front); `hybrids=True` walks such a check
again with students that answer right for their first j calls and as one catalogued mistake from then on, for every
j and every mistake, to find what it asks only of a wrong answer (slow: each run computes the mistakes the check
computes, and lesson 03's include a [20000, 20000] product). tests/test_edition_checks.py is the judge: every
catalogued mistake, mutant and correct variant gets the same hint from the edition.

What a withheld function is given, lesson by lesson (a call qkv.wire_codec cannot encode would be listed in
`Fixtures.unkeyable`, and the edition's build refuses to ship it rather than guess; none is, in lessons 01-07):
- `check_against` and `check_boolean` call the reference with the check's own plain data, never with the student's
  function or answer (the extra checks that read the student's answer are numpy only);
- callables are qkv functions or partials of them, keyed by name: lesson 04's dependence_matrix gets
  qkv.probes.mixed_readout partials, lesson 06's occlusion_effects qkv.sinks.toy_*_logprob partials, its ablation
  check qkv.sinks.stand_in_attention (not lesson 05's grouped_query_attention, lesson 07's attention_step on one
  query);
- the student's functions that run inside SmolLM2 (lesson 05's smollm2, lesson 07's generation_with_cache) are
  given to qkv.model.forward and qkv.kv_cache.generate_with_cache, which are not withheld, and the reference run
  they are compared with uses the model's own attention, not a withheld function: nothing of the model is recorded.
"""
import ast
import contextlib
import copy
import importlib
import inspect
import io
import json
import sys
import types
import warnings

import numpy as np

import qkv.lessons
from qkv import wire_codec
from qkv.checking import Check, Probes
from qkv.checking import replay
from qkv.checking.compare import RECORDERS
from qkv_autograde.kernels.kernel_view import graded_references

HOOK = "__qkv_edition_recording__"  # the name, in a withheld function's module, of the recorder's table


class Fixtures(dict):
    """{key: entry} of one lesson, with what the recording could not key (`unkeyable`: (dotted, why)) and calls
    that gave two different results for one key (`nondeterministic`)."""

    def __init__(self, entries, unkeyable, nondeterministic, runs):
        super().__init__(entries)
        self.unkeyable, self.nondeterministic, self.runs = unkeyable, nondeterministic, runs


def record(lesson, withheld=None, hybrids=False, root=None):
    """Fixtures of `lesson` (slug or number) for the functions `withheld` (dotted names; default: the lesson's
    GRADED_REFERENCES), from the solution notebook in `root` (default: this checkout)."""
    row = qkv.lessons.lesson(lesson)
    names = tuple(withheld) if withheld is not None else graded_references(row.slug)
    checks = importlib.import_module(row.checks)
    notebook = solution_notebook(row, root)
    namespace, calls = solution_namespace(notebook, row.slug), visible_calls(notebook)
    runs = 0
    with Recorder(names) as recorder, contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mistakes' overflows, computed on purpose
        for check_name, argument_names in calls:
            check = getattr(checks, check_name)
            solutions = [namespace[name] for name in argument_names]
            counted = [Student(fn, recorder) for fn in solutions]
            check(*counted)  # the solution passes its own lesson's checks
            runs += 1
            if not hybrids:
                continue
            for position, (name, solution) in enumerate(zip(argument_names, counted)):
                for mistake in mistakes_for(checks, name, solution.first_call):
                    for after in range(solution.calls):
                        students = [Student(fn, recorder) for fn in solutions]
                        students[position] = Student(solutions[position], recorder, mistake, after)
                        runs += 1
                        try:
                            check(*students)
                        except Exception:  # noqa: S110 - a Hint (or any failure) is what a mistaken student gets
                            pass
    return Fixtures(recorder.entries, recorder.unkeyable, recorder.nondeterministic, runs)


# ---------------------------------------------------------------- the solution notebook: students and checks

def solution_notebook(row, root=None):
    folder = qkv.lessons.course_paths(root).solutions / row.slug
    with open(next(folder.glob("*.ipynb")), encoding="utf-8") as f:
        return json.load(f)


def _code_cells(notebook):
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            # IPython magics and shell lines mean nothing to exec()
            yield cell, "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def _grading(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def solution_namespace(notebook, label):
    """The namespace of a student who answered as the solution does: the import cell, then every answer cell."""
    namespace = {"__name__": "__main__"}
    cells = list(_code_cells(notebook))
    for index, (cell, source) in enumerate(cells):
        if index == 0 or _grading(cell).get("solution"):
            try:
                exec(compile(source, f"<{label}:{_grading(cell).get('grade_id', 'imports')}>", "exec"), namespace)
            except Exception:  # noqa: S110 - a self-check answer computed from the notebook's figures: not needed here
                if index == 0:
                    raise
    return namespace


def visible_calls(notebook):
    """[(check function, [names of the student's functions it is given])] from the test cells: `check.softmax(softmax)`
    where `check` is the name the import cell gives qkv.checks.lessonNN."""
    cells = list(_code_cells(notebook))
    aliases = {alias.asname or alias.name for node in ast.walk(ast.parse(cells[0][1]))
               if isinstance(node, ast.ImportFrom) and node.module == "qkv.checks" for alias in node.names}
    calls = []
    for cell, source in cells:
        if not _grading(cell).get("grade") or _grading(cell).get("solution"):
            continue
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in aliases):
                calls.append((node.func.attr, [arg.id for arg in node.args]))
    return calls


def mistakes_for(checks, student_name, first_call):
    """The catalogued mistakes a student's function may make: the diagnoses of the Check named after it, else
    those of catalogues no Check declares (lesson 03's VARIANCE_MISTAKES) that take the same arguments."""
    declared = [value for value in vars(checks).values() if isinstance(value, Check)]
    named = [fn for check in declared if check.name == student_name for fn, _ in check.diagnoses]
    if named:
        return list({id(fn): fn for fn in named}.values())
    in_checks = {id(fn) for check in declared for fn, _ in check.diagnoses}
    found = {}
    for value in vars(checks).values():
        if _is_catalogue(value) and not all(id(fn) in in_checks for fn, _ in value):
            for fn, _ in value:
                if first_call is not None and _binds(fn, *first_call):
                    found[id(fn)] = fn
    return list(found.values())


def _is_catalogue(value):
    return (isinstance(value, (list, tuple)) and value
            and all(isinstance(pair, tuple) and len(pair) == 2 and callable(pair[0]) and isinstance(pair[1], str)
                    for pair in value))


def _binds(fn, args, kwargs):
    try:
        inspect.signature(fn).bind(*args, **kwargs)
        return True
    except (TypeError, ValueError):
        return False


class Student:
    """A student's function: the solution's, counting its calls; with `mistake`, right for the first `after` calls
    and that mistake from then on (computed with the tripwire paused: the mistake's code is the library's)."""

    def __init__(self, solution, recorder, mistake=None, after=0):
        self.solution, self.recorder, self.mistake, self.after = solution, recorder, mistake, after
        self.calls, self.first_call = 0, None
        self.__name__ = getattr(solution, "__name__", "student")

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.first_call is None:
            self.first_call = (args, kwargs)
        if self.mistake is None or self.calls <= self.after:
            return self.solution(*args, **kwargs)
        return self.recorder.as_student(self.mistake, args, kwargs)


# ---------------------------------------------------------------- recording the withheld functions' calls

class Recorder:
    """While open: every outermost call to a withheld function, outside the student's code, is recorded."""

    def __init__(self, withheld):
        self.hooks = {}
        for dotted in withheld:
            module_name, _, name = dotted.rpartition(".")
            fn = vars(importlib.import_module(module_name)).get(name)
            if not (isinstance(fn, types.FunctionType) and not fn.__code__.co_freevars):
                raise ValueError(f"{dotted} is not a top-level function of {module_name}")
            self.hooks[dotted] = _Hook(self, dotted, fn)
        self.entries, self.unkeyable, self.nondeterministic = {}, [], []
        self.depth = 0    # withheld calls in progress
        self.student = 0  # a mistake playing the student's function is running

    def recording(self):
        return self.depth == 0 and self.student == 0 and sys.getprofile() is None

    def __enter__(self):
        for hook in self.hooks.values():
            hook.install()
        RECORDERS.append(self.enumerate)
        return self

    def __exit__(self, *exc):
        RECORDERS.remove(self.enumerate)
        for hook in self.hooks.values():
            hook.remove()

    def as_student(self, mistake, args, kwargs):
        profiler = sys.getprofile()
        sys.setprofile(None)
        self.student += 1
        try:
            return mistake(*args, **kwargs)
        finally:
            self.student -= 1
            sys.setprofile(profiler)

    def enumerate(self, reference_fn, args, kwargs, check):
        """What any student's path through this check may ask: the reference and every catalogued mistake on the
        checked input and on every confirming input."""
        if not self.recording():
            return
        probes = Probes(None, reference_fn, args, kwargs, "", (), confirm_with=check.confirm_with)
        inputs = [(tuple(args), dict(kwargs))] + [given for given in probes.confirming_inputs() if given is not None]
        for given in inputs:
            for fn in (reference_fn, *(mistake for mistake, _ in check.diagnoses), *check.plausible):
                copied_args, copied_kwargs = _fresh(given)  # the check's own inputs stay as they are
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        fn(*copied_args, **copied_kwargs)
                    except Exception:  # noqa: S110 - outside the function's contract: the check skips it too
                        pass

    def call(self, hook, args, kwargs):
        try:
            bound = hook.signature.bind(*args, **kwargs)
        except TypeError:  # the function's own TypeError says it best; the edition's stub raises the same
            return hook.original(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        try:
            encoded = replay.encode_arguments(arguments)
        except wire_codec.WireError as error:
            self.unkeyable.append((hook.dotted, f"arguments: {error}"))
            return hook.original(*args, **kwargs)
        key = replay.key_of_encoded(hook.dotted, encoded)
        before = {name: wire_codec.encode(value) for name, value in arguments.items() if _mutable(value)}
        entry = {"name": hook.dotted, "args": json.loads(encoded)}
        self.depth += 1
        try:
            result = hook.original(*args, **kwargs)
        except Exception as error:
            entry["raises"] = replay.describe_exception(error)
            self._store(key, entry, arguments, before)
            raise
        finally:
            self.depth -= 1
        try:
            entry["result"] = json.loads(wire_codec.encode(result))
        except wire_codec.WireError as error:
            self.unkeyable.append((hook.dotted, f"result: {error}"))
            return result
        self._store(key, entry, arguments, before)
        return result

    def _store(self, key, entry, arguments, before):
        after = {name: wire_codec.encode(arguments[name]) for name in before}
        changed = {name: json.loads(text) for name, text in after.items() if text != before[name]}
        if changed:
            entry["after"] = changed
        if key not in self.entries:
            self.entries[key] = entry
        elif self.entries[key] != entry:
            self.nondeterministic.append(entry["name"])


def _fresh(value):
    """`value` with what a call could change in place copied: writeable arrays, generators, containers."""
    if isinstance(value, np.ndarray):
        return value.copy() if value.flags.writeable else value
    if isinstance(value, np.random.Generator):
        return copy.deepcopy(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, types.SimpleNamespace):
        return types.SimpleNamespace(**_fresh(vars(value)))
    return value


def _mutable(value):
    return isinstance(value, (np.ndarray, np.random.Generator, list, dict, types.SimpleNamespace))


class _Hook:
    """One withheld function, intercepted in place: the same object, its code swapped for a recording one."""

    def __init__(self, recorder, dotted, fn):
        self.recorder, self.dotted, self.fn, self.code = recorder, dotted, fn, fn.__code__
        self.original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__)
        self.original.__kwdefaults__ = fn.__kwdefaults__
        self.signature = inspect.signature(fn)

    def install(self):
        # compiled as the reference's own file, so the tripwire sees the reference calling itself; the last line
        # runs the original from that frame when nothing is recorded (inside the student's code)
        source = (f"def {self.fn.__name__}(*args, **kwargs):\n"
                  f"    hook = {HOOK}[{self.dotted!r}]\n"
                  f"    if hook.recorder.recording():\n"
                  f"        return hook(args, kwargs)\n"
                  f"    return hook.original(*args, **kwargs)\n")
        compiled = {}
        exec(compile(source, self.code.co_filename, "exec"), compiled)
        self.fn.__globals__.setdefault(HOOK, {})[self.dotted] = self
        self.fn.__code__ = compiled[self.fn.__name__].__code__
        self.fn.__wrapped__ = self.original  # inspect.signature still reads the original's

    def remove(self):
        self.fn.__code__ = self.code
        vars(self.fn).pop("__wrapped__", None)
        table = self.fn.__globals__.get(HOOK, {})
        table.pop(self.dotted, None)
        if not table:
            self.fn.__globals__.pop(HOOK, None)

    def __call__(self, args, kwargs):
        return self.recorder.call(self, args, kwargs)
