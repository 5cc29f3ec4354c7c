"""Which functions of a `qkv` folder answer an open exercise: each tried as the student's answer to the hidden tests.

`probe(library_folder, lessons)` lists what passes (`Passing`: the candidate's dotted path, the lesson, the exercise).
It serves the student edition (issue 33: nothing in an edition may answer one of its open exercises) and the grader's
kernel view (issue 34: nothing in the view of lesson N may answer one of lesson N's exercises), for any folder that
holds a package named `qkv`.

How, as grading does it:
- the candidates live in another process: a sandboxed kernel (qkv_autograde.kernels.sandbox) whose `qkv` is the folder's
  (PYTHONPATH first, the folder's package also bound where the editable install looks, the editable finder
  removed, and every `qkv` module the kernel imported checked to come from the folder). The kernel imports every
  module of the package (one that fails is reported, not fatal) and lists every top-level function, every class's
  staticmethod and classmethod, every method of a module-level object (and the object itself when callable), and
  every callable held in a module-level list, tuple, dict, dataclass or NamedTuple (mistake catalogues, Check
  declarations), each named by its dotted path (`qkv.checks.lesson01.SOFTMAX_MISTAKES[3][0]`), each once;
- an exercise is a hidden test that a solution notebook's test cell calls with the student's function
  (`hidden.softmax(softmax)`; the self-checks' `hidden.answer(...)` are not exercises). Its first call to the
  student's function is recorded here with a stand-in that stops the test there; a candidate fits when its
  signature binds that call (the number of positional arguments and the keywords);
- each fitting candidate is handed to the hidden test, which runs here with the full library, as the grader's
  RemoteFunction (qkv_autograde.kernels.student_kernel over qkv.wire: plain data in, plain data out; module `__main__`,
  as the student's own wrapper would be). The test stops at its first failure; one call has `call_seconds`.
  A test that raises nothing is a PASS: the finding. Where a test takes several of the student's functions
  (`hidden.generation_with_cache(attention_step, append_to_cache)`), the candidate takes each place in turn and
  the solution notebook's own functions, defined in the kernel, take the others;
- controls: the solution notebook's own functions, defined in the same kernel, must pass every exercise before the
  candidates run (otherwise a failing candidate would prove nothing) and after them (a candidate that broke the
  kernel's state would hide the ones after it). A control that passed before and fails after stops the probe.

`python -m qkv_edition.probe FOLDER --lessons 01-lookup[,...]` prints each passing candidate; exit 1 if any passes.
"""
import argparse
import ast
import dataclasses
import json
import sys
import time

import nbformat

from qkv import lessons as registry

from qkv_autograde.grading.verdicts import setup_imports
from qkv_edition.probe_exercises import Exercise, exercises, fits, quiet, solution_notebook  # noqa: F401 - named here
from qkv_edition.probe_kernel import GLUES, LIBRARY, PREFIX, CandidateKernel, ProbeError  # noqa: F401 - here too
from qkv_edition.probe_routes import ROUTES


@dataclasses.dataclass(frozen=True)
class Passing:
    """A candidate of the folder that passed an exercise's hidden test."""
    candidate: str   # dotted path in the folder's qkv: "qkv.sinks.log_softmax", "qkv.checks.lesson01.X[3][0]"
    lesson: str      # "01-lookup"
    exercise: str    # the hidden test's name (qkv_grading.lessonNN.<exercise>); "<test> as <argument>" when the test
    #                  takes several of the student's functions and the candidate stood for <argument>

    def __str__(self):
        return f"{self.lesson} {self.exercise}: {self.candidate} passes"


@dataclasses.dataclass
class Report:
    """Everything one probe run found; `passing` is the finding."""
    passing: list = dataclasses.field(default_factory=list)
    import_failures: list = dataclasses.field(default_factory=list)   # (module, "Error: message")
    candidates: int = 0
    tried: dict = dataclasses.field(default_factory=dict)           # exercise label -> candidates tried
    controls_before: dict = dataclasses.field(default_factory=dict)  # exercise label -> None (passed) or why not
    controls_after: dict = dataclasses.field(default_factory=dict)
    not_probed: list = dataclasses.field(default_factory=list)       # (exercise label, why)
    isolation: str = ""
    qkv_file: str = ""
    seconds: dict = dataclasses.field(default_factory=dict)          # lesson -> seconds (kernel start in "start")


def _passes(test, arguments, kernel):
    """(whether the hidden test raises nothing with these arguments, the type name of what it raised): a refused
    answer fails, as in grading."""
    refused = kernel.refused_replies
    with quiet():
        try:
            test(*arguments)
        except Exception as error:
            return False, type(error).__name__
    return kernel.refused_replies == refused, None


