"""Validating what came back: a finite numeric array of the expected shape, or a single finite number."""
import numpy as np

from qkv.checking.hints import Hint, describe


def expect_array(result, shape, shown, allow_list=False):
    """The result must be a finite numeric array of the given shape (None in `shape` = any size)."""
    expected = "an array of shape " + _shape_text(shape)
    if result is None:
        raise Hint(f"{shown} returned None; expected {expected}. Is a `return` missing?")
    if isinstance(result, (list, tuple)) and not allow_list:
        raise Hint(f"{shown} returned a {type(result).__name__}; expected {expected} "
                   f"(a numpy array: np.array(...) or numpy operations give you one).")
    if np.isscalar(result) and shape != ():
        raise Hint(f"{shown} returned the single number {result!r}; expected {expected}.")
    try:
        array = np.asarray(result)
    except ValueError:
        raise Hint(f"{shown} returned something ragged that is not an array; expected {expected}.") from None
    if array.dtype.kind not in "biuf":
        raise Hint(f"{shown} returned values of type {array.dtype}; expected {expected} of numbers.")
    if not _shape_matches(array.shape, shape):
        raise Hint(f"{shown} returned shape {tuple(array.shape)}; expected {_shape_text(shape)}.")
    if not np.all(np.isfinite(array)):
        where = "NaN" if np.any(np.isnan(array)) else "infinity"
        raise Hint(f"{shown} returned {where} in its result; expected finite numbers everywhere.")
    return array.astype(np.float64)


def expect_number(result, shown):
    if result is None:
        raise Hint(f"{shown} is None; expected a number.")
    array = np.asarray(result)
    if array.dtype.kind not in "biuf" or array.size != 1:
        raise Hint(f"{shown} is {describe(result)}; expected a single number.")
    value = float(array.reshape(()))
    if not np.isfinite(value):
        raise Hint(f"{shown} is {value}; expected a finite number.")
    return value


def _shape_matches(actual, expected):
    return len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected))


def _shape_text(shape):
    return "(" + ", ".join("any" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
