"""Limits that bind a student's kernel as a whole, and kernels that cannot start (issue 19, items 5 and 7).

- Memory binds the kernel's whole process tree (a cgroup), not each process: five children of one kernel each
  allocating up to 1 GiB hold no more than the limit together, the grade completes and the report names it.
- The kernel's socket folder (where its connection file is) is a small tmpfs: writing 100 MiB there stops at
  the cap with ENOSPC, on no disk of the grader's.
- A kernel that dies at start is started again; one that never starts is named `kernel failed to start`, graded
  0 with a feedback page, never a missing row (through the stock `nbgrader autograde`).

Run for fresh sandboxed kernels (nbgrader autograde) and kernels forked from a warm template (make grade).
"""
import contextlib
import csv
import json
import os
import subprocess
import sys
import time

import nbformat
import pytest

from lessons import ROOT, copy_course, hand_in, read, solved_release

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.kernels import bounded_client, forked_kernels, sandbox, student_kernel  # noqa: E402
from qkv_autograde.grading import preprocessors  # noqa: E402

LESSON = "01-lookup"
MiB, GiB = 1 << 20, 1 << 30
FULL = 13.0

if not sandbox.bwrap_works():
    if os.environ.get("CI"):
        raise RuntimeError("bubblewrap is missing under CI: `make sandbox` (.ci/install-sandbox) installs it")
    pytest.skip("the limits are those of the bubblewrap sandbox (make sandbox)", allow_module_level=True)

# five children, each holding as much as it can of 1 GiB (in 32 MiB blocks, every page written), then the
# kernel sums what its live children hold at once (their proportional resident memory)
FORK_HOGS = r"""
import json, os, select, time
BLOCK = 32 << 20
ready_r, ready_w = os.pipe()
children = []
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        held = []
        try:
            while len(held) * BLOCK < (1 << 30):
                held.append(b"\1" * BLOCK)
        except MemoryError:
            pass
        os.write(ready_w, b".")
        time.sleep(120)
        os._exit(0)
    children.append(pid)
os.close(ready_w)
ready, dead, deadline = 0, set(), time.time() + 120
while ready + len(dead) < len(children) and time.time() < deadline:
    if select.select([ready_r], [], [], 0.2)[0]:
        ready += len(os.read(ready_r, 16))
    for pid in children:
        if pid not in dead and os.waitpid(pid, os.WNOHANG)[0]:
            dead.add(pid)
held = 0
for pid in children:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:  # Pss: a page the children share is counted once
            held += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
    except (OSError, StopIteration):
        pass
for pid in children:
    try:
        os.kill(pid, 9)
    except OSError:
        pass
print(json.dumps({"held_bytes": held, "killed": len(dead)}))
"""

FILL_SOCKET_FOLDER = r"""
import errno, json, os
import ipykernel.connect
folder = os.path.dirname(ipykernel.connect.get_connection_file())
written, error = 0, None
try:
    with open(os.path.join(folder, "filler"), "wb") as f:
        for _ in range(100):
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1 << 20
except OSError as e:
    error = errno.errorcode.get(e.errno)
size = os.statvfs(folder)
print(json.dumps({"folder": folder, "written": written, "error": error, "size": size.f_blocks * size.f_frsize}))
"""


@pytest.fixture(scope="module")
def template():
    warm = forked_kernels.KernelTemplate(**preprocessors.kernel_walls(LESSON, 1 * GiB))
    yield warm
    warm.close()


def kernel_of(route, template):
    return template if route == "forked" else None


def with_extra_cell(source):
    nb = solved_release(LESSON)
    nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


def printed_json(cell):
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def test_cgroups_can_be_made_here():
    """The machine the other tests run on can bind a process tree: otherwise they test nothing."""
    cgroup = sandbox.KernelCgroup(256 * MiB, 16)
    try:
        assert cgroup.missing == [], cgroup.describe_missing()
    finally:
        cgroup.remove()
    assert not cgroup.folders


