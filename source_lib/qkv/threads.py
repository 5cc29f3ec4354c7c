"""BLAS threads matched to the CPU time this process may really use.

On Binder (and in many containers) the machine shows many CPUs but a cgroup quota grants about one core.
OpenBLAS starts one thread per visible CPU, and the threads then wait on each other: measured under load, a
32-token SmolLM2 forward took 171 ms with one thread and 356 ms with two (issue 12). And on a machine whose
CPUs are partly busy elsewhere, the BLAS threads that find no free CPU wait for the others: at load 1.2 on 2
cores, two threads took 512-3,789 ms (median 559) where one took 272-345 ms (median 278) (issue 22). `import
qkv` therefore limits the BLAS pool to the CPUs that are free (quota and affinity, minus the CPUs other
processes keep busy, shared between the grader's workers), unless the user chose a thread count in the
environment.

"Busy" is measured, not read from the load average: over a tenth of a second, how much of each of this process's
CPUs the kernel counted as not idle (/proc/stat). The 1-minute load average trails the machine by a minute: it
still held a finished run's load (2 threads were faster, 1 was chosen) and had not yet seen a new one.
"""
import math
import os
import time

# Any of these set by the user is a deliberate choice that we leave alone.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
# Set by the grader (`make grade`): how many worker processes share this machine's CPUs.
WORKERS_VARIABLE = "QKV_WORKERS"


def cgroup_cpu_quota(root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
    """CPUs' worth of time the cgroup grants per period (e.g. 1.0, 2.5), or None if unlimited or unknown."""
    quotas = []
    try:
        lines = open(proc_cgroup).read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: cpu.max holds "<quota> <period>" or "max <period>", at every level
            folder = os.path.join(root, path.lstrip("/"))
            while folder.startswith(root):
                quotas.append(_v2_quota(os.path.join(folder, "cpu.max")))
                folder = os.path.dirname(folder)
        elif "cpu" in controllers.split(","):  # cgroup v1: cfs_quota_us is -1 when unlimited
            for base in (os.path.join(root, "cpu", path.lstrip("/")), os.path.join(root, "cpu")):
                quotas.append(_v1_quota(base))
    quotas = [q for q in quotas if q]
    return min(quotas) if quotas else None


def _v2_quota(path):
    try:
        quota, period = open(path).read().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder):
    try:
        quota = int(open(os.path.join(folder, "cpu.cfs_quota_us")).read())
        period = int(open(os.path.join(folder, "cpu.cfs_period_us")).read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


BUSY_WINDOW_SECONDS = 0.1


def busy_cpus(window=BUSY_WINDOW_SECONDS, stat="/proc/stat"):
    """CPUs' worth of time that other processes kept busy during the next `window` seconds, on the CPUs this process
    may use (it sleeps meanwhile); None where /proc/stat cannot be read (not Linux)."""
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:
        return None
    before = _cpu_jiffies(stat, mine)
    if not before:
        return None
    time.sleep(window)
    after = _cpu_jiffies(stat, mine)
    busy = 0.0
    for cpu, (idle, total) in before.items():
        idle_after, total_after = after.get(cpu, (idle, total))
        if total_after > total:
            busy += 1.0 - (idle_after - idle) / (total_after - total)
    return busy


def _cpu_jiffies(stat, cpus):
    # {cpu: (idle + iowait, all)} in clock ticks since boot, for the cpuN lines of `cpus`
    found = {}
    try:
        with open(stat) as f:
            for line in f:
                name, _, fields = line.partition(" ")
                if name[:3] == "cpu" and name[3:].isdigit() and int(name[3:]) in cpus:
                    ticks = [int(v) for v in fields.split()[:8]]  # user nice system idle iowait irq softirq steal
                    found[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    except (OSError, ValueError, IndexError):
        return {}
    return found


def usable_cpus(quota=None, load=None, workers=None):
    """Whole CPUs this process may keep busy: its CPU affinity, capped by the cgroup quota, minus the CPUs other
    processes keep busy (`load`: measured by busy_cpus, or the 1-minute load average where it cannot be; rounded
    to the nearest: floor(cpus - load + 0.5)), divided among the grader's `workers` (QKV_WORKERS); at least 1, at
    most the CPUs.

    A thread beyond the free CPUs waits for the others at every BLAS barrier. Measured on the 2-core course
    machine: at load 11 lesson 05 ran in 16 s with one thread and 50 s with two; at load 1.2 a 32-token
    forward had a median of 278 ms with one thread and 559 ms with two (bench/bench_threads.py).
    """
    try:
        visible = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        visible = os.cpu_count() or 1
    quota = cgroup_cpu_quota() if quota is None else quota
    cpus = max(1, min(visible, math.floor(quota + 1e-9))) if quota else max(1, visible)
    if load is None:
        load = busy_cpus()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    free = min(cpus, max(1, math.floor(cpus - load + 0.5)))
    if workers is None:
        try:
            workers = int(os.environ.get(WORKERS_VARIABLE) or 1)
        except ValueError:
            workers = 1
    return max(1, min(free, cpus // max(1, workers)))


def expected_thread_counts():
    """The BLAS thread counts a kernel on this machine usually runs at, for results kept per count
    (qkv.model_cache): all the usable CPUs on a quiet machine, 1 on a busy one or in a grading worker."""
    return sorted({1, usable_cpus(load=0.0, workers=1)})


def match_blas_threads(environ=os.environ):
    """Limit the BLAS thread pool to usable_cpus(); returns the count set, or None if left alone."""
    if any(environ.get(name) for name in THREAD_VARIABLES):
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # threadpoolctl is in environment.yml; without it BLAS keeps its default
        return None
    import numpy  # noqa: F401  threadpoolctl limits only libraries already loaded: load numpy's BLAS first

    threads = usable_cpus()
    threadpool_limits(limits=threads, user_api="blas")
    return threads
