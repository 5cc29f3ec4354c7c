"""A class graded in parallel: workers run the submissions, one coordinating process keeps the books.

The expensive part of grading a submission, running it in its sandbox and judging its test cells, needs no
gradebook (SandboxedExecute.execute). So the coordinator stages and sanitizes every pending submission exactly as
nbgrader's converter will, hands them to workers (local processes, one per core, or a Dask cluster), and then
runs nbgrader's own autograde in-process with `PooledExecute` in place of SandboxedExecute: for each submission
it takes the worker's result (checking it was computed from the very notebook nbgrader is grading), and nbgrader
does everything else as usual — scores into the gradebook, late penalties, files. Only this process writes the
gradebook, so workers never contend on sqlite, and the grades are those of a sequential run of the same grader.

A worker pays its start-up once (numpy, matplotlib, qkv, the lesson's hidden tests, the kernel's view of qkv,
and SmolLM2's weights for the lessons that run the model in the grader), and so do its kernels: every submission
gets a fresh sandboxed kernel of its own, forked from the worker's warm kernel template (forked_kernels.py), or
started afresh where no template can be made.

A Dask cluster gets the grader's own code from the coordinator (`code_for_workers`): its workers need the
environment (`make install`) but not this folder on their path, and every worker is warmed and checked before a
single submission is sent, so a cluster that cannot grade stops the run with the reason instead of leaving the
coordinator to grade the class alone.
"""
import dataclasses
import gc
import glob
import hashlib
import importlib
import io
import json
import logging
import os
import resource
import time
import zipfile

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from qkv import lessons

from qkv_autograde.kernels import forked_kernels, kernel_setup
from qkv_autograde.grading import preprocessors

_warm = set()
_templates = {}  # (lesson, memory limit) -> KernelTemplate, or None where none can be made


def uses_model(lesson):
    return lessons.lesson(lesson).uses_model  # lessons whose checks, and notebooks, run SmolLM2


def kernel_template(lesson, memory_limit):
    """This worker's warm kernel template for `lesson` (started on first use, again if it died), or None."""
    key = (lesson, memory_limit)
    template = _templates.get(key)
    if key in _templates and (template is None or template.alive):
        return template
    try:
        # the weights, and the hash of every model result the kernels will read from the cache they cannot write
        calls = ["qkv.model.load", "qkv.model_cache.verify_entries"] if uses_model(lesson) else []
        template = forked_kernels.KernelTemplate(**kernel_setup.kernel_walls(lesson, memory_limit), calls=calls)
        kernel_setup.at_exit(template.close)
    except forked_kernels.TemplateUnavailable as why:
        logging.getLogger("qkv_autograde").warning("qkv grader: no warm kernels on this worker (%s)", why)
        template = None
    _templates[key] = template
    return template


def warm_up(lesson, settings=None):
    """Everything a worker can do once for all the submissions of `lesson`."""
    if lesson in _warm:
        return os.getpid()
    blas_threads = share_blas_threads()
    shared_warm_up(lesson)
    if uses_model(lesson):  # lessons that check the student's attention inside SmolLM2, here
        from qkv import model
        model.load()
        fill_model_results(lesson, blas_threads)
    kernel_template(lesson, _memory_limit(settings))
    _warm.add(lesson)
    gc.collect()
    gc.freeze()  # what stays for every submission is never traversed by the collections each submission causes
    return os.getpid()


