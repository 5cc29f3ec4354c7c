"""A warm Python inside the grading sandbox that forks a fresh, walled-off kernel for each submission.

Run by forked_kernels.KernelTemplate, inside bubblewrap, as a script (it sees no other file of autograde/).
Starting a kernel costs about a CPU-second (Python, IPython, numpy, matplotlib, qkv); this process pays it once
and then, for each submission, forks. The fork must not let one student's code reach the template, or through
it the next student's kernel, so each child is walled off from the template before any student code runs:

    template (this process, not dumpable: no ptrace, no /proc/PID/mem, even for the same uid)
      └─ keeper    new user, mount, PID, IPC, network and UTS namespaces; fresh tmpfs on /tmp, the home folder
         │         and /dev/shm; its socket folder a small tmpfs of its own (the grader reaches it through
         │         /proc, forked_kernels.py), holding the connection file; waits for the kernel, exits with its status
         └─ kernel PID 1 of its own PID namespace (the template is not there to signal, and everything the student
                   starts dies with it), no capabilities left, no new privileges; then ipykernel, as
                   `python -m ipykernel_launcher -f CONNECTION` would run it

Each child's namespaces are owned by a new user namespace, so it holds no capability over the template's; the
mounts it inherits are locked (they cannot be unmounted to reveal the shared folders underneath). Requests come
as JSON lines on stdin, answers go as JSON lines on stdout:

    {"op": "spawn", "connection": {...}}               -> {"pid": P} (P as this namespace sees it) or {"error": ...}
    {"op": "signal", "pid": P, "signal": N}            -> {"ok": true}
    {"op": "poll", "pid": P}                           -> {"returncode": None | int, "cpu_seconds": float}
"""
import ctypes
import gc
import importlib
import json
import os
import re
import signal
import sys
import time

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
KERNEL_UID = 1000  # the kernel's uid in its own user namespace: not 0, so no exec can give capabilities back

libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
    _check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                      data and data.encode()), f"mount {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities():
    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the last capability: nothing to drop
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(libc.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), (_CapData * 2)()), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def warm(modules, calls=()):
    """Import what every kernel imports, call what every kernel calls (`qkv.model.load`: the weights), and draw
    one figure so fonts and the Agg renderer are loaded."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as error:  # a module this lesson's kernels cannot import: they will say so themselves
            print(f"kernel template: could not import {name}: {error}", file=sys.stderr)
    for dotted in calls:
        module, _, function = dotted.rpartition(".")
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as error:
            print(f"kernel template: could not call {dotted}: {error}", file=sys.stderr)
    # inspect.getmodule, which IPython's tracebacks call for every frame, maps every loaded module's file to its name
    # the first time it meets a file it does not know: done here once, a blank notebook's kernel skips it (~20 ms)
    import inspect
    inspect.getmodule(compile("", "<the kernel template>", "exec"))
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        figure = Figure()
        FigureCanvasAgg(figure)
        axes = figure.subplots()
        axes.plot([0, 1], [0, 1], label="warm")
        axes.set_title("warm")
        axes.legend()
        figure.canvas.draw()
    except Exception as error:
        print(f"kernel template: could not warm matplotlib: {error}", file=sys.stderr)


def keep_out_of_collections():
    """Everything warm() loaded goes to the collector's permanent generation (gc.freeze), so that the kernels forked
    from here never traverse it: a kernel's own garbage collections otherwise walked all of numpy, matplotlib and
    IPython again, writing to each object's header and so copying every page they live on. Lesson 01's two figures
    in a child forked from such a process: 14,800 page faults without, 11,500 with; on this course's 2-core machine
    2.3-2.7 CPU-s without, 1.4-2.3 with (the machine's speed varied by half from one minute to the next)."""
    gc.collect()
    gc.freeze()


def _write(fd, message):
    os.write(fd, (json.dumps(message) + "\n").encode())


def _mount_points():
    with open("/proc/self/mountinfo") as f:  # the 5th field; space, tab, newline and backslash octal-escaped
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f]


