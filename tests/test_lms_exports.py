"""Real-shaped Canvas, Moodle and Blackboard downloads, and the files that go back (issues 19.2, 19.4, 21.1-21.3,
21.10): the student is the LMS's user id, taken only from the export's top-level names (never from inside a
student's upload); ids outside the documented character set are refused; lateness reaches nbgrader and the
report; every CSV is quoted and spreadsheet-safe; grades go back keyed by the LMS id, missing distinct from 0.

The shapes, as the LMSs name their downloads:
  Canvas      <sortablename>_[LATE_]<user id>_<attachment id>_<file>   (files at the top; a zip stays a zip)
  Moodle      <Full Name>_<participant id>_assignsubmission_file_/<file>  (or ..._file_<file> without folders)
  Blackboard  <assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<file>, plus a .txt receipt per attempt
"""
import csv
import datetime
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

from lessons import ROOT, copy_course, solved_release
# course is a pytest fixture, imported for pytest to find and taken as test arguments
# (hence noqa F401 here and F811 on the tests that take it)
from test_class_intake import (course, entry, lms_record, make_zip, names, notebook_bytes, submitted,  # noqa: F401
                               tag_of, zip_bytes)

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.reports import exports  # noqa: E402
from qkv_autograde.intake import lms_export, late, submissions  # noqa: E402

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
NB = f"{LESSON}.ipynb"


def receipt(full_name, username, when):
    return (f"Name: {full_name} ({username})\nAssignment: Lesson 1\nDate Submitted: {when}\nCurrent Grade: Needs "
            f"Grading\n\nSubmission Field:\nThere is no student submission text data for this assignment.\n\n"
            f"Comments:\nThere are no student comments for this assignment.\n\nFiles:\n\tOriginal filename: {NB}\n"
            f"\tFilename: Lesson 1_{username}_attempt_{when}_{NB}\n").encode()


@pytest.fixture
def with_gradebook(course, monkeypatch):  # noqa: F811
    """The course with a gradebook (nbgrader makes a new one with the `alembic` command of the environment)."""
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    from nbgrader.api import Gradebook

    url = f"sqlite:///{course}/gradebook.db"
    with Gradebook(url) as gb:
        gb.update_or_create_assignment(LESSON, duedate=datetime.datetime(2026, 11, 5, 10, 0, 0))
    return url


# ----------------------------------------------------------------------------------------- identity (19.2, 21.1)

