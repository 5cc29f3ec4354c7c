"""From what an instructor downloads from the LMS to nbgrader's `submitted/<student>/<lesson>/<notebook>.ipynb`.

`collect(source, course_root, lesson)` takes a zip as Canvas, Moodle, Blackboard or Gradescope export it (zips
inside it, folders inside it), or a folder, and runs nbgrader's own `zip_collect` in-process with two plugins:

- `extractor.SafeExtractor` (an nbgrader ExtractorPlugin) unpacks archives without ever writing outside the course:
  an entry named with `../`, an absolute path, a drive letter or a symlink is refused; zips inside the zip are
  unpacked into a folder named after them (nbgrader's own layout), three levels deep at most, with a cap on bytes.
- `collector.SubmissionCollector` (an nbgrader FileNameCollectorPlugin) reads whose notebook each file is from its
  path relative to the unpacked folder, with the first of `SubmissionCollector.named_regexps` that matches
  (nbgrader's `named_regexp`, when set, is tried first). `{lesson}` in a pattern stands for the lesson's name.

How an LMS names a student's entry, and what is refused, is in collector.py and lms_names.py.

Lateness: Blackboard's time becomes nbgrader's timestamp.txt (nbgrader reads it as UTC: Blackboard writes the
server's local time), Canvas's LATE flag (Canvas gives no time) is kept; both are written with the name to
`.lms.json` next to the notebook, and staging reports `late` (by how long, when the gradebook has a due date).

History: every collection is a round of `history-<lesson>.jsonl` (history.py): per submission when, from which
export (name and sha256), the LMS's time, the notebook's sha256 and what happened; per student the notes. A copy
that differs from the notebook already in submitted/ replaces it ("collected again") only when the LMS says it was
handed in later (Blackboard's and Gradescope's time, Canvas's attachment ids, which number uploads in order);
an older copy, or one no LMS time orders (Moodle, folders), is refused (`older submission refused`) and the one
there kept, unless `collect(..., allow_older=True)` (--allow-older).

Work folders (nbgrader's layout): <course_root>/downloaded/<lesson>/extracted/ (what the export unpacked to,
rebuilt on every collection) and .../archive/ (a folder given as the source is copied there without its links;
nbgrader's own workflow, exports dropped into archive/, works too: pass that folder as the source).

"""
import logging
import os
import shutil
import sys

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from qkv_autograde.intake import history
from qkv_autograde.intake.collector import SubmissionCollector, gradescope_submitters, released_notebooks
from qkv_autograde.intake.extractor import ARCHIVES, SafeExtractor, is_ignored, is_inside
from qkv_autograde.intake.late import duration
from qkv_autograde.intake.lms_names import LMS_RECORD, named_time, note
from qkv_autograde.intake.submissions import NotebookLimits


def _course_config(course_root):
    """The course's nbgrader_config.py (its folders), read without growing this process's sys.path or PYTHONPATH."""
    path = os.path.join(course_root, "nbgrader_config.py")
    if not os.path.isfile(path):
        return Config()
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    try:
        return PyFileConfigLoader("nbgrader_config.py", path=course_root).load_config()
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env


def collect(source, course_root, lesson, log=None, allow_older=False):
    """Fill <course_root>/submitted/<student>/<lesson>/ from an LMS export; returns report entries.

    `source`: a .zip (zips and folders inside it allowed) or a folder (copied, then read the same way); the
    course's own submitted/ folder is only checked. Entries: {"student": id or "", "name", "detail"}.

    Every collection is a round of the lesson's history (history.py): per submission what came from which export
    and what happened, per student the notes. A copy that differs from the notebook already in submitted/ replaces
    it only when the LMS says it was handed in later; an older one (or one the LMS gives no time for, like the
    one before it) is refused with an `older submission refused` note, unless `allow_older` (--allow-older).
    """
    log = log or logging.getLogger("qkv_autograde.intake.lms_export")
    course_root = os.path.abspath(course_root)
    source = os.path.abspath(str(source))
    collected = []
    try:
        notes, collected = _collect(source, course_root, lesson, allow_older)
    except (Exception, SystemExit) as error:  # the report, not a traceback, is how an instructor learns of it
        log.error("qkv intake: collecting %s failed: %s: %s", source, type(error).__name__, error)
        log.debug("qkv intake: the failure in full", exc_info=True)
        notes = [note("", "collection failed", f"{type(error).__name__}: {error}")]
    for entry in notes:
        log.warning("qkv intake: %s%s: %s", f"{entry['student']}: " if entry["student"] else "", entry["name"],
                    entry["detail"])
    if collected is not None:  # None: submitted/ itself was only checked, no collection took place
        try:
            _record_round(course_root, lesson, source, collected, notes)
        except OSError as error:
            log.error("qkv intake: the history of %s could not be written (%s): this round is not in it", lesson,
                      error)
    return notes


