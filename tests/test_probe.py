"""The probe (autograde/qkv_edition/probe.py) can fail and can pass.

(a) A folder holding lesson 01's kernel view of qkv (its graded references withheld) with two of lesson 01's
references planted under other names, one a top-level function, one inside a module-level list: the probe names
exactly those two, each for its own exercise, and nothing else of the ~300 functions it tries.
(b) The grader's kernel view for lesson 01 itself (issue 34): nothing the view holds answers an exercise by itself,
and a student's composition of a later lesson's function does not either (issue 34, item 2: the view withholds
every later lesson's graded references). One probe run per folder, shared by the tests (each takes about 20 s).
(c) Every other lesson's kernel view, probed the same way: nothing answers, but the tool issue 33 hands to lesson 07.
"""
import inspect
import os
import shutil
import textwrap

import pytest

from qkv import attention, lookup
from qkv.lessons import LESSONS
from qkv_autograde.kernels import kernel_view, sandbox
from qkv_edition import probe

LESSON = "01-lookup"

if not sandbox.bwrap_works() and not os.environ.get("CI"):
    # the probe also runs without bubblewrap (PYTHONPATH first, the editable finder removed), but its candidates,
    # the library's own functions called with arbitrary data, then run with the machine's files and network
    pytest.skip("the probe's kernel is sandboxed with bubblewrap (make sandbox)", allow_module_level=True)


def _renamed(function, name):
    return inspect.getsource(function).replace(f"def {function.__name__}(", f"def {name}(", 1)


# the reference's own text under another name, where a student would not look for it
PLANTED_FUNCTION = "\n\n" + _renamed(attention.softmax, "spare_normaliser")

# the reference inside a module-level list (as a catalogue of mistakes holds its lambdas), made by a helper that is gone
# (with its own copy of the private helper it calls: the view withholds qkv.lookup's, issue 41)
PLANTED_LIST = f'''


def _spare_factory():
    from qkv.shapes import as_float_array, require
{textwrap.indent(inspect.getsource(lookup._check_lookup_shapes), "    ")}
{textwrap.indent(inspect.getsource(lookup.hard_lookup), "    ")}
    return hard_lookup


SPARE_TOOLS = ["kept for later", _spare_factory()]
del _spare_factory
'''

# issue 41: the answer nested inside a function, and behind one call plus glue (the first of what it returns; the
# matrices transposed in and out)
PLANTED_NESTED = """
import numpy as np


def spare_outer():
    return [lambda x, axis=-1: (lambda e: e / np.sum(e, axis=axis, keepdims=True))(
        np.exp(x - np.max(x, axis=axis, keepdims=True)))]


def spare_pair(x, axis=-1):
    e = np.exp(np.asarray(x) - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True), "and a note"


def spare_column_lookup(query, keys, values, temperature=1.0):
    # keys [d_k, n] and values [d_v, n] as columns: soft_lookup behind its matrices transposed (glue "conjugated")
    scores = np.asarray(keys).T @ query / temperature
    weights = np.exp(scores - np.max(scores))
    weights = weights / np.sum(weights)
    return weights, np.asarray(values) @ weights
"""

PLANTED = {probe.Passing("qkv.probes.spare_normaliser", LESSON, "softmax"),
           probe.Passing("qkv.plots.SPARE_TOOLS[1]", LESSON, "hard_lookup"),
           probe.Passing("qkv.probes.spare_outer.<locals>.<lambda>", LESSON, "softmax"),
           probe.Passing("qkv.probes.spare_pair first", LESSON, "softmax"),
           probe.Passing("qkv.probes.spare_column_lookup conjugated", LESSON, "soft_lookup")}

