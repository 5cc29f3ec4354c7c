"""Feedback pages and grades.csv, written by nbgrader's own code inside processes that are already running.

`nbgrader generate_feedback` and `nbgrader export` as subprocesses each paid nbgrader's start-up (imports, config
loading: ~2.5 s a process on the 2-core machine) before doing work measured in milliseconds (export) or a fraction
of a second per student (feedback: nbconvert's HTML exporter). Here the very same app classes run in-process,
initialized from the same argument list the command line would get, so they load the same config files
(autograde/nbgrader_config.py, the user's and the environment's) and write the same files:

- `generate(lesson, students, force)`: GenerateFeedbackApp's converter for the given students only. `make grade`
  runs it in the grading workers, which are warm and idle once grading is done, each for a disjoint share of the
  class (it only reads the gradebook), or in the coordinator when the workers are a remote Dask cluster that
  cannot see the gradebook or the autograded notebooks.
- `export_grades(to)`: ExportApp with its CSV plugin, in the coordinator.

`QkvGenerateFeedback` (both routes) also writes again the pages whose grades or comments changed since they were
written. `ReleaseFeedbackOfExchangeSubmissions` is `nbgrader release_feedback` for a class that handed in partly
through the LMS (nbgrader_config.py installs both).
"""
import glob
import hashlib
import json
import os
import shutil

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps.exportapp import ExportApp
from nbgrader.apps.generatefeedbackapp import GenerateFeedbackApp
from nbgrader.converters import GenerateFeedback, NbGraderException
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback


GRADES_DIGEST = "grades.sha256"  # next to each page: a digest of the gradebook entries the page shows


def grades_digest(gradebook, lesson, student):
    """A digest of everything of the gradebook a student's feedback page shows: each cell's automatic and hand
    score, extra credit and comments, and the late penalty."""
    submission = gradebook.find_submission(lesson, student)
    shown = [[notebook.name,
              sorted(([g.name, g.auto_score, g.manual_score, g.extra_credit] for g in notebook.grades), key=str),
              sorted(([c.name, c.auto_comment, c.manual_comment] for c in notebook.comments), key=str)]
             for notebook in submission.notebooks]
    shown = sorted(shown, key=str) + [submission.late_submission_penalty]
    return hashlib.sha256(json.dumps(shown, default=str).encode()).hexdigest()


