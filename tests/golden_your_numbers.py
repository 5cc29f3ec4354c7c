"""The golden table of the self-check variants (issue 43, design A5): 50 keys x every self-check question, its
parameters and its right answer, under a term salt. tests/data/your_numbers_golden.jsonl is this table as committed;
tests/test_your_numbers_golden.py checks that today's derivation writes it byte for byte.

    python tests/golden_your_numbers.py > tests/data/your_numbers_golden.jsonl   # after a deliberate change only

Run under another Python or numpy to check that a class's numbers and expected answers do not depend on them
(PYTHONPATH=source_lib:autograde, with the library's dependencies installed). One line per key and lesson; every
number as Python's repr of a float, the shortest text that reads back to the same bits.
"""
import importlib
import json
import sys

from qkv.lessons import lesson as lesson_row
from qkv.your_numbers import POOLS, question_params, shown_letter, variant_code

SALT = "qkv-2026-autumn"
KEYS = [f"student-{i:02d}" for i in range(1, 51)]


def answer_table(lesson):
    return importlib.import_module(lesson_row(lesson).hidden_tests).ANSWERS


def right_answer(correct, params):
    """What a student with these numbers answers: the letter they see for the right option, or the number."""
    if params is not None and "order" in params:
        return shown_letter(params["order"], correct)
    return repr(float(correct(params) if callable(correct) else correct))


def rows(keys=KEYS, salt=SALT):
    for key in keys:
        for lesson in POOLS:
            answers = answer_table(lesson)
            params = {name: question_params(lesson, name, key, salt) if name in POOLS[lesson] else None
                      for name in answers}
            yield {"key": key, "lesson": lesson, "code": variant_code(lesson, key, salt), "params": params,
                   "answers": {name: right_answer(correct, params[name]) for name, (correct, _) in answers.items()}}


def table():
    return "".join(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n" for row in rows())


if __name__ == "__main__":
    sys.stdout.write(table())
