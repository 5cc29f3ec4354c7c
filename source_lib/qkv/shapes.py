"""Input validation for the library's own functions: wrong input is a ValueError naming the shapes."""
import numpy as np


def require(condition, message):
    if not condition:
        raise ValueError(message)


def as_float_array(x, name):
    # keeps float32 as float32 so students can study precision; everything else becomes float64
    try:
        array = np.asarray(x)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array of numbers; {error}") from None
    if array.dtype.kind in "fc":
        return array
    if array.dtype.kind in "biu":
        return array.astype(np.float64)
    raise ValueError(f"{name} must be an array of numbers; got dtype {array.dtype} (shape {array.shape})")
