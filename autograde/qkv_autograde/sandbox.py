"""The student's kernel, walled off: it sees its own notebook, Python and the course library, nothing else.

On Linux with user namespaces, bubblewrap (`bwrap`) builds a new root: the Python install and the virtual
environment read-only, the kernel's view of `qkv` (graded references withheld, see kernel_view) bound where the
editable install looks for it, the model cache read-only, a small private tmpfs as home and /tmp, no network
(an empty network namespace), its own PID namespace (so killing it kills everything it started). `prlimit` caps
memory, processes, file size and CPU. Where namespaces are not permitted (many containers, Binder) the kernel
runs with the same rlimits in a private working folder, and the isolation is reported as partial, loudly.

The kernel talks to the grader over IPC sockets in a folder bound into the sandbox: a kernel in its own network
namespace cannot reach the grader's TCP ports (see ../shared notes).
"""
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time

from jupyter_client.manager import AsyncKernelManager
from traitlets import Any, Unicode

MiB = 1 << 20
GiB = 1 << 30
PARTIAL_ISOLATION = ("isolation partial: bubblewrap (user and network namespaces) is not available here, so "
                     "student code runs with resource limits only and can read the grader's files and reach "
                     "the network; grade on a machine where `bwrap` works")


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 * GiB       # address space of the kernel (numpy, the model and the student's arrays)
    processes: int = 64               # threads count too (BLAS, ZMQ, IPython's history thread)
    file_bytes: int = 64 * MiB        # largest file the kernel may write
    home_bytes: int = 256 * MiB       # the private tmpfs that is its home, working folder and /tmp
    cpu_seconds: int = 1800           # backstop only: the wall-clock budget is enforced by the grader


@functools.lru_cache(maxsize=None)
def bwrap_works():
    """True when bubblewrap can build a sandbox with user and network namespaces on this machine."""
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def isolation():
    return "bwrap" if bwrap_works() and not os.environ.get("QKV_SANDBOX_FORCE_PARTIAL") else "rlimits"


def _system_paths():
    """Read-only paths a Python kernel needs: the interpreter, its libraries, the environment."""
    paths = ["/usr", "/bin", "/lib", "/lib64", "/sbin", sys.base_prefix, sys.prefix,
             "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
             "/etc/fonts"]
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def _matplotlib_font_cache():
    """The grader's font list, so every kernel does not rebuild it (seconds of CPU per submission)."""
    import matplotlib

    cache = matplotlib.get_cachedir()
    found = [os.path.join(cache, f) for f in os.listdir(cache) if f.startswith("fontlist")] if os.path.isdir(cache) else []
    return found


PIDS_CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")  # cgroup v1 pids controller, or the v2 hierarchy


def _pids_cgroup(limit):
    """A fresh pids cgroup capped at `limit` processes and threads, or None where none can be made."""
    for root in PIDS_CGROUP_ROOTS:
        try:
            path = tempfile.mkdtemp(prefix="qkv-kernel-", dir=root)
        except OSError:
            continue
        try:
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(limit))
            return path
        except OSError:  # no pids controller here
            os.rmdir(path)
    return None


