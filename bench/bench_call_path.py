"""What one call of a student's function costs the grader (issue 45): CPU per call, coordinator and kernel apart.

When a hidden test calls a student's function, the call goes from the grader's process into the student's sandboxed
kernel and its answer comes back (student_kernel.RemoteFunction, qkv.wire). This script forks a kernel for a lesson
from a warm template, exactly as a grading worker does (same walls, same preamble), defines the solved notebook's
functions in it (its first cell, its key cell and its solution cells), and measures, each phase on its own:

  * echo: N calls of a function that returns its small argument: the machinery alone, per call, split into the
    grader's process (process_time: all its threads) and the kernel's process tree (/proc utime + stime);
  * tests: the lesson's test cells (visible and hidden) run as the grader runs them (verdicts.run_test_cell, the
    draws of one student), the calls counted; then the same cells with the same draws run here against the
    student's functions defined in this process (tests/lessons.student): the students' own compute and the tests'
    own checks. Their difference is what the call machinery costs per submission.

With --profile, the echo calls are profiled too (cProfile in the grader, and in the kernel, which a cell switches
on in its own main thread) and the functions that cost most printed. Prints; asserts nothing.

    python bench/bench_call_path.py [LESSON=07-cost] [--calls N=300] [--repeats R=3] [--profile]
"""
import argparse
import contextlib
import cProfile
import io
import os
import pathlib
import pstats
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "autograde")]

import nbformat  # noqa: E402

import lessons  # noqa: E402
import qkv_grading  # noqa: E402
from qkv_autograde.grading import parallel, preprocessors, verdicts  # noqa: E402
from qkv_autograde.kernels import forked_kernels, kernel_setup, student_kernel  # noqa: E402
from qkv_autograde.kernels.processes import process_tree_cpu_seconds  # noqa: E402

STUDENT = "bench-student"


class Meter:
    """CPU seconds of the grader's process and of the kernel's process tree, from one reading to the next."""

    def __init__(self, kernel, template):
        self.kernel_pid = template.host_pid(kernel.client.km.provisioner.forked.pid)

    def read(self):
        return time.process_time(), process_tree_cpu_seconds(self.kernel_pid)


def counting_requests(kernel):
    """Wrap kernel.request to count the round trips by op; returns the counter."""
    counts = {}
    plain_request = kernel.request

    def request(payload):
        counts[payload.get("op")] = counts.get(payload.get("op"), 0) + 1
        return plain_request(payload)

    kernel.request = request
    return counts


def solved_cells(lesson):
    """The cells lessons.student runs: the first code cell, the key cell and the solution cells, in order."""
    cells = [c for c in lessons.read(lesson).cells if c.cell_type == "code"]
    return [cells[0]] + [c for c in cells[1:] if c.get("id") == "your_key" or lessons.is_solution(c)]


def test_cells(lesson):
    return [c for c in lessons.read(lesson).cells if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("grade") and not lessons.is_solution(c)]


def run_tests_in_kernel(lesson, kernel, namespace):
    passed = 0
    for cell in test_cells(lesson):
        cell = nbformat.from_dict(dict(cell, outputs=[]))
        with qkv_grading.draws_of(lesson, STUDENT):
            passed += verdicts.run_test_cell(cell, kernel, namespace)
    return passed


def run_tests_here(lesson, grader_names, student_names):
    """The same test cells, with the same draws, against the student's functions defined in this process."""
    passed = 0
    for cell in test_cells(lesson):
        names = dict(student_names)
        names.update(grader_names)
        with qkv_grading.draws_of(lesson, STUDENT), contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(cell.source, "<test cell>", "exec"), names)
                passed += 1
            except Exception:
                pass
    return passed


def profiled_in_kernel(kernel, on):
    source = ("import cProfile as _p; _qkv_bench_profile = _p.Profile(); _qkv_bench_profile.enable()" if on else
              "_qkv_bench_profile.disable(); import pstats as _s, io as _i; _o = _i.StringIO(); "
              "_s.Stats(_qkv_bench_profile, stream=_o).sort_stats('tottime').print_stats(25); print(_o.getvalue())")
    cell = nbformat.v4.new_code_cell(source)
    kernel.run_cell(cell, 0)
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("lesson", nargs="?", default="07-cost")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    options = parser.parse_args()
    lesson = options.lesson
    calls = ["qkv.model.load", "qkv.model_cache.verify_entries"] if parallel.uses_model(lesson) else []
    template = forked_kernels.KernelTemplate(**kernel_setup.kernel_walls(lesson, 2 << 30), calls=calls)
    kernel = student_kernel.StudentKernel(
        lambda: forked_kernels.ForkedKernelManager(template=template), cell_seconds=300,
        preamble=preprocessors.NO_FIGURE_PICTURES)
    try:
        kernel.start()
        for index, cell in enumerate(solved_cells(lesson)):
            kernel.run_cell(nbformat.from_dict(dict(cell, outputs=[])), index)
        kernel.run_cell(nbformat.v4.new_code_cell("def _qkv_bench_echo(x):\n    return x"), 0)
        meter = Meter(kernel, template)
        print(f"{lesson}: load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
              f"grader's and kernel's CPU in ms (process_time; /proc utime+stime of the kernel's tree)")

        import numpy as np
        echo = kernel.get("_qkv_bench_echo")
        argument = np.arange(32.0).reshape(4, 8)
        for _ in range(20):  # warm
            echo(argument)
        for _ in range(options.repeats):
            grader0, kernel0 = meter.read()
            for _ in range(options.calls):
                echo(argument)
            grader1, kernel1 = meter.read()
            grader_ms, kernel_ms = (grader1 - grader0) * 1e3 / options.calls, (kernel1 - kernel0) * 1e3 / options.calls
            print(f"echo x{options.calls}: grader {grader_ms:.2f} ms/call, kernel {kernel_ms:.2f} ms/call, "
                  f"together {grader_ms + kernel_ms:.2f} ms/call")

        if options.profile:
            profiled_in_kernel(kernel, True)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(options.calls):
                echo(argument)
            profile.disable()
            print(f"--- the kernel, {options.calls} echo calls (its main thread), by own time")
            print(profiled_in_kernel(kernel, False))
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
            print(f"--- the grader, {options.calls} echo calls, by own time")
            print(out.getvalue())

        source = lessons.read(lesson)
        grader_names = verdicts.grader_namespace(source)
        student_names = lessons.student(lesson)
        for _ in range(options.repeats):
            counts = counting_requests(kernel)
            grader0, kernel0 = meter.read()
            passed_there = run_tests_in_kernel(lesson, kernel, grader_names)
            grader1, kernel1 = meter.read()
            del kernel.request  # the instance's wrapper: back to the class's method
            here0 = time.process_time()
            passed_here = run_tests_here(lesson, grader_names, student_names)
            here = time.process_time() - here0
            there = (grader1 - grader0) + (kernel1 - kernel0)
            n = sum(counts.values())
            print(f"tests: {passed_there}/{len(test_cells(lesson))} passed graded, {passed_here} run here; "
                  f"{n} round trips ({', '.join(f'{op} {k}' for op, k in sorted(counts.items()))}); "
                  f"graded {there:.3f} CPU-s (grader {grader1 - grader0:.3f}, kernel {kernel1 - kernel0:.3f}), "
                  f"here {here:.3f}: the machinery {there - here:.3f} CPU-s a submission, "
                  f"{(there - here) * 1e3 / max(n, 1):.2f} ms a round trip")
    finally:
        kernel.close()
        template.close()


if __name__ == "__main__":
    main()
