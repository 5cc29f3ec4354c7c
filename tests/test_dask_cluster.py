"""`make grade SCHEDULER=...` on a real Dask cluster, started as README says (a `dask scheduler`, `dask worker`s)
on loopback, with no PYTHONPATH anywhere: the grader ships its own code to the workers, every submission is graded
on the cluster (none falls back to the coordinator), and a cluster whose workers cannot grade stops the run with
the reason instead of letting the coordinator grade the class alone (issue 21, item 8)."""
import contextlib
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from lessons import copy_course, hand_in, solved_release

pytest.importorskip("distributed")

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
START_SECONDS = 120  # a cold `dask` process on a loaded 2-core machine
# README's environment without PYTHONPATH: nothing tells the cluster where the grader's code is
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}

pytestmark = pytest.mark.grading_class


def _stop(process):
    """Stop a process this test started, with everything it started (its own session), by its id."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def cluster(folder, workers=2, worker_env=None):
    """A `dask scheduler` and `dask worker` processes on 127.0.0.1, run from `folder` (not the course); yields the
    scheduler's address once `workers` workers have joined."""
    folder.mkdir(parents=True, exist_ok=True)
    address_file = folder / "scheduler.json"
    started = []
    try:
        with open(folder / "scheduler.log", "w") as log:
            started.append(subprocess.Popen(
                [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                 "--scheduler-file", str(address_file)], cwd=folder, env=ENV, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
        for k in range(workers):
            with open(folder / f"worker{k}.log", "w") as log:
                started.append(subprocess.Popen(
                    [str(BIN / "dask"), "worker", "--scheduler-file", str(address_file), "--host", "127.0.0.1",
                     "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                     "--local-directory", str(folder / f"w{k}")],
                    cwd=folder, env=worker_env or ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        yield _wait_for(address_file, workers, started, folder)
    finally:
        for process in reversed(started):
            _stop(process)


def _wait_for(address_file, workers, started, folder):
    from distributed import Client

    deadline = time.monotonic() + START_SECONDS
    while not address_file.exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in started):
            pytest.fail("the Dask cluster did not start:\n" + (folder / "scheduler.log").read_text()[-3000:])
        time.sleep(0.2)
    time.sleep(0.5)  # the file is written in one go, but give the writer a moment
    address = json.loads(address_file.read_text())["address"]
    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=START_SECONDS)
    return address


def a_class(parent):
    instructor = copy_course(parent)
    with (instructor / "nbgrader_config.py").open("a") as config:
        config.write("\nc.SandboxedExecute.cell_timeout = 20\nc.SandboxedExecute.call_timeout = 10\n")
    students = {"ada": (solved_release(LESSON), 13.0), "bo": (solved_release(LESSON, []), 0.0),
                "cy": (solved_release(LESSON, ["hard_lookup", "softmax"]), 5.0)}
    for student, (notebook, _) in students.items():
        hand_in(instructor, LESSON, student, notebook)
    return instructor, {student: score for student, (_, score) in students.items()}


def make_grade(instructor, address):
    return subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--scheduler", address], cwd=instructor,
                          env=ENV, capture_output=True, text=True, timeout=1800)


def test_a_cluster_started_as_readme_says_grades_every_submission(tmp_path):
    instructor, expected = a_class(tmp_path / "course")
    with cluster(tmp_path / "cluster") as address:
        done = make_grade(instructor, address)
    assert done.returncode == 0, done.stderr[-4000:]
    grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())
              if r["assignment"] == LESSON}
    assert grades == expected
    assert "3 graded on the cluster, 0 here" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "grading it here" not in done.stderr, done.stderr[-3000:]
    assert all((instructor / "feedback" / s / LESSON / f"{LESSON}.html").exists() for s in expected)


def test_a_cluster_that_cannot_grade_stops_the_run_with_the_reason(tmp_path):
    instructor, _ = a_class(tmp_path / "course")
    # a worker whose environment is broken: its `qkv` cannot be imported
    broken = tmp_path / "broken" / "qkv"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('this worker has a broken qkv')\n")
    with cluster(tmp_path / "cluster", workers=1, worker_env=dict(ENV, PYTHONPATH=str(broken.parent))) as address:
        started = time.monotonic()
        done = make_grade(instructor, address)
        seconds = time.monotonic() - started
    assert done.returncode != 0
    assert "cannot grade 01-lookup" in done.stderr, done.stderr[-3000:]
    assert "this worker has a broken qkv" in done.stderr, done.stderr[-3000:]
    assert not (instructor / "autograded").exists(), "nothing graded, not even by the coordinator"
    print(f"stopped after {seconds:.0f} s")
