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

def holds_only_what_a_class_needs(folder, files, released):
    """The allowlist over one tree of an edition (a commit's or the checkout's): its files, no solution, hidden
    test, answer table or bytecode. A released notebook may have corrections beside it (NN-name.corrected.ipynb)."""
    corrected = re.compile(r"notebooks/(\d\d-[a-z-]+)/\1\.corrected(-\d+)?\.ipynb$")
    notebooks = {f"notebooks/{row.slug}/{row.slug}.ipynb" for row in released}
    library = [f for f in files if f.startswith("source_lib/qkv/")]
    unexpected = [f for f in files if f not in TOP_FILES | STUDENT_CONFIG | notebooks and f not in library
                  and not corrected.match(f)]
    assert not unexpected, f"the edition holds files nobody asked for: {unexpected}"
    assert TOP_FILES | STUDENT_CONFIG | notebooks <= set(files)
    assert "source_lib/qkv/__init__.py" in library and "source_lib/qkv/checks/lesson01.py" in library
    for name in library:
        parts = pathlib.PurePath(name).parts
        assert pathlib.PurePath(name).suffix in LIBRARY_SUFFIXES, name
        assert not set(parts) & (INSTRUCTOR_ONLY | {"__pycache__"}), name
    for name in files:
        path = folder / name
        text = path.read_text(errors="replace") if path.suffix != ".gz" else ""
        for secret in SECRETS:
            assert secret not in text, f"{name} holds {secret!r}"
        if path.suffix == ".py":
            assigned = {t.id for node in ast.parse(text).body if isinstance(node, ast.Assign)
                        for t in node.targets if isinstance(t, ast.Name)}
            assert not assigned & {"ANSWERS", "EXPLANATIONS"}, f"{name} holds an answer table"


def every_commit_holds_only_what_a_class_needs(folder, scratch):
    """Each commit of an edition's history passes the allowlist, not only the last: a student's clone has them all.
    Returns the number of commits."""
    commits = subprocess.run(["git", "rev-list", "--all"], cwd=folder, capture_output=True, text=True,
                             check=True).stdout.split()
    for commit in commits:
        tree = pathlib.Path(scratch) / commit
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit], cwd=folder, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        shown = subprocess.run(["git", "show", "--no-patch", "--format=%B", commit], cwd=folder, capture_output=True,
                               text=True, check=True).stdout
        slugs_released = re.match(r"qkv student edition: lessons ([^(\n]+)", shown).group(1).split(", ")
        released = [row for row in LESSONS if row.slug in [s.strip() for s in slugs_released]]
        holds_only_what_a_class_needs(tree, files_of(tree), released)
    return len(commits)


@pytest.mark.parametrize("number", [LESSONS[0].number, LESSONS[-1].number])
def test_edition_holds_what_a_class_needs_and_nothing_more(edition, number, tmp_path):
    folder = edition(number)
    released, _ = usual_term(number)
    files = files_of(folder)
    holds_only_what_a_class_needs(folder, files, released)
    for row in released:  # the release, byte for byte (nbgrader generates it from solutions/)
        notebook = f"notebooks/{row.slug}/{row.slug}.ipynb"
        assert (folder / notebook).read_bytes() == (RELEASE / row.slug / f"{row.slug}.ipynb").read_bytes()
    for name in STUDENT_CONFIG | {"jupyter/lab-overrides.json", "jupyter/ipython_kernel_config.py",
                                  "source_lib/pyproject.toml"}:
        assert (folder / name).read_bytes() == (ROOT / name).read_bytes(), name

    git = functools.partial(subprocess.run, cwd=folder, capture_output=True, text=True, check=True)
    assert every_commit_holds_only_what_a_class_needs(folder, tmp_path) == 1, "a new edition: one commit, no history"
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
    return borrow_environment(tmp_path_factory.mktemp("venv") / "env")


def borrow_environment(venv):
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


# ---------------------------------------------------------------- issue 41: the week after, in place

