"""The grader's pieces, each alone: the wire codec, the kernel's view of qkv, staging, metadata recovery,
test cells run in the grader, and the sandbox's walls."""
import functools
import json
import os
import subprocess
import sys
import types

import nbformat
import numpy as np
import pytest

from lessons import ROOT, solved_release
from qkv import heads, wire
from qkv.checking import REFERENCE_MODULES
from qkv.lessons import LESSONS as LESSONS_REGISTRY

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.kernels import kernel_view, sandbox, student_kernel  # noqa: E402
from qkv_autograde.grading import preprocessors, verdicts  # noqa: E402
from qkv_autograde.intake import submissions  # noqa: E402


# ---------------------------------------------------------------- qkv.wire

@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, float("nan"), float("inf"), "text", [1, [2.0, "x"]], (1, (2, 3)), {"a": 1, 2: (3,)},
    np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]), np.float32(1.5), np.int64(7),
    np.zeros((0, 4)), types.SimpleNamespace(d_model=8, n_heads=2),
])
def test_wire_round_trips_plain_data_with_types_intact(value):
    back = wire.decode(wire.encode(value))
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape and np.array_equal(back, value)
    elif isinstance(value, float) and np.isnan(value):
        assert np.isnan(back)
    elif isinstance(value, types.SimpleNamespace):
        assert vars(back) == vars(value)
    else:
        assert back == value


def test_wire_carries_qkv_functions_partials_and_value_types_by_name():
    assert wire.decode(wire.encode(heads.split_heads)) is heads.split_heads
    partial = wire.decode(wire.encode(functools.partial(heads.split_heads, n_heads=2)))
    assert partial.func is heads.split_heads and partial.keywords == {"n_heads": 2}
    shape = heads.GPT2_SMALL
    assert wire.decode(wire.encode(shape)) == shape


def test_wire_carries_a_random_generator_at_its_exact_state():
    rng = np.random.default_rng(7)
    rng.normal(size=3)
    copy = wire.decode(wire.encode(rng))
    assert copy is not rng and np.array_equal(copy.normal(size=5), rng.normal(size=5))


def test_wire_refuses_what_is_not_plain_data():
    with pytest.raises(wire.WireError):
        wire.encode(lambda x: x)
    with pytest.raises(wire.WireError):
        wire.encode(np.array([object()]))
    bad = json.dumps({"__array__": {"dtype": "|O", "shape": [1], "data": ""}})
    with pytest.raises(wire.WireError):
        wire.decode(bad)
    with pytest.raises(wire.WireError):
        wire.decode(json.dumps({"__function__": "os:system"}))


def test_wire_names_anything_else_as_a_handle_in_the_kernel():
    kept = []
    plain = json.loads(wire.encode([object(), print], keep=lambda obj: kept.append(obj) or f"h{len(kept)}"))
    assert [p["__handle__"] for p in plain] == ["h1", "h2"] and plain[1]["callable"]


# ---------------------------------------------------------------- the kernel's view of qkv

def test_kernel_view_withholds_the_lessons_references_and_empties_the_checks(tmp_path):
    view = kernel_view.build("02-by-hand", str(tmp_path / "qkv"))
    attention = (tmp_path / "qkv" / "attention.py").read_text()
    assert "WithheldDuringGrading" in attention and "def softmax" in attention
    assert "np.exp" not in attention.split("def dot_scores")[1].split("def ")[0]
    assert "WithheldDuringGrading" not in attention.split("def softmax")[1].split("\ndef ")[0]  # lesson 01's: a tool
    assert "GRADED" not in (tmp_path / "qkv" / "checks" / "lesson02.py").read_text()
    for compiled in (tmp_path / "qkv").rglob("*.pyc"):  # compiled from the view's sources, never the library's
        assert compiled.stat().st_mtime >= (tmp_path / "qkv" / "attention.py").stat().st_mtime
    probe = subprocess.run([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import qkv.attention as a;"
                            "import numpy as np; print(a.softmax(np.zeros(2)).sum());"
                            # the checking package (the self-check questions) imports in the view
                            "import qkv.checking;"
                            "a.dot_scores(np.eye(2), np.eye(2))", str(tmp_path)], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)
    assert probe.stdout.strip() == "1.0" and "withheld while this lesson is graded" in probe.stderr, probe.stderr
    assert view.endswith("qkv")


