"""Test cells run here, in the grader's process, never in the student's kernel.

A test cell (`check.softmax(softmax)`, then the hidden `hidden.softmax(softmax)`) is executed with the
grader's own imports: the names the instructor's setup cells import (check, answered_choice, np, ...) are the
grader's, whatever the notebook did to its own copies. Every other name is the student's and is fetched from the
kernel: a function as a RemoteFunction, an answer as plain data. Whatever the student's code does to modules,
builtins or sys.modules happens in another process and cannot reach these objects.

The cell's outputs are made the way a kernel would make them, so nbgrader's SaveAutoGrades scores them as
usual: an `error` output fails the cell; printed text, including what the student's functions printed, is
stdout (stderr would fail a passing cell, and a warning is not a verdict).
"""
import ast
import builtins
import contextlib
import io
import traceback
import warnings

import nbformat

from qkv.checking import Hint
from qkv.wire import ReplyRefused

from qkv_autograde.kernels.bounded_output import TEXT_LIMIT


def setup_imports(source_notebook):
    """The import statements of the instructor's source notebook outside answer and test cells, as one module."""
    statements = []
    for cell in source_notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        statements += [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return ast.Module(body=statements, type_ignores=[])


def grader_namespace(source_notebook):
    namespace = {"__name__": "__grader__"}
    exec(compile(setup_imports(source_notebook), "<setup imports>", "exec"), namespace)
    return namespace


class StudentNames(dict):
    """exec()'s locals for a test cell: a name not imported by the instructor is looked up in the student's kernel."""

    def __init__(self, kernel, grader_names):
        super().__init__()
        self.kernel, self.grader_names = kernel, grader_names

    def __missing__(self, name):
        if name in self.grader_names or hasattr(builtins, name):
            raise KeyError(name)  # falls through to the grader's globals, then builtins
        value = self.kernel.get(name)  # KeyError when the notebook never defined it
        self[name] = value
        return value


def run_test_cell(cell, kernel, namespace):
    """Run the test cell's source here and set its outputs; returns True when it passed.

    What failed, and why, is in the outputs it sets (an error output: the Hint's or exception's name and message,
    after what the check and the student's functions printed); anomalies go to `kernel.events`."""
    names = StudentNames(kernel, namespace)
    printed = io.StringIO()
    failure = None
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    refused_before = getattr(kernel, "refused_replies", 0)
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exec(compile(cell.source, f"<test cell {cell.metadata.get('nbgrader', {}).get('grade_id')}>", "exec"),
                 namespace, names)
        except Hint as hint:
            failure = ("Hint", str(hint))
        except NameError as error:
            missing = getattr(error, "name", None) or str(error)
            failure = ("NameError", f"`{missing}` is not defined in your notebook: did the cell that defines it "
                                    f"run without an error?")
        except (TimeoutError, AssertionError) as error:
            failure = (type(error).__name__, str(error))
        except ReplyRefused as error:  # named by the kernel when it refused the answer
            failure = (type(error).__name__, str(error))
        except Exception as error:  # the student's value broke a check: still a failed test, and named
            failure = (type(error).__name__, str(error))
            detail = "".join(traceback.format_exception_only(type(error), error)).strip()
            kernel.events.append(("test error", f"{grade_id}: {detail}"))
    if getattr(kernel, "refused_replies", 0) > refused_before:  # however the check took the refusal, no points
        failure = ("ReplyRefused", "the grader refused an answer of your kernel that was not plain data of "
                                   "bounded size (see the anomaly report); this test gets no points")
    functions = [f for f in names.values() if hasattr(f, "printed")]
    text = printed.getvalue() + "".join(f.printed for f in functions)
    if len(text) > TEXT_LIMIT or any(getattr(f, "printed_truncated", False) for f in functions):
        text = text[:TEXT_LIMIT] + f"\n[output truncated by the grader after {TEXT_LIMIT} characters]\n"
        event = ("output truncated", f"{grade_id}: printed more than {TEXT_LIMIT} characters")
        if event not in kernel.events:
            kernel.events.append(event)
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []
    if failure:
        name, message = failure
        outputs.append(nbformat.v4.new_output("error", ename=name, evalue=message,
                                              traceback=[f"\x1b[0;31m{name}\x1b[0m: {message}"]))
    cell.outputs = outputs
    return failure is None
