"""make grade's feedback pages and item analysis, written while the class is still being graded (issue 45).

A student's page shows only what nbgrader's pass writes for that student: their scores, comments and late penalty
in the gradebook and their autograded notebook, all written by the end of the pass's last step for them (its
post-convert hook: converter.QkvAutograde.run_post_convert_hook). So the local workers write the pages a few
students at a time as the pass goes (`AsGraded`), between the submissions they grade, instead of all of them after
the anomaly report, which the coordinator wrote while the workers waited. The item analysis, which needs the whole
class, goes to a worker as soon as the pass is over, while the coordinator writes the anomaly report. Same pages,
byte for byte: the same code reading the same gradebook entries, only earlier. A remote cluster (Dask) cannot see
the course: its pages are written here after the pass, as before.
"""
import sys

from tqdm import tqdm

from qkv_autograde.reports import feedback as feedback_pages, item_analysis

FEEDBACK_SHARE = 5  # students per call of feedback.generate: a page costs ~65 ms, a call ~13 ms more


def progress(description, total, unit):
    """A progress bar on stderr for a phase whose size is known; a phase with nothing to do shows none."""
    return tqdm(total=total, desc=description, unit=unit, file=sys.stderr, dynamic_ncols=True, disable=total == 0)


class AsGraded:
    """QkvAutograde's observer during make grade with local workers: sends each FEEDBACK_SHARE students whose grading
    nbgrader has finished to a worker to write their pages, and the item analysis once the pass is over. It never
    raises into nbgrader's pass (a failure there would count as the student's): what it could not send, `feedback`
    writes afterwards."""

    def __init__(self, lesson, workers, force, course_root, db_url):
        self.lesson, self.workers, self.force, self.course_root, self.db_url = (
            lesson, workers, force, course_root, db_url)
        self.waiting, self.shares, self.items = [], [], None  # shares: [(students, future or None)]

    def student_done(self, student):
        self.waiting.append(student)
        if len(self.waiting) >= FEEDBACK_SHARE:
            self._send()

    def pass_done(self):
        # the item analysis first: it takes longer than the last share, which another worker writes meanwhile
        self.items = self._submit(item_analysis.write, self.course_root, self.db_url, self.lesson)
        self._send()

    def _send(self):
        if self.waiting:
            share, self.waiting = self.waiting, []
            self.shares.append((share, self._submit(feedback_pages.generate, self.lesson, share, self.force)))

    def _submit(self, function, *args):
        try:
            return self.workers.submit(function, *args)
        except Exception:  # the pool is broken (a worker was lost): done in the coordinator afterwards
            return None

    def items_path(self):
        """The item analysis's path if a worker wrote it, else None (then it is written here)."""
        try:
            return self.items.result() if self.items is not None else None
        except Exception:
            return None


def feedback(coursedir, lesson, sent, workers, force, meanwhile=None, early=None):
    """Feedback pages for the lesson's graded students, as `nbgrader generate_feedback lesson [--force]` writes them
    (without --force it skips the students whose pages are up to date); returns the students whose feedback failed;
    `meanwhile()` runs here while the workers write them (before the pages, when they are written here). `early`: the
    AsGraded of the pass, whose shares are already with the workers (those still running are waited for).

    Local workers write the pages of disjoint shares of the class, reading the gradebook (while nbgrader's pass
    writes other students' grades, for the early shares: its write-ahead log lets them read meanwhile, bulk_grading).
    With a remote cluster, the pages are written here."""
    students = feedback_pages.graded_students(coursedir, lesson)
    # the students just graded need new pages, the others are usually up to date: spread the first evenly
    graded = set(students)
    handed = list(early.shares) if early else []
    done_early = {student for share, _ in handed for student in share}
    ordered = [s for s in dict.fromkeys([s for s in sent if s in graded] + students) if s not in done_early]
    bar = progress(f"feedback {lesson}", len(ordered) + len(done_early), "student")
    try:
        if not workers.sees_the_course:
            if meanwhile:
                meanwhile()
            return sorted(_feedback_here(lesson, ordered, force, bar))
        # A pool that started fewer workers than it may (fewer submissions than jobs) would start a cold one for
        # each share beyond those it has: one share per started worker then. Otherwise a few shares per worker,
        # so that the bar moves while they write.
        count = max(1, min(workers.jobs, len(sent)))
        pieces = min(len(ordered), 3 * count) if count == workers.jobs else count
        shares = [ordered[k::pieces] for k in range(pieces) if ordered[k::pieces]]
        running = []
        for share, future in handed:
            if future is not None:
                future.add_done_callback(lambda _, n=len(share): bar.update(n))  # noqa: B008 -- binds this share's size now
            running.append((share, future))
        for share in shares:
            try:
                future = workers.submit(feedback_pages.generate, lesson, share, force)
                future.add_done_callback(lambda _, n=len(share): bar.update(n))  # noqa: B008 -- binds this share's size now
                running.append((share, future))
            except RuntimeError:  # the pool is broken (a worker was lost during grading): written below, here
                running.append((share, None))
        if meanwhile:
            meanwhile()
        failed = []
        for share, future in running:
            try:
                if future is None:
                    raise RuntimeError("never sent")
                failed += future.result()
            except Exception as error:  # a worker lost while writing, or never given the share: written here
                if future is not None:
                    print(f"qkv grader: a worker writing feedback failed ({error!r}); writing its share here",
                          file=sys.stderr)
                else:
                    bar.update(len(share))
                # --force: a worker lost half-way may have left a student's folder without its page, which nbgrader
                # would take for up to date; rewriting a page that was complete gives the same page
                failed += feedback_pages.generate(lesson, share, True)
        return sorted(failed)
    finally:
        bar.close()


def refresh_feedback(coursedir, lesson):
    """Nothing new was graded: the pages whose grades or comments changed since they were written (hand grading in
    formgrader) are rewritten here; generate_feedback without --force leaves every other page as it is."""
    students = feedback_pages.graded_students(coursedir, lesson)
    with progress(f"feedback {lesson}", len(students), "student") as bar:
        return sorted(_feedback_here(lesson, students, False, bar))


def _feedback_here(lesson, students, force, bar):
    failed = []
    for k in range(0, len(students), FEEDBACK_SHARE):
        share = students[k:k + FEEDBACK_SHARE]
        failed += feedback_pages.generate(lesson, share, force)
        bar.update(len(share))
    return failed
