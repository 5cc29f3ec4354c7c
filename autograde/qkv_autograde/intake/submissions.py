"""What nbgrader grades, made from what students handed in, without touching what they handed in.

nbgrader finds `submitted/<student>/<lesson>/<notebook>.ipynb` and nothing else: a notebook saved as
`01-lookup-Copy1.ipynb` scored 0 with a misleading message, a student folder starting with a dot got no row, a
corrupt file stopped with a traceback. `stage` builds a parallel tree (`.staged/`) that nbgrader grades instead,
and says what it did for each student. The submitted tree is only read.

A student folder whose name is not a student id (lms_names.STUDENT_ID_CHARACTERS: a comma, a space, a leading `=`)
is refused with a reason, never graded under another name. Whether a submission is late is not said here: the
anomaly report says it from the gradebook (late.py), which knows the student's extension.

A notebook heavier than `NotebookLimits` (bytes, and JSON items: metadata, outputs and attachments included) is
refused with an `oversized notebook` anomaly before anything reads it as a notebook: intake refuses it before it is
copied into submitted/ (collector.py), staging refuses one already there, and it is not graded. Bytes alone do not
bound what a notebook costs: 4 MiB of `[{},{},...]` in its metadata took nbformat's read and write to 1.9 GB (each
empty object becomes a Python dict, then a NotebookNode), so the number of JSON items is bounded too.
"""
import dataclasses
import fnmatch
import functools
import os
import shutil

import nbformat
from traitlets import Integer
from traitlets.config import Configurable

from qkv_autograde.intake.lms_names import STUDENT_ID_CHARACTERS, shown, valid_student_id

STAGED = ".staged"

# The heaviest lesson notebook solved and run with every output (figures, widget state) weighs 0.52 MB and holds
# 3,120 JSON items (05-heads; 01-lookup 0.20 MB, 1,974 items); a released one 25-63 KB. About 30 times that is
# refused.
MAX_NOTEBOOK_BYTES = 16 << 20
MAX_NOTEBOOK_ITEMS = 100_000
OVERSIZED = "oversized notebook"
NOT_STAGED = ("missing notebook", OVERSIZED)  # anomalies of a notebook that is not graded at all
BLANK = "blank notebook"


class NotebookLimits(Configurable):
    """What one handed-in notebook may weigh (`c.NotebookLimits.max_bytes`, `.max_items` in nbgrader_config.py).

    Items are counted on the file's bytes, `{`, `[` and `,`: every JSON value but a container's first element
    follows one of them, so the count bounds the objects a parse makes (base64 figures hold none)."""

    max_bytes = Integer(MAX_NOTEBOOK_BYTES, help="Most bytes one handed-in notebook may weigh.").tag(config=True)
    max_items = Integer(MAX_NOTEBOOK_ITEMS, help="Most JSON items (`{`, `[`, `,`) one notebook may hold."
                        ).tag(config=True)

    def refusal(self, path, name=None):
        """None for a notebook within the limits, else the `oversized notebook` anomaly {"name", "detail"}; the
        file is read in blocks and never parsed."""
        size = os.path.getsize(path)
        name = name or os.path.basename(path)
        why = (f"{_megabytes(size)}, over the limit of {_megabytes(self.max_bytes)}" if size > self.max_bytes
               else None)
        if why is None:
            items = json_items(path)
            if items > self.max_items:
                why = f"{items:,} JSON items, over the limit of {self.max_items:,}"
        if why is None:
            return None
        return {"name": OVERSIZED, "detail": f"{name}: {why} (metadata, outputs and attachments included); not "
                                             f"graded: ask for the notebook with its outputs cleared (Edit > Clear "
                                             f"Outputs of All Cells) and collect it again"}


def json_items(path, block=1 << 20):
    """The JSON items of the file at `path` (NotebookLimits), read in blocks."""
    with open(path, "rb") as f:
        return sum(json_items_of(data) for data in iter(lambda: f.read(block), b""))


def json_items_of(data):
    return data.count(b"{") + data.count(b"[") + data.count(b",")


def _megabytes(size):
    return f"{size:,} bytes" + (f" ({size / 2**20:.1f} MiB)" if size >= 2**20 else "")


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


def stage(course_root, submitted, lesson, notebooks, release_folder, only_student="*", limits=None):
    """Fill <root>/.staged/<student>/<lesson>/ for every student folder in `submitted`; returns [Staged].

    `limits`: the NotebookLimits of the course's config (default: the documented ones)."""
    limits = limits or NotebookLimits()
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
        target = os.path.join(course_root, STAGED, student, lesson)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        for name in ("timestamp.txt", "submission_secret.txt"):  # nbgrader's own: release_feedback needs the secret
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                shutil.copy(path, target)
        mine = []
        for notebook in notebooks:
            try:
                mine.append(_stage_notebook(folder, target, notebook, student, release_folder, limits))
            except Exception as error:  # one student's files never stop the class: no notebook staged, graded 0
                mine.append(Staged(student, notebook, [{"name": "grading error", "detail":
                                                        f"staging failed: {type(error).__name__}: {error}"[:300]}]))
        if all(entry.refused for entry in mine):  # nothing of theirs to grade: nbgrader must not see the folder
            shutil.rmtree(target, ignore_errors=True)
        results += mine
    return results


def handed_in_blank(nb, release_path):
    """True when every cell of `nb` has the source it was released with (outputs aside: a blank notebook run
    is still blank): nothing was written, so its 0 is not a grade but a missing answer. A cell added, removed or
    edited is work, however little."""
    return tuple(cell.source for cell in nb.cells) == _released_sources(release_path,
                                                                         os.stat(release_path).st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _released_sources(release_path, _modified):
    """The release's cell sources, read once per class (and again if the release changes)."""
    return tuple(cell.source for cell in nbformat.read(release_path, as_version=4).cells)


def _stage_notebook(folder, target, notebook, student, release_folder, limits):
    anomalies = []
    chosen, seen = _candidates(folder, notebook)
    if chosen is None:
        detail = f"no notebook to grade (found: {', '.join(seen) or 'none'})"
        return Staged(student, notebook, [{"name": "missing notebook", "detail": detail}])
    refusal = limits.refusal(os.path.join(folder, chosen))
    if refusal:  # before it is read: what reading it would cost is what the limit bounds
        return Staged(student, notebook, [refusal], refused=True)
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
    else:  # outside the try: a release that cannot be read is the course's fault, not a corrupt submission
        if handed_in_blank(nb, os.path.join(release_folder, f"{notebook}.ipynb")):
            anomalies.append({"name": BLANK, "detail": f"{chosen}: every cell as released, no answer written"})
    nb.metadata["qkv"] = {"anomalies": list(anomalies)}  # the grader's notes only: none of the student's own
    nbformat.write(nb, os.path.join(target, f"{notebook}.ipynb"))
    return Staged(student, notebook, anomalies)
