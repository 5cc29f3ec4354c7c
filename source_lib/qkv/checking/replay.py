"""Recorded answers, for the student edition of qkv (issue 33): what a withheld reference function returned on the
inputs the visible checks give it, read from fixtures shipped inside the package, never computed.

In the student edition, a function that would answer an open lesson's exercise keeps its name and signature, but
its body only calls `answer`. On an input a visible check uses (the check's own examples, and every input on which
it computes a catalogued mistake or confirms a diagnosis) it returns a fresh copy of what the full library returned
there, recorded by the instructor's `qkv_edition.fixtures`; on any other input it raises `NotInThisEdition`, which
tells the student to write their own. A function of a lesson not released yet answers nothing.

The key of a call is the sha256 of the function's dotted name and of its arguments bound to its signature with
defaults applied (so f(x, -1) and f(x, axis=-1) are one call), encoded by qkv.wire_codec (arrays as their exact
bytes). An input computed on another machine may differ from the recorded one in its last bits (BLAS, SIMD exp):
such a call is answered by the one recorded call of the same function whose arguments have the same structure and
are equal to 1e-7 (never when two are). In the full library nothing calls this module; the edition's builder
(`qkv_edition.library`) writes the files with `write_fixtures`.
"""
import builtins
import dataclasses
import functools
import gzip
import hashlib
import json
import pathlib
import sys
import types

import numpy as np

from qkv import wire_codec
from qkv.readable_errors import ThreeLineError

FORMAT = 1
FOLDER = pathlib.Path(__file__).resolve().parents[1] / "fixtures"  # qkv/fixtures, in the edition only
RELATIVE_TOLERANCE = 1e-7  # how far an input computed elsewhere may be from the recorded one

MISSES = []       # dotted names of the calls no fixture answered, in order (read by the edition's tests)
APPROXIMATE = []  # dotted names of the calls answered by a recorded input equal only to RELATIVE_TOLERANCE
_LOADED = {}      # lesson number -> {key: entry}
_BY_NAME = {}     # lesson number -> {dotted name: [(skeleton, arguments, entry)]}, made at the first inexact call


class NotInThisEdition(ThreeLineError):
    """A withheld reference function was called on an input no visible check uses: write your own.

    Its str is one sentence (plain Python prints it after the traceback); in IPython and Jupyter it shows as three
    lines, what, why and what to do, instead of a traceback through the stub and this module (`_render_traceback_`):
    nothing in those frames is the student's to fix."""

    def __init__(self, dotted, lesson, exercise=True, released=True):
        name = dotted.rpartition(".")[2]
        if not released and not exercise:
            text = (f"qkv's `{dotted}` would answer an exercise of lesson {lesson}, which is not released yet, so this "
                    f"edition of the course does not include it: use your own `{name}`.")
            self.lines = (f"qkv's `{name}` is not in this edition.",
                          f"Why: it would answer an exercise of lesson {lesson}, which is not released yet.",
                          f"What to do: use your own `{name}` (write it, or copy it from the notebook where you did).")
        elif not released:
            text = (f"`{name}` belongs to lesson {lesson}, which is not released yet, so this edition of the course "
                    f"does not include qkv's version of it. If you need it now, write your own `{name}`.")
            self.lines = (f"qkv's `{name}` is not in this edition.",
                          f"Why: it belongs to lesson {lesson}, which is not released yet.",
                          f"What to do: if you need it now, write your own `{name}` in the notebook.")
        elif exercise:
            text = (f"`{name}` is an exercise of lesson {lesson}, so this edition of the course does not include "
                    f"qkv's version of it: write your own `{name}` in the notebook and use that one.")
            self.lines = (f"qkv's `{name}` answers only the inputs this notebook's checks use, not these.",
                          f"Why: `{name}` is an exercise of lesson {lesson}, so this edition does not include it.",
                          f"What to do: write your own `{name}` in the notebook and use that one.")
        else:
            text = (f"qkv's `{dotted}` would answer an exercise of lesson {lesson}, so this edition of the course "
                    f"does not include it: compute it with your own functions from lesson {lesson}.")
            self.lines = (f"qkv's `{dotted}` answers only the inputs this notebook's checks use, not these.",
                          f"Why: it would answer an exercise of lesson {lesson}, so this edition does not include it.",
                          f"What to do: compute it with your own functions from lesson {lesson}.")
        super().__init__(text)
        self.dotted, self.lesson = dotted, lesson


