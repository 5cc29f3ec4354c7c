"""Helpers for lesson tests: build a 'student' from a source notebook's solution cells, swap in mutants."""
import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request

import nbformat
import pytest

import qkv.lessons
from qkv.checking import Hint

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
LESSONS = [row.slug for row in qkv.lessons.LESSONS]  # test_lesson_registry checks they are the folders of solutions/


def notebook_path(lesson, top=SOLUTIONS):
    return next((top / lesson).glob("*.ipynb"))


def read(lesson, top=SOLUTIONS):
    return nbformat.read(notebook_path(lesson, top), as_version=4)


def grade_id(cell):
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def is_solution(cell):
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution", False)


def _runnable(source):
    # IPython magics and shell lines mean nothing to exec()
    return "\n".join(line for line in source.splitlines() if not re.match(r"\s*[%!]", line))


def student(lesson, replace=None):
    """Namespace of a student who solved `lesson` perfectly except for the cells in `replace`.

    Runs the notebook's first code cell (imports), its `your_key` cell (the student's numbers, issue 43: the
    canonical ones, as no key is typed) and its solution cells in order; `replace` maps a
    solution cell's grade_id to the student code to use instead.
    """
    replace = dict(replace or {})
    namespace = {"__name__": "__main__"}
    cells = [c for c in read(lesson).cells if c.cell_type == "code"]
    exec(_runnable(cells[0].source), namespace)
    for cell in cells[1:]:
        if cell.get("id") == "your_key":
            exec(_runnable(cell.source), namespace)
        elif is_solution(cell):
            source = replace.pop(grade_id(cell), cell.source)
            try:
                exec(compile(textwrap.dedent(source), f"<{lesson}:{grade_id(cell)}>", "exec"), namespace)
            except Exception:  # like a notebook, a failing cell does not stop the cells after it
                pass
    assert not replace, f"no solution cells named {sorted(replace)} in {lesson}"
    return namespace


def each_draw(lesson, draws=3):
    """Run the loop's body `draws` times, each drawing the hidden tests' inputs as a student of its own: the draws are
    seeded by the student (qkv_grading.draws_of), so the same call twice outside one draws the same inputs."""
    import qkv_grading  # autograde/ is on the path once conftest has run
    for draw in range(draws):
        with qkv_grading.draws_of(lesson, f"draw-{draw}"):
            yield draw


def assert_rejected(check, fn, *args, match=None):
    """The hidden/visible check must fail on this mutant, with a Hint (not a crash of the grader)."""
    with pytest.raises(Hint, match=match) as caught:
        check(fn, *args)
    return str(caught.value)


def mutant(lesson, grade, source, name=None):
    """The function `name` (default: grade) as defined by `source` in an otherwise perfect notebook."""
    return student(lesson, {grade: source})[name or grade]


def solved_release(lesson, solved_ids=None):
    """The student release of `lesson` with the given solution cells (default: all) filled in from the
    source notebook: what a student hands in, with no hidden tests in it."""
    sources = {grade_id(c): c.source for c in read(lesson).cells if c.metadata.get("nbgrader", {}).get("solution")}
    solved_ids = set(sources) if solved_ids is None else set(solved_ids)
    nb = read(lesson, RELEASE)
    for cell in nb.cells:
        if grade_id(cell) in solved_ids:
            cell.source = sources[grade_id(cell)]
    return nb


@contextlib.contextmanager
def jupyter_lab(root, home, env=None, token="qkv-test-token"):
    """A JupyterLab server on `root`, as `make lab` starts it but headless and on loopback; yields its base URL.

    Port 0 lets the OS choose a free port at bind time (no window in which another process can take a port we
    picked), and the server's runtime file tells us which. Readiness is the server answering /api/status,
    waited for with a deadline, never a fixed sleep. Logs go to a file, not a pipe that nobody reads (a full
    pipe would block the server mid-test)."""
    runtime = pathlib.Path(home) / "runtime"
    env = dict(os.environ if env is None else env, JUPYTER_RUNTIME_DIR=str(runtime))
    log_path = pathlib.Path(home) / "lab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "jupyter"), "lab", "--no-browser", "--port=0",
             "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}"] + (["--allow-root"] if os.geteuid() == 0 else []),
            env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = _wait_until_serving(process, runtime, token, log_path, deadline=time.monotonic() + LAB_START_SECONDS)
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


