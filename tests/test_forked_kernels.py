"""Kernels forked from a warm template (forked_kernels.py, kernel_template.py) are walled off from the template and
from each other: a student's kernel cannot leave anything for the next one, cannot reach the template (ptrace,
its memory, signals), has no capability and no network, and everything it starts dies with it.

Each test runs student code in real forked kernels and checks from outside what it could and could not do.
"""
import json
import os
import socket
import sys

import nbformat
import pytest

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.kernels import forked_kernels, sandbox, student_kernel  # noqa: E402
from qkv_autograde.grading import preprocessors  # noqa: E402

LESSON = "01-lookup"

if not sandbox.bwrap_works():
    if os.environ.get("CI"):
        raise RuntimeError("bubblewrap is missing under CI: `make sandbox` (.ci/install-sandbox) installs it")
    pytest.skip("forked kernels need bubblewrap (make sandbox)", allow_module_level=True)


@pytest.fixture(scope="module")
def template():
    warm = forked_kernels.KernelTemplate(**preprocessors.kernel_walls(LESSON, 2 << 30))
    yield warm
    warm.close()


def run_in_new_kernel(template, source):
    """Run `source` in a kernel forked from `template`; the JSON it prints last, decoded."""
    kernel = student_kernel.StudentKernel(lambda: forked_kernels.ForkedKernelManager(template=template),
                                          cell_seconds=60)
    try:
        kernel.start()
        cell = nbformat.v4.new_code_cell(source)
        status = kernel.run_cell(cell, 0)
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.get("output_type") == "error"]
        assert status == "ok", (status, errors, text)
        return json.loads(text.strip().splitlines()[-1])
    finally:
        kernel.close()


def descendants(pid):
    """Command lines of every live process below `pid` (host /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            children.setdefault(parent, []).append((int(entry), command))
    found, stack = [], [pid]
    while stack:
        for child, command in children.get(stack.pop(), []):
            found.append(command)
            stack.append(child)
    return found


LEAVE_TRACES = r"""
import json, os, subprocess
places = ["/tmp", os.environ["HOME"], "/dev/shm", "/", "/dev", "/run", "/opt/qkv", "/run/qkv-kernel/..", SHARED]
written = {}
for place in places:
    try:
        with open(os.path.join(place, "trace-of-an-earlier-kernel"), "w") as f:
            f.write("x")
        written[place] = True
    except OSError:
        written[place] = False
subprocess.Popen(["sleep", "600"])             # a straggler that should die with the kernel
if os.fork() == 0:                              # and a daemonised one
    os.setsid()
    subprocess.Popen(["sleep", "601"])
    os._exit(0)
print(json.dumps(written))
"""

FIND_TRACES = r"""
import json, os
places = ["/tmp", os.environ["HOME"], "/dev/shm", "/", "/dev", "/run", "/opt/qkv", SHARED]
print(json.dumps({p: os.path.exists(os.path.join(p, "trace-of-an-earlier-kernel")) for p in places}))
"""


def test_a_kernel_leaves_nothing_for_the_next_one(template):
    shared = repr(template.shared_folder)
    written = run_in_new_kernel(template, LEAVE_TRACES.replace("SHARED", shared))
    # its own scratch space is writable; the template's shared world is not
    assert written["/tmp"] and written["/dev/shm"] and written[sandbox.Sandbox.HOME], written
    assert not any(written[p] for p in ("/", "/dev", "/run", "/opt/qkv", "/run/qkv-kernel/..",
                                        template.shared_folder)), written
    found = run_in_new_kernel(template, FIND_TRACES.replace("SHARED", shared))
    assert not any(found.values()), f"the next kernel found traces of the earlier one: {found}"
    left = [c for c in descendants(template.process.pid) if c.startswith("sleep")]
    assert not left, f"processes started by an earlier kernel are still running: {left}"


ATTACK_THE_TEMPLATE = r"""
import ctypes, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
me = os.readlink("/proc/self")
targets = []
for entry in os.listdir("/proc"):
    if entry.isdigit() and entry != me:
        try:
            if b"kernel_template" in open(f"/proc/{entry}/cmdline", "rb").read():
                targets.append(int(entry))
        except OSError:
            pass
