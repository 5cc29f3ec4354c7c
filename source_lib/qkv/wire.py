"""Plain data across the grading boundary: how the grader calls a student's function in a sandboxed kernel.

Threat model: the student's kernel is hostile, so every reply may be hand-written JSON of any size, depth and content.
A reply decodes in the grader only to data (numbers, strings, numeric arrays, containers, the REPLY_TYPES built from
checked fields) and to handles; it never names a function, module or class to resolve, and its size is bounded.

During autograding the test cells run in the grader's own process; the student's functions stay in the
student's kernel. Each kernel runs `listen` once, and then answers the grader's requests, each a shell message of
its own type (REQUEST_TYPE), never a cell: IPython hashes, transforms, parses and echoes a cell's source in pure
Python, which cost about 0.6 CPU-s per MiB of arguments, and its cell machinery two thirds of a call's CPU in the
kernel. The kernel calls the function and answers with plain data: JSON with numpy arrays as raw bytes, tuples and
dicts. Nothing is ever unpickled.

The two directions are decoded differently. A request (grader -> kernel, `decode`) may also carry what the tests
hand a student's function: qkv's module-level functions and value types by name, partials of them, a random
generator at its exact state. A reply (kernel -> grader, `parse_answer` then `decode_reply`) carries data and
handles only, read under `REPLY_LIMITS`; anything else raises `ReplyRefused`, which the grader reports by name.

This module is the student's side of the boundary and has no secrets: reading it tells a student nothing
about the tests.
"""
import contextlib
import json
import math
import time
import tracemalloc

import numpy as np

from qkv.peak_memory import traced_peak
from qkv.wire_codec import (  # noqa: F401 (the public names every caller reads as qkv.wire.<name>)
    ERROR_CHARS, HANDLE_ID, MIME, NAME_CHARS, REPLY_LIMITS, REPLY_TYPES, Limits, MalformedReply, OversizedReply,
    ReplyRefused, WireError, decode, decode_reply, encode, handle_plain, plain, request_value)
from qkv.wire_messages import (  # noqa: F401 (as above)
    REPLY_TYPE, REQUEST_TYPE, own_request, shell_socket, signed_message, writes_counted)

_handles = {}  # handle id -> object the grader may call again (a function a student's function returned)
_staged = {}   # staged id -> (args, kwargs) the grader sent ahead of a call whose memory it measures


# ---------------------------------------------------------------- the grader's side: one answer, bounded

_BRACKETS = np.zeros(256, np.int8)
_BRACKETS[[ord("["), ord("{")]], _BRACKETS[[ord("]"), ord("}")]] = 1, -1
_QUOTE = ord('"')
_SCAN_CHUNK = 1 << 22  # characters scanned at a time: a few MiB of temporaries however long the answer


def nesting_depth(text):
    """The deepest nesting of brackets in JSON text, brackets inside strings skipped: measured before json.loads,
    which recurses. Escaped backslashes and quotes are dropped first, so every quote left opens or closes a string."""
    if text.count("[") + text.count("{") <= 1:
        return text.count("[") + text.count("{")
    clean = text.replace("\\\\", "").replace('\\"', "")
    inside, depth, deepest = 0, 0, 0
    for start in range(0, len(clean), _SCAN_CHUNK):
        chunk = np.frombuffer(clean[start:start + _SCAN_CHUNK].encode("ascii", "ignore"), np.uint8)
        quotes = chunk == _QUOTE
        at = np.flatnonzero(_BRACKETS[chunk])
        outside = (np.cumsum(quotes, dtype=np.int64)[at] + inside) % 2 == 0
        steps = _BRACKETS[chunk[at[outside]]].astype(np.int64)
        if steps.size:
            levels = depth + np.cumsum(steps)
            deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
        inside = (inside + int(np.count_nonzero(quotes))) % 2
    return deepest