def test_where_no_cgroup_can_be_made_the_report_says_which_limit_is_per_process_only(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "CGROUP_ROOT", str(tmp_path / "no-cgroups"))
    walls = sandbox.Sandbox(("/nonexistent", "/nonexistent"), limits=sandbox.Limits(memory_bytes=GiB))
    try:
        assert walls.cgroup.missing == ["memory", "pids"]
        assert f"--as={GiB}" in walls.wrap(["python", "-c", "pass"])  # the rlimit is then the memory limit
        (name, detail), = sandbox.limit_events(walls.cgroup)
    finally:
        walls.cleanup()
    assert name == "isolation partial" and "no memory cgroup" in detail and "no pids cgroup" in detail, detail


def test_kernel_cgroups_a_killed_grader_left_empty_are_removed_and_no_other(monkeypatch, tmp_path):
    root = tmp_path / "cgroup"
    monkeypatch.setattr(sandbox, "CGROUP_ROOT", str(root))
    old = time.time() - 2 * sandbox.ABANDONED_SECONDS
    for controller in sandbox.LIMITED:
        for name in ("qkv-kernel-abandoned", "qkv-kernel-in-use", "qkv-kernel-just-made", "someone-elses"):
            (root / controller / name).mkdir(parents=True)
            if name != "qkv-kernel-just-made":
                os.utime(root / controller / name, (old, old))
        (root / controller / "qkv-kernel-in-use" / "cgroup.procs").write_text("1234\n")  # rmdir fails: not empty
    sandbox.KernelCgroup(GiB, 16)
    for controller in sandbox.LIMITED:
        left = {p.name for p in (root / controller).iterdir() if not p.name.startswith("qkv-kernel-") or
                p.name in ("qkv-kernel-abandoned", "qkv-kernel-in-use", "qkv-kernel-just-made")}
        assert left == {"qkv-kernel-in-use", "qkv-kernel-just-made", "someone-elses"}, left


@pytest.mark.parametrize("route", ["fresh", "forked"])
def test_a_kernels_processes_together_hold_no_more_than_its_memory_limit(route, request):
    template = request.getfixturevalue("template") if route == "forked" else None
    nb = with_extra_cell(FORK_HOGS)
    grader = preprocessors.SandboxedExecute(memory_limit=1 * GiB, cell_timeout=180, call_timeout=60)
    graded = grader.execute(nb, LESSON, read(LESSON), kernel_template=template, student="hog")
    names = [a["name"] for a in graded.metadata["qkv"]["anomalies"]]
    assert "memory limit" in names, graded.metadata["qkv"]["anomalies"]
    hogs = printed_json(graded.cells[-1])
    if hogs is not None:  # else the kernel itself was killed, and restarted (named too)
        assert hogs["held_bytes"] <= 1 * GiB, f"five children held {hogs['held_bytes'] / GiB:.2f} GiB together"
    else:
        assert "kernel died" in names, names
    failed = [c.metadata["nbgrader"]["grade_id"] for c in graded.cells
              if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
              and any(o.get("output_type") == "error" for o in c.outputs)]
    assert not failed, f"the student's own honest tests failed after the memory limit: {failed}"


@contextlib.contextmanager
def started_kernel(route, request):
    """A started StudentKernel of either route (a fresh sandboxed kernel, or one forked from the template)."""
    if route == "forked":
        template = request.getfixturevalue("template")
        make = lambda: forked_kernels.ForkedKernelManager(template=template)  # noqa: E731
        walls = None
    else:
        walls = sandbox.Sandbox(**preprocessors.kernel_walls(LESSON, 1 * GiB))
        make = lambda: sandbox.SandboxedKernelManager(sandbox=walls)  # noqa: E731
    kernel = student_kernel.StudentKernel(make, cell_seconds=60)
    try:
        kernel.start()
        yield kernel
    finally:
        kernel.close()
        if walls:
            walls.cleanup()


