"""BLAS threads against a 32-token SmolLM2 forward: what qkv chose and what each thread count costs here.

    .venv/bin/python bench/bench_threads.py

`import qkv` limits numpy's BLAS pool to the CPUs the cgroup quota grants (qkv/threads.py). This prints the
quota, that choice, and the median forward time with 1, 2, ... threads up to the visible CPUs, with the load
average, since on a busy machine extra threads wait on each other. Prints only; asserts nothing.
"""
import os
import statistics
import time

from threadpoolctl import threadpool_info, threadpool_limits

from qkv import model, threads

REPEATS = 7
TEXT = ("Attention lets every token look back at the tokens before it and decide, head by head, "
        "which of them matter for predicting the next word in the sentence, and how much.")


def median_forward_seconds(smol, ids):
    model.forward(smol, ids)  # warm-up: page in the weights, start the threads
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        model.forward(smol, ids)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    chosen = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    visible = len(os.sched_getaffinity(0))
    print(f"load average {os.getloadavg()[0]:.1f}; {visible} CPUs visible; cgroup quota "
          f"{threads.cgroup_cpu_quota() or 'none'}; BLAS threads set by import qkv: {chosen}")
    smol = model.load()
    ids = model.encode(smol, TEXT)[:32]
    for count in range(1, visible + 1):
        with threadpool_limits(limits=count, user_api="blas"):
            seconds = median_forward_seconds(smol, ids)
        print(f"{count} BLAS thread{'s' if count > 1 else ' '}: forward of {len(ids)} tokens {seconds * 1000:7.1f} ms "
              f"(median of {REPEATS})")


if __name__ == "__main__":
    main()
