"""Issue 23.3: each graded function's check is declared once, in `qkv.checks.lessonNN`, as a `Check`; the visible
checks and the hidden tests both read that declaration, so a hint or a mistake added to one layer is in the other.

Read with ast, so the rule holds for code that is never run by a particular test.
"""
import ast
import dataclasses
import pathlib

import pytest

from qkv.checking.compare import Check
from qkv.lessons import LESSONS

ROOT = pathlib.Path(__file__).resolve().parents[1]
VISIBLE = ROOT / "source_lib" / "qkv" / "checks"
HIDDEN = ROOT / "autograde" / "qkv_grading"
# what a check is: given once in its declaration. Tolerances and confirmations may differ per input.
DECLARED_ONLY = {"name", "diagnoses", "extra_checks", "nonfinite_hint", "outputs", "allowed", "allow_list", "meaning"}
# the functions that check an answer against a declaration: numbers, boolean arrays, lesson 06's window mask
CHECKERS = ("check_against", "check_boolean", "mask_check")
assert DECLARED_ONLY < {field.name for field in dataclasses.fields(Check)}


def _calls(path, *function_names):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called in function_names:
                yield node


def checks_modules_bound(path, number):
    """The names a hidden test binds to its lesson's qkv.checks modules, where its declarations are read:
    `from qkv.checks import lesson07 as visible, lesson07_chunked as chunked` gives {"visible", "chunked"}."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "qkv.checks" for alias in node.names
            if alias.name == f"lesson{number}" or alias.name.startswith(f"lesson{number}_")}


def _problems(path, hidden, declarers=("visible",)):
    problems = []
    for node in _calls(path, "dict"):
        settings = {keyword.arg for keyword in node.keywords} & DECLARED_ONLY
        if settings:
            problems.append(f"line {node.lineno}: dict({', '.join(sorted(settings))}=...) builds a check's settings; "
                            f"declare a Check in qkv.checks")
    for node in _calls(path, *CHECKERS):
        checker = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        if None in keywords:
            problems.append(f"line {node.lineno}: {checker}(..., **settings); pass declared=<the Check>")
        if "declared" not in keywords:
            problems.append(f"line {node.lineno}: {checker} without declared=")
        repeated = set(keywords) & DECLARED_ONLY
        if repeated:
            problems.append(f"line {node.lineno}: {checker} repeats {', '.join(sorted(repeated))} beside its "
                            f"declaration")
        declared = keywords.get("declared")
        if hidden and declared is not None and not (
                isinstance(declared, ast.Attribute) and isinstance(declared.value, ast.Name)
                and declared.value.id in declarers):
            problems.append(f"line {node.lineno}: the hidden test's declaration is not visible.<NAME> "
                            f"(one of the lesson's qkv.checks modules)")
    return problems


@pytest.mark.parametrize("number", [lesson.number for lesson in LESSONS])
def test_each_graded_check_is_declared_once_and_both_layers_read_it(number):
    # the lesson's checks module and its companions split off by job (lesson07_chunked, lesson06_ablation, ...)
    visible = [VISIBLE / f"lesson{number}.py", *sorted(VISIBLE.glob(f"lesson{number}_*.py"))]
    hidden = HIDDEN / f"lesson{number}.py"
    problems = [f"{path.name} (visible) {p}" for path in visible for p in _problems(path, hidden=False)]
    problems += [f"qkv_grading/{hidden.name} (hidden) {p}"
                 for p in _problems(hidden, hidden=True, declarers=checks_modules_bound(hidden, number))]
    assert not problems, "\n".join(problems)


def test_the_reader_finds_a_second_declaration_and_a_splatted_dict(tmp_path):
    source = tmp_path / "lesson98.py"
    source.write_text("def f(s):\n"
                      "    check = dict(name='f', diagnoses=[])\n"
                      "    check_against(s, ref.f, (1,), **check)\n"
                      "    check_against(s, ref.f, (1,), declared=F, name='g')\n"
                      "    check_against(s, ref.f, (2,), declared=visible.F, rtol=1e-3)\n"
                      "    check_against(s, ref.f, (3,), declared=F)\n"
                      "    check_boolean(s, ref.m, (4,), 'm', M_MISTAKES, meaning='j <= i')\n")
    found = _problems(source, hidden=True)
    assert [p.split(":")[0] for p in found] == ["line 2", "line 3", "line 3", "line 4", "line 4", "line 6", "line 7",
                                                "line 7"], found


def test_a_hidden_test_may_read_declarations_from_its_lessons_companion_modules_only(tmp_path):
    source = tmp_path / "lesson98.py"
    source.write_text("from qkv.checks import lesson98 as visible, lesson98_chunked as chunked, lesson97_x as other\n"
                      "def f(s):\n"
                      "    check_against(s, ref.f, (1,), declared=visible.F)\n"
                      "    check_against(s, ref.f, (2,), declared=chunked.G)\n"
                      "    check_against(s, ref.f, (3,), declared=other.H)\n")
    assert checks_modules_bound(source, "98") == {"visible", "chunked"}
    found = _problems(source, hidden=True, declarers=checks_modules_bound(source, "98"))
    assert [p.split(":")[0] for p in found] == ["line 5"], found
