"""Peak memory of a student's call: measured by `qkv.peak_memory.traced_peak` in the student's own notebook, by the
grader from outside the kernel at grading time (the kernel's word is never graded: issue 34)."""
from qkv.checking.calling import call
from qkv.peak_memory import traced_peak


def call_with_peak_memory(fn, *args, **kwargs):
    """(result, peak bytes): `call(fn, ...)` traced by tracemalloc, the peak counted from just before the call
    (so it includes the copies of the inputs that `call` hands over, and everything numpy allocates inside)."""
    if measured_by_grader(fn):  # a student's function in a sandboxed kernel, measured by the grader
        fn.measure_memory = True  # from outside the kernel: the rise of its cgroup's memory during the call
        try:
            result = call(fn, *args, **kwargs)
        finally:
            fn.measure_memory = False
        if fn.peak_memory_of_last_call is None:  # never the kernel's own word (issue 34): no verdict without it
            raise RuntimeError("the grader could not measure this call's memory from outside your kernel (no memory "
                               "cgroup on the grading machine); the instructor will regrade it")
        return result, fn.peak_memory_of_last_call
    with traced_peak() as peak:
        result = call(fn, *args, **kwargs)
    return result, peak.bytes


def measured_by_grader(fn):
    """True for a student's function that runs in a sandboxed kernel at grading time (autograde's RemoteFunction):
    `call_with_peak_memory` then gives the grader's measurement of the kernel's memory, not tracemalloc's."""
    return hasattr(fn, "peak_memory_of_last_call")