def answer(dotted, arguments, fixtures=(), lesson=None, exercise=True, released=True):
    """What the full library's `dotted` returned for `arguments` ({parameter: value}, in the signature's order,
    defaults applied), from the fixtures of the lessons `fixtures`; NotInThisEdition naming `lesson` otherwise.

    A fresh copy each time (arrays writeable, dtypes exact); an argument the function changed in place (a
    np.random.Generator drawn from) is left as the function left it; an exception it raised is raised again.
    """
    entry = _lookup(dotted, arguments, fixtures) if fixtures else None
    if entry is None:
        if fixtures:
            MISSES.append(dotted)
        raise NotInThisEdition(dotted, lesson or (fixtures[0] if fixtures else "?"), exercise, released)
    for name, plain in entry.get("after", {}).items():
        _restore(arguments[name], wire_codec.request_value(plain))
    if "raises" in entry:
        raise _exception(entry["raises"])
    return wire_codec.request_value(entry["result"])


def key_of(dotted, arguments):
    """The fixture key of a call: sha256 of the dotted name and the bound arguments, exactly encoded
    (qkv.wire_codec.WireError when an argument is not plain data)."""
    return key_of_encoded(dotted, encode_arguments(arguments))


def key_of_encoded(dotted, encoded_arguments):
    return hashlib.sha256(f"{dotted}\n{encoded_arguments}".encode()).hexdigest()


def encode_arguments(arguments):
    """The bound arguments ({parameter: value}) as the JSON text a key is made of."""
    return wire_codec.encode([[name, value] for name, value in arguments.items()])


def fixture_path(lesson, folder=FOLDER):
    return pathlib.Path(folder) / f"lesson{lesson}.json.gz"


def write_fixtures(lesson, entries, folder=FOLDER):
    """Write one lesson's {key: entry} (the format `answer` reads) and return the file's path."""
    path = fixture_path(lesson, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": FORMAT, "lesson": lesson, "entries": entries}, separators=(",", ":"))
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same fixtures make the same bytes
        f.write(text.encode())
    return path


def read_fixtures(lesson, folder=FOLDER):
    """{key: entry} of a lesson, {} when the edition has no fixtures for it."""
    path = fixture_path(lesson, folder)
    if not path.exists():
        return {}
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} has fixtures of format {data.get('format')}; this qkv reads format {FORMAT}")
    return data["entries"]


# ---------------------------------------------------------------- looking a call up

def _entries(lesson):
    if lesson not in _LOADED:
        _LOADED[lesson] = read_fixtures(lesson)
    return _LOADED[lesson]


def _lookup(dotted, arguments, fixtures):
    try:
        key = key_of(dotted, arguments)
    except wire_codec.WireError:
        return None  # not plain data: no check passes such a thing to a withheld function
    for lesson in fixtures:
        entry = _entries(lesson).get(key)
        if entry is not None:
            return entry
    return _nearest(dotted, arguments, fixtures)


