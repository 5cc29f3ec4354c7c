"""A hand score follows the answer it was given for (issue 21.4): a resubmission whose written answer changed is
flagged `hand score stale` and goes back to formgrader's list, instead of keeping the old score silently.

nbgrader keeps a hand score through every regrade (the score is the grader's, SaveAutoGrades never overwrites it)
and marks every regraded hand-graded cell `needs_manual_grade`, because it cannot tell whether the answer changed:
formgrader listed every resubmitted written answer again, changed or not, and nothing said which had changed.
Here the grader knows which answer each hand score was given for, from the lesson's history (history.py):

- every grading records the sha256 of each hand-graded answer (`answers`): what formgrader shows of it (issue 34.3).
  A written answer is its cell: the source, and the attachments its text shows (an image swapped under the same
  text is another answer); a code answer with points also its outputs as graded, which formgrader shows below it
  (execution counts aside: a cell added above renumbers them; an output that differs from run to run, an unseeded
  random draw or a timing, differs for formgrader too, and flags the score). A task is the cells the student wrote
  below it, up to the next nbgrader cell, each counted the same way. A cell with neither attachments nor outputs
  hashes as its source alone, as the grader recorded before they counted, so no hand score recorded then goes stale
  for it (every written answer of lessons 01-07 that has no image);
- a hand score is recorded with the answer formgrader showed when it is first seen (`hand score`): before a
  regrade replaces that answer (SaveAutoGradesAndHandScores reads the gradebook before nbgrader's SaveAutoGrades
  writes to it) and at every anomaly report (report.py, each grading run, the stock command's too). A score the
  instructor changes, or saves again in formgrader (which clears `needs_manual_grade`), after a resubmission is
  given for the answer shown then;
- a hand score given for another answer than the one graded now is stale: named in the report and marked
  `needs_manual_grade` again; one given for the very answer graded now needs no review, and is not marked.

The stale score itself stays in the gradebook and in grades.csv, as nbgrader keeps any hand score until a grader
changes it: the instructor's judgement of a nearly unchanged answer (a typo fixed) is not thrown away, and the
report says which scores to look at before grades are uploaded.
"""
import hashlib
import json

from nbgrader import utils
from nbgrader.api import BaseCell, Grade, Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import SaveAutoGrades

from qkv_autograde.intake import history

STALE = "hand score stale"


def is_hand_graded(cell):
    """nbgrader's manually graded cells: an answer with points (grade and solution), or a task."""
    return utils.is_task(cell) or (utils.is_grade(cell) and utils.is_solution(cell))


def sha256_of_text(text):
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def shown_beside_source(cell):
    """What formgrader shows of a cell besides its source: {"attachments": ..., "outputs": ...}, each only when
    there is some. A markdown (or raw) cell's attachments are the images its text refers to (nbconvert's
    markdown2html renders them); a code cell's outputs are shown below it, their execution counts left out."""
    shown = {}
    if cell.get("attachments"):
        shown["attachments"] = cell["attachments"]
    if cell.get("cell_type") == "code" and cell.get("outputs"):
        shown["outputs"] = [{key: value for key, value in output.items() if key != "execution_count"}
                            for output in cell["outputs"]]
    return shown


def sha256_of_cell(cell):
    """sha256 of what formgrader shows of a cell; of its source alone when that is all it shows."""
    shown = shown_beside_source(cell)
    if not shown:
        return sha256_of_text(cell.source)
    return sha256_of_text(json.dumps({"source": cell.source, **shown}, sort_keys=True))


def answers_of(nb):
    """{grade_id: sha256 of its answer} for the notebook's hand-graded cells."""
    answers, task, below = {}, None, []
    for cell in nb.cells + [None]:
        meta = {} if cell is None else cell.metadata.get("nbgrader", {})
        if task is not None and (cell is None or meta):
            answers[task] = sha256_of_text(json.dumps(below, sort_keys=True))
            task, below = None, []
        if cell is None:
            break
        if task is not None:  # a cell below a task: its source as before, with what else is shown of it if any
            shown = shown_beside_source(cell)
            below.append({"source": cell.source, **shown} if shown else cell.source)
        elif is_hand_graded(cell) and utils.is_task(cell):
            task = meta.get("grade_id")
        elif is_hand_graded(cell):
            answers[meta.get("grade_id")] = sha256_of_cell(cell)
    return answers


