"""A term through nbgrader's exchange instead of an LMS, as README documents it: `make exchange`, release, each
student fetches and submits from their own folder with the students' exchange configuration (jupyter/exchange),
the instructor collects, autogrades, writes and releases feedback, and each student fetches their own."""
import json
import os
import pathlib
import stat
import subprocess
import sys

import nbformat
import pytest

from lessons import ROOT, copy_course, solved_release

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
FULL_AUTOGRADED = 13  # lesson 01's autograded points; the written answer is graded by hand
pytestmark = pytest.mark.grading_class


def env(exchange, **extra):
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg",
                QKV_EXCHANGE=str(exchange), **extra)


def nbgrader(*args, cwd, environment):
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=environment, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, \
        f"nbgrader {' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def test_make_exchange_makes_a_folder_every_student_can_write_and_nobody_can_clean_out(tmp_path):
    exchange = tmp_path / "srv" / "exchange"
    subprocess.run(["make", "-s", "exchange", f"QKV_EXCHANGE={exchange}"], cwd=ROOT, check=True, capture_output=True)
    mode = exchange.stat().st_mode
    assert mode & 0o777 == 0o777 and mode & stat.S_ISVTX


def test_students_exchange_configuration_shows_the_assignments_tab_and_no_instructor_panels():
    server = json.loads((ROOT / "jupyter" / "exchange" / "jupyter_server_config.json").read_text())
    extensions = server["ServerApp"]["jpserver_extensions"]
    assert extensions == {"nbgrader.server_extensions.formgrader": False,
                          "nbgrader.server_extensions.assignment_list": True,
                          "nbgrader.server_extensions.course_list": False}
    disabled = json.loads((ROOT / "jupyter" / "exchange" / "labconfig" / "page_config.json").read_text())
    # nbgrader 0.9's menu plugin holds the Assignments entry and its palette command (issue 42: it was disabled)
    for needed in ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu"):
        assert needed not in disabled["disabledExtensions"]
    assert disabled["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True
    assert disabled["disabledExtensions"]["@jupyter/nbgrader:create-assignment"] is True


def test_a_class_through_the_exchange_from_release_to_each_students_own_feedback(tmp_path):
    instructor = copy_course(tmp_path)
    exchange = tmp_path / "exchange"
    subprocess.run(["make", "-s", "exchange", f"QKV_EXCHANGE={exchange}"], cwd=ROOT, check=True, capture_output=True)
    teacher = env(exchange)
    # students' servers: the exchange configuration only, each in their own home (nbgrader keeps a student's copy
    # of every submission, the key to their feedback, in the home's Jupyter data folder), no course in sight
    def learner(name):
        return env(exchange, JUPYTER_CONFIG_PATH=str(ROOT / "jupyter" / "exchange"), HOME=str(homes[name]))
    nbgrader("generate_assignment", LESSON, "--force", cwd=instructor, environment=teacher)
    nbgrader("release_assignment", LESSON, "--force", cwd=instructor, environment=teacher)

    answers = {"alice": solved_release(LESSON), "bob": solved_release(LESSON, [])}
    homes = {}
    for name, notebook in answers.items():
        homes[name] = tmp_path / "home" / name
        homes[name].mkdir(parents=True)
        nbgrader("fetch_assignment", LESSON, cwd=homes[name], environment=learner(name))
        fetched = homes[name] / LESSON / f"{LESSON}.ipynb"
        assert fetched.exists()
        nbformat.write(notebook, fetched)
        # one OS account in this test: --student says who hands in (on JupyterHub, nbgrader takes the hub's user)
        nbgrader("submit", LESSON, f"--student={name}", cwd=homes[name], environment=learner(name))

    nbgrader("collect", LESSON, cwd=instructor, environment=teacher)
    for name in answers:
        folder = instructor / "submitted" / name / LESSON
        assert (folder / f"{LESSON}.ipynb").exists() and (folder / "timestamp.txt").exists()

    nbgrader("autograde", LESSON, "--SandboxedExecute.cell_timeout=30", "--SandboxedExecute.call_timeout=20",
             cwd=instructor, environment=teacher)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        scores = {s.student_id: s.score for s in gb.assignment_submissions(LESSON)}
    assert scores == {"alice": FULL_AUTOGRADED, "bob": 0}

    nbgrader("generate_feedback", LESSON, cwd=instructor, environment=teacher)
    nbgrader("release_feedback", LESSON, cwd=instructor, environment=teacher)
    for name in answers:
        nbgrader("fetch_feedback", LESSON, f"--student={name}", cwd=homes[name], environment=learner(name))
        pages = list((homes[name] / LESSON / "feedback").rglob(f"{LESSON}.html"))
        assert len(pages) == 1, f"{name} fetched {pages}: only their own page may reach them"
        page = pages[0].read_text()
        assert f"Score: {scores[name]:.1f} / 15.0" in page, f"{name}'s page does not show their score"
