"""Helpers for lesson tests: build a 'student' from a source notebook's solution cells, swap in mutants."""
import pathlib
import re
import socket
import textwrap

import nbformat
import pytest

from qkv.checking import Hint

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
LESSONS = sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and not p.name.startswith("."))


def notebook_path(lesson, top=SOLUTIONS):
    return next((top / lesson).glob("*.ipynb"))


def read(lesson, top=SOLUTIONS):
    return nbformat.read(notebook_path(lesson, top), as_version=4)


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def is_solution(cell):
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution", False)


def _runnable(source):
    # IPython magics and shell lines mean nothing to exec()
    return "\n".join(line for line in source.splitlines() if not re.match(r"\s*[%!]", line))


def student(lesson, replace=None):
    """Namespace of a student who solved `lesson` perfectly except for the cells in `replace`.

    Runs the notebook's first code cell (imports) and its solution cells in order; `replace` maps a
    solution cell's grade_id to the student code to use instead.
    """
    replace = dict(replace or {})
    namespace = {"__name__": "__main__"}
    cells = [c for c in read(lesson).cells if c.cell_type == "code"]
    exec(_runnable(cells[0].source), namespace)
    for cell in cells[1:]:
        if is_solution(cell):
            source = replace.pop(grade_id(cell), cell.source)
            try:
                exec(compile(textwrap.dedent(source), f"<{lesson}:{grade_id(cell)}>", "exec"), namespace)
            except Exception:  # like a notebook, a failing cell does not stop the cells after it
                pass
    assert not replace, f"no solution cells named {sorted(replace)} in {lesson}"
    return namespace


def assert_rejected(check, fn, *args, match=None):
    """The hidden/visible check must fail on this mutant, with a Hint (not a crash of the grader)."""
    with pytest.raises(Hint, match=match) as caught:
        check(fn, *args)
    return str(caught.value)


def mutant(lesson, grade, source, name=None):
    """The function `name` (default: grade) as defined by `source` in an otherwise perfect notebook."""
    return student(lesson, {grade: source})[name or grade]


def solved_release(lesson, solved_ids=None):
    """The student release of `lesson` with the given solution cells (default: all) filled in from the
    source notebook: what a student hands in, with no hidden tests in it."""
    sources = {grade_id(c): c.source for c in read(lesson).cells if c.metadata.get("nbgrader", {}).get("solution")}
    solved_ids = set(sources) if solved_ids is None else set(solved_ids)
    nb = read(lesson, RELEASE)
    for cell in nb.cells:
        if grade_id(cell) in solved_ids:
            cell.source = sources[grade_id(cell)]
    return nb


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
