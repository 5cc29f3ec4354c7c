"""A class that attacks the grader, graded with README's stock commands and with `make grade` (one warm worker,
so every kernel is forked from the same template, one after the other): every attack changes nothing but the
attacker's own honest score, each one is named in the anomaly report, and the run completes.

The class is lesson 01 (the cheapest to grade). Honest, broken and hostile students hand in notebooks; the test
checks exact grades, the named anomaly for each, that the course files and every other submission are unchanged
byte for byte, that no feedback page shows another student's work, a solution or a hidden test, that a listener
on this machine receives nothing, and that a run killed half-way and started again ends with the same grades.
"""
import csv
import hashlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import nbformat
import pytest

from lessons import ROOT, copy_course, hand_in, solved_release

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.kernels import sandbox  # noqa: E402

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
POINTS = {"test_hard_lookup": 2, "test_softmax": 3, "test_soft_lookup": 3, "test_soft_lookup_by_temperature": 2,
          "test_answer_lookup_on_miss": 1, "test_answer_blended_output": 1, "test_answer_why_separate": 1}
FULL = sum(POINTS.values())
PRIVATE_NOTE = "private-note-7f3a9c"  # only in the victim's notebook: no other feedback may show it
# short enough that the looper and the slow call cost little, long enough for the printer's 300,000 prints:
# 4 s in a plain kernel on a 2-core machine at load 1.7, past a 15 s limit with several test runs sharing the cores
FAST = ["--SandboxedExecute.cell_timeout=45", "--SandboxedExecute.call_timeout=20",
        "--SandboxedExecute.budget_seconds=300"]
# folder names outside lms_names.STUDENT_ID_CHARACTERS: refused with a reason, never graded, no row in grades.csv
REFUSED = {"with space", "élodie", ".hidden"}

pytestmark = pytest.mark.grading_class

if not sandbox.bwrap_works():
    if os.environ.get("CI"):
        raise RuntimeError("bubblewrap is missing under CI: `make sandbox` (.ci/install-sandbox) installs it")
    pytest.skip("the hostile class needs bubblewrap (make sandbox); without it the grader is only partially "
                "isolated, which test_partial_isolation_is_named checks", allow_module_level=True)


ENV = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def run(*args, cwd, check=True, **kw):
    result = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                            timeout=1800, **kw)
    if check and result.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def hashes(*folders):
    found = {}
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def read_grades(path, lesson=LESSON):
    """[(student id, score)] from grades.csv; an empty score is a student with no submission: None, not 0."""
    with open(path, newline="", encoding="utf-8") as f:
        return [(r["student_id"], None if r["score"] == "" else float(r["score"]))
                for r in csv.DictReader(f) if r["assignment"] == lesson]


def with_cell(nb, grade, extra, replace=False):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade:
            cell.source = extra if replace else cell.source + "\n" + extra
            return nb
    raise KeyError(grade)


