"""Every catalogued hint is said to a student who makes its mistake, and five hints name the real cause (issue 41,
item 8).

A hint in a mistake catalogue (qkv.checks.lessonNN: a Check's `diagnoses`, or a list a check reads by its own code)
helps only if a student who makes that mistake meets it. Here each catalogued mistake, compiled as a student's code
(tests/mutation.checks_copy), plays the student's function in the visible check the solution notebook's test cell
calls, run whole as the student runs it (the first failing input speaks): its own hint must be in what it is told.
Lesson 01 had four that never fired (an argmax lookup answered right on both matching queries; "equal in only some
components" never confirmed; the keys blended instead of the values told only "returned shape (4,)").

And the five hints of the review of lessons 01-05 that named the wrong cause or none, each with the student's code:
scores divided by sqrt(len(Q)), np.diag of a column, a Jacobian on a softmax without the max shift (it passed), a
masked_softmax written for one matrix given a batch, a dependence probe that keeps the sign of the change.
"""
import contextlib
import importlib
import io
import textwrap
import warnings

import numpy as np
import pytest

import mutation
import qkv.lessons
from qkv.attention import softmax
from qkv.checking import Check, Hint
from qkv.checking.compare import RECORDERS
from qkv_edition import fixtures

# Catalogues no Check declares, read by a check's own code: {lesson: {catalogue: the student's function it is about}}
UNDECLARED = {"03": {"VARIANCE_MISTAKES": "dot_product_variance"}}


def _is_catalogue(value):
    return (isinstance(value, (list, tuple)) and value and all(
        isinstance(entry, tuple) and len(entry) == 2 and callable(entry[0]) and isinstance(entry[1], str)
        for entry in value))


def _told(check, arguments):
    """What the visible check says to these functions: its Hint, or None when it passes."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            check(*arguments)
        except Hint as hint:
            return str(hint)
    return None


def _catalogues_met(row, checks, notebook, namespace):
    """[(visible check, its argument names, catalogue name, Check or None)] for each catalogue a visible check reads."""
    declared = {id(value.diagnoses): name for name, value in vars(checks).items()
                if isinstance(value, Check) and value.diagnoses}
    met = []
    for check_name, argument_names in fixtures.visible_calls(notebook):
        seen = {}

        def record(reference_fn, args, kwargs, check, seen=seen):
            if id(check.diagnoses) in declared:
                seen.setdefault(id(check.diagnoses), (declared[id(check.diagnoses)], check))

        RECORDERS.append(record)
        try:
            assert _told(getattr(checks, check_name), [namespace[n] for n in argument_names]) is None, check_name
        finally:
            RECORDERS.remove(record)
        met += [(check_name, argument_names, name, check) for name, check in seen.values()]
        met += [(check_name, argument_names, name, None) for name, student in UNDECLARED.get(row.number, {}).items()
                if student in argument_names]
    return met


@pytest.mark.parametrize("slug", [row.slug for row in qkv.lessons.LESSONS])
def test_every_catalogued_hint_is_said_to_a_student_who_makes_its_mistake(slug):
    row = qkv.lessons.lesson(slug)
    checks = importlib.import_module(row.checks)
    notebook = fixtures.solution_notebook(row)
    namespace = fixtures.solution_namespace(notebook, slug)
    copy = mutation.checks_copy(row.number)
    met = _catalogues_met(row, checks, notebook, namespace)
    # every catalogue of the module is met by some visible check (a new undeclared one is added to UNDECLARED)
    read = {id(check.diagnoses) if check is not None else id(getattr(checks, name)) for _, _, name, check in met}
    unmet = {name for name, value in vars(checks).items() if _is_catalogue(value) and id(value) not in read}
    assert not unmet, f"catalogues no visible check of {slug} reads (declare them, or list them in UNDECLARED): {unmet}"
    silent = []
    for check_name, argument_names, catalogue, check in met:
        student_name = check.name if check is not None else UNDECLARED[row.number][catalogue]
        position = argument_names.index(student_name) if student_name in argument_names else 0
        entries = copy[catalogue].diagnoses if check is not None else copy[catalogue]
        for mistake, hint in entries:
            arguments = [namespace[n] for n in argument_names]
            arguments[position] = mistake
            told = _told(getattr(checks, check_name), arguments)
            if told is None or hint not in told:
                silent.append(f"{check_name} ({catalogue}): {hint[:90]!r}\n    was told: {told}")
    assert not silent, f"{len(silent)} catalogued hints of {slug} never said to their mistake:\n" + "\n".join(silent)


# ---------------------------------------------------------------- the five hints that named the wrong cause

def _student(source):
    namespace = {"np": np, "softmax": softmax, "__name__": "__main__"}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)  # noqa: S102 - the test's own text
    return [value for name, value in namespace.items() if name not in ("np", "softmax") and callable(value)][-1]


SQRT_LEN_Q = """
def {name}({params}):
    Q, K = np.asarray(Q, float), np.asarray(K, float)
    scores = Q @ K.T / np.sqrt(len(Q))  # the number of queries, not the width d_k
    return {returns}
"""

REAL_CAUSES = [  # (lesson, visible check, the student's code, a fragment of the real cause)
    ("02", "scaled_scores", SQRT_LEN_Q.format(name="scaled_scores", params="Q, K", returns="scores"),
     "square root of the number of queries"),
    ("02", "attention_weights", SQRT_LEN_Q.format(name="attention_weights", params="Q, K",
                                                  returns="softmax(scores, axis=-1)"),
     "square root of the number of queries"),
    ("02", "attention", SQRT_LEN_Q.format(name="attention", params="Q, K, V",
                                          returns="softmax(scores, axis=-1) @ np.asarray(V, float)"),
     "square root of the number of queries"),
    ("03", "softmax_jacobian", """
def softmax_jacobian(scores):
    s = softmax(np.asarray(scores, float)).reshape(-1, 1)  # a column
    return np.diag(s) - s @ s.T
""", "np.diag of a column"),
    ("03", "softmax_jacobian", """
def softmax_jacobian(scores):
    e = np.exp(np.asarray(scores, float))  # no maximum subtracted
    s = e / e.sum()
    return np.diag(s) - np.outer(s, s)
""", "the softmax inside your Jacobian overflows"),
    ("04", "masked_softmax", """
def masked_softmax(scores, mask):
    scores = np.asarray(scores, float)
    weights = np.zeros_like(scores)
    for i in range(len(scores)):  # one row of one [n_q, n_k] matrix at a time
        row = np.where(mask[i], scores[i], -np.inf)
        if np.any(mask[i]):
            e = np.exp(row - row.max(axis=-1, keepdims=True))
            weights[i] = e / e.sum(axis=-1, keepdims=True)
    return weights
""", "wrong on a batch"),
    ("04", "dependence_matrix", """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, float)
    baseline = np.asarray(attend(X))
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        nudged[j] += delta
        D[:, j] = (np.asarray(attend(nudged)) - baseline).max(axis=1) > tol  # the sign kept
    return D
""", "FALLS when row j is nudged"),
]


@pytest.mark.parametrize("lesson, check_name, source, cause", REAL_CAUSES,
                         ids=[f"{c[0]}:{c[1]}:{c[3][:20]}" for c in REAL_CAUSES])
def test_the_review_s_five_mistakes_are_told_their_real_cause_by_the_visible_check(lesson, check_name, source,
                                                                                     cause):
    checks = importlib.import_module(f"qkv.checks.lesson{lesson}")
    told = _told(getattr(checks, check_name), [_student(source)])
    assert told is not None and cause in told, told
