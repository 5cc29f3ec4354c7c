"""Which functions of a `qkv` folder answer an open exercise: each tried as the student's answer to the hidden tests.

`probe(library_folder, lessons)` lists what passes (`Passing`: the candidate's dotted path, the lesson, the exercise).
It serves the student edition (issue 33: nothing in an edition may answer one of its open exercises) and the grader's
kernel view (issue 34: nothing in the view of lesson N may answer one of lesson N's exercises), for any folder that
holds a package named `qkv`.

How, as grading does it:
- the candidates live in another process: a sandboxed kernel (qkv_autograde.kernels.sandbox) whose `qkv` is the folder's
  (PYTHONPATH first, the folder's package also bound where the editable install looks, the editable finder
  removed, and every `qkv` module the kernel imported checked to come from the folder). The kernel imports every
  module of the package (one that fails is reported, not fatal) and lists every top-level function, every class's
  staticmethod and classmethod, every method of a module-level object (and the object itself when callable), and
  every callable held in a module-level list, tuple, dict, dataclass or NamedTuple (mistake catalogues, Check
  declarations), each named by its dotted path (`qkv.checks.lesson01.SOFTMAX_MISTAKES[3][0]`), each once;
- an exercise is a hidden test that a solution notebook's test cell calls with the student's function
  (`hidden.softmax(softmax)`; the self-checks' `hidden.answer(...)` are not exercises). Its first call to the
  student's function is recorded here with a stand-in that stops the test there; a candidate fits when its
  signature binds that call (the number of positional arguments and the keywords);
- each fitting candidate is handed to the hidden test, which runs here with the full library, as the grader's
  RemoteFunction (qkv_autograde.kernels.student_kernel over qkv.wire: plain data in, plain data out; module `__main__`,
  as the student's own wrapper would be). The test stops at its first failure; one call has `call_seconds`.
  A test that raises nothing is a PASS: the finding. Where a test takes several of the student's functions
  (`hidden.generation_with_cache(attention_step, append_to_cache)`), the candidate takes each place in turn and
  the solution notebook's own functions, defined in the kernel, take the others;
- controls: the solution notebook's own functions, defined in the same kernel, must pass every exercise before the
  candidates run (otherwise a failing candidate would prove nothing) and after them (a candidate that broke the
  kernel's state would hide the ones after it). A control that passed before and fails after stops the probe.

`python -m qkv_edition.probe FOLDER --lessons 01-lookup[,...]` prints each passing candidate; exit 1 if any passes.
"""
import argparse
import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import json
import os
import sys
import time
import warnings

import nbformat

from qkv import NO_FRONT_END, lessons as registry

from qkv_autograde.kernels import sandbox, student_kernel
from qkv_autograde.grading.verdicts import setup_imports

LIBRARY = os.path.dirname(os.path.abspath(registry.__file__))  # the full library (the editable install's folder)


@dataclasses.dataclass(frozen=True)
class Passing:
    """A candidate of the folder that passed an exercise's hidden test."""
    candidate: str   # dotted path in the folder's qkv: "qkv.sinks.log_softmax", "qkv.checks.lesson01.X[3][0]"
    lesson: str      # "01-lookup"
    exercise: str    # the hidden test's name (qkv_grading.lessonNN.<exercise>); "<test> as <argument>" when the test
    #                  takes several of the student's functions and the candidate stood for <argument>

    def __str__(self):
        return f"{self.lesson} {self.exercise}: {self.candidate} passes"


@dataclasses.dataclass(frozen=True)
class Exercise:
    """A hidden test that a solution notebook's test cell calls with the student's functions."""
    lesson: str                # slug
    name: str                  # qkv_grading.lessonNN.<name>
    arguments: tuple           # the student's names the test cell passes, in order ("softmax",)
    first_calls: tuple         # per argument: (positional count, keyword names) of the test's first call of it
    solution_cells: tuple      # sources of the solution cells that define `arguments`, and those before them

    @property
    def test(self):
        return getattr(importlib.import_module(registry.lesson(self.lesson).hidden_tests), self.name)

    def label(self, slot):
        return self.name if len(self.arguments) == 1 else f"{self.name} as {self.arguments[slot]}"


