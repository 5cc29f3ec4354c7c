"""Warm kernels for a grading worker: one sandboxed template per worker, one forked kernel per submission.

A grading worker starts `KernelTemplate` once: a Python inside the same bubblewrap walls as a student kernel
(sandbox.py), with IPython, numpy, matplotlib and the lesson's view of qkv already imported. Each submission's
kernel is then a fork of it, walled off from the template and from every earlier kernel (kernel_template.py
says how), instead of a new Python paying its start-up again. `ForkedKernelManager` is a jupyter_client kernel
manager whose kernels come from the template, so nbclient and StudentKernel drive them like any other.

Where bubblewrap or nested namespaces are missing, `KernelTemplate.start` fails and the worker grades with a
fresh sandboxed kernel per submission, as `nbgrader autograde` does.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from queue import Empty

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from traitlets import Any

from qkv_autograde.kernels import sandbox, student_kernel
from qkv_autograde.kernels.bounded_client import BoundedKernelClient

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_template.py")
SCRIPT_INSIDE = "/opt/qkv/kernel_template.py"
KERNEL_FOLDER = sandbox.SOCKET_FOLDER  # where each kernel sees its own socket folder, a tmpfs of its own
# what a lesson's kernel imports anyway; the template imports it once. The second part is what a grading kernel
# imported for itself, found by listing sys.modules at the end of lessons 01 and 05, solved and blank: IPython's
# shell and its magics, the traceback formatting of a blank notebook (stack_data, pygments) and qkv.plots' colour
# bar (about 35 ms a kernel). Not matplotlib_inline: imported with no shell around, it would never hook itself in.
WARM_MODULES = ("numpy", "matplotlib", "matplotlib.pyplot", "matplotlib.backends.backend_agg",
                "IPython", "IPython.core.pylabtools", "ipykernel.kernelapp", "ipykernel.ipkernel",
                "ipykernel.zmqshell", "ipykernel.debugger", "ipywidgets", "jupyter_client.session", "zmq",
                "tornado.ioloop",
                "IPython.core.magics", "IPython.core.debugger", "IPython.core.completerlib", "IPython.core.oinspect",
                "IPython.core.logger", "IPython.extensions.storemagic", "stack_data", "executing", "pure_eval",
                "asttokens", "pygments.formatters.terminal256", "pygments.formatters.html", "pygments.lexers.python",
                "pygments.styles", "mpl_toolkits.axes_grid1", "sqlite3", "psutil", "faulthandler", "runpy")


class TemplateUnavailable(RuntimeError):
    pass


def _qkv_modules(view):
    names = ["qkv"]
    for entry in sorted(os.listdir(view)):
        if entry.endswith(".py") and not entry.startswith("_") and entry != "__init__.py":
            names.append(f"qkv.{entry[:-3]}")
    return names


class KernelTemplate:
    """The warm, sandboxed template of one worker; `spawn` forks a walled-off kernel from it."""

    def __init__(self, library_view, limits=sandbox.Limits(), read_only=(), env=None, calls=(), startup_seconds=120):
        self.shared_folder = tempfile.mkdtemp(prefix="qkvz-")
        os.chmod(self.shared_folder, 0o700)
        self.walls = sandbox.Sandbox(library_view, limits=limits, read_only=read_only, env=env,
                                     connection_dir=self.shared_folder, template_script=(SCRIPT, SCRIPT_INSIDE),
                                     kernel_folder=KERNEL_FOLDER)
        if self.walls.mode != "bwrap":
            self.walls.cleanup()
            raise TemplateUnavailable("no bubblewrap here: each kernel starts fresh")
        # the template's cgroup holds it and its keepers; each kernel is moved into a cgroup of its own at spawn
        settings = {"home": self.walls.HOME, "home_bytes": limits.home_bytes, "socket_bytes": limits.socket_bytes,
                    "kernel_folder": KERNEL_FOLDER,
                    "modules": list(WARM_MODULES) + _qkv_modules(library_view[1]), "calls": list(calls),
                    "must_see": [sys.prefix, sys.base_prefix, library_view[0]] + self.walls.read_only}
        self.lock = threading.Lock()
        self.count = 0
        self.unread = b""
        self.process = subprocess.Popen(self.walls.wrap([sys.executable, SCRIPT_INSIDE, json.dumps(settings)]),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, bufsize=1)
        ready = self.ready = self._read(startup_seconds)
        if "ready" not in ready:
            self.close()
            raise TemplateUnavailable(f"the kernel template did not start: {ready}")
        probe = self.spawn_probe()
        if probe:
            self.close()
            raise TemplateUnavailable(f"the kernel template cannot wall off a kernel here: {probe}")

    def _read(self, seconds=60):
        """The template's next answer line, or an error after `seconds`. Read from the pipe's descriptor, never
        through the text wrapper, so that nothing can sit in a buffer that select does not see."""
        deadline = time.monotonic() + seconds
        answers = self.process.stdout.fileno()
        while b"\n" not in self.unread:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([answers], [], [], left)[0]:
                self.process.kill()  # its late answer would be taken for the next one's: a new template instead
                return {"error": f"the kernel template did not answer within {seconds} s"}
            chunk = os.read(answers, 1 << 16)
            if not chunk:
                return {"error": "the kernel template exited"}
            self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        return json.loads(line)

    def request(self, **message):
        with self.lock:
            if self.process.poll() is not None:
                return {"error": "the kernel template exited"}
            try:
                self.process.stdin.write(json.dumps(message) + "\n")
                self.process.stdin.flush()
            except (BrokenPipeError, OSError):
                return {"error": "the kernel template exited"}
            return self._read()

    def new_folder(self):
        """A fresh folder for the next kernel's connection file on the grader's side (its name, its path)."""
        self.count += 1
        name = f"k{self.count}"
        os.mkdir(os.path.join(self.shared_folder, name), 0o700)
        return name, os.path.join(self.shared_folder, name)

    def spawn(self, connection):
        """A new kernel reading `connection` (its connection file's content); its pid as the template sees it."""
        reply = self.request(op="spawn", connection=connection)
        if "pid" not in reply:
            raise TemplateUnavailable(reply.get("error", str(reply)))
        return reply["pid"]

    def host_pid(self, pid):
        """The pid here of the template's child `pid` (the second field of its NSpid), or None if it is gone."""
        for candidate in student_kernel.process_tree(self.process.pid):
            try:
                with open(f"/proc/{candidate}/status") as f:
                    nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
            except OSError:
                continue
            if len(nspid) >= 2 and nspid[1] == str(pid):
                return candidate
        return None

    def spawn_probe(self):
        """None when a kernel can be walled off here (nested namespaces allowed) and still sees Python, the
        library and the read-only extras behind its walls; else why not."""
        reply = self.request(op="spawn", probe=True)
        if "pid" not in reply:
            return reply.get("error", str(reply))
        returncode = None
        for _ in range(600):
            returncode = self.request(op="poll", pid=reply["pid"]).get("returncode")
            if returncode is not None:
                break
            time.sleep(0.05)
        return None if returncode == 0 else f"a probe kernel could not see its environment (exit {returncode})"

    def peak_rss_mb(self):
        """The largest peak resident memory among the template's processes (the template itself, in practice)."""
        peak = 0
        for pid in student_kernel.process_tree(self.process.pid):
            try:
                with open(f"/proc/{pid}/status") as f:
                    peak = max([peak] + [int(line.split()[1]) for line in f if line.startswith("VmHWM")])
            except OSError:
                continue
        return peak / 1024

    @property
    def alive(self):
        return self.process.poll() is None

    def close(self):  # twice is harmless (at exit, by atexit and by multiprocessing's finalizers)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.walls.cleanup()
        shutil.rmtree(self.shared_folder, ignore_errors=True)


class ForkedKernelProcess:
    """The Popen-like handle jupyter_client's provisioner expects, for a kernel forked by the template."""

    stdin = stdout = stderr = None

    def __init__(self, template, pid):
        self.template, self.pid = template, pid
        self.returncode = None
        self.cpu_seconds = 0.0

    def poll(self):
        if self.returncode is None:
            reply = self.template.request(op="poll", pid=self.pid)
            if "error" in reply:
                self.returncode = -9  # the template is gone, and every kernel it forked with it
            elif reply.get("returncode") is not None:
                self.returncode = reply["returncode"]
                self.cpu_seconds = reply.get("cpu_seconds", 0.0)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum):
        if self.returncode is None:
            self.template.request(op="signal", pid=self.pid, signal=int(signum))

    def kill(self):
        self.send_signal(signal.SIGKILL)

    terminate = kill  # a kernel being shut down by the grader has nothing to save


