"""What a student kernel's cells may leave in the grader's notebook, bounded as each message arrives.

`BoundedOutputClient` is the nbclient that runs a submission's cells (student_kernel.StudentKernel drives it): it
caps what one cell may print, and during a call from a test it gives the kernel's answer a budget of its own, so a
print loop or a huge answer does not fill the grader's memory. `code_cell`, `note_output` and `error_output` are the
cells and outputs the grader writes itself (a call's scratch cell, a replay, the note of a cell not run).
"""
import json

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient

from qkv import wire


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

    During a call from a test (`answer_chars` set) the kernel's answer, the wire's MIME type, has a budget of its own
    (wire.REPLY_LIMITS); an answer past it is dropped on arrival and `answer_refused` says how big it was.

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
        self.answer_refused = None   # characters of an answer (or of all answers) over answer_chars
        self.call_truncated = False  # the call printed more than output_bytes
        self.request = None          # a qkv.wire request for the next cell's execute request to carry

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self.kc.request_for_next_cell, self.request = self.request, None  # bounded_client.BoundedKernelClient
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        data = content.get("data")
        if self.answer_chars is not None and isinstance(data, dict) and wire.MIME in data:
            return self._answer(outs, msg, display_id, cell_index, data)
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

    def _answer(self, outs, msg, display_id, cell_index, data):
        used = self._sizes.get(("answer", cell_index), 0) + output_size(msg.get("content", {}))
        self._sizes[("answer", cell_index)] = used
        if used > self.answer_chars or not isinstance(data[wire.MIME], str):
            self.answer_refused = used
            return None
        return super().output(outs, msg, display_id, cell_index)

    def forget_output_size(self, cell_index):
        self._sizes.pop(cell_index, None)
        self._sizes.pop(("answer", cell_index), None)


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