# what a stub raises: no glue makes it answer, so its glued variants are not tried
STUB_ERRORS = {"NotInThisEdition", "WithheldDuringGrading"}


def _try(exercise, slot, target, kernel):
    """(passed, what it raised) of the hidden test with the kernel's `target` in the place of argument `slot` and the
    solution's own functions in the others."""
    arguments = [kernel.function(target, argument) if i == slot else
                 kernel.function(_solution_target(exercise, argument), argument)
                 for i, argument in enumerate(exercise.arguments)]
    return _passes(exercise.test, arguments, kernel.kernel)


def _found(report, passing, log):
    report.passing.append(passing)
    if log:
        log.info("PASSES %s %s: %s", passing.lesson, passing.exercise, passing.candidate)


PRESCREENED = 12  # candidates per call of the kernel's prescreen (each call has the probe's call_seconds)


def _prescreen(exercise, slot, targets, kernel):
    """[(target, glue)] whose glued answer to the hidden test's first call is the solution's, judged in the kernel."""
    first = exercise.first_arguments[slot] if len(exercise.first_arguments) > slot else None
    if first is None or not targets:
        return []
    screen, found = kernel.function("_qkv_probe_prescreen", "prescreen"), []
    for start in range(0, len(targets), PRESCREENED):
        with quiet():
            try:
                found += screen(_solution_target(exercise, exercise.arguments[slot]),
                                targets[start:start + PRESCREENED], list(first[0]), dict(first[1]))
            except Exception:
                continue  # a chunk that broke the call: its candidates' glue is not tried (the plain run was)
    return [(str(target), str(glue)) for target, glue in found]


def _solution_target(exercise, argument):
    return f"{PREFIX}s{exercise.lesson[:2]}_{argument}"


def _controls(exercises, kernel, available):
    """exercise label -> None when the solution's own functions pass it in the kernel, else why not."""
    verdicts = {}
    for exercise in exercises:
        label = exercise.name
        missing = [a for a in exercise.arguments if _solution_target(exercise, a) not in available]
        if missing:
            verdicts[label] = f"the solution notebook defines no {', '.join(missing)} in the kernel"
            continue
        arguments = [kernel.function(_solution_target(exercise, a), a) for a in exercise.arguments]
        refused = kernel.kernel.refused_replies
        with quiet():
            try:
                exercise.test(*arguments)
                verdicts[label] = None if kernel.kernel.refused_replies == refused else "an answer was refused"
            except Exception as error:
                verdicts[label] = f"{type(error).__name__}: {str(error)[:300]}"
    return verdicts


