"""The student edition (issue 33): `make student-edition` builds, from a clean copy of the course, a repository that
holds what a graded class needs and nothing more (item 1), refuses an edition whose lessons need another lesson's
answers, Binder finds its configuration and its badge opens the first lesson (item 5), every lesson of the usual
term runs in it with the solution's answers pasted in (item 4), and its own `make lab` installs and serves the
first lesson.

Each edition is built once per module (the usual term of lesson N: LESSONS up to N, HANDOUTS up to N-1; those of
lessons 01 and 07 are the issue's two commands), and each notebook runs once.
"""
import ast
import functools
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.parse
import urllib.request

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

import qkv.lessons
from lessons import RELEASE, ROOT, SOLUTIONS, grade_id, read
from test_binder import TEST_ONLY, pip_names

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_edition import build as edition_build  # noqa: E402

LESSONS = qkv.lessons.LESSONS
VENV = pathlib.Path(sys.executable).parents[1]  # this checkout's environment: make runs the build with it
# the edition's files besides notebooks/ and source_lib/qkv/: exactly these (jupyter/student as in the course)
TOP_FILES = {"environment.yml", "postBuild", "start", "Makefile", "README.md", ".gitignore",
             "jupyter/lab-overrides.json", "jupyter/ipython_kernel_config.py", "source_lib/pyproject.toml"}
STUDENT_CONFIG = {str(p.relative_to(ROOT)) for p in (ROOT / "jupyter" / "student").rglob("*") if p.is_file()
                  and "__pycache__" not in p.parts}
LIBRARY_SUFFIXES = {".py", ".json", ".gz"}  # the student build of qkv: modules and their fixtures
SECRETS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "from qkv_grading", "import qkv_grading")
INSTRUCTOR_ONLY = {"solutions", "autograde", "tests", "bench", "qkv_grading", "qkv_autograde", "qkv_edition", ".ci"}


def usual_term(number):
    """(LESSONS, HANDOUTS) of the week lesson `number` is released: lessons up to it, handouts up to the one before."""
    index = [row.number for row in LESSONS].index(number)
    return LESSONS[:index + 1], LESSONS[:index]


def slugs(rows):
    return ",".join(row.slug for row in rows)


# ---------------------------------------------------------------- building editions (once per module)

def library_of(python):
    return subprocess.run([str(python), "-c", "import qkv; print(qkv.__file__)"], capture_output=True, text=True,
                          cwd="/", env={"PATH": os.environ["PATH"]}).stdout.strip()


@pytest.fixture(scope="module", autouse=True)
def this_environment_keeps_its_library():
    """Nothing here may install into this checkout's environment: its qkv stays this checkout's."""
    ours = str(ROOT / "source_lib" / "qkv" / "__init__.py")
    assert library_of(sys.executable) == ours
    yield
    assert library_of(sys.executable) == ours, "a test installed another qkv into this checkout's environment"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The course as a clean clone has it: the files git tracks or would track (nothing ignored: no .venv, no
    class data, no bytecode), copied from this checkout; `make` there runs with this checkout's environment."""
    folder = tmp_path_factory.mktemp("clone") / "qkv"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    return folder


