"""An instructor's term with a Canvas class of lesson 01 (issue 35), graded ONCE by `make grade`'s route,
`python -m qkv_autograde 01-lookup --submissions export.zip`, and read by every end-to-end test of the issue.

Grading a class is slow and the suite must stay within 30 minutes, so a new end-to-end test of issue 35 reads the
module-scoped `term` below (`--dist loadfile` keeps this module on one worker: the class is graded once) rather
than grading a class of its own; a student it needs is added to `CLASS` in a small edit.

The class, as Canvas's Submissions > Download names it (`<sortablename>_[LATE_]<user id>_<attachment id>_<file>`),
and two students who handed in through nbgrader's exchange (already collected into submitted/ with nbgrader's
timestamp.txt, so the same `make grade` grades them: the exchange route), with the course's config giving a penalty
for a late submission (`c.LatePenalty.fraction`: Canvas marks LATE but gives no time) and the Canvas import's
"Assignment name (id)" header of the lesson (`c.CanvasGrades.assignment_headers`).
"""
import csv
import os
import pathlib
import re
import subprocess
import sys
from typing import NamedTuple

import nbformat
import pytest

from lessons import copy_course, hand_in, solved_release
from test_class_intake import entry, make_zip
from test_grading_sandbox import with_fast_limits

LESSON = "01-lookup"
NB = f"{LESSON}.ipynb"
BIN = pathlib.Path(sys.executable).parent
pytestmark = pytest.mark.grading_class

DUE = (2026, 11, 5, 10, 0, 0)
LATE_FRACTION = 0.5                                  # what a late submission loses, in the course's config
CANVAS_HEADER = "Lesson 1: lookup (123456)"          # Canvas's "Assignment name (id)" of lesson 01
PARTIAL = ["hard_lookup", "softmax"]                 # the cells the partial students solved

# user id -> (Canvas's file name in the download, the cells solved: None = all, [] = blank)
CLASS = {
    "10001": (f"adaada_10001_500001_{NB}", None),              # perfect
    "10002": (f"bobo_10002_500002_{NB}", []),                  # blank
    "10003": (f"cycy_10003_500003_{NB}", PARTIAL),             # partial
    "10004": (f"deedee_LATE_10004_500004_{NB}", None),         # perfect, marked late by Canvas
    "10005": (f"smithjohn_10005_500005_{NB}", None),           # two students with the same display name
    "10006": (f"smithjohn_10006_500006_{NB}", PARTIAL),
    "10007": (f"eded_10007_500007_{NB}", []),                  # blank first ...
    "10007-1": (f"eded_10007_500008_{LESSON}-1.ipynb", None),  # ... then Canvas's own resubmission name: perfect
    "10008": (f"fayfay_LATE_10008_500009_{NB}", None),         # perfect, late by Canvas's mark, with an extension
}
# the exchange route: student -> nbgrader's timestamp.txt (1 d after the due date), both perfect
EXCHANGE = {"gil": "2026-11-06 10:00:00.000000 UTC",                # late by its time
            "hal": "2026-11-06 10:00:00.000000 UTC"}                # as late, but within an extension
EXTENSIONS = {"10008": 2, "hal": 2}                                 # days, granted with Gradebook.grant_extension


class Term(NamedTuple):
    instructor: pathlib.Path    # the course's autograde/ folder, where make grade ran
    stdout: str                 # what `python -m qkv_autograde` printed
    stderr: str


def env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def configure_the_term(instructor):
    """The course config an instructor edits once a term: the late penalty and the Canvas column's header."""
    with (instructor / "nbgrader_config.py").open("a") as config:
        config.write(f"\nc.LatePenalty.fraction = {LATE_FRACTION}\n"
                     f"c.CanvasGrades.assignment_headers = {{{LESSON!r}: {CANVAS_HEADER!r}}}\n")


def set_due_date_and_extensions(instructor):
    """The due date, and nbgrader's extensions, set before grading as README says."""
    import datetime

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        gb.update_or_create_assignment(LESSON, duedate=datetime.datetime(*DUE))
        for student, days in EXTENSIONS.items():
            gb.update_or_create_student(student)
            gb.update_or_create_submission(LESSON, student)   # nbgrader keeps an extension on the submission
            gb.grant_extension(LESSON, student, days=days)


