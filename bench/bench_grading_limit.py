"""Grading at the limit (issue 45): `make grade`'s CPU per submission against the students' own compute.

For a lesson and a class size, builds an honest class (perfect, partial and blank by thirds: tests/lessons.py's
solved_release), then, each inside a cgroup this script makes (so that every process of the tree is counted: the
sandboxed kernels are not waited-for children, /usr/bin/time misses most of them):
  * `make grade LESSON=...`, the real route (the repository's Makefile, in a copy of the course), coordinator,
    workers, kernel templates, kernels, feedback pages, exports and start-up all included;
  * the students' own compute: each submission in a plain Python process of its own, its code cells run once in
    order and, where the test cells stand, the hidden tests' calls of its functions (the source notebook's test
    cells, drawn as that student), figures made but never rasterised (as nobody looks at them);
  * for lesson 01 (or --stock), README's stock route side by side: `nbgrader autograde`, `generate_feedback` and
    `export` one after the other, and whether both routes give the same grades.
A class of one is graded first, unmeasured, so that what the grader builds once per machine (the model's results
at the kernels' thread count) is not counted. Prints CPU-s per submission of each, the ratio to the students' own,
wall times, and the coordinator's peak RSS (read from /proc while it runs). Measured in one run, never asserted.

    python bench/bench_grading_limit.py LESSON N [--stock] [--no-stock] [--only-grade]

--only-grade measures `make grade` alone (e.g. 01-lookup 1000 --only-grade, for the coordinator's memory).
The cgroup: v2 (/sys/fs/cgroup/unified or /sys/fs/cgroup, cpu.stat usage_usec), else v1 cpuacct (cpuacct.usage);
where neither can be made (not root, no delegation), the process tree is polled through /proc instead, which misses
what a process spends after its last poll: the script says which it used.
"""
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time


ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from bench_class_grading import BIN, ENV, STOCK_STEPS, fill_cache, grades  # noqa: E402
from lessons import copy_course, grade_id, hand_in, read, solved_release  # noqa: E402

CGROUP_V2 = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
CGROUP_V1 = "/sys/fs/cgroup/cpuacct"


class Cgroup:
    """A cgroup of its own for one measured command: `preexec` moves the child in before it runs anything."""

    def __init__(self, name):
        self.kind, self.path = None, None
        for top in CGROUP_V2:
            if os.path.exists(os.path.join(top, "cgroup.controllers")):
                self._try(os.path.join(top, name), "v2", "cpu.stat")
                if self.path:
                    return
        if os.path.isdir(CGROUP_V1):
            self._try(os.path.join(CGROUP_V1, name), "v1", "cpuacct.usage")

    def _try(self, path, kind, usage):
        try:
            os.makedirs(path, exist_ok=True)
            if os.path.exists(os.path.join(path, usage)):
                self.kind, self.path = kind, path
        except OSError:
            pass

    def preexec(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))

    def cpu_seconds(self):
        if self.kind == "v2":
            stat = dict(line.split() for line in open(os.path.join(self.path, "cpu.stat")))
            return int(stat["usage_usec"]) / 1e6
        return int(open(os.path.join(self.path, "cpuacct.usage")).read()) / 1e9

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:  # a process still leaving
                time.sleep(0.1)


