"""`make hub-setup INSTRUCTOR=<user> [PREFIX=/opt/qkv] [EXCHANGE=/srv/nbgrader/exchange]`, as root, from the
instructor's checkout on the hub machine; `make hub-release LESSON=<lesson>`, as the instructor, after it.

Set-up, each step saying what it did, each safe to repeat: the shared environment, the students' qkv for the
lessons already released, the kernel spec and the students' Jupyter settings, the model (shared_env.py); the
exchange (nbgrader's documented permissions: everyone writes, the sticky bit keeps each one's files their own); the
course folder and the homes locked (lockdown.py); the instructor's cgroup subtree (kernels/delegation.py, so that
`make grade` keeps its memory and process limits); hub.mk, where the instructor's make finds PREFIX and EXCHANGE.
"""
import argparse
import os
import pathlib
import pwd
import stat
import sys

from qkv_autograde.kernels import delegation
from qkv_hub import lockdown, shared_env

COURSE = pathlib.Path(__file__).resolve().parents[2]
SPAWNER_LINES = """  c.Spawner.cmd = ["{prefix}/env/bin/jupyterhub-singleuser"]
  c.Spawner.default_url = "/lab"
  c.Spawner.environment = {{"QKV_CACHE": "{prefix}/cache"}}"""


def refuse(sentence):
    raise SystemExit(f"hub-setup: {sentence}")


def instructor_entry(name):
    if not name:
        refuse("usage: sudo make hub-setup INSTRUCTOR=<unix user> [PREFIX=/opt/qkv] [EXCHANGE=/srv/nbgrader/exchange]")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        refuse(f"there is no user {name!r} on this machine: create the instructor's account first "
               f"(adduser {name}, or log in once through the hub), then run this again")
    if entry.pw_uid == 0:
        refuse("INSTRUCTOR must be the instructor's own account, not root: grading runs as them")
    return entry


def unreachable_folder(path, entry):
    """The first folder above `path` that `entry` cannot pass through, or None."""
    for folder in reversed(path.parents):
        info = folder.stat()
        passes = (info.st_mode & stat.S_IXOTH or (info.st_uid == entry.pw_uid and info.st_mode & stat.S_IXUSR)
                  or (info.st_gid == entry.pw_gid and info.st_mode & stat.S_IXGRP))
        if not passes:
            return folder
    return None


def make_exchange(exchange):
    exchange.mkdir(parents=True, exist_ok=True)
    os.chmod(exchange.parent, os.stat(exchange.parent).st_mode | 0o755)
    os.chmod(exchange, 0o1777)
    return f"{exchange}: the exchange, 1777 (everyone hands in; the sticky bit keeps each one's files their own)"


def hub_make_file(course, prefix, exchange):
    (course / "hub.mk").write_text("# written by make hub-setup: this hub's folders, for the instructor's make\n"
                                   f"HUB_PREFIX := {prefix}\nexport QKV_EXCHANGE := {exchange}\n"
                                   f"export QKV_CACHE := {prefix / 'cache'}\n")
    return f"{course / 'hub.mk'}: the instructor's make uses {prefix}/cache and {exchange}"


def check(instructor, prefix, python, course=COURSE):
    """Every refusal, before anything is changed; the instructor's passwd entry."""
    if os.geteuid() != 0:
        refuse("run as root (sudo make hub-setup INSTRUCTOR=...): it makes PREFIX, the exchange and cgroups, and "
               "changes owners")
    entry = instructor_entry(instructor)
    blocked = unreachable_folder(course, entry)
    if blocked:
        refuse(f"{instructor} cannot reach {course} ({blocked} is closed to them): run this from the instructor's "
               f"own checkout, e.g. {entry.pw_dir}/qkv")
    if unreachable_folder(pathlib.Path(python).resolve(), entry) or unreachable_folder(prefix, entry):
        refuse(f"{python} or {prefix} lies where other users cannot reach: choose HUB_PYTHON=/usr/bin/python3 and a "
               "PREFIX outside /root")
    return entry


def environment(prefix, python, course=COURSE, say=print):
    """PREFIX/env (stdlib only: the Makefile runs it with HUB_PYTHON while the instructor's .venv is being made)."""
    os.umask(0o022)
    prefix.mkdir(parents=True, exist_ok=True)
    os.chmod(prefix, 0o755)
    say(shared_env.install_environment(prefix, python, shared_env.requirements(course)))


def setup(instructor, prefix, exchange, python, course=COURSE, model_source=None, say=print):
    entry = check(instructor, prefix, python, course)
    environment(prefix, python, course, say)
    released_folder = prefix / shared_env.RELEASED
    released_folder.mkdir(exist_ok=True)
    say(shared_env.student_library(prefix, shared_env.released_lessons(exchange)))
    lockdown.chown_tree(released_folder, entry.pw_uid, entry.pw_gid)
    os.chmod(released_folder, 0o755)
    say(shared_env.kernel_and_path(prefix))
    say(shared_env.student_settings(prefix, course, exchange))
    say(shared_env.model_cache(prefix, pathlib.Path(model_source or _root_model_cache())))
    say(make_exchange(exchange))
    say(hub_make_file(course, prefix, exchange))
    for line in lockdown.lock_course(course, instructor) + lockdown.private_homes(instructor):
        say(line)
    for line in delegation.delegate(instructor):
        say(line)
    say("hub-setup: done. In jupyterhub_config.py (a plain hub; on TLJH, a file in "
        "/opt/tljh/config/jupyterhub_config.d/):\n" + SPAWNER_LINES.format(prefix=prefix)
        + f"\nthen, as {instructor}: make hub-release LESSON=01-lookup; make hub-collect LESSON=01-lookup; "
        "make grade LESSON=01-lookup; make hub-feedback LESSON=01-lookup")


def release(prefix, exchange, say=print):
    """As the instructor, after `nbgrader release_assignment`: the students' qkv for what the exchange now holds."""
    say(shared_env.student_library(prefix, shared_env.released_lessons(exchange)))


def _root_model_cache():
    from qkv import fetch

    return fetch.cache_dir()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("check", "environment", "setup", "release"))
    parser.add_argument("--instructor", default="")
    parser.add_argument("--prefix", default="/opt/qkv")
    parser.add_argument("--exchange", default="/srv/nbgrader/exchange")
    parser.add_argument("--python", default="/usr/bin/python3", help="the Python the shared environment is made from")
    args = parser.parse_args(argv)
    prefix, exchange = pathlib.Path(args.prefix).absolute(), pathlib.Path(args.exchange).absolute()
    if args.step == "release":
        release(prefix, exchange)
    elif args.step == "check":
        check(args.instructor, prefix, args.python)
    elif args.step == "environment":
        environment(prefix, args.python)
    else:
        setup(args.instructor, prefix, exchange, args.python)
    sys.stdout.flush()
