"""A week's student edition on top of the last one (issue 41, item 4): `make student-edition DEST=<an earlier
edition>` adds the new week to that edition's history as one commit, which the instructor pushes to the class
repository, and a student's `make update` (templates/Makefile) pulls it with `git pull --ff-only`.

A student's clone must take that commit without a conflict, whatever they wrote. They write in the notebooks, so
an update never changes or deletes a notebook an earlier commit shipped: a notebook the new week would change (an
erratum) keeps its old bytes, and the new version comes beside it as `NN-name.corrected.ipynb` (then
`.corrected-2.ipynb`, ...), a new file, which `make update` names. Everything else (the library, the Makefile,
README, environment.yml) is the instructor's and is replaced by the new week's.

The commit is made of the staged edition alone (its own index, the stage as work tree), so nothing else in DEST's
folder can slip into it; DEST's checkout then moves to it by a fast-forward.
"""
import os
import pathlib
import re
import subprocess
import tempfile

MARK = "qkv student edition"  # how the first line of an edition's commit begins (qkv_edition.build.commit_message)
CORRECTED = re.compile(r"\.corrected(-\d+)?\.ipynb$")  # notebooks/01-lookup/01-lookup.corrected-2.ipynb


def _git(folder, *args, env=None, check=True):
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=check, env=env)


def add_week(stage, dest, message):
    """The staged edition (a new week) as one commit on top of DEST, an earlier edition: its notebooks kept and
    corrections beside them, the badge's repository kept. Returns the commit (None when nothing changed)."""
    corrections = carry_notebooks(stage, dest)
    carry_badge(stage, dest)
    return commit_on_top(stage, dest, message + "".join(f"Corrected: {new}, beside {old}.\n"
                                                        for old, new in corrections))


def why_not_on_top(dest, released):
    """None when DEST is an earlier edition with nothing uncommitted, whose lessons the new week (`released`)
    releases too (the week can go on top of it), else the sentence that says why not."""
    dest = pathlib.Path(dest)
    not_an_edition = (f"{dest} already exists and is not empty: choose a new folder for DEST, or an earlier edition "
                      f"(a folder `make student-edition` built, to add this week on top of its history)")
    if not (dest / ".git").is_dir():
        return not_an_edition
    root = _git(dest, "rev-list", "--max-parents=0", "HEAD", check=False).stdout.split()
    subject = _git(dest, "log", "-1", "--format=%s", *root[:1], check=False) if root else None
    if subject is None or subject.returncode != 0 or not subject.stdout.startswith(MARK):
        return not_an_edition
    status = _git(dest, "status", "--porcelain").stdout
    if status:
        return (f"{dest} is an earlier edition with changes not committed:\n{status.rstrip()}\ncommit them or "
                f"discard them (git -C {dest} status), then run make student-edition again")
    return dropped(dest, released)


def released_before(dest):
    """The lesson folders (slugs) under notebooks/ in DEST's last commit."""
    listed = _git(dest, "ls-tree", "--name-only", "HEAD", "notebooks/").stdout.split()
    return {pathlib.PurePath(name).name for name in listed}


def dropped(dest, released):
    """None when the new week releases every lesson DEST released, else the sentence that says which it leaves out
    (a student's notebook of that lesson would stay without its checks)."""
    missing = sorted(released_before(dest) - {row.slug for row in released})
    if missing:
        return (f"{dest} released {', '.join(missing)}, which LESSONS leaves out: an update adds lessons, it never "
                f"takes one back. Add {','.join(missing)} to LESSONS.")
    return None


def _notebooks_in(dest):
    """{path: bytes} of every notebook DEST's last commit ships."""
    listed = _git(dest, "ls-tree", "-r", "--name-only", "-z", "HEAD", "notebooks/").stdout.split("\0")
    found = {}
    for name in filter(None, listed):
        if name.endswith(".ipynb"):
            found[name] = subprocess.run(["git", "cat-file", "blob", f"HEAD:{name}"], cwd=dest, capture_output=True,
                                         check=True).stdout
    return found