def _record_round(course_root, lesson, source, collected, notes):
    """This collection, appended to the lesson's history: a `collected` record per submission, a `noted` one per
    student with notes ("" for the export as a whole)."""
    this = history.new_round(history.read(course_root, lesson), source)
    by_student = {}
    for entry in notes:
        by_student.setdefault(entry["student"], []).append({"name": entry["name"], "detail": entry["detail"]})
    history.append(course_root, lesson, [dict(this, event="collected", **c) for c in collected]
                   + [dict(this, event="noted", student=s, notes=n) for s, n in sorted(by_student.items())])


def _collect(source, course_root, lesson, allow_older=False):
    """(notes, [what happened to each submission, for the history]); None instead of the list when `source` is
    the course's submitted/ folder, which is only checked."""
    from nbgrader.apps.zipcollectapp import ZipCollectApp
    from nbgrader.coursedir import CourseDirectory

    config = _course_config(course_root)
    config.CourseDirectory.root = course_root
    config.CourseDirectory.assignment_id = lesson
    coursedir = CourseDirectory(config=config)
    submitted = os.path.realpath(coursedir.format_path(coursedir.submitted_directory, ".", "."))
    if not os.path.exists(source):
        return [note("", "no submissions", f"{source} does not exist")], []
    if os.path.isdir(source) and os.path.realpath(source) == submitted:
        return check_submitted(submitted, lesson, released_notebooks(coursedir, lesson),
                               NotebookLimits(config=config)), None
    if os.path.isfile(source) and not source.lower().endswith(ARCHIVES):
        return [note("", "not a notebook", f"{source}: give a .zip export or a folder")], []

    app = ZipCollectApp(config=config, log=_quiet_logger())
    app.coursedir = coursedir
    app.force = True  # the work folders are ours, rebuilt from this export every time
    work = os.path.join(course_root, app.downloaded_directory, lesson)
    archive, extracted = (app._format_collect_path(app.archive_directory),
                          app._format_collect_path(app.extracted_directory))
    if not all(is_inside(p, course_root) for p in (work, archive, extracted, submitted)):
        return [note("", "unsafe path", "the course's download or submitted folder lies outside the course")], []
    # nbgrader's own workflow drops the exports into archive/: then that folder is the source, used in place
    in_place = os.path.isdir(source) and os.path.realpath(source) == os.path.realpath(archive)
    if is_inside(source, extracted) or (is_inside(source, archive) and not in_place and os.path.isdir(source)):
        return [note("", "collection failed", f"{source} lies in the folder a collection rebuilds; give the export "
                                              f"itself, or the folder {archive}")], []
    shutil.rmtree(extracted, ignore_errors=True)
    os.makedirs(extracted)
    notes = []
    extractor = SafeExtractor(parent=app)
    app.extractor_plugin_inst = extractor
    if os.path.isfile(source):
        # the export's own zip is unpacked straight into extracted/, not into a folder named after the download,
        # so that a notebook at its top is not read as belonging to a student named like the zip
        extractor.archives.add(os.path.realpath(extracted))
        extractor.unzip(source, extracted, os.path.basename(source), depth=1)
    else:
        if not in_place:
            shutil.rmtree(archive, ignore_errors=True)
            os.makedirs(archive)
            notes += _copy_folder(source, archive)
        extractor.extract(archive, extracted)
    released = released_notebooks(coursedir, lesson)
    gradescope, metadata_notes = gradescope_submitters(extracted)
    collector = SubmissionCollector(extracted, lesson, released, extractor.dates, gradescope, extractor.archives,
                                    parent=app)
    app.collector_plugin_inst = collector
    collector.plan = collector.make_plan()
    notes += extractor.notes + metadata_notes + collector.notes
    everything = list(collector.plan.items()) + collector.extra
    replaced, collected, refused = _against_submitted(everything, collector.handed_in, coursedir, lesson,
                                                      history.read(course_root, lesson), allow_older)
    kept = lambda info: (info["student_id"], info["file_id"]) not in refused  # noqa: E731
    collector.plan = {path: info for path, info in collector.plan.items() if kept(info)}
    collector.extra = [(path, info) for path, info in collector.extra if kept(info)]
    students = {info["student_id"] for _, info in list(collector.plan.items()) + collector.extra}
    if collector.plan or collector.extra:
        # nbgrader empties a collected student's folder: a refused notebook of a student collected otherwise stays
        saved = _read_refused(refused, students, coursedir, lesson)
        app.process_extracted_files()
        _copy_group_members(collector, coursedir, lesson, course_root)
        for dest, data in saved.items():
            with open(dest, "wb") as f:
                f.write(data)
        notes += _record_lms({s: r for s, r in collector.records.items() if s in students}, coursedir, lesson,
                             course_root)
    elif not everything:
        notes.append(note("", "no submissions", f"no notebook in {os.path.basename(source)} could be collected"))
    notes += replaced
    return notes, collected


