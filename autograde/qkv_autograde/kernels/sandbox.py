"""The student's kernel, walled off: it sees its own notebook, Python and the course library, nothing else.

On Linux with user namespaces, bubblewrap (`bwrap`) builds a new root: the Python install and the virtual
environment read-only, the kernel's view of `qkv` (graded references withheld, see kernel_view) bound where the
editable install looks for it, the model cache read-only, a small private tmpfs as home and /tmp, no network
(an empty network namespace), its own PID namespace (so killing it kills everything it started). `prlimit` caps
each process's memory, processes, file size and CPU; a cgroup (KernelCgroup) caps the memory and the number of
processes of the kernel and everything it starts together. Where namespaces are not permitted (many containers,
Binder) the kernel runs with the same limits in a private working folder, and the isolation is reported as
partial, loudly; so is a limit no cgroup could be made for.

The kernel talks to the grader over IPC sockets (a kernel in its own network namespace cannot reach the grader's
TCP ports, see ../shared notes) in a small tmpfs of its own, mounted inside the sandbox, which the student can
write to but not past its cap; the grader reaches the sockets through /proc (socket_folder.py).
"""
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Any, Unicode

from qkv_autograde.kernels import delegation
from qkv_autograde.kernels.bounded_client import BoundedKernelClient
from qkv_autograde.kernels.socket_folder import SOCKET_FOLDER, close_quietly, open_socket_folder

MiB = 1 << 20
GiB = 1 << 30
PARTIAL_ISOLATION = ("isolation partial: bubblewrap (user and network namespaces) is not available here, so "
                     "student code runs with resource limits only and can read the grader's files and reach "
                     "the network; grade on a machine where `bwrap` works")


@dataclasses.dataclass(frozen=True)
class Limits:
    memory_bytes: int = 2 * GiB       # the kernel and all it starts (numpy, the model, the student's arrays)
    processes: int = 64               # threads count too (BLAS, ZMQ, IPython's history thread)
    file_bytes: int = 64 * MiB        # largest file the kernel may write
    home_bytes: int = 256 * MiB       # the private tmpfs that is its home, working folder and /tmp
    socket_bytes: int = 16 * MiB      # the tmpfs its sockets and connection file are in (the student can write it)
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
    found = ([os.path.join(cache, f) for f in os.listdir(cache) if f.startswith("fontlist")]
             if os.path.isdir(cache) else [])
    return found


CGROUP_ROOT = "/sys/fs/cgroup"
LIMITED = ("memory", "pids")  # the controllers a kernel's cgroup is made with, where they exist


def _write(folder, name, value):
    with open(os.path.join(folder, name), "w") as f:
        f.write(str(value))


def _counter(path, name):
    """`name N` from a cgroup's key-value file (memory.events, memory.oom_control), or 0."""
    try:
        with open(path) as f:
            return next((int(line.split()[1]) for line in f if line.split()[:1] == [name]), 0)
    except (OSError, ValueError, IndexError):
        return 0


ABANDONED_SECONDS = 3600  # longer than any submission's budget and start-up: nobody will enter this cgroup again


def _remove_abandoned(parent, prefix):
    """Remove the empty kernel cgroups a killed grader left (kill -9, a worker torn down): they piled up, one or
    two per killed run. rmdir removes only an empty cgroup, so one in use is never touched."""
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            if time.time() - entry.stat().st_mtime > ABANDONED_SECONDS:
                os.rmdir(entry.path)
        except OSError:
            pass


