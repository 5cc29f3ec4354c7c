"""Hidden tests of the qkv course, instructor side.

The source notebooks' hidden cells only *call* these functions (e.g. `hidden.softmax(softmax)`), so
the feedback a student receives shows the call and the Hint it raised, never the test body.
Every test has fixed adversarial cases (a mistake they expose is caught whatever the draw) and random inputs
for breadth; a correct answer passes whatever the draw.

Whose draw it is (`fresh_rng`): a hidden test's random inputs are seeded from the lesson, the student and the test
(the test function's name and the line of its `fresh_rng()` call within it), through sha256, never Python's
`hash()`, which changes from one process to the next. So classmates draw different inputs (nothing to pass round),
and a regrade of the same notebook draws the same inputs and gets the same score. The grader names the student
(`draws_of(lesson, student)` around the test cells, in SandboxedExecute.execute, with the student id of nbgrader's
submitted/ folder, never anything from the notebook). Outside grading (a developer calling `hidden.softmax(fn)` in
tests/), the draw is the lesson's alone, the same on every call: wrap the call in
`draws_of("01-lookup", "some-student")` to draw as a student does (a test that wants several draws draws as several
students), or to reproduce one student's grade.
"""
import contextlib
import contextvars
import hashlib
import json
import sys

import numpy as np
from qkv import lessons, your_numbers

# a self-check answer is graded by the checking package's rule, so that grading and self-study mode say right or
# wrong alike (qkv.checking.is_right)
from qkv.checking import Hint, expect_answer, seal


def answer_of(answers):
    """A lesson's `answer(name, value)`: the self-check `name` graded against answers[name], a (correct value or
    function of the student's numbers, tolerance) pair (tolerance None: a choice), by the rule self-study mode uses.
    A varied question is graded for the numbers of the key being graded (`variant_of`), else the canonical ones."""
    lesson = _lesson_of_module(sys._getframe(1).f_globals.get("__name__"))

    def answer(name, value):
        correct, tolerance = answers[name]
        recorded = _RECORDED.get()
        if recorded is not None:
            recorded[name] = _plain(value)
        try:
            expect_answer(value, correct, name, tolerance, params=params_of(lesson, name))
        except Hint as wrong:
            if _right_for_the_typed_key(lesson, name, value, correct, tolerance):
                raise Hint(f"{wrong} {TYPED_KEY_SENTENCE}") from None
            raise
    return answer


# the feedback's sentence when a wrong answer is right for the key the notebook typed (design 3.5): it names
# neither that key nor whose it is, and gives no right answer
TYPED_KEY_SENTENCE = ("It is right for the numbers of the login typed in your first cell, which is not the login of "
                      "your submission.")


def _right_for_the_typed_key(lesson, name, value, correct, tolerance):
    key, salt, typed = _VARIANT.get() or ("", "", None)
    if not typed or typed == key or name not in your_numbers.POOLS.get(lesson, {}):
        return False
    try:   # graded by the very rule that found it wrong, for the typed key's numbers
        expect_answer(value, correct, name, tolerance, params=your_numbers.question_params(lesson, name, typed, salt))
    except Hint:
        return False
    return True


# {question: answer} of the submission being graded, for the anomaly report's "answers fit a classmate's variant"
_RECORDED = contextvars.ContextVar("qkv_grading_recorded", default=None)


def _plain(value):
    # an answer as plain data for the report: a short string or a finite number, else None (never the object)
    if isinstance(value, str):
        return value[:16]
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if np.isfinite(number) else None


@contextlib.contextmanager
def recording_answers(into):
    """Inside, every self-check answer graded is recorded into the dict `into`, as plain data."""
    token = _RECORDED.set(into)
    try:
        yield into
    finally:
        _RECORDED.reset(token)


# (normalised key, salt, typed key) of the submission being graded: its true key, from the roster (qkv_autograde
# grading sets it around the test cells, as it sets draws_of), and the key its notebook typed. None: the canonical
# numbers
_VARIANT = contextvars.ContextVar("qkv_grading_variant", default=None)


@contextlib.contextmanager
def variant_of(key, salt, typed=None):
    """Inside, varied self-check questions are graded for the numbers of `key` under the term's `salt`; a wrong answer
    right for the numbers of `typed` (the key the notebook typed) says so."""
    token = _VARIANT.set((your_numbers.normalise_key(key), salt, typed))
    try:
        yield
    finally:
        _VARIANT.reset(token)


def params_of(lesson, name):
    """The parameters of question `name` for the key being graded (canonical outside variant_of); None when the
    question does not vary."""
    if name not in your_numbers.POOLS.get(lesson, {}):
        return None
    key, salt, _ = _VARIANT.get() or ("", your_numbers.SELF_STUDY_SALT, None)
    return your_numbers.question_params(lesson, name, key, salt)


def expected_answer(lesson, name, answers, params=None):
    """The right answer of `name` for `params` (default: the key being graded): a number, or the canonical letter."""
    correct = answers[name][0]
    params = params_of(lesson, name) if params is None else params
    return float(correct(params)) if callable(correct) else correct


# (lesson slug, student id) whose inputs the hidden tests draw; None outside grading (the lesson's own draw). A
# context variable, so that two submissions graded in two threads of one worker never share it
_DRAWER = contextvars.ContextVar("qkv_grading_drawer", default=None)
LESSON_ONLY = ""  # the student of the default draw: nobody


@contextlib.contextmanager
def draws_of(lesson, student):
    """Inside, the hidden tests draw the inputs of `student` (an id, as the gradebook names students) in `lesson`
    (its slug or number)."""
    if not isinstance(student, str) or not student:
        raise ValueError(f"draws_of needs a student id (a non-empty string), got {student!r}.")
    token = _DRAWER.set((_slug(lesson), student))
    try:
        yield
    finally:
        _DRAWER.reset(token)


def draw_seed(lesson, student, test):
    """The seed of one draw: a stable hash of (lesson slug, student id, test), the same in every process."""
    material = json.dumps([_slug(lesson), student, test]).encode()
    return np.random.SeedSequence(int.from_bytes(hashlib.sha256(material).digest(), "big"))


def fresh_rng():
    """The random generator of the hidden test calling it, seeded for the student being graded (draws_of), or for
    the lesson alone outside grading. The test is named by its function and the line of this call within it, so two
    tests (or two calls in one test) draw apart; nothing the student's code does can change which inputs it gets."""
    caller = sys._getframe(1)
    test = f"{caller.f_code.co_qualname}:{caller.f_lineno - caller.f_code.co_firstlineno}"
    lesson, student = _DRAWER.get() or (_lesson_of_module(caller.f_globals.get("__name__")), LESSON_ONLY)
    return np.random.default_rng(draw_seed(lesson, student, test))


def _slug(lesson):
    """A course lesson by its slug, whether named by number or slug; any other assignment by its own name."""
    try:
        return lessons.lesson(lesson).slug
    except ValueError:
        return str(lesson)


def _lesson_of_module(module_name):
    for row in lessons.LESSONS:
        if row.hidden_tests == module_name:
            return row.slug
    raise ValueError(f"fresh_rng is for the hidden tests of a lesson (qkv_grading.lessonNN), not {module_name!r}.")


def distinct_sizes(rng, n, low=2, high=9):
    """n different whole numbers in [low, high): dimensions drawn this way are never equal by chance, so a
    transposed or mixed-up axis cannot hide behind a square shape."""
    return [int(size) for size in rng.choice(np.arange(low, high), size=n, replace=False)]


seal(__name__)
