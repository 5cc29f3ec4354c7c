"""Every CSV the course writes, and the grade files an instructor uploads back to the LMS.

Each cell goes through `spreadsheet_cell` and each file through `write_csv` (the csv module's quoting), so a
student id or name with a comma or a newline stays in its own cell, and a cell beginning with `= + - @`, a tab
or a carriage return is neutralised as OWASP recommends for CSV files opened in a spreadsheet (a leading single
quote): `=HYPERLINK(...)` reaches Excel as text, never as a formula.

- `GradesCsvExport`: grades.csv, nbgrader's own columns (`nbgrader export`, installed as ExportApp's plugin in
  nbgrader_config.py, and `make grade`), except that a student who handed nothing in has an EMPTY score, not 0.0:
  a blank notebook scores 0.0, a missing one "".
- `write_lms_files`: for the students collected from Canvas, `canvas-grades.csv` in Canvas's gradebook-import
  shape (Student, ID, SIS User ID, SIS Login ID, Section, one column per lesson; ID = the Canvas user id the
  download named, an empty cell = no grade, which Canvas leaves unchanged; a lesson's column is headed with
  Canvas's "Assignment name (id)" given once in the course config, `c.CanvasGrades.assignment_headers`, so the
  import updates that assignment instead of making a new one); for those from Moodle,
  `moodle-grades-<lesson>.csv`, Moodle's assignment grading worksheet (Identifier "Participant <id>", Grade
  empty when nothing was graded), uploaded with "Upload grading worksheet". Who came from which LMS is what
  intake recorded in submitted/<student>/<lesson>/.lms.json.
"""
import csv
import datetime
import glob
import json
import os
import re

from nbgrader.api import MissingEntry
from nbgrader.plugins import CsvExportPlugin
from traitlets import Dict, TraitError, Unicode, validate
from traitlets.config import Configurable

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GRADES_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                  "raw_score", "late_submission_penalty", "score", "max_score"]
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
# Canvas's gradebook export heads an assignment's column "<assignment name> (<assignment id>)"; an import matches
# columns to assignments by that header, and a column it does not know becomes a new assignment
CANVAS_HEADER = re.compile(r"[^\x00-\x1f\x7f]+ \(\d+\)")
MOODLE_COLUMNS = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                  "Grade can be changed", "Last modified (submission)", "Last modified (grade)", "Feedback comments"]


def spreadsheet_cell(value):
    """The cell as written: text that a spreadsheet would run as a formula gets a leading single quote (OWASP)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return "'" + text if isinstance(value, str) and text.startswith(FORMULA_START) else text


def write_csv(path, header, rows):
    """`rows` (lists of cells) under `header`, every cell through spreadsheet_cell, quoted by the csv module."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)  # RFC 4180 line ends: a cell holding a CR or LF is quoted
        out.writerow([spreadsheet_cell(h) for h in header])
        out.writerows([spreadsheet_cell(cell) for cell in row] for row in rows)


def canvas_header_refusal(lesson, header):
    """Why `header` cannot head `lesson`'s column of canvas-grades.csv (one sentence), or None when it can."""
    example = "such as \"Lesson 1: lookup (123456)\""
    if not isinstance(header, str) or not CANVAS_HEADER.fullmatch(header):
        return (f"c.CanvasGrades.assignment_headers[{lesson!r}] = {header!r} is not Canvas's \"Assignment name (id)\" "
                f"header: copy it from the first row of a gradebook export from Canvas, {example}.")
    if header.startswith(FORMULA_START):
        return (f"c.CanvasGrades.assignment_headers[{lesson!r}] = {header!r} starts like a spreadsheet formula, so it "
                f"would be written with a leading quote that Canvas would not match: rename the assignment in Canvas.")
    return None


class CanvasGrades(Configurable):
    """How canvas-grades.csv names each lesson's column (course config: `c.CanvasGrades.assignment_headers`)."""

    assignment_headers = Dict(key_trait=Unicode(), help=(
        "{lesson: Canvas's \"Assignment name (id)\" header of its column}, e.g. {\"01-lookup\": \"Lesson 1: lookup "
        "(123456)\"}, copied once from a gradebook export from Canvas; a lesson without one keeps its own name, "
        "which Canvas imports as a new assignment.")).tag(config=True)

    @validate("assignment_headers")
    def _headers_canvas_can_match(self, proposal):
        headers = proposal["value"]
        for lesson, header in headers.items():
            refusal = canvas_header_refusal(lesson, header)
            if refusal:
                raise TraitError(refusal)
        shared = sorted(h for h in set(headers.values()) if list(headers.values()).count(h) > 1)
        if shared:
            raise TraitError(f"c.CanvasGrades.assignment_headers gives {shared[0]!r} to more than one lesson, so "
                             f"Canvas would import their grades into one assignment.")
        return headers


def canvas_headers(config):
    """The validated `c.CanvasGrades.assignment_headers` of `config`; a malformed one stops with its reason."""
    try:
        return dict(CanvasGrades(config=config).assignment_headers)
    except TraitError as refusal:
        raise SystemExit(f"qkv grader: {refusal}") from None