class Listener:
    """A TCP server on loopback that records every byte anyone sends it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(5)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.received, self.connections = b"", 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(1)
            try:
                self.received += conn.recv(1 << 16)
            except OSError:
                pass
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def hostile_class(course, port):
    """{student: (notebook or raw bytes, file name, expected score, anomaly names that must be reported)};
    the expected score is None for a student whose folder name is refused (REFUSED): they have no grade."""
    instructor = course / "autograde"
    gradebook = instructor / "gradebook.db"
    hidden = instructor / "qkv_grading" / "lesson01.py"
    victim = instructor / "submitted" / "perfect" / LESSON / f"{LESSON}.ipynb"
    solution = course / "solutions" / LESSON / f"{LESSON}.ipynb"
    perfect, blank = (lambda: solved_release(LESSON)), (lambda: solved_release(LESSON, []))
    victim_notebook = perfect()
    victim_notebook.cells.append(nbformat.v4.new_markdown_cell(f"My own notes: {PRIVATE_NOTE}"))
    leak = (f"for path in [{str(victim)!r}, {str(solution)!r}, {str(hidden)!r}]:\n"
            f"    try:\n        print(open(path).read())\n    except OSError as e:\n        print('no', e)")
    cheats = {
        "sysmodules": "import sys, types\nfake = types.ModuleType('qkv_grading')\nfake.__getattr__ = lambda n: "
                      "types.SimpleNamespace(**{k: (lambda *a, **k: None) "
                      "for k in ['softmax','hard_lookup','soft_lookup',"
                      "'soft_lookup_by_temperature','answer']})\nsys.modules['qkv_grading'] = fake\n"
                      "sys.modules['qkv_grading.lesson01'] = fake",
        "importhook": "import builtins\n_real = builtins.__import__\ndef _hook(name, *a, **k):\n"
                      "    module = _real(name, *a, **k)\n    if name.startswith('qkv'):\n"
                      "        for attr in dir(module):\n            try:\n"
                      "                setattr(module, attr, lambda *a, **k: None)\n"
                      "            except Exception:\n                pass\n"
                      "    return module\nbuiltins.__import__ = _hook",
        "checkingnoop": "import qkv.checking\nfor k in list(vars(qkv.checking)):\n"
                        "    if callable(vars(qkv.checking)[k]):\n"
                        "        vars(qkv.checking)[k] = lambda *a, **k: None",
    }
    students = {
        "perfect": (victim_notebook, None, FULL, []),
        "blank": (blank(), None, 0, []),
        "gradebookdeleter": (with_cell(perfect(), "hard_lookup",
                                       f"import os, sqlite3\nfor f in [{str(gradebook)!r}, '../../gradebook.db']:\n"
                                       f"    try:\n        os.remove(f)\n    except OSError:\n        pass\n"
                                       f"try:\n    sqlite3.connect({str(gradebook)!r}).execute('delete from grade')\n"
                                       f"except Exception:\n    pass"), None, FULL, []),
        "testeditor": (with_cell(perfect(), "softmax",
                                 f"try:\n    open({str(hidden)!r}, 'a').write('\\nraise SystemExit')\n"
                                 f"except OSError:\n    pass"),
                       None, FULL, []),
        "overwriter": (with_cell(perfect(), "softmax",
                                 f"import shutil\ntry:\n    shutil.copy('01-lookup.ipynb', {str(victim)!r})\n"
                                 f"except OSError:\n    pass"), None, FULL, []),
        "leaker": (with_cell(perfect(), "softmax", leak), None, FULL, []),
        "networker": (with_cell(perfect(), "softmax",
                                f"import socket\ntry:\n"
                                f"    s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                                f"    s.sendall(b'STOLEN')\nexcept OSError as e:\n    print('network:', e)"),
                       None, FULL, []),
        "sysmodules": (with_cell(blank(), "hard_lookup", cheats["sysmodules"], replace=True), None, 0, []),
        "importhook": (with_cell(blank(), "hard_lookup", cheats["importhook"], replace=True), None, 0, []),
        "checkingnoop": (with_cell(blank(), "hard_lookup", cheats["checkingnoop"], replace=True), None, 0, []),
        "threadref": (with_cell(perfect(), "softmax",
                                "import _thread, time\nfrom qkv.attention import softmax as _reference\n"
                                "def softmax(x, axis=-1):\n    box = []\n"
                                "    _thread.start_new_thread(lambda: box.append(_reference(x, axis)), ())\n"
                                "    time.sleep(0.5)\n    return box[0] if box else None", replace=True),
                      # their softmax fails, and so does everything of theirs built on it
                      None, FULL - sum(POINTS[t] for t in ("test_softmax", "test_soft_lookup",
                                                           "test_soft_lookup_by_temperature",
                                                           "test_answer_blended_output")),
                      []),
        "osexit": (with_cell(perfect(), "hard_lookup", "import os\nos._exit(0)"),
                   None, FULL - POINTS["test_hard_lookup"], ["kernel died", "kernel restarted"]),
        "looper": (with_cell(perfect(), "soft_lookup_by_temperature",
                             "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"),
                   None, FULL - POINTS["test_soft_lookup_by_temperature"], ["timeout", "kernel restarted"]),
        "slowcall": (with_cell(perfect(), "soft_lookup_by_temperature",
                               "def soft_lookup_by_temperature(query, keys, values, temperatures):\n    while True:\n"
                               "        pass", replace=True),
                     None, FULL - POINTS["test_soft_lookup_by_temperature"], ["timeout"]),
        "memoryhog": (with_cell(perfect(), "softmax", "hog = bytearray(8 << 30)"), None, FULL, []),
        "forkbomb": (with_cell(perfect(), "softmax",
                               "import subprocess\nchildren = []\ntry:\n    for _ in range(500):\n"
                               "        children.append(subprocess.Popen(['sleep', '600']))\nexcept OSError:\n"
                               "    print('stopped at', len(children))"), None, FULL, []),
        "diskfiller": (with_cell(perfect(), "softmax",
                                 "try:\n    open('big.bin', 'wb').write(bytes(200 << 20))\nexcept OSError as e:\n"
                                 "    print('disk:', e)"), None, FULL, []),
        "printer": (with_cell(perfect(), "softmax", "for i in range(300000):\n    print('spam' * 10)"),
                    None, FULL, ["output truncated"]),
        "stripped": (_stripped(perfect()), None, FULL, ["metadata stripped"]),
        "renamed": (perfect(), f"{LESSON}-Copy1.ipynb", FULL, ["renamed file"]),
        "corrupt": (b'{"cells": [', None, 0, ["corrupt file"]),
        "empty": (b"", None, 0, ["corrupt file"]),
        "lockededit": (_edit_test_cell(perfect()), None, FULL, ["locked cell edited"]),
        # graded one after the other by one worker under make grade: what the first leaves behind must not reach
        # the second (a fresh home, /tmp and /dev/shm, no straggling process), or the second loses its points
        "persister": (with_cell(perfect(), "softmax", PERSIST), None, FULL, []),
        "persister2": (with_cell(perfect(), "hard_lookup", SNOOP), None, FULL, []),
        # honest work under a folder name that is not a student id: refused by name, never rewritten or graded
        "with space": (perfect(), None, None, ["refused student id"]),
        "élodie": (perfect(), None, None, ["refused student id"]),
    }
    return students


PERSIST = ("import os, subprocess\nfor place in ['/tmp', os.path.expanduser('~'), '/dev/shm', '/', '/dev']:\n"
           "    try:\n        open(os.path.join(place, 'left-by-persister'), 'w').write('x')\n"
           "    except OSError:\n        pass\n"
           "subprocess.Popen(['sh', '-c', 'sleep 5; touch /tmp/left-by-persister'])")
SNOOP = ("import os\nif any(os.path.exists(os.path.join(p, 'left-by-persister')) for p in\n"
         "       ['/tmp', os.path.expanduser('~'), '/dev/shm', '/', '/dev']):\n"
         "    def hard_lookup(query, keys, values):  # sabotaged by what an earlier kernel left\n"
         "        return None")


def _stripped(nb):
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        cell.metadata.pop("deletable", None)
        cell.metadata.pop("editable", None)
    return nb


def _edit_test_cell(nb):
    return with_cell(nb, "test_softmax", "pass  # nothing to see here", replace=True)


def with_fast_limits(instructor):
    """The same short limits as FAST, through the course's config (where make grade reads them)."""
    with (instructor / "nbgrader_config.py").open("a") as config:
        config.write("\n" + "\n".join(f"c.{flag[2:].replace('=', ' = ')}" for flag in FAST) + "\n")


