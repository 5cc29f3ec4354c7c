"""Visible checks cover every kind of input the hidden tests grade on (issue 32, 'Visible checks that pass what the
hidden tests fail'): an answer right only on easier inputs must hear it from the visible check, as a hint, rather
than as lost points.

Both layers of every exercise of lessons 01-07 run with the solution's own functions, each wrapped so that it records
how it is called; `qkv.checking.coverage.kinds_of_call` reads each call's kinds (ranks, axes, dtypes, lists, values
past exp's range, T_q != T_k, masks, outputs near zero, arguments by keyword or position). Per exercise: the hidden
kinds are a subset of the visible kinds, and the visible kinds are what `COVERAGE` declares for the lesson (written
down beside the checks, in qkv.checks.coverage, so that it cannot drift).
"""
import contextlib
import importlib
import io
import warnings

import numpy as np
import pytest

import qkv.lessons
from qkv.checks.coverage import COVERAGE
from qkv.checking.coverage import kinds_of_call
from qkv_edition.fixtures import solution_namespace, solution_notebook, visible_calls
from qkv_grading import draws_of

from lessons import assert_rejected, mutant

# checks whose inputs are SmolLM2's, not the check's: the model calls the student's functions on its own activations
RUNS_SMOLLM2 = {"generation_with_cache", "smollm2"}
LESSONS = [row for row in qkv.lessons.LESSONS if int(row.number) <= 7]
HIDDEN_DRAWS = 3  # students whose hidden inputs are classified: a kind a draw may or may not give is never enough


class Recording:
    """The solution's function, recording each call (the arguments it is given, which `call` has copied, and the
    result) for classifying later, outside the checked call."""

    def __init__(self, solution, calls):
        self.solution, self.calls = solution, calls
        self.__name__ = solution.__name__

    def __call__(self, *args, **kwargs):
        result = self.solution(*args, **kwargs)
        self.calls.append((args, kwargs, result))
        return result


def _recorded_kinds(check, solutions, drawn_in=None):
    """{student function name: set of kinds} over every call `check` makes to the recording solutions; a hidden test
    (`drawn_in` its lesson) draws each student's inputs, so it runs as HIDDEN_DRAWS students."""
    calls = {fn.__name__: [] for fn in solutions}
    students = [Recording(fn, calls[fn.__name__]) for fn in solutions]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for run in range(HIDDEN_DRAWS if drawn_in else 1):
            with draws_of(drawn_in, f"coverage-{run}") if drawn_in else contextlib.nullcontext():
                check(*students)
    return {name: set().union(*(kinds_of_call(fn, *call) for call in calls[name]))
            for name, fn in ((fn.__name__, fn) for fn in solutions)}


@pytest.fixture(scope="module", params=[row.slug for row in LESSONS])
def layers(request):
    """For one lesson: {check name: (visible kinds, hidden kinds, declared coverage)} per graded function."""
    row = qkv.lessons.lesson(request.param)
    notebook = solution_notebook(row)
    namespace = solution_namespace(notebook, row.slug)
    visible = importlib.import_module(row.checks)
    hidden = importlib.import_module(f"qkv_grading.lesson{int(row.number):02d}")
    found = {}
    for check_name, argument_names in visible_calls(notebook):
        if check_name in RUNS_SMOLLM2:
            continue
        solutions = [namespace[name] for name in argument_names]
        shown = _recorded_kinds(getattr(visible, check_name), solutions)
        graded = _recorded_kinds(getattr(hidden, check_name), solutions, drawn_in=row.slug)
        for name in argument_names:
            found[name] = (shown[name], graded[name], COVERAGE.get(row.slug, {}).get(name))
    return row.slug, found


def test_visible_checks_show_every_kind_the_hidden_tests_grade(layers):
    slug, found = layers
    missing = {name: sorted(graded - shown) for name, (shown, graded, _) in found.items() if graded - shown}
    assert not missing, f"{slug}: the hidden tests grade kinds of input the visible checks never show: {missing}"


def test_declared_coverage_is_what_the_visible_checks_show(layers):
    slug, found = layers
    undeclared = sorted(name for name, (_, _, declared) in found.items() if declared is None)
    assert not undeclared, f"{slug}: qkv.checks.coverage.COVERAGE does not declare {undeclared}"
    drift = {name: {"declared but not shown": sorted(declared - shown),
                    "shown but not declared": sorted(shown - declared)}
             for name, (shown, _, declared) in found.items() if declared != shown}
    assert not drift, f"{slug}: qkv.checks.coverage.COVERAGE is not what the visible checks show: {drift}"


# Answers the issue names, each right on the easier inputs the visible checks used to show and wrong on a kind only
# the hidden tests graded: the visible check must now say so, as the hidden test does.
RIGHT_ONLY_ON_EASIER_INPUTS = {
    "a slice spanning past exp's range (softmax shifted by each slice's first score, not its maximum)": (
        "01-lookup", "softmax", '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    e = np.exp(x - np.take(x, [0], axis=axis))
    return e / np.sum(e, axis=axis, keepdims=True)
'''),
    "a middle axis (softmax along `axis` by transposing, right only in 1-D and 2-D)": ("01-lookup", "softmax", '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    if axis % x.ndim != x.ndim - 1:
        return softmax(x.T).T
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)
'''),
    "T_q != T_k under a mask that is not causal (GQA building its own causal mask from T_q)": (
        "05-heads", "grouped_query_attention", '''
def grouped_query_attention(q, k, v, mask=None):
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:  # the mask is causal: build it from the sequence length
        T_q = q.shape[1]
        scores = np.where(np.tril(np.ones((T_q, T_q), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return weights / np.sum(weights, axis=-1, keepdims=True) @ v
'''),
}


@pytest.mark.parametrize("kind", list(RIGHT_ONLY_ON_EASIER_INPUTS))
def test_an_answer_wrong_only_on_a_kind_the_hidden_tests_grade_fails_the_visible_check(kind):
    lesson, grade, source = RIGHT_ONLY_ON_EASIER_INPUTS[kind]
    row = qkv.lessons.lesson(lesson)
    answer = mutant(lesson, grade, source)
    hidden = importlib.import_module(f"qkv_grading.lesson{int(row.number):02d}")
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        assert_rejected(getattr(hidden, grade), answer)  # wrong indeed
        assert_rejected(getattr(importlib.import_module(row.checks), grade), answer)