def _stat(pid):
    # (ppid, utime + stime in seconds) from /proc/<pid>/stat, or None for a process gone
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Measured:
    """Runs a command in a cgroup of its own (or polls its process tree) and watches the coordinator's memory."""

    def __init__(self, label):
        self.cgroup = Cgroup(f"qkv-bench-{os.getpid()}-{label}")
        self.how = (f"cgroup {self.cgroup.kind} ({self.cgroup.path})" if self.cgroup.path else
                    "no cgroup could be made: the process tree polled through /proc every 0.1 s (misses the "
                    "last moments of each process)")
        self.seen, self.coordinator_peak_mb, self.cpu = {}, 0.0, 0.0

    def run(self, command, cwd, env=ENV):
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   preexec_fn=self.cgroup.preexec if self.cgroup.path else None)
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(process.pid, done), daemon=True)
        watcher.start()
        output = process.communicate()[0].decode(errors="replace")
        done.set()
        watcher.join()
        wall = time.perf_counter() - started
        if process.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{output[-3000:]}")
        return wall, output

    def _watch(self, root, done):
        while not done.wait(0.1):
            tree = self._tree(root)
            for pid in tree:
                stat = _stat(pid)
                if stat:
                    self.seen[pid] = stat[1]
                if self._is_coordinator(pid):
                    self.coordinator_peak_mb = max(self.coordinator_peak_mb, _hwm_mb(pid))

    @staticmethod
    def _tree(root):
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _stat(int(entry))
                if stat:
                    children.setdefault(stat[0], []).append(int(entry))
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        return tree

    @staticmethod
    def _is_coordinator(pid):
        # `python -m qkv_autograde LESSON`; its workers are forks of it with the same command line
        parent = _stat(pid)
        return _is_grader(pid) and parent is not None and not _is_grader(parent[0])

    def cpu_seconds(self):
        if self.cgroup.path:
            seconds = self.cgroup.cpu_seconds()
            self.cgroup.remove()
            return seconds
        return sum(self.seen.values())


def _cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return ""


def _is_grader(pid):
    arguments = _cmdline(pid).split("\0")
    return any(a == "-m" and b == "qkv_autograde" for a, b in zip(arguments, arguments[1:]))