def make_edition(course, dest, lessons=None, handouts=None):
    # with this checkout's environment, taken as it is: `-o` keeps make from installing the copy's library into it
    # (that environment's editable qkv would then be the copy's, for every process that uses it)
    command = ["make", "--no-print-directory", "-C", str(course), "-o", f"{VENV}/.installed", "student-edition",
               f"DEST={dest}", f"VENV={VENV}"]
    command += [f"LESSONS={lessons}"] if lessons is not None else []
    command += [f"HANDOUTS={handouts}"] if handouts is not None else []
    return subprocess.run(command, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def edition(course, tmp_path_factory):
    """edition(number): the repository of lesson `number`'s usual term, built the first time it is asked for. Lesson
    01's is `LESSONS=01-lookup`, lesson 07's `HANDOUTS=01-lookup,...,06-sinks` (LESSONS left to its default)."""
    parent = tmp_path_factory.mktemp("editions")

    @functools.cache
    def build(number):
        released, handouts = usual_term(number)
        dest = parent / f"term-{number}"
        if number == LESSONS[0].number:
            result = make_edition(course, dest, lessons=slugs(released))
        elif number == LESSONS[-1].number:
            result = make_edition(course, dest, handouts=slugs(handouts))
        else:
            result = make_edition(course, dest, lessons=slugs(released), handouts=slugs(handouts))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "MB" in result.stdout and re.search(r"took \d+\.\d s", result.stdout), result.stdout
        return dest

    return build


def files_of(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and ".git" not in p.relative_to(folder).parts[:1])


# ---------------------------------------------------------------- item 1: what it holds, and nothing more

@pytest.mark.parametrize("number", [LESSONS[0].number, LESSONS[-1].number])
def test_edition_holds_what_a_class_needs_and_nothing_more(edition, number):
    folder = edition(number)
    released, _ = usual_term(number)
    files = files_of(folder)
    notebooks = {f"notebooks/{row.slug}/{row.slug}.ipynb" for row in released}
    library = [f for f in files if f.startswith("source_lib/qkv/")]
    unexpected = [f for f in files if f not in TOP_FILES | STUDENT_CONFIG | notebooks and f not in library]
    assert not unexpected, f"the edition holds files nobody asked for: {unexpected}"
    assert TOP_FILES | STUDENT_CONFIG | notebooks <= set(files)
    assert "source_lib/qkv/__init__.py" in library and "source_lib/qkv/checks/lesson01.py" in library
    for name in library:
        parts = pathlib.PurePath(name).parts
        assert pathlib.PurePath(name).suffix in LIBRARY_SUFFIXES, name
        assert not set(parts) & (INSTRUCTOR_ONLY | {"__pycache__"}), name
    for row in released:  # the release, byte for byte (nbgrader generates it from solutions/)
        notebook = f"notebooks/{row.slug}/{row.slug}.ipynb"
        assert (folder / notebook).read_bytes() == (RELEASE / row.slug / f"{row.slug}.ipynb").read_bytes()
    for name in STUDENT_CONFIG | {"jupyter/lab-overrides.json", "jupyter/ipython_kernel_config.py",
                                  "source_lib/pyproject.toml"}:
        assert (folder / name).read_bytes() == (ROOT / name).read_bytes(), name

    for name in files:
        path = folder / name
        text = path.read_text(errors="replace") if path.suffix != ".gz" else ""
        for secret in SECRETS:
            assert secret not in text, f"{name} holds {secret!r}"
        if path.suffix == ".py":
            assigned = {t.id for node in ast.parse(text).body if isinstance(node, ast.Assign)
                        for t in node.targets if isinstance(t, ast.Name)}
            assert not assigned & {"ANSWERS", "EXPLANATIONS"}, f"{name} holds an answer table"

    git = functools.partial(subprocess.run, cwd=folder, capture_output=True, text=True, check=True)
    assert git(["git", "rev-list", "--count", "--all"]).stdout.strip() == "1", "one commit, no history"
    assert git(["git", "status", "--porcelain", "--ignored"]).stdout == "", "everything committed, nothing else"
    assert git(["git", "remote"]).stdout == ""
    assert sorted(git(["git", "ls-files"]).stdout.split()) == files


@pytest.mark.parametrize("number", [LESSONS[0].number, LESSONS[-1].number])
def test_edition_environment_start_and_post_build_are_the_students(edition, number):
    folder = edition(number)
    released, _ = usual_term(number)
    text = (folder / "environment.yml").read_text()
    assert "#test:" not in text
    course_environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    environment = yaml.safe_load(text)
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert pip_section == next(d["pip"] for d in course_environment["dependencies"] if isinstance(d, dict))
    assert environment["dependencies"][:2] == course_environment["dependencies"][:2]  # python, pip
    assert not pip_names(pip_section) & TEST_ONLY

    start = (folder / "start").read_text()
    assert "QKV_SELF_STUDY" not in start, "self-study answers stay off in a graded class"
    assert 'JUPYTER_CONFIG_PATH="$here/jupyter/student' in start and start.rstrip().endswith('exec "$@"')
    post_build = (folder / "postBuild").read_text()
    assert "pip install --no-deps -e source_lib" in post_build and "jupyter/lab-overrides.json" in post_build
    assert ("python -m qkv.model" in post_build) == any(row.uses_model for row in released)
    for script in ("start", "postBuild"):
        assert os.access(folder / script, os.X_OK) and (folder / script).read_text().startswith("#!/usr/bin/env bash")
        subprocess.run(["bash", "-n", str(folder / script)], check=True)
    makefile = (folder / "Makefile").read_text()
    assert f"FIRST_LESSON := {released[0].slug}" in makefile


# ---------------------------------------------------------------- the refusal

def test_an_edition_whose_lesson_needs_an_open_lessons_answer_is_refused(course, tmp_path):
    dest = tmp_path / "x"
    result = make_edition(course, dest, lessons="01-lookup,02-by-hand")
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "02-by-hand" in said and "qkv.attention.softmax" in said and "HANDOUTS=01-lookup" in said, said
    assert not dest.exists(), "nothing is written"
    # with lesson 01 a handout, the same edition is built
    assert make_edition(course, dest, lessons="01-lookup,02-by-hand", handouts="01-lookup").returncode == 0


def test_a_folder_that_is_not_empty_is_never_written_over(course, tmp_path):
    (tmp_path / "mine.txt").write_text("the instructor's")
    result = make_edition(course, tmp_path, lessons="01-lookup")
    assert result.returncode != 0 and "not empty" in result.stdout + result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


@functools.cache
def library_index(folder=ROOT / "source_lib" / "qkv"):
    return edition_build.Library(folder)


def _conflicts(released, handouts, library_folder=ROOT / "source_lib" / "qkv"):
    paths = qkv.lessons.course_paths(ROOT)
    return edition_build.conflicts(tuple(released), tuple(handouts), library_index(library_folder), paths.notebooks)


@pytest.mark.parametrize("number", [pytest.param(row.number, id=row.slug) for row in LESSONS])
def test_the_usual_term_of_every_lesson_is_accepted(number):
    found = _conflicts(*usual_term(number))
    assert not found, edition_build.refusal(found, *usual_term(number), lambda handouts: found)


def test_what_a_lesson_needs_is_read_from_the_source(tmp_path):
    # the whole course with no handout needs lessons 01-06 as handouts
    owners = {owner.slug for c in _conflicts(LESSONS, ()) for owner in c.owners}
    assert owners >= {row.slug for row in LESSONS[:-1]}
    # a library function that lesson 01's notebook uses, made to use lesson 07's answer: lesson 01 now needs 07,
    # found through the library's own source (no list names it)
    library = tmp_path / "qkv"
    shutil.copytree(ROOT / "source_lib" / "qkv", library, ignore=shutil.ignore_patterns("__pycache__"))
    uses = edition_build.notebook_uses(RELEASE / "01-lookup" / "01-lookup.ipynb", edition_build.Library(library))
    plot = sorted(u for u in uses if u.startswith("qkv.plots."))[0].rsplit(".", 1)[1]
    lines = (library / "plots.py").read_text().splitlines(keepends=True)
    body = next(node for node in ast.parse("".join(lines)).body if getattr(node, "name", None) == plot).body[0]
    indent = " " * body.col_offset
    lines.insert(body.lineno - 1, f"{indent}from qkv.cost import chunked_attention\n{indent}assert chunked_attention\n")
    (library / "plots.py").write_text("".join(lines))
    found = _conflicts(LESSONS[:1], (), library)
    assert [(c.function, [o.slug for o in c.owners]) for c in found] == [("qkv.cost.chunked_attention",
                                                                         ["07-cost"])]
    assert found[0].path == (f"qkv.plots.{plot}", "qkv.cost.chunked_attention")


# ---------------------------------------------------------------- item 5: Binder

@pytest.mark.parametrize("number", [LESSONS[0].number])
def test_binder_finds_the_editions_configuration_and_its_badge_opens_the_first_lesson(edition, number):
    folder = edition(number)
    assert not (folder / "binder").exists() and not (folder / ".binder").exists()
    readme = (folder / "README.md").read_text()
    link = re.search(r"\(https://mybinder\.org/v2/gh/[^)]*\)", readme).group(0)[1:-1]
    assert "YOUR-GITHUB-ACCOUNT/YOUR-COURSE-REPOSITORY" in link, "a placeholder the instructor replaces"
    urlpath = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)["urlpath"][0]
    assert urlpath == f"lab/tree/notebooks/{LESSONS[0].slug}/{LESSONS[0].slug}.ipynb"
    assert (folder / urlpath.removeprefix("lab/tree/")).is_file()
    # repo2docker --no-build, as make binder-check runs it for the course
    check = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "binder-check", f"BINDER_DIR={folder}"],
                           capture_output=True, text=True, timeout=900)
    if check.returncode != 0 and not (ROOT / ".venv-binder" / "bin" / "repo2docker").exists():
        pytest.skip("repo2docker could not be installed (make binder-check needs PyPI once):\n" + check.stderr[-1500:])
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "environment.yml, postBuild and start detected" in check.stdout


