"""Hints name a cause only where the causes differ (issue 32, "hints that name the wrong cause").

A check names a known mistake when the student's answer is that mistake's on inputs that tell it apart from the
others (qkv.checking.diagnosis). On an input where two plausible mistakes give the same answer, naming one of them
guesses: `scaled_scores` dividing by the worked example's sqrt(4) = 2 was told "divided by the square root of the
number of keys" on a case with 4 keys, `self_attention` scaled by sqrt(d_model) was told "divided by d_k" where
sqrt(d_model) = d_k, a `dependence_matrix` that nudges one component or a column was told "computed again" or
"the nudges accumulate". Held here, for every lesson 01-07 check:
- every input the visible checks grade on, with every catalogued mistake, every plausible mistake a check lists
  with no hint (`Check.plausible`) and the issue's examples playing the student: a named cause is the student's
  own mistake, never another one that coincides there;
- the sizes of lesson 02's visible inputs, where a scale taken from the wrong size is a mistake: every candidate
  scale differs from every other one (d_k != n_k != d_model != 4);
- a NaN says where it comes from where that can be told: overflow (finite on the same input scaled down), a
  mask=None that is not handled (finite with a mask that hides nothing), and in lesson 04 a fully masked row
  (finite with a key made visible in it) apart from a mask applied after the exponential (an overflow).
"""
import contextlib
import importlib
import io
import itertools
import textwrap
import warnings

import numpy as np
import pytest

import mutation
import qkv.lessons
from qkv.checking import Check, Hint, check_against, check_boolean
from qkv.checking.compare import RECORDERS
from qkv_edition import fixtures

LESSONS = [row.slug for row in qkv.lessons.LESSONS if int(row.number) <= 7]

PROBE = """
def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    X = np.asarray(X, float)
    baseline = np.asarray(attend(X))
    D = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        {nudge}
        D[:, j] = np.abs(np.asarray(attend(nudged)) - baseline).max(axis=1) > tol
    return D
"""

# The issue's examples, as a student writes them: {check name: [(source, hints it may be told or () for none)]}.
# A hint is named by a fragment of its text; any other catalogued hint is a wrong cause.
ISSUE_EXAMPLES = {
    "scaled_scores": [("""
def scaled_scores(Q, K):
    return np.asarray(Q, float) @ np.asarray(K, float).T / 2  # the worked example's sqrt(4)
""", ())],
    "attention_weights": [("""
def attention_weights(Q, K):
    scores = np.asarray(Q, float) @ np.asarray(K, float).T / 2
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
""", ())],
    "self_attention": [("""
def self_attention(X, W_Q, W_K, W_V):
    X = np.asarray(X, float)
    Q, K, V = X @ np.asarray(W_Q, float), X @ np.asarray(W_K, float), X @ np.asarray(W_V, float)
    scores = Q @ K.T / np.sqrt(X.shape[-1])  # the width of X, not of Q and K
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ V
""", ("square root of d_model",))],
    "dependence_matrix": [(PROBE.format(nudge="nudged[j, 0] += delta  # one component of row j only"),
                           ("only component 0 of row j",)),
                          (PROBE.format(nudge="nudged[:, j] += delta  # column j: component j of every row"),
                           ("column j is nudged",))],
}


def _student(source):
    namespace = {"np": np}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)  # noqa: S102 - the test's own text
    return [value for name, value in namespace.items() if name != "np" and callable(value)][-1]


# ---------------------------------------------------------------- the inputs the visible checks grade on

def _declared_checks(module):
    """{id of a catalogue: the name of the Check that declares it} in a checks module."""
    return {id(value.diagnoses): name for name, value in vars(module).items()
            if isinstance(value, Check) and value.diagnoses}


def _graded_inputs(slug):
    """[(Check variable name, reference, args, kwargs, check)] of every comparison the lesson's visible checks make
    (qkv.checking.compare.RECORDERS), run with the solution's own functions."""
    row = qkv.lessons.lesson(slug)
    checks = importlib.import_module(row.checks)
    declared = _declared_checks(checks)
    notebook = fixtures.solution_notebook(row)
    namespace = fixtures.solution_namespace(notebook, slug)
    seen = []

    def record(reference_fn, args, kwargs, check):
        if id(check.diagnoses) in declared:
            seen.append((declared[id(check.diagnoses)], reference_fn, args, dict(kwargs), check))

    RECORDERS.append(record)
    try:
        for check_name, argument_names in fixtures.visible_calls(notebook):
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(checks, check_name)(*[namespace[name] for name in argument_names])
    finally:
        RECORDERS.remove(record)
    return seen


