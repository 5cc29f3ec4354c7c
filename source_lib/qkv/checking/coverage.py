"""The kinds of input one call of a graded function receives, read from plain data: `kinds_of_call(fn, args, kwargs,
result)`. The visible checks' kinds are written down beside them (`COVERAGE` in qkv.checks.coverage), and
tests/test_check_coverage.py holds both layers to it: every kind a hidden test grades on is a kind the visible check
shows, so an answer right only on easier inputs hears it from the visible check rather than as lost points.

A kind is a short phrase naming one property of the call, so that a missing one reads as a sentence:
- "<param>: N-D", "<param>: list", "<param>: float32", "<param>: integers": each array argument's rank and type;
  "<param>: float", "<param>: numpy integer" / "numpy float": a number that is not a plain int; "<param>: a plain
  object with the attributes": a SimpleNamespace where a config is expected;
- "axis: last" / "axis: first" / "axis: middle": where `axis` points in the first array argument;
- "<param> by keyword", "<param> by position": how an argument with a default, or any argument passed by name, is
  given (the student's function must take both, as Python allows);
- "values past exp's range": an array argument, or the query-key scores (over the temperature), with an entry past
  709 in size (exp overflows or, shifted by another row's maximum, underflows); "a slice spanning past exp's range":
  one slice along `axis` (default the last), or one query's scores, whose largest and smallest differ by more
  than 709 (a shift by the slice's mean, first or smallest entry still overflows);
- "T_q != T_k": queries and keys of different lengths;
- "mask: None" / "mask: causal" / "mask: fully masked row" / "mask: other pattern" (padding, windows, ...);
- "output near zero": an entry of the right answer within 1e-9 of zero relative to its largest.
"""
import inspect
import warnings
from types import SimpleNamespace

import numpy as np

EXP_RANGE = 709.0  # np.exp overflows float64 above this
# relative to the answer's largest entry: a zero by design (a masked weight, a one-hot row's entropy, an underflowed
# weight), not the chance entry of thousands of random ones (lesson 07's memory check draws 4096 at 1e-7)
NEAR_ZERO = 1e-9
QUERY_NAMES = ("Q", "q", "query", "queries")
KEY_NAMES = ("K", "k", "keys", "key")


