"""Calling the student's function: on copies of the inputs, under the tamper guard and the reference tripwire,
every way it can go wrong turned into a Hint that points at the student's own line."""
import contextlib
import linecache
import re
import traceback

import numpy as np

from qkv.checking.guard import LIBRARY_DIR, PROFILER_OFF, assert_untampered, is_reference, no_reference_calls
from qkv.checking.hints import Hint, call_text, describe
from qkv.checking.keepdims import reduction_against_its_input
from qkv.checking.replay import NotInThisEdition


def _copy(value):
    return value.copy() if isinstance(value, np.ndarray) else value


def call(fn, *args, name=None, allowed=(), **kwargs):
    """Call a student's function on copies of the inputs; turn every way it can go wrong into a Hint.

    `allowed` lists qkv functions the exercise hands the student as tools (e.g. softmax in lesson 02).
    """
    name = name or getattr(fn, "__name__", "your function")
    # The tamper check and the tripwire guard this process against the student's code running in it. The grader's
    # stand-in for a function in the sandboxed kernel (qkv_autograde.kernels.student_kernel.RemoteFunction) runs that
    # code elsewhere, where the references are withheld: here the tripwire would only time the grader's own messaging.
    elsewhere = getattr(type(fn), "runs_in_another_process", False) is True
    if not elsewhere:
        assert_untampered()
    if not callable(fn):
        raise Hint(f"`{name}` should be a function, but it is {describe(fn)}.")
    if is_reference(fn):
        raise Hint(f"`{name}` is qkv's reference implementation, not yours: define `{name}` in this "
                   f"notebook and make sure no later cell imports the library's version over it.")
    shown = call_text(name, args, kwargs)
    args = tuple(_copy(a) for a in args)
    kwargs = {k: _copy(v) for k, v in kwargs.items()}
    handed_over = [a for a in (*args, *kwargs.values()) if callable(a)]
    try:
        with contextlib.nullcontext([]) if elsewhere else no_reference_calls((*allowed, *handed_over)) as offenders:
            result = fn(*args, **kwargs)
    except NotImplementedError:
        raise Hint(f"`{name}` is not written yet: replace `raise NotImplementedError()` with your code.") from None
    except Hint:
        raise
    except Exception as error:
        # in the student edition, qkv's withheld reference raises NotInThisEdition on the student's own input: that
        # is a call into the reference, said below as the full library says it
        if not (offenders and isinstance(error, NotInThisEdition)):
            raise Hint(f"{shown} raised {type(error).__name__}: {error}{where(error)}{likely_cause(error)}") from error
    if offenders:
        if PROFILER_OFF in offenders:
            raise Hint(f"{shown} switched off the profiler that checks it does not call qkv's reference; "
                       f"leave sys.setprofile alone.")
        used = ", ".join(sorted({name.replace("<lambda>", "a helper") for name in offenders}))
        raise Hint(f"{shown} calls qkv's reference `{used}`; the exercise is to compute it yourself "
                   f"with numpy.")
    return result


# ---------------------------------------------------------------- the student's line in a traceback

def _own_frame(error):
    """The innermost frame of the student's own code in the error's traceback (not qkv's nor a library's), or None."""
    own = [frame for frame in traceback.extract_tb(error.__traceback__)
           if not frame.filename.startswith(LIBRARY_DIR) and "site-packages" not in frame.filename]
    return own[-1] if own else None


def _line_of(frame):
    return frame.line or linecache.getline(frame.filename, frame.lineno)


def where(error):
    """' (in your code, line 4: `return x @ k`)' for the innermost frame of the student's own code, or ''."""
    if hasattr(error, "where_in_student_code"):  # raised in the student's kernel, located there (qkv.wire)
        return error.where_in_student_code
    frame = _own_frame(error)
    line = _line_of(frame).strip() if frame else ""
    return f" (in your code, line {frame.lineno}: `{line}`)" if line else ""


def _failing_source(error):
    """(the student's failing line, the lines of their code before it) as text, or ("", [])."""
    located = getattr(error, "where_in_student_code", None)
    if located is not None:  # raised in the student's kernel: only the line travelled with it
        found = re.search(r"`(.*)`\)?\s*$", located)
        return (found.group(1) if found else ""), []
    frame = _own_frame(error)
    if frame is None:
        return "", []
    return _line_of(frame), linecache.getlines(frame.filename)[max(0, frame.lineno - 31):frame.lineno - 1]


def likely_cause(error):
    """The keepdims advice, only when the failing line broadcasts a reduction over an axis (without
    keepdims) against that reduction's own input: `x - x.max(axis=1)`, or `x - m` after `m = x.max(axis=1)`."""
    if isinstance(error, ValueError) and "could not be broadcast" in str(error):
        line, earlier = _failing_source(error)
        if line and reduction_against_its_input(line, earlier):
            return (". A sum or max over an axis drops that axis; keepdims=True keeps it so the result "
                    "broadcasts back against the input")
    return ""
