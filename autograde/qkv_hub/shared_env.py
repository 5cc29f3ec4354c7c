"""What every user's server on the hub runs, under PREFIX (default /opt/qkv), owned by root and readable by all:

    PREFIX/env       a virtual environment from a Python every user can run (not one under /root): the packages of
                     environment.yml's pip section and jupyterhub (for jupyterhub-singleuser), no qkv of its own
    PREFIX/released  the students' qkv: the student edition's build (qkv_edition.library.build_student_library) for
                     the lessons released to the exchange, found by every Python of PREFIX/env (a .pth file naming
                     PREFIX/released/current, a link to the build, replaced whole by `make hub-release`); owned by
                     the instructor, readable by all
    PREFIX/cache     SmolLM2 and the model results, read-only (the kernel spec's QKV_CACHE)
    PREFIX/env/etc/jupyter, .../share/jupyter   the students' Jupyter settings (jupyter/exchange: the Assignments
                     tab on, the instructor's panels off; the exchange's folder) and the kernel spec

The students' qkv answers no open exercise; the instructor grades with the full course from the checkout's own .venv.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

REQUIREMENT = re.compile(r"^ *- ([A-Za-z0-9_.-]+==\S+)$")
RELEASED = "released"  # PREFIX/released/current: the students' qkv (the instructor's folder)
HUB_REQUIREMENT = re.compile(r"^#test: *- (jupyterhub==\S+)$")  # one pin, for the hub test and the servers alike


def requirements(course):
    """environment.yml's pip section and its jupyterhub pin, as pip requirements."""
    lines = (course / "environment.yml").read_text().splitlines()
    return [m.group(1) for line in lines for m in [REQUIREMENT.match(line) or HUB_REQUIREMENT.match(line)] if m]


def install_environment(prefix, python, wanted):
    """PREFIX/env with exactly `wanted` installed; nothing is done when its stamp says it already has them."""
    env = prefix / "env"
    stamp = env / ".qkv-requirements"
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and (env / "bin" / "python").exists():
        return f"{env}: already has the course's packages"
    started = time.monotonic()
    if not (env / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(env)], check=True)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *wanted], check=True)
    stamp.write_text(digest)
    return f"{env}: the course's packages and jupyterhub installed ({time.monotonic() - started:.0f} s)"


def site_packages(prefix):
    out = subprocess.run([str(prefix / "env" / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip())


def released_lessons(exchange, course_id="qkv"):
    """The lessons released to the exchange (its outbound folders), in the course's order."""
    from qkv import lessons

    outbound = pathlib.Path(exchange) / course_id / "outbound"
    found = {p.name for p in outbound.iterdir()} if outbound.is_dir() else set()
    return tuple(row.slug for row in lessons.LESSONS if row.slug in found)


def student_library(prefix, released):
    """PREFIX/released/current -> a fresh student build of qkv for `released`; earlier builds are removed. The folder
    is the instructor's, so that `make hub-release` (not root) updates it with the lesson it releases."""
    from qkv_edition.library import build_student_library

    started = time.monotonic()
    folder = prefix / RELEASED
    build = folder / f"qkv-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    build_student_library(build, released, ())
    for path in [build, *build.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    temporary = folder / f".current-{os.getpid()}"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(build.name)
    os.replace(temporary, folder / "current")  # servers see the old build or the new one, never half of either
    for stray in folder.glob("qkv-*"):
        if stray != build:
            shutil.rmtree(stray, ignore_errors=True)
    which = ", ".join(released) or "no lesson yet"
    return (f"{folder / 'current'}: the students' qkv, answering no open exercise (released: {which}; "
            f"{time.monotonic() - started:.0f} s)")


def kernel_and_path(prefix):
    """The .pth that gives every Python of PREFIX/env the students' qkv, and the python3 kernel spec (its model)."""
    site = site_packages(prefix)
    (site / "qkv_student.pth").write_text(f"{prefix / RELEASED / 'current'}\n")
    spec = prefix / "env" / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(prefix / "env" / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (qkv)", "language": "python",
        "env": {"QKV_CACHE": str(prefix / "cache")}, "metadata": {"debugger": True}}, indent=1) + "\n")
    return f"{spec}/kernel.json: the students' kernel (qkv from {prefix / RELEASED}, the model from {prefix / 'cache'})"


def student_settings(prefix, course, exchange):
    """jupyter/exchange's settings as the environment's own (every server of PREFIX/env reads them), the exchange
    folder written in, and the course's JupyterLab overrides."""
    etc = prefix / "env" / "etc" / "jupyter"
    (etc / "labconfig").mkdir(parents=True, exist_ok=True)
    source = course / "jupyter" / "exchange"
    shutil.copy(source / "jupyter_server_config.json", etc / "jupyter_server_config.json")
    shutil.copy(source / "labconfig" / "page_config.json", etc / "labconfig" / "page_config.json")
    config = (source / "nbgrader_config.py").read_text()
    (etc / "nbgrader_config.py").write_text(config + f"\n# make hub-setup: this hub's exchange\n"
                                                     f"c.Exchange.root = {str(exchange)!r}\n")
    overrides = prefix / "env" / "share" / "jupyter" / "lab" / "settings" / "overrides.d"
    overrides.mkdir(parents=True, exist_ok=True)
    shutil.copy(course / "jupyter" / "lab-overrides.json", overrides / "qkv.json")
    return f"{etc}: the students' settings (Assignments tab on, instructor panels off; exchange {exchange})"


def model_cache(prefix, source):
    """PREFIX/cache: the model and its results from `source` (root's cache), hard-linked where the disk is the same
    (no second copy of 2 GB), read-only for everyone. Files already there are kept."""
    target = prefix / "cache"
    if not source.is_dir():
        return f"{target}: no model at {source} to share (run `make model` as root first); lessons 05-06 need it"
    copied = 0
    for folder, _, names in os.walk(source):
        here = target / pathlib.Path(folder).relative_to(source)
        here.mkdir(parents=True, exist_ok=True)
        os.chmod(here, 0o755)
        for name in names:
            if name.startswith(".fill-"):
                continue  # a filler's lock: nobody fills this cache but root
            path, into = pathlib.Path(folder) / name, here / name
            if into.exists():
                continue
            try:
                os.link(path, into)
            except OSError:
                shutil.copy2(path, into)
            os.chmod(into, 0o644)
            copied += 1
    return f"{target}: the model and its results, read-only for all ({copied} file(s) added)"