def by_cell_name(db, table, submitted_notebook_id):
    """(cell name, row) of a submitted notebook's grades or comments (`table`), in one query: asking each row for its
    name (nbgrader's association proxy) loads its cell, a query a row."""
    return (db.query(BaseCell.name, table).join(BaseCell, BaseCell.id == table.cell_id)
            .filter(table.notebook_id == submitted_notebook_id))


def scores_of(gradebook, lesson, student, notebook, cells):
    """{cell: (manual score, needs_manual_grade)} of the given cells, from the gradebook."""
    submission = gradebook.find_submission_notebook(notebook, lesson, student)
    return {name: (grade.manual_score, grade.needs_manual_grade)
            for name, grade in by_cell_name(gradebook.db, Grade, submission.id) if name in cells}


def seen(records, student, notebook, scores, shown):
    """The `hand score` records to add: a hand score not recorded before, or changed since, is given for the answer
    shown (`shown`: {cell: sha256} of the latest grading, None when unknown); one saved again after it went stale
    (in review no longer) is given for the answer shown now."""
    given = history.hand_scores_given(records, student, notebook)
    found = []
    for cell, (score, in_review) in sorted(scores.items()):
        answer = (shown or {}).get(cell)
        last = given.get(cell)
        if score is None:
            continue
        if (last is None or last.get("score") != score
                or (not in_review and answer is not None and last.get("sha256") != answer)):
            found.append(history.hand_score_record(student, notebook, cell, score, answer))
    return found


def stale(records, student, notebook, scores, answers):
    """{cell: the `hand score` record} of the hand scores given for another answer than `answers` (or for one not
    known)."""
    given = history.hand_scores_given(records, student, notebook)
    return {cell: given.get(cell, {}) for cell, (score, _) in sorted(scores.items())
            if score is not None and cell in answers and given.get(cell, {}).get("sha256") != answers[cell]}


def anomaly(cell, record):
    if record.get("sha256") is None:
        why = "hand-graded before the grader recorded answers, so it may be for another answer"
    else:
        why = "the answer changed since it was hand-graded"
    return {"name": STALE, "detail": f"{cell} ({record.get('score')} points): {why}; grade it again in formgrader"}


def report_notes(course_root, gradebook, records, lesson, student, notebook):
    """For the anomaly report, at every grading run: the hand scores given since the last grading are recorded for
    the answer it graded, and those given for another answer named. Nothing before the notebook's first grading."""
    answers = history.latest_answers(records, student, notebook)
    if answers is None:
        return []
    try:
        scores = scores_of(gradebook, lesson, student, notebook, answers)
    except MissingEntry:
        return []
    new = seen(records, student, notebook, scores, answers)
    history.append(course_root, lesson, new)
    return [anomaly(cell, record) for cell, record in stale(records + new, student, notebook, scores,
                                                            answers).items()]


class SaveAutoGradesAndHandScores(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, with each hand-graded cell's `needs_manual_grade` saying whether its hand score
    is stale (module docstring). In place of SaveAutoGrades in nbgrader_config.py: both routes."""

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        lesson, student, notebook = nbg["assignment"], nbg["student"], nbg["notebook"]
        course_root = CourseDirectory(config=self.config).root
        answers = answers_of(nb)
        records = history.read(course_root, lesson)
        with Gradebook(nbg["db_url"]) as gradebook:  # before SaveAutoGrades marks every hand score for review
            before = scores_of(gradebook, lesson, student, notebook, answers)
        new = seen(records, student, notebook, before, history.latest_answers(records, student, notebook))
        nb, resources = super().preprocess(nb, resources)
        flagged = stale(records + new, student, notebook, before, answers)
        with Gradebook(nbg["db_url"]) as gradebook:
            for cell, (score, _) in before.items():
                if score is not None:
                    gradebook.find_grade(cell, notebook, lesson, student).needs_manual_grade = cell in flagged
            gradebook.db.commit()
        history.append(course_root, lesson, new + [history.answers_record(student, notebook, answers)])
        return nb, resources
