"""`make grade LESSON=01-lookup`: from what an instructor downloads to what they upload, in one command.

    python -m qkv_autograde LESSON [--submissions export.zip|folder] [--jobs N] [--scheduler tcp://HOST:8786] [--force]

run in autograde/ (make grade does that). Steps: collect an LMS export into submitted/ (intake.py, with nbgrader's
zip_collect), grade every pending submission in parallel (parallel.py; locally one worker per core, or on a Dask
cluster with --scheduler or $DASK_SCHEDULER), write feedback, export grades.csv, and write the anomaly report and
the item analysis. Rerunning grades only what is missing or half-done; a finished class is a no-op without --force.
Feedback and the export run nbgrader's own code in processes already running (feedback.py), not as commands.
"""
import argparse
import concurrent.futures
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

import nbformat
from tqdm import tqdm

from . import feedback as feedback_pages
from . import bulk_grading, intake, item_analysis, parallel, report, submissions
from .converter import completely_graded

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_jobs():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LocalWorkers:
    """Worker processes on this machine, each warmed once for the lesson."""

    sees_the_course = True  # they can read the gradebook and autograded/, so they can write feedback too

    def __init__(self, jobs, lesson, settings=None):
        # Forked from this process, a worker starts with nbgrader, nbconvert and numpy already imported (about
        # 2 CPU-s each otherwise); forking is only safe while this process runs no other thread.
        context = "fork" if threading.active_count() == 1 else "spawn"
        self.pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=multiprocessing.get_context(context),
            initializer=parallel.warm_up, initargs=(lesson, settings))
        if context == "fork":
            self.pool.submit(os.getpid)  # fork now, before the progress bar starts its thread
        self.jobs = jobs

    def submit(self, fn, *args):
        return self.pool.submit(fn, *args)

    def close(self):
        self.pool.shutdown(wait=False, cancel_futures=True)


class DaskWorkers:
    """The same jobs on a Dask distributed cluster; results come back here, the only writer of the gradebook."""

    sees_the_course = False  # remote: no gradebook, no autograded/ folder

    def __init__(self, address, lesson, settings=None):
        from dask.distributed import Client

        self.client = address if not isinstance(address, str) else Client(address)
        self.client.run(parallel.warm_up, lesson, settings)

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def close(self):
        pass  # the cluster belongs to whoever started it


def _nbgrader_app(lesson, force, log_level="WARN"):
    from nbgrader.apps.autogradeapp import AutogradeApp

    app = AutogradeApp()
    app.initialize([lesson, f"--log-level={log_level}"] + (["--force"] if force else []))
    chain = list(app.config.Autograde.autograde_preprocessors)
    app.config.Autograde.autograde_preprocessors = [
        parallel.PooledExecute if getattr(p, "__name__", "") == "SandboxedExecute" else p for p in chain]
    parallel.PrefetchedSanitize.chain = list(app.config.Autograde.sanitize_preprocessors)
    app.config.Autograde.sanitize_preprocessors = [parallel.PrefetchedSanitize]
    return app


def _sanitized(app, lesson, student, notebook, path):
    """The notebook exactly as nbgrader's sanitize step will hand it to the execute step."""
    nb = nbformat.read(path, as_version=4)
    submitted = nbformat.writes(nb)
    resources = {"nbgrader": {"student": student, "assignment": lesson, "notebook": notebook,
                              "db_url": app.coursedir.db_url}}
    nb, _ = parallel.sanitize(parallel.PrefetchedSanitize.chain, app.config, nb, resources)
    parallel.SANITIZED[(student, notebook)] = (submitted, nbformat.writes(nb))
    return nb


