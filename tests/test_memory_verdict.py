"""Lesson 07's memory verdict is the grader's measurement, never the student's kernel's (issue 34, item 1).

The memory checks used to read tracemalloc's peak as the student's kernel reported it: a naive full-matrix
`chunked_attention` scored 14/20 and the same answer with `del s, w; tracemalloc.reset_peak()` before `return`
scored 20/20. The grader now measures the kernel's cgroup from outside (RemoteFunction.call, measure=True), so a
class of those two, graded with `make grade` (python -m qkv_autograde), scores the same and loses the memory test's
points both times (a scripted kernel checks the same at the wire). Two submissions of lesson 07: about 40 CPU-s.
"""
import csv
import os
import subprocess
import sys

import pytest

from lessons import copy_course, hand_in, read, solved_release
from qkv import checking
from test_grading_sandbox import ENV, run, with_cell, with_fast_limits
from test_wire import scripted_kernel

from qkv_autograde.kernels import kernel_memory, student_kernel  # noqa: E402 (test_wire puts autograde/ on the path)

LESSON = "07-cost"

NAIVE = """
def chunked_attention(Q, K, V, chunk):
    s = Q @ K.T / np.sqrt(Q.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ V
"""

# the same answer, its trace of the score matrix wiped before it returns
NAIVE_RESET = """
import tracemalloc

def chunked_attention(Q, K, V, chunk):
    s = Q @ K.T / np.sqrt(Q.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    out = w @ V
    del s, w; tracemalloc.reset_peak()
    return out
"""


def points():
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in read(LESSON).cells
            if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}


class Meter:
    """The grader's reading of a kernel's memory (kernel_memory.meter), scripted."""

    def __init__(self, start, peak):
        self.start, self.peak, self.resets = start, peak, 0

    def reset_peak(self):
        self.resets += 1
        return self.start

    def peak_bytes(self):
        return self.peak


def test_a_measured_call_is_judged_on_the_graders_reading_never_the_kernels(monkeypatch):
    MiB = 1 << 20
    # the kernel keeps the staged arguments, then says its call allocated nothing
    kernel = scripted_kernel({"value": "s0"}, {"value": {"__float__": "1.0"}, "seconds": 0.0, "peak_bytes": 0})
    sent = []
    request = kernel.request
    kernel.request = lambda payload: sent.append(payload) or request(payload)
    monkeypatch.setattr(kernel_memory, "meter", lambda kernel: Meter(300 * MiB, 312 * MiB))
    function = student_kernel.RemoteFunction(kernel, "chunked_attention", "chunked_attention")
    result, peak = checking.call_with_peak_memory(function, 2.0)
    assert (result, peak) == (1.0, 12 * MiB)
    assert function.last_call["kernel_peak_bytes"] == 0  # kept to be shown, never graded
    # the arguments went ahead of the measured call, which carried only their id
    assert [p["op"] for p in sent] == ["stage", "call"] and "args" not in sent[1] and sent[1]["staged"] == "s0"
    assert sent[1]["measure"] is False  # the kernel is not asked to trace itself


def test_a_call_nothing_outside_the_kernel_can_measure_gets_no_memory_verdict(monkeypatch):
    kernel = scripted_kernel({"value": {"__float__": "1.0"}, "seconds": 0.0, "peak_bytes": 0})
    monkeypatch.setattr(kernel_memory, "meter", lambda kernel: None)
    function = student_kernel.RemoteFunction(kernel, "chunked_attention", "chunked_attention")
    with pytest.raises(RuntimeError, match="could not measure"):
        checking.call_with_peak_memory(function, 2.0)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    instructor = copy_course(tmp_path_factory.mktemp("course"))
    with_fast_limits(instructor)
    run("generate_assignment", LESSON, "--force", cwd=instructor)
    for student, source in (("naive", NAIVE), ("naivereset", NAIVE_RESET)):
        hand_in(instructor, LESSON, student, with_cell(solved_release(LESSON), "chunked_attention", source,
                                                       replace=True))
    process = subprocess.run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "2"], cwd=instructor, env=ENV,
                             capture_output=True, text=True, timeout=1800)
    assert process.returncode == 0, process.stderr[-3000:]
    return {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())
            if r["assignment"] == LESSON}


@pytest.mark.grading_class
def test_wiping_the_trace_before_return_scores_what_the_naive_answer_scores(graded):
    assert graded["naive"] == graded["naivereset"], graded
    # right values, wrong memory: every test but chunked_attention's (values, then memory, in one cell)
    full = sum(points().values())
    assert graded["naive"] == full - points()["test_chunked_attention"], (graded, full)


def test_the_kernel_can_neither_see_nor_write_its_cgroups_measurement():
    from qkv_autograde.kernels import kernel_setup, sandbox

    if not sandbox.bwrap_works():
        pytest.skip("the sandbox's walls need bubblewrap (make sandbox)")
    walls = sandbox.Sandbox(**kernel_setup.kernel_walls(LESSON, 1 << 30))
    try:
        folder = walls.cgroup.folders.get("memory")
        if folder is None:
            pytest.skip("no memory cgroup here")
        peak = next(os.path.join(folder, n) for n in ("memory.max_usage_in_bytes", "memory.peak")
                    if os.path.exists(os.path.join(folder, n)))
        probe = f"import os\ntry:\n    open({peak!r}, 'w').write('0')\n    print('wrote')\nexcept OSError as e:\n" \
                f"    print('refused', type(e).__name__)\nprint(os.path.exists('/sys/fs/cgroup'))\n"
        done = subprocess.run(walls.wrap([sys.executable, "-c", probe]), capture_output=True, text=True, timeout=60)
        assert done.stdout.split() == ["refused", "FileNotFoundError", "False"], (done.stdout, done.stderr[-2000:])
    finally:
        walls.cleanup()