done = {"targets": len(targets), "memory": 0, "ptrace": 0, "pidfd": 0, "kill": 0, "environ": 0}
for pid in targets:
    try:
        with open(f"/proc/{pid}/mem", "r+b") as f:
            f.write(b"x")
        done["memory"] += 1
    except OSError:
        pass
    try:
        open(f"/proc/{pid}/environ", "rb").read()
        done["environ"] += 1
    except OSError:
        pass
    if libc.ptrace(16, pid, None, None) == 0:   # PTRACE_ATTACH
        done["ptrace"] += 1
    try:
        fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        done["pidfd"] += 1
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)   # a number in the template's namespace: not the template's in this one
        done["kill"] += 1
    except OSError:
        pass
status = open("/proc/self/status").read()
done["capabilities"] = [l.split()[1] for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
done["uid"] = os.getuid()
done["pid"] = os.getpid()
print(json.dumps(done))
"""


def test_a_kernel_cannot_reach_the_template(template):
    done = run_in_new_kernel(template, ATTACK_THE_TEMPLATE)
    assert done["targets"] >= 1, "the template should at least be visible in /proc, to attack"
    assert (done["memory"], done["environ"], done["ptrace"], done["pidfd"]) == (0, 0, 0, 0), done
    assert set(done["capabilities"]) == {"0000000000000000"}, done
    assert done["uid"] != 0 and done["pid"] == 1, done
    assert template.alive
    assert run_in_new_kernel(template, "import json; print(json.dumps('still forking'))") == "still forking"


def test_a_kernel_has_no_network():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    warm = forked_kernels.KernelTemplate(**preprocessors.kernel_walls(LESSON, 2 << 30))
    try:
        reached = run_in_new_kernel(warm, "import json, socket\ntry:\n"
                                          f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                                          "    print(json.dumps(True))\nexcept OSError:\n    print(json.dumps(False))")
    finally:
        warm.close()
        listener.close()
    assert reached is False


def test_a_forked_kernel_is_a_normal_kernel_for_the_student(template):
    """What a notebook sees: its own random stream, the lesson's qkv (references withheld), figures, a clean home;
    widgets, which no front end will display, draw no picture."""
    source = ("import json, os, numpy as np\nimport matplotlib.pyplot as plt\n%matplotlib inline\n"
              "from qkv import attention\ntry:\n    attention.softmax(np.zeros(3))\n    withheld = False\n"
              "except Exception as e:\n    withheld = type(e).__name__\n"
              "plt.plot([1, 2]); plt.close('all')\n"
              "from qkv import widgets\n"
              "picture = widgets.live_figure(lambda f: f.subplots(), {}, (2, 1)).value\n"
              "print(json.dumps({'random': float(np.random.rand()), 'withheld': withheld, 'cwd': os.getcwd(),"
              " 'home': sorted(os.listdir(os.environ['HOME'])), 'widget picture characters': len(picture)}))")
    first, second = run_in_new_kernel(template, source), run_in_new_kernel(template, source)
    assert first["random"] != second["random"], "every kernel must have its own random stream"
    assert first["withheld"] == "WithheldDuringGrading"
    assert first["cwd"] == sandbox.Sandbox.HOME
    assert ".matplotlib" in first["home"]
    assert first["widget picture characters"] == 0, "no front end will show a widget: it draws no picture"


def test_a_model_lessons_kernels_read_the_results_their_template_hashed_without_hashing_again(monkeypatch):
    """The grader's template for a model lesson loads the weights and hashes every entry of the results cache, which
    it and its kernels can only read; a kernel reads those entries without hashing them again."""
    from qkv import model_cache
    from qkv_autograde.grading import parallel, startup

    # the entries the template can read are those computed with today's code at its kernels' thread count, as make
    # grade makes sure of first: entries of an older model.py (or only those other tests computed in this process,
    # at another thread count) are never read there, and the template would hash none
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):    # one count for the fill, the template and its kernels
        monkeypatch.setenv(name, "1")
    startup.prepare_model("06-sinks")
    entries = sorted(model_cache.results_dir().glob("*" + model_cache.SUFFIX))
    if not entries:
        pytest.skip("no model results cached here (make model fills them)")
    monkeypatch.setattr(parallel, "_templates", {})
    warm = parallel.kernel_template("06-sinks", 3 << 30)
    try:
        seen = run_in_new_kernel(warm, READ_A_VERIFIED_ENTRY)
    finally:
        warm.close()
    assert seen["verified"] and set(seen["verified"]) <= {str(p) for p in entries}
    assert seen["read"] and seen["hashed"] == 0, seen


READ_A_VERIFIED_ENTRY = r"""
import json
from pathlib import Path
from qkv import model, model_cache
hashed = []
model_cache._payload_digest = lambda *args: hashed.append(1)    # a hash needed now would also fail the read
path = Path(sorted(model_cache._verified)[0])
with open(path, "rb") as file:
    file.readline()
    header = json.loads(file.readline())
names = [name for name, _, _ in header["arrays"]]
found = model_cache.read(header["key"], model.load().config, header["arrays"][0][2][0],
                         any(n.startswith("weights.") for n in names), any(n.startswith("hidden.") for n in names),
                         folder=path.parent)
print(json.dumps({"verified": sorted(model_cache._verified), "read": found is not None, "hashed": len(hashed)}))
"""


def test_without_bubblewrap_there_is_no_template_and_kernels_start_afresh(monkeypatch):
    from qkv_autograde.grading import parallel

    monkeypatch.setenv("QKV_SANDBOX_FORCE_PARTIAL", "1")
    with pytest.raises(forked_kernels.TemplateUnavailable):
        forked_kernels.KernelTemplate(**preprocessors.kernel_walls(LESSON, 2 << 30))
    monkeypatch.setattr(parallel, "_templates", {})
    assert parallel.kernel_template(LESSON, 2 << 30) is None  # the worker grades with fresh kernels instead


def test_read_only_folders_under_tmp_stay_visible_and_read_only(tmp_path):
    """A course, a clone or an environment under /tmp (as CI has it) is bound read-only into the sandbox; each
    kernel's fresh /tmp must keep it visible, and still read-only."""
    extra = tmp_path / "course-under-tmp"
    extra.mkdir()
    (extra / "lesson.txt").write_text("released text")
    walls = preprocessors.kernel_walls(LESSON, 2 << 30)
    warm = forked_kernels.KernelTemplate(**dict(walls, read_only=walls["read_only"] + [str(extra)]))
    try:
        seen = run_in_new_kernel(warm, "import json\nfolder = " + repr(str(extra)) + "\n"
                                       "text = open(folder + '/lesson.txt').read()\ntry:\n"
                                       "    open(folder + '/written-by-a-kernel', 'w').write('x')\n    wrote = True\n"
                                       "except OSError:\n    wrote = False\nprint(json.dumps([text, wrote]))")
    finally:
        warm.close()
    assert seen == ["released text", False]
    assert not (extra / "written-by-a-kernel").exists()


def test_a_kernel_finds_what_grading_kernels_import_and_inspects_module_map_already_made(template):
    """Issue 45: what every grading kernel imported for itself (IPython's magics, a blank notebook's traceback
    formatting, qkv.plots' colour bar) and inspect's map of module files, which IPython's tracebacks fill on their
    first frame, are the template's, made once; matplotlib's inline backend still hooks into each kernel's shell."""
    source = ("import inspect, json, sys\nimport matplotlib.pyplot as plt\n%matplotlib inline\n"
              f"missing = [m for m in {list(forked_kernels.WARM_MODULES)!r} if m not in sys.modules]\n"
              "from matplotlib_inline.backend_inline import flush_figures\n"
              "hooked = flush_figures in get_ipython().events.callbacks['post_execute']\n"
              "print(json.dumps({'missing': missing, 'files mapped': len(inspect.modulesbyfile), 'hooked': hooked}))")
    seen = run_in_new_kernel(template, source)
    assert seen["missing"] == []
    assert seen["files mapped"] > 500, seen["files mapped"]
    assert seen["hooked"], "%matplotlib inline no longer shows a cell's figures"
