"""What nbgrader grades, made from what students handed in, without touching what they handed in.

nbgrader finds `submitted/<student>/<lesson>/<notebook>.ipynb` and nothing else: a notebook saved as
`01-lookup-Copy1.ipynb` scored 0 with a misleading message, a student folder starting with a dot got no row, a
corrupt file stopped with a traceback. `stage` builds a parallel tree (`.staged/`) that nbgrader grades instead,
and says what it did for each student. The submitted tree is only read.

A student folder whose name is not a student id (lms_names.STUDENT_ID_CHARACTERS: a comma, a space, a leading `=`)
is refused with a reason, never graded under another name. What the LMS said when the submission was collected
(intake's `.lms.json`) becomes a `late` anomaly on each notebook when the LMS marked it late.
"""
import dataclasses
import fnmatch
import json
import os
import shutil

import nbformat

from .lms_names import LMS_RECORD, STUDENT_ID_CHARACTERS, shown, valid_student_id

STAGED = ".staged"


@dataclasses.dataclass
class Staged:
    student: str
    notebook: str
    anomalies: list  # [{"name", "detail"}]
    refused: bool = False


def released(coursedir, lesson):
    """(the lesson's release folder, the names of its notebooks): what every submission is graded against."""
    folder = coursedir.format_path(coursedir.release_directory, ".", lesson)
    return folder, sorted(os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".ipynb"))


def _candidates(folder, expected):
    """The file to grade as `expected`.ipynb: itself, a renamed copy of it, an Untitled, or the only notebook."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".ipynb") and os.path.isfile(os.path.join(folder, f)))
    if f"{expected}.ipynb" in files:
        return f"{expected}.ipynb", None
    for pattern in (f"{expected}*.ipynb", "Untitled*.ipynb"):
        found = fnmatch.filter(files, pattern)
        if found:
            return found[-1], found
    if len(files) == 1:
        return files[0], files
    return None, files


def stage(course_root, submitted, lesson, notebooks, release_folder, only_student="*"):
    """Fill <root>/.staged/<student>/<lesson>/ for every student folder in `submitted`; returns [Staged]."""
    submitted_root = os.path.join(course_root, submitted)
    results = []
    if not os.path.isdir(submitted_root):
        return results
    for student in sorted(os.listdir(submitted_root)):
        folder = os.path.join(submitted_root, student, lesson)
        if not os.path.isdir(folder) or not fnmatch.fnmatchcase(student, only_student):
            continue
        if student.startswith("."):
            results.append(Staged(student, "", [{"name": "refused student id",
                                                 "detail": "the folder name starts with a dot, which nbgrader skips; "
                                                           "rename the folder and grade again"}], refused=True))
            continue
        if not valid_student_id(student):  # a comma or a leading = would reach grades.csv and the LMS files
            results.append(Staged(student, "", [{
                "name": "refused student id",
                "detail": f"the folder name {shown(repr(student), 80)} is not a student id ({STUDENT_ID_CHARACTERS}); "
                          f"rename the folder and grade again"}], refused=True))
            continue
        late = _lateness(folder)
        target = os.path.join(course_root, STAGED, student, lesson)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        for name in ("timestamp.txt", "submission_secret.txt"):  # nbgrader's own: release_feedback needs the secret
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                shutil.copy(path, target)
        for notebook in notebooks:
            try:
                results.append(_stage_notebook(folder, target, notebook, student, release_folder))
                results[-1].anomalies += [late] if late else []
            except Exception as error:  # one student's files never stop the class: no notebook staged, graded 0
                results.append(Staged(student, notebook, [{"name": "grading error", "detail":
                                                           f"staging failed: {type(error).__name__}: {error}"[:300]}]))
    return results


def _lateness(folder):
    """The `late` anomaly from what the LMS said at collection (Canvas's LATE flag, a time after the due date)."""
    try:
        with open(os.path.join(folder, LMS_RECORD), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    late = record.get("late") if isinstance(record, dict) else None
    return {"name": "late", "detail": shown(late)} if isinstance(late, str) and late else None


def _stage_notebook(folder, target, notebook, student, release_folder):
    anomalies = []
    chosen, seen = _candidates(folder, notebook)
    if chosen is None:
        detail = f"no notebook to grade (found: {', '.join(seen) or 'none'})"
        return Staged(student, notebook, [{"name": "missing notebook", "detail": detail}])
    if chosen != f"{notebook}.ipynb":
        anomalies.append({"name": "renamed file", "detail": f"{chosen} graded as {notebook}.ipynb"})
    path = os.path.join(folder, chosen)
    try:
        nb = nbformat.read(path, as_version=4)
        if not nb.cells:
            raise ValueError("the notebook has no cells")
    except Exception as error:
        reason = "empty file" if os.path.getsize(path) == 0 else f"{type(error).__name__}: {str(error)[:200]}"
        anomalies.append({"name": "corrupt file", "detail": f"{chosen}: {reason}; graded as a blank notebook"})
        nb = nbformat.read(os.path.join(release_folder, f"{notebook}.ipynb"), as_version=4)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**The grader could not read the notebook you handed in ({reason}).** It was graded as the blank "
            f"assignment: score 0. Ask your instructor to look at the file."))
    nb.metadata["qkv"] = {"anomalies": list(anomalies)}  # the grader's notes only: none of the student's own
    nbformat.write(nb, os.path.join(target, f"{notebook}.ipynb"))
    return Staged(student, notebook, anomalies)
