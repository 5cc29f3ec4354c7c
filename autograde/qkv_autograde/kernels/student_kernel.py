"""One submission's kernel as the grader drives it: cells run under a wall-clock budget, calls come back as plain data.

`StudentKernel` runs the notebook's own cells in the sandboxed kernel, one budget for the whole notebook (and a
per-cell cap, so one runaway cell does not eat the rest). A cell that times out or kills its kernel costs only
itself: the kernel is restarted and the cells that had run are run again, so later tests still see the
student's functions. `RemoteFunction` is what a test receives in place of a student's function: calling it
sends the arguments through qkv.wire and returns the decoded answer, or raises an exception that carries the
student's own type name, message and line. The cells run through bounded_output.BoundedOutputClient, which caps
what a cell prints and a call answers as each message arrives.
"""
import builtins
import os
import signal
import subprocess
import time

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from qkv import wire

from qkv_autograde.kernels import kernel_memory
from qkv_autograde.kernels.processes import KernelDied, process_tree, process_tree_cpu_seconds  # noqa: F401 - named here too
from qkv_autograde.kernels.bounded_client import MESSAGE_BYTES
from qkv_autograde.kernels.bounded_output import (TEXT_LIMIT, BoundedOutputClient, code_cell, error_output,
                                                 note_output)


class StudentException(Exception):
    """An exception raised by student code in the kernel, re-created here under the student's type name."""


# the builtin exceptions a student's error may be re-created as, looked up in this table (never by getattr)
BUILTIN_EXCEPTIONS = {name: kind for name, kind in vars(builtins).items()
                      if isinstance(kind, type) and issubclass(kind, Exception)}
STUDENT_TYPES_KEPT = 256  # classes made for the students' own exception names; past that, their name is in the message
_student_types = {}


def student_exception(description):
    """The exception to raise in the grader for an error the student's code raised in the kernel (a description
    wire.parse_answer has checked: bounded strings)."""
    name = str(description.get("type", "Exception"))[:wire.ERROR_CHARS["type"]]
    message = str(description.get("message", ""))[:wire.ERROR_CHARS["message"]]
    builtin = BUILTIN_EXCEPTIONS.get(name) if description.get("builtin") is True else None
    if builtin is not None:
        try:
            error = builtin(message)
        except Exception:
            error = StudentException(message)
    elif not name.isidentifier():
        error = StudentException(message)
    elif name in _student_types or len(_student_types) < STUDENT_TYPES_KEPT:
        error = _student_types.setdefault(name, type(name, (StudentException,), {}))(message)
    else:
        error = StudentException(f"{name}: {message}")
    error.where_in_student_code = str(description.get("where", ""))[:wire.ERROR_CHARS["where"]]
    return error


