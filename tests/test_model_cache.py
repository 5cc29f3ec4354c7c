"""qkv.model_cache: SmolLM2's results on fixed inputs are read back only when nothing of the caller's is in them.

A hit returns, byte for byte, what forward would compute; a student's attention, changed or rebound weights, a
replaced function, a damaged entry or a thread count it was not computed with all compute instead.
The model must already be fetched (`make model`).
"""
import copy
import dataclasses
import functools
import os
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import threadpoolctl

from qkv import model as M
from qkv import fill_model_cache, model_cache
from qkv.heads import grouped_query_attention
from qkv.own_attention import NotTheModelsAttention

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def smol():
    return M.load()


@pytest.fixture
def results(tmp_path, monkeypatch):
    """An empty results folder being filled, and a log of every read (None: a miss) and write."""
    folder = tmp_path / "results"
    monkeypatch.setattr(model_cache, "results_dir", lambda: folder)
    monkeypatch.setenv(model_cache.MODE_VARIABLE, "fill")
    log = []
    read, write = model_cache.read, model_cache.write

    def logged_read(*args, **kwargs):
        found = read(*args, **kwargs)
        log.append(("hit" if found is not None else "miss", args[0]))
        return found

    def logged_write(*args, **kwargs):
        log.append(("write", args[0]))
        return write(*args, **kwargs)

    monkeypatch.setattr(model_cache, "read", logged_read)
    monkeypatch.setattr(model_cache, "write", logged_write)
    return folder, log


def same_forward(a, b):
    def same(x, y):
        return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
    return (same(a.logits, b.logits)
            and (a.weights is None) == (b.weights is None) and all(map(same, a.weights or [], b.weights or []))
            and (a.hidden is None) == (b.hidden is None) and all(map(same, a.hidden or [], b.hidden or [])))


def kinds(log):
    return [kind for kind, _ in log]


# --------------------------------------------------------------------------- hits and misses