def test_kernel_view_withholds_every_later_lessons_references(tmp_path):
    """Issue 34, item 2: later lessons build on earlier ones (exp of lesson 06's log_softmax is lesson 01's softmax),
    so while lesson 01 is graded every later lesson's graded references are withheld too, each saying whose it is."""
    kernel_view.build("01-lookup", str(tmp_path / "qkv"))
    later = {dotted for row in LESSONS_REGISTRY[1:] for dotted in kernel_view.graded_references(row.slug)}
    assert "qkv.sinks.log_softmax" in later and "qkv.attention.dot_scores" in later
    probe = subprocess.run([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import numpy as np, qkv.sinks as s;"
                            "s.log_softmax(np.zeros((2, 3)))", str(tmp_path)], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)
    assert "it is an exercise of lesson 06-sinks, which comes later" in probe.stderr, probe.stderr
    # lesson 07 withholds its own references, their private helpers and their twins (issue 41: qkv.heads'
    # grouped_query_attention is attention_step in one call), no earlier lesson's other functions
    withheld = set(kernel_view.withheld_while_graded("07-cost"))
    assert set(kernel_view.graded_references("07-cost")) <= withheld
    assert {"qkv.cost._online_softmax_update", "qkv.heads.grouped_query_attention"} <= withheld
    assert "qkv.attention.softmax" not in withheld and "qkv.heads.repeat_kv_heads" not in withheld


# ---------------------------------------------------------------- staging what students handed in

def _release_folder():
    return str(ROOT / "notebooks" / "01-lookup")


def test_staging_grades_renamed_files_refuses_dot_ids_and_reads_nothing_else(tmp_path):
    submitted = tmp_path / "submitted"
    cases = {"alice": "01-lookup.ipynb", "bob": "01-lookup-Copy1.ipynb", "carol": "Untitled.ipynb",
             "dan": "my work.ipynb", ".eve": "01-lookup.ipynb"}
    for student, name in cases.items():
        folder = submitted / student / "01-lookup"
        folder.mkdir(parents=True)
        nbformat.write(solved_release("01-lookup"), folder / name)
    (submitted / "frank" / "01-lookup").mkdir(parents=True)
    (submitted / "frank" / "01-lookup" / "01-lookup.ipynb").write_text("{not json")
    before = {p: p.read_bytes() for p in submitted.rglob("*") if p.is_file()}
    staged = {s.student: s for s in submissions.stage(str(tmp_path), "submitted", "01-lookup", ["01-lookup"],
                                                      _release_folder())}
    assert {p: p.read_bytes() for p in submitted.rglob("*") if p.is_file()} == before
    assert staged["alice"].anomalies == []
    for student in ("bob", "carol", "dan"):
        assert [a["name"] for a in staged[student].anomalies] == ["renamed file"]
        assert (tmp_path / ".staged" / student / "01-lookup" / "01-lookup.ipynb").exists()
    assert staged[".eve"].refused and "dot" in staged[".eve"].anomalies[0]["detail"]
    assert [a["name"] for a in staged["frank"].anomalies] == ["corrupt file"]
    frank = nbformat.read(tmp_path / ".staged" / "frank" / "01-lookup" / "01-lookup.ipynb", as_version=4)
    assert "could not read the notebook" in frank.cells[0].source