def prefetch(app, lesson, workers, force, bar, regrade=()):
    """Stage every submission and send each pending one to a worker; returns (students sent, staging entries).
    `regrade`: students whose submission was collected again, graded anew even if graded before."""
    course = app.coursedir
    release, names = submissions.released(course, lesson)
    source = {n: nbformat.writes(nbformat.read(os.path.join(course.format_path(course.source_directory, ".", lesson),
                                                            f"{n}.ipynb"), as_version=4)) for n in names}
    settings = parallel.settings_of(app.config)
    sent = []
    staged_entries = submissions.stage(course.root, course.submitted_directory, lesson, names, release,
                                       course.student_id)
    for entry in staged_entries:
        staged = os.path.join(course.root, submissions.STAGED, entry.student, lesson, f"{entry.notebook}.ipynb")
        graded = os.path.join(course.format_path(course.autograded_directory, entry.student, lesson))
        if entry.student in regrade and os.path.isdir(graded):
            shutil.rmtree(graded)  # nbgrader regrades a submission whose graded copy is missing
        if entry.refused or not os.path.exists(staged) or (not force and completely_graded(graded)):
            continue
        nb = _sanitized(app, lesson, entry.student, entry.notebook, staged)
        future = workers.submit(parallel.execute_submission, lesson, nbformat.writes(nb), source[entry.notebook],
                                settings)
        future.add_done_callback(lambda _: bar.update())
        parallel.PENDING[(entry.student, entry.notebook)] = parallel.Pending(parallel.fingerprint(nb), future)
        sent.append(entry.student)
    bar.total = len(sent)
    bar.refresh()
    return sent, staged_entries


def _nbgrader(*args):
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args, "--log-level=WARN"],
                          capture_output=True, text=True)