def collected_from_the_exchange(instructor):
    """What `nbgrader collect` leaves in submitted/: the notebook and the exchange's timestamp.txt."""
    for student, timestamp in EXCHANGE.items():
        hand_in(instructor, LESSON, student, solved_release(LESSON))
        (instructor / "submitted" / student / LESSON / "timestamp.txt").write_text(timestamp)


def canvas_download(path):
    entries = []
    for attachment, (name, solved) in enumerate(CLASS.values()):
        notebook = nbformat.writes(solved_release(LESSON, solved)).encode()
        entries.append(entry(name, notebook, date=(2026, 11, 1, 9, attachment, 0)))
    return make_zip(path, entries)


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    parent = tmp_path_factory.mktemp("term")
    instructor = copy_course(parent)
    with_fast_limits(instructor)
    configure_the_term(instructor)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    set_due_date_and_extensions(instructor)
    collected_from_the_exchange(instructor)
    export = canvas_download(parent / "export.zip")
    done = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--submissions", str(export), "--jobs", "2"],
                          cwd=instructor, env=env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return Term(instructor, done.stdout, done.stderr)


# ------------------------------------------------------------------ item 7: the Canvas column's header, from config

def test_canvas_grades_carry_the_assignment_header_given_once_in_config(term):
    canvas = list(csv.reader((term.instructor / "canvas-grades.csv").open(newline="")))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", CANVAS_HEADER]


# ------------------------------------------------------------------ item 1: feedback back through the LMS, in bulk

def lms_feedback_pages(term):
    """{name in the zip: page bytes} of the bundle make grade wrote for the LMS's bulk upload."""
    import zipfile

    with zipfile.ZipFile(term.instructor / f"lms-feedback-{LESSON}.zip") as bundle:
        return {name: bundle.read(name) for name in bundle.namelist()}


def canvas_feedback_names():
    """What Canvas's re-upload takes back: each student's page under the download's name of the copy graded, its
    sortable name, user id and attachment id (the resubmission's, which came later, for the student who sent two)."""
    graded = {}
    for name, _ in CLASS.values():
        sortable, *fields = name.split("_")
        user, attachment = [field for field in fields if field.isdigit()][:2]
        graded[user] = f"{sortable}_{user}_{attachment}_{LESSON}-feedback.html"
    return sorted(graded.values())


def test_make_grade_writes_canvas_feedback_zip_with_one_page_per_student(term):
    pages = lms_feedback_pages(term)
    assert sorted(pages) == canvas_feedback_names() and len(pages) == 8
    for name, page in pages.items():
        student = name.split("_")[1]
        assert page == (term.instructor / "feedback" / student / LESSON / f"{LESSON}.html").read_bytes(), name
    assert f"LMS feedback: {term.instructor / f'lms-feedback-{LESSON}.zip'} (8 page(s)" in term.stdout


def test_no_page_points_into_the_instructors_machine_or_the_network(term):
    import re

    from lessons import ROOT

    sys.path.insert(0, str(ROOT / "autograde"))
    from qkv_autograde.reports.lms_feedback import outside_references

    machine = [str(term.instructor.parent), str(ROOT), sys.prefix, "file://"]
    for name, page in lms_feedback_pages(term).items():
        text = page.decode()
        assert outside_references(text) == [], name
        assert [path for path in machine if path in text] == [], name
        # bootstrap's licence comments in the inlined CSS name its sites; nothing else may
        assert "://" not in re.sub(r"/\*.*?\*/", "", text, flags=re.S), name


