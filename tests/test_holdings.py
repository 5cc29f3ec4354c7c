"""What a student may hold in week N is declared once (issue 41, item 1): qkv_autograde.kernels.holdings, read by the
student edition's builder and by the grader's kernel view, so the grader's kernel is never more generous than the
edition of the same week."""
import ast

import pytest

from qkv.lessons import LESSONS
from qkv_autograde.kernels import kernel_view
from qkv_edition import library


def week_of(row):
    released = [r.slug for r in LESSONS if r.number <= row.number]
    return released, released[:-1]


@pytest.mark.parametrize("lesson", [row.slug for row in LESSONS])
def test_the_kernel_view_withholds_at_least_what_the_edition_of_its_week_withholds(lesson):
    """Outside qkv.checks, which the view empties whole: the graded references, their twins in any module and the
    private functions only they use (qkv.cost._online_softmax_update was real in lesson 07's grading kernel and a
    stub in week 07's edition: a loop around it is chunked_attention)."""
    row = next(r for r in LESSONS if r.slug == lesson)
    edition = {dotted for dotted in library.withheld_functions(*week_of(row)) if not dotted.startswith("qkv.checks.")}
    missing = sorted(edition - set(kernel_view.withheld_while_graded(lesson)))
    assert not missing, f"the grader's kernel for {lesson} holds what the edition of its week withholds: {missing}"


def test_the_view_of_lesson_07_stubs_the_online_softmax_engine_and_lesson_05s_one_call_answer(tmp_path):
    kernel_view.build("07-cost", str(tmp_path / "qkv"))
    for module, function in (("cost", "_online_softmax_update"), ("cost", "_online_softmax_state"),
                             ("heads", "grouped_query_attention")):
        tree = ast.parse((tmp_path / "qkv" / f"{module}.py").read_text())
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        assert "WithheldDuringGrading" in ast.unparse(node) and len(node.body) == 2, (module, function)


def test_the_twins_the_issue_names_are_declared_for_their_lessons():
    """Lesson 01's max-shifted exponential and temperature sweep, lesson 05's multi-head attention of its catalogue,
    and lesson 05's grouped-query attention, which is lesson 07's attention_step in one call: withheld in the grader's
    kernel for lesson 07; the edition of week 07 ships it only because lesson 06 runs SmolLM2 through it (NEEDED_BY)."""
    from qkv_autograde.kernels import holdings

    expected = {"01-lookup": {"qkv.checks.lesson01._shifted_exp", "qkv.checks.lesson01._sweep"},
                "05-heads": {"qkv.checks.lesson05._mha", "qkv.checks.lesson05._gqa"},
                "07-cost": {"qkv.checks.lesson05._gqa", "qkv.cost._online_softmax_update"}}
    for lesson, names in expected.items():
        row = next(r for r in LESSONS if r.slug == lesson)
        assert names <= set(library.withheld_functions(*week_of(row))), lesson
    assert "qkv.heads.grouped_query_attention" in kernel_view.withheld_while_graded("07-cost")
    assert "qkv.heads.grouped_query_attention" not in kernel_view.withheld_while_graded("06-sinks")
    week_07 = library.withheld_functions(*week_of(LESSONS[-1]))
    assert "qkv.heads.grouped_query_attention" not in week_07
    assert set(holdings.NEEDED_BY) == {"qkv.heads.grouped_query_attention"}
    # without lesson 06 running, week 07 withholds it too
    assert "qkv.heads.grouped_query_attention" in holdings.withheld_functions(*week_of(LESSONS[-1]), running=["07"])
