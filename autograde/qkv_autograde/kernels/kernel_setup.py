"""The student kernel's lifecycle in a grading process: the lesson's view of qkv (built once per process, removed
when the process that built it ends) and the walls a kernel of that lesson runs inside (sandbox.Sandbox's
arguments). Used by the grading step (preprocessors.SandboxedExecute) and by the workers that keep warm kernels
(parallel.py).
"""
import atexit
import multiprocessing.util
import os
import shutil

from qkv import NO_FRONT_END
from qkv.lessons import course_paths

from qkv_autograde.kernels import kernel_view, sandbox

_views = {}
RELEASED_LESSONS = str(course_paths().notebooks)


def library_view(lesson):
    """The kernel's qkv for this lesson, built once per grading process."""
    if lesson not in _views:
        _views[lesson] = kernel_view.build(lesson)
        # a forked worker inherits the entry but not the duty: only the process that built the view removes it
        at_exit(_remove_view, os.getpid(), os.path.dirname(_views[lesson]))
    return _views[lesson]


def at_exit(function, *args):
    """Run at the end of this process, whether it exits normally (atexit) or is a multiprocessing worker, which
    ends with os._exit and runs only multiprocessing's own finalizers."""
    atexit.register(function, *args)
    multiprocessing.util.Finalize(None, function, args, exitpriority=10)


def _remove_view(builder, folder):
    if os.getpid() == builder:
        shutil.rmtree(folder, ignore_errors=True)


def kernel_walls(lesson, memory_limit):
    """What a student kernel of `lesson` may see and use (sandbox.Sandbox's arguments). Read-only extras: the
    model's verified weights (named by QKV_CACHE: the kernel's home is not the grader's), and the released lessons,
    what every student has (lesson 06 measures a perplexity on the course's text). No front end will display the
    kernel's widgets, so they draw no pictures (qkv.widgets)."""
    return {"library_view": (kernel_view.LIBRARY, library_view(lesson)),
            "limits": sandbox.Limits(memory_bytes=memory_limit),
            "read_only": [_model_cache(), RELEASED_LESSONS],
            "env": {"QKV_CACHE": _model_cache(), NO_FRONT_END: "1"}}


def _model_cache():
    from qkv import fetch

    return str(fetch.cache_dir())