class Sandbox:
    """One student kernel's walls: a private home, the read-only world, the limits and the socket folder."""

    HOME = "/home/student"

    def __init__(self, library_view, notebook_path=None, limits=Limits(), read_only=(), env=None,
                 connection_dir=None, template_script=None, kernel_folder=None):
        self.library_view = library_view      # (path the editable install imports qkv from, generated view)
        self.notebook_path = notebook_path    # the student's own notebook, readable in the working folder
        self.limits = limits
        self.read_only = [p for p in read_only if p and os.path.exists(p)]
        self.mode = isolation()
        # a kernel template (forked_kernels.py) lives on in these walls across kernels: its script, the folder
        # each kernel sees its own sockets in, and a read-only root and /dev, so no kernel leaves a file behind
        self.template_script, self.kernel_folder = template_script, kernel_folder
        self.owns_connection_dir = connection_dir is None
        self.connection_dir = connection_dir or tempfile.mkdtemp(prefix="qkvk-")
        os.chmod(self.connection_dir, 0o700)
        # rlimits mode has no tmpfs: the private folder is a real one, removed afterwards
        self.fallback_home = None if self.mode == "bwrap" else tempfile.mkdtemp(prefix="qkv-student-")
        self.pids_cgroup = _pids_cgroup(limits.processes + (4 if template_script else 0))  # + template, keeper
        self.env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "LANG": "C.UTF-8",
                    "MPLBACKEND": "module://matplotlib_inline.backend_inline", "PYTHONDONTWRITEBYTECODE": "1",
                    "PYDEVD_DISABLE_FILE_VALIDATION": "1", **(env or {})}
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "QKV_CACHE"):
            if name in os.environ:  # machine-specific fixes and the model's location, nothing else of ours
                self.env.setdefault(name, os.environ[name])

    @property
    def home(self):
        return self.HOME if self.mode == "bwrap" else self.fallback_home

    def wrap(self, argv):
        """The command that runs `argv` (a kernel) inside these walls."""
        env = dict(self.env, HOME=self.home, TMPDIR=self.home if self.mode == "rlimits" else "/tmp",
                   MPLCONFIGDIR=os.path.join(self.home, ".matplotlib"))
        limits = ["prlimit", f"--as={self.limits.memory_bytes}", f"--nproc={self.limits.processes}",
                  f"--fsize={self.limits.file_bytes}", "--core=0",
                  f"--cpu={self.limits.cpu_seconds}:{self.limits.cpu_seconds + 10}", "--"]
        # RLIMIT_NPROC does not bind root (the grader under CI): a pids cgroup, where one can be made, does
        enter = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.pids_cgroup] if self.pids_cgroup else []
        if self.mode == "rlimits":
            self._prepare_fallback_home()
            return enter + limits + ["env", "-i", f"--chdir={self.fallback_home}"] + \
                [f"{k}={v}" for k, v in env.items()] + argv
        return enter + limits + self._bwrap(env) + ["--"] + argv

    def _bwrap(self, env):
        args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
                "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.limits.home_bytes), "--tmpfs", "/tmp",
                "--size", str(self.limits.home_bytes), "--tmpfs", self.HOME]
        for path in _system_paths() + self.read_only:
            args += ["--ro-bind", path, path]
        import_path, view = self.library_view
        args += ["--ro-bind", view, import_path]
        args += ["--dir", env["MPLCONFIGDIR"]]
        for font_list in _matplotlib_font_cache():
            args += ["--ro-bind", font_list, os.path.join(env["MPLCONFIGDIR"], os.path.basename(font_list))]
        if self.notebook_path:
            args += ["--ro-bind", self.notebook_path, os.path.join(self.HOME, os.path.basename(self.notebook_path))]
        args += ["--bind", self.connection_dir, self.connection_dir, "--chdir", self.HOME]
        for name, value in env.items():
            args += ["--setenv", name, value]
        if self.template_script:
            script, inside = self.template_script
            args += ["--ro-bind", script, inside, "--dir", self.kernel_folder, "--remount-ro", "/dev",
                     "--remount-ro", "/"]
        return args

    def _prepare_fallback_home(self):
        os.makedirs(os.path.join(self.fallback_home, ".matplotlib"), exist_ok=True)
        for font_list in _matplotlib_font_cache():
            shutil.copy(font_list, os.path.join(self.fallback_home, ".matplotlib"))
        if self.notebook_path:
            shutil.copy(self.notebook_path, self.fallback_home)

    def cleanup(self):
        for folder in (self.connection_dir if self.owns_connection_dir else None, self.fallback_home):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        if self.pids_cgroup:
            for _ in range(50):  # a cgroup can be removed once its last process has gone
                try:
                    os.rmdir(self.pids_cgroup)
                    break
                except OSError:
                    time.sleep(0.1)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels start inside a Sandbox and listen on IPC sockets in its folder."""

    sandbox = Any()
    transport = Unicode("ipc")

    def __init__(self, **kwargs):
        sandbox = kwargs["sandbox"]
        kwargs.setdefault("ip", os.path.join(sandbox.connection_dir, "kernel"))
        kwargs.setdefault("connection_file", os.path.join(sandbox.connection_dir, "kernel.json"))
        super().__init__(**kwargs)

    def format_kernel_cmd(self, extra_arguments=None):
        argv = super().format_kernel_cmd(extra_arguments)
        if os.path.basename(argv[0]) in ("python", "python3"):
            argv[0] = sys.executable  # the kernelspec's bare "python" means the grader's environment
        return self.sandbox.wrap(argv)

