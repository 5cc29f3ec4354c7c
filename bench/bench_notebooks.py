"""How long does each solution notebook take to run end to end? Prints seconds per lesson; asserts nothing.

    .venv/bin/python bench/bench_notebooks.py            # every lesson
    .venv/bin/python bench/bench_notebooks.py 05-heads   # one lesson

Each lesson whose model results qkv.model_cache keeps (lessons 05 and 06) runs twice: without the cache
(QKV_RESULT_CACHE=off, every forward computed) and with it, filled first if needed (the fill is one more run,
timed apart, as `make model` or the grader pays it once per machine). Every run uses the same BLAS thread count,
the one qkv chooses at the start (the cache's results are per thread count: the rounding depends on it).

Target (issue 12): every lesson <= 30 s on a quiet 2-core machine. The load average is printed next to
the times because a busy machine easily doubles them. The kernel runs from the notebook's folder with
autograde/ on PYTHONPATH, as nbgrader runs it, so the hidden tests are part of the time. The slowest
cells are listed too, so a slow lesson says where its time goes.
"""
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

from qkv import fill_model_cache, model_cache, threads

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
TARGET_SECONDS = 30


def run(path):
    notebook = nbformat.read(path, as_version=4)
    started = {}

    def on_start(cell, cell_index, **_):
        started[cell_index] = time.perf_counter()

    def on_end(cell, cell_index, **_):
        started[cell_index] = time.perf_counter() - started[cell_index]

    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_execute=on_start, on_cell_executed=on_end)
    start = time.perf_counter()
    client.execute()
    total = time.perf_counter() - start
    slowest = sorted(((seconds, index) for index, seconds in started.items()), reverse=True)[:3]
    return total, slowest


def timed(lesson, path, cache):
    os.environ[model_cache.MODE_VARIABLE] = cache
    total, slowest = run(path)
    cells = ", ".join(f"cell {index} {seconds:.1f} s" for seconds, index in slowest)
    flag = "" if total <= TARGET_SECONDS else f"  over the {TARGET_SECONDS} s target"
    label = {"off": "without cache", "on": "with cache"}[cache]
    print(f"{lesson:<14} {label:<14} {total:6.1f} s   slowest: {cells}{flag}", flush=True)


def main(lessons):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "autograde"), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads.usable_cpus()))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs visible; "
          f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']} in every kernel")
    for lesson in lessons:
        path = next((SOLUTIONS / lesson).glob("*.ipynb"))
        if lesson not in fill_model_cache.CACHED_LESSONS:
            timed(lesson, path, "off")
            continue
        timed(lesson, path, "off")
        started = time.perf_counter()
        filled = fill_model_cache.fill((lesson,))
        print(f"{lesson:<14} {'cache fill':<14} {time.perf_counter() - started:6.1f} s   "
              f"{'one run that stores its results' if filled else 'already filled for this notebook and thread count'}",
              flush=True)
        timed(lesson, path, "on")
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and p.name[:2].isdigit()))
