"""The codec of qkv.wire (its public entry, where the threat model and the protocol are described): plain data
to JSON text and back, with the two directions' tables. A request (`decode`, in the kernel) may name qkv's
functions, partials, value types and generators; a reply (`decode_reply`, in the grader) carries data, REPLY_TYPES
and handles only, read under `Limits`.
"""
import base64
import dataclasses
import functools
import importlib
import inspect
import json
import math
import re
import sys
import types

import numpy as np

from qkv.heads import AttentionShape

MIME = "application/vnd.qkv.wire+json"
_NUMERIC_KINDS = "biufc"
_DTYPES = re.compile(r"[<>|=]?(b1|i[1248]|u[1248]|f[248]|c8|c16)\Z")  # numeric dtypes, by their numpy .str
_QKV_MODULE = re.compile(r"qkv(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
HANDLE_ID = re.compile(r"h[0-9]{1,9}\Z")  # what _keep hands out
_BIT_GENERATORS = {kind.__name__: kind for kind in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                                     np.random.Philox, np.random.SFC64)}

# The only classes a reply may build, by tag: value types a test may receive from a student's function. The grader
# builds them from their exact fields; a reply cannot name any other class.
REPLY_TYPES = {"qkv.heads:AttentionShape": AttentionShape}



class WireError(ValueError):
    """The other side sent something this codec does not carry."""


class ReplyRefused(WireError):
    """A reply from the student's kernel that the grader does not read; `anomaly` names it in the report."""

    anomaly = "malformed reply"


class MalformedReply(ReplyRefused):
    anomaly = "malformed reply"


class OversizedReply(ReplyRefused):
    anomaly = "oversized reply"


@dataclasses.dataclass(frozen=True)
class Limits:
    text_chars: int    # JSON text of one answer, checked before it is parsed
    depth: int         # nesting of lists, dicts and tags, checked before json.loads (which recurses)
    items: int         # JSON values in one answer: containers, numbers, strings
    array_bytes: int   # all the arrays of one answer together
    string_chars: int  # one string


# The largest honest answer of the hidden tests is a few MiB of float64 (lesson 07's [1024, 16] chunked attention,
# lesson 05's SmolLM2 heads); these leave room for a student's lists instead of arrays.
REPLY_LIMITS = Limits(text_chars=32 << 20, depth=64, items=1_000_000, array_bytes=24 << 20, string_chars=1 << 16)
ERROR_CHARS = {"type": 100, "message": 2000, "where": 1000}  # a student's exception, as the kernel describes it
NAME_CHARS = 200  # a handle's type, function and module names


# ---------------------------------------------------------------- encoding

def encode(value, keep=None):
    """Plain data (JSON text) for `value`.

    Without `keep`: a request, where qkv functions, partials, value types and generators travel by name. With
    `keep(obj) -> id` (the kernel's answers): what is not data or a REPLY_TYPES value is kept and named by a handle.
    """
    return json.dumps(plain(value, keep))


def plain(value, keep=None):
    """What `encode` writes as JSON text, before it is written: dicts, lists, strings, whole numbers, booleans and
    None (a message's content, which its session writes as JSON once)."""
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
    if isinstance(value, list):
        return [plain(v, keep) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"__tuple__": [plain(v, keep) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[plain(k, keep), plain(v, keep)] for k, v in value.items()]}
    if isinstance(value, types.SimpleNamespace):
        return {"__namespace__": {k: plain(v, keep) for k, v in vars(value).items()}}
    if keep is not None:
        tag = _qkv_name(type(value))
        if REPLY_TYPES.get(tag) is type(value):
            return {"__object__": tag, "fields": {k: plain(v, keep) for k, v in _fields_of(value).items()}}
        return handle_plain(value, keep)
    if isinstance(value, np.random.Generator):  # its exact state: the kernel draws what the grader would have
        return {"__generator__": plain(value.bit_generator.state, keep)}
    if _is_value_type(type(value)) and _qkv_name(type(value)):
        return {"__object__": _qkv_name(type(value)),
                "fields": {k: plain(v, keep) for k, v in _fields_of(value).items()}}
    if isinstance(value, functools.partial) and inspect.isfunction(value.func) and _qkv_name(value.func):
        return {"__partial__": _qkv_name(value.func), "args": plain(list(value.args), keep),
                "kwargs": plain(dict(value.keywords), keep)}
    if inspect.isfunction(value) and _qkv_name(value):
        return {"__function__": _qkv_name(value)}
    raise WireError(f"{type(value).__name__} cannot be sent to the student's kernel as plain data")


