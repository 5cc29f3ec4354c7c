"""A grade never depends on the random draw (issue 32, "A grade depends on the random draw").

The hidden tests draw their random inputs from a generator seeded by the lesson, the student and the test
(qkv_grading.fresh_rng, draws_of). Held here, for every hidden test of every lesson 01-07, as the source notebook
calls it:
- a regrade draws the same inputs: the same student, twice, hands the student's functions the same arguments and
  gets the same verdict; classmates draw different inputs (a recording wrapper around the solution's functions);
- an answer whose grade used to depend on the draw (it passed on some draws and failed on others) fails as every
  one of many students: the case that catches it is fixed;
- the grader hands the hidden tests the student id nbgrader names the submission by, on both of its routes
  (SandboxedExecute.preprocess, and a worker's execute_submission).
"""
import ast
import dataclasses
import functools
import hashlib
import importlib
import re
import types
import warnings

import nbformat
import numpy as np
import pytest
import qkv.lessons
import qkv_grading
from qkv_autograde.grading import parallel, preprocessors

from lessons import LESSONS, grade_id, mutant, read, student
from test_student_answers import ANSWERS

HIDDEN_CELL = re.compile(r"BEGIN HIDDEN TESTS(.*?)END HIDDEN TESTS", re.S)


def hidden_calls(lesson):
    """[(hidden test name, [names of the student's functions it is given])] as the lesson's source notebook calls
    them (`hidden.generation_with_cache(attention_step, append_to_cache)`); self-check answers draw nothing."""
    calls = []
    for cell in read(lesson).cells:
        found = HIDDEN_CELL.search(cell.source) if grade_id(cell) else None
        for node in ast.walk(ast.parse(found.group(1))) if found else ():
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "hidden"
                    and node.func.attr != "answer"):
                calls.append((node.func.attr, [arg.id for arg in node.args]))
    return calls


HIDDEN_TESTS = [(lesson, test, names) for lesson in LESSONS for test, names in hidden_calls(lesson)]


def fingerprint(value):
    """A digest of the data a hidden test handed over: equal digests, equal inputs."""
    digest = hashlib.sha256()

    def feed(item):
        if isinstance(item, np.ndarray):
            digest.update(f"array {item.dtype} {item.shape}".encode())
            digest.update(np.ascontiguousarray(item).tobytes() if item.dtype != object else repr(item).encode())
        elif isinstance(item, np.random.Generator):
            feed(item.bit_generator.state)
        elif isinstance(item, functools.partial):
            digest.update(b"partial")
            feed((item.func, item.args, item.keywords))
        elif isinstance(item, dict):
            digest.update(b"dict")
            for key in sorted(item, key=repr):
                feed((key, item[key]))
        elif isinstance(item, (list, tuple)):
            digest.update(f"{type(item).__name__} {len(item)}".encode())
            for element in item:
                feed(element)
        elif dataclasses.is_dataclass(item) or isinstance(item, types.SimpleNamespace):
            feed((type(item).__name__, vars(item)))
        elif callable(item):
            digest.update(f"callable {getattr(item, '__module__', '')}.{getattr(item, '__qualname__', item)}".encode())
        else:
            digest.update(f"{type(item).__name__} {item!r}".encode())

    feed(value)
    return digest.hexdigest()


def hidden_module(lesson):
    return importlib.import_module(qkv.lessons.lesson(lesson).hidden_tests)


@functools.lru_cache(maxsize=None)
def solved(lesson):
    return student(lesson)


class DrewOtherInputs(BaseException):
    """Raised through the hidden test (no check turns it into a Hint) once a classmate's call differs."""