def _record_lms(records, coursedir, lesson, course_root):
    """What the LMS said of each collected student: `.lms.json` next to the notebook (read by staging and by the
    export), lateness against the gradebook's due date, and the name into nbgrader's Student. A course without a
    gradebook yet gets none made here (the export at the end of `make grade` fills the names in)."""
    import contextlib
    import json

    from nbgrader.api import Gradebook, MissingEntry

    notes = []
    url = coursedir.db_url
    exists = not url.startswith("sqlite:///") or os.path.isfile(url[len("sqlite:///"):])
    with (Gradebook(url) if exists else contextlib.nullcontext()) as gb:
        try:
            duedate = gb.find_assignment(lesson).duedate if gb else None
        except MissingEntry:
            duedate = None
        for student, record in sorted(records.items()):
            folder = coursedir.format_path(coursedir.submitted_directory, student, lesson)
            if not os.path.isdir(folder) or not is_inside(folder, course_root):
                continue
            stamp = named_time(record.get("timestamp"))
            if stamp and duedate and stamp > duedate:
                record["late"] = (f"submitted {duration((stamp - duedate).total_seconds())} "
                                  f"after the due date ({duedate})")
            kept = {k: record[k] for k in ("lms", "user_id", "name", "late", "timestamp", "attachment_id")
                    if record.get(k)}
            with open(os.path.join(folder, LMS_RECORD), "w", encoding="utf-8") as f:
                json.dump(kept, f)
            if record.get("late"):
                notes.append(note(student, "late", record["late"]))
            if record.get("name") and gb is not None:
                first, _, last = record["name"].rpartition(" ")
                gb.update_or_create_student(student, first_name=first or None, last_name=last)
    return notes


def _copy_group_members(collector, coursedir, lesson, course_root):
    """A group's notebook for its members after the first (nbgrader gives each file to one student)."""
    by_nbgrader = {info["student_id"] for info in collector.plan.values()}
    cleared = set()
    for path, info in collector.extra:
        folder = coursedir.format_path(coursedir.submitted_directory, info["student_id"], lesson)
        if not is_inside(folder, course_root):
            continue
        if info["student_id"] not in by_nbgrader and info["student_id"] not in cleared:
            shutil.rmtree(folder, ignore_errors=True)  # as nbgrader's --force does for the students it collects
            cleared.add(info["student_id"])
        os.makedirs(folder, exist_ok=True)
        shutil.copy(path, os.path.join(folder, info["file_id"]))


def _quiet_logger():
    """nbgrader's zip_collect logs every file; its warnings repeat what the report says by name."""
    quiet = logging.getLogger("qkv_autograde.intake.lms_export.nbgrader")
    quiet.setLevel(logging.ERROR)
    return quiet


