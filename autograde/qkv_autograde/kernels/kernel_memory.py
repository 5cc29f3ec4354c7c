"""A student's call's memory, measured by the grader from outside the student's kernel (issue 34, item 1).

The memory checks of lesson 07 used to grade the peak that tracemalloc, running in the student's kernel, reported:
the kernel runs the student's code, and `tracemalloc.reset_peak()` before `return` made a whole score matrix vanish.
Now `measured_call` sends the call's arguments ahead (qkv.wire's "stage": the kernel decodes and keeps them, then
hands its free memory back to the system), resets the peak of the kernel's cgroup, sends the call and reads the
peak once the answer is in: the call's rise is that peak minus the level at the reset. Only the grader can reset or
read it: the sandbox has no /sys (tests/test_memory_verdict.py). Where no memory cgroup could be made, the peak
resident memory of the kernel's processes (VmHWM, reset through /proc/PID/clear_refs) stands in; where neither is
possible the call has no measurement, and the check says so rather than take the kernel's word.

What the kernel says about itself (the answer's "seconds" and "peak_bytes") is kept to be shown at most.

Not caught: a kernel that reuses memory it held before the call (a preallocated buffer, `out=`, or malloc told not
to give back what it frees, against the "stage" request) raises no peak; neither did tracemalloc see it.
"""
import os

from qkv import wire

from qkv_autograde.kernels.processes import KernelDied, process_tree


class CgroupPeak:
    """The memory of a kernel's processes together, from its cgroup (sandbox.KernelCgroup's memory folder)."""

    def __init__(self, folder):
        self.folder, self.fd = folder, None

    def _read(self, name):
        with open(os.path.join(self.folder, name)) as f:
            return int(f.read().split()[0])

    def reset_peak(self):
        """Reset the peak to the memory held now, which is returned; None if it cannot be reset (cgroup v2 before
        Linux 6.12)."""
        try:
            if os.path.exists(os.path.join(self.folder, "memory.max_usage_in_bytes")):  # v1: writing 0 resets it
                with open(os.path.join(self.folder, "memory.max_usage_in_bytes"), "w") as f:
                    f.write("0")
                return self._read("memory.usage_in_bytes")
            # v2: reset for the reads through the descriptor it is written to
            self.fd = os.open(os.path.join(self.folder, "memory.peak"), os.O_RDWR)
            os.write(self.fd, b"reset\n")
            return self._read("memory.current")
        except (OSError, ValueError, IndexError):
            self._close()
            return None

    def peak_bytes(self):
        try:
            if self.fd is not None:
                return int(os.pread(self.fd, 64, 0).split()[0])
            return self._read("memory.max_usage_in_bytes")
        except (OSError, ValueError, IndexError):
            return None
        finally:
            self._close()

    def _close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ProcessPeak:
    """The peak resident memory of a kernel's processes, each process's own, summed: where no memory cgroup could be
    made (the report names the isolation partial)."""

    def __init__(self, root):
        self.root = root

    def _sum(self, field):
        total = 0
        for pid in process_tree(self.root):
            try:
                with open(f"/proc/{pid}/status") as f:
                    total += next((int(line.split()[1]) for line in f if line.startswith(field)), 0) * 1024
            except (OSError, ValueError, IndexError):
                continue
        return total

    def reset_peak(self):
        for pid in process_tree(self.root):
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to VmRSS
            except OSError:
                return None
        return self._sum("VmRSS:")

    def peak_bytes(self):
        return self._sum("VmHWM:")


def meter(kernel):
    """What measures a StudentKernel's memory from outside it: its cgroup (a forked kernel's own, or its sandbox's),
    else its process tree's peak resident memory, else None."""
    km = getattr(kernel.client, "km", None)
    provisioner = getattr(km, "provisioner", None)
    for cgroup in (getattr(provisioner, "cgroup", None), getattr(getattr(km, "sandbox", None), "cgroup", None)):
        folder = getattr(cgroup, "folders", {}).get("memory")
        if folder:
            return CgroupPeak(folder)
    pid = getattr(provisioner, "pid", None)
    return ProcessPeak(pid) if pid else None


def measured_call(kernel, request, measure):
    """(the kernel's answer to the call `request`, the rise of its memory during the call in bytes or None).

    With measure, the arguments go ahead in a "stage" request, so that the measured window holds the call alone;
    the kernel is not asked to trace itself (tracemalloc's own tables would count in what is measured)."""
    found = meter(kernel) if measure else None
    start = None
    if found is not None:
        staged = kernel.request({"op": "stage", "args": request.pop("args"), "kwargs": request.pop("kwargs")})
        if not isinstance(staged.get("value"), str):
            raise KernelDied("the kernel did not keep the arguments of a call whose memory is measured")
        request["staged"] = staged["value"][:wire.NAME_CHARS]
        start = found.reset_peak()
    answer = kernel.request({**request, "measure": False})
    peak = found.peak_bytes() if start is not None else None
    return answer, (max(0, peak - start) if peak is not None else None)
