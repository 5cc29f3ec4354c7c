"""`make grade`: a class graded in parallel, on Dask, after a kill, and again, always to the same grades as the
stock sequential `nbgrader autograde` with the same grader."""
import csv
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from lessons import ROOT, copy_course, hand_in, solved_release

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.grading import preprocessors  # noqa: E402
from qkv_autograde.kernels import sandbox  # noqa: E402

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
pytestmark = pytest.mark.grading_class
FAST = ["--SandboxedExecute.cell_timeout=20", "--SandboxedExecute.call_timeout=10"]


def env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def a_class(parent):
    """Honest, half-done, blank, renamed and looping submissions of lesson 01."""
    instructor = copy_course(parent)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    hand_in(instructor, LESSON, "ada", solved_release(LESSON))
    hand_in(instructor, LESSON, "bo", solved_release(LESSON, []))
    hand_in(instructor, LESSON, "cy", solved_release(LESSON, ["hard_lookup", "softmax", "answer_lookup_on_miss"]))
    hand_in(instructor, LESSON, "di", solved_release(LESSON), name="01-lookup-Copy1.ipynb")
    looping = solved_release(LESSON)
    for cell in looping.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "soft_lookup_by_temperature":
            cell.source += "\nwhile True:\n    pass"
    hand_in(instructor, LESSON, "ed", looping)
    return instructor


def grade_with_make_grade(instructor, *args):
    # the command README documents, run where make grade runs it
    return subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, *args], cwd=instructor, env=env(),
                          capture_output=True, text=True, timeout=1800)


