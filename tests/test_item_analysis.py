"""Item analysis (autograde/qkv_autograde/reports/item_analysis.py) on a class built with nbgrader's Gradebook API and
autograded notebooks written by hand: pass shares, commonest hints, discrimination's sign, flags, and the page
with its embedded figures; no division by zero with 0 or 1 submissions."""
import base64
import os
import shutil
import sys

import nbformat
import numpy as np
import pytest
from nbgrader.api import Gradebook

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.reports import item_analysis  # noqa: E402

LESSON, NOTEBOOK = "01-lookup", "01-lookup"
STUDENTS = [f"s{i}" for i in range(10)]  # s0 weakest ... s9 strongest
# test cell -> (points, students with full points); in the notebook's order, which is not alphabetical
ITEMS = {
    "test_easy": (1, STUDENTS),
    "test_hard": (2, []),
    "test_discriminating": (1, STUDENTS[5:]),
    "test_backwards": (1, STUDENTS[:3]),      # passed by the weakest: negative discrimination
    "test_core": (1, STUDENTS[3:]),
    "test_core_2": (1, STUDENTS[6:]),
}
WRITTEN = STUDENTS[7:]  # a manually graded markdown answer (1 point): part of the total, not an item
SUM_HINT = "rows do not sum to 1: is the softmax taken over the keys?"
NAME_ERROR = "`soft_lookup` is not defined in your notebook: did the cell that defines it run without an error?"


def hard_failure(student):
    """The error output of test_hard: a Hint for s0-s5, a NameError for s6-s8, and none for s9."""
    index = STUDENTS.index(student)
    if index <= 5:
        return nbformat.v4.new_output("error", ename="Hint", evalue=SUM_HINT + "\nrow 0 sums to 1.7",
                                      traceback=[f"\x1b[0;31mHint\x1b[0m: {SUM_HINT}"])
    if index <= 8:
        return nbformat.v4.new_output("error", ename="NameError", evalue=NAME_ERROR, traceback=[])
    return None


def write_autograded(root, student, scores):
    nb = nbformat.v4.new_notebook()
    for name, (points, _) in ITEMS.items():
        cell = nbformat.v4.new_code_cell(f"check.{name}()")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": name,
                                     "points": points}
        if scores[name] < points:
            failure = hard_failure(student) if name == "test_hard" else nbformat.v4.new_output(
                "error", ename="Hint", evalue=f"{name} failed", traceback=[])
            cell.outputs = [failure] if failure else []
        nb.cells.append(cell)
    folder = root / "autograded" / student / LESSON
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / f"{NOTEBOOK}.ipynb"))


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    """A new gradebook, made once: nbgrader stamps each new one by running `alembic`, seconds on a busy machine."""
    path = tmp_path_factory.mktemp("template") / "gradebook.db"
    with pytest.MonkeyPatch.context() as patch:
        # `make test` puts .venv/bin on PATH, a bare .venv/bin/pytest does not
        patch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        Gradebook(f"sqlite:///{path}").close()
    return path


@pytest.fixture
def course(tmp_path, empty_gradebook):
    shutil.copy(empty_gradebook, tmp_path / "gradebook.db")
    return tmp_path


def build_gradebook(root, students):
    db_url = f"sqlite:///{root / 'gradebook.db'}"
    with Gradebook(db_url) as gb:
        gb.add_assignment(LESSON)
        gb.add_notebook(NOTEBOOK, LESSON)
        for name, (points, _) in ITEMS.items():
            gb.add_grade_cell(name, NOTEBOOK, LESSON, max_score=points, cell_type="code")
        gb.add_grade_cell("written_answer", NOTEBOOK, LESSON, max_score=1, cell_type="markdown")
        for student in students:
            gb.add_student(student)
            gb.add_submission(LESSON, student)
            scores = {name: float(points if student in passing else 0) for name, (points, passing) in ITEMS.items()}
            for name, score in scores.items():
                gb.find_grade(name, NOTEBOOK, LESSON, student).auto_score = score
            gb.find_grade("written_answer", NOTEBOOK, LESSON, student).manual_score = float(student in WRITTEN)
            gb.db.commit()
            write_autograded(root, student, scores)
    return db_url


def expected_scores(student):
    item_scores = {name: float(points if student in passing else 0) for name, (points, passing) in ITEMS.items()}
    return item_scores, sum(item_scores.values()) + float(student in WRITTEN)