def test_staging_flags_a_notebook_handed_in_as_released(tmp_path):
    """Issue 35, item 5: every cell as released (run or not) is a `blank notebook`, whose 0 is a missing answer;
    a cell written, or one added, is work and is not flagged."""
    blank, ran, scratch = (solved_release("01-lookup", []) for _ in range(3))
    code = next(cell for cell in ran.cells if cell.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
    scratch.cells.append(nbformat.v4.new_code_cell("x = 1"))
    cases = {"blank": blank, "ran": ran, "scratch": scratch, "partial": solved_release("01-lookup", ["softmax"])}
    for student, nb in cases.items():
        folder = tmp_path / "submitted" / student / "01-lookup"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "01-lookup.ipynb")
    staged = {s.student: [a["name"] for a in s.anomalies] for s in submissions.stage(
        str(tmp_path), "submitted", "01-lookup", ["01-lookup"], _release_folder())}
    assert staged == {"blank": ["blank notebook"], "ran": ["blank notebook"], "scratch": [], "partial": []}
    flagged = nbformat.read(tmp_path / ".staged" / "blank" / "01-lookup" / "01-lookup.ipynb", as_version=4)
    assert [a["name"] for a in flagged.metadata["qkv"]["anomalies"]] == ["blank notebook"]


# ---------------------------------------------------------------- test cells, run in the grader

class FakeKernel:
    """Stands in for StudentKernel: the 'notebook' is a dict of the student's globals."""

    def __init__(self, names):
        self.names, self.events = names, []

    def get(self, name):
        if name not in self.names:
            raise KeyError(name)
        return self.names[name]


def _test_cell(source, grade_id="test_softmax"):
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade_id": grade_id, "grade": True}})


def _namespace():
    return verdicts.grader_namespace(nbformat.read(ROOT / "solutions" / "01-lookup" / "01-lookup.ipynb", as_version=4))


def test_a_test_cell_uses_the_graders_check_and_the_students_function():
    namespace = _namespace()
    good = lambda x, axis=-1: (np.exp(x - np.max(x, axis, keepdims=True))  # noqa: E731
                               / np.exp(x - np.max(x, axis, keepdims=True)).sum(axis, keepdims=True))
    cell = _test_cell("check.softmax(softmax)")
    # the student's own `check` (a no-op) is ignored: `check` is the grader's import
    assert verdicts.run_test_cell(cell, FakeKernel({"softmax": good, "check": lambda f: None}), namespace)
    assert not [o for o in cell.outputs if o.output_type == "error"]
    blank = _test_cell("check.softmax(softmax)")
    assert not verdicts.run_test_cell(blank, FakeKernel({"softmax": lambda x, axis=-1: x, "check": None}), namespace)
    assert blank.outputs[-1].ename == "Hint"
    missing = _test_cell("check.softmax(softmax)")
    assert not verdicts.run_test_cell(missing, FakeKernel({}), namespace)
    assert "not defined in your notebook" in missing.outputs[-1].evalue


def test_a_warning_in_a_passing_test_is_not_a_failure():
    def noisy(x, axis=-1):
        print("debugging", file=sys.stderr)
        x = np.asarray(x, dtype=float)
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    cell = _test_cell("check.softmax(softmax)")
    assert verdicts.run_test_cell(cell, FakeKernel({"softmax": noisy}), _namespace())
    assert all(o.output_type == "stream" and o.name == "stdout" for o in cell.outputs)


# ---------------------------------------------------------------- exceptions crossing back

def test_a_students_exception_keeps_its_type_message_and_line():
    error = student_kernel.student_exception({"type": "ValueError", "message": "bad axis", "builtin": True,
                                              "where": " (in your code, line 3: `x.sum(2)`)"})
    assert type(error) is ValueError and str(error) == "bad axis"
    custom = student_kernel.student_exception({"type": "MyError", "message": "m", "builtin": False, "where": ""})
    assert type(custom).__name__ == "MyError" and isinstance(custom, Exception)
    exit_error = student_kernel.student_exception({"type": "SystemExit", "message": "0", "builtin": True})
    assert isinstance(exit_error, Exception)  # a student's sys.exit() is a failed call, not the grader's exit
    from qkv.checking import where
    assert where(error) == " (in your code, line 3: `x.sum(2)`)"


# ---------------------------------------------------------------- metadata stripped by an editor

