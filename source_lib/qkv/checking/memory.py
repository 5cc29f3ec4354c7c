"""Peak memory of a student's call, measured by `qkv.peak_memory.traced_peak` (the one way qkv measures it)."""
from qkv.checking.calling import call
from qkv.peak_memory import traced_peak


def call_with_peak_memory(fn, *args, **kwargs):
    """(result, peak bytes): `call(fn, ...)` traced by tracemalloc, the peak counted from just before the call
    (so it includes the copies of the inputs that `call` hands over, and everything numpy allocates inside)."""
    if hasattr(fn, "peak_memory_of_last_call"):  # a student's function in a sandboxed kernel: measured there
        fn.measure_memory = True
        try:
            result = call(fn, *args, **kwargs)
        finally:
            fn.measure_memory = False
        return result, fn.peak_memory_of_last_call
    with traced_peak() as peak:
        result = call(fn, *args, **kwargs)
    return result, peak.bytes
