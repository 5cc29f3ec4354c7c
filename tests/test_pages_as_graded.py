"""make grade's feedback pages, sent to the workers as nbgrader's pass finishes each student (issue 45):
qkv_autograde/grading/pages.py. Fakes only, no grading: that the pages are the stock command's byte for byte is
test_class_grading.py's test_in_process_export_and_feedback_equal_the_stock_commands, on a class make grade graded."""
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from nbgrader.converters.base import BaseConverter

from qkv_autograde.grading import converter, pages

LESSON = "01-lookup"


class Pool:
    """The workers: records what is sent, in order; each job's result is given by `results` (an exception: raised)."""

    sees_the_course, jobs = True, 2

    def __init__(self, results=None):
        self.sent, self.results = [], results or {}

    def submit(self, function, *args):
        name = "write" if function is pages.item_analysis.write else "generate"
        self.sent.append((name, args))
        future = Future()
        outcome = self.results.get((name, tuple(args[1])) if name == "generate" else name,
                                   [] if name == "generate" else "items.html")
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        return future


def as_graded(pool):
    return pages.AsGraded(LESSON, pool, False, "/course", "sqlite:///gradebook.db")


def test_a_share_goes_to_the_workers_as_soon_as_its_students_are_graded():
    pool = Pool()
    early = as_graded(pool)
    students = [f"s{i}" for i in range(pages.FEEDBACK_SHARE + 2)]
    for student in students[:pages.FEEDBACK_SHARE - 1]:
        early.student_done(student)
    assert pool.sent == []  # not a share yet
    early.student_done(students[pages.FEEDBACK_SHARE - 1])
    assert pool.sent == [("generate", (LESSON, students[:pages.FEEDBACK_SHARE], False))]
    for student in students[pages.FEEDBACK_SHARE:]:
        early.student_done(student)
    early.pass_done()  # the item analysis, which takes longest, before the last share
    assert [name for name, _ in pool.sent] == ["generate", "write", "generate"]
    assert pool.sent[1][1] == ("/course", "sqlite:///gradebook.db", LESSON)
    assert pool.sent[2][1] == (LESSON, students[pages.FEEDBACK_SHARE:], False)
    assert early.items_path() == "items.html"


def test_feedback_writes_only_the_rest_and_what_a_worker_failed_to_write(monkeypatch):
    monkeypatch.setattr(pages.feedback_pages, "graded_students", lambda coursedir, lesson: ["ada", "bo", "cy", "di"])
    written_here = []
    monkeypatch.setattr(pages.feedback_pages, "generate",
                        lambda lesson, share, force: written_here.append((share, force)) or [])
    pool = Pool({("generate", ("bo",)): RuntimeError("worker lost"), "write": RuntimeError("worker lost")})
    early = as_graded(pool)
    early.student_done("ada")
    early.pass_done()
    early.student_done("bo")  # (nbgrader's pass is over by then in truth: a share of its own here)
    early._send()
    assert early.items_path() is None  # the item analysis failed on its worker: grade_class writes it itself
    pool.sent.clear()
    failed = pages.feedback(SimpleNamespace(), LESSON, ["ada", "bo", "cy"], pool, False, early=early)
    assert failed == []
    # cy and di (graded earlier) are shared between the workers; ada and bo are not sent again
    assert sorted(student for _, (_, share, _) in pool.sent for student in share) == ["cy", "di"]
    assert written_here == [(["bo"], True)]  # a lost worker's share: written here, --force


def test_nbgraders_last_step_for_a_student_tells_the_observer(monkeypatch):
    told = []
    monkeypatch.setattr(BaseConverter, "run_post_convert_hook", lambda self: told.append("hook"))
    grader = converter.QkvAutograde.__new__(converter.QkvAutograde)  # nothing of its set-up is needed here
    grader.observer = SimpleNamespace(student_done=lambda student: told.append(student))
    grader.grading = (LESSON, "ada")  # init_assignment's note of whom nbgrader is grading
    grader.run_post_convert_hook()
    assert told == ["hook", "ada"]  # after everything nbgrader does for the student, the instructor's hook too
    grader.observer, grader.grading = None, (LESSON, "bo")  # the stock command: nobody to tell
    grader.run_post_convert_hook()
    assert told == ["hook", "ada", "hook"]


@pytest.mark.parametrize("broken", [True, False])
def test_a_broken_pool_never_fails_the_student_in_nbgraders_pass(broken):
    class BrokenPool(Pool):
        def submit(self, function, *args):
            raise RuntimeError("A process in the process pool was terminated abruptly")

    early = as_graded(BrokenPool() if broken else Pool())
    for student in ("ada", "bo", "cy", "di", "ed", "flo"):
        early.student_done(student)
    early.pass_done()
    assert [share for share, _ in early.shares] == [["ada", "bo", "cy", "di", "ed"], ["flo"]]
    assert all((future is None) == broken for _, future in early.shares)
