"""The words of a failed check: `Hint`, and how a call and the values in it are named for a student."""
import numpy as np


class Hint(AssertionError):
    """A failed check, phrased for the student."""


def describe(value):
    if isinstance(value, np.ndarray):
        return f"array{tuple(value.shape)} {value.dtype}"
    if isinstance(value, (list, tuple)) and (len(value) > 6
                                             or any(isinstance(v, (np.ndarray, list, tuple)) for v in value)):
        inner = ", ".join(describe(v) for v in value) if len(value) <= 4 else f"{len(value)} items"
        return f"{type(value).__name__} of {inner}"
    if callable(value):
        return getattr(value, "__name__", "function")
    return repr(value)


def call_text(name, args=(), kwargs=None):
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"