def shared_warm_up(lesson):
    """What every worker needs the same of: the grader's imports and the lesson's view of qkv. Done in the
    coordinator before it forks its local workers (issue 45), they inherit it instead of each doing it again (the
    view alone is about 0.7 CPU-s to build); a worker elsewhere (Dask) does it in warm_up."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    for name in (*(row.concept for row in lessons.LESSONS), "checking", "plots", "model"):
        importlib.import_module(f"qkv.{name}")
    importlib.import_module(lessons.lesson(lesson).hidden_tests)
    importlib.import_module(lessons.lesson(lesson).checks)
    kernel_setup.library_view(lesson)


def share_blas_threads():
    """This worker's share of the machine's free CPUs as BLAS threads (qkv.threads), for itself and, through the
    environment the sandbox passes on, for its kernels; returns the count (None: the instructor chose one).
    QKV_WORKERS, unless the grader set it: one worker per CPU, as grade_class starts them by default."""
    from qkv import threads
    if any(os.environ.get(name) for name in threads.THREAD_VARIABLES):
        return None
    os.environ.setdefault(threads.WORKERS_VARIABLE, str(len(os.sched_getaffinity(0))))
    count = threads.match_blas_threads()
    if count is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(count)
    return count


def fill_model_results(lesson, blas_threads):
    """Once per class (per machine, in truth: a stamp remembers it), run the lesson's solution notebook so the
    model results every submission recomputes on the same inputs are in qkv.model_cache, at the thread count
    the kernels use (the rounding depends on it). Kernels read them from the read-only cache; in the worker,
    what the hidden tests compute with qkv's own model and attention is stored as it goes."""
    from qkv import fill_model_cache, model_cache
    # the worker's own reference forwards (a hidden test's prompts) are stored too; its kernels cannot write
    os.environ.setdefault(model_cache.MODE_VARIABLE, "fill")
    try:
        fill_model_cache.fill((lesson,), blas_threads=blas_threads)
    except Exception as error:  # no cache only means every kernel computes, as before
        logging.getLogger("qkv_autograde").warning("qkv grader: could not fill the model results cache (%s)", error)


def worker_ready(lesson, settings=None):
    """Run on each worker of a cluster before grading: warm it for `lesson`; returns where its grader code is."""
    warm_up(lesson, settings)
    return {"pid": os.getpid(), "grader": os.path.dirname(os.path.abspath(__file__))}


GRADER_PACKAGES = ("qkv_autograde", "qkv_grading")  # the grader and the hidden tests; the environment has qkv


