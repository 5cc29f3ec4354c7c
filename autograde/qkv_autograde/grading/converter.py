"""`nbgrader autograde`, with the class-level steps nbgrader has no setting for.

Before grading: the lesson is recorded in the gradebook if it is not yet (a fresh clone, where nobody has run
`generate_assignment`), and the submissions are staged (submissions.py). Per student: a destination that lacks the
"graded completely" stamp (a run killed half-way) is graded again instead of being skipped, which is what made a
rerun export a silent 0; and a notebook whose grading raises, whatever the reason, is graded 0 with the anomaly
`grading error` instead of stopping the class (nbgrader would drop the student and exit 1 at the end). After
grading: the anomaly report (report.py). nbgrader_config.py installs this class in place of nbgrader's Autograde,
so instructors keep typing the stock command.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import Autograde, NbGraderException

from qkv_autograde.grading import bulk_grading
from qkv_autograde.reports import report
from qkv_autograde.intake import submissions


def completely_graded(folder):
    notebooks = glob.glob(os.path.join(folder, "*.ipynb"))
    return bool(notebooks) and all(_stamped(p) for p in notebooks)


def _stamped(path):
    try:
        meta = nbformat.read(path, as_version=4).metadata.get("qkv", {})
    except Exception:  # cut short while being written: not graded, so graded again
        return False
    return isinstance(meta, dict) and meta.get("graded") is True


def ensure_in_gradebook(coursedir, lesson, log):
    """nbgrader grades only an assignment its gradebook knows, and only `generate_assignment` records one: in a fresh
    clone `nbgrader autograde 05-heads` stopped with "No assignment with ID '05-heads' exists in the database". The
    lesson is generated once here, into a scratch release folder: notebooks/ is committed and stays as it is."""
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        try:
            if gb.find_assignment(lesson).notebooks:
                return False
        except MissingEntry:
            pass
    log.warning("qkv grader: %s is not in the gradebook yet: recording it (nbgrader generate_assignment)", lesson)
    with tempfile.TemporaryDirectory(prefix="qkv-release-") as scratch:
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nbgrader"), "generate_assignment",
                               lesson, f"--CourseDirectory.release_directory={os.path.join(scratch, 'release')}",
                               f"--CourseDirectory.db_url={coursedir.db_url}", "--log-level=WARN"],
                              cwd=coursedir.root, capture_output=True, text=True)
    if done.returncode != 0:
        message = f"could not record {lesson} in the gradebook (`nbgrader generate_assignment {lesson}` failed):"
        log.error("qkv grader: %s\n%s", message, done.stderr[-2000:])
        raise NbGraderException(message)
    return True


def graded_as_zero(coursedir, lesson, student, notebook, release_folder, why, log):
    """The last resort for a notebook whose grading raised: every graded cell scores 0 (as nbgrader does for a
    missing notebook) and the autograded copy is the blank assignment with a note on top, stamped as graded and
    carrying the staged anomalies and `grading error`, so the report names it, feedback shows it, a rerun keeps it."""
    anomalies = _staged_anomalies(coursedir, lesson, student, notebook)
    anomalies.append({"name": "grading error", "detail": why[:500]})
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        submission = gb.find_submission_notebook(notebook, lesson, student)
        for grade in submission.grades:
            grade.auto_score = 0
            grade.needs_manual_grade = False
        gb.db.commit()
    nb = nbformat.read(os.path.join(release_folder, f"{notebook}.ipynb"), as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(
        "**The grader could not grade the notebook you handed in.** It scored 0 and your instructor has been told "
        "why; ask them to look at it."))
    nb.metadata["qkv"] = {"anomalies": anomalies, "graded": True}
    destination = coursedir.format_path(coursedir.autograded_directory, student, lesson)
    os.makedirs(destination, exist_ok=True)
    nbformat.write(nb, os.path.join(destination, f"{notebook}.ipynb"))
    log.error("qkv grader: %s's %s could not be graded (%s): graded 0, named in the report", student, notebook, why)


def _staged_anomalies(coursedir, lesson, student, notebook):
    try:
        path = os.path.join(coursedir.root, submissions.STAGED, student, lesson, f"{notebook}.ipynb")
        found = nbformat.read(path, as_version=4).metadata["qkv"]["anomalies"]
        return [a for a in found if isinstance(a, dict) and {"name", "detail"} <= set(a)]
    except Exception:
        return []


class QkvAutograde(Autograde):
    staged_already = None  # make grade's [Staged] of this run (grade_class.prefetch staged the class before grading)
    observer = None  # make grade's pages.AsGraded: told of each student graded, and of the pass's end

    def start(self):
        lesson = self.coursedir.assignment_id
        release, notebooks = submissions.released(self.coursedir, lesson)
        ensure_in_gradebook(self.coursedir, lesson, self.log)
        self.release_folder = release
        self.regraded = {}
        staged, QkvAutograde.staged_already = QkvAutograde.staged_already, None  # taken by this one pass
        self.staged = staged if staged is not None else submissions.stage(
            self.coursedir.root, self.coursedir.submitted_directory, lesson, notebooks, release,
            self.coursedir.student_id, submissions.NotebookLimits(parent=self))
        for entry in self.staged:
            if entry.refused:
                self.log.warning("qkv grader: refused %r: %s", entry.student, entry.anomalies[0]["detail"])
        submitted = self.coursedir.submitted_directory
        self.coursedir.submitted_directory = submissions.STAGED
        try:
            with bulk_grading.connections_kept():
                super().start()
            if self.observer is not None:  # the gradebook is complete: before the report, which takes a while
                self.observer.pass_done()
        finally:
            self.coursedir.submitted_directory = submitted
            table = report.write(self.coursedir.root, self.coursedir.db_url, lesson, self.staged, self.regraded)
            flagged = [r for r in table if r["anomalies"]]
            self.log.info("qkv grader: anomaly report for %d submissions (%d flagged): %s", len(table), len(flagged),
                          os.path.join(self.coursedir.root, f"anomalies-{lesson}.html"))

    def init_assignment(self, assignment_id, student_id):
        self.grading = (assignment_id, student_id)  # for the last resort below, which nbgrader gives only a path
        super().init_assignment(assignment_id, student_id)

    def convert_single_notebook(self, notebook_filename):
        try:
            super().convert_single_notebook(notebook_filename)
        except Exception as error:  # KeyboardInterrupt and the like still stop the run, as they should
            lesson, student = self.grading
            notebook = os.path.splitext(os.path.basename(notebook_filename))[0]
            self.log.warning("qkv grader: grading %s failed", notebook_filename, exc_info=True)
            graded_as_zero(self.coursedir, lesson, student, notebook, self.release_folder,
                           f"{type(error).__name__}: {error}", self.log)
        finally:
            forget_converted_metadata(self.exporter)

    def run_post_convert_hook(self):
        super().run_post_convert_hook()
        if self.observer is not None:  # nbgrader's last step for a student: all of theirs is written
            self.observer.student_done(self.grading[1])

    def init_destination(self, assignment_id, student_id):
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        if os.path.isdir(dest) and not self.force and not completely_graded(dest):
            self.log.warning("qkv grader: %s was graded only half-way (an interrupted run): grading it again", dest)
            self.regraded.setdefault(student_id, []).append(
                {"name": "regraded", "detail": "an earlier run stopped before finishing this submission"})
            shutil.rmtree(dest)
        return super().init_destination(assignment_id, student_id)


def forget_converted_metadata(exporter):
    """nbconvert's exporter keeps the metadata of every notebook it converted (Exporter._nb_metadata, which only its
    HTML exporter reads, for the notebook being converted): two entries a student, kept by one exporter for the
    whole class (issue 45). Nothing reads them once a notebook is written."""
    remembered = getattr(exporter, "_nb_metadata", None)
    if isinstance(remembered, dict):
        remembered.clear()
