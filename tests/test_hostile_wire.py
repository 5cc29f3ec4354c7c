"""Students who attack the wire itself, graded with the stock `nbgrader autograde` and with `make grade`.

Each attacker hands in lesson 01 with a cell that replaces `qkv.wire._answer` in its own kernel, so that the grader
receives hand-written replies naming `qkv.fetch:os.system` as an object, a function or a partial — replies that,
decoded by name, would run a command in the grading worker (a marker file outside the sandbox). A fourth student
prints 40 MiB per call of softmax, and is otherwise right. The test checks exact grades (an attacker keeps only what
it honestly solved; the printer keeps every point: its print is cut, `output truncated` named, and each call still
judged by what it returns, issue 34.7), that the honest student's grade is untouched, the anomaly named in the
report, no marker, and measures the peak memory of the grading processes (the kernel's own, under its sandbox's
limits, is not counted).
"""
import csv
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from lessons import copy_course, hand_in, solved_release
from test_grading_sandbox import BIN, ENV, FAST, FULL, LESSON, POINTS, ROUTES, run, with_cell, with_fast_limits

pytestmark = pytest.mark.grading_class

# Replaces the kernel's answer to every request but those for `honest` (the names the student really solved).
HOOK = """import json
import qkv.wire as _wire
_real_answer = _wire._answer
def _forged(request, namespace):
    if request["op"] == "call" or request["name"] in {honest!r}:  # calls reach only what a real answer handed out
        return _real_answer(request, namespace)
    return json.dumps({{"value": {reply!r}, "seconds": 0.0, "peak_bytes": None}})
_wire._answer = _forged
"""

PRINTS_40_MIB = """_quiet_softmax = softmax
def softmax(*args, **kwargs):
    print("y" * (40 << 20))
    return _quiet_softmax(*args, **kwargs)
"""


def attackers(markers):
    """{student: (notebook, expected score, anomaly names)};
    `markers` is where a command run in the grader would leave its file."""
    def hostile(reply, honest=("hard_lookup",)):
        notebook = solved_release(LESSON, list(honest))
        return with_cell(notebook, "softmax", HOOK.format(honest=set(honest), reply=reply), replace=True)

    touch = f"touch {markers}/"
    return {
        "perfect": (solved_release(LESSON), FULL, []),
        "wireobject": (hostile({"__object__": "qkv.fetch:os.system", "fields": {"command": touch + "object"}}),
                       POINTS["test_hard_lookup"], ["malformed reply"]),
        "wirefunction": (hostile({"__function__": "qkv.fetch:os.system"}, honest=()), 0, ["malformed reply"]),
        "wirepartial": (hostile({"__partial__": "qkv.fetch:os.system", "args": [touch + "partial"], "kwargs": {}},
                                honest=()), 0, ["malformed reply"]),
        # cut output, kept verdict: before, the 40 MiB print closed the grader's iopub connection and the answer,
        # sent on it after the print, was lost with it: softmax scored 0 of its 3
        "printer40": (with_cell(solved_release(LESSON), "softmax", PRINTS_40_MIB), FULL, ["output truncated"]),
    }


def _children():
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                pass
    return children


def _peak_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


class GraderMemory:
    """The largest peak RSS (VmHWM) of any process of a grading run outside the sandbox: the coordinator and its
    workers, not the kernels (everything below a bwrap process, which the sandbox's own limits bound)."""

    def __init__(self, root):
        self.root, self.peak, self.stop = root, 0, False
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop:
            children, stack = _children(), [self.root]
            while stack:
                pid = stack.pop()
                if _comm(pid) == "bwrap":
                    continue
                self.peak = max(self.peak, _peak_rss(pid))
                stack += children.get(pid, [])
            time.sleep(0.2)

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        return self.peak


@pytest.fixture(scope="module", params=list(ROUTES))
def graded(tmp_path_factory, request):
    instructor = copy_course(tmp_path_factory.mktemp("course"))
    markers = tmp_path_factory.mktemp("markers")  # outside the course and outside every sandbox
    if request.param == "make grade":
        with_fast_limits(instructor)
    run("generate_assignment", LESSON, "--force", cwd=instructor)
    students = attackers(markers)
    for student, (notebook, _, _) in students.items():
        hand_in(instructor, LESSON, student, notebook)
    if request.param == "make grade":
        command = [sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"]
    else:
        command = [str(BIN / "nbgrader"), "autograde", LESSON, *FAST]
    process = subprocess.Popen(command, cwd=instructor, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    memory = GraderMemory(process.pid)
    out, err = process.communicate(timeout=3600)
    peak = memory.close()
    assert process.returncode == 0, err[-3000:]
    if request.param != "make grade":
        run("export", "--to", "grades.csv", cwd=instructor)
    grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())
              if r["assignment"] == LESSON}
    report = {r["student"]: r for r in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open())}
    print(f"{request.param}: peak RSS of the grading processes {peak / 2**20:.0f} MiB")
    return dict(students=students, grades=grades, report=report, markers=pathlib.Path(markers), peak=peak)


def test_no_reply_runs_anything_in_the_grader(graded):
    assert list(graded["markers"].iterdir()) == []


def test_attackers_keep_only_what_they_solved_and_the_honest_grade_is_untouched(graded):
    expected = {s: score for s, (_, score, _) in graded["students"].items()}
    assert {s: graded["grades"][s] for s in expected} == pytest.approx(expected)
    assert set(graded["grades"]) == set(graded["students"])  # and every student has a grade


def test_each_attack_is_named_in_the_report(graded):
    for student, (_, _, names) in graded["students"].items():
        listed = graded["report"][student]["anomalies"].split("; ") if graded["report"][student]["anomalies"] else []
        assert all(name in listed for name in names), (student, graded["report"][student])
        if not names:
            assert set(listed) <= {"isolation partial"}, (student, listed)


def test_printing_40_mib_per_call_keeps_the_grader_small(graded):
    # before: the grader kept every call's printed text of a test cell, 1.5 GB for this student; then, with the text
    # cut as it arrived, 1.1-1.4 GiB, because its socket queued up to a thousand 40 MiB messages read whole
    assert graded["peak"] < 1 << 30, f"peak RSS {graded['peak'] / 2**20:.0f} MiB"