def _hwm_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def a_class(parent, lesson, n):
    """A course copy with n submissions: perfect, partial (the first half of the solution cells) and blank by
    thirds; returns (the copy's autograde/ folder, {student: submitted notebook})."""
    instructor = copy_course(parent)
    (instructor.parent / "Makefile").write_bytes((ROOT / "Makefile").read_bytes())
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", lesson, "--force"], cwd=instructor, env=ENV,
                   check=True, capture_output=True)
    ids = [grade_id(c) for c in solved_release(lesson).cells if c.metadata.get("nbgrader", {}).get("solution")
           and c.cell_type == "code"]
    handed = {}
    for i in range(n):
        solved = [None, ids[:len(ids) // 2], []][i % 3]
        notebook = solved_release(lesson, solved)
        handed[f"student{i:04d}"] = notebook
        hand_in(instructor, lesson, f"student{i:04d}", notebook)
    return instructor, handed


def make_grade(instructor, lesson):
    """`make grade LESSON=...` in the course copy with the repository's environment (never reinstalled)."""
    installed = str(ROOT / ".venv" / ".installed")
    measured = Measured("make-grade")
    wall, output = measured.run(["make", "-f", str(instructor.parent / "Makefile"), "-o", installed, "grade",
                                 f"LESSON={lesson}", f"VENV={ROOT / '.venv'}"], cwd=instructor.parent)
    return wall, measured.cpu_seconds(), measured, output


def stock(instructor, lesson):
    measured = Measured("stock")
    wall = 0.0
    for step in STOCK_STEPS:
        seconds, _ = measured.run([str(BIN / "nbgrader"), *(a.format(lesson=lesson) for a in step),
                                   "--log-level=ERROR"], cwd=instructor)
        wall += seconds
    return wall, measured.cpu_seconds(), measured


# One submission as its student runs it: the code cells once, in order, each failing on its own as in a notebook,
# and the test cells' calls of the hidden tests, drawn as this student. IPython magics mean nothing here.
OWN_RUN = """
import json, re, sys
import matplotlib
matplotlib.use("Agg")
import qkv_grading
lesson, student, cells = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
namespace = {"__name__": "__main__", "display": lambda *a, **k: None}
with qkv_grading.draws_of(lesson, student):
    for source in cells:
        source = "\\n".join(l for l in source.splitlines() if not re.match(r"\\s*[%!]", l))
        try:
            exec(compile(source, "<cell>", "exec"), namespace)
        except BaseException:
            pass
"""


def own_cells(lesson, submitted):
    """The code cells a student's own run executes: the source notebook's cells, each solution cell replaced by
    the student's, each test cell as the grader assembles it (the visible check and the hidden tests' call)."""
    theirs = {grade_id(c): c.source for c in submitted.cells if grade_id(c)}
    cells = []
    for cell in read(lesson).cells:
        if cell.cell_type != "code":
            continue
        source = theirs.get(grade_id(cell), cell.source) if cell.metadata.get("nbgrader", {}).get("solution") \
            else cell.source
        cells.append("\n".join(line for line in source.splitlines() if not line.strip().startswith("### ")))
    return cells


def students_own(instructor, lesson, handed, folder):
    """CPU-s of every submission's own run, all in one cgroup, two at a time (the machine's cores)."""
    script = pathlib.Path(folder) / "own_run.py"
    script.write_text(OWN_RUN)
    env = dict(ENV, PYTHONPATH=f"{instructor}{os.pathsep}{ROOT / 'source_lib'}")
    measured = Measured("own")
    jobs = []
    for student, notebook in handed.items():
        cells = pathlib.Path(folder) / f"{student}.json"
        cells.write_text(json.dumps(own_cells(lesson, notebook)))
        jobs.append([sys.executable, str(script), lesson, student, str(cells)])
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        list(pool.map(lambda command: measured.run(command, cwd=folder, env=env), jobs))
    return time.perf_counter() - started, measured.cpu_seconds(), measured


def make_grade_grades(instructor, lesson):
    import csv
    rows = csv.DictReader((instructor / "grades.csv").open())
    return {r["student_id"]: float(r["score"]) for r in rows if r["assignment"] == lesson}


def main(argv):
    lesson, n = argv[0], int(argv[1])
    with_stock = ("--stock" in argv or lesson == "01-lookup") and "--no-stock" not in argv \
        and "--only-grade" not in argv
    fill_cache(lesson)
    with tempfile.TemporaryDirectory() as tmp:  # whatever make grade builds once per machine, built before measuring
        make_grade(a_class(pathlib.Path(tmp), lesson, 1)[0], lesson)
    print(f"{lesson}, {n} submissions (perfect, partial, blank by thirds), {len(os.sched_getaffinity(0))} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    with tempfile.TemporaryDirectory() as tmp:
        instructor, handed = a_class(pathlib.Path(tmp) / "grade", lesson, n)
        wall, cpu, measured, output = make_grade(instructor, lesson)
        ours = make_grade_grades(instructor, lesson)
        print(f"  counted by: {measured.how}")
        print(f"  make grade:        {wall:7.1f} s wall, {cpu / n:6.2f} CPU-s per submission "
              f"({cpu:.1f} CPU-s in all); coordinator peak RSS {measured.coordinator_peak_mb:.0f} MB")
        said = [line.strip() for line in output.splitlines() if re.search(r"graded \d+ submission|flagged", line)]
        print(f"  (make grade says: {said[0] if said else output[-300:]})")
        if "--only-grade" in argv:
            return
        own_wall, own_cpu, _ = students_own(instructor, lesson, handed, tmp)
        print(f"  students' own:     {own_wall:7.1f} s wall, {own_cpu / n:6.2f} CPU-s per submission "
              f"({own_cpu:.1f} CPU-s in all)")
        print(f"  ratio make grade / students' own: {cpu / own_cpu:.2f}x (issue 45's target: <= 1.3x)")
        if with_stock:
            stock_instructor, _ = a_class(pathlib.Path(tmp) / "stock", lesson, n)
            stock_wall, stock_cpu, _ = stock(stock_instructor, lesson)
            theirs = grades(stock_instructor, lesson)
            print(f"  stock nbgrader:    {stock_wall:7.1f} s wall, {stock_cpu / n:6.2f} CPU-s per submission")
            print(f"  make grade against stock: {stock_wall / wall:.2f}x the wall time, {stock_cpu / cpu:.2f}x the "
                  f"CPU (issue 45's target: >= 5x); same grades: {ours == theirs}")
    print(f"  load average {os.getloadavg()[0]:.1f} at the end (the machine is shared: read the ratios)")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
