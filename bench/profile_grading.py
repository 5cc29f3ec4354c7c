"""Where grading a class spends its time: py-spy over `python -m qkv_autograde LESSON --jobs 1`, worker and kernels.

Builds a course copy with N solved submissions (tests/lessons.py, as bench_class_grading.py does), grades it under
`py-spy record --subprocesses` (every process: the coordinator, the worker, its kernel template and each forked
kernel), and prints, per kind of process, the seconds its threads were seen running and what they ran: for the
kernels, the notebook cells (IPython's run_code children) and what those call; for the worker, its test cells.
py-spy samples running threads, so on a busy machine a number counts waiting for a CPU too: read the shares, and
take CPU-s per submission from the grader's own line at the end.

    pip install -r bench/requirements.txt      # py-spy, for this script only
    python bench/profile_grading.py 06-sinks [N=3] [--top 25]
"""
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from lessons import copy_course, hand_in, solved_release  # noqa: E402

BIN = pathlib.Path(sys.executable).parent
RATE = 40  # samples per second
# a thread blocked in one of these is waiting, not working (py-spy's own idle test misses some under bubblewrap)
WAITING = re.compile(r"^(select|poll|wait|_wait|sleep|recv|read|readline|readinto|accept|Condition\.wait|Event\.wait|"
                     r"EpollSelector\.select|waitpid|_try_wait|acquire|communicate|_communicate|Socket\.recv|"
                     r"Poller\.poll|Socket\.poll|wait4|_wait_for_tstate_lock|join|_watch_pipe_fd|device)\b")


def a_class(parent, lesson, n):
    instructor = copy_course(parent)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", lesson, "--force"], cwd=instructor, check=True,
                   capture_output=True, env=environment())
    for i in range(n):
        hand_in(instructor, lesson, f"student{i:03d}", solved_release(lesson))
    return instructor


def environment():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def kind(process_frames):
    # the innermost process names what it is; a kernel is a kernel_template.py forked twice (keeper, kernel)
    depth = sum(bool(re.search(r'"\S*python[\d.]* \S*kernel_template\.py', f)) for f in process_frames)
    if depth:
        return ["", "kernel template", "keeper", "kernel"][min(depth, 3)]
    command = re.sub(r"^process \d+:", "", process_frames[-1]).strip('"')
    if "qkv_autograde" in command:
        return "worker" if len(process_frames) >= 2 else "coordinator"
    return (command.split() or ["?"])[-1][:40]


def samples(raw):
    """(kind, [frame, ...] innermost last, count) of every working sample."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        last = max(i for i, f in enumerate(frames) if f.startswith("process "))
        code = frames[last + 1:]
        if code and not WAITING.match(code[-1]):
            yield kind(frames[:last + 1]), code, int(count)


def below(frames, marker, depth=2):
    for i, frame in enumerate(frames):
        if marker in frame:
            return " > ".join(f[:70] for f in frames[i + 1:i + 1 + depth]) or "(itself)"
    return None


def report(raw, top):
    busy, parts = collections.Counter(), collections.defaultdict(collections.Counter)
    for what, frames, count in samples(raw):
        busy[what] += count
        if what == "kernel":
            part = below(frames, "InteractiveShell.run_code (") or below(frames, "InteractiveShell.run_cell (", 4)
            part = part or "(outside cells: start-up, messages, threads)"
        elif what == "worker":
            part = below(frames, "SandboxedExecute.execute (", 2) or below(frames, "warm_up (", 1) or "(other)"
        else:
            continue
        parts[what][part] += count
    print("seconds seen running, by process:", ", ".join(f"{k} {v / RATE:.1f}" for k, v in busy.most_common()))
    for what in ("kernel", "worker"):
        print(f"\n{what}: where its {busy[what] / RATE:.1f} s went")
        for part, count in parts[what].most_common(top):
            print(f"  {count / RATE:7.1f}  {part}")


def main(argv):
    lesson = argv[0]
    n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 3
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 25
    spy = shutil.which("py-spy", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        sys.exit("py-spy is not installed: pip install -r bench/requirements.txt")
    with tempfile.TemporaryDirectory() as tmp:
        instructor = a_class(tmp, lesson, n)
        raw = pathlib.Path(tmp) / "profile.txt"
        done = subprocess.run([spy, "record", "--subprocesses", "--format", "raw", "--rate", str(RATE), "-o", str(raw),
                               "--", sys.executable, "-m", "qkv_autograde", lesson, "--jobs", "1"],
                              cwd=instructor, env=environment(), capture_output=True, text=True)
        print(f"{lesson}, {n} solved submissions, load average {os.getloadavg()[0]:.1f}")
        print("\n".join(line for line in done.stdout.splitlines() if "CPU per submission" in line))
        report(raw, top)


if __name__ == "__main__":
    main(sys.argv[1:] or ["06-sinks"])