@dataclasses.dataclass
class Report:
    """Everything one probe run found; `passing` is the finding."""
    passing: list = dataclasses.field(default_factory=list)
    import_failures: list = dataclasses.field(default_factory=list)   # (module, "Error: message")
    candidates: int = 0
    tried: dict = dataclasses.field(default_factory=dict)           # exercise label -> candidates tried
    controls_before: dict = dataclasses.field(default_factory=dict)  # exercise label -> None (passed) or why not
    controls_after: dict = dataclasses.field(default_factory=dict)
    not_probed: list = dataclasses.field(default_factory=list)       # (exercise label, why)
    isolation: str = ""
    qkv_file: str = ""
    seconds: dict = dataclasses.field(default_factory=dict)          # lesson -> seconds (kernel start in "start")


class ProbeError(RuntimeError):
    """The probe could not judge the folder (no qkv in it, a kernel whose qkv is not the folder's, a control that a
    candidate broke)."""


# ---------------------------------------------------------------- exercises, from the solution notebooks


class _FirstCall(BaseException):
    """Raised by the stand-in at the hidden test's first call of the student's function: that call is recorded."""


class _Recorder:
    """Stands in for the student's function just long enough to see how the hidden test calls it."""

    runs_in_another_process = True  # as the grader's RemoteFunction: no tripwire or tamper check for it

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name
        self.__module__ = "__main__"
        self.call = None

    def __call__(self, *args, **kwargs):
        if self.call is None:
            self.call = (len(args), tuple(sorted(kwargs)))
        raise _FirstCall()


def solution_notebook(lesson):
    folder = registry.course_paths().solutions / registry.lesson(lesson).slug
    return next(folder.glob("*.ipynb"))


def _hidden_calls(source):
    """(test name, (argument names)) of every `hidden.<test>(<names>)` in a test cell, `answer` left out."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == registry.HIDDEN_TESTS_PACKAGE for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in aliases
                and node.func.attr != "answer" and node.args and not node.keywords
                and all(isinstance(arg, ast.Name) for arg in node.args)):
            found.append((node.func.attr, tuple(arg.id for arg in node.args)))
    return found


def _defined_signature_call(sources, name):
    """(required positional count, ()) of `def name(...)` in the solution cells: the fallback first call."""
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                positional = node.args.posonlyargs + node.args.args
                return (len(positional) - len(node.args.defaults), ())
    return None


def exercises(lesson):
    """The graded exercises of `lesson`, in the solution notebook's order."""
    slug = registry.lesson(lesson).slug
    notebook = nbformat.read(solution_notebook(slug), as_version=4)
    module = importlib.import_module(registry.lesson(slug).hidden_tests)
    solutions, found = [], []
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            solutions.append(cell.source)
        elif meta.get("grade"):
            for name, arguments in _hidden_calls(cell.source):
                found.append((name, arguments, tuple(solutions)))
    result = []
    for name, arguments, sources in found:
        recorders = [_Recorder(argument) for argument in arguments]
        with _quiet():
            try:
                getattr(module, name)(*recorders)
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    raise
        first_calls = []
        for recorder, argument in zip(recorders, arguments):
            # a test taking several functions stops at the first one it calls: the others' calls from their `def`
            first_calls.append(recorder.call or _defined_signature_call(sources, argument))
        result.append(Exercise(slug, name, arguments, tuple(first_calls), sources))
    return result


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def fits(signature, call):
    """Whether a candidate's signature (as the kernel described it) binds a call of (positional count, keywords)."""
    if signature is None or call is None:
        return True  # no signature to read (a builtin): only a call can tell
    try:
        parameters = [inspect.Parameter(name, inspect._ParameterKind(kind),
                                        default=0 if has_default else inspect.Parameter.empty)
                      for name, kind, has_default in signature]
        inspect.Signature(parameters).bind(*range(call[0]), **{k: 0 for k in call[1]})
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- the candidates' kernel

_PREFIX = "_qkv_probe_"