def test_stripped_metadata_is_recovered_by_content():
    nb = solved_release("01-lookup")
    original = {c.metadata["nbgrader"]["grade_id"]: i for i, c in enumerate(nb.cells) if "nbgrader" in c.metadata}
    for cell in nb.cells:
        cell.metadata = {}
    release = nbformat.read(ROOT / "notebooks" / "01-lookup" / "01-lookup.ipynb", as_version=4)
    nb.cells.insert(3, nbformat.v4.new_code_cell("# a scratch cell the student added"))
    original = {name: i + (i >= 3) for name, i in original.items()}
    matched = preprocessors.match_stripped_cells(nb, release)
    assert matched == original


# ---------------------------------------------------------------- the walls

@pytest.mark.skipif(not sandbox.bwrap_works(), reason="bubblewrap is not usable on this machine")
def test_the_sandbox_hides_the_course_and_the_network_and_caps_memory(tmp_path):
    view = kernel_view.build("01-lookup", str(tmp_path / "view" / "qkv"))
    walls = sandbox.Sandbox((kernel_view.LIBRARY, view), limits=sandbox.Limits(memory_bytes=1 << 30))
    script = ("import os, socket, sys\n"
              f"print(os.path.exists({str(ROOT / 'autograde')!r}), os.path.exists({str(ROOT / 'solutions')!r}),"
              "os.path.exists('/etc/shadow'), os.getcwd())\n"
              "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
              "except OSError as e:\n    print('net-blocked')\n"
              "try:\n    bytearray(2 << 30)\nexcept MemoryError:\n    print('memory-capped')\n")
    try:
        out = subprocess.run(walls.wrap([sys.executable, "-c", script]), capture_output=True, text=True, timeout=60)
    finally:
        walls.cleanup()
    assert out.stdout.split() == ["False", "False", "False", "/home/student", "net-blocked", "memory-capped"], \
        out.stderr


@pytest.mark.skipif(not sandbox.bwrap_works(), reason="bubblewrap is not usable on this machine")
def test_the_sandbox_caps_the_number_of_processes(tmp_path):
    view = kernel_view.build("01-lookup", str(tmp_path / "view" / "qkv"))
    walls = sandbox.Sandbox((kernel_view.LIBRARY, view), limits=sandbox.Limits(processes=32))
    script = ("import subprocess\nstarted = []\ntry:\n    for _ in range(100):\n"
              "        started.append(subprocess.Popen(['sleep', '5']))\nexcept OSError:\n    pass\n"
              "print(len(started))")
    try:
        out = subprocess.run(walls.wrap([sys.executable, "-c", script]), capture_output=True, text=True, timeout=60)
    finally:
        walls.cleanup()
    assert out.stdout.strip() and int(out.stdout) < 32, (out.stdout, out.stderr[-1000:])


def test_without_namespaces_the_isolation_is_reported_partial(monkeypatch):
    monkeypatch.setenv("QKV_SANDBOX_FORCE_PARTIAL", "1")
    assert sandbox.isolation() == "rlimits"
    walls = sandbox.Sandbox(("/nonexistent", "/nonexistent"))
    try:
        command = walls.wrap(["python", "-c", "pass"])
    finally:
        walls.cleanup()
    assert "prlimit" in command and "bwrap" not in command and "env" in command
    assert "partial" in sandbox.PARTIAL_ISOLATION


