"""The student build of `qkv` (issue 33): `build_student_library(dest, released, handouts)` writes dest/qkv, the same
package as source_lib/qkv except that it holds no answer to an exercise that is still open.

- Every function withheld for a lesson that is open (released, not a handout) or not released yet keeps its name,
  signature and the first line of its docstring; its body only asks qkv.checking.replay.answer, which replays what
  the full library returned on the inputs the released lessons' visible checks give it (their fixtures, recorded
  here by qkv_edition.fixtures and written to qkv/fixtures/lessonNN.json.gz) and otherwise raises
  NotInThisEdition, naming the lesson whose exercise it is (or that it is not released yet).
- The withheld functions of a lesson are its hidden tests' GRADED_REFERENCES plus the twins the probe finds (TWINS,
  and any more through `withheld`), and with them every private function only withheld functions use (the
  reference's own code): qkv_autograde.kernels.holdings declares them, for this edition and for the grader's kernel
  view alike. A function withheld by any open or unreleased lesson is withheld, even when a handout lists
  it too: lesson 01 lists masked_softmax (a twin of its softmax), which is lesson 04's exercise.
- qkv/checks/lessonNN.py (and lessonNN_*.py) of lessons neither released nor handouts are left out.
- No bytecode is copied; the result is checked to import, with every released lesson's checks, in a fresh Python.

`python -m qkv_edition.library --dest D --lessons 01-lookup,02-by-hand --handouts 01-lookup` does the same.
"""
import argparse
import ast
import collections
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

import qkv.lessons
from qkv.checking import replay
from qkv_autograde.kernels.holdings import (LIBRARY, TWINS, Withheld, graded_references, rows,  # noqa: F401
                                            withheld_functions, withholds)  # the one declaration, read here too
from qkv_autograde.kernels.kernel_view import replace_functions
from qkv_edition import fixtures as fixtures_module


def build_student_library(dest, released, handouts, withheld=None, record=fixtures_module.record):
    """Write dest/qkv, the student build of qkv for the lessons `released` with the `handouts` (slugs or numbers),
    and return its folder. `withheld`: {lesson: further dotted names withheld for it} (the probe's twins)."""
    released, handouts = rows(released), rows(handouts)
    target = pathlib.Path(dest) / "qkv"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(LIBRARY, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "fixtures"))
    kept = {row.number for row in (*released, *handouts)}
    for path in (target / "checks").glob("lesson*.py"):
        if path.stem[len("lesson"):len("lesson") + 2] not in kept:
            path.unlink()
    functions = withheld_functions(released, handouts, withheld)
    answered = {}  # dotted name -> lessons whose fixtures hold its calls
    for row in released:
        recorded = record(row.slug, withheld=tuple(functions))
        if recorded.unkeyable:
            raise ValueError(f"lesson {row.number}'s visible checks give withheld functions what cannot be keyed: "
                             f"{sorted(set(recorded.unkeyable))}")
        if recorded:
            replay.write_fixtures(row.number, dict(recorded), target / "fixtures")
            for entry in recorded.values():
                answered.setdefault(entry["name"], []).append(row.number)
    by_module = collections.defaultdict(dict)
    for dotted, owner in functions.items():
        module, _, name = dotted.rpartition(".")
        by_module[module][name] = (dotted, owner, tuple(dict.fromkeys(answered.get(dotted, ()))))
    for module, stubs in by_module.items():
        path = target / pathlib.Path(importlib.import_module(module).__file__).relative_to(LIBRARY)
        if not path.exists():
            continue  # the checks of a lesson this edition leaves out, with their twins
        for helper, user in private_helpers(path.read_text(encoding="utf-8"), set(stubs)).items():
            owner = stubs[user][1]
            stubs[helper] = (f"{module}.{helper}", owner._replace(exercise=False), ())
        text, done = replace_functions(path.read_text(encoding="utf-8"), set(stubs),
                                       lambda node, stubs=stubs: _stub_body(node, *stubs[node.name]))
        if set(stubs) - done:
            raise ValueError(f"{sorted(set(stubs) - done)} are withheld but are not top-level functions of {module}")
        path.write_text(text, encoding="utf-8")
    check_imports(target, released)
    return target


