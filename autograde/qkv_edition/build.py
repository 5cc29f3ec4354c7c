"""`make student-edition DEST=... [LESSONS=...] [HANDOUTS=...]`: the repository an instructor publishes for a graded
class (issue 33). Its own `git init` and one commit, no history of this repository (or, when DEST is an earlier
edition, one commit more on top of its history: qkv_edition.history); it holds the released lessons' notebooks, the
student build of `qkv` (qkv_edition.library.build_student_library), and what Binder and `make lab` need:
environment.yml without the test-only lines, postBuild, start (self-study answers off), jupyter/student,
jupyter/lab-overrides.json, a Makefile and a README for students (templates/). Nothing else: no solutions/,
autograde/, tests/, bench/, hidden tests, answer keys, no bytecode.

Released lessons are LESSONS (default: all); HANDOUTS (default: none) are lessons whose reference code ships as-is.
A released lesson that is not a handout is open: its graded functions are withheld. The command refuses, naming
the lesson to add to HANDOUTS, when a released lesson needs something another lesson withholds. What a lesson
needs is read from the source (ast), never from a hand list: every qkv name its released notebook imports or uses
and, transitively, everything those refer to in the library (function bodies, defaults, decorators, lazy imports,
what a module runs when imported). The withheld functions of a lesson are its hidden tests' GRADED_REFERENCES
(autograde/qkv_grading/lessonNN.py, as the grader's kernel view reads them); a withheld function becomes a stub
that calls nothing, so the walk stops there.

    python -m qkv_edition.build --dest DEST [--lessons 01-lookup,02-by-hand] [--handouts 01-lookup]
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from qkv_autograde.kernels.kernel_view import (graded_references)  # noqa: F401 - first: makes nbformat import faster; tests read it here

import nbformat

import qkv.lessons
from qkv_edition import history, variants
from qkv_edition.needs import (Conflict, Library, Refused, conflicts, notebook_of, notebook_uses,  # noqa: F401
                               refusal, removed_checks)  # named here too: the tests and the Makefile read them here

STARTED = time.monotonic()  # the command's time (python -m qkv_edition.build)
ROOT = pathlib.Path(__file__).resolve().parents[2]  # autograde/qkv_edition/build.py -> the course checkout
TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
# what the edition takes from the course as it is (beside the notebooks and the student build of qkv)
COPIED = ("jupyter/student", "jupyter/lab-overrides.json", "jupyter/ipython_kernel_config.py",
          "source_lib/pyproject.toml")


# ================================================================ the edition

def parse_lessons(text, what):
    """Lessons named by slug ('01-lookup,02-by-hand', commas or spaces), in the course's order."""
    slugs = [s for s in re.split(r"[,\s]+", text or "") if s]
    known = {row.slug: row for row in qkv.lessons.LESSONS}
    unknown = [s for s in slugs if s not in known]
    if unknown:
        raise Refused(f"{what}: no lesson {', '.join(unknown)} in qkv.lessons.LESSONS; the lessons are "
                      + ",".join(known))
    return tuple(row for row in qkv.lessons.LESSONS if row.slug in slugs)


def environment_for_students(text):
    """environment.yml without its test-only part (the `#test:` lines) and without the course's comments, which
    speak of the instructor's tools (the header is the edition's own)."""
    lines = text.splitlines()
    kept = []
    for index, line in enumerate(lines):
        if line.startswith("#test:"):
            continue
        if line.lstrip().startswith("#") and index + 1 < len(lines) and lines[index + 1].startswith("#test:"):
            continue  # the comment that says what the test-only line after it is for
        kept.append(line)
    body = kept[next(i for i, line in enumerate(kept) if not line.startswith("#")):]
    # the course's comments say why instructors need a package (formgrader, feedback pages): not this edition's
    body = [line for line in body if not line.lstrip().startswith("#")]
    return ("# The packages and versions of this edition of qkv. Binder builds from this file; `make install`\n"
            "# (used by `make lab` and `make update`) installs its pip section.\n"
            + "\n".join(body).rstrip("\n") + "\n")


def fill(template, **values):
    text = (TEMPLATES / template).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    leftover = re.findall(r"\{\{\w+\}\}", text)
    assert not leftover, f"templates/{template}: nothing fills {leftover}"
    return text


