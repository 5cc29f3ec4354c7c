"""The nbgrader pipeline, end to end, for every lesson in solutions/.

- the source notebooks pass all their tests (`nbgrader validate`);
- the student release fails every graded test (`nbgrader validate --invert`);
- notebooks/ is exactly what `nbgrader generate_assignment` makes from solutions/ and leaks nothing;
- a fake class (perfect, blank and half-done submissions) autogrades and exports to the exact scores.
"""
import csv
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from lessons import LESSONS, RELEASE, ROOT, SOLUTIONS, grade_id, notebook_path, read, solved_release

AUTOGRADE = ROOT / "autograde"
BIN = pathlib.Path(sys.executable).parent

# What the half-done student solved in each lesson, and the score that must give. The default is the
# lesson's first exercise only (its own test cell), which depends on nothing else.
HALF_DONE = {
    "01-lookup": (["hard_lookup", "softmax", "answer_lookup_on_miss"], 2 + 3 + 1),
}


def nbgrader(*args, cwd=AUTOGRADE, check=True):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=1800)
    if check and result.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def course_args(root):
    """Point nbgrader at a scratch course whose source step is the repository's solutions/."""
    return [f"--CourseDirectory.root={root}", f"--CourseDirectory.source_directory={SOLUTIONS}",
            "--CourseDirectory.release_directory=release", f"--CourseDirectory.db_url=sqlite:///{root}/gradebook.db"]


def grade_cells(nb):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def points(nb, predicate=lambda cell: True):
    return sum(c.metadata["nbgrader"]["points"] for c in grade_cells(nb)
               if c.cell_type == "code" and predicate(c))


# ---------------------------------------------------------------- static checks, fast

@pytest.mark.parametrize("top", [SOLUTIONS, RELEASE], ids=["solutions", "notebooks"])
def test_notebooks_are_stored_without_outputs(top):
    for path in top.rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
        assert not dirty, f"{path.relative_to(ROOT)} has outputs in cells {dirty}: clear them before committing"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_graded_exercise_has_a_test_cell_with_points(lesson):
    nb = read(lesson)
    ids = [grade_id(c) for c in nb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids)), f"duplicate grade ids in {lesson}"
    tests = {grade_id(c) for c in grade_cells(nb) if c.cell_type == "code"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            assert f"test_{meta['grade_id']}" in tests, f"{lesson}: solution {meta['grade_id']} has no test cell"
            assert "### BEGIN SOLUTION" in cell.source
        if meta.get("grade") and cell.cell_type == "code":
            assert meta["points"] > 0 and meta.get("locked"), f"{lesson}: {meta['grade_id']} needs points, locked"
            assert "### BEGIN HIDDEN TESTS" in cell.source, f"{lesson}: {meta['grade_id']} has no hidden tests"
    written = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
    assert len(written) <= 1, f"{lesson}: at most one manually graded written answer"


def test_release_is_in_sync_with_solutions_and_leaks_nothing(tmp_path):
    nbgrader("db", "assignment", "list", *course_args(tmp_path), check=False)
    for lesson in LESSONS:
        nbgrader("generate_assignment", lesson, "--force", *course_args(tmp_path))
    fresh = tmp_path / "release"
    assert sorted(p.name for p in RELEASE.iterdir() if p.is_dir()) == LESSONS, "notebooks/ and solutions/ differ"
    for lesson in LESSONS:
        made = json.loads(notebook_path(lesson, fresh).read_text())
        stored = json.loads(notebook_path(lesson, RELEASE).read_text())
        assert made == stored, f"notebooks/{lesson} is not what `make release` makes from solutions/: run make release"
        text = notebook_path(lesson, RELEASE).read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "qkv_grading"):
            assert marker not in text, f"notebooks/{lesson} leaks {marker!r}"
        for cell in read(lesson).cells:
            for secret in _secret_lines(cell.source):
                assert secret not in text, f"notebooks/{lesson} leaks a solution line: {secret!r}"


def _secret_lines(source):
    """Substantial lines between solution or hidden-test markers."""
    lines, inside = [], False
    for line in source.splitlines():
        if re.search(r"### BEGIN (SOLUTION|HIDDEN TESTS)", line):
            inside = True
        elif re.search(r"### END (SOLUTION|HIDDEN TESTS)", line):
            inside = False
        elif inside and len(line.strip()) > 25:
            lines.append(json.dumps(line.strip())[1:-1])
    return lines