# Run in the kernel first, before anything imports qkv: the folder's package, checked, every module imported, every
# candidate bound to a global _qkv_probe_c<i>, and the catalogue in _qkv_probe_catalogue (plain data, read by wire).
KERNEL_SETUP = r'''
def _qkv_probe_setup(folder):
    import dataclasses, functools, importlib, inspect, os, sys, types
    folder = os.path.realpath(folder)
    # the full library is an editable install: its finder must not answer for a module the folder lacks
    sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    if any(name == "qkv" or name.startswith("qkv.") for name in sys.modules):
        raise RuntimeError("qkv was imported in the probe's kernel before its set-up")

    def inside(path):
        return bool(path) and os.path.realpath(path).startswith(folder + os.sep)

    import qkv
    if not inside(qkv.__file__):
        raise RuntimeError(f"the kernel imported qkv from {qkv.__file__}, not from {folder}")
    package = os.path.dirname(os.path.realpath(qkv.__file__))
    modules, failures = [], []
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(root, d, "__init__.py")))
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            parts = os.path.relpath(os.path.join(root, file), os.path.dirname(package))[:-3].split(os.sep)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                modules.append(importlib.import_module(name))
            except BaseException as error:
                failures.append([name, f"{type(error).__name__}: {error}"[:500]])
    outside = sorted(name for name, module in list(sys.modules.items())
                     if (name == "qkv" or name.startswith("qkv.")) and getattr(module, "__file__", None)
                     and not inside(module.__file__))
    if outside:
        raise RuntimeError(f"modules of qkv imported from outside {folder}: {outside[:5]}")

    def code_of(obj):
        obj = getattr(obj, "__func__", obj)
        while isinstance(obj, functools.partial):
            obj = obj.func
        try:
            obj = inspect.unwrap(obj)
        except ValueError:
            return None
        obj = getattr(obj, "__func__", obj)
        code = getattr(obj, "__code__", None)
        return code.co_filename if code is not None else None

    def ours(obj):
        return inside(code_of(obj))

    def ours_class(cls):
        try:
            return inside(inspect.getfile(cls))
        except (TypeError, OSError):
            return False

    found, seen = [], set()

    def add(path, fn):
        key = (id(getattr(fn, "__func__", fn)), id(getattr(fn, "__self__", None)))
        if key in seen:
            return
        seen.add(key)
        found.append((path, fn))

    def methods(path, obj):
        for attr in sorted(dir(type(obj))):
            if attr.startswith("__"):
                continue
            try:
                raw = inspect.getattr_static(type(obj), attr)
                bound = getattr(obj, attr)
            except Exception:
                continue
            if callable(bound) and not inspect.isclass(bound) and ours(raw):
                add(f"{path}.{attr}", bound)

    def visit(path, value, depth):
        if isinstance(value, (types.ModuleType, str, bytes, int, float, complex, bool, type(None))):
            return
        if inspect.isclass(value):
            if ours_class(value):
                for attr, raw in vars(value).items():
                    if isinstance(raw, (staticmethod, classmethod)) and ours(raw.__func__):
                        add(f"{path}.{attr}", getattr(value, attr))
            return
        if isinstance(value, (types.FunctionType, functools.partial, types.MethodType)) or (
                callable(value) and hasattr(value, "__wrapped__")):
            if ours(value):
                canonical = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
                module = sys.modules.get(canonical[0]) if canonical[0] else None
                if module is not None and "." not in canonical[1] and "<" not in canonical[1] \
                        and getattr(module, canonical[1], None) is value:
                    path = f"{canonical[0]}.{canonical[1]}"
                add(path, value)
            return
        if depth >= 4:
            return
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            for index, item in enumerate(value[:10_000]):
                visit(f"{path}[{index}]", item, depth + 1)
        elif isinstance(value, dict):
            for key, item in list(value.items())[:10_000]:
                visit(f"{path}[{key!r}]", item, depth + 1)
        elif dataclasses.is_dataclass(value) or hasattr(value, "_fields") or isinstance(value, types.SimpleNamespace):
            if hasattr(value, "_fields"):
                fields = value._fields
            elif dataclasses.is_dataclass(value):
                fields = [f.name for f in dataclasses.fields(value)]
            else:
                fields = list(vars(value))
            for field in fields:
                visit(f"{path}.{field}", getattr(value, field, None), depth + 1)
            if ours_class(type(value)):
                methods(path, value)
        elif ours_class(type(value)):
            if callable(value):
                add(path, value)
            methods(path, value)

    for module in modules:
        for name, value in list(vars(module).items()):
            if not (name.startswith("__") and name.endswith("__")) or name in ("__getattr__", "__dir__"):
                visit(f"{module.__name__}.{name}", value, 0)

    catalogue = []
    for index, (path, fn) in enumerate(found):
        globals()[f"_qkv_probe_c{index}"] = fn
        catalogue.append([f"_qkv_probe_c{index}", path, _qkv_probe_signature(fn)])
    return {"candidates": catalogue, "failures": failures, "qkv_file": qkv.__file__}


def _qkv_probe_signature(fn):
    import inspect
    try:
        return [[p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return None


_qkv_probe_catalogue = _qkv_probe_setup(FOLDER)
del _qkv_probe_setup
'''