ROUTES = {"nbgrader autograde": "README's manual route: stock nbgrader, a fresh kernel per submission",
          "make grade": "python -m qkv_autograde with one worker: kernels forked from one warm template"}


@pytest.fixture(scope="module", params=list(ROUTES))
def graded_class(tmp_path_factory, request):
    instructor = copy_course(tmp_path_factory.mktemp("course"))
    course = instructor.parent
    if request.param == "make grade":
        with_fast_limits(instructor)
    run("generate_assignment", LESSON, "--force", cwd=instructor)
    listener = Listener()
    students = hostile_class(course, listener.port)
    for student, (content, name, _, _) in students.items():
        hand_in(instructor, LESSON, student, content, name)
    hand_in(instructor, LESSON, ".hidden", solved_release(LESSON))
    protected = [instructor / "qkv_grading", instructor / "qkv_autograde", instructor / "submitted",
                 course / "solutions", course / "notebooks"]
    before = hashes(*protected) | hashes(instructor / "nbgrader_config.py")
    started = time.monotonic()
    if request.param == "make grade":
        result = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"], cwd=instructor,
                                env=ENV, capture_output=True, text=True, timeout=3600)
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        result = run("autograde", LESSON, *FAST, cwd=instructor)
    seconds = time.monotonic() - started
    if request.param != "make grade":  # make grade writes feedback and grades.csv itself
        run("generate_feedback", LESSON, cwd=instructor)
        run("export", "--to", "grades.csv", cwd=instructor)
    listener.close()
    after = hashes(*protected) | hashes(instructor / "nbgrader_config.py")
    grades = dict(read_grades(instructor / "grades.csv"))
    with (instructor / f"anomalies-{LESSON}.csv").open(newline="", encoding="utf-8") as f:
        report = {r["student"]: r for r in csv.DictReader(f)}
    print(f"hostile class of {len(students) + 1} graded by {request.param} in {seconds:.0f} s "
          f"(isolation: {sandbox.isolation()})")
    return dict(course=course, students=students, grades=grades, report=report, before=before, after=after,
                listener=listener, log=result.stdout + result.stderr)


