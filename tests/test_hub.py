"""The course on a real JupyterHub (issue 42), as a small college runs it: JupyterHub from pip with
configurable-http-proxy from npm (make hub-test-setup), DummyAuthenticator, LocalProcessSpawner, unix users made and
removed here (one instructor, two students, homes 0700), everything on loopback.

`make hub-setup` as root from the instructor's checkout; the instructor releases (make hub-release); a student logs
in through a real browser, opens the Assignments tab, fetches, and submits; the other, hostile, hands in a notebook
that tries to read the hidden tests, the instructor's files and the classmate's home; the instructor collects and
runs `make grade` as themself (not root), which must keep every wall (sandbox, cgroup limits, warm kernels); each
student fetches their own feedback; and then, as each student, every read of the instructor's tree and of the
classmate's home, and every write into the instructor's tree, is refused.

Needs root (unix users, a hub spawning as them): skipped elsewhere, saying so, except under CI, where it fails.
"""
import concurrent.futures
import json
import os
import pathlib
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from lessons import ROOT, solved_release

LESSON = "01-lookup"
FULL_AUTOGRADED = 13  # lesson 01's autograded points; the written answer is graded by hand
BIN = pathlib.Path(sys.executable).parent
PROXY = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
CHROMIUM = "/usr/bin/chromium"
# kept between runs, and made before the tests by `make hub-test-setup` (.ci/install-hub-test, which CI runs): there
# hub-setup finds its environment installed and the instructor's .venv made, else it makes them (3 min here)
PREFIX = pathlib.Path(os.environ.get("HUB_TEST_PREFIX", "/opt/qkv-hubtest"))
MINUTE = 60_000
RUNUSER = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "/usr/sbin/runuser"
pytestmark = pytest.mark.grading_class

WHY_NOT = [why for why, missing in (
    ("not root (the test makes unix users and a hub that spawns servers as them)", os.geteuid() != 0),
    (f"no configurable-http-proxy at {PROXY} (make hub-test-setup)", not PROXY.exists()),
    (f"no {CHROMIUM} (make browser)", not os.path.exists(CHROMIUM)),
    ("no jupyterhub in this environment (make install: environment.yml's #test lines)",
     shutil.which("jupyterhub", path=str(BIN)) is None)) if missing]
if WHY_NOT and not os.environ.get("CI"):
    pytest.skip("a real hub needs: " + "; ".join(WHY_NOT), allow_module_level=True)

HOSTILE = """\
import glob, os
found = []
for pattern in {patterns!r}:
    for path in glob.glob(pattern, recursive=True)[:50]:
        try:
            found.append((path, open(path, errors='replace').read(200)))
        except OSError as error:
            found.append((path, type(error).__name__))
print('STOLEN', found)
"""


T0 = time.monotonic()


def lap(what):  # where the minutes go, in the test's output (-s)
    print(f"[test_hub {time.monotonic() - T0:5.0f} s] {what}", file=sys.stderr)


def run_as(user, argv, cwd=None, env=None, timeout=600):
    """`argv` run as `user` (runuser, a login-less switch: no root left), in a plain environment of theirs."""
    environment = {"PATH": f"{BIN}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": pwd.getpwnam(user).pw_dir,
                   "USER": user, **(env or {})}
    return subprocess.run([RUNUSER, "-u", user, "--", *argv], cwd=cwd or environment["HOME"], env=environment,
                          capture_output=True, text=True, timeout=timeout)


