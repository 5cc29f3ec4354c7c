"""`make grade SCHEDULER=...` on a real Dask cluster, started as README says (a `dask scheduler`, `dask worker`s)
on loopback, with no PYTHONPATH anywhere: the grader ships its own code to the workers, every submission is graded
on the cluster (none falls back to the coordinator), and a cluster whose workers cannot grade stops the run with
the reason instead of letting the coordinator grade the class alone (issue 21, item 8).

The cluster runs on TLS with the course's certificates (`make cluster-certificates`): a worker with them grades, a
worker without them, with another CA's or speaking plain TCP cannot join, and the grader refuses a plain `tcp://`
scheduler unless the instructor opts out by name (issue 34, item 6)."""
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
JOIN_SECONDS = 60  # an intruder gives up (--death-timeout 20) and exits well within this
# README's environment without PYTHONPATH: nothing tells the cluster where the grader's code is, nor any opt-out
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INSECURE_SCHEDULER", "DASK_SCHEDULER")} | {
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


def tls_flags(certificates, role):
    """README's certificate flags of `dask scheduler` / `dask worker` (role: scheduler, worker)."""
    return ["--tls-ca-file", str(certificates / "ca.pem"), "--tls-cert", str(certificates / f"{role}.pem"),
            "--tls-key", str(certificates / f"{role}.key")]