def final_score(submission):
    """What the student earned after nbgrader's late penalty (as nbgrader's export computes it)."""
    return max(0.0, submission.score - (submission.late_submission_penalty or 0.0))


def _score_or_missing(gradebook, lesson, student):
    try:
        return final_score(gradebook.find_submission(lesson, student))
    except MissingEntry:
        return None  # handed nothing in: not a 0


class GradesCsvExport(CsvExportPlugin):
    """nbgrader's CsvExportPlugin, written with the csv module and neutralised cells, missing distinct from 0."""

    def export(self, gradebook):
        dest = self.to or "grades.csv"
        students, lessons = [str(s) for s in self.student], [str(a) for a in self.assignment]
        rows = []
        for assignment in gradebook.assignments:
            if lessons and assignment.name not in lessons:
                continue
            for student in gradebook.students:
                if students and student.id not in students:
                    continue
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                    graded = [submission.timestamp, submission.score, submission.late_submission_penalty,
                              final_score(submission)]
                except MissingEntry:
                    graded = ["", "", "", ""]
                rows.append([assignment.name, assignment.duedate, graded[0], student.id, student.last_name,
                             student.first_name, student.email, *graded[1:], assignment.max_score])
        self.log.info("Exporting grades to %s", dest)
        write_csv(dest, GRADES_COLUMNS, rows)


def lms_records(coursedir):
    """{(student, lesson): record} from the `.lms.json` files intake wrote into submitted/."""
    from qkv_autograde.intake.lms_names import LMS_RECORD, valid_student_id

    found = {}
    pattern = coursedir.format_path(coursedir.submitted_directory, "*", "*")
    for folder in sorted(glob.glob(os.path.join(pattern, LMS_RECORD))):
        lesson_folder = os.path.dirname(folder)
        student = os.path.basename(os.path.dirname(lesson_folder))
        try:
            with open(folder, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and valid_student_id(student):
            found[(student, os.path.basename(lesson_folder))] = record
    return found


def fill_in_names(gradebook, records):
    """The LMS's name of each collected student into nbgrader's Student, where nbgrader has none yet."""
    for (student, _), record in sorted(records.items()):
        name = record.get("name")
        if not isinstance(name, str) or not name:
            continue
        try:
            known = gradebook.find_student(student)
        except MissingEntry:
            continue  # not graded: nbgrader adds students as it grades them
        if not (known.first_name or known.last_name):
            first, _, last = name.rpartition(" ")
            gradebook.update_or_create_student(student, first_name=first or None, last_name=last)


def canvas_rows(gradebook, records, headers=None):
    """Canvas's gradebook-import rows: one per Canvas student, one column per lesson (empty = no grade), headed
    by `headers` ({lesson: Canvas's "Assignment name (id)"}) where given."""
    lessons = [a.name for a in gradebook.assignments]
    students = sorted({s for (s, _), r in records.items() if r.get("lms") == "canvas"}, key=_numeric_first)
    points = ["Points Possible", "", "", "", ""] + [a.max_score for a in gradebook.assignments]
    rows = [points]
    for student in students:
        name = next((r.get("name") for (s, _), r in sorted(records.items()) if s == student and r.get("name")), "")
        scores = [_score_or_missing(gradebook, lesson, student) for lesson in lessons]
        rows.append([name, student, "", "", ""] + ["" if score is None else score for score in scores])
    return CANVAS_COLUMNS + [(headers or {}).get(lesson, lesson) for lesson in lessons], rows


def moodle_rows(gradebook, records, lesson):
    """Moodle's grading worksheet for one assignment (participant ids are per assignment in Moodle)."""
    try:
        max_score = gradebook.find_assignment(lesson).max_score
    except MissingEntry:
        return MOODLE_COLUMNS, []
    now = datetime.datetime.now().strftime("%A, %d %B %Y, %I:%M %p")
    rows = []
    for (student, where), record in sorted(records.items(), key=lambda item: _numeric_first(item[0][0])):
        if where != lesson or record.get("lms") != "moodle":
            continue
        score = _score_or_missing(gradebook, lesson, student)
        rows.append([f"Participant {student}", record.get("name", ""), "", "",
                     "" if score is None else f"{score:.2f}", f"{max_score:.2f}", "Yes", "", now, ""])
    return MOODLE_COLUMNS, rows


def _numeric_first(student):
    return (0, int(student), "") if student.isdigit() else (1, 0, student)


def write_lms_files(gradebook, coursedir, folder=".", canvas_headers=None):
    """canvas-grades.csv (its columns headed by `canvas_headers` where given) and moodle-grades-<lesson>.csv for
    the students collected from those LMSs; returns the paths written (none when no student came from an LMS)."""
    records = lms_records(coursedir)
    written = []
    if any(r.get("lms") == "canvas" for r in records.values()):
        path = os.path.join(folder, "canvas-grades.csv")
        write_csv(path, *canvas_rows(gradebook, records, canvas_headers))
        written.append(path)
    for lesson in sorted({lesson for (_, lesson), r in records.items() if r.get("lms") == "moodle"}):
        path = os.path.join(folder, f"moodle-grades-{lesson}.csv")
        write_csv(path, *moodle_rows(gradebook, records, lesson))
        written.append(path)
    return written