# The student's pasted code (candidates named pasted.<name>): run as a notebook cell would, in the kernel's globals.
KERNEL_PASTED = r'''
_qkv_probe_before = set(globals())
exec(compile(PASTED, "<pasted>", "exec"), globals())
_qkv_probe_catalogue["candidates"] += [
    [_qkv_probe_name, "pasted." + _qkv_probe_name, _qkv_probe_signature(globals()[_qkv_probe_name])]
    for _qkv_probe_name in list(globals())
    if _qkv_probe_name not in _qkv_probe_before and not _qkv_probe_name.startswith("_qkv_probe_")
    and callable(globals()[_qkv_probe_name]) and not isinstance(globals()[_qkv_probe_name], type)
    and type(globals()[_qkv_probe_name]).__name__ != "module"]
del _qkv_probe_before
'''

# The solution notebook's setup imports and answer cells, in a namespace of their own: the controls, and the other
# functions of a test that takes several. A cell that fails is named; the controls then say what is missing.
KERNEL_SOLUTIONS = r'''
_qkv_probe_solution_failures = []
for _qkv_probe_lesson, _qkv_probe_sources in SOLUTIONS.items():
    _qkv_probe_ns = {"__name__": "__main__"}
    for _qkv_probe_source in _qkv_probe_sources:
        try:
            exec(compile(_qkv_probe_source, "<solution " + _qkv_probe_lesson + ">", "exec"), _qkv_probe_ns)
        except BaseException as _qkv_probe_error:
            _qkv_probe_solution_failures.append([_qkv_probe_lesson, type(_qkv_probe_error).__name__ + ": "
                                                 + str(_qkv_probe_error)[:300]])
    for _qkv_probe_name, _qkv_probe_value in list(_qkv_probe_ns.items()):
        if callable(_qkv_probe_value) and not _qkv_probe_name.startswith("__"):
            globals()["_qkv_probe_s" + _qkv_probe_lesson[:2] + "_" + _qkv_probe_name] = _qkv_probe_value
'''


class CandidateKernel:
    """The sandboxed kernel holding the folder's candidates (and the solutions' functions, for the controls)."""

    def __init__(self, folder, call_seconds=20, memory_bytes=2 << 30, log=None):
        self.folder = os.path.realpath(folder)
        package = os.path.join(self.folder, "qkv")
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            raise ProbeError(f"{folder} holds no package named qkv (no qkv/__init__.py)")
        from qkv import fetch

        cache = str(fetch.cache_dir())
        self.walls = sandbox.Sandbox(
            library_view=(LIBRARY, package), limits=sandbox.Limits(memory_bytes=memory_bytes),
            read_only=[self.folder, cache, str(registry.course_paths().notebooks)],
            env={"QKV_CACHE": cache, NO_FRONT_END: "1", "PYTHONPATH": self.folder})
        self.kernel = student_kernel.StudentKernel(
            functools.partial(sandbox.SandboxedKernelManager, sandbox=self.walls), budget_seconds=7 * 24 * 3600,
            cell_seconds=600, call_seconds=call_seconds, output_bytes=1 << 20, log=log)
        self.catalogue = None
        self.solution_failures = []

    def start(self, pasted=None, solutions=None):
        self.kernel.start()
        self._run(KERNEL_SETUP.replace("FOLDER", repr(self.folder)), "the probe's set-up")
        if pasted:
            self._run(KERNEL_PASTED.replace("PASTED", repr(pasted)), "the pasted code")
        if solutions:
            self._run(KERNEL_SOLUTIONS.replace("SOLUTIONS", repr(solutions)), "the solutions' cells")
            self.solution_failures = self.kernel.get("_qkv_probe_solution_failures")
        self.catalogue = self.kernel.get("_qkv_probe_catalogue")
        return self.catalogue

    def _run(self, source, what):
        cell = nbformat.v4.new_code_cell(source)
        status = self.kernel.run_cell(cell, len(self.kernel.ran))  # kept in `ran`: replayed after a restart
        if status != "ok":
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.get("output_type") == "error"]
            raise ProbeError(f"{what} failed in the probe's kernel ({status}): {'; '.join(errors)[:2000]}")

    def function(self, target, name):
        """The grader's stand-in for the kernel's global `target`, as the student's `name` (module __main__)."""
        return student_kernel.RemoteFunction(self.kernel, target, name)

    def close(self):
        self.kernel.close()
        self.walls.cleanup()


