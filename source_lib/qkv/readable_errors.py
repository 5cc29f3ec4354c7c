"""Errors a student reads in one glance (issue 41, item 6): what, why and what to do, in three lines.

Raised where a traceback would only lead through qkv's own frames (a withheld function's stub, SmolLM2's guards), in
which nothing is the student's to fix. Its str is one sentence, for plain Python, which prints it after the
traceback; IPython and Jupyter show `_render_traceback_` instead of the traceback.
"""


class ThreeLineError(Exception):
    lines = ("", "", "")  # what happened, why, what to do: a subclass's own, or set before __init__

    def __init__(self, text=None):
        super().__init__(text or " ".join(self.lines))

    def _render_traceback_(self):
        """What IPython shows instead of the traceback: three lines, the first named like an error."""
        what, why, to_do = self.lines
        return [f"\x1b[31m{type(self).__name__}\x1b[39m: {what}", why, to_do]