def grader_code():
    """(a zip of the grader's packages, its digest): the same bytes for the same code, whatever the files' dates."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in GRADER_PACKAGES:
            for path in sorted(glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True)):
                with open(path, "rb") as f:
                    archive.writestr(zipfile.ZipInfo(os.path.relpath(path, root)), f.read())
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:16]


def code_for_workers():
    """A Dask worker plugin that unpacks the grader's code into each worker's own folder (real files: a warm
    kernel template runs one of them as a script) and puts it first on the worker's path, on every worker,
    including those that join later. The class is defined inside this function so that Dask sends the class
    itself, by value: a worker could not import it from qkv_autograde before it has run."""
    from distributed import WorkerPlugin

    class GraderCode(WorkerPlugin):
        name = "qkv-grader-code"  # registered again (the next run), it replaces itself

        def __init__(self, data, digest):
            self.data, self.digest = data, digest

        def setup(self, worker):
            import io as _io
            import os as _os
            import sys as _sys
            import zipfile as _zipfile
            folder = _os.path.join(worker.local_directory, f"qkv-grader-{self.digest}")
            if not _os.path.isdir(folder):
                _zipfile.ZipFile(_io.BytesIO(self.data)).extractall(folder + ".part")
                _os.replace(folder + ".part", folder)
            if folder not in _sys.path:
                _sys.path.insert(0, folder)

    return GraderCode(*grader_code())


def by_name(function):
    """`function` as a Dask task that a scheduler without the grader's code can take: the scheduler unpickles every
    task it is sent ("Error during deserialization of the task graph"), and only the workers get the grader's code
    (code_for_workers). The closure below travels by value and imports the function on the worker."""
    module, name = function.__module__, function.__qualname__

    def call(*args):
        import importlib as _importlib
        return getattr(_importlib.import_module(module), name)(*args)

    call.__name__ = call.__qualname__ = name  # the task's name on the dashboard
    return call


def _cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def execute_submission(lesson, student, notebook_json, source_json, settings):
    """Run one sanitized submission (worker side) of `student` (the gradebook's id, which seeds the hidden tests'
    draws); returns (graded notebook JSON, measurements)."""
    warm_up(lesson, settings)
    started, cpu = time.perf_counter(), _cpu_seconds()
    executor = preprocessors.SandboxedExecute(**settings)
    template = kernel_template(lesson, executor.memory_limit)
    graded = executor.execute(nbformat.reads(notebook_json, as_version=4), lesson,
                              nbformat.reads(source_json, as_version=4), template, student=student)
    return nbformat.writes(graded), {
        "drawn_as": student, "worker": os.getpid(), "wall_seconds": time.perf_counter() - started,
        "cpu_seconds": _cpu_seconds() - cpu + executor.kernel_cpu_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "template_peak_rss_mb": template.peak_rss_mb() if template else 0.0, "forked": template is not None}


def fingerprint(nb):
    """What a worker's result depends on: the cells' type, text and nbgrader metadata."""
    return json.dumps([(c.cell_type, c.source, c.metadata.get("nbgrader", {})) for c in nb.cells], sort_keys=True)


@dataclasses.dataclass
class Pending:
    fingerprint: str
    future: object


PENDING = {}        # (student, notebook) -> Pending, filled by the coordinator before nbgrader runs
SANITIZED = {}      # (student, notebook) -> (the submission as read, as sanitized), likewise
MEASUREMENTS = []   # one dict per submission a worker graded
GRADED_HERE = []    # the students the coordinator graded itself (their worker failed, or their notebook changed)
FEED = None         # feed.Feed: what is sent to the workers, a window at a time ahead of nbgrader's pass


class PrefetchedSanitize(NbGraderPreprocessor):
    """nbgrader's sanitize chain, computed once: the coordinator ran it when it sent the submission to a worker
    (grade_class.prefetch), so the same notebook gets that result back instead of a second pass. Any other
    notebook goes through the chain."""

    chain = []  # the course's sanitize preprocessors, set by grade_class

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        if FEED is not None:  # sent now if it was not yet, and the window moves on
            FEED.reached(nbg["student"], nbg["notebook"])
        known = SANITIZED.pop((nbg["student"], nbg["notebook"]), None)
        if known is not None and known[0] == nbformat.writes(nb):
            return nbformat.reads(known[1], as_version=4), resources
        return sanitize(self.chain, self.config, nb, resources)


def sanitize(chain, config, nb, resources):
    for step in chain:
        nb, resources = step(config=config)(nb, resources)
    return nb, resources


class PooledExecute(preprocessors.SandboxedExecute):
    """SandboxedExecute that uses the worker's result for this submission, computed from the same notebook with the
    hidden tests' draws of the student nbgrader names (qkv_grading.draws_of)."""

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        pending = PENDING.pop((nbg["student"], nbg["notebook"]), None)
        if pending is not None and pending.fingerprint == fingerprint(nb):
            try:
                graded_json, measured = pending.future.result()
            except Exception as error:  # a worker lost (killed, out of memory, cluster gone): grade it here
                self.log.warning("qkv grader: the worker grading %s failed (%s); grading it here",
                                 nbg["student"], error)
            else:
                if measured.get("drawn_as") == nbg["student"]:
                    MEASUREMENTS.append(dict(measured, student=nbg["student"]))
                    return nbformat.reads(graded_json, as_version=4), resources
                # its hidden tests drew another student's inputs: the grade must be the one a regrade gives
                self.log.warning("qkv grader: the worker graded %s with the draws of %r; grading it here",
                                 nbg["student"], measured.get("drawn_as"))
        elif pending is not None:
            self.log.warning("qkv grader: %s changed between staging and grading; grading it here",
                             nbg["student"])
        GRADED_HERE.append(nbg["student"])
        return super().preprocess(nb, resources)


def _memory_limit(settings):
    return (settings or {}).get("memory_limit", preprocessors.SandboxedExecute.memory_limit.default_value)


def settings_of(config):
    """The SandboxedExecute settings of this course's config, for workers to use the very same."""
    section = config.get("SandboxedExecute", {})
    names = ("budget_seconds", "cell_timeout", "call_timeout", "memory_limit", "output_limit", "render_figures")
    return {name: section[name] for name in names if name in section}
