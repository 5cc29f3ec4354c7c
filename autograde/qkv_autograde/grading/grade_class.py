"""`make grade LESSON=01-lookup`: from what an instructor downloads to what they upload, in one command.

    python -m qkv_autograde LESSON [--submissions export.zip|folder] [--jobs N] [--scheduler tls://HOST:8786] [--force]

run in autograde/ (make grade does that). Steps: collect an LMS export into submitted/ (lms_export.py, with nbgrader's
zip_collect), check the model a lesson runs and its results (startup.py), grade every pending submission in
parallel (parallel.py; locally one worker per core, or on a Dask cluster with --scheduler or $DASK_SCHEDULER, on TLS
with the course's certificates: cluster_security.py), write feedback, export grades.csv, and write the anomaly
report and the item analysis. Rerunning grades only what is missing or half-done; a finished class is a no-op
without --force. Feedback and the export run nbgrader's own code in processes already running, not as commands.
"""
import argparse
import contextlib
import concurrent.futures
import gc
import multiprocessing
import os
import shutil
import sys
import threading
import time
import warnings

import nbformat

from qkv import threads

from qkv_autograde.grading import bulk_grading, cluster_security, feed, parallel, variants
from qkv_autograde.grading.pages import AsGraded, feedback, progress, refresh_feedback
from qkv_autograde.reports import exports, feedback as feedback_pages, item_analysis, lms_feedback, report
from qkv_autograde.intake import lms_export, late, submissions
from qkv_autograde.grading.converter import QkvAutograde, completely_graded, ensure_in_gradebook
from qkv_autograde.grading.startup import COMMAND_STARTED, Startup, prepare_model
from qkv_autograde.kernels import isolation

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_jobs():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LocalWorkers:
    """Worker processes on this machine, each warmed once for the lesson."""

    sees_the_course = True  # they can read the gradebook and autograded/, so they can write feedback too
    where = "by the local workers"

    def __init__(self, jobs, lesson, settings=None):
        # Forked from this process, a worker starts with nbgrader, nbconvert and numpy already imported (about
        # 2 CPU-s each otherwise); forking is only safe while this process runs no other thread.
        context = "fork" if threading.active_count() == 1 else "spawn"
        if context == "fork":
            parallel.shared_warm_up(lesson)  # once here, inherited by every worker
            context = "fork" if threading.active_count() == 1 else "spawn"  # an import that started a thread
        # each worker and its kernels take their share of the free CPUs as BLAS threads (qkv.threads), not all
        os.environ.setdefault(threads.WORKERS_VARIABLE, str(jobs))
        self.pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=multiprocessing.get_context(context),
            initializer=parallel.warm_up, initargs=(lesson, settings))
        if context == "fork":
            # the workers' collections then leave what they inherit alone, instead of copying every page of it
            gc.collect()
            gc.freeze()
            self.pool.submit(os.getpid)  # fork now, before the progress bar starts its thread
        self.jobs = jobs

    def submit(self, fn, *args):
        return self.pool.submit(fn, *args)

    def close(self):
        self.pool.shutdown(wait=False, cancel_futures=True)


class DaskWorkers:
    """The same jobs on a Dask distributed cluster; results come back here, the only writer of the gradebook.

    The grader's code goes to the workers with the jobs (parallel.code_for_workers), and every worker is warmed and
    checked before grading starts: a cluster that cannot grade (no workers, a worker that cannot import or warm the
    grader) stops the run with the reason, instead of failing every task and leaving this process to grade the
    class alone."""

    sees_the_course = False  # remote: no gradebook, no autograded/ folder
    where = "on the cluster"

    def __init__(self, address, lesson, settings=None, wait_seconds=60, insecure=False):
        from dask.distributed import Client

        # before any connection: a plain tcp:// scheduler is refused unless opted out by name
        security = cluster_security.client_security(address, insecure) if isinstance(address, str) else None
        try:
            self.client = (address if not isinstance(address, str)
                           else Client(address, timeout=30, security=security))
        except (OSError, TimeoutError) as error:
            raise SystemExit(f"qkv grader: could not reach the Dask scheduler at {address} ({error}); start it "
                             f"(`dask scheduler`) or grade without --scheduler") from None
        try:
            self.client.wait_for_workers(1, timeout=wait_seconds)
        except TimeoutError:
            raise SystemExit(f"qkv grader: the Dask scheduler at {address} has no workers after {wait_seconds} s; "
                             f"start some (`dask worker {address} --nthreads 1`) or grade without --scheduler"
                             ) from None
        self.client.register_plugin(parallel.code_for_workers())
        ready = self.client.run(parallel.worker_ready, lesson, settings, on_error="return")
        broken = {worker: reply for worker, reply in ready.items() if isinstance(reply, BaseException)}
        if broken:
            raise SystemExit(f"qkv grader: {len(broken)} of the {len(ready)} Dask workers cannot grade {lesson}, "
                             "nothing was graded:\n" + "\n".join(f"  {worker}: {type(error).__name__}: {error}"
                                                                for worker, error in sorted(broken.items())))
        self.jobs = len(ready)

    def submit(self, fn, *args):
        return self.client.submit(parallel.by_name(fn), *args, pure=False)

    def close(self):
        pass  # the cluster belongs to whoever started it


