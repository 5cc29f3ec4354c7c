"""The instructor's course folder and the homes on a hub: nobody but their owner reads them (issue 42).

With Debian's defaults a student's shell read solutions/, the hidden tests (autograde/qkv_grading), grades.csv and a
classmate's collected notebook, and wrote into autograde/submitted/<id>/<lesson>/; homes were 0755. Here:

    course folder (the checkout)       0700, the instructor's: nothing below it is reachable by anyone else
    solutions/, autograde/, .git/      0700 as well, so that opening the course folder later opens none of them
    autograde/submitted/<id>/<lesson>/ 0700, files 0600 (collect keeps it so: intake/exchange_collect.py)
    the instructor's home              0700
    new users' homes                   0700 (HOME_MODE in /etc/login.defs, which useradd and TLJH's user creation read)
"""
import os
import pathlib
import pwd
import re

PRIVATE = ("solutions", "autograde", ".git")
LOGIN_DEFS = pathlib.Path("/etc/login.defs")

def chown_tree(root, uid, gid):
    for folder, folders, files in os.walk(root):
        os.lchown(folder, uid, gid)
        for name in folders + files:
            os.lchown(os.path.join(folder, name), uid, gid)


def lock_course(course, instructor):
    """The course folder, the instructor's alone; the sentences saying what was done."""
    entry = pwd.getpwnam(instructor)
    chown_tree(course, entry.pw_uid, entry.pw_gid)
    os.chmod(course, 0o700)
    done = [f"{course}: owned by {instructor}, 0700 (nobody else can open anything below it)"]
    for name in PRIVATE:
        if (course / name).is_dir():
            os.chmod(course / name, 0o700)
    done.append(f"{course}/{{{','.join(PRIVATE)}}}: 0700")
    submitted = course / "autograde" / "submitted"
    if submitted.is_dir():  # collected before this set-up, by nbgrader's own collect (0777)
        for folder, _, files in os.walk(submitted):
            os.chmod(folder, 0o700)
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o600)
        done.append(f"{submitted}: every collected submission 0700, its files 0600")
    return done


def private_homes(instructor):
    """The instructor's home 0700, and HOME_MODE 0700 for the homes useradd makes from now on."""
    home = pathlib.Path(pwd.getpwnam(instructor).pw_dir)
    done = []
    if home.is_dir():
        os.chmod(home, 0o700)
        done.append(f"{home}: 0700")
    if LOGIN_DEFS.exists():
        text = LOGIN_DEFS.read_text()
        if not re.search(r"^HOME_MODE\s+0?700\s*$", text, re.M):
            text = re.sub(r"^HOME_MODE\s+\S+\s*\n", "", text, flags=re.M)
            LOGIN_DEFS.write_text(text.rstrip("\n") + "\n# make hub-setup (qkv): homes readable by their owner only\n"
                                  "HOME_MODE\t0700\n")
        done.append(f"{LOGIN_DEFS}: HOME_MODE 0700 (homes of users created from now on)")
    open_homes = sorted(str(p) for p in pathlib.Path("/home").iterdir()
                        if p.is_dir() and p.stat().st_mode & 0o077) if pathlib.Path("/home").is_dir() else []
    if open_homes:
        done.append(f"NOTE homes others can open (chmod 700 each student's): {', '.join(open_homes)}")
    return done
