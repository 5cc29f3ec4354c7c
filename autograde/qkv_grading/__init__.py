"""Hidden tests of the qkv course, instructor side.

The source notebooks' hidden cells only *call* these functions (e.g. `hidden.softmax(softmax)`), so
the feedback a student receives shows the call and the Hint it raised, never the test body.
Every test draws fresh random inputs (an unseeded generator: nothing to memorise) and adds the
edge cases that common mistakes trip over; a correct answer passes whatever the draw.
"""
import numpy as np

# a self-check answer is graded by the checking package's rule, so that grading and self-study mode say right or
# wrong alike (qkv.checking.is_right)
from qkv.checking import expect_answer, seal


def answer_of(answers):
    """A lesson's `answer(name, value)`: the self-check `name` graded against answers[name], a (correct value,
    tolerance) pair (tolerance None: a choice), by the rule self-study mode uses."""
    def answer(name, value):
        correct, tolerance = answers[name]
        expect_answer(value, correct, name, tolerance)
    return answer


def fresh_rng():
    return np.random.default_rng()


def distinct_sizes(rng, n, low=2, high=9):
    """n different whole numbers in [low, high): dimensions drawn this way are never equal by chance, so a
    transposed or mixed-up axis cannot hide behind a square shape."""
    return [int(size) for size in rng.choice(np.arange(low, high), size=n, replace=False)]


seal(__name__)
