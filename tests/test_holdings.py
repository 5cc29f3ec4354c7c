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
    and lesson 05's grouped-query attention, which is lesson 07's attention_step in one call: withheld in the editions
    of weeks 06 and 07 and in the grader's kernels for lessons 06 and 07. No twin ships because a lesson needs it
    (NEEDED_BY is empty): lesson 06 ablates SmolLM2's own attention, qkv.model.own_attention (issue 41)."""
    from qkv_autograde.kernels import holdings

    expected = {"01-lookup": {"qkv.checks.lesson01._shifted_exp", "qkv.checks.lesson01._sweep"},
                "05-heads": {"qkv.checks.lesson05._mha", "qkv.checks.lesson05._gqa"},
                "06-sinks": {"qkv.heads.grouped_query_attention"},
                "07-cost": {"qkv.checks.lesson05._gqa", "qkv.cost._online_softmax_update",
                            "qkv.heads.grouped_query_attention"}}
    for lesson, names in expected.items():
        row = next(r for r in LESSONS if r.slug == lesson)
        assert names <= set(library.withheld_functions(*week_of(row))), lesson
    for lesson in ("06-sinks", "07-cost"):
        assert "qkv.heads.grouped_query_attention" in kernel_view.withheld_while_graded(lesson), lesson
    assert holdings.NEEDED_BY == {}


def test_lesson_06_needs_nothing_that_answers_attention_step():
    """Lesson 06's notebook and checks run SmolLM2 with heads ablated through the model's own attention and check
    ablate_heads around a stand-in: neither reaches lesson 05's grouped-query attention (the editions of weeks 06 and
    07 would refuse to build, qkv_edition.needs), and the model's own attention computes only inside forward."""
    import numpy as np

    from qkv import sinks
    from qkv.checks import lesson06
    from qkv.lessons import course_paths
    from qkv.model import own_attention
    from qkv.own_attention import NotTheModelsAttention
    from qkv_edition import needs

    index = needs.Library(library.LIBRARY)
    notebook = course_paths().notebooks / "06-sinks" / "06-sinks.ipynb"
    uses = needs.notebook_uses(notebook, index)
    assert "qkv.own_attention.own_attention" in uses  # as qkv.model.own_attention
    assert "qkv.heads.grouped_query_attention" not in index.reachable(uses)
    reached = index.reachable({"qkv.checks.lesson06.ablate_heads"})
    assert "qkv.sinks.stand_in_attention" in reached and "qkv.heads.grouped_query_attention" not in reached
    q, k, v = np.ones((4, 3, 2)), np.ones((2, 3, 2)), np.ones((2, 3, 2))
    with pytest.raises(NotTheModelsAttention, match="only inside model.forward"):
        own_attention(q, k, v, None)
    assert len(NotTheModelsAttention()._render_traceback_()) == 3
    out = sinks.stand_in_attention(q, k, v)
    assert out.shape == (4, 3, 2) and len({float(head[0, 0]) for head in out}) == 4 and np.all(out != 0)

    def ablate_heads(attention, heads):   # a student's, checked around the stand-in
        def ablated(q, k, v, mask, layer):
            out = np.array(attention(q, k, v, mask), copy=True)
            out[[head for at, head in heads if at == layer]] = 0.0
            return out
        return ablated

    lesson06.ablate_heads(ablate_heads)