def fresh_tmpfs(folder, options):
    """A new, empty tmpfs on `folder`, with the sandbox's read-only binds below it kept in place: an environment,
    a course or a clone that lives under /tmp must stay visible to the kernel."""
    prefix = folder.rstrip("/") + "/"
    below = {p for p in _mount_points() if p.startswith(prefix)}
    outermost = sorted(p for p in below if not any(p.startswith(q + "/") for q in below if q != p))
    held = [(path, os.open(path, os.O_PATH)) for path in outermost]
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path, fd in held:
        source = f"/proc/self/fd/{fd}"
        if os.path.isdir(source):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(source, path, None, MS_BIND | MS_REC)  # a bind keeps its read-only flag, locked by the namespace
        os.close(fd)


def become_kernel(request, settings, report_fd):
    """In the keeper (a fresh fork of the template): build the walls, fork the kernel, wait for it."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    uid, gid = os.getuid(), os.getgid()
    # A process that is not dumpable (the template is not) has its /proc/self files owned by the root of its user
    # namespace, and a new namespace's root is mapped to nobody until uid_map is written: as any user but the real
    # root, opening setgroups failed (PermissionError) and grading lost its warm kernels. Dumpable just long enough to
    # write its own maps; no kernel exists yet, and none will see this process (its PID namespace is the kernel's
    # parent's).
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS),
           "unshare")
    with open("/proc/self/setgroups", "w") as f:  # before gid_map, as an unprivileged user namespace requires
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{KERNEL_UID} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{KERNEL_UID} {gid} 1")
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # the student can write here: capped, so that it cannot fill a disk
    _mount("tmpfs", settings["kernel_folder"], "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={settings['socket_bytes']},mode=0700")
    if request.get("connection"):
        with open(os.path.join(settings["kernel_folder"], "kernel.json"), "w") as f:
            json.dump(request["connection"], f)
    size = f"size={settings['home_bytes']},mode=0700"
    for folder in ("/tmp", settings["home"], "/dev/shm"):  # nothing an earlier kernel wrote is left to read
        fresh_tmpfs(folder, size)
    os.makedirs(os.path.join(settings["home"], ".matplotlib"), exist_ok=True)
    kernel = os.fork()
    if kernel == 0:
        try:
            run_kernel(request, settings)
        finally:
            os._exit(70)
    _write(report_fd, {"pid": kernel})
    os.close(report_fd)
    os.closerange(0, 3)
    _, status = os.waitpid(kernel, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def run_kernel(request, settings):
    """PID 1 of the kernel's namespace: drop everything, then run ipykernel as its launcher would."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.setsid()
    drop_all_capabilities()
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # an ordinary process again, for whatever the student runs
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 1 << 16)
    os.chdir(settings["home"])
    if request.get("probe"):  # can a kernel behind these walls see what it needs (Python, the library, ...)?
        os._exit(3 if [p for p in settings.get("must_see", []) if not os.path.exists(p)] else 0)
    if "numpy" in sys.modules:  # every kernel its own random stream, as a freshly started one has
        sys.modules["numpy"].random.seed()
    if sys.path and sys.path[0] in ("", os.path.dirname(os.path.abspath(__file__))):
        del sys.path[0]
    sys.argv = ["ipykernel_launcher", "-f", os.path.join(settings["kernel_folder"], "kernel.json")]
    from ipykernel import kernelapp

    shell_messages_on_the_main_thread(kernelapp)
    app = kernelapp.IPKernelApp.instance()  # as launch_new_instance does, with one hook before it starts
    app.initialize()
    one_line_withheld_tracebacks(app.shell)
    figures_with_alt_text(app.shell)
    app.start()
    os._exit(0)


def shell_messages_on_the_main_thread(kernelapp):
    """ipykernel 7 reads the shell channel in a thread of its own (for subshells, which no grader asks for) that hands
    each message to the main thread and each reply back: a third of the CPU a grading kernel spent on a call from a
    test (issue 45). Here the main thread reads them, as in ipykernel 6 (its code path when there is no such
    thread); the kernel then does not offer subshells."""
    kernelapp.ShellChannelThread = lambda *args, **kwargs: None


def figures_with_alt_text(shell):
    """Figures shown with their description as alt text, as in a student's kernel (issue 44): qkv was imported
    here before this kernel's shell existed, so its own registration (qkv.figure_display) found none."""
    try:
        from qkv.figure_display import show_figures_with_alt_text
    except ImportError:  # not a kernel view of qkv
        return
    show_figures_with_alt_text(shell)


