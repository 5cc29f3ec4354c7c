"""The `qkv` a student's kernel imports while a lesson is graded: the library minus what would answer the lesson.

A copy of the package in which (1) every function the student edition of the lesson's week withholds (the one
declaration, holdings: the hidden tests' `GRADED_REFERENCES` of this lesson and every later one, their twins and
the private functions only they use) raises `WithheldDuringGrading` when called, so no thread, hook or
import trick in the student's kernel can compute the right answer with it (later lessons build on earlier ones:
`np.exp(qkv.sinks.log_softmax(x))` is lesson 01's softmax), and (2) the check modules (qkv.checks.*), which hold
right answers and mistake catalogues, are empty shells: the checks run in the grader, not in the kernel.
Earlier lessons' functions are untouched, so the tools a lesson hands out keep working. What is left is tried as
the answer to every hidden test by qkv_edition.probe (tests/test_probe.py). No bytecode caches
are copied (a .pyc of the real module would carry the withheld code); the view is compiled from its own sources.
"""
import ast
import compileall
import functools
import importlib
import os
import shutil
import tempfile

from qkv import lessons

from qkv_autograde.kernels import holdings
from qkv_autograde.kernels.holdings import LIBRARY, graded_references  # noqa: F401 - read here by the tests and the edition

_CHECKS_SHELL = '''"""The checks run in the grader while this lesson is graded; in this kernel they do nothing."""


def __getattr__(name):
    raise AttributeError(f"qkv.checks are not available inside the grading sandbox (asked for {name!r})")
'''

_WITHHELD_MODULE = '''"""Raised by a reference function that the lesson being graded asks students to write."""


class WithheldDuringGrading(RuntimeError):
    pass
'''


def withheld_while_graded(lesson):
    """{dotted name: the lesson that owns it} for what the kernel must not compute while `lesson` is graded: what the
    student edition of the lesson's own week withholds (holdings: its graded references, their twins and private
    helpers, and every later lesson's), outside qkv.checks, which the view empties whole."""
    released, handouts = holdings.week_of(lesson)
    withheld = holdings.withheld_functions(released, handouts, running=[lesson])
    return {dotted: lessons.lesson(owner.lesson) for dotted, owner in withheld.items()
            if not dotted.startswith("qkv.checks.")}


def build(lesson, destination=None):
    """Write the kernel's view of qkv for `lesson` and return its folder (a package named qkv)."""
    owners = withheld_while_graded(lesson)
    withheld = {}
    for dotted in owners:
        module, _, function = dotted.rpartition(".")
        withheld.setdefault(module, set()).add(function)
    destination = destination or os.path.join(tempfile.mkdtemp(prefix=f"qkv-view-{lesson}-"), "qkv")
    shutil.copytree(LIBRARY, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    checks = os.path.join(destination, "checks")
    for name in os.listdir(checks):
        if name.endswith(".py") and name != "__init__.py":
            with open(os.path.join(checks, name), "w") as f:
                f.write(_CHECKS_SHELL)
    with open(os.path.join(destination, "_withheld.py"), "w") as f:
        f.write(_WITHHELD_MODULE)
    for module, functions in withheld.items():
        # the module's own file, a package's __init__.py included, at the same place in the view
        path = os.path.join(destination, os.path.relpath(importlib.import_module(module).__file__, LIBRARY))
        with open(path) as f:
            text, done = replace_functions(f.read(), functions, functools.partial(_withhold, module, owners, lesson))
        missing = functions - done
        if missing:
            raise ValueError(f"holdings of {sorted({owners[f'{module}.{name}'].slug for name in missing})} "
                             f"name {sorted(missing)} in {module}, which has no such top-level function")
        with open(path, "w") as f:
            f.write(text)
    # compiled once here, from the withheld sources: every kernel would otherwise compile them again (read-only)
    compileall.compile_dir(destination, quiet=1)
    return destination


def _withhold(module, owners, lesson, node):
    owner = owners[f"{module}.{node.name}"]
    if owner == lessons.lesson(lesson):
        message = (f"{module}.{node.name} is withheld while this lesson is graded: the exercise is to compute it "
                   f"yourself")
    else:
        message = (f"{module}.{node.name} is withheld while this lesson is graded: it is an exercise of lesson "
                   f"{owner.slug}, which comes later")
    return ast.parse("from qkv._withheld import WithheldDuringGrading\n"
                     f"raise WithheldDuringGrading({message!r})").body


def replace_functions(source, functions, body_of):
    """`source`, a module's text, with the body of each top-level function named in `functions` replaced by
    `body_of(its def node)` (a list of statements), and the names replaced.

    The rest of the module is kept as written. A replaced function keeps its name and signature, loses its
    decorators, and takes with it the comments just above it and at the end of its body (they may say how it
    computes its answer). Used by this view and by the student edition (qkv_edition.library).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    done = set()
    for node in reversed(tree.body):  # from the bottom, so the line numbers above stay right
        if not (isinstance(node, ast.FunctionDef) and node.name in functions):
            continue
        start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
        while start > 1 and lines[start - 2].lstrip().startswith("#"):
            start -= 1
        end = node.end_lineno
        while end < len(lines) and lines[end][:1].isspace() and lines[end].lstrip().startswith("#"):
            end += 1
        node.body, node.decorator_list = body_of(node), []
        lines[start - 1:end] = [ast.unparse(ast.fix_missing_locations(node)) + "\n"]
        done.add(node.name)
    return "".join(lines), done