def test_a_page_from_the_zip_draws_its_maths_offline_from_another_folder(term, tmp_path_factory):
    """The page a student downloads, opened in chromium with no network from a folder that is not the course: the
    maths are drawn (as MathML: superscripts raised, not TeX), and the page asks for nothing but itself."""
    from test_browser import CHROMIUM, CHROMIUM_ARGS

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    name, page_bytes = next((n, p) for n, p in lms_feedback_pages(term).items() if "_10001_" in n)
    downloaded = tmp_path_factory.mktemp("a-students-downloads") / name
    downloaded.write_bytes(page_bytes)
    asked = []

    def only_the_page(route):
        asked.append(route.request.url)
        route.continue_() if route.request.url == downloaded.as_uri() else route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True)
            context.route("**/*", only_the_page)
            page = context.new_page()
            page.goto(downloaded.as_uri(), wait_until="load")
            page.wait_for_timeout(500)
            formulas = page.evaluate("() => [...document.querySelectorAll('math')].filter(m => "
                                     "m instanceof MathMLElement && m.getBoundingClientRect().width > 0).length")
            raised = page.evaluate("() => [...document.querySelectorAll('msup')].map(f => "
                                   "f.children[1].getBoundingClientRect().bottom < "
                                   "f.children[0].getBoundingClientRect().bottom - 1)")
            raw_tex = page.evaluate("() => [...document.querySelectorAll('.text_cell_render')].map(e => e.innerText)"
                                    ".filter(t => /\\$[^$\\n]+\\$|\\\\(frac|sqrt|sum)\\b/.test(t))")
        finally:
            browser.close()
    assert formulas >= 10 and raised and all(raised), (formulas, raised)
    assert raw_tex == []
    assert asked == [downloaded.as_uri()]


def grades_csv(term):
    return {r["student_id"]: r for r in csv.DictReader((term.instructor / "grades.csv").open(newline=""))}


def anomaly_report(term):
    return {r["student"]: r for r in csv.DictReader((term.instructor / f"anomalies-{LESSON}.csv").open(newline=""))
            if r["notebook"]}


def anomaly_page_row(term, student):
    page = (term.instructor / f"anomalies-{LESSON}.html").read_text()
    return re.search(rf"<tr[^>]*><td>{student}</td>.*?</tr>", page, re.S).group(0)


def canvas_scores(term):
    return {row[1]: row[5] for row in csv.reader((term.instructor / "canvas-grades.csv").open(newline=""))}


def feedback_page(term, student):
    return (term.instructor / "feedback" / student / LESSON / f"{LESSON}.html").read_text()


# ------------------------------------------------------- item 2: an extension honoured by every page and CSV

def test_an_extension_is_honoured_by_every_page_and_csv(term):
    """Canvas marks 10008 late (no time) and hal handed in 1 d late through the exchange; both have an extension
    of 2 d, so the gradebook gives no penalty, and nothing says late."""
    grades, report, canvas = grades_csv(term), anomaly_report(term), canvas_scores(term)
    for student in ("10008", "hal"):
        assert (grades[student]["late_submission_penalty"], grades[student]["score"]) == ("0.0", "13.0")
        assert "late" not in report[student]["anomalies"].split("; "), report[student]
        assert "extension of 2 d" in report[student]["details"] and report[student]["score"] == "13.0"
        row = anomaly_page_row(term, student)
        assert "<b>late</b>" not in row and "<td>13.0</td>" in row, row
        assert "Late submission penalty" not in feedback_page(term, student)
    assert canvas["10008"] == "13.0"
    # the report's score column is the grade, after any late penalty, for everyone
    assert {s: float(r["score"]) for s, r in report.items()} == {s: float(g["score"]) for s, g in grades.items()}


# ---------------------------------------- item 3: a penalty for Canvas's late mark, the same on both routes

def test_a_late_submission_loses_the_configured_fraction_on_both_routes(term):
    """10004: Canvas's LATE mark, no time (make grade from the export); gil: 1 d after the due date by the
    exchange's timestamp. Both perfect (13.0), both lose c.LatePenalty.fraction = 0.5 of it."""
    grades, report, canvas = grades_csv(term), anomaly_report(term), canvas_scores(term)
    for student in ("10004", "gil"):
        assert [grades[student][k] for k in ("raw_score", "late_submission_penalty", "score")] == [
            "13.0", "6.5", "6.5"], grades[student]
        assert "late" in report[student]["anomalies"].split("; ") and report[student]["score"] == "6.5"
        assert "<td>6.5</td>" in anomaly_page_row(term, student)
        assert "Late submission penalty (Score: -6.5)" in feedback_page(term, student)
    assert "marked late by Canvas" in report["10004"]["details"]
    assert "submitted 1 d after the due date (2026-11-05 10:00:00)" in report["gil"]["details"]
    assert canvas["10004"] == "6.5"
    assert "late" not in report["10001"]["anomalies"] and grades["10001"]["score"] == "13.0"


