"""No submission can stop the class (issue 19, item 3): a notebook with a second copy of a test cell, test cells
re-flagged as answer cells, nbgrader metadata of absurd types, a student folder whose name holds a newline, and a
submission that makes one of the course's own preprocessors raise, graded with the perfect student through both
routes (`python -m qkv_autograde`, what `make grade` runs, and the stock `nbgrader autograde`). Each route exits 0,
writes grades.csv with everyone's exact score, names each hostile submission's anomaly, and a rerun completes too.
"""
import copy
import csv
import os
import pathlib
import subprocess
import sys

import pytest

from lessons import copy_course, grade_id, hand_in, solved_release
from test_lesson01 import VARIANTS

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
FULL = 13.0   # lesson 01's autograded points (the written answer is graded by hand)
HALF = 5.0    # hard_lookup (2) and softmax (3) solved, nothing else
ENV = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
FAST = {"SandboxedExecute.cell_timeout": 20, "SandboxedExecute.call_timeout": 10,
        "SandboxedExecute.budget_seconds": 240}
NEWLINE_ID = "mallory\nx"
EXPLODE = "# qkv-test: this submission makes a course preprocessor raise"

pytestmark = pytest.mark.grading_class

# A preprocessor of the course that raises on one submission: stands for any bug a notebook may trigger
EXPLODING_CONFIG = f'''
from nbgrader.preprocessors import NbGraderPreprocessor as _Base
class _Explode(_Base):
    def preprocess(self, nb, resources):
        if any({EXPLODE!r} in cell.source for cell in nb.cells):
            raise KeyError("the preprocessor's own bug")
        return nb, resources
c.Autograde.sanitize_preprocessors = list(c.Autograde.sanitize_preprocessors) + [_Explode]
'''


def half_done():
    return solved_release(LESSON, ["hard_lookup", "softmax"])


def duplicated_test_cell():
    nb = half_done()
    index = next(i for i, c in enumerate(nb.cells) if grade_id(c) == "test_softmax")
    nb.cells.insert(index + 1, copy.deepcopy(nb.cells[index]))
    nb.cells.append(copy.deepcopy(nb.cells[index]))  # and one more at the end, where it would run last
    return nb


def tests_flagged_as_answers():
    nb = half_done()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            meta["solution"] = True
            meta["locked"] = False
            cell.source = "pass  # my own test"
    return nb


def absurd_metadata():
    nb = half_done()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if grade_id(cell) == "test_softmax":
            meta["points"] = "abc"
        elif grade_id(cell) == "test_hard_lookup":
            meta["grade_id"] = ["test_hard_lookup", "again"]
        elif grade_id(cell) == "soft_lookup":
            meta["grade"] = "yes"
            meta["points"] = 1e9
    nb.cells[1].metadata["nbgrader"] = "not a mapping"  # the setup cell, which has none in the release
    return nb


def exploding():
    nb = half_done()
    nb.cells[1].source += "\n" + EXPLODE
    return nb


# Copying (issue 34.4): one student pastes the course's references, two hand in one answer between them
PASTED = {"hard_lookup": "qkv.lookup.hard_lookup", "softmax": "qkv.attention.softmax",
          "soft_lookup": "qkv.lookup.soft_lookup",
          "soft_lookup_by_temperature": "qkv.lookup.soft_lookup_by_temperature"}
SHARED_ANSWER = {
    "hard_lookup": """def hard_lookup(query, keys, values):
    table = {tuple(k): v for k, v in zip(np.asarray(keys).tolist(), values)}
    try:
        return table[tuple(np.asarray(query).tolist())]
    except KeyError:
        raise KeyError(f"no key equals {list(query)} </pre><script>alert(1)</script>") from None
""",
    "softmax": VARIANTS["softmax"]["loops over slices"].lstrip(),  # a right answer nobody else in the class writes
    "soft_lookup": VARIANTS["soft_lookup"]["loops"].lstrip(),
}


def pasted_references():
    import importlib
    import inspect

    nb = solved_release(LESSON)
    for cell in nb.cells:
        if grade_id(cell) in PASTED:
            module, _, name = PASTED[grade_id(cell)].rpartition(".")
            module = importlib.import_module(module)
            helpers = "".join(inspect.getsource(getattr(module, n)) for n in getattr(module, name).__code__.co_names
                              if n.startswith("_check"))
            cell.source = ("from qkv.shapes import as_float_array, require\n"  # a reference comes with its helpers
                           + (helpers + inspect.getsource(getattr(module, name))).replace("    ", "  "))
    return nb


def shared_answer(renamed):
    nb = solved_release(LESSON)
    for cell in nb.cells:
        if grade_id(cell) in SHARED_ANSWER:
            source = SHARED_ANSWER[grade_id(cell)]
            cell.source = source.replace("out", "result").replace("row", "r") if renamed else source
            cell.source = ("# my own work\n" if renamed else "") + cell.source
    return nb