# issue 34's example, written the way this library's log_softmax takes it (the last axis only)
COMPOSITION = """
import numpy as np
import qkv.sinks

def softmax(x, axis=-1):
    moved = np.moveaxis(np.asarray(x), axis, -1)
    return np.moveaxis(np.exp(qkv.sinks.log_softmax(moved)), -1, axis)
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted")
    package = kernel_view.build(LESSON, str(folder / "qkv"))
    for cache in [os.path.join(root, "__pycache__") for root, dirs, _ in os.walk(package) if "__pycache__" in dirs]:
        shutil.rmtree(cache)  # compiled before the planting
    with open(os.path.join(package, "probes.py"), "a") as f:
        f.write(PLANTED_FUNCTION + PLANTED_NESTED)
    with open(os.path.join(package, "plots.py"), "a") as f:
        f.write(PLANTED_LIST)
    # a module the folder lacks must not be imported from the full library (an editable install) instead
    os.remove(os.path.join(package, "fill_model_cache.py"))
    with open(os.path.join(package, "needs_missing.py"), "w") as f:
        f.write("import qkv.fill_model_cache  # removed from this folder\n")
    return str(folder), probe.run(str(folder), [LESSON])


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    folder = tmp_path_factory.mktemp("view")
    kernel_view.build(LESSON, str(folder / "qkv"))
    return str(folder), probe.run(str(folder), [LESSON], pasted=COMPOSITION)


def test_the_probe_names_exactly_the_planted_references(planted):
    _, report = planted
    assert set(report.passing) == PLANTED and len(report.passing) == len(PLANTED), report.passing


def test_the_probe_tried_the_library_and_its_controls_passed(planted):
    folder, report = planted
    assert report.qkv_file.startswith(os.path.realpath(folder) + os.sep), report.qkv_file
    assert report.candidates > 200
    assert set(report.tried) == {f"{LESSON} {name}" for name in
                                 ("hard_lookup", "softmax", "soft_lookup", "soft_lookup_by_temperature")}
    assert all(count > 0 for count in report.tried.values()), report.tried
    assert all(why is None for why in {**report.controls_before, **report.controls_after}.values()), report


def test_a_module_missing_from_the_folder_is_not_taken_from_the_full_library(planted):
    _, report = planted
    failures = dict(report.import_failures)
    assert list(failures) == ["qkv.needs_missing"], failures
    assert failures["qkv.needs_missing"].startswith("ModuleNotFoundError"), failures


def test_the_kernel_view_holds_no_answer(view):
    """Today: nothing in lesson 01's view passes one of its exercises by itself (the view withholds softmax,
    masked_softmax and the lookups; qkv.sinks.log_softmax is not itself a softmax)."""
    folder, report = view
    assert report.qkv_file.startswith(os.path.realpath(folder) + os.sep)
    assert [p for p in report.passing if not p.candidate.startswith("pasted.")] == []


def test_the_kernel_view_answers_no_composition_of_a_later_lesson(view):
    """Issue 34, item 2: lesson 06's log_softmax is in lesson 01's view only as a stub, so exp(log_softmax(x))
    pasted as softmax does not score while lesson 01 is graded (it did when the view withheld lesson 01's own
    references only)."""
    _, report = view
    assert probe.Passing("pasted.softmax", LESSON, "softmax") not in report.passing


# What a later lesson may build on (issue 33, item 2): "lesson 07's `attention_step` may call lesson 05's grouped-query
# attention", lesson 05 being an earlier lesson whose functions stay in lesson 07's view as its tools.
HANDED_OUT = {probe.Passing("qkv.heads.grouped_query_attention", "07-cost", "attention_step"),
              probe.Passing("qkv.heads.grouped_query_attention", "07-cost", "generation_with_cache as attention_step")}


@pytest.mark.parametrize("lesson", [row.slug for row in LESSONS[1:]])
def test_no_lessons_kernel_view_answers_one_of_its_exercises(lesson, tmp_path):
    """Issue 34, item 2: what the grading kernel withholds (kernel_view.withheld_while_graded) is held to this probe
    rather than to a hand list: while lesson N is graded, no function of the view whose parameters fit passes one of
    lesson N's hidden tests (lesson 01 is `view` above), except an earlier lesson's tool that the issue hands out.
    Issue 41: nor SmolLM2's own attention on a made-up layer (qkv_edition.probe_routes, named route.<name>) as lesson
    05's grouped_query_attention or lesson 07's attention_step."""
    kernel_view.build(lesson, str(tmp_path / "qkv"))
    report = probe.run(str(tmp_path), [lesson])
    assert report.qkv_file.startswith(os.path.realpath(tmp_path) + os.sep)
    assert all(count > 0 for count in report.tried.values()), report.tried
    assert set(report.passing) - HANDED_OUT == set(), report.passing
    assert not [p for p in report.passing if p.candidate.startswith("route.")], report.passing


def test_the_command_prints_what_passes_and_fails_when_anything_does(planted, monkeypatch, capsys):
    _, report = planted
    monkeypatch.setattr(probe, "run", lambda *args, **kwargs: report)
    assert probe.main(["folder", "--lessons", LESSON]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert sorted(printed) == sorted(str(p) for p in PLANTED)
    monkeypatch.setattr(probe, "run", lambda *args, **kwargs: probe.Report(candidates=3))
    assert probe.main(["folder", "--lessons", LESSON]) == 0


def test_exercises_are_the_hidden_tests_the_solution_calls_and_fit_binds_their_first_call():
    found = {e.name: e for e in probe.exercises(LESSON)}
    assert list(found) == ["hard_lookup", "softmax", "soft_lookup", "soft_lookup_by_temperature"]  # no self-checks
    assert found["soft_lookup"].first_calls == ((3, ("temperature",)),)
    signature = [["q", 1, False], ["K", 1, False], ["V", 1, False], ["temperature", 1, True]]
    assert probe.fits(signature, (3, ("temperature",)))
    assert not probe.fits(signature[:3], (3, ("temperature",)))
    assert not probe.fits(signature, (1, ()))
    assert probe.fits([["args", 2, False]], (5, ())) and probe.fits(None, (1, ()))
    several = {e.name: e for e in probe.exercises("07-cost")}["generation_with_cache"]
    assert several.arguments == ("attention_step", "append_to_cache")