def _hint_of(student, reference_fn, args, kwargs, check):
    """The hint the check gives `student` on this input, or None when it passes."""
    with np.errstate(all="ignore"):
        expected = reference_fn(*args, **kwargs)
    boolean = not isinstance(expected, tuple) and np.asarray(expected).dtype == bool
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if boolean:
                check_boolean(student, reference_fn, args, kwargs, declared=check, require_bool=False)
            else:
                check_against(student, reference_fn, args, kwargs, declared=check)
        except Hint as hint:
            return str(hint)
    return None


def _named(message, catalogue):
    """The catalogued hints a message names."""
    return {hint for _, hint in catalogue if message and hint in message}


def _students(lesson_number, check_name, check):
    """(student, what it may be told: a set of hint fragments, or None for "its own hint") for every catalogued
    and plausible mistake of the check, compiled as a student's code, and the issue's examples."""
    copy = mutation.checks_copy(lesson_number)[check_name]
    for mistake, hint in copy.diagnoses:
        yield mistake, {hint}
    for mistake in getattr(copy, "plausible", ()):
        yield mistake, set()
    for source, allowed in ISSUE_EXAMPLES.get(check.name, ()):
        yield _student(source), set(allowed)


def _wrongly_named(message, hints, allowed):
    """The hints among `hints` that `message` names and `allowed` (fragments of the right ones) does not cover."""
    return [hint for hint in hints if message and hint in message
            and not any(fragment in hint for fragment in allowed)]


def test_a_named_cause_is_the_student_s_own_mistake_on_every_input_the_visible_checks_grade():
    # one test for lessons 01-07 together: a lesson whose catalogue never coincides passes alone
    wrong = []
    for slug in LESSONS:
        lesson_number = qkv.lessons.lesson(slug).number
        for check_name, reference_fn, args, kwargs, check in _graded_inputs(slug):
            for student, allowed in _students(lesson_number, check_name, check):
                message = _hint_of(student, reference_fn, args, kwargs, check)
                if _wrongly_named(message, [hint for _, hint in check.diagnoses], allowed):
                    wrong.append(f"{slug} {check_name} on {[np.shape(a) for a in args]}: {message}")
    assert not wrong, "a cause named where another one gives the same answer:\n" + "\n".join(wrong[:10])


def test_the_issue_s_examples_get_the_right_cause_or_none_from_the_hidden_tests_too():
    from qkv_grading import lesson02 as hidden02, lesson04 as hidden04
    hidden = {"scaled_scores": hidden02.scaled_scores, "attention_weights": hidden02.attention_weights,
              "self_attention": hidden02.self_attention, "dependence_matrix": hidden04.dependence_matrix}
    wrong = []
    for check_name, examples in ISSUE_EXAMPLES.items():
        checks = importlib.import_module("qkv.checks.lesson04" if check_name == "dependence_matrix"
                                         else "qkv.checks.lesson02")
        hints = {hint for value in vars(checks).values() if isinstance(value, Check) for _, hint in value.diagnoses}
        for source, allowed in examples:
            with pytest.raises(Hint) as failed, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                hidden[check_name](_student(source))
            if _wrongly_named(str(failed.value), hints, allowed):
                wrong.append(str(failed.value))
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- sizes where a scale taken from the wrong one shows

def _scales(case):
    """The scales a student may divide the scores by, for a lesson 02 input: {name: value}."""
    if len(case) == 4 and np.ndim(case[1]) == 2 and np.shape(case[0])[-1] == np.shape(case[1])[0]:  # X, W_Q, W_K, W_V
        T, d_model = np.shape(case[0])
        d_k = np.shape(case[1])[1]
        return d_k, {"sqrt(d_k)": np.sqrt(d_k), "d_k": d_k, "sqrt(d_model)": np.sqrt(d_model), "sqrt(T)": np.sqrt(T),
                     "1": 1.0, "2 (the worked example's)": 2.0, "4 (the worked example's)": 4.0}
    n_k, d_k = np.shape(case[1])
    return d_k, {"sqrt(d_k)": np.sqrt(d_k), "d_k": d_k, "sqrt(n_k)": np.sqrt(n_k), "1": 1.0,
                 "2 (the worked example's)": 2.0, "4 (the worked example's)": 4.0}


