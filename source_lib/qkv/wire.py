"""Plain data across the grading boundary: how the grader calls a student's function in a sandboxed kernel.

During autograding the test cells run in the grader's own process; the student's functions stay in the
student's kernel. The grader sends `serve(request)` to the kernel, the kernel calls the function and answers
with plain data. Both directions use this one codec: JSON with numpy arrays as raw bytes, tuples, dicts, a few
qkv value types, and named qkv functions. Nothing is ever unpickled, so whatever a submission returns, the
grader receives numbers, strings and containers, or a named stand-in for anything else.

This module is the student's side of the boundary and has no secrets: reading it tells a student nothing
about the tests.
"""
import base64
import dataclasses
import functools
import importlib
import json
import time
import tracemalloc
import types

import numpy as np

MIME = "application/vnd.qkv.wire+json"
_NUMERIC_KINDS = "biufc"

_handles = {}  # handle id -> object the grader may call again (a function a student's function returned)


class WireError(ValueError):
    """The other side sent something this codec does not carry."""


# ---------------------------------------------------------------- encoding

def encode(value, keep=None):
    """Plain data (JSON text) for `value`. `keep(obj) -> id` stores what cannot travel and names it."""
    return json.dumps(_to_plain(value, keep))


def _to_plain(value, keep):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC_KINDS:  # before float: np.float64 is one
        return {"__scalar__": _array_plain(np.asarray(value))}
    if isinstance(value, float):
        return {"__float__": repr(value)}  # keeps nan, inf and the exact value
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC_KINDS:
        return {"__array__": _array_plain(value)}
    if isinstance(value, np.random.Generator):  # its exact state: the kernel draws what the grader would have
        return {"__generator__": _to_plain(value.bit_generator.state, keep)}
    if isinstance(value, list):
        return [_to_plain(v, keep) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"__tuple__": [_to_plain(v, keep) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[_to_plain(k, keep), _to_plain(v, keep)] for k, v in value.items()]}
    if isinstance(value, types.SimpleNamespace):
        return {"__namespace__": {k: _to_plain(v, keep) for k, v in vars(value).items()}}
    qkv_name = _qkv_name(type(value))
    if qkv_name and (dataclasses.is_dataclass(value) or hasattr(value, "_fields")):
        fields = value._asdict() if hasattr(value, "_fields") else {f.name: getattr(value, f.name)
                                                                    for f in dataclasses.fields(value)}
        return {"__object__": qkv_name, "fields": {k: _to_plain(v, keep) for k, v in fields.items()}}
    if isinstance(value, functools.partial) and _qkv_name(value.func):
        return {"__partial__": _qkv_name(value.func), "args": _to_plain(list(value.args), keep),
                "kwargs": _to_plain(dict(value.keywords), keep)}
    if callable(value) and _qkv_name(value) and keep is None:
        return {"__function__": _qkv_name(value)}
    if keep is not None:
        return _handle_plain(value, keep)
    raise WireError(f"{type(value).__name__} cannot be sent to the student's kernel as plain data")


def _handle_plain(value, keep):
    return {"__handle__": keep(value), "type": type(value).__name__, "callable": callable(value),
            "name": str(getattr(value, "__name__", type(value).__name__)),
            "module": str(getattr(value, "__module__", "") or "")}


def _array_plain(array):
    array = np.asarray(array, order="C")  # not ascontiguousarray, which turns a 0-d array into 1-d
    return {"dtype": array.dtype.str, "shape": list(array.shape),
            "data": base64.b64encode(array.tobytes()).decode("ascii")}


