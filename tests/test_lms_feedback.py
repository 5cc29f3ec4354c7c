"""The LMS feedback bundle (issue 35, item 1): lms-feedback-<lesson>.zip names each student's page as the LMS the
class came from takes feedback files back in bulk (qkv_autograde/reports/lms_feedback.py says where each shape was
read).

Each class is collected by the real intake from a real-shaped download, so the names come from what the LMS's
download said; the feedback pages are stand-ins written where nbgrader writes them. Each name is also read back the
way the LMS reads it (Canvas: the first two all-digit `_` fields are the user and the attachment; Moodle: a path
part split at `_` gives the participant id second and the plugin third and fourth).
"""
import re
import sys
import zipfile

import pytest

from lessons import ROOT
# course is a pytest fixture, imported for pytest to find and taken as test arguments
from test_class_intake import course, entry, make_zip  # noqa: F401

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.intake import lms_export  # noqa: E402
from qkv_autograde.reports import lms_feedback  # noqa: E402

LESSON = "01-lookup"
NB = f"{LESSON}.ipynb"


def coursedir_of(folder):
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(root=str(folder), release_directory="../notebooks")


def give_pages(root, students):
    """A stand-in feedback page per student, where nbgrader writes it: feedback/<student>/<lesson>/<lesson>.html."""
    for student in students:
        folder = root / "feedback" / student / LESSON
        folder.mkdir(parents=True)
        (folder / f"{LESSON}.html").write_text(f"<p>feedback of {student}</p>")


def bundle(root):
    """{name in the zip: text} of the bundle make grade would write, and the paths written."""
    written, notes = lms_feedback.write(coursedir_of(root), LESSON, str(root))
    assert notes == []
    with zipfile.ZipFile(written[0][0]) as zipped:
        return {name: zipped.read(name).decode() for name in zipped.namelist()}, written


def canvas_reads(name):
    """(user id, attachment id) as canvas-lms's infer_comment_context_from_filename reads a file's name."""
    return tuple(part for part in name.split("_") if re.fullmatch(r"\d+", part))[:2]


def moodle_reads(path):
    """(participant id, plugin type, plugin, file name) as Moodle's is_valid_filename_for_import reads a path."""
    parts = path.split("/")
    while parts:
        info = parts.pop(0).split("_", 4)
        if len(info) >= 4 and info[1].isdigit():
            return info[1], info[2], info[3], "/".join(([info[4]] if len(info) == 5 and info[4] else []) + parts)
    return None


def test_canvas_pages_are_named_as_its_download_named_the_copy_that_was_graded(course, tmp_path):  # noqa: F811
    export = make_zip(tmp_path / "canvas.zip", [
        entry(f"smithjohn_10000_555001_{NB}"),
        entry(f"smithjohn_20999_555002_{NB}"),                       # the same display name, another student
        entry(f"eded_LATE_10007_500007_{NB}", date=(2026, 11, 1, 9, 0, 0)),
        entry(f"eded_LATE_10007_500008_{LESSON}-1.ipynb", date=(2026, 11, 2, 9, 0, 0)),  # resubmitted: kept
    ])
    lms_export.collect(export, course, LESSON)
    give_pages(course, ["10000", "20999", "10007"])
    pages, written = bundle(course)
    assert [(path.rsplit("/", 1)[-1], count) for path, count, _ in written] == [(f"lms-feedback-{LESSON}.zip", 3)]
    assert pages == {f"smithjohn_10000_555001_{LESSON}-feedback.html": "<p>feedback of 10000</p>",
                     f"smithjohn_20999_555002_{LESSON}-feedback.html": "<p>feedback of 20999</p>",
                     f"eded_10007_500008_{LESSON}-feedback.html": "<p>feedback of 10007</p>"}
    assert {canvas_reads(name) for name in pages} == {("10000", "555001"), ("20999", "555002"), ("10007", "500008")}


