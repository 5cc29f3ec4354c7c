"""What one call of a student's function costs the grader (issue 45): CPU per call, coordinator and kernel apart.

When a hidden test calls a student's function, the call goes from the grader's process into the student's sandboxed
kernel and its answer comes back (student_kernel.RemoteFunction, qkv.wire). This script forks a kernel for a lesson
from a warm template, exactly as a grading worker does (same walls, same preamble), defines the solved notebook's
functions in it (its first cell, its key cell and its solution cells), and measures, each phase on its own:

  * echo: N calls of a function that returns its small argument: the machinery alone, per call, split into the
    grader's process (process_time: all its threads) and the kernel's process tree (/proc utime + stime);
  * tests: the lesson's test cells (visible and hidden) run as the grader runs them (verdicts.run_test_cell, the
    draws of one student), the round trips counted. The machinery is the grader's CPU inside RemoteFunction.call and
    StudentKernel.get (encoding, sending, waiting, decoding), plus the kernel's CPU less what the student's functions
    took (each wrapped, in the kernel, to add up the process's CPU during its calls): per submission and per trip.

With --profile, the echo calls are profiled too (cProfile in the grader, and in the kernel, which a cell switches
on in its own main thread) and the functions that cost most printed. Prints; asserts nothing.

    python bench/bench_call_path.py [LESSON=07-cost] [--calls N=300] [--repeats R=3] [--profile]
"""
import argparse
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


class Spent:
    """CPU seconds of this process spent inside the grader's call machinery (RemoteFunction.call, StudentKernel.get:
    encoding, sending, waiting, decoding), and the round trips they made, by op."""

    def __init__(self):
        self.seconds, self.trips = 0.0, {}

    def __enter__(self):
        self.saved = [(cls, name, getattr(cls, name)) for cls, name in
                      ((student_kernel.RemoteFunction, "call"), (student_kernel.StudentKernel, "get"),
                       (student_kernel.StudentKernel, "request"))]
        for cls, name, method in self.saved:
            setattr(cls, name, self._timed(method) if name != "request" else self._counted(method))
        return self

    def __exit__(self, *exc):
        for cls, name, method in self.saved:
            setattr(cls, name, method)

    def _timed(self, method):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started
        return timed

    def _counted(self, method):
        def counted(kernel, payload):
            self.trips[payload.get("op")] = self.trips.get(payload.get("op"), 0) + 1
            return method(kernel, payload)
        return counted


# in the kernel: each function the notebook defined, wrapped to add up the CPU its calls take (the whole process's:
# BLAS threads count too; the kernel's own threads are idle while the student's code runs)
TIME_STUDENT_FUNCTIONS = """
import functools as _f, time as _t, types as _y
_qkv_bench_spent = [0.0]
def _qkv_bench_timed(function):
    @_f.wraps(function)
    def timed(*args, **kwargs):
        started = _t.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            _qkv_bench_spent[0] += _t.process_time() - started
    return timed
for _name, _value in list(globals().items()):
    if isinstance(_value, _y.FunctionType) and _value.__module__ == "__main__" and not _name.startswith("_"):
        globals()[_name] = _qkv_bench_timed(_value)
"""


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


PROFILE_ON = ("import cProfile as _p, time as _t\n"
              "_qkv_bench_profile = _p.Profile(_t.thread_time)  # CPU of its main thread, not waits\n"
              "_qkv_bench_profile.enable()")
PROFILE_OFF = ("_qkv_bench_profile.disable()\nimport pstats as _s, io as _i\n_o = _i.StringIO()\n"
               "_s.Stats(_qkv_bench_profile, stream=_o).sort_stats('tottime').print_stats(25)\nprint(_o.getvalue())")


def profiled_in_kernel(kernel, on):
    cell = nbformat.v4.new_code_cell(PROFILE_ON if on else PROFILE_OFF)
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
            profile = cProfile.Profile(time.process_time)
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

        kernel.run_cell(nbformat.v4.new_code_cell(TIME_STUDENT_FUNCTIONS), 0)
        grader_names = verdicts.grader_namespace(lessons.read(lesson))
        for _ in range(options.repeats):
            student_before = kernel.get("_qkv_bench_spent")[0]
            with Spent() as spent:
                grader0, kernel0 = meter.read()
                passed = run_tests_in_kernel(lesson, kernel, grader_names)
                grader1, kernel1 = meter.read()
            student = kernel.get("_qkv_bench_spent")[0] - student_before
            n = sum(spent.trips.values())
            machinery = spent.seconds + (kernel1 - kernel0) - student
            print(f"tests: {passed}/{len(test_cells(lesson))} passed; {n} round trips "
                  f"({', '.join(f'{op} {k}' for op, k in sorted(spent.trips.items()))}); CPU-s: grader "
                  f"{grader1 - grader0:.3f} (in the calls {spent.seconds:.3f}), kernel {kernel1 - kernel0:.3f} "
                  f"(the student's functions {student:.3f}): the machinery {machinery:.3f} CPU-s a submission, "
                  f"{machinery * 1e3 / max(n, 1):.2f} ms a round trip")
    finally:
        kernel.close()
        template.close()


if __name__ == "__main__":
    main()