def test_an_extension_granted_after_grading_reaches_every_page_and_csv_at_the_next_make_grade(term, tmp_path):
    """On a copy of the graded term (the shared one stays as graded): 10004, penalised for Canvas's mark, is given
    an extension; `make grade` again grades nobody, and the penalty is gone from every file."""
    import shutil

    from nbgrader.api import Gradebook

    copy = Term(pathlib.Path(shutil.copytree(term.instructor.parent, tmp_path / "qkv", symlinks=True)) / "autograde",
                "", "")
    with Gradebook(f"sqlite:///{copy.instructor}/gradebook.db") as gb:
        gb.grant_extension(LESSON, "10004", days=2)
    done = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"], cwd=copy.instructor,
                          env=env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0 and "graded 0 submission(s)" in done.stdout, done.stdout + done.stderr[-3000:]
    grades, report = grades_csv(copy), anomaly_report(copy)
    assert [grades["10004"][k] for k in ("late_submission_penalty", "score")] == ["0.0", "13.0"]
    assert report["10004"]["anomalies"].split("; ") == ["extension"] and report["10004"]["score"] == "13.0"
    assert canvas_scores(copy)["10004"] == "13.0"
    assert "Late submission penalty" not in feedback_page(copy, "10004")
    assert grades["gil"]["score"] == "6.5"   # the others as they were


# ----------------------------- items 4-6: names on the reports, what is left to do, Canvas's own resubmission name

def test_the_report_shows_the_lms_name_beside_each_id(term):
    """Item 4: the name Canvas showed, next to the user id, on the page and in its CSV; the two smithjohns stay
    two rows, told apart by the id. A student of the exchange has no LMS name."""
    report = anomaly_report(term)
    assert {s: report[s]["name"] for s in ("10001", "10005", "10006", "gil")} == {
        "10001": "adaada", "10005": "smithjohn", "10006": "smithjohn", "gil": ""}
    assert "<td>10005</td><td>smithjohn</td>" in anomaly_page_row(term, "10005")


def test_a_blank_notebook_is_flagged_and_the_written_answers_left_to_grade_are_counted(term):
    """Item 5: 10002 handed the release in as it was (10007's blank first copy was replaced by the resubmission);
    every perfect student wrote the written answer, which waits for hand grading; the blank and partial ones wrote
    none (nbgrader gives an unchanged answer 0 without a grader)."""
    report = anomaly_report(term)
    assert [s for s, r in report.items() if "blank notebook" in r["anomalies"].split("; ")] == ["10002"]
    assert "  1 blank notebook(s): bobo (10002)" in term.stdout.splitlines()
    perfect = ["10001", "10004", "10005", "10007", "10008", "gil", "hal"]
    assert {s: r["hand_grading"] for s, r in report.items() if r["hand_grading"]} == dict.fromkeys(
        perfect, "written_trophy")
    waiting = ("7 written answers wait for hand grading (formgrader): adaada (10001), deedee (10004), "
               "smithjohn (10005), eded (10007), fayfay (10008), gil, hal.")
    assert f"  {waiting}" in term.stdout.splitlines()
    assert waiting in (term.instructor / f"anomalies-{LESSON}.html").read_text()


def test_canvas_resubmission_name_is_graded_without_a_flag(term):
    """Item 6: eded's `01-lookup-1.ipynb`, Canvas's name for the notebook uploaded again, is the notebook: the
    newer copy is graded, and no unexpected file name is reported (the older copy is named as skipped)."""
    report, grades = anomaly_report(term), grades_csv(term)
    assert grades["10007"]["score"] == "13.0"
    assert "unexpected file name" not in report["10007"]["anomalies"].split("; "), report["10007"]
    assert f"kept the newest, eded_10007_500008_{LESSON}-1.ipynb" in report["10007"]["details"]


def test_the_summary_line_says_the_start_up(term):
    """Item 8: make grade's summary line measures its start-up (lesson 01 runs no model: nothing to check)."""
    summary = next(line for line in term.stdout.splitlines() if line.startswith(f"{LESSON}: graded "))
    assert re.search(r"flagged in the anomaly report; start-up \d+\.\d s\.$", summary), summary