def as_user(user, argv, cwd=None, env=None, timeout=600):
    """run_as's output, failing the test on an error."""
    done = run_as(user, argv, cwd, env, timeout)
    assert done.returncode == 0, f"{argv} as {user}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_processes_of(uid):
    """Whatever still runs as a user this test made (their servers' kernels), so that userdel can remove them."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def users():
    tag = secrets.token_hex(2)
    names = {"instructor": f"qkvi{tag}", "alice": f"qkva{tag}", "bob": f"qkvb{tag}"}
    for name in names.values():
        subprocess.run(["useradd", "--create-home", "-K", "HOME_MODE=0700", "--shell", "/bin/bash", name], check=True)
    yield names
    for name in names.values():
        kill_processes_of(pwd.getpwnam(name).pw_uid)
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    for hierarchy in ("memory", "pids"):  # the instructor's delegated cgroup subtree, empty once grading is over
        subtree = pathlib.Path("/sys/fs/cgroup", hierarchy, f"qkv-{names['instructor']}")
        for _ in range(50):  # a cgroup whose last process has just died may be busy for a moment
            try:
                subtree.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


@pytest.fixture(scope="module")
def course(users):
    """The instructor's checkout: this working tree's files (tracked and new, as git would commit them), in a folder
    kept between runs (PREFIX/course) so that its .venv, which hub-setup makes for the instructor, is made once per
    machine (70 s here) and not once per run; hub-setup gives it to this run's instructor."""
    checkout = PREFIX / "course"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for kept in ("autograde", "solutions", "notebooks", "source_lib", "jupyter", "tests", "bench"):
        shutil.rmtree(checkout / kept, ignore_errors=True)  # no file of an earlier run's, no class data
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    (checkout / ".git").mkdir(exist_ok=True)  # stands for the clone's history: readable by the instructor alone
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.chmod(PREFIX, 0o755)
    return checkout


@pytest.fixture(scope="module")
def exchange():
    folder = pathlib.Path(f"/srv/qkv-hubtest-{os.getpid()}")
    yield folder / "exchange"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(users, course, exchange, tmp_path_factory):
    """make hub-setup, then a JupyterHub as a plain hub would run it (the lines hub-setup prints)."""
    said = subprocess.run(["make", "-s", "hub-setup", f"INSTRUCTOR={users['instructor']}", f"PREFIX={PREFIX}",
                           f"EXCHANGE={exchange}"], cwd=course, capture_output=True, text=True, timeout=900)
    assert said.returncode == 0, said.stdout[-3000:] + said.stderr[-3000:]
    lap("hub-setup done:\n" + said.stdout)
    folder = tmp_path_factory.mktemp("hub")
    port, api = free_port(), free_port()
    (folder / "jupyterhub_config.py").write_text(f"""
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "qkv-hub-test"
c.Authenticator.allowed_users = {set(users.values())!r}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.ip = "127.0.0.1"
c.JupyterHub.db_url = "sqlite:///{folder}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
{said.stdout.split("jupyterhub_config.d/):")[1].split("then, as")[0].replace("  c.", "c.")}
""")
    log = open(folder / "hub.log", "w")
    process = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(folder / "jupyterhub_config.py")], cwd=folder,
                               env=dict(os.environ, PATH=f"{BIN}:/usr/bin:/bin"), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/hub/api", timeout=5)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("JupyterHub did not start:\n" + (folder / "hub.log").read_text()[-3000:], pytrace=False)
            time.sleep(0.3)
    lap("hub started")
    yield {"base": base, "setup": said.stdout, "log": folder / "hub.log"}
    lap("stopping the hub")
    process.send_signal(signal.SIGINT)  # the hub stops the servers it spawned, then the proxy
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()
    lap("hub stopped")


def fetch_and_submit_in_the_browser(base, user, answers):
    """As `user`: log in, open the Assignments tab from the Nbgrader menu, fetch the lesson, hand in `answers`."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                          "--no-first-run", "--disable-background-networking"])
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(2 * MINUTE)
        expect.set_options(timeout=2 * MINUTE)
        page.goto(f"{base}/hub/login")
        page.fill("#username_input", user)
        page.fill("#password_input", "qkv-hub-test")
        page.click("#login_submit")
        page.wait_for_url(f"**/user/{user}/lab**", timeout=3 * MINUTE)
        page.locator("#jp-MainMenu").get_by_text("Nbgrader", exact=True).click()
        page.get_by_text("Assignment List", exact=True).click()
        released = page.locator("#released_assignments_list")
        expect(released).to_contain_text(LESSON)
        released.get_by_role("button", name="Fetch").click()
        fetched = page.locator("#fetched_assignments_list")
        expect(fetched).to_contain_text(LESSON)
        home = pathlib.Path(pwd.getpwnam(user).pw_dir)
        notebook = home / LESSON / f"{LESSON}.ipynb"
        assert notebook.exists(), f"the browser's Fetch put nothing in {home}"
        nbformat.write(answers, notebook)  # what the student wrote (as root here: given back to them)
        shutil.chown(notebook, user, user)
        fetched.get_by_role("button", name="Submit").click()
        expect(page.locator("#submitted_assignments_list")).to_contain_text(LESSON, timeout=2 * MINUTE)
        browser.close()


PROBE = """\
import json, os, sys
targets, writable_roots = json.load(sys.stdin)
leaks = []
for path in targets:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.listdir(path)
        else:
            open(path, 'rb').read(1)
        leaks.append('read ' + path)
    except OSError:
        pass
