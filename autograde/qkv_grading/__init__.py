"""Hidden tests of the qkv course, instructor side.

The source notebooks' hidden cells only *call* these functions (e.g. `hidden.softmax(softmax)`), so
the feedback a student receives shows the call and the Hint it raised, never the test body.
Every test draws fresh random inputs (an unseeded generator: nothing to memorise) and adds the
edge cases that common mistakes trip over; a correct answer passes whatever the draw.
"""
import numpy as np

# the lessons' hidden grading of a self-check answer: the checking package's, so that it and self-study mode
# say right or wrong by the same rule (qkv.checking.is_right)
from qkv.checking import expect_answer, seal  # noqa: F401


def fresh_rng():
    return np.random.default_rng()


def distinct_sizes(rng, n, low=2, high=9):
    """n different whole numbers in [low, high): dimensions drawn this way are never equal by chance, so a
    transposed or mixed-up axis cannot hide behind a square shape."""
    return [int(size) for size in rng.choice(np.arange(low, high), size=n, replace=False)]


seal(__name__)