def kinds_of_call(fn, args, kwargs, result=None):
    """The set of kinds of input of the call fn(*args, **kwargs), which returned `result` (the right answer)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return frozenset({"arguments the function does not take"})
    parameters = inspect.signature(fn).parameters
    arguments = dict(bound.arguments)
    kinds = set(passing_kinds(parameters, len(args), kwargs))
    for name, value in arguments.items():
        kinds |= array_kinds(name, value)
    kinds |= axis_kinds(arguments)
    kinds |= range_kinds(arguments)
    kinds |= mask_kinds(arguments)
    kinds |= output_kinds(result)
    return frozenset(kinds)


def passing_kinds(parameters, n_positional, kwargs):
    """How the optional arguments are passed: by keyword or by position (and any argument passed by keyword)."""
    for name in list(parameters)[:n_positional]:
        if parameters[name].default is not inspect.Parameter.empty:
            yield f"{name} by position"
    for name in kwargs:
        yield f"{name} by keyword"


def _array(value):
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list) and value and all(isinstance(v, (list, int, float, np.number)) for v in value):
        try:
            return np.asarray(value)
        except ValueError:  # ragged
            return None
    return None


def scalar_kinds(name, value):
    """A number that is not a plain int: a float, or a numpy scalar (np.int64(256) is a whole number too)."""
    if isinstance(value, bool) or not isinstance(value, (float, np.number)):
        return set()
    if isinstance(value, np.number):
        return {f"{name}: numpy float" if np.dtype(type(value)).kind == "f" else f"{name}: numpy integer"}
    return {f"{name}: float"}


def array_kinds(name, value):
    if isinstance(value, SimpleNamespace):
        return {f"{name}: a plain object with the attributes"}
    array = _array(value)
    if array is None or array.dtype == object:
        return scalar_kinds(name, value)
    kinds = {f"{name}: {array.ndim}-D"}
    if isinstance(value, list):
        kinds.add(f"{name}: list")
    elif array.dtype == np.float32:
        kinds.add(f"{name}: float32")
    elif array.dtype.kind in "iu":
        kinds.add(f"{name}: integers")
    return kinds


def axis_kinds(arguments):
    axis = arguments.get("axis")
    arrays = [a for a in map(_array, arguments.values()) if a is not None]
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not arrays or arrays[0].ndim == 0:
        return set()
    ndim = arrays[0].ndim
    position = int(axis) % ndim
    return {"axis: last" if position == ndim - 1 else "axis: first" if position == 0 else "axis: middle"}


def _magnitude(array):
    finite = np.abs(np.asarray(array, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    return float(np.max(finite)) if finite.size else 0.0


def _widest_slice(array, axis=-1):
    """The largest max - min of one slice along `axis`: a softmax shifted by anything but the slice's own maximum
    (its mean, its first entry, its minimum) overflows when this passes 709."""
    values = np.asarray(array, dtype=np.float64)
    if values.ndim == 0 or not values.size:
        return 0.0
    values = np.where(np.isfinite(values), values, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an all-NaN slice
        spans = np.nanmax(values, axis=axis) - np.nanmin(values, axis=axis)
    return float(np.nanmax(spans, initial=0.0))


def _queries_and_keys(arguments):
    queries = next((_array(arguments[n]) for n in QUERY_NAMES if n in arguments), None)
    keys = next((_array(arguments[n]) for n in KEY_NAMES if n in arguments), None)
    if queries is None or keys is None or queries.dtype.kind not in "iuf" or keys.dtype.kind not in "iuf":
        return None, None
    return queries, keys


def _smallest_temperature(arguments):
    """The scores a softmax sees are divided by the temperature (lesson 01): the smallest one given, else 1."""
    temperatures = arguments.get("temperature", arguments.get("temperatures", 1.0))
    try:
        smallest = float(np.min(np.asarray(temperatures, dtype=np.float64)))
    except (TypeError, ValueError):
        return 1.0
    return smallest if smallest > 0 else 1.0


def range_kinds(arguments):
    """Values past exp's range: in an array argument, or in the scores of every query with every key."""
    arrays = [a for a in map(_array, arguments.values()) if a is not None and a.dtype.kind in "iuf"]
    axis = arguments.get("axis", -1)
    axis = int(axis) if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) else -1
    magnitudes = [_magnitude(a) for a in arrays]
    spans = [_widest_slice(a, axis if -a.ndim <= axis < a.ndim else -1) for a in arrays]
    kinds = set()
    queries, keys = _queries_and_keys(arguments)
    if queries is not None and queries.ndim >= 1 and keys.ndim >= 1 and queries.shape[-1] == keys.shape[-1]:
        d = queries.shape[-1]
        scores = queries.reshape(-1, d).astype(np.float64) @ keys.reshape(-1, d).T.astype(np.float64)
        magnitudes.append(_magnitude(scores) / _smallest_temperature(arguments))
        spans.append(_widest_slice(scores) / _smallest_temperature(arguments))
        if queries.ndim >= 2 and keys.ndim >= 2 and queries.shape[-2] != keys.shape[-2]:
            kinds.add("T_q != T_k")
    if any(magnitude > EXP_RANGE for magnitude in magnitudes):
        kinds.add("values past exp's range")
    if any(span > EXP_RANGE for span in spans):
        kinds.add("a slice spanning past exp's range")
    return kinds


def mask_kinds(arguments):
    kinds = set()
    for name, value in arguments.items():
        if "mask" not in name.lower():
            continue
        if value is None:
            kinds.add("mask: None")
            continue
        mask = _array(value)
        if mask is None or mask.ndim < 2:
            continue
        mask = mask.astype(bool)
        causal = np.tril(np.ones(mask.shape[-2:], dtype=bool))
        if not np.all(np.any(mask, axis=-1)):
            kinds.add("mask: fully masked row")
        is_causal = np.array_equal(np.broadcast_to(causal, mask.shape), mask)
        kinds.add("mask: causal" if is_causal else "mask: other pattern")
    return kinds


def output_kinds(result):
    parts = result if isinstance(result, tuple) else (result,)
    for part in parts:
        array = _array(part)
        if array is None or array.dtype.kind != "f" or not array.size:
            continue
        values = np.abs(array[np.isfinite(array)])
        if values.size and values.max() > 0 and values.min() <= NEAR_ZERO * values.max():
            return {"output near zero"}
    return set()
