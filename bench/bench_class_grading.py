"""Grading a class: README's stock nbgrader commands against `make grade` (parallel workers), same grader.

The stock route is what an instructor runs without `make grade`, one command after the other: `nbgrader autograde`,
`nbgrader generate_feedback` and `nbgrader export` (make grade does all three). Prints wall time of each route (and
of the stock route's steps), the speed-up, CPU seconds per submission (worker plus its sandboxed kernel), peak memory
per worker, and checks that both give the same grades. Sizes: N01 submissions of lesson 01 (an honest mix of
perfect, half-done and blank), N05, N06, N07 of the model lessons. The defaults (40, 40, 40, 12) are the issue's
class of 40 wherever both routes grade it within 10 minutes on a quiet 2-core machine (lesson 06 takes about 7,
with the model results cache); lesson 07 times the student's code for about half a minute per notebook on either
route, so it is graded at 12 (about 7 minutes). Each lesson's line ends with issue 22's targets, met or missed, on
the numbers just measured. Measured in one run, never asserted.

    python bench/bench_class_grading.py [N01] [N05] [N06] [N07] [--no-figures] [--no-cache]

--no-figures grades both ways with `c.SandboxedExecute.render_figures = False` (README: faster, feedback without
pictures); the default is the course's configuration, which draws them. The model results of lessons 05-06
(qkv.model_cache) are filled before either grading, as `make model` or the grader's first class does once per
machine (the fill's time is printed apart); --no-cache grades both ways with QKV_RESULT_CACHE=off.
"""
import csv
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from lessons import copy_course, hand_in, solved_release  # noqa: E402

BIN = pathlib.Path(sys.executable).parent
ENV = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


# issue 22's targets on 2 cores: (least speed-up of make grade over stock, most CPU-s per submission or None)
TARGETS = {"01-lookup": (5.0, None), "05-heads": (3.0, 2.0), "06-sinks": (4.0, 4.0), "07-cost": (3.0, None)}

NO_FIGURES = "--no-figures" in sys.argv
NO_CACHE = "--no-cache" in sys.argv
if NO_CACHE:
    ENV["QKV_RESULT_CACHE"] = "off"


def a_class(parent, lesson, n):
    instructor = copy_course(parent)
    if NO_FIGURES:
        with (instructor / "nbgrader_config.py").open("a") as config:
            config.write("\nc.SandboxedExecute.render_figures = False\n")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", lesson, "--force"], cwd=instructor, env=ENV,
                   check=True, capture_output=True)
    first = next(c.metadata["nbgrader"]["grade_id"] for c in solved_release(lesson).cells
                 if c.metadata.get("nbgrader", {}).get("solution"))
    for i in range(n):
        solved = [None, None, [first], []][i % 4]  # half perfect, a quarter half-done, a quarter blank
        hand_in(instructor, lesson, f"student{i:03d}", solved_release(lesson, solved))
    return instructor


def grades(instructor, lesson):
    subprocess.run([str(BIN / "nbgrader"), "export", "--to", "bench.csv"], cwd=instructor, env=ENV,
                   capture_output=True, check=True)
    return {r["student_id"]: float(r["score"]) for r in csv.DictReader((instructor / "bench.csv").open())
            if r["assignment"] == lesson}


def children_cpu():
    usage = os.times()
    return usage.children_user + usage.children_system


STOCK_STEPS = (("autograde", "{lesson}"), ("generate_feedback", "{lesson}"), ("export", "--to", "grades.csv"))


def sequential(lesson, n):
    """(wall seconds of the whole stock route, {step: seconds}, CPU seconds counted, grades)"""
    with tempfile.TemporaryDirectory() as tmp:
        instructor = a_class(tmp, lesson, n)
        started, cpu, steps = time.perf_counter(), children_cpu(), {}
        for step in STOCK_STEPS:
            begun = time.perf_counter()
            subprocess.run([str(BIN / "nbgrader"), *(a.format(lesson=lesson) for a in step), "--log-level=ERROR"],
                           cwd=instructor, env=ENV, check=True, capture_output=True)
            steps[step[0]] = time.perf_counter() - begun
        return time.perf_counter() - started, steps, children_cpu() - cpu, grades(instructor, lesson)


