"""Whether a submission is late, decided once, from the gradebook, for the penalty and for every page and CSV.

nbgrader knows the due date, the student's extension (`Gradebook.grant_extension`) and, where the submission came
with a time (the exchange's or Blackboard's timestamp.txt), how late it is. Canvas's download only marks LATE, with
no time, and counts from Canvas's own due date; intake keeps that mark in `.lms.json` beside the notebook. From
these, `verdict` says whether the submission is late and why, and:

- `AssignLatePenaltiesHonouringTheLmsMark` (nbgrader_config.py's chain, so on both routes: `make grade` from an
  LMS export, and `nbgrader collect` then `nbgrader autograde` or `make grade`) writes the late penalty into the
  gradebook: nbgrader's `penalty_method`, or `c.LatePenalty.fraction` of the score;
- the anomaly report (report.py) shows the same verdict, and the score after that penalty, as grades.csv, the LMS
  files and the feedback pages do (they all read the gradebook).

A student with an extension whom Canvas marks late is not penalised: Canvas's mark counts from its own due date,
not from the extended one, and gives no time that could tell.
"""
import datetime
import json
import os
from typing import NamedTuple, Optional

from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import LateSubmissionPlugin
from nbgrader.preprocessors import AssignLatePenalties
from traitlets import Float, Type

from qkv_autograde.intake.lms_names import LMS_RECORD, shown


class Verdict(NamedTuple):
    late: bool                # penalised and flagged `late` in the report
    detail: Optional[str]     # why late, or why not although it looks so (an extension); None: nothing to say


def duration(seconds):
    """'1 d 2 h 5 min' (or '40 s' under a minute)."""
    minutes = int(seconds // 60)
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or \
        f"{int(seconds)} s"


def verdict(timestamp, duedate, extension, lms_mark):
    """Late or not, from nbgrader's timestamp (None: the LMS gave no time), the lesson's due date (None: none set),
    the student's extension (a timedelta or None) and the LMS's late mark without a time (a sentence, or None)."""
    extended = f"extension of {duration(extension.total_seconds())}" if extension else ""
    if timestamp is not None and duedate is not None:
        deadline = duedate + (extension or datetime.timedelta(0))
        if timestamp > deadline:
            late_by = duration((timestamp - deadline).total_seconds())
            return Verdict(True, f"submitted {late_by} after the due date with its {extended} ({deadline})"
                           if extension else f"submitted {late_by} after the due date ({duedate})")
        if timestamp > duedate:
            return Verdict(False, f"submitted {duration((timestamp - duedate).total_seconds())} after the due date "
                                  f"({duedate}), within its {extended}: not late")
        return Verdict(False, None)
    if lms_mark:
        if extension:
            return Verdict(False, f"{lms_mark}, but an {extended} is granted: not penalised (Canvas's mark counts from "
                                  f"its own due date, with no time to compare)")
        return Verdict(True, lms_mark)
    return Verdict(False, None)


def lms_mark(submitted_folder):
    """The LMS's late mark kept at collection (`.lms.json`) when the LMS gave no time (Canvas), else None: a time,
    where there is one, went to timestamp.txt and nbgrader judges it."""
    try:
        with open(os.path.join(submitted_folder, LMS_RECORD), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("timestamp"):
        return None
    mark = record.get("late")
    return shown(mark) if isinstance(mark, str) and mark else None


def of_submission(submission, submitted_folder):
    """The verdict on a gradebook SubmittedAssignment, whose folder in submitted/ holds what the LMS said."""
    return verdict(submission.timestamp, submission.assignment.duedate, submission.extension,
                   lms_mark(submitted_folder))


def report_note(submission, submitted_folder):
    """The anomaly report's note: `late`, or `extension` where only an extension keeps it from being late."""
    found = of_submission(submission, submitted_folder)
    if not found.detail:
        return None
    return {"name": "late" if found.late else "extension", "detail": found.detail}


class LatePenalty(LateSubmissionPlugin):
    """nbgrader's late penalty (`penalty_method`: "none" or "zero"), or a fraction of the score (`fraction`)."""

    fraction = Float(0.0, min=0.0, max=1.0, help=(
        "The fraction of its score a late submission loses (0.5: half), whether late by its time (after the due "
        "date and any extension) or by the LMS's mark alone (Canvas); 0: nbgrader's penalty_method decides "
        "(\"none\" by default, \"zero\": the whole score).")).tag(config=True)

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        """`total_seconds_late` is None for a submission the LMS marked late without a time."""
        if self.penalty_method == "zero" or not self.fraction:
            return super().late_submission_penalty(student_id, score, total_seconds_late)
        return self.fraction * score


class AssignLatePenaltiesHonouringTheLmsMark(AssignLatePenalties):
    """nbgrader's AssignLatePenalties, on `verdict`: nbgrader's own looks only at the time, so Canvas's late mark
    (no time) was never penalised. `reapply` does it again for a whole lesson without regrading (make grade, each
    run), so an extension granted after grading reaches the grades."""

    plugin_class = Type(LatePenalty, klass=LateSubmissionPlugin,
                        help="The plugin that gives the penalty of a late notebook.").tag(config=True)

    def penalise(self, submission, notebook, submitted_folder):
        """The notebook's late penalty in the gradebook (not committed), from the submission's verdict."""
        found = of_submission(submission, submitted_folder)
        notebook.late_submission_penalty = None
        if found.late:
            penalty = self.plugin_inst.late_submission_penalty(submission.student.id, notebook.score,
                                                               submission.total_seconds_late or None)
            if penalty is not None:
                notebook.late_submission_penalty = self._check_late_penalty(notebook, penalty)

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        student, lesson = nbg["student"], nbg["assignment"]
        self.init_plugin()
        coursedir = CourseDirectory(config=self.config)
        with Gradebook(nbg["db_url"]) as gradebook:
            self.penalise(gradebook.find_submission(lesson, student),
                          gradebook.find_submission_notebook(nbg["notebook"], lesson, student),
                          coursedir.format_path(coursedir.submitted_directory, student, lesson))
            gradebook.db.commit()
        return nb, resources

    def reapply(self, lesson):
        """Every graded notebook's penalty of `lesson` again, from the gradebook as it is now (its extensions, due
        date and the course's penalty), so that what was graded earlier agrees with it too."""
        self.init_plugin()
        coursedir = CourseDirectory(config=self.config)
        with Gradebook(coursedir.db_url) as gradebook:
            for submission in gradebook.assignment_submissions(lesson):
                folder = coursedir.format_path(coursedir.submitted_directory, submission.student.id, lesson)
                for notebook in submission.notebooks:
                    self.penalise(submission, notebook, folder)
            gradebook.db.commit()