@pytest.mark.parametrize("route", ["fresh", "forked"])
def test_the_socket_folder_is_a_small_tmpfs_the_student_cannot_fill_the_disk_through(route, request, tmp_path):
    with started_kernel(route, request) as kernel:
        host_folder = os.path.dirname(kernel.client.km.connection_file)
        cell = nbformat.v4.new_code_cell(FILL_SOCKET_FOLDER)
        assert kernel.run_cell(cell, 0) == "ok", cell.outputs
        filled = printed_json(cell)
        on_the_host = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(host_folder) for f in files
                          if not os.path.islink(os.path.join(d, f)))
    limit = 16 * MiB  # sandbox.Limits.socket_bytes
    assert filled["error"] == "ENOSPC" and filled["written"] <= limit, filled
    assert filled["size"] <= limit, filled
    assert on_the_host < MiB, f"{on_the_host} bytes in the grader's own folder {host_folder}"


@pytest.mark.parametrize("route", ["fresh", "forked"])
def test_a_message_too_large_for_the_grader_is_dropped_unread_named_and_the_kernel_heard_again(route, request):
    # the grader's sockets refuse a message over bounded_client.MESSAGE_BYTES; ZeroMQ does not reconnect such a
    # connection itself, so without a new socket every later cell and call of this student would go unheard
    with started_kernel(route, request) as kernel:
        huge = nbformat.v4.new_code_cell(f"print('y' * {bounded_client.MESSAGE_BYTES + MiB})\nanswer = 42")
        kernel.run_cell(huge, 0)
        after = nbformat.v4.new_code_cell("print('heard', answer)")
        assert kernel.run_cell(after, 1) == "ok", after.outputs
        answer = kernel.get("answer")
        # a call's answer does not travel with what it prints (issue 34.7): a print too large for the grader's
        # socket, written to the stream the function kept (as a logging handler does, past the kernel's own cut)
        # costs its connection, not the answer, which comes in the call's own reply
        loud = nbformat.v4.new_code_cell(f"import sys\n_out = sys.stdout\ndef loud(x):\n"
                                         f"    _out.write('y' * {bounded_client.MESSAGE_BYTES + MiB})\n"
                                         f"    _out.flush()\n    return x + 1")
        assert kernel.run_cell(loud, 2) == "ok", loud.outputs
        assert kernel.get("loud")(41) == 42
    assert all(len(o.get("text", "")) < MiB for o in huge.outputs), "the huge print reached the grader"
    assert [o["text"] for o in after.outputs if o.get("output_type") == "stream"] == ["heard 42\n"]
    assert answer == 42
    assert any(name == "output truncated" and "cell 0" in detail for name, detail in kernel.events), kernel.events
    assert any(name == "output truncated" and "a call from a test" in detail for name, detail in kernel.events), \
        kernel.events


SEES_ITS_OWN_CALL = """
def call_as_seen(x):
    # what the kernel received: the type of the message that carried the call, and the argument whole
    return [get_ipython().kernel.get_parent()["header"]["msg_type"], float(x.sum()), x.shape[0]]
"""


@pytest.mark.parametrize("route", ["fresh", "forked"])
def test_a_call_travels_in_a_message_of_its_own_not_a_cell_however_large_and_uncounted(route, request):
    # IPython hashes, transforms, parses and echoes a cell's source in pure Python: arguments written into the
    # source cost the kernel about 0.6 CPU-s per MiB, so a call is no cell at all: a message of its own (wire.answer)
    import numpy as np
    from qkv import wire

    with started_kernel(route, request) as kernel:
        cell = nbformat.v4.new_code_cell(SEES_ITS_OWN_CALL)
        assert kernel.run_cell(cell, 0) == "ok", cell.outputs
        carried_by, total, n = kernel.get("call_as_seen")(np.ones(1 << 20))  # 8 MiB
        after = nbformat.v4.new_code_cell("print('next')")
        assert kernel.run_cell(after, 1) == "ok", after.outputs
    assert (total, n) == (float(1 << 20), 1 << 20)
    assert carried_by == wire.REQUEST_TYPE
    # the calls are silent: the notebook's cells are numbered as if the grader had made none (In [1], In [2])
    assert (cell.execution_count, after.execution_count) == (1, 2)


