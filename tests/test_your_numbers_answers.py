"""The answers of the varied self-checks (issue 43): ANSWERS[name] = (function of the student's numbers, tolerance)
in autograde/qkv_grading/lessonNN.py, checked on every member of every pool: the solution notebook's own answer
expression gives the right answer, every catalogued mistake (qkv_grading.mistakes) a wrong one, and no two members'
right answers fall inside each other's tolerance windows. Then both graders of an answer, the hidden test and
self-study mode, follow the student's numbers and letters."""
import importlib
import textwrap
import types

import pytest

from lessons import read, student
from qkv import your_numbers
from qkv.checking import Hint, answered_choice, answered_number, is_right
from qkv.your_numbers import POOLS, numbers, question_params, shown_letter
from qkv_grading import expected_answer, variant_of
from qkv_grading.mistakes import MISTAKES

TERM_SALT = "qkv-2026-autumn"
NUMERIC = [(lesson, name) for lesson, pools in POOLS.items() for name, pool in pools.items()
           if pool.names != ("order",)]
CHOICE = [(lesson, name) for lesson, pools in POOLS.items() for name, pool in pools.items()
          if pool.names == ("order",)]


def hidden(lesson):
    return importlib.import_module(f"qkv_grading.lesson{lesson[:2]}")


@pytest.fixture(scope="module")
def solved():
    return {lesson: student(lesson) for lesson in POOLS}


def answer_cell(lesson, name):
    return next(c.source for c in read(lesson).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == f"answer_{name}")


def rows(lesson, name):
    pool = POOLS[lesson][name]
    return [dict(zip(pool.names, row)) for row in pool.rows]


@pytest.mark.parametrize("lesson,name", NUMERIC)
def test_every_variant_s_solution_is_right_and_every_catalogued_mistake_wrong(solved, lesson, name):
    _, tolerance = hidden(lesson).ANSWERS[name]
    source = textwrap.dedent(answer_cell(lesson, name))
    rights = []
    for params in rows(lesson, name):
        namespace = dict(solved[lesson], my_numbers=types.SimpleNamespace(params={name: params}))
        exec(compile(source, f"<{lesson}:answer_{name}>", "exec"), namespace)
        right = expected_answer(lesson, name, hidden(lesson).ANSWERS, params)
        assert is_right(namespace[name], right, tolerance), (params, namespace[name], right)
        for what, mistake in MISTAKES[name]:
            wrong = mistake(params)
            assert wrong is None or not is_right(wrong, right, tolerance), f"{params}: {what} is right"
        rights.append(right)
    rights.sort()
    closest = min(b - a for a, b in zip(rights, rights[1:]))
    assert closest > tolerance, f"two variants' answers lie {closest:.3g} apart, inside the tolerance {tolerance}"


def test_every_varied_numeric_question_has_catalogued_mistakes_and_an_answer_function():
    assert set(MISTAKES) == {name for _, name in NUMERIC}
    for lesson, name in NUMERIC:
        assert callable(hidden(lesson).ANSWERS[name][0]), name
    for lesson, name in CHOICE:
        assert hidden(lesson).ANSWERS[name][0] in "abcd", name


def test_the_hidden_test_grades_the_numbers_and_letters_of_the_key_being_graded():
    module = hidden("03-scaling")
    mine = question_params("03-scaling", "variance_at_128", "jsmith", TERM_SALT)["d_k"]
    order = question_params("03-scaling", "why_scale", "jsmith", TERM_SALT)["order"]
    assert mine != 128 and order != "abcd"
    with variant_of("jsmith", TERM_SALT):
        module.answer("variance_at_128", mine)
        module.answer("why_scale", shown_letter(order, "b"))
        with pytest.raises(Hint, match=rf"not right for your numbers \(d_k = {mine}\)"):
            module.answer("variance_at_128", 128)  # the canonical number is not this student's
        if shown_letter(order, "b") != "b":
            with pytest.raises(Hint, match="not the right choice"):
                module.answer("why_scale", "b")
    module.answer("variance_at_128", 128)  # outside grading: the canonical numbers, as before variants


@pytest.fixture
def self_study_kernel(monkeypatch):
    monkeypatch.setenv("QKV_SELF_STUDY", "1")
    for variable in ("QKV_AUTOGRADE", "QKV_VARIANT_KEY", "QKV_VARIANT_SALT", "JUPYTERHUB_USER"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(your_numbers, "_kernel_key", {})


def test_self_study_says_right_or_wrong_for_the_numbers_on_show(self_study_kernel, capsys):
    mine = numbers("04-masking", "jsmith")
    p = mine.params["future_share_zero_mask"]
    answered_number((p["T"] - p["position"]) / p["T"], "future_share_zero_mask")
    answered_choice(shown_letter(mine.params["causal_blocks"]["order"], "b"), list("abcd"), "causal_blocks")
    assert capsys.readouterr().out.count(": right") == 2
    with pytest.raises(Hint, match="not right"):
        answered_number(0.8, "future_share_zero_mask")  # the canonical answer, not jsmith's


def test_a_wrong_answer_right_for_the_typed_key_says_so_naming_no_key_and_no_answer():
    module, term = hidden("03-scaling"), TERM_SALT
    typed_d_k = question_params("03-scaling", "variance_at_128", "jsmtih", term)["d_k"]
    mine = question_params("03-scaling", "variance_at_128", "jsmith", term)["d_k"]
    assert typed_d_k != mine
    typed_order = question_params("03-scaling", "why_scale", "jsmtih", term)["order"]
    with variant_of("jsmith", term, typed="jsmtih"):
        with pytest.raises(Hint) as caught:
            module.answer("variance_at_128", typed_d_k)  # the typo's numbers, not the submission's
        message = str(caught.value)
        assert "right for the numbers of the login typed in your first cell, which is not the login of your " \
               "submission" in message
        assert "jsmtih" not in message and "jsmith" not in message and str(mine) not in message.split("(allowed")[1]
        with pytest.raises(Hint) as caught:
            module.answer("variance_at_128", -1.0)  # right for nobody: the plain hint
        assert "login typed" not in str(caught.value)
        if shown_letter(typed_order, "b") != shown_letter(
                question_params("03-scaling", "why_scale", "jsmith", term)["order"], "b"):
            with pytest.raises(Hint, match="login typed in your first cell"):
                module.answer("why_scale", shown_letter(typed_order, "b"))
        module.answer("variance_at_128", mine)
    with variant_of("jsmith", term, typed="jsmith"), pytest.raises(Hint) as caught:
        module.answer("variance_at_128", typed_d_k)
    assert "login typed" not in str(caught.value)  # the typed key is the true one: nothing to say


@pytest.mark.parametrize("name", ["context_growth", "smollm2_cache_mib"])
def test_no_lesson_07_row_s_right_answer_is_another_row_s_catalogued_mistake(name):
    # lesson 07 has 2 numeric questions and 1 choice: a copier is named only when both copied numbers fit the
    # source, one of them unexplained; a right answer that is another row's catalogued mistake is explained, so its
    # pools keep every row's right answer clear of every other row's mistakes (A2, issue 43)
    _, tolerance = hidden("07-cost").ANSWERS[name]
    members = rows("07-cost", name)
    for mine, theirs in ((a, b) for a in members for b in members if a != b):
        right = expected_answer("07-cost", name, hidden("07-cost").ANSWERS, theirs)
        for what, mistake in MISTAKES[name]:
            wrong = mistake(mine)
            assert wrong is None or not is_right(right, wrong, tolerance), f"{theirs}'s answer is {mine}'s {what}"