class ForkedProvisioner(LocalProvisioner):
    """LocalProvisioner whose launch asks the template for a fork instead of starting a process. Its `pid` stays
    None: the kernel's pid is the template's namespace's, meaningless to os.kill here.

    The forked kernel is moved into a cgroup of its own (memory and processes of its whole tree) before the grader
    sends it anything, so before any student code runs; its sockets are in its own capped tmpfs, reached through
    /proc (sandbox.open_socket_folder)."""

    forked = cgroup = None
    socket_fd = None

    async def launch_kernel(self, cmd, **kwargs):
        km = self.parent
        inside = dict(km.get_connection_info(session=False))
        inside["ip"] = os.path.join(KERNEL_FOLDER, "kernel")
        for key in ("key", "signature_scheme"):
            inside[key] = inside[key].decode() if isinstance(inside[key], bytes) else inside[key]
        pid = km.template.spawn(inside)
        limits = km.template.walls.limits
        self.cgroup = sandbox.KernelCgroup(limits.memory_bytes, limits.processes)
        self.process = self.forked = ForkedKernelProcess(km.template, pid)  # jupyter_client drops .process at exit
        self.pid = self.pgid = None
        self.cwd = sandbox.Sandbox.HOME
        host = km.template.host_pid(pid)
        if host is None:  # it died at once: the manager will find it dead
            return self.connection_info
        try:
            self.cgroup.add(host)
            self.socket_fd = os.open(f"/proc/{host}/root{KERNEL_FOLDER}", os.O_PATH | os.O_DIRECTORY)
        except OSError:
            self.forked.kill()  # a kernel outside its limits runs nothing
            return self.connection_info
        return dict(self.connection_info, ip=f"/proc/self/fd/{self.socket_fd}/kernel")

    async def cleanup(self, restart=False):
        await super().cleanup(restart)
        sandbox.close_quietly(self.socket_fd)
        self.socket_fd = None
        if self.cgroup is not None:
            if isinstance(self.parent.limit_events, list):
                self.parent.limit_events += sandbox.limit_events(self.cgroup)
            self.cgroup.remove()
            self.cgroup = None
        if not restart:  # the grader's side of its connection file
            shutil.rmtree(self.parent.kernel_folder, ignore_errors=True)

    def cpu_seconds(self):
        return self.forked.cpu_seconds if self.forked else 0.0


