"""The submissions sent to the workers a window at a time, ahead of nbgrader's own pass (issue 45).

Sending the whole class at once kept every submission in the coordinator, as read, as sanitized and as a
fingerprint, and every graded notebook the workers had finished before nbgrader's pass reached it: about 0.3 MB a
student, 458 MB for a class of 1,000. Here at most `window` submissions are out at a time (enough to keep every
worker busy while nbgrader takes their results in order); each time nbgrader's pass reaches a submission
(parallel.PrefetchedSanitize), the window moves on. A submission nbgrader reaches before it was sent (another
order than this one) is sent then, so it is still graded by a worker, never here for want of having been sent.
Grades do not change: each submission is sanitized and graded exactly as before, only later.
"""
import collections
import sys

import nbformat

from qkv_autograde.grading import parallel

WINDOW_PER_WORKER = 8  # submissions out per worker: a slow one holds nbgrader's pass, the others keep working


class Feed:
    """Sanitize and send the pending submissions `(entry, staged path)` to `workers`, `window` at a time."""

    def __init__(self, app, lesson, workers, pending, source, settings, bar, window):
        self.app, self.lesson, self.workers, self.source, self.settings, self.bar = (
            app, lesson, workers, source, settings, bar)
        self.queued = collections.OrderedDict(((entry.student, entry.notebook), (entry, staged))
                                              for entry, staged in pending)
        self.window, self.sent, self.out = window, [], set()

    def fill(self):
        """Send submissions until `window` are out (sent, and not yet reached by nbgrader's pass)."""
        while self.queued and len(self.out) < self.window:
            self._send(*self.queued.popitem(last=False)[1])

    def reached(self, student, notebook):
        """nbgrader's pass reached this submission: send it now if it was not sent yet, and move the window on."""
        queued = self.queued.pop((student, notebook), None)
        if queued is not None:
            self._send(*queued)
        self.out.discard((student, notebook))
        self.fill()

    def _send(self, entry, staged):
        try:
            nb, text = sanitized(self.app, self.lesson, entry.student, entry.notebook, staged)
        except Exception as error:
            print(f"qkv grader: {entry.student}'s {entry.notebook} could not be prepared for grading "
                  f"({type(error).__name__}: {error}); graded 0 below", file=sys.stderr)
            self.bar.update()
            return
        future = self.workers.submit(parallel.execute_submission, self.lesson, entry.student, text,
                                     self.source[entry.notebook], self.settings)
        future.add_done_callback(lambda _: self.bar.update())
        parallel.PENDING[(entry.student, entry.notebook)] = parallel.Pending(parallel.fingerprint(nb), future)
        self.out.add((entry.student, entry.notebook))
        self.sent.append(entry.student)


def sanitized(app, lesson, student, notebook, path):
    """The notebook exactly as nbgrader's sanitize step will hand it to the execute step, and as JSON."""
    nb = nbformat.read(path, as_version=4)
    submitted = nbformat.writes(nb)
    resources = {"nbgrader": {"student": student, "assignment": lesson, "notebook": notebook,
                              "db_url": app.coursedir.db_url}}
    nb, _ = parallel.sanitize(parallel.PrefetchedSanitize.chain, app.config, nb, resources)
    text = nbformat.writes(nb)
    parallel.SANITIZED[(student, notebook)] = (submitted, text)
    return nb, text