# ---------------------------------------------------------------- item 4: every lesson runs in its edition

def solved(edition_notebook, lesson):
    """The edition's notebook with each autograded answer cell's source replaced by the solution's (by grade_id)."""
    answers = {grade_id(c): c.source for c in read(lesson.slug, SOLUTIONS).cells
               if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")}
    notebook = nbformat.read(edition_notebook, as_version=4)
    pasted = 0
    for cell in notebook.cells:
        if cell.cell_type == "code" and grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
            pasted += 1
    assert pasted == len(answers), f"{lesson.slug}: {len(answers) - pasted} answers found no cell"
    return notebook


@pytest.mark.parametrize("number", [pytest.param(row.number, id=row.slug) for row in LESSONS])
def test_every_lesson_runs_in_its_edition_with_the_solutions_answers(edition, number):
    folder = edition(number)
    lesson = qkv.lessons.lesson(number)
    here = folder / "notebooks" / lesson.slug
    notebook = solved(here / f"{lesson.slug}.ipynb", lesson)
    notebook.cells.append(nbformat.v4.new_code_cell(
        "import importlib.util, qkv\nprint(qkv.__file__)\nprint(importlib.util.find_spec('qkv_grading') is None)"))
    # the edition's library, nothing of this checkout's: its own source_lib first, no autograde/ on the path
    env = {k: v for k, v in os.environ.items() if k not in ("QKV_SELF_STUDY", "QKV_AUTOGRADE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(folder / "source_lib"), MPLBACKEND="Agg")
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(here)}}).execute(env=env, cwd=str(here))
    # every visible check passed: a check that fails raises, and nbclient stops at the first error
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs).split()
    assert printed == [str(folder.resolve() / "source_lib" / "qkv" / "__init__.py"), "True"], printed