def recorded_run(lesson, test, names, who, other_than=None):
    """(the inputs each of the student's functions was called with, the verdict) of one hidden test graded as
    student `who`, with the solution's functions recording their calls; with `other_than` (another student's
    calls), it stops at the first call that differs from them (the slow tests run SmolLM2)."""
    calls = []

    def recording(name, fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            calls.append((name, fingerprint((args, kwargs))))
            if other_than is not None and calls != other_than[:len(calls)]:
                raise DrewOtherInputs
            return fn(*args, **kwargs)
        return call

    functions = [recording(name, solved(lesson)[name]) for name in names]
    hidden = hidden_module(lesson)
    with qkv_grading.draws_of(lesson, who), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(hidden, test)(*functions)
            verdict = "passed"
        except AssertionError as failure:
            verdict = f"failed: {failure}"
        except DrewOtherInputs:
            verdict = "stopped: other inputs"
    return calls, verdict


@pytest.mark.parametrize("lesson, test, names", HIDDEN_TESTS, ids=[f"{l[:2]}-{t}" for l, t, _ in HIDDEN_TESTS])
def test_a_regrade_draws_the_same_inputs_and_classmates_draw_others(lesson, test, names):
    first, verdict = recorded_run(lesson, test, names, "ann")
    again, verdict_again = recorded_run(lesson, test, names, "ann")
    assert first, f"{test} never called the student's function"
    assert (again, verdict_again) == (first, verdict), f"{test}: a regrade of ann's notebook drew other inputs"
    # a test that draws only a prompt out of a few may give two classmates the same one: a third is asked then
    assert any(recorded_run(lesson, test, names, who, other_than=first)[0] != first for who in ("ben", "cho")), \
        f"{test}: ann, ben and cho drew the same inputs"


def test_outside_grading_the_draw_is_the_lessons_own():
    """A developer calling a hidden test draws the lesson's inputs, the same on every call, and not a student's."""
    fn = solved("01-lookup")["softmax"]
    seen = []

    def recording(*args, **kwargs):
        seen.append(fingerprint((args, kwargs)))
        return fn(*args, **kwargs)

    from qkv_grading import lesson01
    runs = []
    for who in (None, None, "ann"):
        seen.clear()
        if who is None:
            lesson01.softmax(recording)
        else:
            with qkv_grading.draws_of("01-lookup", who):
                lesson01.softmax(recording)
        runs.append(list(seen))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_the_seed_is_a_stable_hash_of_lesson_student_and_test():
    seed = qkv_grading.draw_seed("01-lookup", "ann", "softmax:1")
    # sha256 of the same bytes in any process (Python's hash() of a string changes with PYTHONHASHSEED)
    assert np.random.default_rng(seed).integers(1 << 30) == 277887323
    assert qkv_grading.draw_seed("01", "ann", "softmax:1").entropy == seed.entropy  # a lesson by number or slug
    others = [qkv_grading.draw_seed("02-by-hand", "ann", "softmax:1"), qkv_grading.draw_seed("01", "ben", "softmax:1"),
              qkv_grading.draw_seed("01", "ann", "soft_lookup:1")]
    assert len({seed.entropy, *(s.entropy for s in others)}) == 4
    with pytest.raises(ValueError, match="student id"):
        with qkv_grading.draws_of("01-lookup", ""):
            pass


# ---------------------------------------------------------------- answers that passed on a lucky draw

# (lesson, graded function, its hidden test, a student's answer) that passed on some draws and failed on others
LUCKY_ANSWERS = {
    "close enough (np.allclose)": ("01-lookup", "hard_lookup", "hard_lookup", """
def hard_lookup(query, keys, values):
    query, keys, values = np.asarray(query), np.asarray(keys), np.asarray(values)
    for key, value in zip(keys, values):
        if np.allclose(key, query):
            return value
    raise KeyError("no key matches the query")
"""),
    # a head listed twice was in the list only when the drawn head of layer 1 was 2: one draw in six
    "a head's output taken away once per mention": ("06-sinks", "ablate_heads", "ablate_heads", """
def ablate_heads(attention, heads):
    heads = [(int(layer), int(head)) for layer, head in heads]
    def ablated(q, k, v, mask, layer):
        full = np.array(attention(q, k, v, mask), copy=True)
        out = full.copy()
        for ablated_layer, head in heads:
            if ablated_layer == layer:
                out[head] -= full[head]
        return out
    return ablated
"""),
    # no output was near 0 on most draws, where a tolerance relative to the output misses a dependence: 37 of 50
    "each output row compared with np.allclose": ("04-masking", "dependence_matrix", "dependence_matrix", ANSWERS[
        "04-masking"]["dependence_matrix"]["wrong"]["each output row compared with np.allclose"]),
}
STUDENTS = [f"student-{k:02d}" for k in range(50)]


@pytest.mark.parametrize("name", list(LUCKY_ANSWERS))
def test_an_answer_that_passed_by_luck_fails_as_every_student(name):
    lesson, graded, test, source = LUCKY_ANSWERS[name]
    fn = mutant(lesson, graded, source)
    hidden = hidden_module(lesson)
    passed = []
    for who in STUDENTS:
        with qkv_grading.draws_of(lesson, who), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                getattr(hidden, test)(fn)
                passed.append(who)
            except AssertionError:
                pass
    assert not passed, f"{name} passed {test} as {len(passed)} of {len(STUDENTS)} students: {passed[:5]}"


# ---------------------------------------------------------------- the grader names the student

class NoKernel:
    """The sandboxed kernel's stand-in: the draw, not the student's code, is what these tests are about."""
    events, client, kernel_cpu_seconds = [], None, 0.0

    def __init__(self, *args, **kwargs):
        self.events = []

    def start(self):
        pass

    def run_cell(self, cell, index):
        pass

    def close(self):
        pass


class NoWalls:
    mode, cgroup = "bwrap", None

    def __init__(self, **walls):
        pass

    def cleanup(self):
        pass


def one_test_cell():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": "test_x", "points": 1}
    nb.cells.append(cell)
    return nb


@pytest.fixture
def draws_seen(monkeypatch):
    """What the hidden tests would draw in each test cell the grader runs (a number from fresh_rng)."""
    seen = []
    monkeypatch.setattr(preprocessors.student_kernel, "StudentKernel", NoKernel)
    monkeypatch.setattr(preprocessors.sandbox, "Sandbox", NoWalls)
    monkeypatch.setattr(preprocessors.sandbox, "limit_events", lambda cgroup: [])
    monkeypatch.setattr(preprocessors.verdicts, "run_test_cell",
                        lambda cell, kernel, namespace: seen.append(int(qkv_grading.fresh_rng().integers(1 << 62))))
    return seen


def test_the_grader_draws_as_the_student_nbgrader_names(draws_seen, monkeypatch):
    """SandboxedExecute.preprocess (nbgrader's route, and the coordinator's own) takes the student id from
    nbgrader's resources (the submitted/ folder), never from the notebook."""
    monkeypatch.setattr(preprocessors.nbformat, "read", lambda path, as_version: nbformat.v4.new_notebook())
    step = preprocessors.SandboxedExecute()
    for who in ("ann", "ann", "ben"):
        nb = one_test_cell()
        nb.metadata["qkv"] = {"student": "ben"}  # whatever the notebook says of itself is not read
        step.preprocess(nb, {"nbgrader": {"student": who, "assignment": "01-lookup", "notebook": "01-lookup"}})
    ann, ann_again, ben = draws_seen
    assert ann == ann_again != ben


def test_a_worker_draws_as_the_student_it_was_sent(draws_seen, monkeypatch):
    """parallel.execute_submission (make grade's workers) gets the student id from the coordinator."""
    monkeypatch.setattr(parallel, "warm_up", lambda lesson, settings=None: None)
    monkeypatch.setattr(parallel, "kernel_template", lambda lesson, memory_limit: None)
    source = nbformat.writes(nbformat.v4.new_notebook())
    for who in ("ann", "ann", "ben"):
        parallel.execute_submission("01-lookup", who, nbformat.writes(one_test_cell()), source, {})
    ann, ann_again, ben = draws_seen
    assert ann == ann_again != ben


def test_the_coordinator_takes_a_workers_grade_only_if_drawn_as_the_student_nbgrader_names(monkeypatch):
    """make grade's coordinator (PooledExecute) checks whose draws the worker used: a result drawn as another
    student is graded again here, so a mix-up between staging and nbgrader cannot change a grade."""
    import concurrent.futures
    graded_here = []
    monkeypatch.setattr(preprocessors.SandboxedExecute, "preprocess",
                        lambda self, nb, resources: (graded_here.append(resources["nbgrader"]["student"]) or nb,
                                                     resources))
    nb = one_test_cell()
    for drawn_as in ("ann", "ben"):
        done = concurrent.futures.Future()
        done.set_result((nbformat.writes(nb), {"drawn_as": drawn_as, "worker": 1, "cpu_seconds": 1.0}))
        parallel.PENDING[("ann", "01-lookup")] = parallel.Pending(parallel.fingerprint(nb), done)
        parallel.PooledExecute().preprocess(nb, {"nbgrader": {"student": "ann", "notebook": "01-lookup",
                                                              "assignment": "01-lookup"}})
    assert graded_here == ["ann"] and not parallel.PENDING  # the second result, drawn as ben, is graded here
    assert parallel.MEASUREMENTS[-1]["drawn_as"] == "ann"