def _copy_folder(source, archive):
    """An unzipped export or a submitted/-shaped folder elsewhere, copied into the work folder without links."""
    notes = []
    for root, folders, files in os.walk(source):
        for name in list(folders):
            if os.path.islink(os.path.join(root, name)):
                notes.append(note("", "unsafe path", f"{os.path.relpath(os.path.join(root, name), source)} is a "
                                                     f"symbolic link; skipped"))
                folders.remove(name)
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, source)
            if os.path.islink(path):
                notes.append(note("", "unsafe path", f"{rel} is a symbolic link; skipped"))
                continue
            if not os.path.isfile(path):
                continue
            dest = os.path.join(archive, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(path, dest)
    return notes


def _against_submitted(planned, handed_in, coursedir, lesson, past, allow_older):
    """Each copy about to be collected against the notebook already in submitted/: (notes, [for the history:
    {"student", "notebook", "sha256", "outcome", "lms_time", "lms_order"}], {(student, file_id) refused}).

    A different copy replaces the one there ("collected again") only when the LMS says it was handed in later
    (history.newer; the earlier copy's time is the history's, else its `.lms.json`); an older one, or one whose
    order the LMS does not give, is refused unless `allow_older`."""
    notes, collected, refused = [], [], set()
    for path, info in planned:
        student, file_id = info["student_id"], info["file_id"]
        notebook = os.path.splitext(file_id)[0]
        dest = os.path.join(coursedir.format_path(coursedir.submitted_directory, student, lesson), file_id)
        incoming = handed_in.get((student, file_id)) or {"lms_time": None, "lms_order": None}
        sha256 = history.sha256_of(path)
        outcome = "new"
        if os.path.isfile(dest):
            earlier = history.sha256_of(dest)
            existing = history.kept_copy(past, student, notebook, earlier) or _recorded_time(os.path.dirname(dest))
            later = history.newer(incoming, existing)
            if earlier == sha256:
                outcome = "same"
            elif later:
                outcome = "replaced older"
                notes.append(note(student, "collected again",
                                  f"{file_id} replaced what an earlier collection put in submitted/ (handed in "
                                  f"{_when(existing)}; this one {_when(incoming)})"))
            elif allow_older:
                outcome = "replaced (allowed)"
                notes.append(note(student, "collected again",
                                  f"{file_id} replaced what an earlier collection put in submitted/ (handed in "
                                  f"{_when(existing)}), with a copy handed in {_when(incoming)}, as told "
                                  f"(--allow-older)"))
            else:
                outcome = "older refused" if later is False else "undated refused"
                refused.add((student, file_id))
                why = ("the LMS says it was handed in earlier" if later is False else
                       "the LMS gives no time that tells which was handed in later")
                notes.append(note(student, "older submission refused",
                                  f"{file_id} (handed in {_when(incoming)}) differs from the copy already in "
                                  f"submitted/ (handed in {_when(existing)}) and {why}: kept the one already "
                                  f"there; collect with --allow-older (make grade ALLOW_OLDER=1) to replace it"))
        collected.append(dict(incoming, student=student, notebook=notebook, sha256=sha256, outcome=outcome))
    return notes, collected, refused


def _recorded_time(folder):
    """The time `.lms.json` records for the notebook in `folder` (a course collected before it had a history)."""
    import json

    try:
        with open(os.path.join(folder, LMS_RECORD), encoding="utf-8") as f:
            when = json.load(f).get("timestamp")
    except (OSError, ValueError, AttributeError):
        when = None
    return {"lms_time": when if isinstance(when, str) else None, "lms_order": None}


def _when(handed_in):
    if (handed_in or {}).get("lms_time"):
        return f"at {handed_in['lms_time']}"
    if (handed_in or {}).get("lms_order") is not None:
        return f"as Canvas upload {handed_in['lms_order']}"
    return "at a time the LMS does not give"


def _read_refused(refused, students, coursedir, lesson):
    """{path: bytes} of the refused notebooks of students whose other notebooks are collected now."""
    saved = {}
    for student, file_id in refused:
        dest = os.path.join(coursedir.format_path(coursedir.submitted_directory, student, lesson), file_id)
        if student in students and os.path.isfile(dest):
            with open(dest, "rb") as f:
                saved[dest] = f.read()
    return saved


def check_submitted(submitted, lesson, released, limits=None):
    """Notes on an already collected submitted/<student>/<lesson>/ tree; nothing is changed. A notebook over
    `limits` (NotebookLimits) is named with the reason staging will refuse it for."""
    limits = limits or NotebookLimits()
    notes = []
    for student in sorted(os.listdir(submitted)):
        home = os.path.join(submitted, student)
        if os.path.islink(home):
            notes.append(note(student, "unsafe path", f"submitted/{student} is a symbolic link"))
            continue
        if not os.path.isdir(home):
            notes.append(note("", "unexpected file name", f"submitted/{student} is a file, not a student's folder"))
            continue
        folder = os.path.join(home, lesson)
        if not os.path.isdir(folder):
            continue  # this student has not handed in this lesson
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            rel = f"submitted/{student}/{lesson}/{name}"
            if os.path.islink(path):
                notes.append(note(student, "unsafe path", f"{rel} is a symbolic link: move the real file there"))
            elif os.path.isdir(path):
                if not is_ignored([name]):
                    notes.append(note(student, "nested folder", f"{rel}/ is a folder; only notebooks directly in "
                                                                f"{lesson}/ are graded"))
            elif name == "timestamp.txt" or name.startswith("."):
                continue
            elif not name.endswith(".ipynb"):
                notes.append(note(student, "not a notebook", f"{rel}; not graded"))
            else:
                if released and os.path.splitext(name)[0] not in released:
                    notes.append(note(student, "unexpected file name",
                                      f"{rel}: {lesson} has no notebook of that name "
                                      f"(expected {', '.join(f'{n}.ipynb' for n in sorted(released))})"))
                refusal = limits.refusal(path)  # the very note staging adds: the report shows it once
                if refusal:
                    notes.append(note(student, refusal["name"], refusal["detail"]))
    return notes