def _passes(test, arguments, kernel):
    """Whether the hidden test raises nothing with these arguments (a refused answer fails, as in grading)."""
    refused = kernel.refused_replies
    with _quiet():
        try:
            test(*arguments)
        except Exception:
            return False
    return kernel.refused_replies == refused


def _solution_target(exercise, argument):
    return f"{_PREFIX}s{exercise.lesson[:2]}_{argument}"


def _controls(exercises, kernel, available):
    """exercise label -> None when the solution's own functions pass it in the kernel, else why not."""
    verdicts = {}
    for exercise in exercises:
        label = exercise.name
        missing = [a for a in exercise.arguments if _solution_target(exercise, a) not in available]
        if missing:
            verdicts[label] = f"the solution notebook defines no {', '.join(missing)} in the kernel"
            continue
        arguments = [kernel.function(_solution_target(exercise, a), a) for a in exercise.arguments]
        refused = kernel.kernel.refused_replies
        with _quiet():
            try:
                exercise.test(*arguments)
                verdicts[label] = None if kernel.kernel.refused_replies == refused else "an answer was refused"
            except Exception as error:
                verdicts[label] = f"{type(error).__name__}: {str(error)[:300]}"
    return verdicts


def run(library_folder, lessons, call_seconds=20, memory_bytes=2 << 30, pasted=None, controls=True, log=None):
    """Probe `library_folder` (holding a package `qkv`) against the hidden tests of `lessons` (slugs or numbers).

    `pasted`: code a student would paste into a notebook cell, run in the kernel's globals; each callable it defines
    is a candidate too, named pasted.<name>. Returns a Report; its `passing` is the finding."""
    lessons = [registry.lesson(lesson).slug for lesson in ([lessons] if isinstance(lessons, str) else lessons)]
    report = Report()
    started = time.monotonic()
    found = {lesson: exercises(lesson) for lesson in lessons}
    solutions = {}
    for lesson, listed in found.items():
        notebook = nbformat.read(solution_notebook(lesson), as_version=4)
        imports = ast.unparse(setup_imports(notebook))
        sources = max((exercise.solution_cells for exercise in listed), key=len, default=())
        solutions[lesson] = [imports, *sources]
    kernel = CandidateKernel(library_folder, call_seconds=call_seconds, memory_bytes=memory_bytes, log=log)
    try:
        catalogue = kernel.start(pasted=pasted, solutions=solutions if controls else None)
        report.isolation = kernel.walls.mode
        report.qkv_file = catalogue["qkv_file"]
        report.import_failures = [tuple(failure) for failure in catalogue["failures"]]
        candidates = catalogue["candidates"]  # [global name in the kernel, dotted path, signature or None]
        report.candidates = len(candidates)
        available = set()
        if controls:
            available = {name for name in _kernel_globals(kernel) if name.startswith(f"{_PREFIX}s")}
        report.seconds["start"] = round(time.monotonic() - started, 1)
        for lesson in lessons:
            lesson_started = time.monotonic()
            listed = found[lesson]
            before = _controls(listed, kernel, available) if controls else {}
            report.controls_before.update({f"{lesson} {k}": v for k, v in before.items()})
            failed = {k: v for k, v in before.items() if v is not None}
            if failed:
                raise ProbeError(f"the solution notebook's own functions fail {lesson}'s hidden tests in the probe's "
                                 f"kernel, so a candidate failing them would prove nothing: "
                                 + "; ".join(f"{k}: {v}" for k, v in failed.items())
                                 + (f" (solution cells that failed: {kernel.solution_failures})"
                                    if kernel.solution_failures else ""))
            for exercise in listed:
                for slot, argument in enumerate(exercise.arguments):
                    label = exercise.label(slot)
                    others = [a for i, a in enumerate(exercise.arguments) if i != slot]
                    if any(_solution_target(exercise, a) not in available for a in others):
                        report.not_probed.append((f"{lesson} {label}", "the solution's other functions are not in "
                                                                       "the kernel"))
                        continue
                    fitting = [c for c in candidates if fits(c[2], exercise.first_calls[slot])]
                    report.tried[f"{lesson} {label}"] = len(fitting)
                    for target, path, _ in fitting:
                        arguments = [kernel.function(target, argument) if i == slot else
                                     kernel.function(_solution_target(exercise, a), a)
                                     for i, a in enumerate(exercise.arguments)]
                        if _passes(exercise.test, arguments, kernel.kernel):
                            report.passing.append(Passing(path, lesson, label))
                            if log:
                                log.info("PASSES %s %s: %s", lesson, label, path)
            if controls:
                after = _controls(listed, kernel, available)
                report.controls_after.update({f"{lesson} {k}": v for k, v in after.items()})
                broken = [k for k, v in after.items() if v is not None and before.get(k) is None]
                if broken:
                    raise ProbeError(f"the solution's own {', '.join(broken)} ({lesson}) passed before the candidates "
                                     f"ran and fails after them: a candidate changed the kernel's state, so the "
                                     f"candidates after it were not judged fairly ({after[broken[0]]})")
            report.seconds[lesson] = round(time.monotonic() - lesson_started, 1)
    finally:
        kernel.close()
    return report