def corrected_name(notebook, number):
    """notebooks/01-lookup/01-lookup.ipynb, 1 -> notebooks/01-lookup/01-lookup.corrected.ipynb (2 -> .corrected-2)."""
    path = pathlib.PurePosixPath(notebook)
    stem = path.name.removesuffix(".ipynb")
    return str(path.with_name(f"{stem}.corrected.ipynb" if number == 1 else f"{stem}.corrected-{number}.ipynb"))


def carry_notebooks(stage, dest):
    """Make the staged edition keep every notebook DEST shipped, byte for byte; a released notebook that changed
    since goes beside the old one under the next corrected name (none when the latest correction already has its
    bytes). Returns [(notebook, its corrected file)] of the corrections this week adds."""
    stage = pathlib.Path(stage)
    shipped = _notebooks_in(dest)
    for name, old in shipped.items():  # earlier notebooks and corrections stay, whatever the new week holds
        target = stage / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(old)
    added = []
    for name, old in sorted(shipped.items()):
        if CORRECTED.search(name) or (stage / name).read_bytes() == old:
            continue
        new = (stage / name).read_bytes()
        (stage / name).write_bytes(old)
        number = 1
        while corrected_name(name, number) in shipped:
            number += 1
        if number > 1 and shipped[corrected_name(name, number - 1)] == new:
            continue  # the latest correction is this one already
        (stage / corrected_name(name, number)).write_bytes(new)
        added.append((name, corrected_name(name, number)))
    return added


PLACEHOLDER = "YOUR-GITHUB-ACCOUNT/YOUR-COURSE-REPOSITORY"  # the badge's repository in templates/README.md
BADGE = re.compile(r"https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/HEAD")
INSTRUCTOR_NOTE = re.compile(r"<!-- Instructor: .*? -->\n", re.S)


def carry_badge(stage, dest):
    """The staged README's Binder badge points where DEST's did: the repository the instructor put in it once, and
    without the note asking for it."""
    shipped = _git(dest, "show", "HEAD:README.md", check=False).stdout
    found = BADGE.search(shipped)
    if not found or found.group(1) == PLACEHOLDER:
        return
    readme = pathlib.Path(stage) / "README.md"
    readme.write_text(INSTRUCTOR_NOTE.sub("", readme.read_text().replace(PLACEHOLDER, found.group(1))))


def commit_on_top(stage, dest, message):
    """Commit the staged edition, exactly its files, on top of DEST's last commit, and fast-forward DEST's checkout
    to it. Returns the new commit, or None when the stage holds what DEST's last commit holds."""
    dest = pathlib.Path(dest).resolve()
    with tempfile.TemporaryDirectory(prefix="qkv-edition-index-") as scratch:
        env = dict(os.environ, GIT_DIR=str(dest / ".git"), GIT_WORK_TREE=str(pathlib.Path(stage).resolve()),
                   GIT_INDEX_FILE=str(pathlib.Path(scratch) / "index"))
        for key, variables, default in (("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"), MARK),
                                        ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"),
                                         "qkv-student-edition@localhost")):
            if _git(dest, "config", key, check=False).returncode != 0:
                env.update({variable: default for variable in variables})
        _git(stage, "add", "--all", env=env)
        tree = _git(stage, "write-tree", env=env).stdout.strip()
        if tree == _git(dest, "rev-parse", "HEAD^{tree}").stdout.strip():
            return None
        commit = _git(stage, "commit-tree", "--no-gpg-sign", tree, "-p", "HEAD", "-m", message, env=env).stdout.strip()
    _git(dest, "merge", "--ff-only", "--quiet", commit)
    return commit


def commits_in(dest):
    return int(_git(dest, "rev-list", "--count", "HEAD").stdout.strip())
