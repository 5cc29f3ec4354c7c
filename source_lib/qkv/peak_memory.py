"""Peak memory, measured one way for all of qkv: what tracemalloc books beyond what was allocated when it began.

A leaf module (it imports nothing of qkv) so that the checks (`qkv.checking.call_with_peak_memory`), lesson 07's
probe (`qkv.cost`) and the kernel's side of the wire can all use it without importing each other.
"""
import contextlib
import tracemalloc
import types


@contextlib.contextmanager
def traced_peak():
    """Yields a namespace whose `bytes` is, after the body, the peak the body allocated beyond what was allocated
    before it (tracemalloc only books allocations, so numpy's arithmetic runs at full speed). Tracing is
    switched on for the body and back off after it unless it was already on."""
    measured = types.SimpleNamespace(bytes=0)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        yield measured
        measured.bytes = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
