"""Fill qkv.model_cache once: run the solution notebooks whose model results are the same for everyone.

`python -m qkv.fill_model_cache [LESSON ...]` (`make model` runs it; the grader calls `fill` once per class, before
its kernels). Kept apart from qkv.model_cache because it imports qkv.model, which reads the cache: the imports run
one way, this module -> qkv.model -> qkv.model_cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

from qkv import fetch, gguf_weights, model, model_cache, threads  # noqa: F401  qkv.model's import hashes the code a stamp names

# Lessons whose notebooks run the model on fixed inputs and time none of those runs. Not lesson 07: it times
# forward passes to show what a KV cache saves, and a result read back would make that measurement a lie.
CACHED_LESSONS = ("05-heads", "06-sinks")
ROOT = Path(__file__).resolve().parents[2]


def fill(lessons=CACHED_LESSONS, blas_threads=None, root=ROOT, timeout=900):
    """Run each lesson's solution notebook once per BLAS thread count, so its fixed model results land in the cache
    (they are kept per count: the rounding depends on it); returns the (lesson, count) pairs run. One already
    filled with this very notebook, code, weights and count is skipped (a stamp in the results folder).
    blas_threads: a count or several (default: $OPENBLAS_NUM_THREADS if set, else the counts a kernel here usually
    chooses, qkv.threads.expected_thread_counts)."""
    folder = model_cache.results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    ran = []
    for lesson, notebook in _cached_notebooks(lessons, root):
        for count in _counts(blas_threads):
            stamp, identity = _stamp(folder, lesson, count), _identity(notebook, count)
            with _locked(folder / f".fill-{lesson}.lock"):
                if _stamped(stamp, identity):
                    continue
                run_notebook(notebook, root, {"OPENBLAS_NUM_THREADS": str(count),
                                              model_cache.MODE_VARIABLE: "fill"}, timeout)
                stamp.write_text(json.dumps(identity))
                ran.append((lesson, count))
    return ran


def stale(lessons=CACHED_LESSONS, blas_threads=None, root=ROOT):
    """The (lesson, count) pairs `fill` would run: those whose stamp is missing or names another notebook, code,
    weights or count. Reads the stamps only (make grade's start-up check)."""
    folder = model_cache.results_dir()
    return [(lesson, count) for lesson, notebook in _cached_notebooks(lessons, root) for count in _counts(blas_threads)
            if not _stamped(_stamp(folder, lesson, count), _identity(notebook, count))]


def model_ready(directory=None):
    """True when `python -m qkv.model` has nothing to do: the GGUF is verified (its sha256 stamp) and its float32
    cache is of this very file (the cache's stamp). Nothing is hashed or loaded."""
    gguf = (Path(directory) if directory else fetch.cache_dir()) / fetch.GGUF_NAME
    return fetch.is_verified(gguf) and gguf_weights.cache_is_current(gguf_weights.cache_folder(gguf), gguf)


def _cached_notebooks(lessons, root):
    for lesson in lessons:
        notebook = Path(root) / "solutions" / lesson / f"{lesson}.ipynb"
        if lesson in CACHED_LESSONS and notebook.is_file():
            yield lesson, notebook


def _counts(blas_threads):
    """blas_threads as a list of counts (default: $OPENBLAS_NUM_THREADS if set, else the counts a kernel here usually
    chooses)."""
    if blas_threads is None:
        chosen = os.environ.get("OPENBLAS_NUM_THREADS")
        blas_threads = [int(chosen)] if chosen else threads.expected_thread_counts()
    return [int(blas_threads)] if isinstance(blas_threads, (int, str)) else [int(n) for n in blas_threads]


def _stamp(folder, lesson, count):
    return folder / f"filled-{lesson}-{count}-threads.json"


def _identity(notebook, count):
    return {"notebook": hashlib.sha256(notebook.read_bytes()).hexdigest(), "threads": count,
            **model_cache.computation_identity()}


def _stamped(stamp, identity):
    with contextlib.suppress(OSError, ValueError):
        return json.loads(stamp.read_text()) == identity
    return False


@contextlib.contextmanager
def _locked(path):
    # two grading workers warming up at once: the second waits, then finds the stamp
    import fcntl
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_notebook(path, root=ROOT, env=None, timeout=900):
    """Execute a notebook as nbgrader does (its folder, autograde/ importable); returns it with its outputs."""
    import nbformat
    from nbclient import NotebookClient
    from jupyter_client.manager import KernelManager

    notebook = nbformat.read(str(path), as_version=4)
    kernel_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(Path(root) / "autograde"), os.environ.get("PYTHONPATH")])), MPLBACKEND="Agg", **(env or {}))
    manager = KernelManager(kernel_name="python3")
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", km=manager,
                            resources={"metadata": {"path": str(Path(path).parent)}})
    with environment(kernel_env):  # the kernel inherits this process's environment
        client.execute()
    return notebook


@contextlib.contextmanager
def environment(values):
    """This process's environment is exactly `values` inside the block, and what it was after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print("usage: python -m qkv.fill_model_cache [LESSON ...]", file=sys.stderr)
        return 2
    try:
        ran = fill(tuple(argv) or CACHED_LESSONS)
    except Exception as error:  # the lessons still run, computing what the cache would have held
        print(f"qkv.fill_model_cache: could not fill {model_cache.results_dir()} ({type(error).__name__}: {error}); "
              f"the model lessons will compute their results on every run", file=sys.stderr)
        return 0
    print(f"model results cached in {model_cache.results_dir()}: ran "
          f"{', '.join(f'{lesson} at {count} BLAS thread(s)' for lesson, count in ran) or 'nothing (already filled)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