def make_certificates(instructor, folder=None):
    """What `make cluster-certificates` runs (in autograde/); into the course's cluster/ unless `folder`."""
    where = ["--folder", str(folder)] if folder else []
    done = subprocess.run([sys.executable, "-m", "qkv_autograde.grading.cluster_security", *where], cwd=instructor,
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return pathlib.Path(folder or instructor / "cluster")


@contextlib.contextmanager
def cluster(folder, workers=2, worker_env=None, certificates=None):
    """A `dask scheduler` and `dask worker` processes on 127.0.0.1, run from `folder` (not the course), on TLS with
    the course's `certificates` (a folder) or else on plain TCP; yields the scheduler's address once `workers`
    workers have joined."""
    folder.mkdir(parents=True, exist_ok=True)
    address_file = folder / "scheduler.json"
    started = []
    host = "tls://127.0.0.1" if certificates else "127.0.0.1"
    try:
        with open(folder / "scheduler.log", "w") as log:
            started.append(subprocess.Popen(
                [str(BIN / "dask"), "scheduler", "--host", host, "--port", "0", "--no-dashboard",
                 "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(address_file),
                 *(tls_flags(certificates, "scheduler") if certificates else [])],
                cwd=folder, env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for k in range(workers):
            with open(folder / f"worker{k}.log", "w") as log:
                started.append(subprocess.Popen(
                    [str(BIN / "dask"), "worker", "--scheduler-file", str(address_file), "--host", "127.0.0.1",
                     "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                     "--local-directory", str(folder / f"w{k}"),
                     *(tls_flags(certificates, "worker") if certificates else [])],
                    cwd=folder, env=worker_env or ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        yield _wait_for(address_file, workers, started, folder, certificates)
    finally:
        for process in reversed(started):
            _stop(process)


def client_security(certificates):
    from distributed import Security

    return Security(tls_ca_file=str(certificates / "ca.pem"), tls_client_cert=str(certificates / "client.pem"),
                    tls_client_key=str(certificates / "client.key"), require_encryption=True) if certificates else None


def _wait_for(address_file, workers, started, folder, certificates=None):
    from distributed import Client

    deadline = time.monotonic() + START_SECONDS
    while not address_file.exists():
        if time.monotonic() > deadline or any(p.poll() is not None for p in started):
            pytest.fail("the Dask cluster did not start:\n" + (folder / "scheduler.log").read_text()[-3000:])
        time.sleep(0.2)
    time.sleep(0.5)  # the file is written in one go, but give the writer a moment
    address = json.loads(address_file.read_text())["address"]
    with Client(address, timeout=60, security=client_security(certificates)) as client:
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


def make_grade(instructor, address, *flags, env=None):
    return subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--scheduler", address, *flags],
                          cwd=instructor, env=env or ENV, capture_output=True, text=True, timeout=1800)


def intruder(folder, name, address, flags=()):
    """A `dask worker` that tries to join `address` without the course's certificate; gives up after 20 s."""
    with open(folder / f"{name}.log", "w") as log:
        return subprocess.Popen(
            [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
             "--death-timeout", "20", "--local-directory", str(folder / name), *flags],
            cwd=folder, env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_a_cluster_started_as_readme_says_grades_every_submission(tmp_path):
    """README's secured cluster: the course's certificates, the scheduler and workers on TLS, `make grade` given
    only the tls:// address. While it grades, three strangers try to join: a worker without a certificate, one with
    a certificate of another CA, one speaking plain TCP; none is ever registered, and each gives up."""
    instructor, expected = a_class(tmp_path / "course")
    certificates = make_certificates(instructor)
    stranger = make_certificates(instructor, tmp_path / "stranger-ca")
    assert sorted(p.name for p in certificates.iterdir()) == sorted(
        f"{role}.{ext}" for role in ("ca", "scheduler", "worker", "client") for ext in ("pem", "key"))
    assert all(p.stat().st_mode & 0o077 == 0 for p in certificates.iterdir()), "keys readable by the instructor only"
    with cluster(tmp_path / "cluster", certificates=certificates) as address:
        assert address.startswith("tls://127.0.0.1:")
        tries = tmp_path / "intruders"
        tries.mkdir()
        # `make grade SCHEDULER=tls://...`, while the strangers try to join
        grading = subprocess.Popen([sys.executable, "-m", "qkv_autograde", LESSON, "--scheduler", address],
                                   cwd=instructor, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        intruders = {}
        try:
            started = time.monotonic()
            intruders = {"no certificate": intruder(tries, "none", address),
                         "another CA's certificate": intruder(tries, "stranger", address,
                                                              tls_flags(stranger, "worker")),
                         "plain TCP": intruder(tries, "tcp", address.replace("tls://", "tcp://"))}
            for name, process in intruders.items():
                process.wait(timeout=max(1.0, started + JOIN_SECONDS - time.monotonic()))
                assert process.returncode != 0, f"the worker with {name} ran as if it had joined"
            gave_up = time.monotonic() - started
            stdout, stderr = grading.communicate(timeout=1800)
        finally:
            for process in [*intruders.values(), grading]:
                _stop(process)
        from distributed import Client
        with Client(address, timeout=30, security=client_security(certificates)) as client:
            joined = client.scheduler_info(n_workers=-1)["workers"]
    scheduler_log = (tmp_path / "cluster" / "scheduler.log").read_text()
    assert len(joined) == 2 and all(w.startswith("tls://") for w in joined), joined
    assert scheduler_log.count("Register worker") == 2, "only the course's two workers ever registered"
    assert "TLSV1_ALERT_UNKNOWN_CA" in scheduler_log or "handshake failed" in scheduler_log, scheduler_log[-3000:]
    assert "certificate verify failed" in (tries / "stranger.log").read_text()
    print(f"the three intruders gave up {gave_up:.0f} s after they started")
    done = subprocess.CompletedProcess(grading.args, grading.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())
              if r["assignment"] == LESSON}
    assert grades == expected
    assert "3 graded on the cluster, 0 here" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "grading it here" not in done.stderr, done.stderr[-3000:]
    assert all((instructor / "feedback" / s / LESSON / f"{LESSON}.html").exists() for s in expected)


def refused(done):
    return done.returncode != 0 and "refusing the plain-TCP Dask scheduler" in done.stderr


def test_a_cluster_that_cannot_grade_stops_the_run_with_the_reason(tmp_path):
    """On a plain-TCP cluster (the opt-out's path): refused without the opt-out, then, opted out by name, the
    broken worker stops the run with its reason."""
    instructor, _ = a_class(tmp_path / "course")
    # a tls:// scheduler without the course's certificates: the grader says which make target writes them
    done = make_grade(instructor, "tls://127.0.0.1:9")
    assert done.returncode != 0 and "make cluster-certificates" in done.stderr, done.stderr[-3000:]
    # a worker whose environment is broken: its `qkv` cannot be imported
    broken = tmp_path / "broken" / "qkv"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('this worker has a broken qkv')\n")
    with cluster(tmp_path / "cluster", workers=1, worker_env=dict(ENV, PYTHONPATH=str(broken.parent))) as address:
        for plain in (address, address.replace("tcp://", "")):  # Dask takes an address without one for tcp
            done = make_grade(instructor, plain, env=dict(ENV, INSECURE_SCHEDULER="0"))
            assert refused(done), done.stderr[-3000:]
            assert "INSECURE_SCHEDULER=1" in done.stderr and "anyone who can reach its port" in done.stderr
        assert not (instructor / "autograded").exists() and not (instructor / "grades.csv").exists()
        started = time.monotonic()
        done = make_grade(instructor, address, "--insecure-scheduler")  # what make grade INSECURE_SCHEDULER=1 passes
        seconds = time.monotonic() - started
        by_variable = make_grade(instructor, address, env=dict(ENV, INSECURE_SCHEDULER="1"))
    assert not refused(by_variable) and "cannot grade 01-lookup" in by_variable.stderr, by_variable.stderr[-3000:]
    assert done.returncode != 0
    assert "cannot grade 01-lookup" in done.stderr, done.stderr[-3000:]
    assert "this worker has a broken qkv" in done.stderr, done.stderr[-3000:]
    assert not (instructor / "autograded").exists(), "nothing graded, not even by the coordinator"
    print(f"stopped after {seconds:.0f} s")