A_CALLS_OUTPUT = """
%matplotlib inline
import warnings
import matplotlib.pyplot as plt
def quiet(x):
    return x * 2
def noisy(x):
    print("hello", x)
    warnings.warn("careful")
    return x + 1
def drawing(x):
    plt.plot([0, 1], [x, x])
    return x
"""


def test_a_call_prints_as_a_cell_would_and_sends_no_status_when_it_printed_nothing(request):
    # wire.answer answers a call without IPython's cell machinery, and without the busy and idle status of a shell
    # request unless the call printed (then the grader waits for the idle status, which follows the printed text)
    with started_kernel("forked", request) as kernel:
        cell = nbformat.v4.new_code_cell(A_CALLS_OUTPUT)
        assert kernel.run_cell(cell, 0) == "ok", cell.outputs
        quiet, noisy, drawing = kernel.get("quiet"), kernel.get("noisy"), kernel.get("drawing")
        seen = []  # the iopub messages each call's output went through
        process = kernel.client.process_message
        kernel.client.process_message = lambda msg, *rest: (seen.append(msg["msg_type"]), process(msg, *rest))[1]
        assert quiet(2) == 4
        quiet_messages, seen[:] = list(seen), []
        assert noisy(1) == 2
        assert drawing(3) == 3
        after = nbformat.v4.new_code_cell("print(plt.get_fignums())")
        assert kernel.run_cell(after, 1) == "ok", after.outputs
    assert quiet_messages == []
    assert "stream" in seen and seen[-1] == "status"
    assert noisy.printed.startswith("hello 1\n") and "UserWarning: careful" in noisy.printed
    # a figure a call left open is shown (to nobody) and closed after it, as after a cell: not in the next cell
    assert [o["text"] for o in after.outputs if o.get("output_type") == "stream"] == ["[]\n"]
    assert (cell.execution_count, after.execution_count) == (1, 2)


# the stock route with its kernel command replaced for some starts (the course's config is Python, run by nbgrader)
FAILING_STARTS = '''
import itertools
from qkv_autograde.kernels import sandbox as _sandbox
_starts = itertools.count(1)
_format_kernel_cmd = _sandbox.SandboxedKernelManager.format_kernel_cmd


def _sometimes_dead(self, extra_arguments=None):
    command = _format_kernel_cmd(self, extra_arguments)
    return ["sh", "-c", "exit 3"] if next(_starts) in {FAILING} else command


_sandbox.SandboxedKernelManager.format_kernel_cmd = _sometimes_dead
'''


def test_a_kernel_that_dies_at_start_is_started_again_and_one_that_never_starts_is_graded_0_and_named(tmp_path):
    instructor = copy_course(tmp_path)
    # a-flaky is graded first: its first start dies; b-dead's three starts all die
    with (instructor / "nbgrader_config.py").open("a") as config:
        config.write(FAILING_STARTS.replace("{FAILING}", "{1, 3, 4, 5}"))
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")

    def nbgrader(*args):
        result = subprocess.run([os.path.join(bin_dir, "nbgrader"), *args], cwd=instructor, env=env,
                                capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    nbgrader("generate_assignment", LESSON, "--force")
    for student in ("a-flaky", "b-dead"):
        hand_in(instructor, LESSON, student, solved_release(LESSON))
    log = nbgrader("autograde", LESSON).stderr
    nbgrader("generate_feedback", LESSON)
    nbgrader("export", "--to", "grades.csv")
    report = {r["student"]: r for r in csv.DictReader((instructor / f"anomalies-{LESSON}.csv").open())}
    grades = {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "grades.csv").open())}
    assert "Removing failed assignment" not in log, log[-3000:]
    assert grades == {"a-flaky": FULL, "b-dead": 0.0}, (grades, report)
    assert "kernel failed to start" not in report["a-flaky"]["anomalies"], report["a-flaky"]
    assert report["b-dead"]["anomalies"].split("; ")[:1] == ["kernel failed to start"], report["b-dead"]
    assert "attempt 3" in report["b-dead"]["details"], report["b-dead"]
    page = next((instructor / "feedback" / "b-dead" / LESSON).glob("*.html")).read_text()
    assert "could not start a kernel" in page