def test_pass_shares_hints_discrimination_and_flags(course):
    db_url = build_gradebook(course, STUDENTS)
    result = item_analysis.analyse(course, db_url, LESSON)
    assert result["students"] == STUDENTS
    assert result["totals"] == [expected_scores(s)[1] for s in STUDENTS]
    assert result["max_total"] == sum(points for points, _ in ITEMS.values()) + 1
    items = {item["name"]: item for item in result["items"]}
    assert [item["name"] for item in result["items"]] == list(ITEMS)   # the notebook's order
    assert "written_answer" not in items                                 # only test cells are items
    for name, (_, passing) in ITEMS.items():
        assert items[name]["pass_share"] == pytest.approx(len(passing) / len(STUDENTS)), name
        assert items[name]["passed"] == len(passing)

    # discrimination is the correlation with the REST of the total, recomputed here independently
    totals = np.array(result["totals"])
    for name in ("test_discriminating", "test_backwards", "test_core", "test_core_2"):
        item = np.array([expected_scores(s)[0][name] for s in STUDENTS])
        assert items[name]["discrimination"] == pytest.approx(np.corrcoef(item, totals - item)[0, 1]), name
    assert items["test_discriminating"]["discrimination"] > 0.5
    assert items["test_backwards"]["discrimination"] < -0.5
    assert items["test_easy"]["discrimination"] is None and items["test_hard"]["discrimination"] is None

    assert items["test_easy"]["flags"] == ["nearly everyone passes"]
    assert items["test_hard"]["flags"] == ["nearly everyone fails"]
    assert items["test_backwards"]["flags"] == ["negative discrimination"]
    assert items["test_discriminating"]["flags"] == items["test_core"]["flags"] == []

    # hints: first lines only, commonest first, counted among failures; a failure with no error output is counted apart
    assert items["test_hard"]["hints"] == [(SUM_HINT, 6), (f"NameError: {NAME_ERROR}", 3)]
    assert items["test_hard"]["failures_without_hint"] == 1
    assert items["test_core_2"]["hints"] == [("test_core_2 failed", 6)]
    assert items["test_easy"]["hints"] == []


def test_the_page_embeds_both_figures_and_marks_flagged_rows(course):
    db_url = build_gradebook(course, STUDENTS)
    path = item_analysis.write(course, db_url, LESSON)
    assert path == str(course / f"items-{LESSON}.html")
    page = open(path, encoding="utf-8").read()
    images = page.split('src="data:image/png;base64,')[1:]
    assert len(images) == 2
    for image in images:
        assert base64.b64decode(image.split('"')[0]).startswith(b"\x89PNG")
    assert page.count("<tr class=flag>") == 3
    assert "6× rows do not sum to 1" in page and "nearly everyone fails" in page
    assert "10 submissions" in page


@pytest.mark.parametrize("count", [0, 1])
def test_zero_or_one_submission_divides_nothing_by_zero(course, count):
    db_url = build_gradebook(course, STUDENTS[9:9 + count])
    result = item_analysis.analyse(course, db_url, LESSON)
    assert len(result["students"]) == count
    for item in result["items"]:
        assert item["discrimination"] is None and item["flags"] == []
        assert item["pass_share"] == (None if count == 0 else float(item["passed"]))
    page = open(item_analysis.write(course, db_url, LESSON), encoding="utf-8").read()
    assert ("No submissions" in page) == (count == 0)
    assert ("Only 1 submission:" in page) == (count == 1)


def test_an_ungraded_lesson_and_unreadable_notebooks_still_give_a_page(course):
    db_url = build_gradebook(course, STUDENTS[:4])
    (course / "autograded" / "s0" / LESSON / f"{NOTEBOOK}.ipynb").write_text("{ not json")
    result = item_analysis.analyse(course, db_url, LESSON)
    hard = next(item for item in result["items"] if item["name"] == "test_hard")
    assert hard["hints"] == [(SUM_HINT, 3)] and hard["failures_without_hint"] == 1
    page = open(item_analysis.write(course, db_url, "02-attention"), encoding="utf-8").read()
    assert "no assignment named 02-attention" in page
    # a gradebook that does not exist yet is not created by looking at it
    missing = course / "elsewhere" / "gradebook.db"
    assert item_analysis.analyse(course, f"sqlite:///{missing}", LESSON)["missing"]
    assert not missing.exists()
