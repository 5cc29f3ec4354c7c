"""Hidden tests of the qkv course, instructor side.

The source notebooks' hidden cells only *call* these functions (e.g. `hidden.softmax(softmax)`), so
the feedback a student receives shows the call and the Hint it raised, never the test body.
Every test draws fresh random inputs (an unseeded generator: nothing to memorise) and adds the
edge cases that common mistakes trip over; a correct answer passes whatever the draw.
"""
import numpy as np

from qkv.checking import Hint, answer_tolerance, expect_number, seal


def fresh_rng():
    return np.random.default_rng()


def distinct_sizes(rng, n, low=2, high=9):
    """n different whole numbers in [low, high): dimensions drawn this way are never equal by chance, so a
    transposed or mixed-up axis cannot hide behind a square shape."""
    return [int(size) for size in rng.choice(np.arange(low, high), size=n, replace=False)]


def expect_answer(answer, correct, name, tolerance=None):
    """Hidden grading of a self-check answer: a choice (string) or a number within a tolerance."""
    if isinstance(correct, str):
        if answer != correct:
            raise Hint(f"`{name}` = {answer!r} is not the right choice.")
        return
    value = expect_number(answer, f"`{name}`")
    tolerance = answer_tolerance(correct, tolerance)
    if abs(value - correct) > tolerance:
        raise Hint(f"`{name}` = {value:.6g} is not right (allowed error {tolerance:.2g}).")


seal(__name__)