def private_helpers(source, withheld):
    """{private function: a withheld function that uses it} for the module `source`'s private top-level functions
    that only its `withheld` functions use, directly or through each other: they go with them (lesson 03's
    _jacobian_of_weights is half of softmax_jacobian, lesson 07's _online_softmax_update the heart of chunked
    attention). Another module never uses them (test_library_structure: no module uses another's private names)."""
    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    private = {name for name in functions if name.startswith("_") and not name.startswith("__")} - set(withheld)

    def used_by(node):
        return {name.id for name in ast.walk(node) if isinstance(name, ast.Name)} & private

    kept = set().union(*(used_by(node) for node in tree.body
                         if not (isinstance(node, ast.FunctionDef) and node.name in private | set(withheld))))
    while True:
        more = set().union(kept, *(used_by(functions[name]) for name in kept))
        if more == kept:
            break
        kept = more
    users = {}
    for name in sorted(withheld & set(functions)):
        reached, frontier = set(), used_by(functions[name])
        while frontier - reached:
            reached |= frontier
            frontier = set().union(*(used_by(functions[helper]) for helper in reached))
        for helper in sorted(reached - kept):
            users.setdefault(helper, name)
    return users


def _stub_body(node, dotted, owner, fixtures):
    """The statements of a withheld function in the edition: the first line of its docstring, then `answer`."""
    arguments = node.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    names += [arguments.vararg.arg] if arguments.vararg else []
    names += [a.arg for a in arguments.kwonlyargs] + ([arguments.kwarg.arg] if arguments.kwarg else [])
    if "_answer" in names:
        raise ValueError(f"{dotted} has a parameter named _answer, the name its stub gives qkv.checking.replay.answer")
    bound = "{" + ", ".join(f"{name!r}: {name}" for name in names) + "}"
    body = []
    docstring = ast.get_docstring(node)
    if docstring:
        body.append(ast.Expr(ast.Constant(docstring.strip().splitlines()[0])))
    body += ast.parse("from qkv.checking.replay import answer as _answer\n"
                      f"return _answer({dotted!r}, {bound}, fixtures={fixtures!r}, lesson={owner.lesson!r}, "
                      f"exercise={owner.exercise!r}, released={owner.released!r})").body
    return body


def check_imports(target, released):
    """Import the built package, and every released lesson's checks, in a fresh Python that sees no other qkv."""
    modules = ["qkv", "qkv.checking", *(row.checks for row in released)]
    script = ("import sys\n"
              "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
              f"sys.path.insert(0, {str(target.parent)!r})\n"
              "import importlib\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n"
              f"assert sys.modules['qkv'].__file__.startswith({str(target)!r}), sys.modules['qkv'].__file__\n")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"  # the edition ships no bytecode
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                          cwd=target.parent)
    if done.returncode:
        raise RuntimeError(f"the student build of qkv in {target} does not import:\n{done.stderr[-3000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_edition.library", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="folder that receives qkv/")
    parser.add_argument("--lessons", default=",".join(row.slug for row in qkv.lessons.LESSONS),
                        help="released lessons, slugs or numbers, comma-separated (default: all)")
    parser.add_argument("--handouts", default="", help="lessons whose references ship as they are (default: none)")
    options = parser.parse_args(argv)
    started = time.perf_counter()
    target = build_student_library(options.dest, options.lessons, options.handouts)
    sizes = {path.name: path.stat().st_size for path in sorted((target / "fixtures").glob("*.json.gz"))}
    print(f"{target}: {len(withheld_functions(options.lessons, options.handouts))} functions withheld; fixtures "
          + (", ".join(f"{name} {size / 1024:.0f} KiB" for name, size in sizes.items()) or "none")
          + f"; built in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