class KernelCgroup:
    """A kernel's whole process tree under limits the kernel enforces: memory for all its processes together
    (RLIMIT_AS is per process: five children of one kernel held 3.97 GB) and a process count (RLIMIT_NPROC does
    not bind root). cgroup v2 where the unified hierarchy has the controllers, else the v1 hierarchies.
    `missing` names what could not be made here (no controller, no permission): the isolation is then partial."""

    def __init__(self, memory_bytes, processes, prefix="qkv-kernel-"):
        self.memory_bytes = memory_bytes
        self.folders = {}  # controller -> cgroup folder (one folder for both in v2)
        v2 = os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers"))
        # v1: the hierarchy's root for root, the subtree hub-setup delegated for an instructor (delegation.py)
        parents = [CGROUP_ROOT] if v2 else [delegation.parent(os.path.join(CGROUP_ROOT, c)) for c in LIMITED]
        for parent in parents:
            _remove_abandoned(parent, prefix)
        if v2:
            self._make_v2(prefix, memory_bytes, processes)
        else:
            for controller in LIMITED:
                self._make_v1(controller, prefix, memory_bytes, processes)
        self.missing = [c for c in LIMITED if c not in self.folders]

    def _make_v2(self, prefix, memory_bytes, processes):
        for controller in LIMITED:  # the root may hand its children a controller it does not yet
            try:
                _write(CGROUP_ROOT, "cgroup.subtree_control", f"+{controller}")
            except OSError:
                pass
        try:
            folder = tempfile.mkdtemp(prefix=prefix, dir=CGROUP_ROOT)
        except OSError:
            return
        for controller, settings in (("memory", {"memory.max": memory_bytes, "memory.swap.max": 0}),
                                     ("pids", {"pids.max": processes})):
            try:
                for name, value in settings.items():
                    if name == "memory.max" or os.path.exists(os.path.join(folder, name)):
                        _write(folder, name, value)
                self.folders[controller] = folder
            except OSError:
                pass
        if not self.folders:
            os.rmdir(folder)

    def _make_v1(self, controller, prefix, memory_bytes, processes):
        try:
            folder = tempfile.mkdtemp(prefix=prefix, dir=delegation.parent(os.path.join(CGROUP_ROOT, controller)))
        except OSError:
            return
        try:
            if controller == "memory":
                _write(folder, "memory.limit_in_bytes", memory_bytes)
                if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):  # swap counts too
                    _write(folder, "memory.memsw.limit_in_bytes", memory_bytes)
            else:
                _write(folder, "pids.max", processes)
            self.folders[controller] = folder
        except OSError:
            os.rmdir(folder)

    @property
    def places(self):
        return list(dict.fromkeys(self.folders.values()))

    def enter(self, argv):
        """`argv`, run from a shell that first moves itself into this cgroup (so everything it execs is inside)."""
        if not self.places:
            return list(argv)
        script = 'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'
        return ["sh", "-c", script, "qkv-enter", *self.places, "--", *argv]

    def add(self, pid):
        """Move a running process (host pid) and all its threads in."""
        for place in self.places:
            _write(place, "cgroup.procs", pid)

    def memory_kills(self):
        """How many of the tree's processes the kernel killed for going over the memory limit."""
        folder = self.folders.get("memory")
        if not folder:
            return 0
        if os.path.exists(os.path.join(folder, "memory.events")):
            return _counter(os.path.join(folder, "memory.events"), "oom_kill")
        return _counter(os.path.join(folder, "memory.oom_control"), "oom_kill")

    def peak_bytes(self):
        folder = self.folders.get("memory")
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                with open(os.path.join(folder, name)) as f:
                    return int(f.read().split()[0])
            except (OSError, TypeError, ValueError, IndexError):
                continue
        return None

    def remove(self):
        """Kill whatever is still inside, then remove the cgroup (possible once its last process has gone)."""
        for place in self.places:
            for _ in range(50):
                try:
                    with open(os.path.join(place, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            try:
                                os.kill(int(pid), signal.SIGKILL)
                            except OSError:
                                pass
                    os.rmdir(place)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        self.folders = {}

    def describe_missing(self):
        """The report's detail when a limit could not be made here."""
        what = {"memory": "no memory cgroup: the memory limit binds each process (RLIMIT_AS), not the kernel's "
                          "processes together",
                "pids": "no pids cgroup: the process limit (RLIMIT_NPROC) does not bind root"}
        return "isolation partial: " + "; ".join(what[c] for c in self.missing) + \
            f" (no writable {CGROUP_ROOT} with the {', '.join(self.missing)} controller here)"


def limit_events(cgroup):
    """(anomaly, detail) for the report: limits missing here, and processes the memory limit killed."""
    events = [("isolation partial", cgroup.describe_missing())] if cgroup.missing else []
    kills = cgroup.memory_kills()
    if kills:
        events.append(("memory limit", f"the kernel's processes together reached the memory limit "
                                       f"({cgroup.memory_bytes // MiB} MiB): {kills} of them killed"))
    return events


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
        # memory for all its processes together and their number; a template's kernels get a cgroup each
        self.cgroup = KernelCgroup(limits.memory_bytes, limits.processes + (4 if template_script else 0))
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
        limits = ["prlimit", f"--as={self.address_space_bytes}", f"--nproc={self.limits.processes}",
                  f"--fsize={self.limits.file_bytes}", "--core=0",
                  f"--cpu={self.limits.cpu_seconds}:{self.limits.cpu_seconds + 10}", "--"]
        if self.mode == "rlimits":
            self._prepare_fallback_home()
            return self.cgroup.enter(limits + ["env", "-i", f"--chdir={self.fallback_home}"] +
                                     [f"{k}={v}" for k, v in env.items()] + argv)
        return self.cgroup.enter(limits + self._bwrap(env) + ["--"] + argv)

    @property
    def address_space_bytes(self):
        """Each process's address space: the memory limit itself where no cgroup binds the tree's memory; twice it
        where one does. Address space is not memory (a forked kernel maps 0.9 GB before the student allocates
        anything); under the cgroup the rlimit only turns one absurd allocation into a MemoryError."""
        return self.limits.memory_bytes * (2 if "memory" in self.cgroup.folders else 1)

    @property
    def connection_file(self):
        return os.path.join(self.connection_dir, "kernel.json")

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
        args += ["--chdir", self.HOME]
        if not self.template_script:  # a capped tmpfs the grader reaches through /proc (open_socket_folder)
            args += ["--size", str(self.limits.socket_bytes), "--tmpfs", SOCKET_FOLDER]
            if os.path.exists(self.connection_file):
                args += ["--ro-bind", self.connection_file, os.path.join(SOCKET_FOLDER, "kernel.json")]
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
        self.cgroup.remove()


class SandboxedProvisioner(LocalProvisioner):
    """LocalProvisioner that, once the sandboxed kernel runs, points the grader at its sockets (see
    open_socket_folder) and reports its limits when it is gone."""

    socket_fd = None

    async def launch_kernel(self, cmd, **kwargs):
        info = await super().launch_kernel(cmd, **kwargs)
        if self.parent.sandbox.mode == "bwrap":
            self.socket_fd = await open_socket_folder(self.process.pid, lambda: self.process.poll() is None)
            if self.socket_fd is not None:  # else the kernel died at once: the manager will see it has
                info = dict(info, ip=f"/proc/self/fd/{self.socket_fd}/kernel")
        return info

    async def cleanup(self, restart=False):
        await super().cleanup(restart)
        close_quietly(self.socket_fd)
        self.socket_fd = None


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels start inside a Sandbox and listen on IPC sockets in its capped tmpfs."""

    sandbox = Any()
    transport = Unicode("ipc")

    def __init__(self, **kwargs):
        sandbox = kwargs["sandbox"]
        inside = sandbox.mode == "bwrap"  # the connection file names the sockets as the kernel will see them
        kwargs.setdefault("ip", os.path.join(SOCKET_FOLDER if inside else sandbox.connection_dir, "kernel"))
        kwargs.setdefault("connection_file", sandbox.connection_file)
        super().__init__(**kwargs)
        self.client_factory = BoundedKernelClient

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.get("kernel_id") or "sandboxed"
            self.provisioner = SandboxedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments=None):
        argv = super().format_kernel_cmd(extra_arguments)
        if os.path.basename(argv[0]) in ("python", "python3"):
            argv[0] = sys.executable  # the kernelspec's bare "python" means the grader's environment
        if self.sandbox.mode == "bwrap":
            argv = [os.path.join(SOCKET_FOLDER, "kernel.json") if a == self.connection_file else a for a in argv]
        return self.sandbox.wrap(argv)