def _qkv_name(obj):
    """'qkv.module:qualname' for a module-level function or class of qkv, else None."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not isinstance(module, str) or not (module == "qkv" or module.startswith("qkv.")) or "<" in qualname:
        return None
    return f"{module}:{qualname}"


# ---------------------------------------------------------------- decoding

def decode(text, handle=None):
    """The value `encode` described. `handle(description) -> object` stands in for kept objects."""
    return _from_plain(json.loads(text), handle)


def _from_plain(plain, handle):
    if plain is None or isinstance(plain, (bool, int, str)):
        return plain
    if isinstance(plain, list):
        return [_from_plain(v, handle) for v in plain]
    if not isinstance(plain, dict) or len(plain) == 0:
        raise WireError(f"unexpected {type(plain).__name__} on the wire")
    tag = next(iter(plain))
    if tag == "__float__":
        return float(plain[tag])
    if tag == "__array__":
        return _array_from(plain[tag])
    if tag == "__scalar__":
        return _array_from(plain[tag])[()]
    if tag == "__tuple__":
        return tuple(_from_plain(v, handle) for v in plain[tag])
    if tag == "__dict__":
        return {_hashable(_from_plain(k, handle)): _from_plain(v, handle) for k, v in plain[tag]}
    if tag == "__generator__":
        state = _from_plain(plain[tag], handle)
        kind = getattr(np.random, str(state.get("bit_generator")), None)
        if not (isinstance(kind, type) and issubclass(kind, np.random.BitGenerator)):
            raise WireError("unknown bit generator on the wire")
        bits = kind()
        bits.state = state
        return np.random.Generator(bits)
    if tag == "__namespace__":
        return types.SimpleNamespace(**{k: _from_plain(v, handle) for k, v in plain[tag].items()})
    if tag == "__object__":
        return _qkv_object(plain[tag])(**{k: _from_plain(v, handle) for k, v in plain["fields"].items()})
    if tag == "__function__":
        return _qkv_object(plain[tag])
    if tag == "__partial__":
        return functools.partial(_qkv_object(plain[tag]), *_from_plain(plain["args"], handle),
                                 **_from_plain(plain["kwargs"], handle))
    if tag == "__handle__" and handle is not None:
        return handle(plain)
    raise WireError(f"unexpected tag {tag!r} on the wire")


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


def _array_from(plain):
    dtype = np.dtype(plain["dtype"])
    if dtype.kind not in _NUMERIC_KINDS or dtype.hasobject:
        raise WireError(f"arrays of dtype {dtype} do not travel")
    shape = tuple(int(s) for s in plain["shape"])
    data = base64.b64decode(plain["data"])
    if len(data) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise WireError("array data does not match its shape")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _qkv_object(name):
    module, _, qualname = name.partition(":")
    if not (module == "qkv" or module.startswith("qkv.")):
        raise WireError(f"{name} is not part of qkv")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------- the kernel's side

def serve(request_text, namespace):
    """Run one request from the grader in the student's kernel and publish the answer.

    request: {"op": "call", "target": name or handle id, "args": [...], "kwargs": {...}, "measure": bool}
          or {"op": "get", "name": name}: a global of the notebook, as plain data or a handle.
    """
    from IPython.display import publish_display_data

    publish_display_data({MIME: _answer(json.loads(request_text), namespace)})


def _keep(obj):
    key = f"h{len(_handles)}"
    _handles[key] = obj
    return key


def _answer(request, namespace):
    if request["op"] == "get":
        name = request["name"]
        if name not in namespace:
            return json.dumps({"missing": name})
        return json.dumps({"value": json.loads(_safe_encode(namespace[name]))})
    target = request["target"]
    fn = _handles.get(target) if target.startswith("h") and target in _handles else namespace.get(target)
    if fn is None:
        return json.dumps({"missing": target})
    if request.get("measure"):  # from before the inputs exist, as a local measurement counts their copies
        tracemalloc.start()
    args = _from_plain(request["args"], None)
    kwargs = _from_plain(request["kwargs"], None)
    started = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:  # a student's SystemExit or KeyboardInterrupt is their answer too
        return json.dumps({"error": _describe_error(error)})
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else None
        if request.get("measure"):
            tracemalloc.stop()
    return json.dumps({"value": json.loads(_safe_encode(result)), "seconds": seconds, "peak_bytes": peak})


def _safe_encode(value):
    try:
        return encode(value, keep=_keep)
    except RecursionError:  # a container that holds itself travels as a stand-in
        return json.dumps(_handle_plain(value, _keep))


def _describe_error(error):
    from qkv.checking import _where  # the same "(in your code, line N: ...)" a local check prints

    return {"type": type(error).__name__, "message": str(error), "where": _where(error),
            "builtin": type(error).__module__ == "builtins"}
