"""A cumulative history of every submission (issue 21.5): each collection is a round of
autograde/history-<lesson>.jsonl (which export, its sha256, the LMS's time, the notebook's sha256, what happened),
each grading adds the score; an older re-download never rolls a student back to an older notebook unless told to
(--allow-older); the anomaly report keeps every round's notes, each with its round.

Three rounds of lesson 01 as Canvas downloads them: round 1, round 2 (alice resubmits, under a name her browser
gave it: a note), round 3 the round-1 download collected again."""
import csv
import json
import os
import subprocess
import sys

import nbformat

from lessons import ROOT, copy_course, solved_release
# course and with_gradebook are pytest fixtures, imported for pytest to find and taken as test arguments
# (hence noqa F401 here and F811 on the tests that take them)
from test_class_intake import course, entry, make_zip, names, notebook_bytes, tag_of  # noqa: F401
from test_lms_exports import BIN, receipt, with_gradebook  # noqa: F401

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.intake import history, lms_export, lms_names, submissions  # noqa: E402
from qkv_autograde.reports import report  # noqa: E402

LESSON = "01-lookup"
NB = f"{LESSON}.ipynb"


def three_rounds(folder, alice_first=None, alice_second=None, bob=None):
    """The three downloads: alice is Canvas user 1, bob user 2; only alice resubmits (a new attachment id)."""
    alice_first = alice_first or notebook_bytes("alice, first")
    alice_second = alice_second or notebook_bytes("alice, second")
    bob = bob or notebook_bytes("bob")
    first = make_zip(folder / "round1.zip", [entry(f"alice_1_100_{NB}", alice_first), entry(f"bob_2_101_{NB}", bob)])
    second = make_zip(folder / "round2.zip", [entry(f"alice_1_200_{LESSON} (1).ipynb", alice_second),
                                               entry(f"bob_2_101_{NB}", bob)])
    return first, second, first   # round 3: the round-1 download again, older than what round 2 collected


def collect_three_rounds(course_folder, folder, **notebooks):
    return [lms_export.collect(export, course_folder, LESSON) for export in three_rounds(folder, **notebooks)]


def test_an_older_download_collected_again_keeps_the_newer_notebook(course, tmp_path):  # noqa: F811
    first, second, third = collect_three_rounds(course, tmp_path)
    assert names(second, "1") == ["collected again", "unexpected file name"]
    assert names(third, "1") == ["older submission refused"] and names(third, "2") == []
    refused = next(n["detail"] for n in third if n["name"] == "older submission refused")
    assert "as Canvas upload 100" in refused and "as Canvas upload 200" in refused and "--allow-older" in refused
    assert tag_of(course / "submitted" / "1" / LESSON / NB) == "answer = 'alice, second'"
    assert tag_of(course / "submitted" / "2" / LESSON / NB) == "answer = 'bob'"
    # told to: the older copy goes in, and says so (a collected-again submission is graded again)
    told = lms_export.collect(tmp_path / "round1.zip", course, LESSON, allow_older=True)
    assert names(told, "1") == ["collected again"] and "--allow-older" in told[0]["detail"]
    assert tag_of(course / "submitted" / "1" / LESSON / NB) == "answer = 'alice, first'"