# ---------------------------------------------------------------- nbgrader validate, both ways

@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_passes_all_its_tests(lesson):
    result = nbgrader("validate", str(notebook_path(lesson)))
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout[-4000:]


@pytest.mark.parametrize("lesson", LESSONS)
def test_released_notebook_fails_every_graded_test(lesson):
    result = nbgrader("validate", "--invert", str(notebook_path(lesson, RELEASE)))
    assert "Success! The notebook does not pass any tests." in result.stdout, result.stdout[-4000:]


# ---------------------------------------------------------------- a fake class, graded for real

def read_source_cells(lesson):
    return [c for c in read(lesson).cells if c.metadata.get("nbgrader", {}).get("solution")]


def _half_done(lesson, source_nb):
    if lesson in HALF_DONE:
        return HALF_DONE[lesson]
    first = next(grade_id(c) for c in source_nb.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    return [first], points(source_nb, lambda c: grade_id(c) == f"test_{first}")


@pytest.mark.parametrize("lesson", LESSONS)
def test_fake_class_round_trip_gives_exact_scores(lesson, tmp_path):
    source_nb = read(lesson)
    nbgrader("generate_assignment", lesson, "--force", *course_args(tmp_path))
    release_path = notebook_path(lesson, tmp_path / "release")
    all_solutions = [grade_id(c) for c in read_source_cells(lesson)]
    half_ids, half_score = _half_done(lesson, source_nb)
    students = {"perfect": (all_solutions, points(source_nb)), "blank": ([], 0.0), "halfdone": (half_ids, half_score)}
    for student, (solved, _) in students.items():
        folder = tmp_path / "submitted" / student / lesson
        folder.mkdir(parents=True)
        nbformat.write(solved_release(lesson, solved), folder / release_path.name)
        (folder / "timestamp.txt").write_text("2026-11-29 09:00:00.000000 UTC")
    nbgrader("autograde", lesson, "--force", *course_args(tmp_path))
    nbgrader("generate_feedback", lesson, "--force", *course_args(tmp_path))
    grades = tmp_path / "grades.csv"
    nbgrader("export", f"--to={grades}", *course_args(tmp_path))
    rows = {row["student_id"]: row for row in csv.DictReader(grades.open()) if row["assignment"] == lesson}
    for student, (_, expected) in students.items():
        assert float(rows[student]["score"]) == pytest.approx(expected), (
            f"{lesson}: {student} scored {rows[student]['score']}, expected {expected}")
    feedback = next((tmp_path / "feedback" / "blank" / lesson).glob("*.html")).read_text()
    for body in ("check_against", "fresh_rng", "qkv_grading/lesson", "qkv/checking"):
        assert body not in feedback, f"feedback must show calls and hints, not test bodies ({body!r} found)"
    assert "is not written yet" in feedback, "feedback should tell the student what is wrong"


def test_instructor_workflow_exactly_as_the_readme_documents_it(tmp_path):
    """The stock commands from README, run in autograde/ of a copy of the course with its own config."""
    course = tmp_path / "qkv"
    for folder in ("autograde", "solutions", "notebooks"):
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns(
            "gradebook.db", "submitted", "autograded", "feedback", "__pycache__", "*.csv"))
    instructor = course / "autograde"
    lesson = LESSONS[0]
    nbgrader("generate_assignment", lesson, "--force", cwd=instructor)           # make release
    released = notebook_path(lesson, course / "notebooks")
    assert json.loads(released.read_text()) == json.loads(notebook_path(lesson, RELEASE).read_text())
    submitted = instructor / "submitted" / "alice" / lesson
    submitted.mkdir(parents=True)
    nbformat.write(solved_release(lesson), submitted / released.name)           # collect
    nbgrader("autograde", lesson, cwd=instructor)
    nbgrader("generate_feedback", lesson, cwd=instructor)
    nbgrader("export", "--to", "grades.csv", cwd=instructor)
    (row,) = [r for r in csv.DictReader((instructor / "grades.csv").open()) if r["assignment"] == lesson]
    assert row["student_id"] == "alice" and float(row["score"]) == points(read(lesson))
    assert next((instructor / "feedback" / "alice" / lesson).glob("*.html")).stat().st_size > 10_000