for folder in writable_roots:
    try:
        with open(os.path.join(folder, '.qkv-probe'), 'w') as f:
            f.write('x')
        leaks.append('wrote in ' + folder)
    except OSError:
        pass
print(json.dumps(leaks))
"""


def everything_under(folder):
    paths, folders = [str(folder)], [str(folder)]
    for here, names, files in os.walk(folder):
        paths += [os.path.join(here, n) for n in names + files]
        folders += [os.path.join(here, n) for n in names]
    return paths, folders


def test_a_term_on_a_real_hub_keeps_every_student_out_of_the_instructors_tree_and_each_others(users, course,
                                                                                              exchange, hub):
    started = time.monotonic()
    instructor, alice, bob = users["instructor"], users["alice"], users["bob"]
    # hub-setup said what it did; a second run changes nothing and says so
    again = subprocess.run(["make", "-s", "hub-setup", f"INSTRUCTOR={instructor}", f"PREFIX={PREFIX}",
                            f"EXCHANGE={exchange}"], cwd=course, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "already has the course's packages" in again.stdout, again.stdout[-2000:]
    refused = subprocess.run(["make", "-s", "hub-setup", "INSTRUCTOR=nobody-like-this"], cwd=course,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "there is no user" in refused.stdout + refused.stderr
    not_root = run_as(instructor, ["make", "-s", "hub-setup", f"INSTRUCTOR={instructor}"], cwd=course)
    assert not_root.returncode != 0 and "run as root" in not_root.stdout + not_root.stderr

    lap("second hub-setup done")
    as_user(instructor, ["make", "-s", "hub-release", f"LESSON={LESSON}"], cwd=course)
    # the students' qkv answers no open exercise: lesson 01's reference is withheld from it
    probe = as_user(alice, [f"{PREFIX}/env/bin/python", "-c",
                            "import numpy as np, qkv, qkv.lookup\nprint(qkv.__file__)\n"
                            "try:\n    qkv.lookup.soft_lookup(np.ones((1, 2)), np.eye(2), np.eye(2))\n"
                            "except Exception as e:\n    print('WITHHELD', type(e).__name__)\n"])
    assert f"{PREFIX}/released/" in probe and "WITHHELD NotInThisEdition" in probe, probe

    lap("released")
    # bob: a hostile notebook, handed in from his terminal on the hub (the same students' settings), while alice
    # uses the browser
    hidden = str(course / "autograde" / "qkv_grading" / "lesson01.py")
    homes = {name: pwd.getpwnam(name).pw_dir for name in (instructor, alice, bob)}
    hostile = solved_release(LESSON, [])
    hostile.cells.insert(1, nbformat.v4.new_code_cell(HOSTILE.format(patterns=[
        hidden, f"{course}/solutions/**/*.ipynb", f"{homes[alice]}/**/*.ipynb", "/home/*/**/*.ipynb",
        f"{course}/autograde/gradebook.db", "/sys/fs/cgroup/memory/*/cgroup.procs"])))
    tools = {"PATH": f"{PREFIX}/env/bin:/usr/bin:/bin"}

    def bob_hands_in():
        as_user(bob, ["nbgrader", "fetch_assignment", LESSON], env=tools)
        nbformat.write(hostile, pathlib.Path(homes[bob]) / LESSON / f"{LESSON}.ipynb")
        shutil.chown(pathlib.Path(homes[bob]) / LESSON / f"{LESSON}.ipynb", bob, bob)
        as_user(bob, ["nbgrader", "submit", LESSON], env=tools)

    with concurrent.futures.ThreadPoolExecutor(1) as terminal:
        bob_done = terminal.submit(bob_hands_in)
        fetch_and_submit_in_the_browser(hub["base"], alice, solved_release(LESSON))
        lap("alice fetched and submitted in the browser")
        bob_done.result()
    lap("bob submitted")
    # the instructor, not root: collect, grade with every wall, feedback
    as_user(instructor, ["make", "-s", "hub-collect", f"LESSON={LESSON}"], cwd=course)
    for name in (alice, bob):
        folder = course / "autograde" / "submitted" / name / LESSON
        assert oct(folder.stat().st_mode & 0o777) == "0o700", f"{folder} is {oct(folder.stat().st_mode)}"
    lap("collected")
    graded = as_user(instructor, ["make", "-s", "grade", f"LESSON={LESSON}"], cwd=course)
    for weaker in ("isolation partial", "no warm kernels", "PermissionError"):
        assert weaker not in graded, graded[-3000:]
    assert "0 flagged in the anomaly report" in graded, graded[-3000:]
    # where a wall is missing, make grade stops and names the fix instead of grading quietly weaker
    weaker = run_as(instructor, ["make", "-s", "grade", f"LESSON={LESSON}", "FORCE=1"], cwd=course,
                    env={"QKV_SANDBOX_FORCE_PARTIAL": "1"})
    assert weaker.returncode != 0 and "not grading" in weaker.stderr and "make sandbox" in weaker.stderr, weaker.stderr
    lap("graded")
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course}/autograde/gradebook.db") as gb:
        scores = {s.student_id: s.score for s in gb.assignment_submissions(LESSON)}
    assert scores == {alice: FULL_AUTOGRADED, bob: 0}
    stolen = (course / "autograde" / "autograded" / bob / LESSON / f"{LESSON}.ipynb").read_text()
    assert "STOLEN" in stolen, "the hostile cell did not run"
    stub = {line for cell in hostile.cells for line in cell.source.splitlines()}
    alices = next(line for cell in solved_release(LESSON).cells for line in cell.source.splitlines()
                  if len(line.strip()) > 30 and line not in stub)  # a line of alice's answer, not of the release
    for secret in (next(line for line in open(hidden) if len(line.strip()) > 30), alices, "SQLite format"):
        assert json.dumps(secret.strip())[1:-1] not in stolen, f"the hostile notebook read {secret!r}"
    as_user(instructor, ["make", "-s", "hub-feedback", f"LESSON={LESSON}"], cwd=course)
    with concurrent.futures.ThreadPoolExecutor(2) as both:
        list(both.map(lambda name: as_user(name, ["nbgrader", "fetch_feedback", LESSON], env=tools), (alice, bob)))
    for name in (alice, bob):
        pages = list(pathlib.Path(homes[name]).glob(f"{LESSON}/feedback/*/{LESSON}.html"))
        assert len(pages) == 1 and f"Score: {scores[name]:.1f} / 15.0" in pages[0].read_text(), (name, pages)

    lap("feedback fetched")
    # then, as each student: nothing of the instructor's tree or the classmate's home can be read or written
    instructor_paths, instructor_folders = everything_under(homes[instructor])
    course_paths, course_folders = everything_under(course)
    instructor_paths, instructor_folders = instructor_paths + course_paths, instructor_folders + course_folders
    for name, classmate in ((alice, bob), (bob, alice)):
        classmate_paths, _ = everything_under(homes[classmate])
        done = subprocess.run([RUNUSER, "-u", name, "--", f"{PREFIX}/env/bin/python", "-c", PROBE],
                              input=json.dumps([instructor_paths + classmate_paths, instructor_folders]),
                              capture_output=True, text=True, cwd="/", timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == [], f"{name} could: {json.loads(done.stdout)[:20]}"
    print(f"\nreal hub: {len(instructor_paths)} paths of the instructor's tree refused to each student; "
          f"term from release to feedback {time.monotonic() - started:.0f} s")