# ---------------------------------------------------------------- its own make lab

@pytest.fixture(scope="module")
def borrowed_venv(tmp_path_factory):
    """A new virtual environment that sees this environment's packages (a .pth line) without their qkv: the
    edition's `make install` finds every package present, and installs only the edition's library into it."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pathlib.Path(site, "borrowed-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def test_the_editions_make_lab_installs_and_opens_its_first_lesson(edition, borrowed_venv, tmp_path):
    folder = edition(LESSONS[0].number)
    token = "qkv-edition-token"
    runtime = tmp_path / "runtime"
    shared = pathlib.Path(sys.prefix) / "share" / "jupyter"
    # JupyterLab's built assets and extensions come from this environment (the borrowed one has none of its own)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTERLAB_DIR=str(shared / "lab"),
               JUPYTER_PATH=str(shared), PYTHONWARNINGS="ignore")
    for name in ("PYTHONPATH", "JUPYTER_CONFIG_PATH", "QKV_SELF_STUDY"):
        env.pop(name, None)
    options = (f"--no-browser --port=0 --ServerApp.port_retries=0 --ServerApp.ip=127.0.0.1 "
               f"--IdentityProvider.token={token}")
    log_path = tmp_path / "make-lab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(["make", "--no-print-directory", "-C", str(folder), "lab", f"VENV={borrowed_venv}",
                                    f"LAB_ARGS={options}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        base = None
        deadline = time.monotonic() + 600  # make install first: pip, the edition's library
        while base is None:
            assert process.poll() is None, "make lab stopped:\n" + log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, "JupyterLab did not start:\n" + log_path.read_text()[-4000:]
            for info in glob.glob(str(runtime / "jpserver-*.json")):
                try:
                    candidate = f"http://127.0.0.1:{json.loads(pathlib.Path(info).read_text())['port']}"
                    urllib.request.urlopen(f"{candidate}/api/status?token={token}", timeout=5)
                    base = candidate
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.5)
        first = LESSONS[0].slug
        with urllib.request.urlopen(f"{base}/api/contents/{first}/{first}.ipynb?token={token}", timeout=30) as reply:
            notebook = json.loads(reply.read())
        assert notebook["type"] == "notebook" and notebook["content"]["cells"]

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        try:
            urllib.request.build_opener(NoRedirect).open(f"{base}/?token={token}", timeout=30)
            location = ""
        except urllib.error.HTTPError as redirect:
            location = redirect.headers.get("Location", "")
        assert urllib.parse.urlparse(location).path == f"/lab/tree/{first}/{first}.ipynb", f"it opens {location!r}"
        with urllib.request.urlopen(f"{base}/lab/tree/{first}/{first}.ipynb?token={token}", timeout=30) as reply:
            assert reply.status == 200 and "JupyterLab" in reply.read().decode()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # the edition's library is what that environment imports (this checkout's keeps its own: the fixture above)
    assert library_of(borrowed_venv / "bin" / "python") == str(folder / "source_lib" / "qkv" / "__init__.py")
