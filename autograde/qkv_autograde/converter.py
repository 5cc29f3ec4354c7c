"""`nbgrader autograde`, with the class-level steps nbgrader has no setting for.

Before grading: stage the submissions (submissions.py). Per student: a destination that lacks the "graded
completely" stamp (a run killed half-way) is graded again instead of being skipped, which is what made a
rerun export a silent 0. After grading: the anomaly report (report.py). nbgrader_config.py installs this class
in place of nbgrader's Autograde, so instructors keep typing the stock command.
"""
import glob
import os
import shutil

import nbformat
from nbgrader.converters import Autograde

from . import report, submissions


def completely_graded(folder):
    notebooks = glob.glob(os.path.join(folder, "*.ipynb"))
    return bool(notebooks) and all(nbformat.read(p, as_version=4).metadata.get("qkv", {}).get("graded")
                                   for p in notebooks)


class QkvAutograde(Autograde):

    def start(self):
        lesson = self.coursedir.assignment_id
        release, notebooks = submissions.released(self.coursedir, lesson)
        self.regraded = {}
        self.staged = submissions.stage(self.coursedir.root, self.coursedir.submitted_directory, lesson, notebooks,
                                        release, self.coursedir.student_id)
        for entry in self.staged:
            if entry.refused:
                self.log.warning("qkv grader: refused %r: %s", entry.student, entry.anomalies[0]["detail"])
        submitted = self.coursedir.submitted_directory
        self.coursedir.submitted_directory = submissions.STAGED
        try:
            super().start()
        finally:
            self.coursedir.submitted_directory = submitted
            table = report.write(self.coursedir.root, self.coursedir.db_url, lesson, self.staged, self.regraded)
            flagged = [r for r in table if r["anomalies"]]
            self.log.info("qkv grader: anomaly report for %d submissions (%d flagged): %s", len(table), len(flagged),
                          os.path.join(self.coursedir.root, f"anomalies-{lesson}.html"))

    def init_destination(self, assignment_id, student_id):
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        if os.path.isdir(dest) and not self.force and not completely_graded(dest):
            self.log.warning("qkv grader: %s was graded only half-way (an interrupted run): grading it again", dest)
            self.regraded.setdefault(student_id, []).append(
                {"name": "regraded", "detail": "an earlier run stopped before finishing this submission"})
            shutil.rmtree(dest)
        return super().init_destination(assignment_id, student_id)