def parse_answer(text, limits=REPLY_LIMITS):
    """The kernel's answer to one request (the grader's side), its size and depth bounded before it is parsed:
    {"value": plain, "seconds": s, "peak_bytes": n or None}, {"error": description} or {"missing": name}."""
    if not isinstance(text, str):
        raise MalformedReply(f"the answer is a {type(text).__name__}, not JSON text")
    if len(text) > limits.text_chars:
        raise OversizedReply(f"an answer of {len(text) >> 20} MiB (at most {limits.text_chars >> 20} MiB)")
    if text.count("[") + text.count("{") > limits.depth and nesting_depth(text) > limits.depth + 2:
        # (+ 2: the answer itself and its value; fewer brackets than the limit cannot nest deeper than it)
        raise OversizedReply(f"an answer nested deeper than {limits.depth} levels")
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        raise MalformedReply("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise MalformedReply("the answer is not a JSON object")
    if set(answer) == {"missing"} and isinstance(answer["missing"], str) and len(answer["missing"]) <= NAME_CHARS:
        return answer
    if set(answer) == {"error"}:
        return {"error": _checked_error(answer["error"])}
    if set(answer) == {"value"} or set(answer) == {"value", "seconds", "peak_bytes"}:
        seconds, peak = answer.get("seconds"), answer.get("peak_bytes")
        if not (seconds is None or (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                                    and math.isfinite(seconds) and seconds >= 0)):
            raise MalformedReply("the answer's seconds must be a finite number")
        if not (peak is None or (isinstance(peak, int) and not isinstance(peak, bool) and peak >= 0)):
            raise MalformedReply("the answer's peak_bytes must be a whole number")
        return answer
    raise MalformedReply(f"the answer has the entries {sorted(map(str, answer))[:5]}; expected value, error or missing")


def _checked_error(description):
    if not (isinstance(description, dict) and set(description) == {*ERROR_CHARS, "builtin"}
            and isinstance(description["builtin"], bool)
            and all(isinstance(description[k], str) and len(description[k]) <= n for k, n in ERROR_CHARS.items())):
        raise MalformedReply("the description of the student's exception is not type, message, where and builtin, "
                             "each of bounded length")
    return description



# ---------------------------------------------------------------- the kernel's side

# Run once in each kernel, silently, before the notebook's cells (StudentKernel.start): the kernel's dispatch of shell
# messages is wrapped so that `answer` sees each request first. It imports nothing of qkv until a request comes (the
# edition probe's kernel imports a qkv of its own first) and leaves no name in the notebook's globals.
LISTEN_SOURCE = f"""
def _qkv_wire_listen(kernel):
    dispatch = kernel.dispatch_shell

    async def dispatch_shell(msg, /, subshell_id=None, *, concurrent=False):
        if subshell_id is None and not concurrent:
            try:
                header = kernel.session.feed_identities(msg, copy=False)[1][1]
                ours = {REQUEST_TYPE.encode()!r} in (header if isinstance(header, bytes) else header.bytes)
            except Exception:
                ours = False
            if ours and __import__("qkv.wire", fromlist=["answer"]).answer(kernel, msg):
                return
        return await dispatch(msg, subshell_id=subshell_id, concurrent=concurrent)

    kernel.dispatch_shell = dispatch_shell


_qkv_wire_listen(get_ipython().kernel)
del _qkv_wire_listen
"""


def answer(kernel, msg):
    """Answer the grader's request in `msg` (the raw frames of a shell message), if it is one (else False, and
    ipykernel dispatches it): at once, not as a cell. IPython's cell machinery (transforming, compiling and hashing
    a source, its hooks, an execute request's flushes) was two thirds of a call's CPU in the kernel, and ipykernel's
    busy and idle status and stream flushes around any shell request most of the rest (issue 45).

    request: {"op": "call", "target": name or handle id, "args": [...], "kwargs": {...}, "measure": bool}
          or {"op": "call", "target": ..., "staged": id}: the arguments a "stage" request sent ahead;
          or {"op": "stage", "args": [...], "kwargs": {...}}: decode them and keep them for one call (answers its id),
             then hand the memory freed so far back to the system, so that the grader, which measures the call's
             memory from outside this kernel (its cgroup's peak, reset after this answer), sees what the call itself
             allocates, not what decoding the arguments took or what earlier calls left in malloc's free lists;
          or {"op": "get", "name": name}: a global of the notebook, as plain data or a handle.
    What this kernel measures of itself ("seconds", and "peak_bytes" with measure) is shown at most, never graded.

    The answer travels in the reply (REPLY_TYPE, {"answer": JSON text}), on the shell channel: never with what the
    call printed, which goes out on iopub as a cell's prints do, and may be cut there. A function that prints 40 MiB
    a call has its print refused by the grader's socket, and its answer still arrives. An answer longer than the
    grader accepts (REPLY_LIMITS.text_chars) is not sent: its length is ({"oversized": n}), so that it is refused by
    name rather than dropped unread; a request that could not be served at all is answered {"failed": why}. What the
    call prints is cut here too, past the request's "printed_chars" (the grader's cap, which it keeps either way):
    such a function does not spend its time sending text the grader drops. The reply's "printed" says whether the
    call wrote to sys.stdout or sys.stderr: only then are they flushed and an idle status sent after them, which the
    grader waits for.
    """
    found = own_request(kernel.session, msg)
    if found is None:
        return False
    idents, request = found
    _quiet_log(kernel)
    kernel.set_parent(idents, request, channel="shell")  # what the call prints goes out as the request's
    with writes_counted() as writes:
        try:
            entry = _serve(request["content"], kernel.shell)
        except BaseException as error:  # whatever happens, the grader gets an answer and the kernel goes on
            entry = {"failed": _text_of(error)[:500]}
    printed = writes[0] > 0
    if printed:
        import sys

        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    kernel.session.send(shell_socket(kernel), REPLY_TYPE, {"status": "ok", "printed": printed, **entry}, request,
                        ident=idents)
    if printed:
        kernel._publish_status("idle", "shell", request)
    return True


def _quiet_log(kernel):
    """The kernel's log at WARNING: its one handler shows warnings and worse, and at DEBUG, as ipykernel leaves it,
    each message made (and dropped) four debug records."""
    import logging

    if kernel.log.getEffectiveLevel() < logging.WARNING:
        kernel.log.setLevel(logging.WARNING)


def _serve(request, shell):
    with shell.builtin_trap, _printing_capped(request.get("printed_chars")):  # builtins as in a cell
        answer = _answer(request, shell.user_ns)
    _show_figures(shell)
    return {"answer": answer} if len(answer) <= REPLY_LIMITS.text_chars else {"oversized": len(answer)}


def _show_figures(shell):
    """The figures a call left open are shown and closed after it, as after a cell (the inline backend's
    post_execute hook): else they would show up in the notebook's next cell."""
    import sys

    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and pyplot.get_fignums():
        shell.events.trigger("post_execute")


def _text_of(error):
    try:
        return f"{type(error).__name__}: {error}"
    except BaseException:
        return type(error).__name__


class _CappedStream:
    """sys.stdout or sys.stderr during a call: passes on what is printed while the budget it shares with the other
    lasts, then drops the rest; the budget is one character over the grader's cap, so the grader sees the cap passed
    and names the cut (`output truncated`)."""

    def __init__(self, stream, budget):
        self._stream, self._budget = stream, budget

    def write(self, text):
        if not isinstance(text, str):
            return self._stream.write(text)  # the stream's own error
        if self._budget[0] > 0:
            self._stream.write(text[:self._budget[0]])
        self._budget[0] -= min(len(text), max(self._budget[0], 0))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _printing_capped(chars):
    if not isinstance(chars, int) or isinstance(chars, bool) or chars < 0:
        yield
        return
    import sys

    budget = [chars + 1]
    with (contextlib.redirect_stdout(_CappedStream(sys.stdout, budget)),
          contextlib.redirect_stderr(_CappedStream(sys.stderr, budget))):
        yield


def _keep(obj):
    key = f"h{len(_handles)}"
    _handles[key] = obj
    return key


def _answer(request, namespace):
    if request["op"] == "get":
        name = request["name"]
        if name not in namespace:
            return json.dumps({"missing": name})
        return _value_answer(namespace[name])
    if request["op"] == "stage":
        key = f"s{len(_staged)}"
        _staged[key] = request_value(request["args"]), request_value(request["kwargs"])
        request.clear()  # the arguments' JSON is freed now, not after the measured call
        _release_free_memory()
        return json.dumps({"value": key})
    target = request["target"]
    fn = _handles.get(target) if target.startswith("h") and target in _handles else namespace.get(target)
    if fn is None:
        return json.dumps({"missing": target})
    measuring = traced_peak() if request.get("measure") else contextlib.nullcontext()
    with measuring as measured:  # from before the inputs exist, as a local measurement counts their copies
        if "staged" in request:
            if request["staged"] not in _staged:
                return json.dumps({"missing": str(request["staged"])[:NAME_CHARS]})
            args, kwargs = _staged.pop(request["staged"])
        else:
            args, kwargs = request_value(request["args"]), request_value(request["kwargs"])
        started = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:  # a student's SystemExit or KeyboardInterrupt is their answer too
            return json.dumps({"error": _describe_error(error)})
        finally:
            seconds = time.perf_counter() - started
            measured_all_of_it = tracemalloc.is_tracing()  # False if the student's code stopped tracing
    peak = measured.bytes if measured is not None and measured_all_of_it else None
    return _value_answer(result, seconds=seconds, peak_bytes=peak)


def _release_free_memory():
    """Collect garbage and return malloc's free memory to the system (glibc's malloc_trim): numpy's large arrays,
    once freed, stay in the heap, and a later call reusing them would raise no measured peak."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _value_answer(value, **measured):
    """The answer {"value": plain, ...measured} as JSON text, written once."""
    try:
        return json.dumps({"value": plain(value, keep=_keep), **measured})
    except RecursionError:  # a container that holds itself travels as a stand-in
        return json.dumps({"value": handle_plain(value, _keep), **measured})


def _describe_error(error):
    from qkv.checking import where  # the same "(in your code, line N: ...)" a local check prints

    def cut(text, limit):
        return text if len(text) <= limit else text[:limit - 20] + " [... cut by qkv]"

    try:
        message = str(error)
    except Exception:  # an exception whose __str__ fails still gets a description
        message = "(its message could not be printed)"
    return {"type": cut(type(error).__name__, ERROR_CHARS["type"]), "message": cut(message, ERROR_CHARS["message"]),
            "where": cut(where(error), ERROR_CHARS["where"]), "builtin": type(error).__module__ == "builtins"}
