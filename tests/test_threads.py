"""BLAS threads follow the cgroup CPU quota and the CPUs other processes keep busy (qkv.threads), unless the user
set a thread count."""
import os
import subprocess
import sys

import threadpoolctl

from qkv import threads


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_the_smallest_on_the_path(tmp_path):
    write(tmp_path / "proc", "0::/binder/user\n")
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    write(tmp_path / "cg" / "binder" / "cpu.max", "200000 100000\n")
    write(tmp_path / "cg" / "binder" / "user" / "cpu.max", "100000 100000\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc")) == 1.0


def test_cgroup_v1_quota_and_unlimited(tmp_path):
    write(tmp_path / "proc", "4:cpu,cpuacct:/job\n")
    write(tmp_path / "cg" / "cpu" / "job" / "cpu.cfs_quota_us", "50000\n")
    write(tmp_path / "cg" / "cpu" / "job" / "cpu.cfs_period_us", "100000\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc")) == 0.5
    write(tmp_path / "cg" / "cpu" / "job" / "cpu.cfs_quota_us", "-1\n")
    assert threads.cgroup_cpu_quota(str(tmp_path / "cg"), str(tmp_path / "proc")) is None
    assert threads.cgroup_cpu_quota(str(tmp_path / "nothing"), str(tmp_path / "missing")) is None


def test_usable_cpus_is_capped_by_the_quota_and_never_zero():
    visible = len(os.sched_getaffinity(0))
    assert threads.usable_cpus(quota=0.5, load=0.0) == 1
    assert threads.usable_cpus(quota=1.0, load=0.0) == 1
    assert threads.usable_cpus(quota=1000.0, load=0.0) == visible


def test_a_saturated_machine_gets_one_thread():
    visible = len(os.sched_getaffinity(0))
    assert threads.usable_cpus(quota=1000.0, load=visible + 0.5, workers=1) == 1
    assert threads.usable_cpus(quota=1000.0, load=0.3, workers=1) == visible


def test_threads_follow_the_cpus_the_load_leaves_free():
    # issue 22: at load 1.2 on 2 CPUs two threads took twice as long as one; only ~0.8 CPU is free
    assert threads.usable_cpus(quota=2.0, load=1.2, workers=1) == 1
    assert threads.usable_cpus(quota=2.0, load=0.4, workers=1) == min(2, len(os.sched_getaffinity(0)))
    assert threads.usable_cpus(quota=2.0, load=2.6, workers=1) == 1


def test_grading_workers_share_the_cpus(monkeypatch):
    assert threads.usable_cpus(quota=2.0, load=0.0, workers=2) == 1
    assert threads.usable_cpus(quota=2.0, load=0.0, workers=5) == 1
    monkeypatch.setenv(threads.WORKERS_VARIABLE, "2")
    assert threads.usable_cpus(quota=2.0, load=0.0) == 1


def test_the_blas_pool_is_limited_unless_the_user_chose(monkeypatch):
    before = threadpoolctl.threadpool_info()
    try:
        monkeypatch.setattr(threads, "usable_cpus", lambda: 1)
        assert threads.match_blas_threads(environ={}) == 1
        assert all(pool["num_threads"] == 1 for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas")
        assert threads.match_blas_threads(environ={"OMP_NUM_THREADS": "4"}) is None
    finally:
        for pool in before:
            threadpoolctl.threadpool_limits(limits=pool["num_threads"], user_api=pool["user_api"])


def stat_lines(*cpus):
    """/proc/stat text with these (idle + iowait, all) clock ticks for cpu0, cpu1, ..."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    for n, (idle, total) in enumerate(cpus):
        lines.append(f"cpu{n} {total - idle} 0 0 {idle} 0 0 0 0 0 0")
    return "\n".join(lines + ["intr 1 2 3", "procs_running 1"]) + "\n"


def test_busy_cpus_is_the_share_of_each_usable_cpu_that_was_not_idle(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    readings = iter([stat_lines((100, 200), (100, 200), (100, 200)), stat_lines((100, 300), (200, 300), (150, 300))])
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: stat.write_text(next(readings)))
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})  # cpu2 is not this process's
    stat.write_text(next(readings))
    assert threads.busy_cpus(stat=str(stat)) == 1.0  # cpu0 busy throughout, cpu1 idle throughout
    assert threads.busy_cpus(stat=str(tmp_path / "missing")) is None


def test_a_cpu_kept_busy_by_another_process_is_seen_at_once():
    # the 1-minute load average takes a minute to follow a new load; the measurement sees it within its window
    visible = len(os.sched_getaffinity(0))
    loop = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 20\n"
                                                   "while time.monotonic() < end:\n    pass"])
    try:
        import time
        time.sleep(0.5)
        busy = threads.busy_cpus(window=0.5)
    finally:
        loop.kill()
        loop.wait()
    assert 0.6 <= busy <= visible, busy
    if visible == 2:
        assert threads.usable_cpus(quota=2.0, load=busy, workers=1) == 1


def test_the_counts_a_kernel_usually_chooses_are_one_and_all_usable_cpus():
    visible = len(os.sched_getaffinity(0))
    quota = threads.cgroup_cpu_quota()
    expected = max(1, min(visible, int(quota))) if quota else visible
    assert threads.expected_thread_counts() == sorted({1, expected})
