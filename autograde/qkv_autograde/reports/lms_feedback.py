"""`autograde/lms-feedback-<lesson>.zip`: the feedback page of every student collected from an LMS, named as that LMS
takes feedback files back in bulk, so that one upload returns the whole class's pages (make grade writes it after the
pages, issue 35). Each page is self-contained (feedback_html.py: maths as MathML, no script, nothing loaded from
outside the page), so it reads the same on the student's machine as on the instructor's.

What each LMS takes, and where that was read:

- Canvas, Assignment > "Upload Submissions" (the re-upload of the Submissions > Download zip, for feedback files):
  canvas-lms's `Assignment#generate_comments_from_files` unzips the upload and, for each file,
  `infer_comment_context_from_filename` splits the file's name at `_` and takes its first two all-digit parts as the
  user id and the id of an attachment of that user's submission (the attachment must exist, else the file is
  ignored); the file is attached to a comment on the submission. That is the download's own name,
  `<sortablename>_[LATE_]<user id>_<attachment id>_<file name>`, so each page is named after the copy that was
  graded: `eded_10007_500008_01-lookup-feedback.html` (a resubmission's attachment id, not the first copy's).
- Moodle, Assignment > View all submissions > "Upload multiple feedback files in a zip" (the feedback-files plugin,
  mod/assign/feedback/file/importziplib.php, `is_valid_filename_for_import`): each part of a file's path is split at
  `_` into fullname_participantid_plugintype_pluginname[_rest]; the first part whose second field is a participant
  id of the assignment names the student, and the rest of the path becomes the feedback file's name. So a folder
  per participant, named as "Download submissions in folders" names it:
  `<Full Name>_<participant id>_assignsubmission_file_/01-lookup-feedback.html` (a full name holding `_` would
  shift the id: `_` becomes a space).
- Blackboard Learn: its documentation describes no bulk upload of feedback files (Grade Centre > Work Offline takes
  grades only, and the Assignment File Download has no way back). The offline-marking tools that institutions add
  for it (e.g. the University of Bristol's Marks and Feedback for Ultra, described in its digital-education guide)
  take a zip of files named `feedback_<username>[_<anything>]`; so `feedback_<username>_01-lookup.html`. Check your
  institution's tool before uploading.
- Gradescope, nbgrader's exchange, a folder: none of these takes feedback files back this way (the exchange has
  `nbgrader release_feedback`); their students get no entry here.

Nothing from a student names a file in the zip but the ids and the name the LMS's own download gave (lms_names.py
checked them); a name is reduced to characters safe in a file name before it is written.
"""
import os
import re
import tempfile
import zipfile

from qkv_autograde.reports.exports import lms_records
from qkv_autograde.intake.lms_names import display_name

TAKES_FEEDBACK = ("canvas", "moodle", "blackboard")
UNSAFE_IN_NAME = re.compile(r"[^\w .-]|_")  # `_` separates the LMS's fields; no path separators or controls
# a reference a page would load or open outside itself: an attribute, a CSS url() or @import that is not the
# page's own anchor (#...) or inline data (data:)
OUTSIDE_REFERENCE = re.compile(
    r"""(?:\b(?:src|href|action|poster|srcset|data)\s*=\s*["']?|url\(\s*["']?|@import\s+["'])"""
    r"""(?!#|data:)([^"'\s)>]+)""", re.I)


def safe_name(name, fallback):
    """A display name as a file name may hold it: letters, digits, spaces, `.` and `-`; never empty."""
    cleaned = " ".join(UNSAFE_IN_NAME.sub(" ", display_name(name)).split()).strip(". ")
    return cleaned if cleaned and not cleaned.replace(" ", "").isdigit() else fallback  # Canvas reads digits as ids


def feedback_name(record, student, notebook):
    """Where the page of `notebook` for `student` goes in the zip, as the LMS of `record` (.lms.json) takes it back;
    None for an LMS that takes no feedback files, or a Canvas record without the attachment the page answers."""
    lms = record.get("lms")
    if lms == "canvas":
        attachment = str(record.get("attachment_id") or "")
        if not attachment.isdigit() or not student.isdigit():
            return None
        sortable_name = safe_name(record.get("name"), "student").replace(" ", "")
        return f"{sortable_name}_{student}_{attachment}_{notebook}-feedback.html"
    if lms == "moodle":
        full_name = safe_name(record.get("name"), "Participant")
        return f"{full_name}_{student}_assignsubmission_file_/{notebook}-feedback.html"
    if lms == "blackboard":
        return f"feedback_{student}_{notebook}.html"
    return None


def outside_references(page):
    """What a page's HTML would load or open outside itself: file:, http(s): and absolute or relative paths."""
    return sorted(set(OUTSIDE_REFERENCE.findall(page)))


def pages_of(coursedir, student, lesson):
    """{notebook: path} of the feedback pages of `student` for `lesson` (feedback/<student>/<lesson>/*.html)."""
    folder = coursedir.format_path(coursedir.feedback_directory, student, lesson)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    return {name[:-len(".html")]: os.path.join(folder, name) for name in names if name.endswith(".html")}


def bundle_entries(coursedir, lesson):
    """{lms: {name in the zip: page path}} for the lesson's LMS students, and the notes on those left out."""
    bundles, notes = {}, []
    for (student, where), record in sorted(lms_records(coursedir).items()):
        if where != lesson or record.get("lms") not in TAKES_FEEDBACK:
            continue
        pages = pages_of(coursedir, student, lesson)
        if not pages:
            notes.append(f"{student}: no feedback page to send")
        for notebook, path in pages.items():
            name = feedback_name(record, student, notebook)
            if name is None:
                notes.append(f"{student}: the LMS record names no submission to attach the page to")
            else:
                bundles.setdefault(record["lms"], {})[name] = path
    return bundles, notes


def write_zip(path, entries):
    """`entries` ({name: file}) into the zip at `path`, replaced whole: an upload never sees half a zip. Returns the
    names whose page refers to something outside itself, read from the bytes zipped (each page is read once)."""
    outside = []
    folder = os.path.dirname(os.path.abspath(path))
    handle, partial = tempfile.mkstemp(prefix=".lms-feedback-", suffix=".zip", dir=folder)
    os.close(handle)
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name, source in sorted(entries.items()):
                with open(source, "rb") as f:
                    page = f.read()
                bundle.writestr(name, page)
                if outside_references(page.decode("utf-8", errors="replace")):
                    outside.append(name)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
    return outside


def write(coursedir, lesson, folder):
    """lms-feedback-<lesson>.zip in `folder` (one per LMS, -<lms> added, for a class from several); returns
    ([(path, pages, outside)], notes): outside lists the pages that refer to something outside themselves (written
    by an earlier version of the course: `make grade --force` writes them again)."""
    bundles, notes = bundle_entries(coursedir, lesson)
    written = []
    for lms, entries in sorted(bundles.items()):
        suffix = f"-{lms}" if len(bundles) > 1 else ""
        path = os.path.join(folder, f"lms-feedback-{lesson}{suffix}.zip")
        written.append((path, len(entries), write_zip(path, entries)))
    return written, notes
