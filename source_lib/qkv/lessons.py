"""The course's one list of lessons, and the one place that knows where the course's folders are.

Adding a lesson: its concept module, `checks/lessonNN.py`, `autograde/qkv_grading/lessonNN.py` (which declares
the lesson's `GRADED_REFERENCES`), its notebook in `solutions/`, and one row in LESSONS. The grader's warm-up,
the kernel's view of qkv, the tripwire (qkv.checking.guard), the mutation engine and the generic tests read this
list, never their own.
Imports nothing of qkv: everything may use it.
"""
import os
import pathlib
from typing import NamedTuple

HIDDEN_TESTS_PACKAGE = "qkv_grading"  # autograde/qkv_grading: the hidden tests, instructor side only


class Lesson(NamedTuple):
    number: str       # "01"
    slug: str         # "01-lookup": the folder in solutions/ and notebooks/, nbgrader's assignment name
    concept: str      # the qkv module of the lesson's reference implementation ("lookup" is qkv.lookup)
    uses_model: bool  # its checks, and its notebook, run SmolLM2

    @property
    def checks(self):
        return f"qkv.checks.lesson{self.number}"

    @property
    def hidden_tests(self):
        return f"{HIDDEN_TESTS_PACKAGE}.lesson{self.number}"


LESSONS = (
    Lesson("01", "01-lookup", "lookup", uses_model=False),
    Lesson("02", "02-by-hand", "attention", uses_model=False),
    Lesson("03", "03-scaling", "scaling", uses_model=False),
    Lesson("04", "04-masking", "masking", uses_model=False),
    Lesson("05", "05-heads", "heads", uses_model=True),
    Lesson("06", "06-sinks", "sinks", uses_model=True),
    Lesson("07", "07-cost", "cost", uses_model=True),
)


def lesson(name):
    """The row of a lesson named by its slug ('01-lookup') or its number ('01')."""
    number = str(name).split("-")[0]
    for row in LESSONS:
        if row.number == number:
            return row
    raise ValueError(f"no lesson {name!r} in qkv.lessons.LESSONS: expected one of {[r.slug for r in LESSONS]}")


# ---------------------------------------------------------------- the course's folders

LIBRARY = pathlib.Path(__file__).resolve().parent
CHECKOUT = LIBRARY.parents[1]  # source_lib/qkv -> the course checkout this library was installed from


class CoursePaths(NamedTuple):
    root: pathlib.Path
    solutions: pathlib.Path     # nbgrader source notebooks
    notebooks: pathlib.Path     # the student release
    autograde: pathlib.Path     # nbgrader's course folder
    hidden_tests: pathlib.Path  # autograde/qkv_grading


def course_paths(root=None, autograde=None):
    """The course's folders under `root` (default: the checkout this library was installed from); `autograde`
    names another autograde/ folder (the instructor's $QKV_AUTOGRADE)."""
    root = pathlib.Path(root) if root is not None else CHECKOUT
    autograde = pathlib.Path(autograde) if autograde is not None else root / "autograde"
    return CoursePaths(root, root / "solutions", root / "notebooks", autograde, autograde / HIDDEN_TESTS_PACKAGE)


def enclosing_courses(start):
    """course_paths of `start` and of every folder above it, nearest first (a notebook's course, wherever it runs)."""
    folder = os.path.abspath(start)
    while True:
        yield course_paths(folder)
        if os.path.dirname(folder) == folder:
            return
        folder = os.path.dirname(folder)
