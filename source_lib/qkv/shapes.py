"""Input validation for the library's own functions: wrong input is a ValueError naming the shapes.

One validator per kind of argument, so the same mistake gets the same message everywhere."""
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


def whole_number(value, name, smallest=0):
    # an int or numpy integer >= smallest -> int. Not a bool (True is no length) and not a float, even 3.0:
    # a count that arrives as a float was computed by a division somewhere, and int() would hide a 2.5
    require(isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= smallest,
            f"{name} must be {'a positive whole number' if smallest == 1 else f'a whole number >= {smallest}'}; "
            f"got {value!r}")
    return int(value)


def boolean_mask(mask, name="mask"):
    # a mask is True where a query may attend a key. Casting any other dtype to bool would silently invert an
    # additive mask (0 where visible -> False, -inf where hidden -> True), so only a boolean array is a mask
    array = np.asarray(mask)
    require(array.dtype == bool,
            f"{name} must be boolean (True where a query may attend a key); got dtype {array.dtype}")
    return array


def token_ids(ids, vocab_size=None, context_length=None, name="ids", min_length=1):
    # a 1-D sequence of whole numbers -> int64 [T], each in [0, vocab_size) and T <= context_length when given
    array = np.asarray(ids)
    wanted = {0: "a 1-D sequence of token ids", 1: "a non-empty 1-D sequence of token ids"}.get(
        min_length, f"a 1-D sequence of at least {min_length} token ids")
    require(array.ndim == 1 and array.size >= min_length, f"{name} must be {wanted}; got shape {array.shape}")
    if array.size == 0:  # np.asarray([]) is float64, but an empty sequence of ids is still ids
        return array.astype(np.int64)
    require(array.dtype.kind in "iu", f"{name} must be whole numbers (token ids); got dtype {array.dtype}")
    if vocab_size is not None:
        require(array.min() >= 0 and array.max() < vocab_size,
                f"token ids must lie in [0, {vocab_size}); got min {array.min()}, max {array.max()}")
    if context_length is not None:
        require(array.size <= context_length,
                f"{array.size} tokens exceed the model's context length {context_length}")
    return array.astype(np.int64)
