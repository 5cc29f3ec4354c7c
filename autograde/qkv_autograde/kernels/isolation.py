"""The walls a grading kernel would lack on this machine, each with its fix (issue 42): `make grade` stops on any of
them unless the instructor opts in (--allow-partial-isolation), and the opt-in is then repeated in its summary.
Apart from sandbox.py and delegation.py, which it reads both: the sandbox makes each kernel's cgroup inside the
subtree delegation.py names, so neither of those may import this."""
import os
import pwd

from qkv_autograde.kernels import delegation, sandbox


def missing_isolation():
    """The walls a kernel of this grader would not have here, each as a sentence ending in its fix; [] if none."""
    missing = []
    if sandbox.isolation() != "bwrap":
        missing.append("no sandbox: bubblewrap cannot make user and network namespaces here, so student code could "
                       "read your files and reach the network (fix: `sudo make sandbox`, on a machine that permits "
                       "unprivileged user namespaces)")
    probe = sandbox.KernelCgroup(sandbox.Limits().memory_bytes, sandbox.Limits().processes)
    try:
        if probe.missing:
            me = pwd.getpwuid(os.geteuid()).pw_name
            if os.geteuid() == 0:
                fix = f"grade where root can write {delegation.CGROUP_ROOT} (a container may mount it read-only)"
            elif delegation.is_v2():
                fix = "cgroup v2 is not delegated: grade as root (sudo make grade ...)"
            else:
                fix = (f"as root, `make hub-setup INSTRUCTOR={me}` delegates them to you (again after each reboot: "
                       "cgroups do not survive one)")
            missing.append(f"no {' or '.join(probe.missing)} cgroup writable by {me}: a kernel's processes "
                           f"together would have no memory or process limit (fix: {fix})")
    finally:
        probe.remove()
    return missing
