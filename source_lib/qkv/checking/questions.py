"""Self-check questions: the form of an answer always, right or wrong at once in self-study mode, and the one
rule of whether an answer is right (used by the hidden tests' `expect_answer` too)."""
import ast
import builtins
import functools
import glob
import os
import sys

import numpy as np

from qkv.checking.hints import Hint
from qkv.checking.validation import expect_number
from qkv import your_numbers
from qkv.lessons import course_paths, enclosing_courses

SELF_STUDY_VARIABLE = "QKV_SELF_STUDY"
VALIDATING_VARIABLE = "NBGRADER_VALIDATING"  # set by nbgrader's Validator (the students' Validate button) as it runs
# what an ANSWERS table may use besides numpy: it is read as data, never run as a module
_PLAIN_BUILTINS = {name: getattr(builtins, name) for name in ("float", "int", "abs", "round", "min", "max", "sum")}


def self_study():
    """Is self-study mode on? Set QKV_SELF_STUDY=1 (the public Binder launch does, in `start`).

    In self-study mode a self-check question says at once whether the answer is right, with a one-line
    explanation; in a graded class (the variable unset) it only records the answer, graded at collection.
    """
    return os.environ.get(SELF_STUDY_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------- the course's answer key, read as data
# The right answers live only beside the hidden tests (autograde/qkv_grading/lessonNN.py, ANSWERS and
# EXPLANATIONS), whose modules must never be imported into the student's kernel; self-study mode on Binder
# (which clones the whole repository) needs them there all the same. So these two functions are the one place
# that reads the grader's files, as plain literals; where they are, qkv.lessons.course_paths knows.

def answer_key_folder():
    """autograde/qkv_grading of the course checkout this library was installed from (Binder clones the
    whole repository) or above the notebook's folder; $QKV_AUTOGRADE names another autograde/ folder."""
    override = os.environ.get("QKV_AUTOGRADE")
    if override:
        courses = [course_paths(autograde=override)]
    else:
        courses = [*enclosing_courses(course_paths().root), *enclosing_courses(os.getcwd())]
    return next((str(c.hidden_tests) for c in courses if (c.hidden_tests / "__init__.py").is_file()), None)


@functools.lru_cache(maxsize=4)
def _read_answer_key(folder):
    # the ANSWERS and EXPLANATIONS dicts of qkv_grading/lessonNN.py, read as data: the hidden-test
    # modules themselves are never imported into the student's kernel
    key = {}
    for path in sorted(glob.glob(os.path.join(folder, "lesson*.py"))):
        tables = {}
        try:
            for node in ast.parse(open(path, encoding="utf-8").read()).body:
                if (isinstance(node, ast.Assign)
                        and [getattr(t, "id", None) for t in node.targets] in (["ANSWERS"], ["EXPLANATIONS"])):
                    expression = compile(ast.Expression(node.value), path, "eval")
                    tables[node.targets[0].id] = eval(expression, {"np": np, "__builtins__": _PLAIN_BUILTINS})
        except (OSError, SyntaxError, NameError, TypeError, ValueError):
            continue  # a lesson whose answers cannot be read as plain data is graded at collection only
        for name, (correct, tolerance) in tables.get("ANSWERS", {}).items():
            key[name] = (correct, tolerance, tables.get("EXPLANATIONS", {}).get(name, ""))
    return key if key else f"no ANSWERS found in {folder}"


def answer_key():
    """{question name: (right answer, tolerance, explanation)}, or a reason string why there is none."""
    folder = answer_key_folder()
    if folder is None:
        return "the course's autograde/ folder is not in this installation"
    return _read_answer_key(folder)


# ---------------------------------------------------------------- is this answer right

def answer_tolerance(correct, tolerance=None):
    """How far a numeric self-check answer may be from the right one: the one rule of grading and self-study."""
    return tolerance if tolerance is not None else 1e-6 + 1e-3 * abs(correct)


def is_right(value, correct, tolerance=None):
    """A choice (string) must be the right one; a number (already checked to be one) within the tolerance."""
    if isinstance(correct, str):
        return value == correct
    return abs(float(value) - correct) <= answer_tolerance(correct, tolerance)


def for_your_numbers(answer, correct, params):
    """(the answer as graded, the right answer) for one student's numbers (qkv.your_numbers): a choice's letter
    becomes the canonical option it shows that student, an answer function is evaluated on the parameters."""
    if params is None:
        return answer, correct
    if "order" in params:
        return your_numbers.canonical_letter(params["order"], answer), correct
    return answer, (float(correct(params)) if callable(correct) else correct)


def _numbers_text(params):
    shown = ", ".join(f"{name} = {value}" for name, value in (params or {}).items() if name != "order")
    return f" for your numbers ({shown})" if shown else ""


def expect_answer(answer, correct, name, tolerance=None, params=None):
    """Hidden grading of a self-check answer: a choice (string) or a number within a tolerance, for the
    student's numbers `params` when the question varies (None: the canonical numbers)."""
    graded, correct = for_your_numbers(answer, correct, params)
    if params is None and callable(correct):
        graded, correct = for_your_numbers(answer, correct, your_numbers.current_params(name))
    if isinstance(correct, str):
        if not is_right(graded, correct):
            raise Hint(f"`{name}` = {answer!r} is not the right choice.")
        return
    value = expect_number(answer, f"`{name}`")
    if not is_right(value, correct, tolerance):
        raise Hint(f"`{name}` = {value:.6g} is not right{_numbers_text(params)} (allowed error "
                   f"{answer_tolerance(correct, tolerance):.2g}).")


# ---------------------------------------------------------------- the visible checks

def _verdict(name, value, shown):
    """Record the answer, or in self-study mode say right (print) or wrong (Hint), with the explanation."""
    if not self_study():
        recorded = f"{name}: answer recorded ({shown}); it is graded when the notebook is collected."
        if os.environ.get(VALIDATING_VARIABLE) and isinstance(answer_key(), str):
            # nbgrader's Validate shows only the cells that wrote to stderr, and says "Success! Your notebook passes
            # all the tests." when none did: without this it would say so over wrong answers it cannot judge. Short
            # lines: Validate cuts each line at 87 characters
            print(f"{name}: answer recorded ({shown}).\nIt is graded when the notebook is collected:\n"
                  f"Validate cannot tell whether it is right.", file=sys.stderr)
        else:
            print(recorded)
        return
    key = answer_key()
    if isinstance(key, str) or name not in key:
        reason = key if isinstance(key, str) else f"no right answer for `{name}` is stored"
        print(f"{name}: answer recorded ({shown}). Self-study mode is on, but {reason}, so this answer can only "
              f"be graded when the notebook is collected.")
        return
    correct, tolerance, explanation = key[name]
    params = your_numbers.current_params(name)
    value, correct = for_your_numbers(value, correct, params)
    if not is_right(value, correct, tolerance):
        raise Hint(f"`{name}` = {shown} is not right. {explanation}".rstrip())
    print(f"{name}: right ({shown}). {explanation}".rstrip())


def answered_choice(answer, choices, name):
    """Visible check of a multiple-choice answer: its form always; right or wrong in self-study mode only
    (otherwise its correctness is graded by the hidden tests)."""
    if answer is None or (isinstance(answer, str) and answer.strip() == ""):
        raise Hint(f"`{name}` is not answered yet: set it to one of {', '.join(map(repr, choices))}.")
    if answer not in choices:
        raise Hint(f"`{name}` is {answer!r}; it must be one of {', '.join(map(repr, choices))}.")
    _verdict(name, answer, repr(answer))


def answered_number(answer, name):
    """Visible check of a numeric answer: its form always; right or wrong in self-study mode only."""
    value = expect_number(answer, f"`{name}`")
    _verdict(name, value, f"{value:.6g}")