class WhenNeeded:
    """The workers (`start`: LocalWorkers or DaskWorkers), started when the first submission is to be sent: a class
    with nothing new starts none (forked workers warming up took CPU from the rest of a run with nothing to grade)."""

    def __init__(self, start):
        self._start, self.workers, self.started_at = start, None, None

    def start(self):
        if self.workers is None:
            self.workers = self._start()
            self.started_at = time.monotonic()
        return self.workers

    @property
    def where(self):
        return self.workers.where if self.workers else "nowhere (nothing to grade)"

    def __getattr__(self, name):  # submit, jobs, sees_the_course: only ever asked once there is something to grade
        return getattr(self.start(), name)

    def close(self):
        if self.workers is not None:
            self.workers.close()


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


def prefetch(app, lesson, workers, force, regrade=()):
    """Stage every submission and start sending the pending ones to workers, a window at a time (feed.py); returns
    (students sent, a list that grows as they are sent; staging entries; the progress bar of grading). `regrade`:
    students whose submission was collected again, graded anew even if graded before.

    Each submission is prepared under its own guard: one that cannot be sanitized is not sent, and nbgrader's own
    pass (QkvAutograde) then grades it 0 with the reason, as the stock command does."""
    course = app.coursedir
    release, names = submissions.released(course, lesson)
    source = {n: nbformat.writes(nbformat.read(os.path.join(course.format_path(course.source_directory, ".", lesson),
                                                            f"{n}.ipynb"), as_version=4)) for n in names}
    settings = parallel.settings_of(app.config)
    staged_entries = submissions.stage(course.root, course.submitted_directory, lesson, names, release,
                                       course.student_id, submissions.NotebookLimits(config=app.config))
    QkvAutograde.staged_already = staged_entries  # nbgrader's pass (app.start) grades these, not a second staging
    pending = []
    for entry in staged_entries:
        staged = os.path.join(course.root, submissions.STAGED, entry.student, lesson, f"{entry.notebook}.ipynb")
        graded = os.path.join(course.format_path(course.autograded_directory, entry.student, lesson))
        if entry.student in regrade and os.path.isdir(graded):
            shutil.rmtree(graded)  # nbgrader regrades a submission whose graded copy is missing
        if not entry.refused and os.path.exists(staged) and (force or not completely_graded(graded)):
            pending.append((entry, staged))
    if pending:
        workers.start()  # forked now, before the progress bar starts its thread; a class with nothing new starts none
    bar = progress(f"grading {lesson}", len(pending), "submission")
    pending.sort(key=lambda item: (item[0].student, item[0].notebook))  # nbgrader's own order, as near as known
    window = feed.WINDOW_PER_WORKER * workers.jobs if pending else 0
    parallel.FEED = feed.Feed(app, lesson, workers, pending, source, settings, bar, window)
    parallel.FEED.fill()
    return parallel.FEED.sent, staged_entries, bar


