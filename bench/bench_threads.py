"""BLAS threads against a 32-token SmolLM2 forward, with 0, 1 and 2 CPUs kept busy: what qkv chooses, what each costs.

    .venv/bin/python bench/bench_threads.py

`import qkv` sets numpy's BLAS pool to the CPUs that are free (qkv/threads.py: affinity and cgroup quota, minus
the CPUs other processes keep busy, measured over a tenth of a second, rounded, shared among the grader's workers).
For each extra load this starts that many busy-loop processes (each stopped after the measurement, and bounded by
BUSY_SECONDS in any case), then prints the median forward time with 1, 2, ... threads, the count qkv chooses with
the loops running (measured, as `import qkv` does), and the count the 1-minute load average would have given at
that moment, which trails the machine by a minute. On a machine shared with others the background is not 0: read
the rows as "background + n". Results are computed, never read from qkv.model_cache. Prints only; asserts nothing.
"""
import os

os.environ["QKV_RESULT_CACHE"] = "off"  # time the computation, not a read of a stored result

import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

from qkv import model, threads  # noqa: E402

REPEATS = 9
EXTRA_LOADS = (0, 1, 2)
BUSY_SECONDS = 120       # a busy loop never outlives this, even if the bench is killed
SETTLE_SECONDS = 3       # let the busy loops take their CPUs before timing
TEXT = ("Attention lets every token look back at the tokens before it and decide, head by head, "
        "which of them matter for predicting the next word in the sentence, and how much.")
BUSY_LOOP = f"import time\nend = time.monotonic() + {BUSY_SECONDS}\nwhile time.monotonic() < end:\n    pass\n"


def forward_milliseconds(smol, ids):
    model.forward(smol, ids)  # warm-up: page in the weights, start the threads
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        model.forward(smol, ids)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times), 1000 * min(times), 1000 * max(times)


def busy(n):
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]


def main():
    chosen = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    visible = len(os.sched_getaffinity(0))
    background = os.getloadavg()[0]
    print(f"load average {background:.1f} before the bench (shared machine: this is the background); {visible} CPUs "
          f"visible; cgroup quota {threads.cgroup_cpu_quota() or 'none'}; BLAS threads set by import qkv: {chosen}")
    smol = model.load()
    ids = model.encode(smol, TEXT)[:32]
    print(f"\n{'busy loops':>10} {'busy CPUs':>10} {'qkv chooses':>12} {'load average would':>19} "
          + " ".join(f"{f'{n} thread(s): median (min-max) ms':>34}" for n in range(1, visible + 1)) + "   fastest")
    for extra in EXTRA_LOADS:
        loops = busy(extra)
        try:
            time.sleep(SETTLE_SECONDS if extra else 0)
            measured = threads.busy_cpus()
            choice = threads.usable_cpus(load=measured, workers=1)
            by_load_average = threads.usable_cpus(load=os.getloadavg()[0], workers=1)
            rows = {}
            for count in range(1, visible + 1):
                with threadpool_limits(limits=count, user_api="blas"):
                    rows[count] = forward_milliseconds(smol, ids)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        fastest = min(rows, key=lambda n: rows[n][0])
        cells = " ".join(f"{f'{m:.0f} ({lo:.0f}-{hi:.0f})':>34}" for m, lo, hi in rows.values())
        print(f"{extra:>10} {measured:>10.1f} {choice:>12} {by_load_average:>19} {cells}   {fastest} thread(s)"
              f"{'' if fastest == choice else '  (qkv chose otherwise)'}", flush=True)


if __name__ == "__main__":
    main()