def parallel(lesson, n, jobs):
    with tempfile.TemporaryDirectory() as tmp:
        instructor = a_class(tmp, lesson, n)
        started = time.perf_counter()
        script = ("import json, sys\nfrom qkv_autograde.grading.grade_class import grade\n"
                  f"r = grade({lesson!r}, jobs={jobs})\n"
                  "print('MEASURED', json.dumps(r['measurements']))")
        done = subprocess.run([sys.executable, "-c", script], cwd=instructor, env=ENV, capture_output=True, text=True,
                              check=True)
        seconds = time.perf_counter() - started
        measured = json.loads(done.stdout.split("MEASURED", 1)[1])
        return seconds, measured, grades(instructor, lesson)


def fill_cache(lesson):
    if NO_CACHE:
        return
    from qkv import fill_model_cache
    if lesson not in fill_model_cache.CACHED_LESSONS:
        return
    started = time.perf_counter()
    # at one BLAS thread, the count make grade's workers give their kernels on this machine (qkv.threads)
    ran = fill_model_cache.fill((lesson,), blas_threads=1)
    print(f"{lesson}: model results cache {'filled' if ran else 'already filled'} "
          f"in {time.perf_counter() - started:.1f} s")


def report(lesson, n, jobs):
    fill_cache(lesson)
    seq_seconds, seq_steps, seq_cpu, seq_grades = sequential(lesson, n)
    par_seconds, measured, par_grades = parallel(lesson, n, jobs)
    cpu = [m["cpu_seconds"] for m in measured]
    rss, template_rss = {}, {}
    for m in measured:
        rss[m["worker"]] = max(rss.get(m["worker"], 0), m["peak_rss_mb"])
        template_rss[m["worker"]] = max(template_rss.get(m["worker"], 0), m.get("template_peak_rss_mb", 0))
    forked = sum(1 for m in measured if m.get("forked"))
    print(f"{lesson}, {n} submissions, {len(rss)} workers on {len(os.sched_getaffinity(0))} CPUs"
          f"{', figures not drawn' if NO_FIGURES else ''}{', no model results cache' if NO_CACHE else ''} "
          f"(load average {os.getloadavg()[0]:.1f}):")
    print(f"  README's stock nbgrader (sequential):     {seq_seconds:7.1f} s wall "
          f"({', '.join(f'{step} {seconds:.1f} s' for step, seconds in seq_steps.items())}), "
          f"{seq_cpu / n:5.2f} CPU-s per submission counted (kernels killed in their PID namespace escape this count)")
    print(f"  make grade (parallel, incl. feedback):    {par_seconds:7.1f} s wall, "
          f"{sum(cpu) / len(cpu):5.2f} CPU-s per submission (worker + kernel)")
    print(f"  speed-up {seq_seconds / par_seconds:.2f}x; peak memory per worker "
          f"{', '.join(f'{v:.0f} MB' for v in rss.values())}, per worker's kernel template "
          f"{', '.join(f'{v:.0f} MB' for v in template_rss.values())}; kernels forked from a template: "
          f"{forked} of {len(measured)}; same grades: {seq_grades == par_grades}")
    print("  " + against_targets(lesson, seq_seconds / par_seconds, sum(cpu) / len(cpu)))


def against_targets(lesson, speed_up, cpu_per_submission):
    least_speed_up, most_cpu = TARGETS[lesson]
    verdicts = [f"speed-up >= {least_speed_up:g}x {'met' if speed_up >= least_speed_up else 'MISSED'}"]
    if most_cpu is not None:
        verdicts.append(f"<= {most_cpu:g} CPU-s per submission "
                        f"{'met' if cpu_per_submission <= most_cpu else 'MISSED'}")
    where = ("" if "MISSED" not in " ".join(verdicts) else
             f"; where a submission's time goes: python bench/bench_notebooks.py {lesson} (its slowest cells)")
    return f"issue 22's targets on 2 cores: {', '.join(verdicts)}{where}"


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:] if not a.startswith("--")]
    defaults = {"01-lookup": 40, "05-heads": 40, "06-sinks": 40, "07-cost": 12}
    jobs = None  # make grade's default
    for position, (lesson, default) in enumerate(defaults.items()):
        n = sizes[position] if position < len(sizes) else default
        if n:
            report(lesson, n, jobs)