def grade(lesson, submissions_path=None, jobs=None, scheduler=None, force=False, out=sys.stdout, allow_older=False,
          insecure_scheduler=False, allow_partial_isolation=False, force_variants=False):
    os.chdir(HERE)
    scheduler = scheduler or os.environ.get("DASK_SCHEDULER")
    if scheduler:  # refused before anything is collected or graded
        cluster_security.client_security(scheduler, insecure_scheduler)
    weaker = [] if scheduler else [f"isolation partial: {wall}" for wall in isolation.missing_isolation()]
    if weaker and not allow_partial_isolation:  # never silently weaker (issue 42); a cluster's workers check their own
        raise SystemExit("make grade: not grading.\n" + "\n".join(weaker) + "\n(anyway: ALLOW_PARTIAL_ISOLATION=1)")
    warnings.filterwarnings("ignore", module="nbgrader")  # nbgrader's own SQLAlchemy session warnings, not ours
    # a changed pool stops grading before anything is collected (in this process: a process of its own cost make
    # grade 1.2 CPU-s and 2 s of start-up, most of it importing what this one imports anyway)
    variants.main([lesson] + (["--force-variants"] if force_variants else []))
    started = time.monotonic()
    notes = []
    if submissions_path:
        with progress(f"collecting {os.path.basename(os.path.normpath(submissions_path))}", 1, "export") as bar:
            notes = lms_export.collect(submissions_path, HERE, lesson, allow_older=allow_older)
            bar.update()
    collecting = time.monotonic() - started
    jobs = jobs or default_jobs()
    bulk_grading.enable()
    app = _nbgrader_app(lesson, force)
    variants.stop_without_roster(HERE, lesson, app.config)  # a Canvas/Moodle class with variants needs ROSTER=
    exports.canvas_headers(app.config)  # a malformed header stops here, not after the class is graded
    ensure_in_gradebook(app.coursedir, lesson, app.log)  # the sanitize step below reads the lesson's cells there
    # what was graded earlier gets today's late penalty: an extension granted since reaches every page and CSV
    late.AssignLatePenaltiesHonouringTheLmsMark(config=app.config).reapply(lesson)
    settings = parallel.settings_of(app.config)
    built = prepare_model(lesson)  # before the workers fork: they find it in place
    workers = WhenNeeded(lambda: DaskWorkers(scheduler, lesson, settings, insecure=insecure_scheduler) if scheduler
                         else LocalWorkers(jobs, lesson, settings))
    origin = COMMAND_STARTED.pop() if COMMAND_STARTED else started
    parallel.PENDING.clear()
    parallel.SANITIZED.clear()
    parallel.FEED = None
    parallel.MEASUREMENTS.clear()
    parallel.GRADED_HERE.clear()
    try:  # the workers stay up after grading: local ones write the feedback
        recollected = {n["student"] for n in notes if n["name"] == "collected again"}
        sent, staged, bar = prefetch(app, lesson, workers, force, regrade=recollected)
        ready = workers.started_at or time.monotonic()  # nothing to grade: ready once that is known
        startup = Startup(ready - origin - collecting, parallel.uses_model(lesson), built)
        # local workers write each student's page as soon as nbgrader's pass has graded them (pages.py)
        early = (AsGraded(lesson, workers, force, HERE, app.coursedir.db_url)
                 if bar.total and workers.sees_the_course else None)
        QkvAutograde.observer = early
        try:
            app.start()
        finally:
            QkvAutograde.observer = None
            bar.close()
            parallel.FEED = None  # what nbgrader never reached is not sent
        if notes:  # the intake's notes join the anomaly report the grading run wrote
            by_student = {}
            for n in notes:
                by_student.setdefault(n["student"], []).append({"name": n["name"], "detail": n["detail"]})
            report.write(HERE, app.coursedir.db_url, lesson, staged, by_student)
        for unclaimed in parallel.PENDING.values():  # sent, but nbgrader did not grade it: not worth waiting for
            unclaimed.future.cancel()
        analysed = []
        def analyse():  # reads the gradebook, complete by now: written while the workers write the pages
            if early is not None and early.items is not None:
                return  # a worker writes it (pages.AsGraded)
            with contextlib.suppress(Exception):  # a failure is met again below, where it always was
                analysed.append(item_analysis.write(HERE, app.coursedir.db_url, lesson))
        failed_feedback = (feedback(app.coursedir, lesson, sent, workers, force, meanwhile=analyse, early=early)
                           if bar.total else refresh_feedback(app.coursedir, lesson))
        written_by_a_worker = early.items_path() if early is not None else None
        if written_by_a_worker:
            analysed.append(written_by_a_worker)
    finally:
        workers.close()
    with progress("grades.csv and item analysis", 2, "file") as files:
        feedback_pages.export_grades("grades.csv")  # byte for byte `nbgrader export --to grades.csv`
        files.update()
        items = analysed[0] if analysed else item_analysis.write(HERE, app.coursedir.db_url, lesson)
        files.update()
    bundles, _ = lms_feedback.write(app.coursedir, lesson, HERE)  # the pages, named for the LMS's bulk upload
    if weaker:  # the opt-in, said again where the instructor reads the result
        print("\n".join(f"{wall} (allowed by ALLOW_PARTIAL_ISOLATION)" for wall in weaker), file=out)
    return summary(lesson, bar.total, workers.where, notes, failed_feedback, items, time.monotonic() - started, out,
                   bundles, startup)


