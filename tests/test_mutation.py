"""Mechanical mutants of every graded reference function against the hidden tests (issue 8).

For each lesson: every non-equivalent mutant (tests/mutation.py) must be rejected on every one of
DRAWS independent draws of the hidden tests' random inputs (each drawn as a student of its own: the hidden tests'
draws are seeded by the student, qkv_grading.draws_of), and at least MIN_KILL_RATE of them on each
draw; the unmutated reference, compiled the same way, must pass. The kill rates and the survivors are
printed at the end of the pytest run (README, maintainer section, says how to read them).
"""
import functools

import pytest
import qkv_grading

import mutation

DRAWS = 3
MIN_KILL_RATE = 0.98
REPORT = {}  # lesson -> printable lines, shown by conftest's terminal summary


@functools.lru_cache(maxsize=None)
def non_equivalent(graded):
    inputs = mutation.equivalence_inputs(graded)
    return [m for m in mutation.mutants(graded) if not mutation.is_equivalent(m, inputs)]


def drawn_as(lesson, draw):
    return qkv_grading.draws_of(lesson, f"mutation-draw-{draw}")


def killed_as(lesson, draw, mutant, hidden_test):
    with drawn_as(lesson, draw):
        return mutation.killed(mutant, hidden_test)


def graded_in(lesson):
    return [(graded, test) for graded, (where, test) in mutation.GRADED.items() if where == lesson]


@pytest.mark.parametrize("lesson", mutation.LESSONS)
def test_the_unmutated_reference_passes_every_draw(lesson):
    hidden = mutation.hidden_module(lesson)
    for graded, test in graded_in(lesson):
        for draw in range(DRAWS):
            with drawn_as(lesson, draw):
                getattr(hidden, test)(mutation.student_reference(graded))


@pytest.mark.parametrize("lesson", mutation.LESSONS)
def test_hidden_tests_kill_the_mechanical_mutants_on_every_draw(lesson):
    hidden = mutation.hidden_module(lesson)
    rows = []
    for graded, test in graded_in(lesson):
        for mutant in non_equivalent(graded):
            rows.append((mutant, [killed_as(lesson, draw, mutant, getattr(hidden, test)) for draw in range(DRAWS)]))
    lines = mutation.report({lesson: rows})
    REPORT[lesson] = lines
    print("\n".join(lines))
    flaky = [m for m, outcomes in rows if any(outcomes) and not all(outcomes)]
    rates = [sum(r[1][d] for r in rows) / len(rows) for d in range(DRAWS)]
    assert rows, f"no mutants generated for lesson {lesson}"
    assert not flaky, "\n".join(lines)
    assert min(rates) >= MIN_KILL_RATE, "\n".join(lines)


def test_every_graded_reference_is_declared_by_its_lesson():
    for graded, (lesson, test) in mutation.GRADED.items():
        hidden = mutation.hidden_module(lesson)
        assert graded in hidden.GRADED_REFERENCES, f"{graded} is graded by lesson {lesson} but not declared"
        assert callable(getattr(hidden, test))