def test_lesson_02_s_visible_sizes_give_every_wrong_scale_its_own_value():
    from qkv.checks import lesson02
    coincide = []
    for check_name, _, args, _, _ in _graded_inputs("02-by-hand"):
        if check_name not in ("SCALED_SCORES", "ATTENTION_WEIGHTS", "ATTENTION", "SELF_ATTENTION"):
            continue
        if args[0] is lesson02.WORKED_Q or np.array_equal(np.asarray(args[0]), lesson02.WORKED_Q):
            continue  # the worked example is where the constants come from
        d_k, scales = _scales(tuple(np.asarray(a) for a in args))
        if d_k == np.shape(args[0])[-1] == np.shape(args[1])[0] and check_name == "SELF_ATTENTION":
            continue  # square weights on purpose (X @ W.T has the right shape), d_k = d_model by design
        for (a, x), (b, y) in itertools.combinations(scales.items(), 2):
            if np.isclose(x, y):
                coincide.append(f"{check_name} {[np.shape(v) for v in args]}: {a} = {b} = {x:g}")
    assert not coincide, "\n".join(sorted(set(coincide)))


# ---------------------------------------------------------------- where a NaN comes from

NAIVE_SOFTMAX_WEIGHTS = """
def attention_weights(Q, K):
    scores = np.asarray(Q, float) @ np.asarray(K, float).T / np.sqrt(np.shape(Q)[-1])
    e = np.exp(scores)  # no maximum subtracted
    return e / e.sum(axis=-1, keepdims=True)
"""

MASK_NONE_UNHANDLED = """
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    X = np.asarray(X, float)
    T, d_head = X.shape[0], np.shape(W_Q)[1] // n_heads
    def split(M):
        return (X @ np.asarray(M, float)).reshape(T, n_heads, d_head).transpose(1, 0, 2)
    q, k, v = split(W_Q), split(W_K), split(W_V)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d_head)
    scores = np.where(mask, scores, -np.inf)  # mask=None hides every key
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return (weights @ v).transpose(1, 0, 2).reshape(T, -1) @ np.asarray(W_O, float)
"""

NO_FULLY_MASKED_ROW = """
def masked_softmax(scores, mask):
    hidden = np.where(mask, np.asarray(scores, float), -np.inf)
    e = np.exp(hidden - hidden.max(axis=-1, keepdims=True))  # -inf - (-inf) on a row with no visible key
    return e / e.sum(axis=-1, keepdims=True)
"""

MASK_AFTER_EXP = """
def masked_softmax(scores, mask):
    scores = np.asarray(scores, float)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True)) * mask  # a huge hidden score leaves the visible ones 0
    return e / e.sum(axis=-1, keepdims=True)
"""

ZERO_LOG_ZERO = """
def entropy(weights):
    w = np.asarray(weights, float)
    return -np.sum(w * np.log(w), axis=-1)  # 0 * log 0 is NaN
"""


def _graders(lesson, name):
    visible = importlib.import_module(f"qkv.checks.lesson{lesson}")
    hidden = importlib.import_module(f"qkv_grading.lesson{lesson}")
    return getattr(visible, name), getattr(hidden, name)


NAN_CAUSES = [  # (lesson, graded function, the student's code, what its NaN hint says, what it must not say)
    ("02", "attention_weights", NAIVE_SOFTMAX_WEIGHTS, "scaled down", "mask=None"),  # NaN only on large scores
    ("05", "multi_head_attention", MASK_NONE_UNHANDLED, "mask=None", "scaled down"),  # NaN only with mask=None
    ("03", "entropy", ZERO_LOG_ZERO, "0 * log(0)", "scaled down"),  # NaN on small numbers: no overflow
    ("04", "masked_softmax", NO_FULLY_MASKED_ROW, "with a key made visible", "scaled down"),
    ("04", "masked_softmax", MASK_AFTER_EXP, "after the exponential", "with a key made visible"),
]


def test_a_nan_hint_says_where_the_nan_comes_from():
    wrong = []
    for lesson, name, source, said, not_said in NAN_CAUSES:
        for grader in _graders(lesson, name):
            with pytest.raises(Hint) as failed, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grader(_student(source))
            message = str(failed.value)
            if said not in message or not_said in message:
                wrong.append(message)
    assert not wrong, "\n".join(wrong)