def test_the_lms_time_decides_and_no_time_keeps_what_is_there(course, tmp_path):  # noqa: F811
    def blackboard(name, when, tag):
        return make_zip(tmp_path / name, [entry(f"Lesson 1_alee_attempt_{when}_{NB}", notebook_bytes(tag)),
                                           entry(f"Lesson 1_alee_attempt_{when}.txt",
                                                 receipt("Ann Lee", "alee", when))])

    lms_export.collect(blackboard("b1.zip", "2026-11-05-10-00-00", "attempt 2"), course, LESSON)
    notes = lms_export.collect(blackboard("b0.zip", "2026-11-04-10-00-00", "attempt 1"), course, LESSON)
    assert names(notes) == ["older submission refused"]
    assert "at 2026-11-04 10:00:00" in notes[0]["detail"] and "at 2026-11-05 10:00:00" in notes[0]["detail"]
    folder = course / "submitted" / "alee" / LESSON
    assert tag_of(folder / NB) == "answer = 'attempt 2'"
    assert (folder / "timestamp.txt").read_text().startswith("2026-11-05 10:00:00")
    assert json.loads((folder / lms_names.LMS_RECORD).read_text())["timestamp"] == "2026-11-05 10:00:00"
    assert names(lms_export.collect(blackboard("b2.zip", "2026-11-06-10-00-00", "attempt 3"), course, LESSON)) == [
        "collected again"]
    assert tag_of(folder / NB) == "answer = 'attempt 3'"
    # Moodle gives no time: a different copy does not replace the one collected before
    for tag in ("moodle 1", "moodle 2"):
        notes = lms_export.collect(make_zip(tmp_path / f"{tag}.zip", [
            entry(f"John Smith_1001_assignsubmission_file_/{NB}", notebook_bytes(tag))]), course, LESSON)
    assert names(notes) == ["older submission refused"] and "gives no time" in notes[0]["detail"]
    assert tag_of(course / "submitted" / "1001" / LESSON / NB) == "answer = 'moodle 1'"


def test_the_history_lists_every_round(course, tmp_path):  # noqa: F811
    collect_three_rounds(course, tmp_path)
    records = [json.loads(line) for line in (course / f"history-{LESSON}.jsonl").read_text().splitlines()]
    collected = [r for r in records if r["event"] == "collected"]
    assert [(r["round"], r["export"], r["student"], r["outcome"], r["lms_order"]) for r in collected] == [
        (1, "round1.zip", "1", "new", 100), (1, "round1.zip", "2", "new", 101),
        (2, "round2.zip", "1", "replaced older", 200), (2, "round2.zip", "2", "same", 101),
        (3, "round1.zip", "1", "older refused", 100), (3, "round1.zip", "2", "same", 101)]
    sha = {name: history.sha256_of(tmp_path / name) for name in ("round1.zip", "round2.zip")}
    assert all(r["export_sha256"] == sha[r["export"]] for r in collected)
    kept = history.sha256_of(course / "submitted" / "1" / LESSON / NB)
    assert [r["sha256"] == kept for r in collected if r["student"] == "1"] == [False, True, False]
    assert all(r["at"].endswith(" UTC") for r in records)
    noted = {(r["round"], r["student"]): [n["name"] for n in r["notes"]] for r in records if r["event"] == "noted"}
    assert noted == {(2, "1"): ["unexpected file name", "collected again"], (3, "1"): ["older submission refused"]}


def test_the_report_keeps_every_rounds_notes_with_their_round(course, tmp_path, with_gradebook):  # noqa: F811
    collect_three_rounds(course, tmp_path)
    staged = submissions.stage(str(course), "submitted", LESSON, [LESSON], str(course.parent / "notebooks" / LESSON))
    report.write(str(course), with_gradebook, LESSON, staged)
    rows = {r["student"]: r for r in csv.DictReader((course / f"anomalies-{LESSON}.csv").open(newline=""))}
    alice = rows["1"]
    # (nothing was graded here: "not graded" first)
    assert alice["anomalies"].split("; ")[1:] == ["unexpected file name", "collected again", "older submission refused"]
    assert f"{LESSON} (1).ipynb collected as {NB} [round 2, " in alice["details"] and "round2.zip]" in alice["details"]
    assert "older submission refused: " in alice["details"] and ", round1.zip]" in alice["details"].split(" | ")[-1]
    assert alice["collected"].split(" | ")[0].startswith("round 1, ") and alice["collected"].endswith(
        "round1.zip: older refused")
    assert rows["2"]["anomalies"] == "not graded"
    page = (course / f"anomalies-{LESSON}.html").read_text()
    assert "round2.zip" in page and "older submission refused" in page