def student_make(folder, *targets):
    """`make` in a student's clone as a student runs it: no variable of this checkout's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_CONFIG_PATH", "QKV_SELF_STUDY",
                                                             "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(folder), *targets], capture_output=True,
                          text=True, env=env, timeout=600)


def test_a_students_clone_takes_the_next_week_with_make_update_and_keeps_their_work(course, edition, tmp_path):
    def git(folder, *args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=folder,
                              capture_output=True, text=True, check=True).stdout

    # the instructor's week 01, whose lesson-01 notebook turns out to need a correction, published to a class repo
    instructor = tmp_path / "edition"
    shutil.copytree(edition(LESSONS[0].number), instructor, symlinks=True)
    first = f"notebooks/{LESSONS[0].slug}/{LESSONS[0].slug}.ipynb"
    released_first = (instructor / first).read_bytes()
    (instructor / first).write_bytes(released_first.replace(b"Check yourself", b"Check yuorself", 1))
    readme = (instructor / "README.md").read_text()  # the badge, pointed at the class repository once
    (instructor / "README.md").write_text(re.sub(r"<!-- Instructor: .*? -->\n", "", readme, flags=re.S)
                                          .replace("YOUR-GITHUB-ACCOUNT/YOUR-COURSE-REPOSITORY", "a-school/qkv-2027"))
    git(instructor, "commit", "--quiet", "-am", f"qkv student edition: lessons {LESSONS[0].slug} (a typo; the badge)")
    git(tmp_path, "clone", "--quiet", "--bare", str(instructor), "class.git")

    # a student clones it, installs (make lab does the same first), works and saves
    student = tmp_path / "student"
    git(tmp_path, "clone", "--quiet", "class.git", str(student))
    borrow_environment(student / ".venv")
    installed = student_make(student, "install")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    work = (student / first).read_bytes().replace(b'"# YOUR CODE HERE', b'"mine = 42  # my work\n# YOUR CODE HERE')
    assert work != (student / first).read_bytes()
    (student / first).write_bytes(work)
    (student / "notebooks" / "scratch.txt").write_text("my notes")
    before = {"venv": (student / ".venv").stat().st_ino, "python": (student / ".venv/bin/python").stat().st_ino,
              "installed": (student / ".venv/.installed").stat().st_mtime_ns}

    # the instructor builds week 02 on top of week 01 and pushes it
    week2, handouts2 = usual_term(LESSONS[1].number)
    built = make_edition(course, instructor, lessons=slugs(week2), handouts=slugs(handouts2))
    assert built.returncode == 0, built.stdout + built.stderr
    assert "(3 commits)" in built.stdout, built.stdout
    git(instructor, "push", "--quiet", str(tmp_path / "class.git"), "main")
    assert every_commit_holds_only_what_a_class_needs(instructor, tmp_path / "commits") == 3
    readme = (instructor / "README.md").read_text()
    assert "mybinder.org/v2/gh/a-school/qkv-2027/HEAD" in readme and "Instructor:" not in readme
    assert "YOUR-GITHUB-ACCOUNT" not in readme and LESSONS[1].slug in readme

    # two ways the student could be in the way: each stops the update, says why and what to do, changes nothing
    head = git(student, "rev-parse", "HEAD")
    with open(student / "README.md", "a") as readme:
        readme.write("my edit\n")
    refused = student_make(student, "update")
    assert refused.returncode != 0 and "README.md" in refused.stdout and "git checkout -- FILE" in refused.stdout
    git(student, "checkout", "--", "README.md")
    git(student, "commit", "--quiet", "--allow-empty", "-m", "my own commit")
    refused = student_make(student, "update")
    assert refused.returncode != 0 and "commits of your own" in refused.stdout and "git pull --rebase" in refused.stdout
    git(student, "reset", "--quiet", "--soft", "HEAD~1")
    assert git(student, "rev-parse", "HEAD") == head

    updated = student_make(student, "update")
    said = updated.stdout + updated.stderr
    assert updated.returncode == 0, said
    second = f"notebooks/{LESSONS[1].slug}/{LESSONS[1].slug}.ipynb"
    corrected = f"notebooks/{LESSONS[0].slug}/{LESSONS[0].slug}.corrected.ipynb"
    assert f"New lesson: {second}" in said and f"Corrected notebook: {corrected}" in said, said
    assert "Dependencies unchanged" in said and "pip" not in said, said
    took = re.search(r"make update took (\d+\.\d+) s", said)
    assert took, said
    du = [subprocess.run(["du", "-sh", *options, str(instructor)], capture_output=True, text=True).stdout.split()[0]
          for options in (["--exclude=.git"], [])]
    print(f"make update took {took.group(1)} s; the edition of week 02: {du[0]}, {du[1]} with its history")

    # their work byte for byte, the new lesson and the correction beside their notebook, the same environment
    assert (student / first).read_bytes() == work
    assert (student / "notebooks" / "scratch.txt").read_text() == "my notes"
    assert (student / second).read_bytes() == (RELEASE / LESSONS[1].slug / f"{LESSONS[1].slug}.ipynb").read_bytes()
    assert (student / corrected).read_bytes() == released_first
    assert before == {"venv": (student / ".venv").stat().st_ino, "python": (student / ".venv/bin/python").stat().st_ino,
                      "installed": (student / ".venv/.installed").stat().st_mtime_ns}, "the same .venv, untouched"
    assert git(student, "status", "--porcelain") == f" M {first}\n?? notebooks/scratch.txt\n"
    assert git(student, "rev-parse", "HEAD") == git(instructor, "rev-parse", "HEAD")


# ---------------------------------------------------------------- issue 41: what a student reads

def test_a_withheld_function_called_on_other_inputs_says_what_why_and_what_to_do_in_three_lines(edition):
    folder = edition(LESSONS[0].number)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import numpy as np\nfrom qkv.attention import softmax\nsoftmax(np.array([1.0, 2.0, 7.0]))")])
    env = {k: v for k, v in os.environ.items() if k not in ("QKV_SELF_STUDY", "QKV_AUTOGRADE", "PYTHONPATH")}
    env.update(PYTHONPATH=str(folder / "source_lib"))
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute(env=env, cwd=str(folder))
    (error,) = [o for o in notebook.cells[0].outputs if o.output_type == "error"]
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback)).splitlines()
    assert error.ename == "NotInThisEdition" and len(shown) <= 3, "\n".join(shown)
    assert "softmax" in shown[0] and shown[1].startswith("Why:") and shown[2].startswith("What to do:"), shown


def test_the_editions_texts_promise_nothing_it_lacks_and_name_every_option_of_make(edition):
    folder = edition(LESSONS[-1].number)
    for notebook in sorted((folder / "notebooks").glob("*/*.ipynb")):
        text = notebook.read_text().lower()
        assert "self-study" not in text and "qkv_self_study" not in text, f"{notebook.name} promises self-study mode"
    readme = (folder / "README.md").read_text()
    assert "self-study" not in readme.lower()
    environment = (folder / "environment.yml").read_text()
    for absent in ("formgrader", "feedback", "autograde", "make test", "grade_class"):
        assert absent not in environment, f"environment.yml speaks of {absent!r}, which the edition does not ship"
    options = re.findall(r"^([A-Z_]+)\s*\?=", (folder / "Makefile").read_text(), re.M)
    assert "LAB_ARGS" in options
    for option in options:
        assert f"`{option}`" in readme, f"the Makefile's {option} is not in the edition's README"


def test_validate_over_wrong_self_check_answers_says_they_are_recorded_and_graded_at_collection(edition, tmp_path):
    from qkv.checking.questions import answer_key
    key = answer_key()
    folder = edition(LESSONS[0].number)
    lesson = LESSONS[0]
    notebook = solved(folder / "notebooks" / lesson.slug / f"{lesson.slug}.ipynb", lesson)
    wrong = 0
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = "My answer in words."  # written answers are graded by hand: answered, not listed
        name = (grade_id(cell) or "").removeprefix("answer_") if cell.cell_type == "code" else None
        if name in key:
            correct = key[name][0]
            if callable(correct):  # a function of the student's numbers (issue 43): the empty key's, canonical
                from qkv.your_numbers import numbers
                correct = correct(numbers(lesson.slug, "").params[name])
            value = next(c for c in "abcd" if c != correct) if isinstance(correct, str) else 3 * abs(correct) + 1
            cell.source = f"{name} = {value!r}"
            wrong += 1
    assert wrong >= 3
    here = folder / "notebooks" / lesson.slug
    path = here / "wrong-answers.ipynb"  # beside the lesson's, as a student's copy would be
    nbformat.write(notebook, path)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("QKV_SELF_STUDY", "QKV_AUTOGRADE", "PYTHONPATH")}
        env.update(PYTHONPATH=str(folder / "source_lib"), JUPYTER_CONFIG_PATH=str(folder / "jupyter" / "student"),
                   MPLBACKEND="Agg")
        done = subprocess.run([str(pathlib.Path(sys.executable).parent / "nbgrader"), "validate", path.name],
                              cwd=here, env=env, capture_output=True, text=True, timeout=600)
    finally:
        path.unlink()
    said = " ".join(done.stdout.split())
    assert "Success!" not in said, said
    assert f"VALIDATE LISTS {wrong} CELL(S) BELOW" in said and "answer was recorded and is graded when the notebook " \
        "is collected" in said, said
    assert said.count("answer recorded") == wrong and "..." not in said, said
    assert said.count("It is graded when the notebook is collected: Validate cannot tell whether it is right") == wrong


# ---------------------------------------------------------------- issue 41, item 3: nothing reads as an open answer

@pytest.mark.parametrize("number", ["01", "05", "07"])
def test_nothing_the_edition_ships_reads_as_an_open_exercise(edition, number):
    """Every text file and git blob of the week's edition, against every withheld exercise's reference: the course's
    winnowing and a names-normalised body comparison of every function, nested function and lambda (lesson 01's
    catalogue held soft_lookup_by_temperature's body as its `_sweep_of` lambda). Findings name file and function."""
    from qkv_edition import reading

    released, handouts = usual_term(number)
    found = reading.read(edition(number), [r.slug for r in released], [r.slug for r in handouts])
    assert not found, f"week {number}'s edition reads as open exercises: " + "; ".join(map(str, found))


def test_the_reading_check_finds_a_renamed_copy_inside_a_lambda_and_a_pasted_reference():
    import inspect

    from qkv import cost
    from qkv_edition import reading

    planted = [("qkv/checks/lesson01.py", "import numpy as np\n\n\ndef _sweep_of(m):\n"
                "    return lambda a, b, c, ts: np.stack([m(a, b, c, t)[1] for t in np.asarray(ts, dtype=float)])\n"),
               ("README.md", "Here is a helper:\n\n" + inspect.getsource(cost.chunked_attention) + "\n")]
    found = reading.read(None, ["01-lookup", "07-cost"], [], texts=planted)
    assert {(f.where, f.function, f.reference) for f in found} >= {
        ("qkv/checks/lesson01.py", "_sweep_of.<lambda> (line 5)", "qkv.lookup.soft_lookup_by_temperature"),
        ("README.md", "", "qkv.cost.chunked_attention")}, found