def run(library_folder, lessons, call_seconds=20, memory_bytes=2 << 30, pasted=None, controls=True, log=None,
        glued=True):
    """Probe `library_folder` (holding a package `qkv`) against the hidden tests of `lessons` (slugs or numbers).

    `pasted`: code a student would paste into a notebook cell, run in the kernel's globals; each callable it defines
    is a candidate too, named pasted.<name>; so is each function of probe_routes.ROUTES, named route.<name>. `glued`:
    each candidate is also tried behind every glue of GLUES (named "<candidate> <glue>"), unless it raised what a
    stub raises. Returns a Report; its `passing` is the finding."""
    lessons = [registry.lesson(lesson).slug for lesson in ([lessons] if isinstance(lessons, str) else lessons)]
    report = Report()
    started = time.monotonic()
    found = {lesson: exercises(lesson) for lesson in lessons}
    solutions = {}
    for lesson, listed in found.items():
        notebook = nbformat.read(solution_notebook(lesson), as_version=4)
        imports = ast.unparse(setup_imports(notebook))
        sources = max((exercise.solution_cells for exercise in listed), key=len, default=())
        solutions[lesson] = [imports, *sources]
    kernel = CandidateKernel(library_folder, call_seconds=call_seconds, memory_bytes=memory_bytes, log=log)
    try:
        catalogue = kernel.start(pasted=pasted, solutions=solutions if controls else None, routes=ROUTES)
        report.isolation = kernel.walls.mode
        report.qkv_file = catalogue["qkv_file"]
        report.import_failures = [tuple(failure) for failure in catalogue["failures"]]
        candidates = catalogue["candidates"]  # [global name in the kernel, dotted path, signature or None]
        report.candidates = len(candidates)
        available = set()
        if controls:
            available = {name for name in _kernel_globals(kernel) if name.startswith(f"{PREFIX}s")}
        report.seconds["start"] = round(time.monotonic() - started, 1)
        for lesson in lessons:
            lesson_started = time.monotonic()
            listed = found[lesson]
            before = _controls(listed, kernel, available) if controls else {}
            report.controls_before.update({f"{lesson} {k}": v for k, v in before.items()})
            failed = {k: v for k, v in before.items() if v is not None}
            if failed:
                raise ProbeError(f"the solution notebook's own functions fail {lesson}'s hidden tests in the probe's "
                                 f"kernel, so a candidate failing them would prove nothing: "
                                 + "; ".join(f"{k}: {v}" for k, v in failed.items())
                                 + (f" (solution cells that failed: {kernel.solution_failures})"
                                    if kernel.solution_failures else ""))
            for exercise in listed:
                for slot in range(len(exercise.arguments)):
                    label = exercise.label(slot)
                    others = [a for i, a in enumerate(exercise.arguments) if i != slot]
                    if any(_solution_target(exercise, a) not in available for a in others):
                        report.not_probed.append((f"{lesson} {label}", "the solution's other functions are not in "
                                                                       "the kernel"))
                        continue
                    fitting = [c for c in candidates if fits(c[2], exercise.first_calls[slot])]
                    report.tried[f"{lesson} {label}"] = len(fitting)
                    stubs = set()
                    for target, path, _ in fitting:
                        passed, raised = _try(exercise, slot, target, kernel)
                        if passed:
                            _found(report, Passing(path, lesson, label), log)
                        elif raised in STUB_ERRORS:
                            stubs.add(target)
                    if glued:
                        paths = {target: path for target, path, _ in fitting}
                        passed = {p.candidate for p in report.passing if p.lesson == lesson and p.exercise == label}
                        rest = [t for t in paths if t not in stubs and paths[t] not in passed]
                        for target, glue in _prescreen(exercise, slot, rest, kernel):
                            if _try(exercise, slot, f"{target}__{glue}", kernel)[0]:
                                _found(report, Passing(f"{paths[target]} {glue}", lesson, label), log)
            if controls:
                after = _controls(listed, kernel, available)
                report.controls_after.update({f"{lesson} {k}": v for k, v in after.items()})
                broken = [k for k, v in after.items() if v is not None and before.get(k) is None]
                if broken:
                    raise ProbeError(f"the solution's own {', '.join(broken)} ({lesson}) passed before the candidates "
                                     f"ran and fails after them: a candidate changed the kernel's state, so the "
                                     f"candidates after it were not judged fairly ({after[broken[0]]})")
            report.seconds[lesson] = round(time.monotonic() - lesson_started, 1)
    finally:
        kernel.close()
    return report


def _kernel_globals(kernel):
    kernel._run("_qkv_probe_globals = sorted(globals())", "listing the kernel's globals")
    return kernel.kernel.get("_qkv_probe_globals")


def probe(library_folder, lessons, call_seconds=20, memory_bytes=2 << 30, pasted=None, controls=True, log=None):
    """[Passing(candidate, lesson, exercise), ...]: what in `library_folder`'s qkv passes one of `lessons`' hidden
    tests as the student's answer (see `run` for the whole report)."""
    return run(library_folder, lessons, call_seconds=call_seconds, memory_bytes=memory_bytes, pasted=pasted,
               controls=controls, log=log).passing


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_edition.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder holding a package named qkv (an edition's source_lib, a kernel view's "
                                       "parent)")
    parser.add_argument("--lessons", required=True, help="comma-separated lessons whose hidden tests to run, "
                                                         "e.g. 01-lookup,02-by-hand")
    parser.add_argument("--call-seconds", type=float, default=20, help="most seconds one call of a candidate may take")
    parser.add_argument("--no-controls", action="store_true", help="skip running the solution's functions as controls")
    args = parser.parse_args(argv)
    report = run(args.folder, [s for s in args.lessons.split(",") if s], call_seconds=args.call_seconds,
                 controls=not args.no_controls)
    for module, error in report.import_failures:
        print(f"not imported: {module} ({error})", file=sys.stderr)
    for label, why in {**report.controls_before, **report.controls_after}.items():
        if why is not None:
            print(f"control failed: {label}: {why}", file=sys.stderr)
    for label, why in report.not_probed:
        print(f"not probed: {label}: {why}", file=sys.stderr)
    print(f"{report.candidates} candidates from {report.qkv_file} ({report.isolation}); tried per exercise: "
          f"{json.dumps(report.tried)}; seconds: {json.dumps(report.seconds)}", file=sys.stderr)
    for passing in report.passing:
        print(passing)
    return 1 if report.passing else 0


if __name__ == "__main__":
    sys.exit(main())