class QkvGenerateFeedback(GenerateFeedback):
    """nbgrader's GenerateFeedback that also writes again the pages whose grades or comments changed in the
    gradebook (hand grading in formgrader) since they were written. nbgrader compares only the autograded
    notebook's timestamp, so a hand score or comment never reached the page without --force, which rewrites every
    page. Each page keeps the digest of what it shows (GRADES_DIGEST); nbgrader_config.py installs this class for
    `nbgrader generate_feedback`, and make grade uses it too."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.shown = {}  # student -> digest of the grades their page is written with

    def _digest(self, assignment_id, student_id):
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gradebook:
            try:
                return grades_digest(gradebook, assignment_id, student_id)
            except MissingEntry:  # not in the gradebook: nbgrader's own step for the page fails and says so
                return None

    def init_destination(self, assignment_id, student_id):
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        # read once, before nbgrader reads the grades for the page: a grade changed meanwhile is caught next time
        self.shown[student_id] = self._digest(assignment_id, student_id)
        if not self.force and os.path.isdir(dest):
            try:
                with open(os.path.join(dest, GRADES_DIGEST)) as f:
                    written = f.read().strip()
            except OSError:
                written = None  # a page written before digests, or by stock nbgrader: its grades are unknown
            if written != self.shown[student_id]:
                self.log.info("qkv: grades or comments of %s changed since the feedback was written: writing it "
                              "again", student_id)
                shutil.rmtree(dest)
        return super().init_destination(assignment_id, student_id)

    def set_permissions(self, assignment_id, student_id):
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        with open(os.path.join(dest, GRADES_DIGEST), "w") as f:  # nbgrader's last step: the page is written
            f.write(f"{self.shown[student_id]}\n")
        super().set_permissions(assignment_id, student_id)


class _FeedbackForStudents(QkvGenerateFeedback):
    """nbgrader's GenerateFeedback restricted to some students, noting which of them it wrote and which it skipped
    as up to date: nbgrader itself only logs a student whose feedback failed, and raises once at the end."""

    def __init__(self, students, **kwargs):
        super().__init__(**kwargs)
        self.students = set(students)
        self.written, self.up_to_date = set(), set()

    def init_destination(self, assignment_id, student_id):
        if student_id not in self.students:
            return False  # another process's share: what --CourseDirectory.student_id_exclude does, at this step too
        wanted = super().init_destination(assignment_id, student_id)
        if not wanted:
            self.up_to_date.add(student_id)
        return wanted

    def set_permissions(self, assignment_id, student_id):
        super().set_permissions(assignment_id, student_id)
        self.written.add(student_id)  # nbgrader's last step for a student whose every notebook was converted


def _app(app_class, argv):
    app = app_class()
    app.initialize(argv)
    return app


def generate(lesson, students, force):
    """Write feedback/<student>/<lesson>/ for `students`, as `nbgrader generate_feedback lesson [--force]` would;
    returns the students whose feedback failed (nbgrader logs why, to stderr)."""
    # ERROR: a failed student's traceback still reaches the terminal, but not the warnings nbgrader logs for routine
    # work ('Removing existing assignment' for every student under --force)
    app = _app(GenerateFeedbackApp, [lesson, "--log-level=ERROR"] + (["--force"] if force else []))
    app.coursedir.assignment_id = lesson  # what GenerateFeedbackApp.start does with its one argument
    converter = _FeedbackForStudents(students, coursedir=app.coursedir, parent=app)
    try:
        converter.start()
    except NbGraderException:
        pass  # raised after the failed students were logged, or when none has an autograded notebook: counted below
    return sorted(set(students) - converter.written - converter.up_to_date)


def graded_students(coursedir, lesson):
    """The students with an autograded notebook of `lesson`: those `nbgrader generate_feedback lesson` considers
    (in the course's layout, nbgrader's default <autograded>/<student>/<lesson>/, as grade_class assumes too)."""
    folders = glob.glob(coursedir.format_path(coursedir.autograded_directory, "*", lesson))
    return sorted(os.path.basename(os.path.dirname(os.path.normpath(folder))) for folder in folders
                  if glob.glob(os.path.join(folder, f"{coursedir.notebook_id}.ipynb")))


def export_grades(to="grades.csv"):
    """grades.csv exactly as `nbgrader export --to <to>` writes it (the course's plugin, exports.GradesCsvExport),
    from the current directory's course, then the grade files for the LMSs the students were collected from
    (exports.write_lms_files: canvas-grades.csv, moodle-grades-<lesson>.csv, next to it); returns their paths."""
    from nbgrader.api import Gradebook

    from qkv_autograde.reports.exports import canvas_headers, fill_in_names, lms_records, write_lms_files

    app = _app(ExportApp, ["--to", to, "--log-level=WARN"])
    with Gradebook(app.coursedir.db_url) as gb:  # the LMS's names first, so that grades.csv shows them too
        fill_in_names(gb, lms_records(app.coursedir))
    app.start()
    with Gradebook(app.coursedir.db_url) as gb:
        return write_lms_files(gb, app.coursedir, os.path.dirname(os.path.abspath(to)), canvas_headers(app.config))


class ReleaseFeedbackOfExchangeSubmissions(ExchangeReleaseFeedback):
    """nbgrader's release_feedback, for the students who handed in through the exchange. The exchange files a page
    under a hash of the secret `nbgrader submit` made; a submission collected from an LMS export has none, and
    nbgrader stopped at the first such student (FileNotFoundError: submission_secret.txt) with nothing released
    for anyone after them. Those students are skipped, by name: their page goes back through the LMS."""

    def copy_files(self):
        pages = glob.glob(os.path.join(self.src_path, "*.html"))
        without_secret = sorted({os.path.basename(os.path.dirname(os.path.dirname(page))) for page in pages
                                 if not os.path.isfile(os.path.join(os.path.dirname(page), "submission_secret.txt"))})
        if without_secret:
            self.log.warning("qkv: not released through the exchange (handed in another way, e.g. an LMS export, so "
                             "nbgrader has no submission secret for them): %s; their pages are in %s",
                             ", ".join(without_secret), self.coursedir.format_path(
                                 self.coursedir.feedback_directory, "<student>", self.coursedir.assignment_id))
        excluded = self.coursedir.student_id_exclude
        self.coursedir.student_id_exclude = ",".join(filter(None, [excluded, *without_secret]))
        try:
            super().copy_files()
        finally:
            self.coursedir.student_id_exclude = excluded
