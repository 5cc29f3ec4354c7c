"""How long each lesson's hidden tests take on a correct answer. Prints; asserts nothing.

    .venv/bin/python bench/bench_hidden_tests.py [--against REV]

The "student" is qkv's reference compiled as a student's answer is (tests/mutation.py), so only the
tests' own work is timed. SmolLM2 run with the student's attention (lesson 05) is timed apart: it is
the model's time, not the tests'. With --against REV the hidden tests of that git revision are timed
too, on the same machine in the same run, and the ratio is printed (issue 8 asks for at most 2x).
"""
import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "autograde")]

import mutation  # noqa: E402

SKIPPED = {"plugged_into_smollm2"}
REPEATS = 5


def module_at(revision, lesson):
    source = subprocess.run(["git", "show", f"{revision}:autograde/qkv_grading/lesson{lesson}.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    name = f"qkv_grading_at_{revision.replace('-', '_')}_lesson{lesson}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{revision}:lesson{lesson}.py>", "exec"), module.__dict__)
    return module


def seconds(hidden, lesson):
    """Median over REPEATS of the time for all of a lesson's graded functions' hidden tests."""
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for graded, (where, test) in mutation.GRADED.items():
            if where == lesson and test not in SKIPPED and hasattr(hidden, test):
                getattr(hidden, test)(mutation.student_reference(graded))
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", help="a git revision whose hidden tests to time as well")
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; median of {REPEATS} runs; the reference as the student")
    header = f"{'lesson':<8}{'now (s)':>10}"
    if options.against:
        header += f"{options.against + ' (s)':>16}{'ratio':>8}"
    print(header)
    for lesson in mutation.LESSONS:
        now = seconds(importlib.import_module(f"qkv_grading.lesson{lesson}"), lesson)
        line = f"{lesson:<8}{now:>10.3f}"
        if options.against:
            before = seconds(module_at(options.against, lesson), lesson)
            line += f"{before:>16.3f}{now / before:>8.2f}"
        print(line)


if __name__ == "__main__":
    main()