class StudentKernel:
    """The sandboxed kernel of one submission, with its budget, its restarts and what it has run."""

    RPC_INDEX = -1  # where a call's printed output is filed: calls are not cells of the notebook

    def __init__(self, make_kernel_manager, budget_seconds=600, cell_seconds=300, call_seconds=60,
                 output_bytes=1 << 20, call_output_bytes=64 << 10, startup_seconds=120, log=None, preamble=""):
        self.make_kernel_manager = make_kernel_manager
        self.preamble = preamble    # grader's set-up run in every fresh kernel before the notebook's cells
        self.deadline = time.monotonic() + budget_seconds
        self.budget_seconds = budget_seconds
        self.cell_seconds, self.call_seconds, self.startup_seconds = cell_seconds, call_seconds, startup_seconds
        # what one call may print (more is dropped as it arrives: a test cell shows TEXT_LIMIT characters anyway)
        self.output_bytes, self.call_output_bytes = output_bytes, call_output_bytes
        self.log = log
        self.events = []            # (anomaly name, detail) for the report
        self.ran = []               # sources of the notebook cells that ran to the end, for replays
        self.client = None
        self.generation = 0         # bumped at each restart: handles from an older kernel are gone
        self.kernel_cpu_seconds = 0.0  # the sandbox's processes are not our waited-for children: counted by hand
        self.refused_replies = 0    # answers wire refused: a test cell that received one fails (verdicts.py)

    # ------------------------------------------------------------ life cycle

    class FailedToStart(RuntimeError):
        """No kernel could be started for this submission, after every attempt."""

    START_ATTEMPTS = 3  # a kernel that dies or stays silent at start is tried again, with a longer deadline

    def start(self):
        failures = []
        for attempt in range(self.START_ATTEMPTS):
            km = self.make_kernel_manager()
            self.client = BoundedOutputClient(nbformat.v4.new_notebook(), self.output_bytes, km=km,
                                              timeout=self.cell_seconds,
                                              startup_timeout=int(self.startup_seconds * (1 + attempt / 2)),
                                              allow_errors=True, interrupt_on_timeout=False, iopub_timeout=10,
                                              record_timing=False, shutdown_kernel="immediate")
            try:
                # what the kernel writes to its own stdout/stderr (banners, os.write(1, ...)) is not the grader's
                self.client.start_new_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.client.start_new_kernel_client()
                break
            except Exception as error:  # no student code has run yet: the machine, not the submission
                failures.append(f"attempt {attempt + 1}: {type(error).__name__}: {error}")
                if self.log:
                    self.log.warning("kernel failed to start (%s)", failures[-1])
                self.close()
        else:
            raise self.FailedToStart("; ".join(failures))
        # the kernel answers the grader's requests from now on (qkv.wire.LISTEN_SOURCE, qkv.wire.answer); run
        # silently, so that the notebook's cells keep their numbers
        self.client.kc.silent_next_cell = True
        self._execute(code_cell(wire.LISTEN_SOURCE), self.RPC_INDEX, self.cell_seconds, store_history=False)
        if self.preamble:
            self._execute(code_cell(self.preamble), self.RPC_INDEX, self.cell_seconds, store_history=False)

    def close(self):
        if self.client is None:
            return
        provisioner = getattr(self.client.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)  # None for a kernel forked from a template (forked_kernels.py)
        if pid:
            self.kernel_cpu_seconds += process_tree_cpu_seconds(pid)
        try:
            self.client._cleanup_kernel()
        except Exception:
            pass
        if hasattr(provisioner, "cpu_seconds"):  # reported by the template once the kernel has been reaped
            self.kernel_cpu_seconds += provisioner.cpu_seconds()
        if pid:  # the kernel's process group: whatever it started dies with it (rlimits mode has no PID namespace)
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        self.client = None

    def restart(self, reason):
        """A fresh kernel with the cells that had run replayed; a replayed cell that hangs again is dropped."""
        self.events.append(("kernel restarted", reason))
        pending = list(self.ran)
        while True:
            self.close()
            self.generation += 1
            self.start()
            replayed = []
            for source in pending:
                status, _ = self._execute(code_cell(source), self.RPC_INDEX, self.cell_seconds,
                                         store_history=False)
                if status in ("timeout", "died"):
                    pending.remove(source)
                    break
                if status == "budget":
                    break
                if status in ("ok", "error"):
                    replayed.append(source)
            else:
                self.ran = replayed
                return
            if status == "budget":
                self.ran = replayed
                return

    def remaining(self):
        return self.deadline - time.monotonic()

    # ------------------------------------------------------------ running the notebook's cells

    def run_cell(self, cell, index):
        """Run one of the notebook's cells; returns 'ok', 'error', 'timeout', 'died' or 'budget'."""
        if self.remaining() <= 0:
            cell.outputs = [note_output(f"Not run: the notebook used its whole grading time budget "
                                        f"({self.budget_seconds:.0f} s).")]
            return "budget"
        status, limit = self._execute(cell, index, self.cell_seconds)
        if status in ("ok", "error"):  # a cell that raised still defined what came before the error
            self.ran.append(cell.source)
        elif status == "timeout":
            cell.outputs.append(error_output("TimeoutError", f"this cell did not finish within {limit:.0f} s; the "
                                             f"grader stopped it, restarted the kernel and re-ran your earlier cells"))
            self.events.append(("timeout", f"cell {index} stopped after {limit:.0f} s"))
            self.restart(f"after the timeout in cell {index}")
        elif status == "died":
            cell.outputs.append(error_output("KernelDied", "the kernel died while running this cell (the memory "
                                             "limit, os._exit or a crash); the grader restarted it and re-ran your "
                                             "earlier cells"))
            self.events.append(("kernel died", f"in cell {index}"))
            self.restart(f"after it died in cell {index}")
        return status

    def _execute(self, cell, index, cap, store_history=True, request=None):
        """Run `cell`, or send the wire `request` (its printed output lands in `cell`): (status, the time limit)."""
        limit = max(0.0, min(cap, self.remaining()))
        if limit <= 0:
            return "budget", limit
        self.client.timeout = max(1, int(limit))  # nbclient's timeout is a whole number of seconds
        self.client.forget_output_size(index)
        slots = self.client.nb["cells"]  # nbclient writes each cell back into its own notebook by index
        while len(slots) <= max(index, 0):
            slots.append(code_cell(""))
        try:
            if request is not None:
                status = self.client.call(cell, index, request, self.client.timeout)
                if status != "ok":
                    return status, limit
            else:
                self.client.execute_cell(cell, index, store_history=store_history)
        except CellTimeoutError:
            return "timeout", limit
        except DeadKernelError:
            return "died", limit
        except Exception as error:  # a kernel that stops answering the protocol counts as dead
            if self.log:
                self.log.warning("kernel failed while running a cell: %s", error)
            return "died", limit
        finally:
            self._note_refused_messages(index)
        failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        return ("error" if failed else "ok"), limit

    # ------------------------------------------------------------ calls from the grader

    def request(self, payload):
        """Send one qkv.wire request; the decoded answer dict, or raise TimeoutError / KernelDied."""
        scratch = code_cell(wire.REQUEST_TYPE)  # where its printed output lands; the request is sent in its place
        what = (f"a call to {str(payload.get('target'))[:wire.NAME_CHARS]}" if payload.get("op") == "call"
                else f"reading {str(payload.get('name'))[:wire.NAME_CHARS]}")
        client = self.client
        previous = client.output_bytes
        client.output_bytes, client.answer_chars = self.call_output_bytes, wire.REPLY_LIMITS.text_chars
        client.answer = client.answer_refused = client.answer_failed = None
        client.call_truncated = False
        # the kernel cuts what the call prints at the cap too (qkv.wire.answer), which the client keeps whatever the
        # kernel does
        try:
            status, limit = self._execute(scratch, self.RPC_INDEX, self.call_seconds,
                                          request={**payload, "printed_chars": self.call_output_bytes})
        finally:
            client.output_bytes, client.answer_chars = previous, None
        if status == "budget":
            raise TimeoutError(f"not run: the notebook used its whole grading time budget "
                               f"({self.budget_seconds:.0f} s)")
        if status == "timeout":
            self.events.append(("timeout", f"{what} stopped after {limit:.0f} s"))
            self.restart("after a call that did not return")
            raise TimeoutError(f"did not return within {limit:.0f} s; the grader stopped it and restarted the kernel")
        if status == "died":
            self.events.append(("kernel died", f"during {what}"))
            self.restart("after it died during a call")
            raise KernelDied("the kernel died during this call (the memory limit, os._exit or a crash); "
                             "the grader restarted it")
        printed = "".join(o.get("text", "") for o in scratch.outputs if o.get("output_type") == "stream")
        if client.call_truncated:
            limit = f"{self.call_output_bytes // 1024} KiB"
            self._note_event("output truncated", f"{what} printed more than {limit}; the rest was dropped")
            printed += f"\n[output truncated by the grader: this call printed more than {limit}]\n"
        if client.answer_refused is not None:
            raise self._refused(wire.OversizedReply(f"an answer of {client.answer_refused >> 20} MiB (at most "
                                                    f"{wire.REPLY_LIMITS.text_chars >> 20} MiB), dropped on arrival"),
                                what)
        if client.answer is None:  # it comes in the request's reply (bounded_output.take_reply)
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in scratch.outputs
                      if o.get("output_type") == "error"] + [client.answer_failed or ""]
            errors = [e for e in errors if e]
            raise KernelDied("the kernel did not answer the grader's call"
                             + (f" ({errors[-1][:500]})" if errors else "")
                             + "; was qkv or IPython changed by the notebook?")
        try:
            answer = wire.parse_answer(client.answer)
        except wire.ReplyRefused as error:
            raise self._refused(error, what) from None
        answer["printed"] = printed
        answer["what"] = what
        return answer

    def decode(self, plain, what="a reply"):
        """The value of an answer: data and stand-ins only (wire.decode_reply); a refused one is named and raised."""
        generation = self.generation
        try:
            return wire.decode_reply(plain, lambda handle: _stand_in(self, handle, generation))
        except wire.ReplyRefused as error:
            raise self._refused(error, what) from None

    def _refused(self, error, what):
        """Count and name a refused answer for the report; the error, for the caller to raise."""
        self.refused_replies += 1
        self._note_event(error.anomaly, f"{what}: {error}")
        return error

    def _note_refused_messages(self, index):
        """Name the messages the grader's sockets refused as too large (bounded_client.py) while a cell or call ran."""
        kernel_client = getattr(self.client, "kc", None)
        resets = kernel_client.reconnect_refused() if hasattr(kernel_client, "reconnect_refused") else 0
        if resets:
            if self.client.answer_chars is not None:  # during a call: its printed text says it was cut
                self.client.call_truncated = True
            where = "a call from a test" if index == self.RPC_INDEX else f"cell {index}"
            self._note_event("output truncated", f"{where} sent a message over {MESSAGE_BYTES >> 20} MiB (a print "
                                                 f"that long, or an answer): the grader dropped it unread")

    def _note_event(self, name, detail):
        if (name, detail) not in self.events:  # a loop of calls printing or answering the same way: one entry
            self.events.append((name, detail))

    def get(self, name):
        """A global of the notebook: plain data, a RemoteFunction, a RemoteObject, or KeyError if undefined."""
        answer = self.request({"op": "get", "name": name})
        if "missing" in answer:
            raise KeyError(name)
        return self.decode(answer["value"], answer["what"])


