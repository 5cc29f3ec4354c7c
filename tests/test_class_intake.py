"""From an LMS export to nbgrader's submitted/ (autograde/qkv_autograde/intake/lms_export.py): Canvas, Blackboard,
Moodle and plain-folder names, zips inside the zip, duplicates (newest wins), stray files, and entries that try to
leave the course. Every odd case is a named report entry; nothing is ever written outside the course."""
import hashlib
import io
import json
import os
import shutil
import stat
import sys
import zipfile

import nbformat
import pytest

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.intake import extractor, lms_export, lms_names  # noqa: E402
from qkv_autograde.intake.collector import SubmissionCollector  # noqa: E402

LESSON = "01-lookup"


def notebook_bytes(tag):
    """A small valid notebook whose content says who it is, so tests can tell which copy was kept."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(f"answer = {tag!r}"))
    return nbformat.writes(nb).encode()


def tag_of(path):
    return nbformat.read(str(path), as_version=4).cells[0].source


@pytest.fixture
def course(tmp_path):
    """A course laid out like the real one: autograde/ (nbgrader's root) next to notebooks/ (the release)."""
    root = tmp_path / "course" / "autograde"
    (tmp_path / "course" / "notebooks" / LESSON).mkdir(parents=True)
    (tmp_path / "course" / "notebooks" / LESSON / f"{LESSON}.ipynb").write_bytes(notebook_bytes("release"))
    root.mkdir()
    (root / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.release_directory = "../notebooks"\n'
        'c.CourseDirectory.source_directory = "../solutions"\n')
    return root


def make_zip(path, entries):
    """entries: [(name, bytes, (y, m, d, H, M, S) or None, mode or None)]."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data, date, mode in entries:
            info = zipfile.ZipInfo(name, date_time=date or (2026, 11, 1, 12, 0, 0))
            if mode is not None:
                info.external_attr = mode << 16
            archive.writestr(info, data)
    return path


def zip_bytes(entries):
    buffer = io.BytesIO()
    make_zip(buffer, entries)
    return buffer.getvalue()


def entry(name, data=None, date=None, mode=None):
    return (name, notebook_bytes(name) if data is None else data, date, mode)


def submitted(course, student):
    """The files collected for a student, without the LMS record (`.lms.json`) beside them."""
    folder = course / "submitted" / student / LESSON
    return sorted(f for f in os.listdir(folder) if f != lms_names.LMS_RECORD) if folder.is_dir() else None


def lms_record(course, student):
    return json.loads((course / "submitted" / student / LESSON / lms_names.LMS_RECORD).read_text())


def names(notes, student=None):
    return sorted({n["name"] for n in notes if student is None or n["student"] == student})


def snapshot_outside(course):
    """Every file under the temporary folder that holds the course, except the course's own autograde/ folder."""
    top = course.parent.parent
    found = {}
    for root, _, files in os.walk(top):
        if os.path.realpath(root).startswith(os.path.realpath(course)):
            continue
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def test_canvas_names_are_collected_under_the_released_name(course, tmp_path):
    export = make_zip(tmp_path / "submissions.zip", [
        entry("alice_12345_67890_01-lookup.ipynb"),
        entry("bob_late_22222_33333_01-lookup.ipynb"),
        entry("carol_44444_55555_01-lookup-1.ipynb"),  # Canvas's mark of a resubmission
    ])
    notes = lms_export.collect(export, course, LESSON)
    # the student id is Canvas's user id; the name is kept for display
    assert submitted(course, "12345") == [f"{LESSON}.ipynb"]
    assert submitted(course, "22222") == [f"{LESSON}.ipynb"]
    assert submitted(course, "44444") == [f"{LESSON}.ipynb"]
    assert submitted(course, "alice") is None
    assert tag_of(course / "submitted" / "44444" / LESSON / f"{LESSON}.ipynb") == \
        "answer = 'carol_44444_55555_01-lookup-1.ipynb'"
    # and the attachment id of the copy kept, which Canvas's re-upload of feedback files is named after
    assert lms_record(course, "12345") == {"lms": "canvas", "user_id": "12345", "name": "alice",
                                           "attachment_id": "67890"}
    assert lms_record(course, "22222")["late"].startswith("marked late by Canvas")
    # Canvas's own name for a resubmission is no unexpected file name (issue 35, item 6)
    assert sorted((n["student"], n["name"]) for n in notes) == [("22222", "late")]
    # the work folders live inside the course
    assert (course / "downloaded" / LESSON / "extracted").is_dir()


def test_canvas_resubmission_numbers_are_the_same_notebook_and_the_highest_is_kept(course, tmp_path):
    """Issue 35, item 6: `-1`, `-2` after the released name in a Canvas entry is Canvas's mark of a file uploaded
    again; the highest is the newest (all of one zip date here), and none is noted. A renaming of the student's own
    (`-Copy1`, a `-1` inside a folder or an uploaded zip, a `-1` of a name the lesson has not) still is."""
    export = make_zip(tmp_path / "canvas.zip", [
        entry("alice_1_10_01-lookup-1.ipynb"),
        entry("alice_1_11_01-lookup-2.ipynb"),
        entry("bob_2_20_01-lookup-Copy1.ipynb"),
        entry("carol/01-lookup-1.ipynb"),
        entry("dave_4_40_work/01-lookup-1.ipynb"),
        entry("erin_5_50_scratch-1.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert tag_of(course / "submitted" / "1" / LESSON / f"{LESSON}.ipynb") == "answer = 'alice_1_11_01-lookup-2.ipynb'"
    assert names(notes, "1") == ["duplicate submission"]
    assert "kept the newest, alice_1_11_01-lookup-2.ipynb" in next(n["detail"] for n in notes if n["student"] == "1")
    for student in ("2", "carol", "4", "5"):
        assert "unexpected file name" in names(notes, student), student
    assert submitted(course, "2") == submitted(course, "carol") == submitted(course, "4") == [f"{LESSON}.ipynb"]


def test_plain_student_folders_and_a_zip_of_submitted_are_collected(course, tmp_path):
    export = make_zip(tmp_path / "folders.zip", [
        entry("export/alice/01-lookup.ipynb"),
        entry("export/bob/01-lookup/01-lookup.ipynb"),
        entry("submitted/carol/01-lookup/01-lookup.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    for student in ("alice", "bob", "carol"):
        assert submitted(course, student) == [f"{LESSON}.ipynb"], student
    assert notes == []


def test_nested_folders_are_collected_and_noted(course, tmp_path):
    export = make_zip(tmp_path / "nested.zip", [
        entry("dave_1_2_lookup/work/final/01-lookup.ipynb"),           # a Canvas upload holding folders
        entry("erin/01-lookup/old attempt/01-lookup.ipynb"),            # a folder inside the lesson folder
        entry("Frank Li_777_assignsubmission_file_/hw/01-lookup.ipynb"),  # Moodle
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert submitted(course, "1") == [f"{LESSON}.ipynb"]
    assert submitted(course, "erin") == [f"{LESSON}.ipynb"]
    assert submitted(course, "777") == [f"{LESSON}.ipynb"]
    assert lms_record(course, "777") == {"lms": "moodle", "user_id": "777", "name": "Frank Li"}
    assert names(notes, "1") == names(notes, "erin") == names(notes, "777") == ["nested folder"]
    assert "work/final" in next(n["detail"] for n in notes if n["student"] == "1")


def test_duplicates_newest_wins_by_zip_date_and_by_timestamp_in_the_name(course, tmp_path):
    export = make_zip(tmp_path / "dupes.zip", [
        entry("alice_1_10_01-lookup.ipynb", date=(2026, 11, 2, 9, 0, 0)),
        entry("alice_1_11_01-lookup-1.ipynb", date=(2026, 11, 3, 9, 0, 0)),   # newest by zip date
        entry("alice_1_12_01-lookup-2.ipynb", date=(2026, 11, 1, 9, 0, 0)),
        # Blackboard names carry the time: it decides, whatever the zip's dates say
        entry("Lesson 1_bob_attempt_2026-11-05-10-00-00_01-lookup.ipynb", date=(2026, 11, 9, 0, 0, 0)),
        entry("Lesson 1_bob_attempt_2026-11-06-10-00-00_01-lookup.ipynb", date=(2026, 11, 1, 0, 0, 0)),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert tag_of(course / "submitted" / "1" / LESSON / f"{LESSON}.ipynb") == \
        "answer = 'alice_1_11_01-lookup-1.ipynb'"
    assert tag_of(course / "submitted" / "bob" / LESSON / f"{LESSON}.ipynb") == \
        "answer = 'Lesson 1_bob_attempt_2026-11-06-10-00-00_01-lookup.ipynb'"
    assert "duplicate submission" in names(notes, "1") and "duplicate submission" in names(notes, "bob")
    kept = next(n["detail"] for n in notes if n["student"] == "1" and n["name"] == "duplicate submission")
    assert kept.startswith("3 copies") and "kept the newest, alice_1_11_01-lookup-1.ipynb" in kept
    # nbgrader records the time from the name as the submission's timestamp
    stamp = (course / "submitted" / "bob" / LESSON / "timestamp.txt").read_text()
    assert stamp.startswith("2026-11-06 10:00:00")
    assert not (course / "submitted" / "1" / LESSON / "timestamp.txt").exists()


def test_non_notebook_files_and_unknown_names_are_skipped_and_noted(course, tmp_path):
    export = make_zip(tmp_path / "mixed.zip", [
        entry("alice_1_2_01-lookup.ipynb"),
        entry("alice_1_3_notes.pdf", b"%PDF-1.4"),
        entry("README.txt", b"exported by the LMS"),
        entry("orphan.ipynb"),                                   # whose is it?
        entry("bob/scratch.ipynb"),                              # not a notebook of this lesson
        entry("__MACOSX/._alice_1_2_01-lookup.ipynb", b"\x00\x05"),  # macOS metadata: silently ignored
        entry("carol/.ipynb_checkpoints/01-lookup-checkpoint.ipynb"),
        entry("carol/01-lookup.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert submitted(course, "1") == [f"{LESSON}.ipynb"]
    assert submitted(course, "bob") == ["scratch.ipynb"]       # staged later as a renamed file, with a flag
    assert submitted(course, "carol") == [f"{LESSON}.ipynb"]
    assert not (course / "submitted" / ".ipynb_checkpoints").exists()
    assert not (course / "submitted" / "__MACOSX").exists()
    by_name = {(n["name"], n["student"]) for n in notes}
    assert ("not a notebook", "1") in by_name and ("not a notebook", "") in by_name
    assert ("unexpected file name", "") in by_name and ("unexpected file name", "bob") in by_name
    assert any("orphan.ipynb" in n["detail"] for n in notes)
    assert names(notes, "carol") == []


def test_escape_attempts_absolute_paths_and_links_are_refused(course, tmp_path):
    export = make_zip(tmp_path / "evil.zip", [
        entry("../../escaped.ipynb"),
        entry("alice/../../../../escaped2.ipynb"),
        entry("/tmp/absolute-qkv-lms_export.ipynb"),
        entry(str(tmp_path / "absolute2.ipynb")),
        entry("C:\\Windows\\drive.ipynb"),
        entry("..\\..\\backslash.ipynb"),
        entry("mallory/01-lookup.ipynb", data=b"../../../../etc/passwd", mode=stat.S_IFLNK | 0o777),
        entry("alice/01-lookup.ipynb"),
    ])
    outside_before = snapshot_outside(course)
    notes = lms_export.collect(export, course, LESSON)
    unsafe = [n for n in notes if n["name"] == "unsafe path"]
    assert len(unsafe) == 7, notes
    assert any("symbolic link" in n["detail"] for n in unsafe)
    assert submitted(course, "alice") == [f"{LESSON}.ipynb"]
    assert submitted(course, "mallory") is None
    assert not os.path.exists("/tmp/absolute-qkv-lms_export.ipynb")
    assert snapshot_outside(course) == outside_before
    for root, _, files in os.walk(course):
        for name in files:
            assert not os.path.islink(os.path.join(root, name))


def test_a_zip_inside_the_zip(course, tmp_path):
    inner_canvas = zip_bytes([entry("01-lookup.ipynb")])                      # one student's uploaded zip
    inner_section = zip_bytes([entry("carol_5_6_01-lookup.ipynb"),            # a second section's export
                               entry("../../../sneaky.ipynb")])
    innermost = zip_bytes([entry("dave/01-lookup.ipynb")])
    export = make_zip(tmp_path / "outer.zip", [
        entry("bob_3_4_lookup.zip", inner_canvas),
        entry("section2.zip", inner_section),
        entry("deeper.zip", zip_bytes([entry("deeper2.zip", innermost)])),
        entry("alice_1_2_01-lookup.ipynb"),
    ])
    outside_before = snapshot_outside(course)
    notes = lms_export.collect(export, course, LESSON)
    for student in ("1", "3", "5", "dave"):   # a second section's export inside the export is read as an export
        assert submitted(course, student) == [f"{LESSON}.ipynb"], (student, notes)
    assert names(notes) == ["unsafe path"]
    assert snapshot_outside(course) == outside_before
    # no zip is left in the extracted tree to be mistaken for a submission
    assert not any(f.endswith(".zip") for _, _, fs in os.walk(course / "downloaded" / LESSON / "extracted") for f in fs)


def test_bad_input_is_a_note_never_a_traceback(course, tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    assert names(lms_export.collect(tmp_path / "broken.zip", course, LESSON)) == ["corrupt archive", "no submissions"]
    assert names(lms_export.collect(tmp_path / "missing.zip", course, LESSON)) == ["no submissions"]
    (tmp_path / "notes.pdf").write_bytes(b"%PDF")
    assert names(lms_export.collect(tmp_path / "notes.pdf", course, LESSON)) == ["not a notebook"]
    empty = make_zip(tmp_path / "empty.zip", [])
    assert names(lms_export.collect(empty, course, LESSON)) == ["no submissions"]
    (tmp_path / "empty folder").mkdir()
    assert names(lms_export.collect(tmp_path / "empty folder", course, LESSON)) == ["no submissions"]


def test_clashing_and_oversized_entries_are_noted(course, tmp_path, monkeypatch):
    monkeypatch.setattr(extractor, "MAX_ENTRY_BYTES", 10_000)
    export = make_zip(tmp_path / "odd.zip", [
        entry("alice", b"a file where a folder is needed"),
        entry("alice/01-lookup.ipynb"),
        entry("bob/01-lookup.ipynb", b"{" + b" " * 20_000 + b"}"),
        entry("carol/01-lookup.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert ("unreadable entry", "") in {(n["name"], n["student"]) for n in notes}
    assert any(n["name"] == "too large" and "bob/01-lookup.ipynb" in n["detail"] for n in notes)
    assert submitted(course, "carol") == [f"{LESSON}.ipynb"] and submitted(course, "bob") is None


def test_an_unzipped_export_folder_is_collected_without_following_links(course, tmp_path):
    folder = tmp_path / "download"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "01-lookup.ipynb").write_bytes(notebook_bytes("alice"))
    (folder / "bob_1_2_01-lookup.ipynb").write_bytes(notebook_bytes("bob"))
    secret = tmp_path / "secret.ipynb"
    secret.write_bytes(notebook_bytes("secret"))
    (folder / "eve").mkdir()
    os.symlink(secret, folder / "eve" / "01-lookup.ipynb")
    make_zip(folder / "dave_5_6_lookup.zip", [entry("01-lookup.ipynb")])  # a student's upload, still zipped
    notes = lms_export.collect(folder, course, LESSON)
    assert submitted(course, "alice") == submitted(course, "1") == submitted(course, "5") == [f"{LESSON}.ipynb"]
    assert submitted(course, "eve") is None
    assert [(n["name"], "eve" in n["detail"]) for n in notes] == [("unsafe path", True)]


def test_an_already_collected_submitted_folder_is_only_checked(course, tmp_path):
    make_zip(tmp_path / "first.zip", [entry("alice_1_2_01-lookup.ipynb"), entry("bob/01-lookup.ipynb")])
    lms_export.collect(tmp_path / "first.zip", course, LESSON)
    folder = course / "submitted"
    (folder / "bob" / LESSON / "essay.docx").write_bytes(b"PK")
    (folder / "bob" / LESSON / "drafts").mkdir()
    os.symlink(tmp_path / "first.zip", folder / "bob" / LESSON / "link.ipynb")
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    notes = lms_export.collect(folder, course, LESSON)
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before
    assert names(notes, "bob") == ["nested folder", "not a notebook", "unsafe path"]
    assert names(notes, "alice") == []


def test_nbgraders_own_archive_folder_is_used_in_place(course, tmp_path):
    archive = course / "downloaded" / LESSON / "archive"
    archive.mkdir(parents=True)
    make_zip(archive / "canvas.zip", [entry("alice_1_2_01-lookup.ipynb")])
    make_zip(archive / "late.zip", [entry("bob_late_3_4_01-lookup.ipynb")])
    assert lms_export.collect(archive, course, LESSON) == [
        lms_names.note("3", "late", "marked late by Canvas (its download gives no time)")]
    assert submitted(course, "1") == submitted(course, "3") == [f"{LESSON}.ipynb"]
    assert sorted(os.listdir(archive)) == ["canvas.zip", "late.zip"]      # the instructor's downloads untouched
    assert lms_export.collect(archive / "canvas.zip", course, LESSON) == []     # one of them, given alone
    extracted = course / "downloaded" / LESSON / "extracted"
    assert names(lms_export.collect(extracted, course, LESSON)) == ["collection failed"]


def test_a_student_folder_starting_with_a_dot_is_refused_with_a_reason(course, tmp_path):
    export = make_zip(tmp_path / "dot.zip", [entry(".hidden/01-lookup.ipynb"), entry("._alice_1_2_01-lookup.ipynb"),
                                             entry(".DS_Store", b"\x00")])
    notes = lms_export.collect(export, course, LESSON)
    assert names(notes) == ["no submissions", "refused student id"]
    assert "'.hidden' is not a student id" in next(n["detail"] for n in notes if n["name"] == "refused student id")
    assert submitted(course, ".hidden") is None
    assert submitted(course, "1") is None                        # macOS's shadow file is not a submission


def test_collecting_again_replaces_and_says_so(course, tmp_path):
    make_zip(tmp_path / "first.zip", [entry("alice_1_2_01-lookup.ipynb")])
    assert lms_export.collect(tmp_path / "first.zip", course, LESSON) == []
    assert lms_export.collect(tmp_path / "first.zip", course, LESSON) == []   # the same export again: nothing to say
    make_zip(tmp_path / "second.zip", [entry("alice_1_9_01-lookup.ipynb")])
    notes = lms_export.collect(tmp_path / "second.zip", course, LESSON)
    assert names(notes) == ["collected again"]
    assert tag_of(course / "submitted" / "1" / LESSON / f"{LESSON}.ipynb") == "answer = 'alice_1_9_01-lookup.ipynb'"


def test_the_real_course_config_is_read_without_side_effects(course, tmp_path):
    """The course's own nbgrader_config.py (which installs the grader) sets the folders; the process is unchanged."""
    shutil.copy(ROOT / "autograde" / "nbgrader_config.py", course / "nbgrader_config.py")
    path_before, env_before = list(sys.path), os.environ.get("PYTHONPATH")
    make_zip(tmp_path / "x.zip", [entry("alice_1_2_01-lookup.ipynb")])
    assert lms_export.collect(tmp_path / "x.zip", course, LESSON) == []
    assert submitted(course, "1") == [f"{LESSON}.ipynb"]
    assert sys.path == path_before and os.environ.get("PYTHONPATH") == env_before
    assert not (ROOT / "autograde" / "submitted" / "alice_1_2_01-lookup.ipynb").exists()


def test_the_documented_patterns_read_the_documented_examples():
    collector = SubmissionCollector("/nowhere", LESSON, {LESSON}, {})
    cases = {
        "alice_12345_67890_01-lookup.ipynb": ("12345", "01-lookup.ipynb"),
        "smithjohn_LATE_1_2_01-lookup.ipynb": ("1", "01-lookup.ipynb"),
        "alice/01-lookup.ipynb": ("alice", "01-lookup.ipynb"),
        "alice/01-lookup/01-lookup.ipynb": ("alice", "01-lookup.ipynb"),
        "submitted/alice/01-lookup/01-lookup.ipynb": ("alice", "01-lookup.ipynb"),
        "Lesson 01_jdoe_attempt_2026-01-30-15-00-00_01-lookup.ipynb": ("jdoe", "01-lookup.ipynb"),
        "Ann Lee_42_assignsubmission_file_/01-lookup.ipynb": ("42", "01-lookup.ipynb"),
        "Ann Lee_43_assignsubmission_file_01-lookup.ipynb": ("43", "01-lookup.ipynb"),
    }
    for path, expected in cases.items():
        info, _ = collector.read(path)
        assert (info["student_id"], info["file_id"]) == expected, path
    assert collector.read("01-lookup.ipynb") == (None, None)


GRADESCOPE_METADATA = """\
submission_111:
  :submitters:
  - :name: Alice Liddell
    :sid: '1001'
    :email: alice@example.edu
  :created_at: 2026-11-02 10:00:00.000000000 -08:00
  :score: 0.0
submission_222:
  :submitters:
  - :name: Bob Group
    :sid: '1002'
    :email: bob@example.edu
  - :name: Carol Group
    :sid: ''
    :email: carol@example.edu
  :created_at: 2026-11-03 09:00:00.000000000 -08:00
submission_333:
  :submitters: []
"""


def test_a_gradescope_export_names_students_from_its_metadata(course, tmp_path):
    export = make_zip(tmp_path / "gradescope.zip", [
        entry("assignment_9_export/submission_metadata.yml", GRADESCOPE_METADATA.encode()),
        entry("assignment_9_export/submission_111/01-lookup.ipynb"),
        entry("assignment_9_export/submission_222/01-lookup.ipynb"),
        entry("assignment_9_export/submission_333/01-lookup.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert submitted(course, "1001") == [f"{LESSON}.ipynb"]
    # a group submission: each member gets the notebook
    assert submitted(course, "1002") == submitted(course, "carol@example.edu") == [f"{LESSON}.ipynb"]
    assert tag_of(course / "submitted" / "carol@example.edu" / LESSON / f"{LESSON}.ipynb") == \
        "answer = 'assignment_9_export/submission_222/01-lookup.ipynb'"
    assert names(notes, "1002") == names(notes, "carol@example.edu") == ["group submission"]
    assert names(notes, "1001") == []
    # a folder nobody is named for is not guessed from its name
    assert any(n["name"] == "unexpected file name" and "submission_333" in n["detail"] for n in notes)
    assert submitted(course, "submission_333") is None
    assert lms_export.collect(export, course, LESSON) == notes          # collecting again changes nothing


def test_what_intake_collects_is_what_the_grader_stages(course, tmp_path):
    """The next step (qkv_autograde.intake.submissions.stage) finds every collected notebook, renamed ones included."""
    from qkv_autograde.intake import submissions

    export = make_zip(tmp_path / "class.zip", [
        entry("alice_1_2_01-lookup.ipynb"),
        entry("bob_3_4_Untitled.ipynb"),                 # a name the release does not have: graded, flagged
        entry("Lesson 1_carol_attempt_2026-11-05-10-00-00_01-lookup.ipynb"),
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert [(n["student"], n["name"]) for n in notes] == [("3", "unexpected file name")]
    staged = submissions.stage(str(course), "submitted", LESSON, [LESSON], str(course.parent / "notebooks" / LESSON))
    assert [(s.student, s.notebook, [a["name"] for a in s.anomalies]) for s in staged] == [
        ("1", LESSON, []), ("3", LESSON, ["renamed file"]), ("carol", LESSON, [])]
    assert (course / ".staged" / "carol" / LESSON / "timestamp.txt").read_text().startswith("2026-11-05 10:00:00")


def test_the_stock_zip_collect_command_uses_the_same_plugins(course, tmp_path):
    """The manual route: nbgrader's own command with the two plugins named on its command line."""
    import subprocess

    archive = course / "downloaded" / LESSON / "archive"
    archive.mkdir(parents=True)
    make_zip(archive / "canvas.zip", [
        entry("alice_1_2_01-lookup.ipynb", date=(2026, 11, 1, 9, 0, 0)),
        entry("alice_1_3_01-lookup-1.ipynb", date=(2026, 11, 2, 9, 0, 0)),
        entry("../../../escape.ipynb"),
    ])
    bin_dir = os.path.dirname(sys.executable)
    run = subprocess.run(
        [os.path.join(bin_dir, "nbgrader"), "zip_collect", LESSON, "--force",
         "--extractor=qkv_autograde.intake.extractor.SafeExtractor",
         "--collector=qkv_autograde.intake.collector.SubmissionCollector"],
        cwd=course, capture_output=True, text=True, timeout=120,
        # run from the real autograde/, nbgrader's cwd on sys.path makes qkv_autograde importable
        env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
             "PYTHONPATH": str(ROOT / "autograde")})
    assert run.returncode == 0, run.stderr
    assert tag_of(course / "submitted" / "1" / LESSON / f"{LESSON}.ipynb") == "answer = 'alice_1_3_01-lookup-1.ipynb'"
    assert "duplicate submission" in run.stderr and "unsafe path" in run.stderr
    assert not (tmp_path / "escape.ipynb").exists() and not (course.parent / "escape.ipynb").exists()


def heavy_notebook(tag, metadata_bytes=0, items=0):
    """notebook_bytes(tag) with `metadata_bytes` of text and `items` empty objects in its metadata."""
    nb = nbformat.reads(notebook_bytes(tag).decode(), as_version=4)
    nb.metadata["junk"] = "x" * metadata_bytes
    nb.metadata["objects"] = [{}] * items
    return nbformat.writes(nb).encode()


def limit_course(course, max_bytes=100_000, max_items=1_000):
    """The course's limits set in its nbgrader_config.py, as an instructor would (c.NotebookLimits)."""
    with (course / "nbgrader_config.py").open("a") as config:
        config.write(f"c.NotebookLimits.max_bytes = {max_bytes}\nc.NotebookLimits.max_items = {max_items}\n")


def test_an_oversized_notebook_is_refused_before_it_is_copied(course, tmp_path):
    limit_course(course)
    export = make_zip(tmp_path / "heavy.zip", [
        entry("alice_1_2_01-lookup.ipynb", heavy_notebook("alice", metadata_bytes=150_000)),  # 150 MB, scaled down
        entry("bob_3_4_01-lookup.ipynb", heavy_notebook("bob", items=5_000)),       # small, but 5,000 objects
        entry("carol_5_6_01-lookup.ipynb", heavy_notebook("carol", metadata_bytes=90_000, items=400)),  # within
    ])
    notes = lms_export.collect(export, course, LESSON)
    assert [(n["student"], n["name"]) for n in notes] == [("1", "oversized notebook"), ("3", "oversized notebook")]
    alice, bob = (n["detail"] for n in notes)
    assert alice.startswith("alice_1_2_01-lookup.ipynb: 150,") and "bytes, over the limit of 100,000 bytes" in alice
    assert "outputs" in alice and bob.startswith("bob_3_4_01-lookup.ipynb: 10,") and \
        "JSON items, over the limit of 1,000" in bob
    assert submitted(course, "1") is None and submitted(course, "3") is None     # no copy in submitted/
    assert submitted(course, "5") == [f"{LESSON}.ipynb"]
    # a resubmission over the limit leaves the copy collected before in place
    make_zip(tmp_path / "again.zip", [entry("carol_5_7_01-lookup.ipynb", heavy_notebook("carol2", 150_000))])
    assert names(lms_export.collect(tmp_path / "again.zip", course, LESSON)) == ["no submissions", "oversized notebook"]
    assert tag_of(course / "submitted" / "5" / LESSON / f"{LESSON}.ipynb") == "answer = 'carol'"


def test_an_oversized_notebook_already_in_submitted_is_refused_before_grading(course, tmp_path):
    """The other route: a submitted/ folder filled by hand is checked, and staging refuses the notebook with the
    same reason, before reading it: nothing of that student is staged for nbgrader."""
    from qkv_autograde.intake import submissions

    limit_course(course)
    for student, data in (("alice", heavy_notebook("alice", metadata_bytes=150_000)),
                          ("bob", notebook_bytes("bob"))):
        (course / "submitted" / student / LESSON).mkdir(parents=True)
        (course / "submitted" / student / LESSON / f"{LESSON}.ipynb").write_bytes(data)
    notes = lms_export.collect(course / "submitted", course, LESSON)
    assert [(n["student"], n["name"]) for n in notes] == [("alice", "oversized notebook")]
    limits = submissions.NotebookLimits(config=lms_export._course_config(str(course)))
    staged = submissions.stage(str(course), "submitted", LESSON, [LESSON], str(course.parent / "notebooks" / LESSON),
                               limits=limits)
    assert [(s.student, s.refused, s.anomalies) for s in staged] == [
        ("alice", True, [{"name": "oversized notebook", "detail": notes[0]["detail"]}]), ("bob", False, [])]
    assert not (course / ".staged" / "alice" / LESSON).exists() and (course / ".staged" / "bob" / LESSON).is_dir()


def test_the_limits_are_documented_and_hold_a_solved_lesson_with_margin():
    from qkv_autograde.intake import submissions

    limits = submissions.NotebookLimits()
    assert (limits.max_bytes, limits.max_items) == (16 << 20, 100_000)
    readme = (ROOT / "README.md").read_text()
    assert "oversized notebook" in readme and "16 MiB" in readme and "100,000" in readme
    for notebook in (ROOT / "solutions").glob("*/*.ipynb"):   # without outputs; solved with them: < 0.6 MB, 3,200
        assert limits.refusal(notebook) is None
        assert notebook.stat().st_size * 30 < limits.max_bytes and submissions.json_items(notebook) * 30 < 100_000