class ForkedKernelClient(BoundedKernelClient):
    """jupyter_client's start-up handshake without its fixed waits, which a forked kernel (ready within a few
    milliseconds) would spend idle: at least 0.2 s, often 0.4 s, per submission.

    The same protocol: kernel_info is requested until its reply has come back and IOPub has delivered a message
    (so IOPub is connected: ZeroMQ drops what is published before a subscriber joins). IOPub is then drained of
    what is already there instead of waiting for 0.2 s of silence: nbclient files every later message under the
    request it answers, so a late start-up status message cannot land in a cell's outputs.
    """

    async def _async_wait_for_ready(self, timeout=None):
        deadline = time.monotonic() + (60 if timeout is None else timeout)
        while True:
            request = self.kernel_info()
            try:
                reply = await self._async_recv_reply(request, timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except TimeoutError:
                reply = None
            if reply is not None:
                try:
                    await self.iopub_channel.get_msg(timeout=0.05)
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(reply)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")
        while True:
            try:
                await self.iopub_channel.get_msg(timeout=0)
            except Empty:
                return

    wait_for_ready = _async_wait_for_ready  # what nbclient calls (the base class binds its own at definition)


class ForkedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel is forked from a KernelTemplate, talking over IPC sockets in its own folder."""

    template = Any()
    limit_events = Any()  # a list the provisioner adds (anomaly, detail) to: limits missing, processes killed

    def __init__(self, **kwargs):
        template = kwargs["template"]
        _, folder = template.new_folder()
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("ip", os.path.join(folder, "kernel"))
        kwargs.setdefault("connection_file", os.path.join(folder, "kernel.json"))
        super().__init__(**kwargs)
        self.client_factory = ForkedKernelClient
        self.kernel_folder = folder

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.get("kernel_id") or os.path.basename(self.kernel_folder)
            self.provisioner = ForkedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)
