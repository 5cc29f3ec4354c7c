"""Grading as a user who is not root keeps every wall (issue 42): where the kernels' cgroups go, and what is missing.

A kernel's memory and process limits are a cgroup of its own (sandbox.KernelCgroup). Root makes those anywhere; an
instructor grading on a hub is not root, so `make hub-setup` (as root) gives them a subtree of their own in each
cgroup v1 hierarchy the kernels use: /sys/fs/cgroup/<memory|pids>/qkv-<user>, the folder and its cgroup.procs and
tasks owned by the instructor. Each kernel's cgroup is then made inside it; the files of a cgroup belong to whoever
made it, so the grader sets its limits and moves its kernels in (cgroup v1 lets a process move a process of its own
uid), and nobody else can. The kernels never see /sys (the sandbox binds only what Python needs).

cgroup v2 is not delegated this way: moving a process there needs write access to the common ancestor's
cgroup.procs (the root's), so a non-root grader on a v2-only machine is told to grade as root instead.

kernels/isolation.py names every wall grading would lack here, each with its fix.
"""
import os
import pwd

CGROUP_ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "pids")  # those KernelCgroup limits
CONTROL_FILES = ("cgroup.procs", "tasks")  # what the owner of a v1 subtree must write to move processes in


def subtree_name(user):
    return f"qkv-{user}"


def is_v2():
    return os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers"))


def parent(hierarchy):
    """Where this process makes its kernels' cgroups in one hierarchy (CGROUP_ROOT/<controller> in v1): the
    hierarchy's root for root, else the subtree hub-setup delegated to this user, where there is one."""
    if os.geteuid() == 0:
        return hierarchy
    own = os.path.join(hierarchy, subtree_name(pwd.getpwuid(os.geteuid()).pw_name))
    return own if os.path.isdir(own) else hierarchy


def delegate(user):
    """As root: the subtree `user` makes kernel cgroups in, in each v1 hierarchy; the sentences saying what was
    done. Safe to repeat (a cgroup folder is kept with whatever is in it; its owner is set again)."""
    if is_v2():
        return ["cgroup v2 only here: no subtree delegated (moving a process needs the root cgroup's permission); "
                f"{user} grades with the memory and process limits only as root (sudo make grade ...)"]
    entry = pwd.getpwnam(user)
    said = []
    for controller in CONTROLLERS:
        hierarchy = os.path.join(CGROUP_ROOT, controller)
        if not os.path.isdir(hierarchy):
            said.append(f"no {controller} cgroup hierarchy at {hierarchy}: kernels get no {controller} limit")
            continue
        folder = os.path.join(hierarchy, subtree_name(user))
        os.makedirs(folder, exist_ok=True)
        for path in [folder] + [os.path.join(folder, name) for name in CONTROL_FILES]:
            if os.path.exists(path):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        said.append(f"cgroup {folder}: delegated to {user} (their kernels' {controller} limits)")
    return said