def _kernel_globals(kernel):
    kernel._run("_qkv_probe_globals = sorted(globals())", "listing the kernel's globals")
    return kernel.kernel.get("_qkv_probe_globals")


def probe(library_folder, lessons, call_seconds=20, memory_bytes=2 << 30, pasted=None, controls=True, log=None):
    """[Passing(candidate, lesson, exercise), ...]: what in `library_folder`'s qkv passes one of `lessons`' hidden
    tests as the student's answer (see `run` for the whole report)."""
    return run(library_folder, lessons, call_seconds=call_seconds, memory_bytes=memory_bytes, pasted=pasted,
               controls=controls, log=log).passing


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_edition.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder holding a package named qkv (an edition's source_lib, a kernel view's "
                                       "parent)")
    parser.add_argument("--lessons", required=True, help="comma-separated lessons whose hidden tests to run, "
                                                         "e.g. 01-lookup,02-by-hand")
    parser.add_argument("--call-seconds", type=float, default=20, help="most seconds one call of a candidate may take")
    parser.add_argument("--no-controls", action="store_true", help="skip running the solution's functions as controls")
    args = parser.parse_args(argv)
    report = run(args.folder, [s for s in args.lessons.split(",") if s], call_seconds=args.call_seconds,
                 controls=not args.no_controls)
    for module, error in report.import_failures:
        print(f"not imported: {module} ({error})", file=sys.stderr)
    for label, why in {**report.controls_before, **report.controls_after}.items():
        if why is not None:
            print(f"control failed: {label}: {why}", file=sys.stderr)
    for label, why in report.not_probed:
        print(f"not probed: {label}: {why}", file=sys.stderr)
    print(f"{report.candidates} candidates from {report.qkv_file} ({report.isolation}); tried per exercise: "
          f"{json.dumps(report.tried)}; seconds: {json.dumps(report.seconds)}", file=sys.stderr)
    for passing in report.passing:
        print(passing)
    return 1 if report.passing else 0


if __name__ == "__main__":
    sys.exit(main())