def summary(lesson, graded, where, notes, failed_feedback, items, seconds, out, bundles=(), startup=None):
    import csv
    report = os.path.join(HERE, f"anomalies-{lesson}.csv")
    rows = list(csv.DictReader(open(report, newline=""))) if os.path.exists(report) else []
    flagged = [r for r in rows if r["anomalies"]]
    measured = parallel.MEASUREMENTS
    cpu = sum(m["cpu_seconds"] for m in measured) / len(measured) if measured else 0.0
    lines = [f"{lesson}: graded {graded} submission(s) in {seconds:.0f} s "
             f"({len(rows) - graded} already graded or refused); {len(flagged)} flagged in the anomaly report"
             + (f"; {startup.said()}." if startup else "."),
             f"  {len(measured)} graded {where}, {len(parallel.GRADED_HERE)} here" if graded else "",
             f"  CPU per submission (worker and its kernel): {cpu:.1f} s" if measured else "",
             f"  intake notes: {len(notes)}" if notes else "",
             *what_is_left(rows),
             f"  feedback failed for {len(failed_feedback)} student(s): {', '.join(failed_feedback)}"
             if failed_feedback else "",
             f"  grades:    {os.path.join(HERE, 'grades.csv')}",
             f"  anomalies: {os.path.join(HERE, f'anomalies-{lesson}.html')}",
             f"  items:     {items}" if items else "",
             f"  feedback:  {os.path.join(HERE, 'feedback')}/<student>/{lesson}/",
             *(f"  LMS feedback: {path} ({pages} page(s), {os.path.getsize(path) / 1e6:.1f} MB), for the LMS's "
               f"bulk upload of feedback files (README, 'For instructors')" for path, pages, _ in bundles),
             *(f"  LMS feedback: {len(outside)} page(s) in {os.path.basename(path)} refer to something outside "
               f"the page (written before pages were self-contained? make grade --force writes them again)"
               for path, _, outside in bundles if outside)]
    print("\n".join(line for line in lines if line), file=out)
    return {"graded": graded, "flagged": flagged, "measurements": list(measured), "seconds": seconds,
            "notes": notes, "failed_feedback": failed_feedback, "graded_here": list(parallel.GRADED_HERE)}


def what_is_left(rows):
    """The summary's lines on what grading could not finish, from the anomaly report's CSV rows: the blank
    notebooks (a 0 that is a missing answer, not a grade) and the written answers that wait for hand grading."""
    blank = [report.who(r["student"], r.get("name", "")) for r in rows
             if submissions.BLANK in r["anomalies"].split("; ")]
    waiting = [dict(r, hand_grading=[cell for cell in r.get("hand_grading", "").split("; ") if cell]) for r in rows]
    return ([f"  {len(blank)} blank notebook(s): {', '.join(blank)}"] if blank else []) + \
        [f"  {report.waiting_for_hand_grading(waiting)}"]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_autograde", description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson", help="the assignment, e.g. 01-lookup")
    parser.add_argument("--submissions", help="an LMS export (.zip) or a folder of submissions to collect first")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"local workers (default: one per core, here {default_jobs()})")
    parser.add_argument("--scheduler", help="a Dask scheduler address, tls://HOST:8786 with the course's certificates "
                        "(make cluster-certificates) (default: $DASK_SCHEDULER; none: local)")
    parser.add_argument("--insecure-scheduler", action="store_true",
                        help="accept a plain tcp:// scheduler, which anyone who reaches it can join "
                        f"(or ${cluster_security.OPT_OUT}=1)")
    parser.add_argument("--force", action="store_true", help="grade again what is already graded")
    parser.add_argument("--allow-older", action="store_true", help="let an older copy replace a collected notebook")
    parser.add_argument("--allow-partial-isolation", action="store_true", help="grade even without every wall")
    parser.add_argument("--force-variants", action="store_true",
                        help="grade although a self-check pool changed after the edition was built")
    args = parser.parse_args(argv)
    grade(args.lesson, args.submissions, args.jobs, args.scheduler, args.force, allow_older=args.allow_older,
          insecure_scheduler=args.insecure_scheduler, allow_partial_isolation=args.allow_partial_isolation,
          force_variants=args.force_variants)