def test_moodle_pages_are_in_a_folder_per_participant_named_as_its_download(course, tmp_path):  # noqa: F811
    export = make_zip(tmp_path / "moodle.zip", [
        entry(f"John Smith_1001_assignsubmission_file_/{NB}"),       # "download submissions in folders"
        entry(f"Ann Lee_1003_assignsubmission_file_{NB}"),            # without folders
    ])
    lms_export.collect(export, course, LESSON)
    give_pages(course, ["1001", "1003"])
    pages, _ = bundle(course)
    assert sorted(pages) == [f"Ann Lee_1003_assignsubmission_file_/{LESSON}-feedback.html",
                             f"John Smith_1001_assignsubmission_file_/{LESSON}-feedback.html"]
    assert moodle_reads(f"Ann Lee_1003_assignsubmission_file_/{LESSON}-feedback.html") == (
        "1003", "assignsubmission", "file", f"{LESSON}-feedback.html")


def test_blackboard_pages_are_named_feedback_and_the_username(course, tmp_path):  # noqa: F811
    export = make_zip(tmp_path / "gradebook.zip", [
        entry(f"Lesson 1_alee_attempt_2026-11-04-10-00-00_{NB}"),
        entry(f"Lesson 1_bwu_attempt_2026-11-04-11-00-00_{NB}")])
    lms_export.collect(export, course, LESSON)
    give_pages(course, ["alee", "bwu"])
    pages, _ = bundle(course)
    assert sorted(pages) == [f"feedback_alee_{LESSON}.html", f"feedback_bwu_{LESSON}.html"]


def test_students_from_no_lms_get_no_entry_and_a_class_from_two_lmss_two_zips(course, tmp_path):  # noqa: F811
    lms_export.collect(make_zip(tmp_path / "canvas.zip", [entry(f"alice_12345_67890_{NB}")]), course, LESSON)
    lms_export.collect(make_zip(tmp_path / "moodle.zip", [entry(f"Bo Wu_1001_assignsubmission_file_/{NB}")]),
                   course, LESSON)
    (course / "submitted" / "exchanged" / LESSON).mkdir(parents=True)   # handed in through nbgrader's exchange
    give_pages(course, ["12345", "1001", "exchanged"])
    written, notes = lms_feedback.write(coursedir_of(course), LESSON, str(course))
    assert notes == []
    assert [(path.rsplit("/", 1)[-1], count) for path, count, _ in written] == [
        (f"lms-feedback-{LESSON}-canvas.zip", 1), (f"lms-feedback-{LESSON}-moodle.zip", 1)]


def test_a_student_without_a_page_is_named_not_skipped_silently(course, tmp_path):  # noqa: F811
    lms_export.collect(make_zip(tmp_path / "canvas.zip", [entry(f"alice_12345_67890_{NB}"), entry(f"bob_2_3_{NB}")]),
                   course, LESSON)
    give_pages(course, ["12345"])
    written, notes = lms_feedback.write(coursedir_of(course), LESSON, str(course))
    assert notes == ["2: no feedback page to send"] and written[0][1] == 1


@pytest.mark.parametrize("lms, record, student, name", [
    # a name is the LMS's own, but reduced to what a file name holds, and `_` never shifts the LMS's fields
    ("moodle", {"name": "Ann_Lee/../x"}, "7", f"Ann Lee .. x_7_assignsubmission_file_/{LESSON}-feedback.html"),
    ("moodle", {"name": "José Ñúñez"}, "8", f"José Ñúñez_8_assignsubmission_file_/{LESSON}-feedback.html"),
    ("canvas", {"name": "123", "attachment_id": "9"}, "5", f"student_5_9_{LESSON}-feedback.html"),  # not an id
    ("canvas", {"name": "ann"}, "5", None),                     # no attachment to comment on: Canvas ignores it
    ("gradescope", {"name": "ann"}, "5", None),                 # takes no feedback files back
])
def test_names_hold_only_the_lmss_fields(lms, record, student, name):
    assert lms_feedback.feedback_name(dict(record, lms=lms), student, LESSON) == name


@pytest.mark.parametrize("page, outside", [
    ('<script src="file:///home/me/.venv/MathJax.js"></script>', ["file:///home/me/.venv/MathJax.js"]),
    ("<style>@font-face{src:url(../fonts/x.woff)}</style>", ["../fonts/x.woff"]),
    ('<link href="https://cdn.example/x.css">', ["https://cdn.example/x.css"]),
    ('<a href="#top">top</a><img src="data:image/png;base64,AAAA">', []),
])
def test_outside_references_are_found(page, outside):
    assert lms_feedback.outside_references(page) == outside
