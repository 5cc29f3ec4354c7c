"""What a student kernel's cells may leave in the grader's notebook, bounded as each message arrives.

`BoundedOutputClient` is the nbclient that runs a submission's cells (student_kernel.StudentKernel drives it): it
caps what one cell may print, and during a call from a test it gives the kernel's answer a budget of its own, so a
print loop or a huge answer does not fill the grader's memory. `code_cell`, `note_output` and `error_output` are the
cells and outputs the grader writes itself (where a call's printed output lands, a replay, the note of a cell not run).
"""
import json
import time
from queue import Empty

import zmq

import nbformat
from jupyter_core.utils import ensure_async, run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete

from qkv import wire

TEXT_LIMIT = 20_000  # characters of printed text kept per test cell


def output_size(content):
    """Characters an output message adds (its text, data and traceback), counted without copying 40 MiB of it."""
    size = 0
    for key in ("text", "ename", "evalue"):
        size += len(content[key]) if isinstance(content.get(key), str) else 0
    data = content.get("data")
    for value in (data.values() if isinstance(data, dict) else ()):
        size += len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
    traceback = content.get("traceback")
    size += sum(len(str(line)) for line in traceback) if isinstance(traceback, list) else 0
    return size


class BoundedOutputClient(NotebookClient):
    """nbclient with a cap on what one cell may print, applied as each message arrives: a print loop must not fill
    the grader's memory.

    During a call from a test (`answer_chars` set) the kernel's answer comes in the request's reply, on the shell
    channel (qkv.wire.answer), apart from what the call prints, which comes on iopub: cutting the print, or
    losing the iopub connection to a message over the socket's limit (bounded_client.py), never drops the answer.
    The answer has a budget of its own (wire.REPLY_LIMITS): one past it is refused, and `answer_refused` says how
    big it was. An iopub connection dropped while a cell runs ends the wait for its output (the rest of it, and the
    kernel's idle status, went with the connection) instead of costing nbclient's iopub_timeout.

    Text printed to the same stream with nothing shown in between is one output, as JupyterLab shows it: how the
    kernel happened to cut it into messages depends on when it flushed, and would make two gradings of the same
    notebook give different feedback pages.
    """

    def __init__(self, nb, output_bytes, **kw):
        super().__init__(nb, **kw)
        self.output_bytes = output_bytes
        self.truncated_cells = set()
        self._sizes = {}
        self.answer_chars = None     # set by StudentKernel.request for the length of one call
        self.answer = None           # the call's answer (JSON text), from its reply (qkv.wire.REPLY_TYPE)
        self.answer_refused = None   # characters of an answer over answer_chars
        self.answer_failed = None    # why the kernel could not serve the request, in its words (bounded)
        self.call_truncated = False  # the call printed more than output_bytes

    def call(self, cell, cell_index, request, timeout):
        """Send one qkv.wire request and wait for its reply (take_reply) and for what it printed (in `cell`, as a
        cell's outputs): 'ok', 'timeout' (no reply within `timeout` seconds) or 'died'.

        A request is a message of its own (qkv.wire.answer answers it), and this waits for it without nbclient's
        asyncio machinery: the sockets are polled directly, which halves the grader's CPU per call. It is nbclient's
        protocol all the same: messages are signed and checked by the session, those of another request ignored,
        the kernel's life checked each second of silence, and the printed output awaited for at most iopub_timeout
        after the reply; each iopub message goes through nbclient's own process_message, so output() caps it."""
        kc = self.kc
        shell, iopub, poller = self._polled(kc)
        message = kc.session.msg(wire.REQUEST_TYPE, request)
        kc.session.send(shell, message)
        msg_id = message["header"]["msg_id"]
        cell.outputs = []
        self.clear_before_next_output = False
        deadline, reply, idle = time.monotonic() + timeout, None, False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                return "ok" if reply is not None else "timeout"  # after the reply, output late by iopub_timeout
            ready = dict(poller.poll(min(left, 1.0) * 1000))
            if not ready:
                if getattr(kc, "dropped", lambda channel: False)("iopub"):  # its idle status went with it
                    idle = True
                if reply is None and not run_sync(self.km.is_alive)():
                    return "died"
                continue
            if shell in ready:
                msg = _received(kc.session, shell)
                if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                    reply, deadline = msg, time.monotonic() + self.iopub_timeout
                    content = msg.get("content")
                    # a call that printed nothing sends no idle status (qkv.wire._reply): nothing to wait for
                    idle = idle or not (isinstance(content, dict) and content.get("printed") is True)
            if iopub in ready:
                msg = _received(kc.session, iopub)
                if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                    try:
                        self.process_message(msg, cell, cell_index)
                    except CellExecutionComplete:
                        idle = True
        self.take_reply(reply)
        return "ok"

    def _polled(self, kc):
        """The shell and iopub sockets of `kc`, read without an event loop (twins of its asyncio sockets), and a
        poller of both: made again only when a channel has a new socket (bounded_client.reconnect_refused)."""
        sockets = (kc.shell_channel.socket, kc.iopub_channel.socket)
        if getattr(self, "_polled_for", None) != sockets:
            shell, iopub = (zmq.Socket.shadow(socket.underlying) for socket in sockets)
            poller = zmq.Poller()
            poller.register(shell, zmq.POLLIN)
            poller.register(iopub, zmq.POLLIN)
            self._polled_for, self._polled_sockets = sockets, (shell, iopub, poller)
        return self._polled_sockets

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
        reply = await super()._async_poll_for_reply(msg_id, cell, timeout, task_poll_output_msg,
                                                    task_poll_kernel_alive)
        self.take_reply(reply)
        return reply

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        """nbclient's loop over the cell's iopub messages, which also ends when the iopub connection was dropped."""
        while True:
            try:
                msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=0.1))
            except Empty:
                if getattr(self.kc, "dropped", lambda channel: False)("iopub"):
                    return
                continue
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return

    def take_reply(self, reply):
        """During a call, its answer from the kernel's reply (qkv.wire.REPLY_TYPE), within answer_chars."""
        if self.answer_chars is None or not isinstance(reply, dict) or reply.get("msg_type") != wire.REPLY_TYPE:
            return
        entry = reply.get("content")
        if not isinstance(entry, dict):
            return
        answer, oversized, failed = entry.get("answer"), entry.get("oversized"), entry.get("failed")
        if isinstance(answer, str) and len(answer) <= self.answer_chars:
            self.answer = answer
        elif isinstance(answer, str):
            self.answer_refused = len(answer)
        elif isinstance(oversized, int) and not isinstance(oversized, bool) and oversized > 0:
            self.answer_refused = oversized
        elif isinstance(failed, str):
            self.answer_failed = failed[:500]
        elif answer is not None:
            self.answer_refused = len(json.dumps(answer, default=str))

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        data = content.get("data")
        if self.answer_chars is not None and isinstance(data, dict) and wire.MIME in data:
            return None  # a call's answer comes in its reply (take_reply): one sent as an output is not shown
        before = self._sizes.get(cell_index, 0)
        used = before + output_size(content)
        self._sizes[cell_index] = used
        if used > self.output_bytes and before < self.output_bytes and isinstance(content.get("text"), str):
            # the start of a long print is kept, up to the cap
            msg = {**msg, "content": {**content, "text": content["text"][:self.output_bytes - before]}}
            self._shown(outs, msg, display_id, cell_index)
        if used > self.output_bytes:
            if self.answer_chars is not None:
                self.call_truncated = True
            elif cell_index not in self.truncated_cells:
                self.truncated_cells.add(cell_index)
                outs.append(nbformat.v4.new_output(
                    "stream", name="stdout",
                    text=f"\n[output truncated by the grader: this cell printed more than "
                         f"{self.output_bytes // 1024} KiB]\n"))
            return None
        return self._shown(outs, msg, display_id, cell_index)

    def _shown(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if (out is not None and out.get("output_type") == "stream" and len(outs) >= 2 and outs[-1] is out
                and outs[-2].get("output_type") == "stream" and outs[-2].get("name") == out.get("name")):
            outs.pop()
            outs[-1]["text"] += out["text"]  # the same stream continued: one output, as a notebook shows it
            return outs[-1]
        return out

    def forget_output_size(self, cell_index):
        self._sizes.pop(cell_index, None)


def _received(session, socket):
    """The next message on `socket` (wire.signed_message: signature checked), or None if there is none or it cannot
    be read (a kernel that sends what its session would not is not listened to)."""
    try:
        _, frames = session.feed_identities(socket.recv_multipart(zmq.NOBLOCK))
        return wire.signed_message(session, frames)
    except (zmq.Again, ValueError, TypeError, KeyError, IndexError):
        return None


def code_cell(source):
    """A code cell of the grader's own (a call, a replay): nbformat's new_code_cell checks each one against the
    notebook schema, which was a tenth of a grading worker's CPU time with dozens of calls a submission."""
    return nbformat.from_dict({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                               "source": source})


def note_output(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text + "\n")


def error_output(name, message):
    return nbformat.v4.new_output("error", ename=name, evalue=message,
                                  traceback=[f"\x1b[0;31m{name}\x1b[0m: {message}"])