def test_a_class_graded_after_three_rounds_keeps_the_newer_grade_and_records_it(tmp_path):
    """Rounds 1 and 2 collected, round 3 through `python -m qkv_autograde --submissions` (collect and grade)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    instructor = copy_course(tmp_path / "course")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env,
                   check=True, capture_output=True)
    blank = nbformat.writes(solved_release(LESSON, [])).encode()
    first, second, third = three_rounds(tmp_path, alice_first=blank, bob=blank,
                                        alice_second=nbformat.writes(solved_release(LESSON)).encode())
    lms_export.collect(first, instructor, LESSON)
    lms_export.collect(second, instructor, LESSON)
    done = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--submissions", str(third), "--jobs", "2"],
                          cwd=instructor, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    grades = {r["student_id"]: r["score"] for r in csv.DictReader((instructor / "grades.csv").open(newline=""))}
    assert grades == {"1": "13.0", "2": "0.0"}
    rows = {r["student"]: r for r in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open(newline=""))}
    assert {"unexpected file name", "older submission refused"} <= set(rows["1"]["anomalies"].split("; "))
    assert "round2.zip]" in rows["1"]["details"] and float(rows["1"]["score"]) == 13.0
    records = [json.loads(line) for line in (instructor / f"history-{LESSON}.jsonl").read_text().splitlines()]
    graded = {r["student"]: r for r in records if r["event"] == "graded"}
    assert sorted(graded) == ["1", "2"] and len([r for r in records if r["event"] == "graded"]) == 2
    assert graded["1"]["score"] == 13.0 and graded["1"]["max_score"] == 15.0 and graded["2"]["score"] == 0.0
    assert graded["1"]["sha256"] == history.sha256_of(instructor / "submitted" / "1" / LESSON / NB) == next(
        r["sha256"] for r in records if r["event"] == "collected" and r["round"] == 2 and r["student"] == "1")
    assert sorted({r["round"] for r in records if r["event"] == "collected"}) == [1, 2, 3]


def test_the_report_shows_the_name_kept_for_display_escaped(course, tmp_path, with_gradebook):  # noqa: F811
    """Issue 35, item 4: each row carries the name the LMS showed beside the id (and nbgrader's name of a student
    no LMS named); a name is student data: escaped on the page, never a formula in the CSV."""
    from nbgrader.api import Gradebook

    hostile = '=HYPERLINK("http://evil") <img src=x onerror=alert(1)>'
    lms_export.collect(make_zip(tmp_path / "round.zip", [entry(f"ann_1_100_{NB}"), entry(f"bob_2_101_{NB}")]),
                   course, LESSON)
    record = course / "submitted" / "2" / LESSON / lms_names.LMS_RECORD
    record.write_text(json.dumps(dict(json.loads(record.read_text()), name=hostile)))
    with Gradebook(with_gradebook) as gb:
        gb.update_or_create_student("cy", first_name="Cy", last_name="Young")
    staged = submissions.stage(str(course), "submitted", LESSON, [LESSON], str(course.parent / "notebooks" / LESSON))
    table = report.write(str(course), with_gradebook, LESSON, staged + [submissions.Staged("cy", "", [])])
    assert {row["student"]: row["name"] for row in table} == {"1": "ann", "2": hostile, "cy": "Cy Young"}
    rows = {r["student"]: r for r in csv.DictReader((course / f"anomalies-{LESSON}.csv").open(newline=""))}
    assert (rows["1"]["name"], rows["2"]["name"]) == ("ann", "'" + hostile)
    page = (course / f"anomalies-{LESSON}.html").read_text()
    assert "<img" not in page
    assert "<td>=HYPERLINK(&quot;http://evil&quot;) &lt;img src=x onerror=alert(1)&gt;</td>" in page


def test_what_waits_for_hand_grading_is_counted_with_who():
    """Issue 35, item 5: the sentence the report and make grade's summary print."""
    table = [{"student": "1", "name": "Ann Lee", "hand_grading": ["written_trophy"]},
             {"student": "2", "name": "", "hand_grading": ["written_a", "written_b"]},
             {"student": "3", "name": "Bo", "hand_grading": []}]
    assert report.waiting_for_hand_grading(table) == (
        "3 written answers wait for hand grading (formgrader): Ann Lee (1), 2.")
    assert report.waiting_for_hand_grading(table[:1]) == (
        "1 written answer waits for hand grading (formgrader): Ann Lee (1).")
    assert report.waiting_for_hand_grading(table[2:]) == "No written answer waits for hand grading."