LAB_START_SECONDS = 120  # a cold start on a loaded 2-core CI machine (first import, extension scan) can take a while


def _wait_until_serving(process, runtime, token, log_path, deadline):
    info = runtime / f"jpserver-{process.pid}.json"
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"JupyterLab did not start within {LAB_START_SECONDS} s:\n" + log_path.read_text()[-3000:],
                        pytrace=False)
        if info.exists():
            try:
                base = f"http://127.0.0.1:{json.loads(info.read_text())['port']}"
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                return base
            except (OSError, ValueError, KeyError):  # file half-written, or server not answering yet
                pass
        time.sleep(0.2)


# what a copy of the course leaves out: the class data, and cluster/ (the course's Dask keys: make cluster-certificates)
CLASS_DATA = ("gradebook.db", "gradebook.db-*", "submitted", "autograded", "feedback", "downloaded", ".staged",
              "__pycache__", "*.csv", "anomalies-*", "items-*", "history-*", "cluster")


def copy_course(parent):
    """A copy of the course (autograde/, solutions/, notebooks/) without any class data: what an instructor has
    after cloning the repository. Returns the copy's autograde/ folder, where nbgrader commands run."""
    course = pathlib.Path(parent) / "qkv"
    for folder in ("autograde", "solutions", "notebooks"):
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns(*CLASS_DATA))
    return course / "autograde"


def hand_in(instructor, lesson, student, notebook, name=None):
    """Put a student's notebook (or raw bytes) where nbgrader collects it, with a fixed submission time."""
    folder = pathlib.Path(instructor) / "submitted" / student / lesson
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"{lesson}.ipynb")
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    else:
        nbformat.write(notebook, path)
    (folder / "timestamp.txt").write_text("2026-11-29 09:00:00.000000 UTC")
    return path


def mutant_rejection_tests(lesson, hidden, visible, mutants_by_grade):
    """The two tests every lesson has for its mutants, parametrized: the hidden tests and the visible checks of
    each graded function (named like the function in both modules) reject every mutant of it. A test module
    assigns them to its own names so that pytest collects them there."""
    cases = [(grade, name, source) for grade, mutants in mutants_by_grade.items() for name, source in mutants.items()]
    ids = [f"{grade}:{name}" for grade, name, _ in cases]

    @pytest.mark.parametrize("grade, name, source", cases, ids=ids)
    def test_hidden_tests_reject_mutant(grade, name, source):
        assert_rejected(getattr(hidden, grade), mutant(lesson, grade, source))

    @pytest.mark.parametrize("grade, name, source", cases, ids=ids)
    def test_visible_checks_reject_mutant(grade, name, source):
        assert_rejected(getattr(visible, grade), mutant(lesson, grade, source))

    return test_hidden_tests_reject_mutant, test_visible_checks_reject_mutant


def error_outputs_of_a_graded_perfect_notebook(lesson, parent, grader_options=()):
    """Grade one perfect submission of `lesson` with the course's nbgrader (sandboxed kernel, `nbgrader autograde`)
    and return, for every cell of the autograded notebook that shows an error, (its grade_id or index, the text):
    what that student's feedback page would show as a failure."""
    bin_dir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    instructor = copy_course(parent)
    subprocess.run([str(bin_dir / "nbgrader"), "generate_assignment", lesson, "--force"], cwd=instructor, env=env,
                   check=True, capture_output=True)
    hand_in(instructor, lesson, "perfect", solved_release(lesson))
    graded = subprocess.run([str(bin_dir / "nbgrader"), "autograde", lesson, "--force", *grader_options],
                            cwd=instructor, env=env, capture_output=True, text=True, timeout=1800)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    nb = nbformat.read(next((instructor / "autograded" / "perfect" / lesson).glob("*.ipynb")), as_version=4)
    errors = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            text = "".join(output.get("traceback", [])) or output.get("text", "")
            if output.output_type == "error" or "Traceback" in text or "Error:" in text:
                errors.append((grade_id(cell) or index, f"{output.get('ename', '')} {text}"[-1500:]))
    return errors