def handle_plain(value, keep):
    return {"__handle__": keep(value), "type": type(value).__name__[:NAME_CHARS], "callable": callable(value),
            "name": str(getattr(value, "__name__", type(value).__name__))[:NAME_CHARS],
            "module": str(getattr(value, "__module__", "") or "")[:NAME_CHARS]}


def _array_plain(array):
    array = np.asarray(array, order="C")  # not ascontiguousarray, which turns a 0-d array into 1-d
    return {"dtype": array.dtype.str, "shape": list(array.shape),
            "data": base64.b64encode(array.tobytes()).decode("ascii")}


def _is_value_type(cls):
    return isinstance(cls, type) and (dataclasses.is_dataclass(cls)
                                      or (issubclass(cls, tuple) and hasattr(cls, "_fields")))


def _fields_of(value):
    return value._asdict() if hasattr(value, "_fields") else {f.name: getattr(value, f.name)
                                                              for f in dataclasses.fields(value)}


def _field_names(cls):
    return tuple(cls._fields) if hasattr(cls, "_fields") else tuple(f.name for f in dataclasses.fields(cls))


def _qkv_name(obj):
    """'qkv.module:name' for a function or class defined at the top level of a qkv module, else None."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not (isinstance(module, str) and _QKV_MODULE.match(module) and isinstance(qualname, str)
            and qualname.isidentifier()):
        return None
    return f"{module}:{qualname}"


# ---------------------------------------------------------------- decoding, both directions

class _Reader:
    """One message decoded under `limits`: every JSON value counts against its budget of items and array bytes.

    `tags` maps a tag to the method that decodes it: the request and the reply direction have different tables.
    """

    def __init__(self, tags, limits, malformed, oversized, handle=None):
        self.tags, self.limits, self.handle = tags, limits, handle
        self.malformed, self.oversized = malformed, oversized
        self.items = self.array_bytes = 0

    def value(self, plain, depth=0):
        self.items += 1
        if self.items > self.limits.items:
            raise self.oversized(f"more than {self.limits.items} values in one answer")
        if depth > self.limits.depth:
            raise self.oversized(f"nested deeper than {self.limits.depth} levels")
        if plain is None or isinstance(plain, (bool, int)):
            return plain
        if isinstance(plain, str):
            return self.text(plain)
        if isinstance(plain, list):
            return [self.value(v, depth + 1) for v in plain]
        if not isinstance(plain, dict) or not plain:
            raise self.malformed(f"unexpected {type(plain).__name__} on the wire")
        tag = next(iter(plain))
        decoder = self.tags.get(tag) if isinstance(tag, str) else None
        if decoder is None:
            raise self.malformed(f"unexpected tag {str(tag)[:40]!r} on the wire")
        return decoder(self, plain, depth + 1)

    def text(self, plain, limit=None):
        limit = self.limits.string_chars if limit is None else limit
        if not isinstance(plain, str):
            raise self.malformed(f"a string was expected, not {type(plain).__name__}")
        if len(plain) > limit:
            raise self.oversized(f"a string of {len(plain)} characters (at most {limit})")
        return plain

    def fields(self, plain, *names):
        """The tagged dict's entries, which must be exactly `names` (the tag first)."""
        if not isinstance(plain, dict) or set(plain) != set(names):
            raise self.malformed(f"{names[0]} must have exactly the entries {', '.join(names)}")
        return [plain[name] for name in names]

    def sequence(self, plain, depth):
        if not isinstance(plain, list):
            raise self.malformed(f"a list was expected, not {type(plain).__name__}")
        return [self.value(v, depth) for v in plain]

    # ---- the tags both directions carry

    def float_(self, plain, depth):
        (text,) = self.fields(plain, "__float__")
        try:
            return float(self.text(text, 40))
        except ValueError:
            raise self.malformed(f"{text!r} is not a float") from None

    def array(self, plain, depth):
        (description,) = self.fields(plain, "__array__")
        return self.array_from(description)

    def scalar(self, plain, depth):
        (description,) = self.fields(plain, "__scalar__")
        array = self.array_from(description)
        if array.ndim != 0:
            raise self.malformed("a numpy scalar must have the shape ()")
        return array[()]

    def array_from(self, plain):
        dtype_text, shape, data = self.fields(plain, "dtype", "shape", "data")
        if not (isinstance(dtype_text, str) and _DTYPES.match(dtype_text)):
            raise self.malformed(f"arrays of dtype {str(dtype_text)[:40]!r} do not travel (numbers and booleans only)")
        dtype = np.dtype(dtype_text)
        if not (isinstance(shape, list) and len(shape) <= 32
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
            raise self.malformed("an array's shape must be a list of at most 32 sizes")
        nbytes = math.prod(shape) * dtype.itemsize
        self.array_bytes += nbytes
        if self.array_bytes > self.limits.array_bytes:
            raise self.oversized(f"arrays of more than {self.limits.array_bytes >> 20} MiB in one answer")
        if not (isinstance(data, str) and len(data) == 4 * ((nbytes + 2) // 3)):
            raise self.malformed("array data does not match its shape")
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            raise self.malformed("array data is not base64") from None
        try:
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        except (ValueError, OverflowError):  # an empty array of absurd sizes, [0, 10**30]
            raise self.malformed(f"an array of shape {str(shape)[:80]} cannot be made") from None

    def tuple_(self, plain, depth):
        (items,) = self.fields(plain, "__tuple__")
        return tuple(self.sequence(items, depth))

    def dict_(self, plain, depth):
        (pairs,) = self.fields(plain, "__dict__")
        if not (isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs)):
            raise self.malformed("a dict travels as a list of [key, value] pairs")
        decoded = {}
        for key, value in pairs:
            key = self.value(key, depth)
            key = tuple(key) if isinstance(key, list) else key
            try:
                hash(key)
            except TypeError:
                raise self.malformed(f"a dict key of type {type(key).__name__} is not hashable") from None
            decoded[key] = self.value(value, depth)
        return decoded

    def namespace(self, plain, depth):
        (entries,) = self.fields(plain, "__namespace__")
        if not (isinstance(entries, dict) and all(isinstance(k, str) and k.isidentifier() for k in entries)):
            raise self.malformed("a namespace's attributes must be names")
        return types.SimpleNamespace(**{self.text(k, NAME_CHARS): self.value(v, depth) for k, v in entries.items()})

    # ---- only in requests (the grader's own data, decoded in the kernel)

    def qkv_object(self, plain, depth):
        name, fields = self.fields(plain, "__object__", "fields")
        return self.build(_qkv_definition(name, _is_value_type), fields, depth)

    def qkv_function(self, plain, depth):
        (name,) = self.fields(plain, "__function__")
        return _qkv_definition(name, inspect.isfunction)

    def qkv_partial(self, plain, depth):
        name, args, kwargs = self.fields(plain, "__partial__", "args", "kwargs")
        kwargs = self.value(kwargs, depth)
        if not (isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
            raise self.malformed("a partial's keywords must be a dict of names")
        return functools.partial(_qkv_definition(name, inspect.isfunction), *self.sequence(args, depth), **kwargs)

    def generator(self, plain, depth):
        (state,) = self.fields(plain, "__generator__")
        state = self.value(state, depth)
        kind = _BIT_GENERATORS.get(state.get("bit_generator")) if isinstance(state, dict) else None
        if kind is None:
            raise self.malformed("unknown bit generator on the wire")
        bits = kind()
        bits.state = state
        return np.random.Generator(bits)

    # ---- only in replies (the student's data, decoded in the grader)

    def reply_object(self, plain, depth):
        tag, fields = self.fields(plain, "__object__", "fields")
        cls = REPLY_TYPES.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise self.malformed(f"{str(tag)[:80]!r} is not a value type a reply may carry")
        return self.build(cls, fields, depth)

    def build(self, cls, fields, depth):
        names = _field_names(cls)
        if not (isinstance(fields, dict) and set(fields) == set(names)):
            raise self.malformed(f"a {cls.__name__} has exactly the fields {', '.join(names)}")
        return cls(**{name: self.value(fields[name], depth) for name in names})

    def stand_in(self, plain, depth):
        key, kind, is_callable, name, module = self.fields(plain, "__handle__", "type", "callable", "name", "module")
        if not (isinstance(key, str) and HANDLE_ID.match(key)) or not isinstance(is_callable, bool):
            raise self.malformed("a handle is 'h' and a number, with callable true or false")
        if self.handle is None:
            raise self.malformed("a handle where none can be used")
        return self.handle({"__handle__": key, "type": self.text(kind, NAME_CHARS), "callable": is_callable,
                            "name": self.text(name, NAME_CHARS), "module": self.text(module, NAME_CHARS)})


_DATA_TAGS = {"__float__": _Reader.float_, "__array__": _Reader.array, "__scalar__": _Reader.scalar,
              "__tuple__": _Reader.tuple_, "__dict__": _Reader.dict_, "__namespace__": _Reader.namespace}
_REQUEST_TAGS = {**_DATA_TAGS, "__object__": _Reader.qkv_object, "__function__": _Reader.qkv_function,
                 "__partial__": _Reader.qkv_partial, "__generator__": _Reader.generator}
_REPLY_TAGS = {**_DATA_TAGS, "__object__": _Reader.reply_object, "__handle__": _Reader.stand_in}
# the grader's own requests are not counted; the depth stays under Python's recursion limit
_REQUEST_LIMITS = Limits(text_chars=sys.maxsize, depth=200, items=sys.maxsize, array_bytes=sys.maxsize,
                         string_chars=sys.maxsize)


def _qkv_definition(name, is_kind):
    """The function or value type defined at the top level of a qkv module that `name` ('qkv.module:name') names:
    looked up by that rule in the module's own namespace, never by walking attributes."""
    module_name, _, attr = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not (_QKV_MODULE.match(module_name) and attr.isidentifier()):
        raise WireError(f"{str(name)[:80]!r} does not name a function or value type of qkv")
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    obj = vars(module).get(attr)
    if not (is_kind(obj) and obj.__module__ == module_name and obj.__qualname__ == attr):
        raise WireError(f"{name} is not a function or value type defined in {module_name}")
    return obj


def decode(text):
    """A request from the grader (the kernel's side): the value `encode(value)` described."""
    return request_value(json.loads(text))


def request_value(plain):
    return _Reader(_REQUEST_TAGS, _REQUEST_LIMITS, WireError, WireError).value(plain)


def decode_reply(plain, handle=None, limits=REPLY_LIMITS):
    """A value of a reply (the grader's side): data, REPLY_TYPES and `handle(description)` stand-ins, nothing else;
    ReplyRefused for anything else or for more than `limits` allow."""
    return _Reader(_REPLY_TAGS, limits, MalformedReply, OversizedReply, handle).value(plain)

