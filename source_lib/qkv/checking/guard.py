"""The library must be the library: the tamper guard and the reference tripwire.

Grading compares with qkv's reference and numpy's own functions; a notebook that replaces them
(qkv.attention.softmax = my_softmax, np.allclose = lambda *a: True) would grade itself, so `assert_untampered`
refuses to grade it and `seal` makes a grader module's functions impossible to replace by assignment. A student's
function that calls into qkv's reference files is not graded (`no_reference_calls`).
"""
import contextlib
import functools
import glob
import importlib
import os
import sys
import threading
import types

import numpy as np

from qkv.checking.hints import Hint
from qkv.lessons import LESSONS

# the qkv package's folder (this package is inside it): code there is the library's, never the student's
LIBRARY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Files holding reference implementations (each lesson's concept module, as qkv.lessons.LESSONS names them), and
# the checks' own helpers (which compute right answers too); a student's function that calls into them is not graded.
REFERENCE_MODULES = tuple(dict.fromkeys(row.concept for row in LESSONS))
_REFERENCE_FILES = ({os.path.join(LIBRARY_DIR, name + ".py") for name in REFERENCE_MODULES}
                    | set(glob.glob(os.path.join(LIBRARY_DIR, "checks", "*.py"))))


# ---------------------------------------------------------------- the tamper guard

_REFERENCE = {name: importlib.import_module(f"qkv.{name}") for name in REFERENCE_MODULES}
# (module name, attribute) -> the function or class the module was loaded with
_ORIGINAL = {(module.__name__, attr): value for module in _REFERENCE.values() for attr, value in vars(module).items()
             if callable(value)}
_NUMPY_ORIGINAL = dict(vars(np))
_FIRST_SEEN = {}  # (module, attribute) -> object, for modules imported after this one
# packages whose modules are watched, and the folders trusted to define their functions; a grader package
# joins both when it seals its first module (`seal`)
_WATCHED_PACKAGES = ["qkv"]
_TRUSTED_DIRS = [LIBRARY_DIR, os.path.dirname(np.__file__), sys.prefix, sys.base_prefix]


def _foreign(value):
    """Defined in the notebook (or wrapping something that was), not by qkv, numpy, Python or a sealed grader."""
    if isinstance(value, functools.partial):
        return True
    code = getattr(value, "__code__", None)
    if code is not None:
        return not os.path.abspath(code.co_filename).startswith(tuple(_TRUSTED_DIRS))
    return getattr(type(value), "__module__", None) == "__main__"


def _watched_modules():
    packages = tuple(_WATCHED_PACKAGES)
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "numpy" or name in packages
                                   or name.startswith(tuple(p + "." for p in packages))):
            yield name, module


class _SealedModule(types.ModuleType):
    """A module of the grader: a notebook may add names to it but not replace or delete any."""

    def __setattr__(self, name, value):
        if name in self.__dict__:
            raise AttributeError(f"`{self.__name__}.{name}` belongs to the grader; a notebook cannot replace it")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        raise AttributeError(f"`{self.__name__}.{name}` belongs to the grader; a notebook cannot delete it")


def seal(module_name):
    """Make the named module's functions impossible to replace by plain assignment (hidden tests, checks).

    A module outside qkv (the hidden tests' package) also puts its package under `assert_untampered`'s watch,
    its folder trusted to define that package's functions.
    """
    package = module_name.split(".")[0]
    if package not in _WATCHED_PACKAGES:
        _WATCHED_PACKAGES.append(package)
        _TRUSTED_DIRS.append(os.path.dirname(os.path.abspath(sys.modules[package].__file__)))
    sys.modules[module_name].__class__ = _SealedModule


def protect(module_name):
    """Seal a module of this package, its functions recorded as the originals `assert_untampered` compares with."""
    _ORIGINAL.update({(module_name, attr): value for attr, value in vars(sys.modules[module_name]).items()
                      if callable(value)})
    seal(module_name)


def assert_untampered():
    """Refuse to grade when a qkv, grader or numpy function is not the one the library was loaded with."""
    for name, module in _watched_modules():
        for attr, value in list(vars(module).items()):
            if not callable(value):  # module-level data may change; functions and classes may not
                continue
            if name == "numpy":
                original = _NUMPY_ORIGINAL.get(attr, value)
            elif (name, attr) in _ORIGINAL:
                original = _ORIGINAL[(name, attr)]
            else:
                original = _FIRST_SEEN.setdefault((name, attr), value)
            if value is not original or _foreign(value):
                raise Hint(f"`{name}.{attr}` has been replaced in this notebook; grading needs the original "
                           f"library, so remove the code that changes it and restart the kernel.")


# ---------------------------------------------------------------- the reference tripwire

PROFILER_OFF = object()  # recorded among the offences when the student's code switched the profiler off


@contextlib.contextmanager
def no_reference_calls(allowed=()):
    """Record calls made from outside qkv's reference files into them while the body runs.

    `allowed`: functions the student may call (tools handed out, functions passed as arguments).
    Threads started meanwhile are watched too; switching the profiler off counts as an offence.
    """
    # a functools.partial handed over (a qkv function with some arguments bound) allows the function it wraps
    allowed_codes = {getattr(getattr(fn, "func", fn), "__code__", None) for fn in allowed} - {None}
    offenders = []
    previous, previous_threads = sys.getprofile(), threading.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename in _REFERENCE_FILES:
            caller = frame.f_back
            from_reference = caller is not None and caller.f_code.co_filename in _REFERENCE_FILES
            if not from_reference and frame.f_code not in allowed_codes:
                offenders.append(frame.f_code.co_name)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield offenders
    finally:
        if sys.getprofile() is not profile:
            offenders.append(PROFILER_OFF)
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


def is_reference(fn):
    module = getattr(fn, "__module__", "") or ""
    return module == "qkv" or module.startswith("qkv.")
