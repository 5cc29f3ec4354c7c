"""The probe's exercises (qkv_edition.probe): the hidden tests a solution notebook's test cells call with the student's
functions, how each first calls them, and whether a candidate's signature binds that call.

An exercise is a hidden test that a solution notebook's test cell calls with the student's function
(`hidden.softmax(softmax)`; the self-checks' `hidden.answer(...)` are not exercises). Its first call to the student's
function is recorded here with a stand-in that stops the test there; a candidate fits when its signature binds that
call (the number of positional arguments and the keywords).
"""
import ast
import contextlib
import dataclasses
import importlib
import inspect
import io
import warnings

import nbformat

from qkv import lessons as registry


@dataclasses.dataclass(frozen=True)
class Exercise:
    """A hidden test that a solution notebook's test cell calls with the student's functions."""
    lesson: str                # slug
    name: str                  # qkv_grading.lessonNN.<name>
    arguments: tuple           # the student's names the test cell passes, in order ("softmax",)
    first_calls: tuple         # per argument: (positional count, keyword names) of the test's first call of it
    solution_cells: tuple      # sources of the solution cells that define `arguments`, and those before them
    # per argument: (args, kwargs) of the test's first call of it, or None (the inputs are drawn from a seed per test,
    # so a run of the test makes that very call again): what the probe's glue is judged on
    first_arguments: tuple = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def test(self):
        return getattr(importlib.import_module(registry.lesson(self.lesson).hidden_tests), self.name)

    def label(self, slot):
        return self.name if len(self.arguments) == 1 else f"{self.name} as {self.arguments[slot]}"




class _FirstCall(BaseException):
    """Raised by the stand-in at the hidden test's first call of the student's function: that call is recorded."""


class _Recorder:
    """Stands in for the student's function just long enough to see how the hidden test calls it."""

    runs_in_another_process = True  # as the grader's RemoteFunction: no tripwire or tamper check for it

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name
        self.__module__ = "__main__"
        self.call = self.arguments = None

    def __call__(self, *args, **kwargs):
        if self.call is None:
            self.call, self.arguments = (len(args), tuple(sorted(kwargs))), (args, kwargs)
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
        with quiet():
            try:
                getattr(module, name)(*recorders)
            except BaseException as error:
                if isinstance(error, KeyboardInterrupt):
                    raise
        first_calls = []
        for recorder, argument in zip(recorders, arguments):
            # a test taking several functions stops at the first one it calls: the others' calls from their `def`
            first_calls.append(recorder.call or _defined_signature_call(sources, argument))
        result.append(Exercise(slug, name, arguments, tuple(first_calls), sources,
                               tuple(recorder.arguments for recorder in recorders)))
    return result


@contextlib.contextmanager
def quiet():
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