def one_line_withheld_tracebacks(shell):
    """A demonstration cell that calls a reference this lesson withholds raises WithheldDuringGrading, and the
    grader replaces everything that cell showed with a note (preprocessors._explain_withheld): the traceback is
    never seen. IPython formats it twice all the same (once to show, once for its history), with stack_data and
    pygments over every frame; lesson 05 has ten such cells, and grading 3 of its solved submissions went from
    6.7 to 4.7 CPU-s each with this (load 5, identical graded notebooks and feedback pages).
    Here that one exception gets a one-line traceback with the same name and message; every other error keeps
    IPython's full traceback, which the student does see. It is added beside qkv.checking's short Hints, which the
    notebook's first cell installs: set alone, whichever came second replaced the other."""
    try:
        from qkv._withheld import WithheldDuringGrading
        from qkv.checking.display import add_custom_traceback
    except ImportError:  # not a kernel view of qkv: nothing is withheld
        return

    def show(shell, etype, value, tb, tb_offset=None):
        sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # as showtraceback leaves them
        stb = [f"{etype.__name__}: {value}"]
        shell._showtraceback(etype, value, stb)
        return stb

    add_custom_traceback(shell, (WithheldDuringGrading,), show)
    for_history = getattr(shell, "_format_exception_for_storage", None)  # IPython >= 9 keeps them
    if for_history is None:
        return

    def format_for_storage(exception, *args, **kwargs):
        if isinstance(exception, WithheldDuringGrading):
            return {"ename": type(exception).__name__, "evalue": str(exception),
                    "traceback": [f"{type(exception).__name__}: {exception}"]}
        return for_history(exception, *args, **kwargs)

    shell._format_exception_for_storage = format_for_storage


class Template:
    def __init__(self, settings):
        self.settings = settings
        self.keepers = {}   # kernel pid -> keeper pid
        self.finished = {}  # kernel pid -> (returncode, cpu seconds)

    def spawn(self, request):
        read_fd, write_fd = os.pipe()
        keeper = os.fork()
        if keeper == 0:
            try:
                os.close(read_fd)
                os.closerange(0, 3)  # the grader's pipes are the template's alone
                become_kernel(request, self.settings, write_fd)
            except BaseException as error:
                try:
                    _write(write_fd, {"error": f"{type(error).__name__}: {error}"})
                finally:
                    os._exit(71)
        os.close(write_fd)
        with os.fdopen(read_fd) as answer:
            line = answer.readline()
        reply = json.loads(line) if line else {"error": "the keeper exited before starting the kernel"}
        if "pid" in reply:
            self.keepers[reply["pid"]] = keeper
        else:
            os.waitpid(keeper, 0)
        return reply

    def signal(self, request):
        pid = request["pid"]
        if pid in self.keepers:
            try:
                os.kill(pid, request["signal"])
            except ProcessLookupError:
                pass
            if request["signal"] == signal.SIGKILL:  # reaped here, so the grader's next poll need not wait 0.1 s
                for _ in range(200):
                    if self.poll(request)["returncode"] is not None:
                        break
                    time.sleep(0.005)
        return {"ok": True}

    def poll(self, request):
        pid = request["pid"]
        if pid in self.finished:
            returncode, cpu = self.finished[pid]
            return {"returncode": returncode, "cpu_seconds": cpu}
        keeper = self.keepers.get(pid)
        if keeper is None:
            return {"returncode": -1, "cpu_seconds": 0.0}
        done, status, usage = os.wait4(keeper, os.WNOHANG)
        if done == 0:
            return {"returncode": None}
        del self.keepers[pid]
        returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        self.finished[pid] = (returncode, cpu)
        return {"returncode": returncode, "cpu_seconds": cpu}


def serve():
    settings = json.loads(sys.argv[1])
    os.environ.update(settings.get("environment", {}))
    warm(settings.get("modules", []), settings.get("calls", []))
    keep_out_of_collections()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    template = Template(settings)
    out = sys.stdout.fileno()
    _write(out, {"ready": os.getpid(), "threads": len(os.listdir("/proc/self/task"))})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = getattr(template, request["op"])(request)
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}"}
        _write(out, reply)


if __name__ == "__main__":
    serve()