def _nearest(dotted, arguments, fixtures):
    """The one recorded call of `dotted` whose arguments have the same structure and exact parts as these and
    whose real numbers are equal to RELATIVE_TOLERANCE; None when there is no such call or more than one."""
    skeleton = _skeleton(list(arguments.values()))
    found = []
    for lesson in fixtures:
        if lesson not in _BY_NAME:
            index = {}
            for entry in _entries(lesson).values():
                recorded = [value for _, value in wire_codec.request_value(entry["args"])]
                index.setdefault(entry["name"], []).append((_skeleton(recorded), recorded, entry))
            _BY_NAME[lesson] = index
        for recorded_skeleton, recorded, entry in _BY_NAME[lesson].get(dotted, ()):
            if recorded_skeleton == skeleton and all(
                    _near(a, b) for a, b in zip(_reals(recorded), _reals(list(arguments.values())))):
                found.append(entry)
    if len(found) != 1:
        return None
    APPROXIMATE.append(dotted)
    return found[0]


def _skeleton(value):
    """`value` with its real numbers replaced by their type and shape (everything else kept exactly)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            return ("reals", value.dtype.str, value.shape)
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (float, np.floating, complex, np.complexfloating)):
        return ("real", type(value).__name__)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return (type(value).__name__, tuple(_skeleton(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((repr(k), _skeleton(v)) for k, v in value.items()))
    if isinstance(value, types.SimpleNamespace):
        return ("namespace", _skeleton(vars(value)))
    if hasattr(value, "_fields") or dataclasses.is_dataclass(value):
        fields = value._asdict() if hasattr(value, "_fields") else dataclasses.asdict(value)
        return (type(value).__qualname__, _skeleton(fields))
    if isinstance(value, functools.partial):
        return ("partial", _skeleton(value.func), _skeleton(list(value.args)), _skeleton(dict(value.keywords)))
    if isinstance(value, np.random.Generator):
        return ("generator", repr(value.bit_generator.state))
    if callable(value):
        return ("function", getattr(value, "__module__", None), getattr(value, "__qualname__", None))
    return ("exact", type(value).__name__, repr(value))


def _reals(value):
    """The real numbers of `value` (arrays and scalars), in the order `_skeleton` meets them."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            yield value
    elif isinstance(value, (float, np.floating, complex, np.complexfloating)):
        yield np.asarray(value)
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        for v in value:
            yield from _reals(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _reals(v)
    elif isinstance(value, types.SimpleNamespace):
        yield from _reals(vars(value))
    elif hasattr(value, "_fields") or dataclasses.is_dataclass(value):
        yield from _reals(value._asdict() if hasattr(value, "_fields") else dataclasses.asdict(value))
    elif isinstance(value, functools.partial):
        yield from _reals(list(value.args))
        yield from _reals(dict(value.keywords))


def _near(recorded, given):
    finite = np.abs(recorded[np.isfinite(recorded)])
    scale = float(finite.max()) if finite.size else 1.0
    return bool(np.allclose(given, recorded, rtol=RELATIVE_TOLERANCE, atol=RELATIVE_TOLERANCE * scale,
                            equal_nan=True))


# ---------------------------------------------------------------- replaying what the function did

def _restore(target, value):
    """Leave an argument the way the recorded call left it."""
    if isinstance(target, np.random.Generator):
        target.bit_generator.state = value.bit_generator.state
    elif isinstance(target, np.ndarray):
        target[...] = value
    elif isinstance(target, list):
        target[:] = value
    elif isinstance(target, dict):
        target.clear()
        target.update(value)
    elif isinstance(target, types.SimpleNamespace):
        vars(target).clear()
        vars(target).update(vars(value))


def describe_exception(error):
    """An exception as fixture data: its class (builtins, numpy or qkv) and its arguments."""
    kind = type(error)
    try:
        args = json.loads(wire_codec.encode(list(error.args)))
    except wire_codec.WireError:
        args = [str(error)]
    return {"type": f"{kind.__module__}:{kind.__qualname__}", "args": args}


def _exception(described):
    module_name, _, name = described["type"].partition(":")
    kind = None
    if module_name == "builtins":
        kind = getattr(builtins, name, None)
    elif module_name.split(".")[0] in ("numpy", "qkv") and name.isidentifier():
        kind = getattr(sys.modules.get(module_name), name, None)  # the module that raised it is loaded
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    return kind(*wire_codec.request_value(described["args"]))