def _ensure_assignment(lesson):
    """nbgrader grades only assignments its gradebook knows: a fresh course gets the lesson released first."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=HERE).load_config()
    try:
        with Gradebook(CourseDirectory(config=config).db_url) as gb:
            gb.find_assignment(lesson)
            return
    except MissingEntry:
        pass
    done = _nbgrader("generate_assignment", lesson, "--force")
    if done.returncode != 0:
        raise SystemExit(f"could not prepare {lesson} for grading:\n{done.stderr[-2000:]}")


def feedback(coursedir, lesson, sent, workers, force):
    """Feedback pages for the lesson's graded students, as `nbgrader generate_feedback lesson [--force]` writes them
    (without --force it skips the students whose pages are up to date); returns the students whose feedback failed.

    Local workers are warm and idle once grading is done: each writes the pages of a disjoint share of the class,
    reading the gradebook, which nobody writes by now. With a remote cluster, the pages are written here."""
    students = feedback_pages.graded_students(coursedir, lesson)
    if not workers.sees_the_course:
        return feedback_pages.generate(lesson, students, force)
    # the students just graded need new pages, the others are usually up to date: spread the first evenly. No more
    # shares than workers the pool has started (one per submission sent, up to jobs): a new one would start cold.
    graded = set(students)
    ordered = list(dict.fromkeys([s for s in sent if s in graded] + students))  # sent: once per notebook
    count = max(1, min(workers.jobs, len(sent)))
    shares = [ordered[k::count] for k in range(count) if ordered[k::count]]
    running = []
    for share in shares:
        try:
            running.append((share, workers.submit(feedback_pages.generate, lesson, share, force)))
        except RuntimeError:  # the pool is broken (a worker was lost during grading): written below, here
            running.append((share, None))
    failed = []
    for share, future in running:
        try:
            failed += future.result()
        except Exception as error:  # a worker lost while writing, or never given the share: written here instead
            if future is not None:
                print(f"qkv grader: a worker writing feedback failed ({error!r}); writing its share here",
                      file=sys.stderr)
            # --force: a worker lost half-way may have left a student's folder without its page, which nbgrader
            # would take for up to date; rewriting a page that was complete gives the same page
            failed += feedback_pages.generate(lesson, share, True)
    return sorted(failed)


def grade(lesson, submissions_path=None, jobs=None, scheduler=None, force=False, out=sys.stdout):
    os.chdir(HERE)
    warnings.filterwarnings("ignore", module="nbgrader")  # nbgrader's own SQLAlchemy session warnings, not ours
    started = time.monotonic()
    notes = []
    if submissions_path:
        notes = intake.collect(submissions_path, HERE, lesson)
    jobs = jobs or default_jobs()
    bulk_grading.enable()
    _ensure_assignment(lesson)
    app = _nbgrader_app(lesson, force)
    scheduler = scheduler or os.environ.get("DASK_SCHEDULER")
    settings = parallel.settings_of(app.config)
    workers = DaskWorkers(scheduler, lesson, settings) if scheduler else LocalWorkers(jobs, lesson, settings)
    parallel.PENDING.clear()
    parallel.SANITIZED.clear()
    parallel.MEASUREMENTS.clear()
    bar = tqdm(total=0, unit="submission", desc=f"grading {lesson}", file=sys.stderr, dynamic_ncols=True)
    try:  # the workers stay up after grading: local ones write the feedback
        try:
            recollected = {n["student"] for n in notes if n["name"] == "collected again"}
            sent, staged = prefetch(app, lesson, workers, force, bar, regrade=recollected)
            app.start()
        finally:
            bar.close()
        if notes:  # the intake's notes join the anomaly report the grading run wrote
            by_student = {}
            for n in notes:
                by_student.setdefault(n["student"], []).append({"name": n["name"], "detail": n["detail"]})
            report.write(HERE, app.coursedir.db_url, lesson, staged, by_student)
        for unclaimed in parallel.PENDING.values():  # sent, but nbgrader did not grade it: not worth waiting for
            unclaimed.future.cancel()
        failed_feedback = feedback(app.coursedir, lesson, sent, workers, force) if sent else []
    finally:
        workers.close()
    feedback_pages.export_grades("grades.csv")  # byte for byte `nbgrader export --to grades.csv`
    items = item_analysis.write(HERE, app.coursedir.db_url, lesson)
    return summary(lesson, sent, notes, failed_feedback, items, time.monotonic() - started, out)


def summary(lesson, sent, notes, failed_feedback, items, seconds, out):
    import csv
    report = os.path.join(HERE, f"anomalies-{lesson}.csv")
    rows = list(csv.DictReader(open(report))) if os.path.exists(report) else []
    flagged = [r for r in rows if r["anomalies"]]
    measured = parallel.MEASUREMENTS
    cpu = sum(m["cpu_seconds"] for m in measured) / len(measured) if measured else 0.0
    lines = [f"{lesson}: graded {len(sent)} submission(s) in {seconds:.0f} s "
             f"({len(rows) - len(sent)} already graded or refused); {len(flagged)} flagged in the anomaly report.",
             f"  CPU per submission (worker and its kernel): {cpu:.1f} s" if measured else "",
             f"  intake notes: {len(notes)}" if notes else "",
             f"  feedback failed for {len(failed_feedback)} student(s): {', '.join(failed_feedback)}"
             if failed_feedback else "",
             f"  grades:    {os.path.join(HERE, 'grades.csv')}",
             f"  anomalies: {os.path.join(HERE, f'anomalies-{lesson}.html')}",
             f"  items:     {items}" if items else "",
             f"  feedback:  {os.path.join(HERE, 'feedback')}/<student>/{lesson}/"]
    print("\n".join(line for line in lines if line), file=out)
    return {"sent": sent, "flagged": flagged, "measurements": list(measured), "seconds": seconds, "notes": notes,
            "failed_feedback": failed_feedback}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_autograde", description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson", help="the assignment, e.g. 01-lookup")
    parser.add_argument("--submissions", help="an LMS export (.zip) or a folder of submissions to collect first")
    parser.add_argument("--jobs", type=int, default=None, help=f"local workers (default: one per core, here {default_jobs()})")
    parser.add_argument("--scheduler", help="a Dask scheduler address (default: $DASK_SCHEDULER; none: local)")
    parser.add_argument("--force", action="store_true", help="grade again what is already graded")
    args = parser.parse_args(argv)
    grade(args.lesson, args.submissions, args.jobs, args.scheduler, args.force)
