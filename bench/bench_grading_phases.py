"""Where `make grade`'s wall time goes after the grading itself: feedback and the grades.csv export.

Builds a class of N submissions of a lesson (bench_class_grading.a_class: half perfect, a quarter half-done, a
quarter blank), runs `grade_class.grade` in the course copy as `make grade` does, and prints the wall seconds of
its phases (grading = everything else). Then checks that the outputs are what the stock commands write from the
same gradebook: `nbgrader export` (byte-identical CSV) and `nbgrader generate_feedback` (identical HTML).
Measured in one run, never asserted.

    python bench/bench_grading_phases.py [N] [LESSON]
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_class_grading import BIN, ENV, a_class

# Run inside the course copy (its qkv_autograde, its gradebook). Each phase is timed by wrapping the function
# grade() calls for it: feedback() and the export (feedback.export_grades()).
TIMED_RUN = """
import json, sys, time
from qkv_autograde.grading import grade_class

seconds = {}

def timed(phase, fn):
    def run(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - started
    return run

grade_class.feedback = timed("feedback", grade_class.feedback)
grade_class.feedback_pages.export_grades = timed("export", grade_class.feedback_pages.export_grades)

if __name__ == "__main__":
    started = time.perf_counter()
    grade_class.grade(sys.argv[1], out=sys.stderr)
    seconds["total"] = time.perf_counter() - started
    print("SECONDS", json.dumps(seconds))
"""


def same_as_stock(instructor, lesson):
    """(grades.csv byte-identical to `nbgrader export`, feedback pages identical to `nbgrader generate_feedback`)"""
    def stock(*args):
        subprocess.run([str(BIN / "nbgrader"), *args, "--log-level=ERROR"], cwd=instructor, env=ENV, check=True,
                       capture_output=True)
    stock("export", "--to", "stock-grades.csv")
    stock("generate_feedback", lesson, "--CourseDirectory.feedback_directory=stock-feedback")
    csv_same = (instructor / "grades.csv").read_bytes() == (instructor / "stock-grades.csv").read_bytes()
    ours = sorted(p.relative_to(instructor / "feedback") for p in (instructor / "feedback").rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(instructor / "stock-feedback")
                    for p in (instructor / "stock-feedback").rglob("*") if p.is_file())
    pages_same = ours == theirs and all(
        filecmp.cmp(instructor / "feedback" / p, instructor / "stock-feedback" / p, shallow=False) for p in ours)
    return csv_same, pages_same, len(ours)


def main(n, lesson):
    with tempfile.TemporaryDirectory() as tmp:
        instructor = a_class(tmp, lesson, n)
        (instructor / "timed_run.py").write_text(TIMED_RUN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "timed_run.py", lesson], cwd=instructor, env=ENV, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        wall = time.perf_counter() - started
        seconds = json.loads(done.stdout.split("SECONDS", 1)[1])
        csv_same, pages_same, pages = same_as_stock(instructor, lesson)
    grading = seconds["total"] - seconds.get("feedback", 0.0) - seconds.get("export", 0.0)
    print(f"{lesson}, {n} submissions, {len(os.sched_getaffinity(0))} CPUs "
          f"(load average {os.getloadavg()[0]:.1f}): grade() {seconds['total']:.1f} s "
          f"(process {wall:.1f} s)")
    print(f"  grading {grading:6.1f} s   feedback {seconds.get('feedback', 0.0):5.2f} s   "
          f"export {seconds.get('export', 0.0):5.2f} s")
    print(f"  grades.csv byte-identical to nbgrader export: {csv_same}; {pages} feedback page(s) identical to "
          f"nbgrader generate_feedback: {pages_same}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40, sys.argv[2] if len(sys.argv) > 2 else "01-lookup")