def test_the_second_identical_call_is_read_back_byte_for_byte(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    computed = M.forward(smol, ids, return_weights=True, return_hidden=True)
    assert kinds(log) == ["miss", "write"] and len(list(folder.glob("*.qkvres"))) == 1
    read_back = M.forward(smol, ids, return_weights=True, return_hidden=True)
    assert kinds(log) == ["miss", "write", "hit"]
    assert same_forward(computed, read_back)
    read_back.logits[0, 0] = 1.0  # a result read back is the caller's own array, like a computed one
    assert same_forward(computed, M.forward(smol, ids, return_weights=True, return_hidden=True))


def test_ids_mask_and_every_option_are_part_of_the_key(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    T = len(ids)
    window = np.tril(np.ones((T, T), dtype=bool)) & ~np.tril(np.ones((T, T), dtype=bool), -3)
    calls = [dict(), dict(return_weights=True), dict(return_hidden=True), dict(mask=window),
             dict(mask=np.tril(np.ones((T, T), dtype=bool)))]
    for kwargs in calls:
        M.forward(smol, ids, **kwargs)
    M.forward(smol, ids[:-1])
    assert kinds(log).count("miss") == len(calls) + 1 and "hit" not in kinds(log)
    assert len(set(key for _, key in log)) == len(calls) + 1
    assert same_forward(M.forward(smol, ids, mask=window), M._forward(smol, np.array(ids), None, False, False,
                                                                     window, False))


def test_a_different_blas_thread_count_is_a_different_entry(smol, results):
    # OpenBLAS's sgemm rounds differently with 1 and 2 threads: a result is only read at the count it was made with
    folder, log = results
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: there is no second thread count")
    ids = M.encode(smol, PROMPT)
    with threadpoolctl.threadpool_limits(1, "blas"):
        M.forward(smol, ids)
    with threadpoolctl.threadpool_limits(2, "blas"):
        M.forward(smol, ids)
    assert kinds(log) == ["miss", "write", "miss", "write"] and log[0][1] != log[2][1]


def test_everyday_calls_only_read_off_computes_everything_and_refresh_rewrites(smol, results, monkeypatch):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    monkeypatch.delenv(model_cache.MODE_VARIABLE)   # a student's kernel, a timing: reads, never writes
    M.forward(smol, ids)
    assert kinds(log) == ["miss", "write"] and not folder.exists()
    log.clear()
    monkeypatch.setenv(model_cache.MODE_VARIABLE, "off")
    M.forward(smol, ids)
    assert log == [] and not folder.exists()
    monkeypatch.setenv(model_cache.MODE_VARIABLE, "refresh")
    M.forward(smol, ids)
    M.forward(smol, ids)
    assert kinds(log) == ["write", "write"]


def test_a_read_only_cache_still_computes(smol, monkeypatch, tmp_path):
    blocked = tmp_path / "a file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(model_cache, "results_dir", lambda: blocked / "results")
    ids = M.encode(smol, PROMPT)
    assert same_forward(M.forward(smol, ids), M._forward(smol, np.array(ids), None, False, False, None, False))


# --------------------------------------------------------------------------- nothing of the student's

def test_a_students_attention_is_never_answered_from_the_cache(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    M.forward(smol, ids)
    M.forward(smol, ids, attention=M.own_attention)  # the model's own, for wrappers (issue 41): a hit
    M.forward(smol, ids, attention=grouped_query_attention)  # qkv's own, passed by name: cached under qkv.heads too
    M.forward(smol, ids, attention=grouped_query_attention)
    assert kinds(log) == ["miss", "write", "hit", "miss", "write", "hit"]
    log.clear()

    def mine(q, k, v, mask):  # the same numbers, but the student's function
        return grouped_query_attention(q, k, v, mask)

    def off_by_a_bit(q, k, v, mask):
        return grouped_query_attention(q, k, v, mask) * np.float32(1.001)

    for attention in (mine, functools.partial(grouped_query_attention), off_by_a_bit):
        M.forward(smol, ids, attention=attention)
    M.forward(smol, ids, attention=lambda q, k, v, mask, layer: grouped_query_attention(q, k, v, mask),
              attention_takes_layer=True)
    assert log == []
    reference = M.forward(smol, ids).logits
    assert not np.array_equal(M.forward(smol, ids, attention=off_by_a_bit).logits, reference)
    # a wrapper of the model's own attention computes (uncached) the very numbers; on arrays of its own it refuses
    log.clear()
    wrapped = M.forward(smol, ids, attention=lambda q, k, v, mask: M.own_attention(q.astype(float), k, v, mask))
    assert np.array_equal(wrapped.logits, reference) and log == []
    with pytest.raises(NotTheModelsAttention):
        M.forward(smol, ids, attention=lambda q, k, v, mask: M.own_attention(q * 2, k, v, mask))


def test_qkv_heads_is_part_of_the_key_only_where_its_attention_runs(smol, monkeypatch):
    # the grader's kernels for lessons 05-07 hold a qkv.heads whose grouped_query_attention is withheld: the model's
    # own attention must still read what the worker computed with the whole library (tests/test_forked_kernels.py),
    # and a call through qkv.heads' attention must never be read from a key its source did not make
    from qkv import model_cache
    plain, grouped = (model_cache.reference_call(smol, attention, False)
                      for attention in (None, grouped_query_attention))
    monkeypatch.setitem(model_cache._attention_digest, "qkv.heads", "another qkv.heads")
    assert model_cache.reference_call(smol, None, False) == plain
    assert model_cache.reference_call(smol, M.own_attention, False) == plain
    assert model_cache.reference_call(smol, grouped_query_attention, False) not in (plain, grouped)


def test_the_weights_cannot_be_changed_in_place(smol):
    layer = smol.weights.layers[0]
    for array in (layer.W_q, smol.weights.token_embedding, smol.weights.final_norm):
        with pytest.raises(ValueError):
            array[0] = 0.0
        with pytest.raises(ValueError):
            array.flags.writeable = True
        with pytest.raises(ValueError):
            array.view().flags.writeable = True
        with pytest.raises(ValueError):
            np.asarray(array).setflags(write=True)


def test_rebound_weights_or_config_are_not_the_loaded_model(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    cached = M.forward(smol, ids).logits
    log.clear()
    w = smol.weights
    doubled = smol._replace(weights=w._replace(final_norm=w.final_norm * 2))
    copied = smol._replace(weights=w._replace(token_embedding=np.array(w.token_embedding)))
    zeroed_head = np.array(w.layers[3].W_o)
    zeroed_head[:64] = 0
    ablated = smol._replace(weights=w._replace(layers=(*w.layers[:3], w.layers[3]._replace(W_o=zeroed_head),
                                                       *w.layers[4:])))
    for rebound in (doubled, copied, ablated):
        M.forward(rebound, ids)
    assert log == []
    assert not np.array_equal(M.forward(doubled, ids).logits, cached)
    assert not np.array_equal(M.forward(ablated, ids).logits, cached)
    # another config with the loaded weights is another computation, under its own key
    other = smol._replace(config=dataclasses.replace(smol.config, rms_eps=1e-3))
    assert not np.array_equal(M.forward(other, ids).logits, cached)
    assert kinds(log) == ["miss", "write"]


def test_a_replaced_function_on_the_path_computes_with_it(smol, results, monkeypatch):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    cached = M.forward(smol, ids).logits
    log.clear()
    monkeypatch.setattr(M, "swiglu_mlp", lambda x, W_gate, W_up, W_down: np.zeros_like(x))
    assert not np.array_equal(M.forward(smol, ids).logits, cached)
    monkeypatch.undo()
    # a wrapper that changes no number still is not the library's function: the call computes
    import qkv.heads
    for module, name in ((qkv.heads, "repeat_kv_heads"), (M, "rms_norm"), (np, "tanh")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args, original=original, **kwargs: original(*args, **kwargs))
        M.forward(smol, ids, return_weights=True)
        monkeypatch.undo()
    assert log == []


def test_a_replaced_forward_gets_no_cached_result(smol, results, monkeypatch):
    from qkv.sinks import next_token_logprob
    folder, log = results
    ids = M.encode(smol, PROMPT)
    target = int(np.argmax(M.forward(smol, ids).logits[-1]))
    honest = next_token_logprob(smol, target, ids)
    log.clear()

    def my_forward(model, ids, attention=None, **kwargs):  # what a student might write: their own model
        out = M._forward(model, np.asarray(ids), attention, False, False, None, False)
        return M.Forward(logits=out.logits * 2, weights=None)

    monkeypatch.setattr(M, "forward", my_forward)
    assert next_token_logprob(smol, target, ids) != honest
    assert log == []


# --------------------------------------------------------------------------- damaged entries

def damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "flip a payload byte":
        data[-5] ^= 0x40
    elif how == "truncate":
        data = data[:-4]
    elif how == "garbage header":
        data[len(model_cache._MAGIC) + 2] = ord("#")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip a payload byte", "truncate", "garbage header"])
def test_a_damaged_entry_is_a_miss_never_a_wrong_answer(smol, results, how):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    computed = M.forward(smol, ids, return_weights=True)
    (entry,) = folder.glob("*.qkvres")
    damage(entry, how)
    log.clear()
    again = M.forward(smol, ids, return_weights=True)
    assert kinds(log) == ["miss", "write"] and same_forward(computed, again)
    log.clear()
    M.forward(smol, ids, return_weights=True)  # the entry was written again, whole
    assert kinds(log) == ["hit"]


def test_an_entry_verified_once_is_read_without_hashing_until_the_file_changes(smol, results, monkeypatch):
    """The grader's kernel template hashes every entry once (verify_entries) and its forked kernels skip the hash
    while the file is the one it checked; any other file, or the same one written again, is hashed at its read."""
    folder, log = results
    ids, other_ids = M.encode(smol, PROMPT), M.encode(smol, "The capital of Spain is")
    computed = M.forward(smol, ids, return_weights=True)
    monkeypatch.setattr(model_cache, "_verified", {})
    assert model_cache.verify_entries(folder) == 1
    M.forward(smol, other_ids)                       # written after the check: not in it
    hashed = []
    digest = model_cache._payload_digest
    monkeypatch.setattr(model_cache, "_payload_digest", lambda *args: hashed.append(1) or digest(*args))
    log.clear()
    assert same_forward(M.forward(smol, ids, return_weights=True), computed) and hashed == []
    M.forward(smol, other_ids)
    assert kinds(log) == ["hit", "hit"] and hashed == [1]
    (entry,) = [p for p in folder.glob("*.qkvres") if str(p) in model_cache._verified]
    time.sleep(0.05)                                 # file times move in ticks of a few ms: the change is a new one
    damage(entry, "flip a payload byte")             # in place: the same inode and size
    log.clear()
    assert same_forward(M.forward(smol, ids, return_weights=True), computed)
    assert kinds(log) == ["miss", "write"] and len(hashed) == 2


def test_an_entry_read_back_is_the_callers_array_and_leaves_the_file_alone(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    computed = M.forward(smol, ids, return_hidden=True)
    (entry,) = folder.glob("*.qkvres")
    stored = entry.read_bytes()
    read_back = M.forward(smol, ids, return_hidden=True)
    assert kinds(log) == ["miss", "write", "hit"]
    assert all(type(a) is np.ndarray and a.flags.writeable and a.flags.aligned
               for a in [read_back.logits, *read_back.hidden])
    read_back.logits[:] *= 2.0
    read_back.hidden[3][:] = 0.0
    assert entry.read_bytes() == stored and same_forward(M.forward(smol, ids, return_hidden=True), computed)


def test_an_entry_under_another_name_is_a_miss(smol, results):
    folder, log = results
    ids = M.encode(smol, PROMPT)
    M.forward(smol, ids)
    other_ids = M.encode(smol, "The capital of Spain is")
    expected_key = model_cache.key(smol, model_cache.reference_call(smol, None, False), np.array(other_ids), None,
                                   False, False)
    (entry,) = folder.glob("*.qkvres")
    entry.rename(folder / (expected_key + model_cache.SUFFIX))  # right shapes, another call's numbers
    log.clear()
    assert same_forward(M.forward(smol, other_ids),
                        M._forward(smol, np.array(other_ids), None, False, False, None, False))
    assert kinds(log)[0] == "miss"


# --------------------------------------------------------------------------- lesson 06, end to end

LESSON_06 = ROOT / "solutions" / "06-sinks" / "06-sinks.ipynb"


def run_lesson(notebook, cache_folder, mode):
    """Lesson 06's solution notebook with the results cache in `cache_folder`; returns (notebook, seconds)."""
    from nbclient import NotebookClient
    notebook = copy.deepcopy(notebook)
    # the notebook prints its own timings; the same clock (always 0) in both runs leaves only the numbers
    notebook.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.perf_counter = lambda: 0.0"))
    env = {"QKV_CACHE": str(cache_folder), model_cache.MODE_VARIABLE: mode, "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "autograde"), os.environ.get("PYTHONPATH")]))}
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(LESSON_06.parent)}})
    with fill_model_cache.environment(dict(os.environ, **env)):
        started = time.perf_counter()
        client.execute()
    return notebook, time.perf_counter() - started


def outputs(notebook):
    # what a reader sees: a stream's text arrives in pieces that depend on flush timing, so pieces are joined
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for output in cell.outputs:
            output = {key: value for key, value in output.items() if key != "execution_count"}
            if output["output_type"] == "stream" and shown and shown[-1]["output_type"] == "stream" \
                    and shown[-1]["name"] == output["name"]:
                shown[-1] = dict(shown[-1], text=shown[-1]["text"] + output["text"])
            else:
                shown.append(output)
        cells.append(shown)
    return cells


def test_lesson_06_gives_identical_outputs_with_and_without_the_cache(tmp_path):
    from qkv import fetch
    real = fetch.cache_dir()
    cache = tmp_path / "qkv"
    cache.mkdir()
    for name in (fetch.GGUF_NAME, fetch.GGUF_NAME + ".verified"):  # the model itself, from the real cache
        (cache / name).symlink_to(real / name)
    notebook = nbformat.read(LESSON_06, as_version=4)  # read once: the very same cells run both times
    computed, computed_seconds = run_lesson(notebook, cache, "refresh")   # computes every result, and stores it
    entries = {p.name: p.stat().st_ino for p in (cache / "results").glob("*.qkvres")}
    read_back, read_seconds = run_lesson(notebook, cache, "on")
    print(f"lesson 06 solution notebook, 1 BLAS thread: {computed_seconds:.1f} s computing, "
          f"{read_seconds:.1f} s with the cache ({len(entries)} results)")
    nbformat.write(computed, str(tmp_path / "computed.ipynb"))   # kept for a look when the two differ
    nbformat.write(read_back, str(tmp_path / "read_back.ipynb"))
    assert entries and {p.name: p.stat().st_ino for p in (cache / "results").glob("*.qkvres")} == entries
    assert outputs(read_back) == outputs(computed)


# ---------------------------------------------------------------- what else every kernel repeats: tracebacks

_WITHHELD_SHELL = r'''
import json, sys
sys.path.insert(0, sys.argv[1])                      # the kernel's view of qkv, as a graded kernel imports it
sys.path.insert(0, sys.argv[2])                      # kernel_template.py, run as a script in the sandbox
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
import kernel_template

shell = InteractiveShell.instance()
kernel_template.one_line_withheld_tracebacks(shell)
formatted = []
full = shell.InteractiveTB.structured_traceback
shell.InteractiveTB.structured_traceback = lambda *a, **k: formatted.append(a[0].__name__) or full(*a, **k)
seen = {}
for name, source in (("notebook set-up", "from qkv.checks import lesson05 as check\n"
                                         "from qkv.checking import answered_choice"),
                     ("withheld", "from qkv.heads import grouped_query_attention\ngrouped_query_attention(1, 2, 3)"),
                     ("hint", "from qkv.checking import Hint\nraise Hint('a hint is one sentence')"),
                     ("own error", "def f():\n    raise ValueError('my own mistake')\nf()")):
    with capture_output() as shown:
        result = shell.run_cell(source, store_history=True)
    seen[name] = {"error": type(result.error_in_exec).__name__, "shown": shown.stdout,
                  "stored": shell.history_manager.exceptions.get(shell.execution_count - 1, {}).get("traceback")}
print(json.dumps({"seen": seen, "formatted": formatted}))
'''


def test_a_withheld_reference_gets_a_one_line_traceback_and_every_other_error_the_full_one(tmp_path):
    # The grader replaces a cell that raised WithheldDuringGrading with a note (preprocessors._explain_withheld),
    # so the forked kernel formats that one exception in a line; IPython's full traceback stays for the rest.
    import json
    import re
    import subprocess
    import sys

    from qkv_autograde.kernels import kernel_view

    view = kernel_view.build("05-heads", str(tmp_path / "view" / "qkv"))
    done = subprocess.run([sys.executable, "-c", _WITHHELD_SHELL, os.path.dirname(view),
                           str(ROOT / "autograde" / "qkv_autograde" / "kernels")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=""))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    withheld, own, hint = seen["seen"]["withheld"], seen["seen"]["own error"], seen["seen"]["hint"]
    # after the notebook's own imports of qkv.checking, which install the short Hint (once, each replaced the other)
    assert seen["seen"]["notebook set-up"]["error"] == "NoneType"
    assert re.sub(r"\x1b\[[0-9;]*m", "", hint["shown"]).strip() == "Hint: a hint is one sentence"
    assert withheld["error"] == "WithheldDuringGrading"
    assert withheld["shown"].strip().startswith("WithheldDuringGrading: qkv.heads.grouped_query_attention is withheld")
    assert len(withheld["shown"].strip().splitlines()) == 1 and len(withheld["stored"]) == 1
    shown = re.sub(r"\x1b\[[0-9;]*m", "", own["shown"])  # IPython's colours
    assert own["error"] == "ValueError" and "my own mistake" in shown and "----> 2" in shown  # the frame, the line
    assert len(own["stored"]) > 1
    # shown and stored for the student's own error, stored for the Hint (IPython's history): never for the withheld one
    assert seen["formatted"] == ["Hint", "ValueError", "ValueError"]


# --------------------------------------------------------------------------- a class, graded with and without it

FROZEN_CLOCK = "import time\ntime.perf_counter = lambda: 0.0  # the notebook prints its timings: the same in both runs"
# what a student might do to the model before the lesson's demonstrations run (cell 1 loads it as `smol`)
MODEL_TAMPERING = {
    "ada": None,
    "bo": "w = smol.weights\nsmol = smol._replace(weights=w._replace(final_norm=w.final_norm * 2))",
    "cy": "_forward = model.forward\n"
          "def forward(*args, **kwargs):\n"
          "    out = _forward(*args, **kwargs)\n"
          "    return out._replace(logits=out.logits * 1.5)\n"
          "model.forward = forward",
}


def graded_class(parent, cache_mode):
    """Lesson 06 handed in by MODEL_TAMPERING's students and graded by make grade; (grades, outputs, pages)."""
    import subprocess
    import sys

    from lessons import copy_course, hand_in, solved_release
    instructor = copy_course(parent)
    bin_folder = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    if cache_mode == "off":
        env[model_cache.MODE_VARIABLE] = "off"
    else:
        env.pop(model_cache.MODE_VARIABLE, None)
    subprocess.run([os.path.join(bin_folder, "nbgrader"), "generate_assignment", "06-sinks", "--force"],
                   cwd=instructor, env=env, check=True, capture_output=True)
    for student, tampering in MODEL_TAMPERING.items():
        notebook = solved_release("06-sinks")
        # (fixed cell ids: a page names each cell by its id, and the two gradings must get the same notebooks)
        if tampering:  # after the set-up cell, which loads the model
            notebook.cells.insert(2, nbformat.v4.new_code_cell(tampering, id="model-tampering"))
        # the set-up starts a clock
        notebook.cells.insert(1, nbformat.v4.new_code_cell(FROZEN_CLOCK, id="frozen-clock"))
        hand_in(instructor, "06-sinks", student, notebook)
    done = subprocess.run([sys.executable, "-m", "qkv_autograde", "06-sinks"], cwd=instructor, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gradebook:
        grades = {s.student_id: sorted((g.name, g.score) for n in s.notebooks for g in n.grades)
                  for s in gradebook.assignment_submissions("06-sinks")}
    shown = {student: outputs(nbformat.read(str(instructor / "autograded" / student / "06-sinks" / "06-sinks.ipynb"),
                                            as_version=4)) for student in MODEL_TAMPERING}
    pages = {student: (instructor / "feedback" / student / "06-sinks" / "06-sinks.html").read_bytes()
             for student in MODEL_TAMPERING}
    return grades, shown, pages


def first_difference(a, b, around=200):
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[max(0, at - around):at + around], b[max(0, at - around):at + around]


@pytest.mark.grading_class
def test_a_class_graded_with_and_without_the_cache_gets_the_same_grades_outputs_and_feedback(tmp_path):
    # issue 22: make grade's kernels read the cache (read-only) and its workers fill it; nothing a student sees or
    # is given may change, whatever the student did to the model: rebound weights, a replaced forward
    computed = graded_class(tmp_path / "off", "off")
    cached = graded_class(tmp_path / "on", "on")
    assert cached[0] == computed[0]
    for student in MODEL_TAMPERING:
        assert cached[1][student] == computed[1][student], student
        assert cached[2][student] == computed[2][student], (student, first_difference(cached[2][student],
                                                                                   computed[2][student]))
    # the tampering students' demonstrations really did show other numbers than the honest student's
    assert computed[1]["bo"] != computed[1]["ada"] and computed[1]["cy"] != computed[1]["ada"]


# --------------------------------------------------------------------- make grade's start-up check (issue 35, 8)

def test_stale_reads_only_the_stamps_and_a_stamped_fill_runs_nothing(tmp_path, monkeypatch):
    """fill_model_cache.stale names what fill would run, from the stamps alone; once filled, a second fill takes
    the stamp path and runs no notebook, until the notebook changes."""
    monkeypatch.setattr(model_cache, "results_dir", lambda: tmp_path / "results")
    notebook = tmp_path / "course" / "solutions" / "05-heads" / "05-heads.ipynb"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("{}")
    ran = []
    monkeypatch.setattr(fill_model_cache, "run_notebook", lambda path, *args, **kwargs: ran.append(path))
    fill = functools.partial(fill_model_cache.fill, ("05-heads",), blas_threads=[1, 2], root=tmp_path / "course")
    stale = functools.partial(fill_model_cache.stale, ("05-heads",), blas_threads=[1, 2], root=tmp_path / "course")
    assert stale() == [("05-heads", 1), ("05-heads", 2)] and ran == []
    assert fill() == [("05-heads", 1), ("05-heads", 2)] and len(ran) == 2
    assert stale() == [] and fill() == [] and len(ran) == 2
    notebook.write_text('{"changed": true}')
    assert stale() == [("05-heads", 1), ("05-heads", 2)]


def test_model_ready_reads_the_stamps_of_the_gguf_and_its_float32_cache(tmp_path):
    """True only with the verified GGUF and a float32 cache of that very file (here: links to the installed ones)."""
    from qkv import fetch, gguf_weights

    installed = fetch.cache_dir() / fetch.GGUF_NAME
    if not fill_model_cache.model_ready():
        pytest.skip("the model is not installed here (make model)")
    assert not fill_model_cache.model_ready(tmp_path)
    gguf = tmp_path / fetch.GGUF_NAME
    for source in (installed, installed.with_name(installed.name + ".verified"), gguf_weights.cache_folder(installed)):
        (tmp_path / source.name).symlink_to(source)
    assert fill_model_cache.model_ready(tmp_path)
    gguf_weights.cache_folder(gguf).unlink()
    assert not fill_model_cache.model_ready(tmp_path)
