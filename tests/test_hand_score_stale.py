"""A hand score follows the answer it was given for (issue 21.4): a student hand-graded 2/2 on lesson 01's written
answer who resubmits keeps the score without a word when the answer is the same, and is flagged `hand score stale`
(report and anomaly page, `needs_manual_grade` again so formgrader lists it) when it changed; once the instructor
grades it again the flag is gone. The answer is what formgrader shows of it (issue 34.3): the same text with another
image attached is another answer. Through `make grade` (python -m qkv_autograde) and the stock `nbgrader autograde`.
"""
import csv
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

from lessons import ROOT, copy_course, grade_id, hand_in, solved_release

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.reports import hand_scores  # noqa: E402
from qkv_autograde.intake import history  # noqa: E402

LESSON = "01-lookup"
WRITTEN = "written_trophy"
BIN = pathlib.Path(sys.executable).parent
FAST = "\nc.SandboxedExecute.cell_timeout = 20\nc.SandboxedExecute.call_timeout = 10\n"  # as test_class_grading
ROUTES = {"make grade": [sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"],
          "nbgrader autograde": [str(BIN / "nbgrader"), "autograde", LESSON]}


def env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


SKETCH = "The trophy is too big, as my sketch shows:\n\n![sketch](attachment:sketch.png)"
RED, BLUE = "iVBORw0KGgpyZWQ=", "iVBORw0KGgpibHVl"  # base64 of the two images, each a PNG signature and a colour


def with_sketch(nb, image):
    """`nb` with its written answer the same text over an attached image."""
    for cell in nb.cells:
        if grade_id(cell) == WRITTEN:
            cell.source, cell.attachments = SKETCH, {"sketch.png": {"image/png": image}}
    return nb


def resubmitted(written=None, note="# handed in again\n"):
    """A perfect lesson 01, its first code answer touched (so that it is a new notebook), its written answer
    replaced when `written` is given."""
    nb = solved_release(LESSON)
    code = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    code.source = note + code.source
    for cell in nb.cells:
        if grade_id(cell) == WRITTEN and written is not None:
            cell.source = written
    return nb


def hand_grade(instructor, student, score):
    """What formgrader's save does: the score, and the cell no longer needs manual grading."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        grade = gb.find_grade(WRITTEN, LESSON, LESSON, student)
        grade.manual_score, grade.needs_manual_grade = score, False
        gb.db.commit()


def written_grade(instructor, student):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        grade = gb.find_grade(WRITTEN, LESSON, LESSON, student)
        return grade.manual_score, grade.needs_manual_grade


def report(instructor):
    rows = csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open(newline=""))
    return {r["student"]: r for r in rows}


def grade(instructor, route):
    commands = [ROUTES[route]] + ([[str(BIN / "nbgrader"), "export", "--to", "grades.csv"]]
                                  if route == "nbgrader autograde" else [])  # make grade exports by itself
    for command in commands:
        done = subprocess.run(command, cwd=instructor, env=env(), capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return report(instructor)


@pytest.mark.grading_class
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_changed_answer_flags_its_hand_score_until_graded_again(tmp_path, route):
    instructor = copy_course(tmp_path)
    with open(instructor / "nbgrader_config.py", "a") as f:
        f.write(FAST)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    for student in ("same", "changed"):
        hand_in(instructor, LESSON, student, solved_release(LESSON))
    hand_in(instructor, LESSON, "swapped", with_sketch(solved_release(LESSON), RED))
    grade(instructor, route)
    for student in ("same", "changed", "swapped"):
        hand_grade(instructor, student, 2.0)

    # all resubmit a new notebook (a newer time, so all are graded again); one rewrote the written answer, one kept
    # its text and attached another image
    hand_in(instructor, LESSON, "same", resubmitted())
    hand_in(instructor, LESSON, "changed", resubmitted("The trophy, because it is the thing that is too big."))
    hand_in(instructor, LESSON, "swapped", with_sketch(resubmitted(), BLUE))
    for student in ("same", "changed", "swapped"):
        (instructor / "submitted" / student / LESSON / "timestamp.txt").write_text("2026-11-30 09:00:00.000000 UTC")
    rows = grade(instructor, route)
    assert "hand score stale" not in rows["same"]["anomalies"], rows["same"]
    assert "hand score stale" in rows["changed"]["anomalies"].split("; "), rows["changed"]
    assert (f"hand score stale: {WRITTEN} (2.0 points): the answer changed since it was hand-graded; grade it again "
            "in formgrader") in rows["changed"]["details"]
    assert "hand score stale" in (instructor / f"anomalies-{LESSON}.html").read_text()
    # the same text over another image: another answer (before, the hash covered the text only and kept the score)
    assert (f"hand score stale: {WRITTEN} (2.0 points): the answer changed since it was hand-graded; grade it again "
            "in formgrader") in rows["swapped"]["details"]
    # formgrader lists exactly the stale ones; the score stays until the instructor changes it, as nbgrader keeps it
    assert written_grade(instructor, "changed") == written_grade(instructor, "swapped") == (2.0, True)
    assert written_grade(instructor, "same") == (2.0, False)
    graded = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())}
    assert graded["changed"] == graded["same"] == graded["swapped"] == 15.0

    # a run with nothing new keeps the flag; the instructor grades the new answer (the same score, saved again)
    assert "hand score stale" in grade(instructor, route)["changed"]["anomalies"]
    hand_grade(instructor, "changed", 2.0)
    hand_grade(instructor, "swapped", 2.0)
    rows = grade(instructor, route)
    assert "hand score stale" not in "".join(rows[s]["anomalies"] for s in ("same", "changed", "swapped")), rows
    assert written_grade(instructor, "changed") == written_grade(instructor, "swapped") == (2.0, False)
    records = history.read(instructor, LESSON)
    given = history.hand_scores_given(records, "changed", LESSON)[WRITTEN]
    assert given["sha256"] == history.latest_answers(records, "changed", LESSON)[WRITTEN]


# ------------------------------------------------------------------ the rules, without grading

def recorded(answers=None, scores=()):
    records = [history.answers_record("s", "nb", answers)] if answers is not None else []
    return records + [history.hand_score_record("s", "nb", cell, score, sha) for cell, score, sha in scores]


def test_a_hand_score_is_given_for_the_answer_shown_when_first_seen():
    shown = {"w": "a1"}
    assert [(r["cell"], r["score"], r["sha256"]) for r in hand_scores.seen(recorded(shown), "s", "nb",
                                                                           {"w": (2.0, False)}, shown)] == [
        ("w", 2.0, "a1")]
    # already recorded for that answer: nothing new, and not stale for it, stale for another
    records = recorded(shown, [("w", 2.0, "a1")])
    assert hand_scores.seen(records, "s", "nb", {"w": (2.0, False)}, shown) == []
    assert hand_scores.stale(records, "s", "nb", {"w": (2.0, True)}, {"w": "a1"}) == {}
    assert list(hand_scores.stale(records, "s", "nb", {"w": (2.0, True)}, {"w": "a2"})) == ["w"]
    # stale and still in review: not given for the new answer; changed, or saved again: given for it
    assert hand_scores.seen(records, "s", "nb", {"w": (2.0, True)}, {"w": "a2"}) == []
    assert [r["sha256"] for r in hand_scores.seen(records, "s", "nb", {"w": (1.0, True)}, {"w": "a2"})] == ["a2"]
    assert [r["sha256"] for r in hand_scores.seen(records, "s", "nb", {"w": (2.0, False)}, {"w": "a2"})] == ["a2"]
    # a hand score from before answers were recorded is given for an unknown answer, and is stale
    unknown = hand_scores.seen([], "s", "nb", {"w": (2.0, False)}, None)
    assert [r["sha256"] for r in unknown] == [None]
    flagged = hand_scores.stale(unknown, "s", "nb", {"w": (2.0, True)}, {"w": "a2"})
    assert "before the grader recorded answers" in hand_scores.anomaly("w", flagged["w"])["detail"]
    assert hand_scores.seen([], "s", "nb", {"w": (None, True)}, shown) == []  # no hand score yet


def test_the_answers_are_the_hand_graded_cells_sources():
    nb = nbformat.v4.new_notebook()
    new = nbformat.v4.new_markdown_cell
    nb.cells = [new("intro"), new("mine", metadata={"nbgrader": {"grade": True, "solution": True, "grade_id": "w"}}),
                new("auto", metadata={"nbgrader": {"grade": False, "solution": True, "grade_id": "f"}}),
                new("Plot it.", metadata={"nbgrader": {"task": True, "grade_id": "t", "points": 1}}),
                nbformat.v4.new_code_cell("plot()"), new("done")]
    answers = hand_scores.answers_of(nb)
    assert sorted(answers) == ["t", "w"] and answers["w"] == hand_scores.sha256_of_text("mine")
    nb.cells[-1].source = "done, and more"
    assert hand_scores.answers_of(nb)["t"] != answers["t"] and hand_scores.answers_of(nb)["w"] == answers["w"]


def test_the_answer_is_what_formgrader_shows_of_the_cell():
    """Attachments of a written answer, outputs of a code answer with points (not their execution counts), and of
    the cells below a task; a cell with neither hashes as its source, as it did before they counted."""
    new = nbformat.v4
    written = {"nbgrader": {"grade": True, "solution": True, "grade_id": "w"}}
    coded = {"nbgrader": {"grade": True, "solution": True, "grade_id": "c"}}
    task = {"nbgrader": {"task": True, "grade_id": "t", "points": 1}}

    def notebook(image=None, output="0.5\n", count=1):
        nb = new.new_notebook()
        nb.cells = [new.new_markdown_cell(SKETCH, metadata=written),
                    new.new_code_cell("print(0.5)", metadata=coded, execution_count=count,
                                      outputs=[new.new_output("stream", name="stdout", text=output)]),
                    new.new_markdown_cell("Plot it.", metadata=task), new.new_markdown_cell("my plot")]
        if image:
            nb.cells[0].attachments = nb.cells[3].attachments = {"sketch.png": {"image/png": image}}
        return nb

    plain, red = hand_scores.answers_of(notebook()), hand_scores.answers_of(notebook(RED))
    assert plain["w"] == hand_scores.sha256_of_text(SKETCH)  # recorded before attachments counted: still current
    assert plain["t"] == hand_scores.sha256_of_text('["my plot"]')
    assert red == hand_scores.answers_of(notebook(RED, count=7))  # the same answer, the same hashes
    blue = hand_scores.answers_of(notebook(BLUE))
    assert red["w"] != blue["w"] != plain["w"] and red["t"] != blue["t"] != plain["t"] and red["c"] == blue["c"]
    assert hand_scores.answers_of(notebook(output="0.25\n"))["c"] != plain["c"]