# student -> (notebook, exact score or None for "no row: refused", anomaly the report must name)
CLASS = {
    "ada": (lambda: solved_release(LESSON), FULL, None),
    "dup": (duplicated_test_cell, HALF, "duplicate test cell"),
    "reflag": (tests_flagged_as_answers, HALF, "corrupt metadata"),
    "absurd": (absurd_metadata, HALF, "corrupt metadata"),
    "boom": (exploding, 0.0, "grading error"),
    NEWLINE_ID: (lambda: solved_release(LESSON), None, "refused student id"),
    "paster": (pasted_references, FULL, "copied from the course reference"),
    "copier1": (lambda: shared_answer(False), FULL, "answers match a classmate's"),
    "copier2": (lambda: shared_answer(True), FULL, "answers match a classmate's"),
}


def a_hostile_class(parent):
    instructor = copy_course(parent)
    with (instructor / "nbgrader_config.py").open("a") as config:
        config.write("\n" + "".join(f"c.{k} = {v}\n" for k, v in FAST.items()) + EXPLODING_CONFIG)
    for student, (notebook, _, _) in CLASS.items():
        hand_in(instructor, LESSON, student, notebook())
    return instructor


def make_grade(instructor):
    return subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"], cwd=instructor, env=ENV,
                          capture_output=True, text=True, timeout=1800)


def stock_nbgrader(instructor):
    # the fresh course has never run generate_assignment: the stock command must prepare the lesson itself
    done = subprocess.run([str(BIN / "nbgrader"), "autograde", LESSON], cwd=instructor, env=ENV,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode == 0:
        exported = subprocess.run([str(BIN / "nbgrader"), "export", "--to", "grades.csv"], cwd=instructor, env=ENV,
                                  capture_output=True, text=True, timeout=600)
        done.returncode, done.stderr = exported.returncode, done.stderr + exported.stderr
    return done


ROUTES = {"make grade": make_grade, "nbgrader autograde": stock_nbgrader}


@pytest.fixture(scope="module", params=list(ROUTES))
def graded(tmp_path_factory, request):
    instructor = a_hostile_class(tmp_path_factory.mktemp("resilience"))
    first = ROUTES[request.param](instructor)
    outcome = {"route": request.param, "instructor": instructor, "first": first}
    if first.returncode == 0:
        outcome["grades"] = {r["student_id"]: float(r["score"]) for r in
                             csv.DictReader((instructor / "grades.csv").open()) if r["assignment"] == LESSON}
        outcome["report"] = {r["student"]: r for r in
                             csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open(newline=""))}
        outcome["again"] = ROUTES[request.param](instructor)
    return outcome


def test_the_class_is_graded_to_exact_scores(graded):
    first = graded["first"]
    assert first.returncode == 0, f"{graded['route']} stopped:\n{first.stdout[-2000:]}\n{first.stderr[-4000:]}"
    expected = {s: score for s, (_, score, _) in CLASS.items() if score is not None}
    assert graded["grades"] == pytest.approx(expected)


def test_each_hostile_submission_is_named_in_the_report(graded):
    assert graded["first"].returncode == 0, graded["first"].stderr[-4000:]
    report = graded["report"]
    for student, (_, _, anomaly) in CLASS.items():
        names = report[student]["anomalies"].split("; ") if report[student]["anomalies"] else []
        if anomaly is None:
            assert set(names) <= {"isolation partial"}, (student, report[student])
        else:
            assert anomaly in names, (student, report[student])


def test_a_rerun_completes_and_changes_nothing(graded):
    assert graded["first"].returncode == 0, graded["first"].stderr[-4000:]
    again = graded["again"]
    assert again.returncode == 0, f"rerun stopped:\n{again.stderr[-4000:]}"
    rows = {r["student_id"]: float(r["score"]) for r in
            csv.DictReader((graded["instructor"] / "grades.csv").open()) if r["assignment"] == LESSON}
    assert rows == graded["grades"]


def test_copying_is_named_with_the_matching_lines_and_changes_no_score(graded):
    """Issue 34.4: a pasted reference and two students with one answer between them are named, with whom and the
    lines side by side (escaped); the honest students are not; the items page shows the class's similarity."""
    assert graded["first"].returncode == 0, graded["first"].stderr[-4000:]
    report = graded["report"]
    copied = [d for d in report["paster"]["details"].split(" | ") if d.startswith("copied from the course reference")]
    assert {d.split(": ")[1] for d in copied} == set(PASTED), copied
    assert "copier2" in report["copier1"]["details"] and "copier1" in report["copier2"]["details"]
    for student in ("ada", "dup", "reflag", "absurd", "boom"):
        assert "copied" not in report[student]["anomalies"] and "classmate" not in report[student]["anomalies"], \
            report[student]
    page = (graded["instructor"] / f"anomalies-{LESSON}.html").read_text()
    assert "<table class=pair>" in page and "np.moveaxis" in page
    assert "<script>" not in page and "&lt;/pre&gt;&lt;script&gt;" in page
    if graded["route"] == "make grade":
        assert "Similarity between students" in (graded["instructor"] / f"items-{LESSON}.html").read_text()