def test_partial_isolation_is_named_and_grading_still_exact(tmp_path):
    """Where namespaces are not permitted (forced here): a loud warning, the anomaly in the report, same grade."""
    import csv
    from lessons import copy_course, hand_in
    instructor = copy_course(tmp_path)
    hand_in(instructor, "01-lookup", "alice", solved_release("01-lookup"))
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", QKV_SANDBOX_FORCE_PARTIAL="1")
    for args in (["generate_assignment", "01-lookup", "--force"], ["autograde", "01-lookup"]):
        result = subprocess.run([os.path.join(bin_dir, "nbgrader"), *args], cwd=instructor, env=env,
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
    assert "isolation partial" in result.stderr
    (row,) = csv.DictReader((instructor / "anomalies-01-lookup.csv").open())
    assert row["anomalies"] == "isolation partial" and float(row["score"]) == 13.0


# ---------------------------------------------------------------- what the kernel must not have

REFERENCE_FILES = {str(ROOT / "source_lib" / "qkv" / f"{m}.py"): m for m in REFERENCE_MODULES}


# Each lesson's test cells compare answers with exactly these references (a reference called by check_against,
# or by a check's helper it calls); the lesson's kernel must not have any of them.
COMPARED_WITH = {
    "01-lookup": {"qkv.attention.softmax", "qkv.lookup.hard_lookup", "qkv.lookup.soft_lookup",
                  "qkv.lookup.soft_lookup_by_temperature"},
    "02-by-hand": {"qkv.attention.attention", "qkv.attention.attention_weights", "qkv.attention.dot_scores",
                   "qkv.attention.project_qkv", "qkv.attention.scaled_scores", "qkv.attention.self_attention"},
    "03-scaling": {"qkv.scaling.entropy", "qkv.scaling.numerical_jacobian", "qkv.scaling.query_jacobian",
                   "qkv.scaling.scale_for_unit_variance", "qkv.scaling.softmax_jacobian"},
    "04-masking": {"qkv.attention.masked_softmax", "qkv.masking.causal_self_attention"},
    "05-heads": {"qkv.heads.grouped_query_attention", "qkv.heads.kv_cache_bytes_per_token", "qkv.heads.merge_heads",
                 "qkv.heads.multi_head_attention", "qkv.heads.split_heads"},
    "06-sinks": {"qkv.sinks.ablated_attention", "qkv.sinks.contribution_norms", "qkv.sinks.diagonal_score",
                 "qkv.sinks.first_token_share", "qkv.sinks.induction_score", "qkv.sinks.occlusion_effects",
                 "qkv.sinks.perplexity", "qkv.sinks.previous_token_score"},
    "07-cost": {"qkv.cost.append_to_cache", "qkv.cost.attention_step", "qkv.cost.causal_chunked_attention",
                "qkv.cost.chunked_attention", "qkv.cost.cost_ratio", "qkv.cost.fit_exponent"},
}
# test cells that fail in a namespace of solution cells alone: self-checks whose answer the notebook measures
NEEDS_THE_NOTEBOOKS_MEASUREMENTS = {"07-cost": {"test_answer_memory_exponent"}}


def _references_compared_with(lesson):
    """(qkv reference functions the lesson's test cells compare answers with: called by check_against itself, or
    by a helper of the checks that check_against calls; the grade_ids of the test cells that failed)."""
    from lessons import grade_id, read, student
    namespace = student(lesson)
    used, failed = set(), set()

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_filename not in REFERENCE_FILES:
            return
        caller = frame.f_back
        for _ in range(2):  # check_against -> reference, or check_against -> a check's lambda -> reference
            if caller is None:
                return
            if caller.f_code.co_name == "check_against":
                used.add(f"qkv.{REFERENCE_FILES[frame.f_code.co_filename]}.{frame.f_code.co_name}")
                return
            if REFERENCE_FILES.get(caller.f_code.co_filename):
                return
            caller = caller.f_back

    for cell in read(lesson).cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade") \
                and not cell.metadata["nbgrader"].get("solution"):
            sys.setprofile(profile)
            try:
                exec(cell.source, namespace)
            except AssertionError:  # named below: a failure here would hide the reference calls after it
                failed.add(grade_id(cell))
            finally:
                sys.setprofile(None)
    return used, failed


@pytest.mark.parametrize("lesson", [l for l in __import__("lessons").LESSONS])
def test_every_reference_a_lesson_compares_with_is_withheld_from_its_kernel(lesson):
    withheld = set(kernel_view.graded_references(lesson))
    compared, failed = _references_compared_with(lesson)
    assert failed == NEEDS_THE_NOTEBOOKS_MEASUREMENTS.get(lesson, set()), (
        f"{lesson}: test cells failed on the solutions, so the references they compare with were not all seen")
    assert compared == COMPARED_WITH[lesson], (
        f"{lesson}: compared with {sorted(compared)}, expected {sorted(COMPARED_WITH[lesson])}")
    assert compared <= withheld, f"{lesson}: compared with but not withheld: {sorted(compared - withheld)}"


# ---------------------------------------------------------------- make grade's hand-over from workers

def test_a_lost_worker_or_a_changed_notebook_is_graded_by_the_coordinator(monkeypatch):
    import concurrent.futures
    from qkv_autograde.grading import parallel
    graded_here = []
    monkeypatch.setattr(preprocessors.SandboxedExecute, "preprocess",
                        lambda self, nb, resources: (graded_here.append(resources["nbgrader"]["student"]) or nb,
                                                     resources))
    nb = solved_release("01-lookup")
    lost = concurrent.futures.Future()
    lost.set_exception(RuntimeError("worker killed"))
    done = concurrent.futures.Future()
    done.set_result((nbformat.writes(nb), {"drawn_as": "fine", "worker": 1, "cpu_seconds": 1.0}))
    parallel.PENDING.update({("lost", "01-lookup"): parallel.Pending(parallel.fingerprint(nb), lost),
                             ("changed", "01-lookup"): parallel.Pending("another notebook", done),
                             ("fine", "01-lookup"): parallel.Pending(parallel.fingerprint(nb), done)})
    step = parallel.PooledExecute()
    for student in ("lost", "changed", "fine"):
        step.preprocess(nb, {"nbgrader": {"student": student, "notebook": "01-lookup", "assignment": "01-lookup"}})
    assert graded_here == ["lost", "changed"] and not parallel.PENDING


def test_the_class_is_sent_a_window_at_a_time_and_a_submission_reached_early_is_sent_then(monkeypatch):
    """Issue 45: the coordinator keeps `window` submissions out, not the class; nbgrader reaching one not yet sent
    (another order) sends it, so a worker still grades it."""
    import concurrent.futures
    from qkv_autograde.grading import feed, parallel
    monkeypatch.setattr(feed, "sanitized", lambda app, lesson, student, notebook, path: (
        solved_release(lesson), nbformat.writes(solved_release(lesson))))
    sent = []

    class Workers:
        def submit(self, fn, lesson, student, *rest):
            sent.append(student)
            return concurrent.futures.Future()

    entries = [(types.SimpleNamespace(student=f"s{i}", notebook="01-lookup"), "staged") for i in range(6)]
    bar = types.SimpleNamespace(update=lambda *a: None)
    monkeypatch.setattr(parallel, "PENDING", {})
    out = feed.Feed(None, "01-lookup", Workers(), entries, {"01-lookup": "{}"}, {}, bar, window=2)
    out.fill()
    assert sent == ["s0", "s1"] and set(parallel.PENDING) == {("s0", "01-lookup"), ("s1", "01-lookup")}
    out.reached("s0", "01-lookup")
    assert sent == ["s0", "s1", "s2"]
    out.reached("s5", "01-lookup")  # out of order: sent at once, the window full again
    assert sent == ["s0", "s1", "s2", "s5"] and len(out.out) == 2 and out.sent == sent


# ---------------------------------------------------------------- the kernel template's answers

def a_template_answering(script):
    """A KernelTemplate whose process is `script` (Python): only its answer channel, none of its walls."""
    from qkv_autograde.kernels import forked_kernels
    template = forked_kernels.KernelTemplate.__new__(forked_kernels.KernelTemplate)
    template.unread = b""
    template.process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
    return template


def test_template_answers_are_read_one_line_at_a_time_however_they_arrive():
    template = a_template_answering(
        "import os, time\nos.write(1, b'{\"a\": 1}\\n{\"b\"')\ntime.sleep(0.3)\nos.write(1, b': 2}\\n')")
    assert template._read(10) == {"a": 1}
    assert template._read(10) == {"b": 2}
    assert template._read(10) == {"error": "the kernel template exited"}


def test_a_template_that_does_not_answer_is_stopped_so_a_late_answer_cannot_be_taken_for_the_next():
    template = a_template_answering("import time\ntime.sleep(30)\nprint('{\"late\": true}')")
    assert "did not answer within 0.3 s" in template._read(0.3)["error"]
    assert template.process.wait(5) is not None