def test_a_file_inside_a_students_upload_never_names_another_student(course, tmp_path):  # noqa: F811
    """Mallory's uploaded zip holds a file named as Canvas names the victim's submission, dated later: it stays
    Mallory's, and the victim keeps their own notebook."""
    mallory_upload = zip_bytes([entry(f"victim_9_99999999_{NB}", notebook_bytes("mallory's forgery"),
                                      date=(2026, 12, 31, 23, 59, 0)),
                                entry("submission_metadata.yml", b"submission_1:\n  :submitters:\n  - :sid: '9'\n"),
                                entry(f"submission_1/{NB}", notebook_bytes("forgery 2"))])
    export = make_zip(tmp_path / "submissions.zip", [
        entry(f"victim_9_500_{NB}", notebook_bytes("the victim's own"), date=(2026, 11, 1, 9, 0, 0)),
        entry("mallory_66_501_work.zip", mallory_upload, date=(2026, 11, 1, 10, 0, 0)),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert tag_of(course / "submitted" / "9" / LESSON / NB) == "answer = \"the victim's own\""
    assert sorted(os.listdir(course / "submitted")) == ["66", "9"]
    assert "duplicate submission" not in names(notes, "9")
    forged = [n for n in notes if n["student"] == "66" and "another student" in n["detail"]]
    assert len(forged) == 1 and "(9)" in forged[0]["detail"], notes
    assert not (course / "submitted" / "66" / LESSON / "timestamp.txt").exists()


@pytest.mark.parametrize("bad", ["x,,,,13.0,0.0,13.0", "=HYPERLINK(\"evil\")", "a\nb", "+1", "-1", "@SUM(A1)",
                                 "John Smith", "a" * 65])
def test_an_id_outside_the_documented_characters_is_refused_with_a_reason(course, tmp_path, bad):  # noqa: F811
    export = make_zip(tmp_path / "ids.zip", [
        entry(f"{bad}/{NB}"),                                                  # nbgrader's submitted/ shape
        entry(f"Lesson 1_{bad.replace('_', '')}_attempt_2026-11-05-10-00-00_{NB}"),   # a Blackboard username
        entry(f"alice/{NB}"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert sorted(os.listdir(course / "submitted")) == ["alice"]
    refused = [n for n in notes if n["name"] == "refused student id"]
    assert len(refused) == 2 and all(n["student"] == "" and "is not a student id" in n["detail"] for n in refused)
    assert all("\n" not in n["detail"] for n in notes)


def test_a_refused_folder_in_submitted_is_named_by_staging(course):  # noqa: F811
    for student in ("x,,,,13.0,0.0,13.0", "=cmd", "ok"):
        folder = course / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        (folder / NB).write_bytes(notebook_bytes(student))
    staged = submissions.stage(str(course), "submitted", LESSON, [LESSON], str(course.parent / "notebooks" / LESSON))
    assert [(s.student, s.refused, [a["name"] for a in s.anomalies]) for s in staged] == [
        ("=cmd", True, ["refused student id"]), ("ok", False, []),
        ("x,,,,13.0,0.0,13.0", True, ["refused student id"])]
    assert sorted(os.listdir(course / ".staged")) == ["ok"]


def test_two_canvas_students_with_the_same_name_stay_two(course, tmp_path):  # noqa: F811
    export = make_zip(tmp_path / "submissions.zip", [
        entry(f"smithjohn_10000_555001_{NB}", notebook_bytes("john 10000")),
        entry(f"smithjohn_20999_555002_{NB}", notebook_bytes("john 20999")),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert notes == []
    assert tag_of(course / "submitted" / "10000" / LESSON / NB) == "answer = 'john 10000'"
    assert tag_of(course / "submitted" / "20999" / LESSON / NB) == "answer = 'john 20999'"
    assert lms_record(course, "20999") == {"lms": "canvas", "user_id": "20999", "name": "smithjohn",
                                           "attachment_id": "555002"}


def test_moodle_full_names_with_spaces_and_the_participant_id(course, tmp_path):  # noqa: F811
    export = make_zip(tmp_path / "moodle.zip", [
        entry(f"John Smith_1001_assignsubmission_file_/{NB}", notebook_bytes("1001")),   # "in folders"
        entry(f"John Smith_1002_assignsubmission_file_{NB}", notebook_bytes("1002")),    # without folders
        entry("Ann Lee_1003_assignsubmission_onlinetext_onlinetext.html", b"<p>see my notebook</p>"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert tag_of(course / "submitted" / "1001" / LESSON / NB) == "answer = '1001'"
    assert tag_of(course / "submitted" / "1002" / LESSON / NB) == "answer = '1002'"
    assert lms_record(course, "1001") == {"lms": "moodle", "user_id": "1001", "name": "John Smith"}
    assert [(n["student"], n["name"]) for n in notes] == [("1003", "not a notebook")]


def test_blackboard_receipts_are_read_for_the_name_and_skipped(course, tmp_path):  # noqa: F811
    people = [("Ann Lee", "alee"), ("Bo Wu", "bwu"), ("Cy Day", "cday")]
    export = make_zip(tmp_path / "gradebook.zip", [
        item for full, user in people for item in (
            entry(f"Lesson 1_{user}_attempt_2026-11-04-10-00-00_{NB}", notebook_bytes(user)),
            entry(f"Lesson 1_{user}_attempt_2026-11-04-10-00-00.txt", receipt(full, user, "2026-11-04-10-00-00")))])
    assert lms_export.collect(export, course, LESSON) == []
    for full, user in people:
        assert submitted(course, user) == [NB, "timestamp.txt"]
        assert lms_record(course, user) == {"lms": "blackboard", "user_id": user, "name": full,
                                            "timestamp": "2026-11-04 10:00:00"}


# ---------------------------------------------------------------------------------------------- lateness (21.2)

def test_lateness_reaches_the_timestamp_and_the_report(course, tmp_path, with_gradebook):  # noqa: F811
    export = make_zip(tmp_path / "mixed.zip", [
        entry(f"smithjohn_LATE_20999_1_{NB}"),                                   # Canvas, newer spelling
        entry(f"doejane_late_30000_2_{NB}"),                                     # Canvas, older spelling
        entry(f"smithjohn_10000_3_{NB}"),                                        # on time
        entry(f"Lesson 1_alee_attempt_2026-11-05-11-30-00_{NB}"),                # Blackboard, 1 h 30 min late
        entry(f"Lesson 1_bwu_attempt_2026-11-05-09-00-00_{NB}"),                 # Blackboard, early
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert sorted((n["student"], n["name"]) for n in notes) == [("20999", "late"), ("30000", "late"), ("alee", "late")]
    assert (course / "submitted" / "alee" / LESSON / "timestamp.txt").read_text().startswith("2026-11-05 11:30:00")
    # what the report and the penalty judge by (late.py): Canvas's mark where the LMS gave no time; a time goes to
    # timestamp.txt, which nbgrader judges against the due date and the student's extension
    marks = {s: late.lms_mark(course / "submitted" / s / LESSON) for s in ("10000", "20999", "30000", "alee", "bwu")}
    assert marks == {"10000": None, "20999": "marked late by Canvas (its download gives no time)",
                     "30000": "marked late by Canvas (its download gives no time)", "alee": None, "bwu": None}
    from nbgrader.api import Gradebook
    with Gradebook(with_gradebook) as gb:   # the name the LMS shows, for nbgrader's formgrader and grades.csv
        assert gb.find_student("20999").last_name == "smithjohn"


# ----------------------------------------------------------------------------------- safe exports (19.4, 21.3)

def test_every_cell_is_quoted_and_neutralised(tmp_path):
    from qkv_autograde.reports import exports

    cells = ["x,,,,13.0,0.0,13.0", "=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "a\nb", 'say "hi"', 13.0, -1.5, None]
    exports.write_csv(tmp_path / "cells.csv", ["h"] * len(cells), [cells])
    header, row = list(csv.reader((tmp_path / "cells.csv").open(newline="")))
    assert row == ["x,,,,13.0,0.0,13.0", "'=1+1", "'+1", "'-2", "'@SUM(A1)", "'\tx", "'\rx", "a\nb", 'say "hi"',
                   "13.0", "-1.5", ""]


def test_grades_and_lms_files_keep_missing_apart_from_zero(course, tmp_path, with_gradebook):  # noqa: F811
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory
    from qkv_autograde.reports import exports

    export = make_zip(tmp_path / "canvas.zip", [entry(f"smithjohn_10000_1_{NB}"), entry(f"smithjohn_20999_2_{NB}")])
    lms_export.collect(export, course, LESSON)
    moodle = make_zip(tmp_path / "moodle.zip", [entry(f"John Smith_1001_assignsubmission_file_/{NB}"),
                                                 entry(f"Ann Lee_1003_assignsubmission_file_/{NB}")])
    lms_export.collect(moodle, course, LESSON)  # the same lesson again, from another LMS: only what is new is replaced
    coursedir = CourseDirectory(root=str(course), release_directory="../notebooks")
    with Gradebook(with_gradebook) as gb:
        for student in ("10000", "1001", "=cmd", "x,,,,13.0,0.0,13.0"):
            gb.update_or_create_student(student)
        gb.add_submission(LESSON, "10000")          # a blank notebook: 0.0; 20999 and 1003 were never graded
        gb.add_submission(LESSON, "1001")
        exports.fill_in_names(gb, exports.lms_records(coursedir))
        exports.GradesCsvExport(to=str(course / "grades.csv")).export(gb)
        written = exports.write_lms_files(gb, coursedir, str(course))
    rows = list(csv.DictReader((course / "grades.csv").open(newline="")))
    assert sorted((r["student_id"], r["score"], r["last_name"]) for r in rows) == [
        ("'=cmd", "", ""), ("10000", "0.0", "smithjohn"), ("1001", "0.0", "Smith"), ("1003", "", "Lee"),
        ("20999", "", "smithjohn"), ("x,,,,13.0,0.0,13.0", "", "")]   # missing: "", a blank notebook: 0.0
    assert sorted(os.path.basename(p) for p in written) == ["canvas-grades.csv", f"moodle-grades-{LESSON}.csv"]
    canvas = list(csv.reader((course / "canvas-grades.csv").open(newline="")))
    assert canvas == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", LESSON],
                      ["Points Possible", "", "", "", "", "0.0"],
                      ["smithjohn", "10000", "", "", "", "0.0"], ["smithjohn", "20999", "", "", "", ""]]
    moodle_rows = list(csv.DictReader((course / f"moodle-grades-{LESSON}.csv").open(newline="")))
    assert [(r["Identifier"], r["Full name"], r["Grade"]) for r in moodle_rows] == [
        ("Participant 1001", "John Smith", "0.00"), ("Participant 1003", "Ann Lee", "")]


# ------------------------------------------------------------------------------- end to end, through make grade

def test_a_canvas_class_through_make_grade_to_exact_grade_files(tmp_path):
    """Two smithjohns (one perfect, one blank and late), Mallory impersonating the perfect one from inside her
    zip, an id that is a formula: `python -m qkv_autograde 01-lookup --submissions export.zip`."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    instructor = copy_course(tmp_path / "course")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env,
                   check=True, capture_output=True)
    blank = nbformat.writes(solved_release(LESSON, [])).encode()
    export = make_zip(tmp_path / "submissions.zip", [
        entry(f"smithjohn_10000_555001_{NB}", nbformat.writes(solved_release(LESSON)).encode(),
              date=(2026, 11, 1, 9, 0, 0)),
        entry(f"smithjohn_LATE_20999_555002_{NB}", blank),
        entry("mallory_30000_555003_work.zip", zip_bytes([entry(f"smithjohn_10000_99999999_{NB}", blank,
                                                                 date=(2026, 12, 31, 0, 0, 0))])),
        entry(f"=cmd/{NB}", blank),
    ])
    done = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--submissions", str(export), "--jobs", "2"],
                          cwd=instructor, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.reader((instructor / "grades.csv").open(newline="")))
    assert rows[0] == exports_columns()
    assert sorted((r[3], r[4], r[7], r[9], r[10]) for r in rows[1:]) == [
        ("10000", "smithjohn", "13.0", "13.0", "15.0"), ("20999", "smithjohn", "0.0", "0.0", "15.0"),
        ("30000", "mallory", "0.0", "0.0", "15.0")]   # 15: 13 autograded and a written answer graded by hand
    canvas = list(csv.reader((instructor / "canvas-grades.csv").open(newline="")))
    assert canvas[1] == ["Points Possible", "", "", "", "", "15.0"]
    assert canvas[2:] == [["smithjohn", "10000", "", "", "", "13.0"], ["smithjohn", "20999", "", "", "", "0.0"],
                          ["mallory", "30000", "", "", "", "0.0"]]
    report = {r["student"]: r for r in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open(newline=""))}
    assert "late" in report["20999"]["anomalies"] and "marked late by Canvas" in report["20999"]["details"]
    assert "another student" in report["30000"]["details"] and "late" not in report["10000"]["anomalies"]
    assert "refused student id" in report[""]["anomalies"] and "'=cmd'" in report[""]["details"]


def exports_columns():
    return ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
            "late_submission_penalty", "score", "max_score"]


# ------------------------------------------------------------------ Canvas's column header, from config (35.7)

def test_canvas_columns_are_headed_by_the_configured_assignment_header_and_others_keep_their_name():
    from types import SimpleNamespace
    records = {("10000", LESSON): {"lms": "canvas", "name": "smithjohn"}}
    gradebook = SimpleNamespace(assignments=[SimpleNamespace(name=LESSON, max_score=15.0),
                                             SimpleNamespace(name="02-attention", max_score=10.0)],
                                find_submission=lambda lesson, student: SimpleNamespace(
                                    score=13.0 if lesson == LESSON else 7.0, late_submission_penalty=None))
    header, _ = exports.canvas_rows(gradebook, records, {LESSON: "Lesson 1: lookup (123456)"})
    assert header[5:] == ["Lesson 1: lookup (123456)", "02-attention"]


@pytest.mark.parametrize("header, reason", [
    ("Lesson 1", "is not Canvas's \"Assignment name (id)\" header"),
    ("Lesson 1 (12a)", "is not Canvas's \"Assignment name (id)\" header"),
    ("Lesson 1\n(123456)", "is not Canvas's \"Assignment name (id)\" header"),
    (123456, "is not Canvas's \"Assignment name (id)\" header"),
    ("=HYPERLINK(1) (123456)", "starts like a spreadsheet formula")])
def test_a_malformed_canvas_header_in_config_is_refused_in_one_sentence(header, reason):
    from traitlets.config import Config
    config = Config()
    config.CanvasGrades.assignment_headers = {LESSON: header}
    with pytest.raises(SystemExit) as refused:
        exports.canvas_headers(config)
    message = str(refused.value)
    assert reason in message and repr(LESSON) in message and message.count(". ") == 0, message


def test_one_canvas_header_for_two_lessons_is_refused():
    from traitlets.config import Config
    config = Config()
    config.CanvasGrades.assignment_headers = {LESSON: "Lesson 1 (1)", "02-attention": "Lesson 1 (1)"}
    with pytest.raises(SystemExit, match="more than one lesson"):
        exports.canvas_headers(config)
    config.CanvasGrades.assignment_headers = {LESSON: "Lesson 1 (1)", "02-attention": "Lesson 2 (2)"}
    assert exports.canvas_headers(config) == {LESSON: "Lesson 1 (1)", "02-attention": "Lesson 2 (2)"}


# --------------------------------------------------------- late: the extension, the time, the LMS's mark (35.2, 35.3)

DUE_AT = datetime.datetime(2026, 11, 5, 10, 0, 0)
CANVAS_MARK = "marked late by Canvas (its download gives no time)"


@pytest.mark.parametrize("timestamp, extension_days, mark, expected", [
    (DUE_AT + datetime.timedelta(days=1), 0, None, (True, "submitted 1 d after the due date (2026-11-05 10:00:00)")),
    (DUE_AT + datetime.timedelta(days=1), 2, None,
     (False, "submitted 1 d after the due date (2026-11-05 10:00:00), within its extension of 2 d: not late")),
    (DUE_AT + datetime.timedelta(days=3), 2, None,
     (True, "submitted 1 d after the due date with its extension of 2 d (2026-11-07 10:00:00)")),
    (DUE_AT - datetime.timedelta(hours=1), 0, None, (False, None)),
    (None, 0, CANVAS_MARK, (True, CANVAS_MARK)),
    (None, 2, CANVAS_MARK, (False, f"{CANVAS_MARK}, but an extension of 2 d is granted: not penalised (Canvas's mark "
                                   f"counts from its own due date, with no time to compare)")),
    (None, 0, None, (False, None))])
def test_lateness_is_judged_against_the_due_date_and_the_extension(timestamp, extension_days, mark, expected):
    extension = datetime.timedelta(days=extension_days) if extension_days else None
    assert tuple(late.verdict(timestamp, DUE_AT, extension, mark)) == expected


def test_a_late_penalty_is_a_fraction_of_the_score_or_nbgraders_zero():
    from traitlets.config import Config
    config = Config()
    assert late.LatePenalty(config=config).late_submission_penalty("s", 13.0, None) is None   # none by default
    config.LatePenalty.fraction = 0.5
    assert late.LatePenalty(config=config).late_submission_penalty("s", 13.0, None) == 6.5   # Canvas's mark
    assert late.LatePenalty(config=config).late_submission_penalty("s", 13.0, 86400.0) == 6.5
    config.LateSubmissionPlugin.penalty_method = "zero"                                    # README's older recipe
    assert late.LatePenalty(config=config).late_submission_penalty("s", 13.0, None) == 13.0


def test_an_extension_granted_after_grading_takes_the_penalty_off_without_regrading(tmp_path, monkeypatch):
    """make grade reapplies every graded notebook's penalty from the gradebook as it is, before grading."""
    from nbgrader.api import Gradebook
    from traitlets.config import Config

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # nbgrader's alembic
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.db_url = f"sqlite:///{tmp_path}/gradebook.db"
    config.LatePenalty.fraction = 0.5
    with Gradebook(config.CourseDirectory.db_url) as gb:
        gb.add_assignment(LESSON, duedate=DUE_AT)
        gb.add_notebook(LESSON, LESSON)
        gb.add_grade_cell("test_softmax", LESSON, LESSON, max_score=4, cell_type="code")
        gb.add_student("gil")
        gb.add_submission(LESSON, "gil", timestamp=DUE_AT + datetime.timedelta(days=1))
        gb.find_grade("test_softmax", LESSON, LESSON, "gil").auto_score = 4
        gb.db.commit()

    def penalty():
        with Gradebook(config.CourseDirectory.db_url) as gb:
            return gb.find_submission_notebook(LESSON, LESSON, "gil").late_submission_penalty

    late.AssignLatePenaltiesHonouringTheLmsMark(config=config).reapply(LESSON)
    assert penalty() == 2.0
    with Gradebook(config.CourseDirectory.db_url) as gb:
        gb.grant_extension(LESSON, "gil", days=2)
    late.AssignLatePenaltiesHonouringTheLmsMark(config=config).reapply(LESSON)
    assert penalty() is None


def test_readmes_extension_command_grants_one_before_the_student_is_graded(tmp_path, monkeypatch):
    """README's 'Late work' grants an extension with nbgrader's API; run as written (but with this environment's
    Python), on a gradebook where the student was never graded."""
    from nbgrader.api import Gradebook

    readme = (ROOT / "README.md").read_text()
    command = readme[readme.index("*Extensions*"):].split("```sh\n", 1)[1].split("\n```", 1)[0]
    (tmp_path / "autograde").mkdir()
    url = f"sqlite:///{tmp_path}/autograde/gradebook.db"
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # nbgrader's alembic
    with Gradebook(url) as gb:
        gb.add_assignment(LESSON, duedate=DUE_AT)
    subprocess.run(["bash", "-c", command.replace("../.venv/bin/python", sys.executable)], cwd=tmp_path, check=True)
    with Gradebook(url) as gb:
        submission = gb.find_submission(LESSON, "20999")
        assert submission.extension == datetime.timedelta(days=2)
        assert submission.duedate == DUE_AT + datetime.timedelta(days=2)
