"""One notebook must not swell the grader (issue 34, item 5): a lesson 01 class collected and graded through
`make grade` (`python -m qkv_autograde --submissions`, one worker), where one student hands in a notebook at the
limits intake accepts (qkv_autograde.intake.submissions.NotebookLimits: 16 MiB and 100,000 JSON items, filled with the
costliest shapes there are: a string and empty objects in its metadata) and another one just over them.

The heavy one is graded like any other (its metadata costs the grader, its answers score full marks); the one over
is refused at intake with the reason in the report and never reaches submitted/; one over put in submitted/ by
hand (nbgrader's exchange, a folder) is refused by staging, not graded; the largest process of the grading run
outside the sandbox (GraderMemory) stays under 1 GiB. Before the limits, a notebook with 150 MB of metadata took
it to 1,742 MB, and 4 MiB of empty objects take nbformat's read and write alone to 1.9 GB.
"""
import csv
import subprocess
import sys
import zipfile

import nbformat
import pytest

from lessons import copy_course, hand_in, solved_release
from test_grading_sandbox import ENV, FULL, LESSON, run, with_fast_limits  # puts autograde/ on sys.path
from test_hostile_wire import GraderMemory

from qkv_autograde.intake import submissions

pytestmark = pytest.mark.grading_class


def at_the_limits(max_bytes, max_items, over=False):
    """A perfect lesson 01 notebook whose metadata fills it to the limits (one item and one byte past with `over`)."""
    nb = solved_release(LESSON)
    base = nbformat.writes(nb).encode()
    room = max_items - submissions.json_items_of(base) - 2 + (1 if over else 0)  # the two lists' `[` and `,`
    nb.metadata["objects"] = [{}] * (room // 2)  # `{` and `,` per object (written without a trailing `,`: +1)
    nb.metadata["text"] = ""
    data = nbformat.writes(nb).encode()
    nb.metadata["text"] = "x" * (max_bytes - len(data) + (1 if over else 0))
    return nbformat.writes(nb).encode()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    instructor = copy_course(tmp_path_factory.mktemp("course"))
    with_fast_limits(instructor)
    run("generate_assignment", LESSON, "--force", cwd=instructor)
    limits = submissions.NotebookLimits()
    heavy = at_the_limits(limits.max_bytes, limits.max_items)
    assert len(heavy) == limits.max_bytes and submissions.json_items_of(heavy) <= limits.max_items
    assert limits.max_items - submissions.json_items_of(heavy) < 4
    hand_in(instructor, LESSON, "byhand", at_the_limits(limits.max_bytes, limits.max_items, over=True))
    export = tmp_path_factory.mktemp("lms") / "canvas.zip"
    with zipfile.ZipFile(export, "w") as archive:
        archive.writestr("perfect_101_1_01-lookup.ipynb", nbformat.writes(solved_release(LESSON)))
        archive.writestr("heavy_102_2_01-lookup.ipynb", heavy)
        archive.writestr("over_103_3_01-lookup.ipynb", at_the_limits(limits.max_bytes, limits.max_items, over=True))
    process = subprocess.Popen([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1",
                                "--submissions", str(export)],
                               cwd=instructor, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = GraderMemory(process.pid)
    out, err = process.communicate(timeout=1800)
    peak = memory.close()
    assert process.returncode == 0, err[-3000:]
    grades = {r["student_id"]: r["score"] for r in csv.DictReader((instructor / "grades.csv").open())
              if r["assignment"] == LESSON}
    report = {r["student"]: r for r in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open())}
    print(f"make grade with a notebook at the limits: peak RSS of the grading processes {peak / 2**20:.0f} MiB")
    return dict(instructor=instructor, grades=grades, report=report, peak=peak)


def test_the_notebook_at_the_limits_is_graded_and_the_grader_stays_under_1_gib(graded):
    assert float(graded["grades"]["102"]) == float(graded["grades"]["101"]) == FULL
    assert graded["peak"] < 1 << 30, f"peak RSS {graded['peak'] / 2**20:.0f} MiB"


def test_the_notebook_over_the_limits_is_refused_before_submitted_with_the_reason(graded):
    assert not (graded["instructor"] / "submitted" / "103").exists()
    assert graded["grades"].get("103", "") == ""
    row = graded["report"]["103"]
    assert row["anomalies"] == "oversized notebook"
    assert ("over_103_3_01-lookup.ipynb: 16,777,217 bytes (16.0 MiB), over the limit of 16,777,216 bytes (16.0 MiB)"
            in row["details"])


def test_a_notebook_over_the_limits_already_in_submitted_is_refused_before_grading(graded):
    assert not (graded["instructor"] / "autograded" / "byhand").exists()
    assert graded["grades"].get("byhand", "") == ""
    row = graded["report"]["byhand"]
    assert row["anomalies"] == "oversized notebook"
    assert row["details"].startswith("oversized notebook: 01-lookup.ipynb: 16,777,217 bytes (16.0 MiB), over the limit")