def notebook_title(path):
    """The first heading of a notebook ('Lesson 01 · Attention is a soft lookup')."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+)$", cell.source, re.M)
            if match:
                return match.group(1).strip()
    return path.stem


def write_edition(stage, root, released, handouts, build_student_library):
    notebooks = root / "notebooks"
    for lesson in released:
        for path in sorted((notebooks / lesson.slug).rglob("*")):
            relative = path.relative_to(notebooks)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts) or path.is_dir():
                continue
            (stage / "notebooks" / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, stage / "notebooks" / relative)
    for item in COPIED:
        source, target = root / item, stage / item
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(".*", "__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    build_student_library(stage / "source_lib", tuple(row.slug for row in released),
                          tuple(row.slug for row in handouts))
    variants.carry(stage, root)  # the term's salt into the edition, the pools' lock into the course (issue 43)

    first = released[0]
    uses_model = any(row.uses_model for row in released)
    (stage / "environment.yml").write_text(environment_for_students((root / "environment.yml").read_text()))
    model = fill("postBuild-model") if uses_model else ""
    for script, text in (("postBuild", fill("postBuild", model=model.rstrip("\n")).rstrip("\n") + "\n"),
                         ("start", fill("start"))):
        (stage / script).write_text(text)
        (stage / script).chmod(0o755)
    (stage / "Makefile").write_text(fill("Makefile", first_lesson=first.slug, uses_model="yes" if uses_model else ""))
    (stage / ".gitignore").write_text(fill("gitignore"))
    notebook = {row: f"notebooks/{row.slug}/{notebook_of(notebooks, row).name}" for row in released}
    rows = "\n".join(f"| [{notebook_title(root / notebook[row])}]({notebook[row]}) | `notebooks/{row.slug}/` |"
                     for row in released)
    (stage / "README.md").write_text(fill("README.md", first_notebook=notebook[first], lessons=rows,
                                          model_note=fill("README-model.md") if uses_model else ""))
    # the edition ships no bytecode of anything (of the full library least of all)
    for path in sorted(stage.rglob("*"), reverse=True):
        if path.name == "__pycache__" and path.is_dir():
            shutil.rmtree(path)
        elif path.suffix in (".pyc", ".pyo") and path.is_file():
            path.unlink()


def commit_message(released, handouts, root):
    source = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    revision = source.stdout.strip() if source.returncode == 0 else ""
    built_from = f" (built from qkv {revision})" if revision else ""
    return (f"{history.MARK}: lessons {', '.join(row.slug for row in released)}{built_from}\n\n"
            f"Handouts (reference code shipped as-is): {', '.join(row.slug for row in handouts) or 'none'}.\n")


def commit(stage, released, handouts, root):
    def git(*args, **kwargs):
        return subprocess.run(["git", *args], cwd=stage, check=True, capture_output=True, text=True, **kwargs)

    git("init", "--quiet", "--initial-branch=main", "--template=")
    git("add", "--all")
    message = commit_message(released, handouts, root)
    identity = []
    for key, default in (("user.name", "qkv student edition"), ("user.email", "qkv-student-edition@localhost")):
        if subprocess.run(["git", "config", key], cwd=stage, capture_output=True).returncode != 0:
            identity += ["-c", f"{key}={default}"]
    subprocess.run(["git", *identity, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", message],
                   cwd=stage, check=True, capture_output=True, text=True)


def size_of(folder):
    files = [p for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts]
    history = [p for p in (folder / ".git").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in history)


def build(dest, lessons=None, handouts=None, root=ROOT, build_student_library=None):
    """Write the student edition at `dest`. `lessons`/`handouts`: comma- or space-separated slugs (lessons default:
    all; handouts: none). Raises Refused with the reason. Returns (files, bytes, bytes of its .git)."""
    root = pathlib.Path(root).resolve()
    dest = pathlib.Path(dest).resolve()
    released = parse_lessons(lessons, "LESSONS") if lessons else tuple(qkv.lessons.LESSONS)
    handed_out = parse_lessons(handouts, "HANDOUTS") if handouts else ()
    if not released:
        raise Refused("LESSONS names no lesson")
    on_top = dest.exists() and (not dest.is_dir() or any(dest.iterdir()))  # an earlier edition: this week on top
    if on_top and (reason := history.why_not_on_top(dest, released)):
        raise Refused(reason)
    library_source = root / "source_lib" / "qkv"
    if pathlib.Path(qkv.lessons.LIBRARY) != library_source:
        raise Refused(f"this Python imports qkv from {qkv.lessons.LIBRARY}, not from {library_source}: run "
                      f"`make student-edition` in {root} (it puts that checkout's library first)")
    paths = qkv.lessons.course_paths(root)
    library = Library(library_source)

    def missing(handouts):
        return conflicts(released, handouts, library, paths.notebooks)

    found = missing(handed_out)
    if found:
        raise Refused(refusal(found, released, handed_out, missing))
    if build_student_library is None:
        from qkv_edition.library import build_student_library

    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        write_edition(stage, root, released, handed_out, build_student_library)
        if on_top:
            history.add_week(stage, dest, commit_message(released, handed_out, root))
            shutil.rmtree(stage)
        else:
            commit(stage, released, handed_out, root)
            if dest.exists():
                dest.rmdir()  # empty: checked above
            os.rename(stage, dest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return size_of(dest)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_edition.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="a new or empty folder")
    parser.add_argument("--lessons", default="", help="released lessons, by slug (default: all)")
    parser.add_argument("--handouts", default="", help="lessons whose reference code ships as-is (default: none)")
    options = parser.parse_args(argv)
    try:
        files, size, git_bytes = build(options.dest, options.lessons or None, options.handouts or None)
    except Refused as refused:
        print(f"make student-edition: refused.\n{refused}", file=sys.stderr)
        return 2
    released = parse_lessons(options.lessons, "LESSONS") if options.lessons else qkv.lessons.LESSONS
    handouts = parse_lessons(options.handouts, "HANDOUTS") if options.handouts else ()
    print(f"student edition at {pathlib.Path(options.dest).resolve()}\n"
          f"  lessons {','.join(row.slug for row in released)}; handouts "
          f"{','.join(row.slug for row in handouts) or 'none'}\n"
          f"  {files} files, {size / 1e6:.2f} MB, and {git_bytes / 1e6:.2f} MB of git "
          f"({(commits := history.commits_in(options.dest))} commit{'s' if commits != 1 else ''}); "
          f"the command took {time.monotonic() - STARTED:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