def test_every_student_gets_exactly_their_honest_score(graded_class):
    expected = {s: score for s, (_, _, score, _) in graded_class["students"].items() if s not in REFUSED}
    assert graded_class["grades"] == pytest.approx(expected)  # and no row at all for a refused folder


def test_each_anomaly_is_named_in_the_report(graded_class):
    report = graded_class["report"]
    for student, (_, _, _, names) in graded_class["students"].items():
        listed = report[student]["anomalies"].split("; ") if report[student]["anomalies"] else []
        for name in names:
            assert name in listed, f"{student}: {name!r} missing from the report ({report[student]})"
    for student in REFUSED:  # one row each, naming the folder and why; nothing was graded, so no score
        row = report[student]
        assert (row["notebook"], row["score"], row["max_score"], row["anomalies"]) == \
            ("", "", "", "refused student id"), (student, row)
        assert "rename the folder" in row["details"], (student, row)
    assert "is not a student id" in report["élodie"]["details"] and "élodie" in report["élodie"]["details"]
    isolation = {"isolation partial"}
    assert set(report["perfect"]["anomalies"].split("; ")) - isolation <= {""}, report["perfect"]
    # the release handed in as it is: its 0 is a missing answer, and said so (issue 35, item 5)
    assert set(report["blank"]["anomalies"].split("; ")) - isolation == {"blank notebook"}, report["blank"]
    assert (graded_class["course"] / "autograde" / f"anomalies-{LESSON}.html").stat().st_size > 1000


def test_course_files_and_other_submissions_are_unchanged(graded_class):
    changed = [p for p in graded_class["before"] if graded_class["before"][p] != graded_class["after"].get(p)]
    assert not changed, f"files changed by grading: {changed}"
    assert (graded_class["course"] / "autograde" / "gradebook.db").exists()


def test_no_feedback_shows_another_submission_a_solution_or_a_hidden_test(graded_class):
    course = graded_class["course"]
    # a hidden test cell shows its *call* (`hidden.softmax(softmax)`) by design; never a test body, a raw
    # notebook file (its JSON metadata) or another student's note
    secrets = ["GRADED_REFERENCES", "def fresh_rng", "check_against(", '"grade_id"', "nbgrader_config"]
    for page in (course / "autograde" / "feedback").rglob("*.html"):
        text = page.read_text()
        for secret in secrets + ([] if "/perfect/" in str(page) else [PRIVATE_NOTE]):
            assert secret not in text, f"{page}: feedback shows {secret!r}"
    leaker = next((course / "autograde" / "feedback" / "leaker" / LESSON).glob("*.html")).read_text()
    assert "No such file or directory" in leaker
    for student in ("corrupt", "empty", "sysmodules"):
        assert list((course / "autograde" / "feedback" / student / LESSON).glob("*.html")), student


@pytest.mark.skipif(not sandbox.bwrap_works(), reason="network isolation needs bubblewrap; the run is flagged partial")
def test_a_listener_on_this_machine_receives_nothing(graded_class):
    assert graded_class["listener"].received == b"" and graded_class["listener"].connections == 0


def test_a_run_killed_half_way_then_rerun_gives_the_same_grades(tmp_path):
    instructor = copy_course(tmp_path)
    run("generate_assignment", LESSON, "--force", cwd=instructor)
    expected = {}
    for i, solved in enumerate([None, [], ["hard_lookup", "softmax"], None]):
        hand_in(instructor, LESSON, f"s{i}", solved_release(LESSON, solved))
        expected[f"s{i}"] = FULL if solved is None else (5 if solved else 0)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    process = subprocess.Popen([str(BIN / "nbgrader"), "autograde", LESSON], cwd=instructor, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # kill -9 while the second student is being graded: the first is done, the second half-way
    deadline = time.monotonic() + 600
    while not (instructor / "autograded" / "s1" / LESSON / f"{LESSON}.ipynb").exists():
        assert process.poll() is None and time.monotonic() < deadline, "autograde ended before it could be killed"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    result = run("autograde", LESSON, cwd=instructor)
    assert "graded only half-way" in result.stdout + result.stderr
    run("export", "--to", "grades.csv", cwd=instructor)
    rows = read_grades(instructor / "grades.csv")
    assert len(rows) == len(expected), "one row per student, no duplicates"
    assert dict(rows) == pytest.approx(expected)