def results(instructor):
    """Per student: total score, the score of every graded cell, and the anomaly names."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        for submission in gb.assignment_submissions(LESSON):
            cells = {g.name: g.score for nb in submission.notebooks for g in nb.grades}
            out[submission.student_id] = {"score": submission.score, "cells": cells}
    for row in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open()):
        out.setdefault(row["student"], {})["anomalies"] = sorted(set(row["anomalies"].split("; ")) - {""})
    return out


def scores(found):
    return {student: (r.get("score"), r.get("cells")) for student, r in found.items()}


def feedback_verdicts(instructor):
    """Which test cells each student's feedback page shows as failed (hint text varies with the random draw)."""
    verdicts = {}
    for page in sorted((instructor / "feedback").rglob("*.html")):
        verdicts[page.parts[-3]] = page.read_text().count('class="output_error"') + page.read_text().count("Hint:")
    return verdicts


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    instructor = a_class(tmp_path_factory.mktemp("sequential"))
    for args in (["autograde", LESSON, *FAST], ["generate_feedback", LESSON]):
        done = subprocess.run([str(BIN / "nbgrader"), *args], cwd=instructor, env=env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    return results(instructor), feedback_verdicts(instructor)


def _config(instructor):
    with open(instructor / "nbgrader_config.py", "a") as f:
        f.write("\nc.SandboxedExecute.cell_timeout = 20\nc.SandboxedExecute.call_timeout = 10\n")


def test_parallel_grades_equal_sequential_grades(sequential, tmp_path):
    instructor = a_class(tmp_path)
    _config(instructor)
    done = grade_with_make_grade(instructor, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(instructor) == sequential[0]
    assert feedback_verdicts(instructor) == sequential[1]
    assert "graded 5 submission(s)" in done.stdout and (instructor / "grades.csv").exists()
    # the workers did the grading (a failed worker's submission is graded by the coordinator, to the same grades,
    # which would hide a broken worker), with kernels forked from their warm template where bubblewrap works
    assert "grading it here" not in done.stderr, done.stderr[-3000:]
    if sandbox.isolation() == "bwrap":
        assert "no warm kernels" not in done.stderr, done.stderr[-3000:]
    again = grade_with_make_grade(instructor, "--jobs", "2")
    assert again.returncode == 0 and "graded 0 submission(s)" in again.stdout, "a finished class is a no-op"
    assert results(instructor) == sequential[0]


def test_dask_cluster_grades_equal_sequential_grades(sequential, tmp_path):
    pytest.importorskip("dask.distributed")
    instructor = a_class(tmp_path)
    _config(instructor)
    script = (
        "import os, sys\n"
        "from dask.distributed import LocalCluster, Client\n"
        "if __name__ == '__main__':\n"
        "    sys.path.insert(0, os.getcwd())\n"
        "    os.environ['PYTHONPATH'] = os.getcwd() + os.pathsep + os.environ.get('PYTHONPATH', '')\n"
        "    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:\n"
        "        from qkv_autograde.grading.grade_class import main\n"
        f"        main([{LESSON!r}, '--scheduler', cluster.scheduler_address])\n")
    # a LocalCluster on loopback speaks plain TCP: opted out by name (test_dask_cluster grades on README's TLS cluster)
    done = subprocess.run([sys.executable, "-c", script], cwd=instructor, env=dict(env(), INSECURE_SCHEDULER="1"),
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results(instructor) == sequential[0]
    assert feedback_verdicts(instructor) == sequential[1], "feedback written by the coordinator (remote workers)"


def test_killed_then_rerun_grades_only_what_is_missing_and_ends_the_same(sequential, tmp_path):
    instructor = a_class(tmp_path)
    _config(instructor)
    process = subprocess.Popen([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "2"], cwd=instructor,
                               env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 900
    while not list((instructor / "autograded").glob(f"*/{LESSON}/{LESSON}.ipynb")):
        assert process.poll() is None and time.monotonic() < deadline, "grading ended before it could be killed"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done = grade_with_make_grade(instructor, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert scores(results(instructor)) == scores(sequential[0])
    rows = [r for r in csv.DictReader((instructor / "grades.csv").open()) if r["assignment"] == LESSON]
    assert sorted(r["student_id"] for r in rows) == sorted(sequential[0]), "one row per student"


def test_an_lms_zip_goes_to_grades_in_one_command(tmp_path):
    import zipfile
    instructor = copy_course(tmp_path / "course")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    export = tmp_path / "submissions.zip"
    with zipfile.ZipFile(export, "w") as z:
        z.writestr(f"ada_1001_2001_{LESSON}.ipynb", nbformat.writes(solved_release(LESSON)))
        z.writestr(f"bo_1002_2002_{LESSON}.ipynb", nbformat.writes(solved_release(LESSON, ["hard_lookup"])))
        z.writestr("bo_1002_2002_notes.txt", "not a notebook")
        z.writestr(f"../../escape_1003_2003_{LESSON}.ipynb", "{}")
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    done = grade_with_make_grade(instructor, "--submissions", str(export), "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())
            if r["assignment"] == LESSON}
    assert rows == {"1001": 13.0, "1002": 2.0}   # the Canvas user ids: Canvas names the students by them
    assert sorted(p.name for p in tmp_path.iterdir()) == outside_before, "nothing written outside the course"
    report = (instructor / f"anomalies-{LESSON}.csv").read_text()
    assert "not a notebook" in report and "unsafe path" in report
    assert (instructor / f"items-{LESSON}.html").stat().st_size > 1000


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    """Four submissions of lesson 01 (perfect, blank, half-done, renamed) graded by make grade on two workers."""
    instructor = copy_course(tmp_path_factory.mktemp("small"))
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    hand_in(instructor, LESSON, "ada", solved_release(LESSON))
    hand_in(instructor, LESSON, "bo", solved_release(LESSON, []))
    hand_in(instructor, LESSON, "cy", solved_release(LESSON, ["hard_lookup", "softmax"]))
    hand_in(instructor, LESSON, "di", solved_release(LESSON), name="01-lookup-Copy1.ipynb")
    done = grade_with_make_grade(instructor, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "graded 4 submission(s)" in done.stdout and "feedback failed" not in done.stdout, done.stdout
    assert "4 graded by the local workers, 0 here" in done.stdout, done.stdout
    # every phase with a known size shows its progress, each bar starting from its real total (issue 21)
    for phase in (f"grading {LESSON}: 100%", "4/4", f"feedback {LESSON}: 100%", "grades.csv and item analysis: 100%"):
        assert phase in done.stderr, (phase, done.stderr[-2000:])
    # a bar with no total counts up from "0submission"; a rate such as "1.40submission/s" is not that
    assert not re.search(r"(?<![\d.])0submission", done.stderr), done.stderr[-2000:]
    return instructor


def files_under(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_in_process_export_and_feedback_equal_the_stock_commands(small_class):
    # the stock commands, on the same gradebook and autograded notebooks, next to what make grade wrote
    for args in (["export", "--to", "stock-grades.csv"],
                 ["generate_feedback", LESSON, "--CourseDirectory.feedback_directory=stock-feedback"]):
        done = subprocess.run([str(BIN / "nbgrader"), *args], cwd=small_class, env=env(), capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    assert (small_class / "grades.csv").read_bytes() == (small_class / "stock-grades.csv").read_bytes()
    ours, stock = files_under(small_class / "feedback"), files_under(small_class / "stock-feedback")
    assert sorted(ours) == sorted(stock) and len([p for p in ours if p.endswith(".html")]) == 4
    assert ours == stock, [p for p in ours if ours[p] != stock[p]]


def test_feedback_pages_are_nbconverts_pages_without_the_reserialization(small_class):
    """The course's FeedbackExporter (both routes) against nbconvert's own HTMLExporter on real graded pages."""
    from bs4 import BeautifulSoup

    done = subprocess.run([str(BIN / "nbgrader"), "generate_feedback", LESSON,
                           "--CourseDirectory.feedback_directory=htmlexporter-feedback",
                           # nbconvert's HTMLExporter page, with the course's template and inert student content
                           "--GenerateFeedback.exporter_class="
                           "qkv_autograde.reports.feedback_html.ReserializedFeedbackExporter"],
                          cwd=small_class, env=env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    ours = files_under(small_class / "feedback")
    nbconverts = files_under(small_class / "htmlexporter-feedback")
    pages = [p for p in ours if p.endswith(".html")]
    assert sorted(ours) == sorted(nbconverts) and len(pages) == 4
    # the grader describes figures instead of drawing them (issue 45): each page says what the figure shows
    assert any(b'class="qkv-figure-text"' in ours[p] for p in pages), "no figure on any page: nothing tested"
    widget = [p for p in pages if p.startswith("ada/")]  # ada's lookup_explorer cell ran: a widget, not shown
    assert widget and preprocessors.WIDGET_NOTE.encode() in ours[widget[0]]
    for page in pages:
        assert b"VBox(children=" not in ours[page], page
        assert ours[page] != nbconverts[page]
        assert str(BeautifulSoup(ours[page].decode(), features="html.parser")).encode() == nbconverts[page], page


def test_feedback_that_fails_is_reported_per_student(small_class, tmp_path):
    import shutil
    course = tmp_path / "qkv"
    shutil.copytree(small_class.parent, course)
    instructor = course / "autograde"
    (instructor / "autograded" / "bo" / LESSON / f"{LESSON}.ipynb").write_text("{ not a notebook")
    script = ("from qkv_autograde.reports.feedback import generate\n"
              f"print('FAILED', generate({LESSON!r}, ['ada', 'bo'], True))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=instructor, env=env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("FAILED", 1)[1].strip() == "['bo']"
    assert (instructor / "feedback" / "ada" / LESSON / f"{LESSON}.html").exists()
    assert not (instructor / "feedback" / "bo" / LESSON).exists(), "nbgrader removes a failed student's folder"
    assert (instructor / "feedback" / "cy" / LESSON / f"{LESSON}.html").exists(), "another share: left alone"


# --------------------------------------------------------------------- start-up: checked, not rebuilt (issue 35, 8)

def test_make_grade_does_not_run_the_model_build_each_time():
    """make grade's prerequisite is the installed environment only: `make model`'s two commands are not run on
    every call (the grader checks their stamps instead)."""
    planned = subprocess.run(["make", "-n", "-o", ".venv/.installed", "grade", f"LESSON={LESSON}"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "qkv_autograde" in planned
    assert "qkv.model" not in planned and "fill_model_cache" not in planned, planned


def test_prepare_model_takes_the_stamp_path_and_builds_only_what_is_missing(monkeypatch):
    from qkv import fill_model_cache

    from qkv_autograde.grading import startup

    built = []
    monkeypatch.setattr(startup.subprocess, "run", lambda command, **kwargs: built.append(command[2:]) or
                        subprocess.CompletedProcess(command, 0))
    monkeypatch.setattr(fill_model_cache, "model_ready", lambda: True)
    monkeypatch.setattr(fill_model_cache, "stale", lambda lessons: [])
    assert startup.prepare_model("05-heads") == [] and built == []
    assert startup.prepare_model(LESSON) == [] and built == []   # lesson 01 runs no model: nothing checked
    monkeypatch.setattr(fill_model_cache, "model_ready", lambda: False)
    monkeypatch.setattr(fill_model_cache, "stale", lambda lessons: [(lessons[0], 2)])
    assert startup.prepare_model("06-sinks") == ["the model", "the results of 06-sinks at 2 BLAS thread(s)"]
    assert built == [["qkv.model"], ["qkv.fill_model_cache", "06-sinks"]]
    said = startup.Startup(1.25, True, []).said()
    assert said == "start-up 1.2 s: the model and its results checked, not rebuilt"


def test_workers_start_only_when_there_is_something_to_grade():
    """A class with nothing new starts no worker (each would fork and warm up for nothing)."""
    from types import SimpleNamespace

    from qkv_autograde.grading import grade_class

    log = []
    workers = grade_class.WhenNeeded(lambda: log.append("started") or SimpleNamespace(
        where="by the local workers", submit=lambda fn, *args: fn(*args), close=lambda: log.append("closed")))
    assert workers.where.startswith("nowhere") and workers.started_at is None
    workers.close()
    assert log == []
    assert workers.submit(len, "abc") == 3 and workers.where == "by the local workers" and log == ["started"]
    workers.close()
    assert log == ["started", "closed"]
