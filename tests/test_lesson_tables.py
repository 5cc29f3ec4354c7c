"""No lesson prints a table as text (issue 44): a screen reader reads printed columns as one long line, so every
table a lesson or a check shows is a qkv.tables table (<th scope> headers, a caption), whatever the terminal gets.

Read from the sources, not from a run: each print() in a solution notebook's code cells and in the checks the
notebooks call (qkv.checks) is parsed, and these are the marks of a table printed as text:
- a padded replacement field, `{x:>8}`, `{name:<22}`, `{loss:5.2f}`: a width only lines up columns;
- a padded string, str.rjust / ljust / center;
- a header line: a literal with two or more gaps of two spaces or more between words;
- a row per line: a print inside a loop with two formatted numbers, or one and two more fields;
- a grid of lines: np.array2string(...) printed on its own, or "\\n".join(...) of rows;
- the mask grid printed as text (masking.mask_grid_text; masking.mask_table shows it as a table).
"""
import ast
import json
import re
from pathlib import Path

import pytest

from lessons import SOLUTIONS

CHECKS = Path(__file__).resolve().parents[1] / "source_lib" / "qkv" / "checks"
WIDTH = re.compile(r"^(.?[<>^=])?[-+ ]?z?#?0?\d")        # a format spec that starts with a width
HEADER_GAPS = re.compile(r"\S {2,}(?=\S)")
GRID_CALLS = {"array2string", "mask_grid_text", "rjust", "ljust", "center"}


def spec_text(field):
    # the literal part of a replacement field's format spec ("" when it has none)
    spec = field.format_spec
    return "".join(str(v.value) for v in spec.values if isinstance(v, ast.Constant)) if spec else ""


def marks_of_a_printed_table(call, in_loop):
    """What in one print(...) call says it prints a table as text: a list of short reasons."""
    marks = []
    fields = [node for arg in call.args for node in ast.walk(arg) if isinstance(node, ast.FormattedValue)]
    padded = [spec_text(f) for f in fields if WIDTH.match(spec_text(f))]
    if padded:
        marks.append(f"padded fields {padded}")
    for node in (n for arg in call.args for n in ast.walk(arg)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(HEADER_GAPS.findall(node.value)) >= 2:
            marks.append(f"a header line {node.value!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in GRID_CALLS and (node in call.args or name not in ("array2string", "mask_grid_text")):
                marks.append(f"{name}(...)")   # np.array2string of a vector inside a sentence is no table
            if name == "join" and isinstance(node.func.value, ast.Constant) and node.func.value.value == "\n":
                marks.append('"\\n".join(...) of rows')
    formatted = sum(bool(spec_text(f)) for f in fields)
    if in_loop and (formatted >= 2 or (formatted and len(fields) >= 3)):
        marks.append("a row of formatted numbers per loop turn")
    return marks


def printed_tables(source):
    """[(line, reasons)] for each print() in `source` (Python; IPython's %/! lines left out) that prints a table."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    found = []

    def visit(node, in_loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            marks = marks_of_a_printed_table(node, in_loop)
            if marks:
                found.append((node.lineno, marks))
        for child in ast.iter_child_nodes(node):
            visit(child, in_loop or isinstance(node, (ast.For, ast.While, ast.comprehension)))

    visit(ast.parse(code), False)
    return found


def lesson_code_cells():
    for path in sorted(SOLUTIONS.glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                yield path.stem, cell.get("id"), "".join(cell["source"])


def test_the_marks_catch_the_tables_lessons_printed_and_pass_a_sentence():
    assert printed_tables('print(f"{name:>22} {value:>11.1f}")')
    assert printed_tables("for T in (1, 2):\n    print(f'T = {T}: {a:.1f} ms, {b:.1f} MiB')")
    assert printed_tables('print("mask    perplexity    vs full")')
    assert printed_tables('print(np.array2string(J, precision=3))')
    assert not printed_tables('print(f"softmax = {np.array2string(weights, precision=6)}")')
    assert printed_tables('print("\\n".join(" ".join(row) for row in grid))')
    assert printed_tables("print(masking.mask_grid_text(mask, words))")
    assert printed_tables('for j, (a, v) in enumerate(rows):\n    print(f"{a:.4f} * v_{j} = {a * v}")')
    assert not printed_tables('for w in words:\n    print(f"{w} is {len(w)} letters long, it means the {meaning[w]}")')
    assert not printed_tables('print(f"peak: layer {peak} with {share:.0%} of the weight ({ratio:.0f} times)")')
    assert not printed_tables('print("NaN weights with a plain softmax of -inf:", n)')


@pytest.mark.parametrize("lesson", sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir()))
def test_no_lesson_prints_a_table_as_text(lesson):
    found = [(cell, line, marks) for stem, cell, source in lesson_code_cells() if stem == lesson
             for line, marks in printed_tables(source)]
    assert not found, (f"{lesson} prints tables as text (cell, line, why); show them with qkv.tables.table: "
                       f"{found}")


def test_no_check_prints_a_table_as_text():
    found = [(path.name, line, marks) for path in sorted(CHECKS.glob("*.py"))
             for line, marks in printed_tables(path.read_text())]
    assert not found, f"checks print tables as text (file, line, why); show them with qkv.tables: {found}"