def _stand_in(kernel, handle, generation):
    if handle.get("callable"):
        return RemoteFunction(kernel, handle["__handle__"], handle.get("name", "function"), handle.get("module"),
                              generation)
    return RemoteObject(handle.get("type", "object"))


class RemoteObject:
    """Something a student's code produced that is not plain data: only its type name crosses the boundary."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} object>"


class RemoteFunction:
    """A student's function, callable from the grader: arguments go in as plain data, answers come back as plain
    data."""

    def __init__(self, kernel, target, name, module=None, generation=None):
        self._kernel, self._target = kernel, target
        self._generation = kernel.generation if generation is None else generation
        self.__name__ = self.__qualname__ = str(name)
        self.__module__ = module if isinstance(module, str) and module else "__main__"
        self.printed = ""  # at most TEXT_LIMIT characters, all a test cell shows
        self.printed_truncated = False
        self.last_call = {}

    def __repr__(self):
        return f"<your function {self.__name__}>"

    measure_memory = False  # set by qkv.checking.call_with_peak_memory around one call
    runs_in_another_process = True  # qkv.checking.call: no tamper check or tripwire needed in the grader

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs, measure=self.measure_memory)

    @property
    def peak_memory_of_last_call(self):
        """The grader's measurement of the last call made with measure=True (qkv.checking.call_with_peak_memory)."""
        return self.last_call.get("peak_bytes")

    def call(self, args, kwargs, measure=False):
        """The call; with measure=True, the rise of the kernel's memory during it as the grader measures it from
        outside the kernel (kernel_memory.measured_call), in self.last_call: never what the kernel says (issue 34)."""
        if self._target.startswith("h") and self._generation != self._kernel.generation:
            raise KernelDied(f"`{self.__name__}` was lost when the kernel restarted")
        answer, peak = kernel_memory.measured_call(self._kernel, {"op": "call", "target": self._target,
                                                                  "args": wire.plain(list(args)),
                                                                  "kwargs": wire.plain(dict(kwargs))},
                                                   measure)
        self.printed, cut = _capped(self.printed + answer.get("printed", ""), TEXT_LIMIT)
        self.printed_truncated |= cut
        if "missing" in answer:
            raise NameError(f"`{self.__name__}` is no longer defined in the notebook")
        self.last_call = {"peak_bytes": peak,  # the kernel's own figures, shown at most
                          "kernel_seconds": answer.get("seconds"), "kernel_peak_bytes": answer.get("peak_bytes")}
        if "error" in answer:
            raise student_exception(answer["error"])
        return self._kernel.decode(answer["value"], answer["what"])


def _capped(text, limit):
    """`text` cut to `limit` characters, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit], True)
