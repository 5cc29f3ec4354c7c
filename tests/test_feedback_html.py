"""The feedback pages' exporter: nbconvert's HTMLExporter page, without its BeautifulSoup re-serialization."""
import base64
import io
import sys

import nbformat
import pytest
from bs4 import BeautifulSoup

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.reports.feedback_html import (NO_ALT_TEXT, FeedbackExporter,  # noqa: E402
                                                 ReserializedFeedbackExporter, describe_images)


def reserialized(html):
    return str(BeautifulSoup(html, features="html.parser"))


@pytest.mark.parametrize("tag, described", [
    ('<img src="a.png">', f'<img src="a.png" alt="{NO_ALT_TEXT}">'),
    ('<IMG SRC="a.png"/>', f'<IMG SRC="a.png" alt="{NO_ALT_TEXT}"/>'),
    ('<img\nsrc="a.png"\n>', f'<img\nsrc="a.png" alt="{NO_ALT_TEXT}">'),
    ('<img src="x.png" alt="">', '<img src="x.png" alt="">'),           # an empty alt is a choice: kept
    ('<img alt src="x.png">', '<img alt src="x.png">'),
    ('<img src="alt=1.png" title=\'a > alt b\'>',                         # "alt" and ">" inside values
     f'<img src="alt=1.png" title=\'a > alt b\' alt="{NO_ALT_TEXT}">'),
    ('<p>an <image> is not an img</p>', '<p>an <image> is not an img</p>'),
])
def test_images_without_alt_get_one(tag, described):
    assert describe_images(tag) == described


def test_scripts_and_styles_are_left_alone():
    page = '<script>var s = "<img src=x>";</script><img src="y"><style>/* <img src=z> */</style>'
    assert describe_images(page) == (f'<script>var s = "<img src=x>";</script><img src="y" alt="{NO_ALT_TEXT}">'
                                     '<style>/* <img src=z> */</style>')


def a_graded_notebook():
    """Cells and outputs of every kind a feedback page shows: code, markdown with an image, a figure, HTML a
    student printed (with and without alt, and inside a script), an error, widgets without state."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1))
    figure.subplots().plot([0, 1], [1, 0])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    png = base64.b64encode(buffer.getvalue()).decode()
    cells = [
        nbformat.v4.new_markdown_cell("# Lesson\nSome *maths*: $QK^T/\\sqrt{d_k}$ and ![a picture](data:image/png;"
                                      f"base64,{png}) & <b>bold</b> <img src='data:image/png;base64,{png}'>"),
        nbformat.v4.new_code_cell("def softmax(x):\n    return x  # <img> in a comment & ampersands",
                                  outputs=[nbformat.v4.new_output("stream", name="stdout", text="a < b & c > d\n")]),
        nbformat.v4.new_code_cell("plt.plot()", outputs=[nbformat.v4.new_output(
            "display_data", data={"image/png": png, "text/plain": "<Figure>"})]),
        nbformat.v4.new_code_cell("HTML(...)", outputs=[nbformat.v4.new_output("display_data", data={
            "text/html": f'<div><img src="data:image/png;base64,{png}"><img alt="kept" src="x.png">'
                         '<script>document.write("<img src=z>")</script><br><p>unclosed</div>',
            "text/plain": "<HTML>"})]),
        nbformat.v4.new_code_cell("1/0", outputs=[nbformat.v4.new_output(
            "error", ename="ZeroDivisionError", evalue="division by zero",
            traceback=["\x1b[0;31mZeroDivision\x1b[0m"])]),
        nbformat.v4.new_code_cell("widgets.IntSlider()", outputs=[nbformat.v4.new_output(
            "execute_result", execution_count=5, data={
                "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                             "model_id": "abc"},
                "text/plain": "IntSlider(value=0)"})]),
    ]
    return nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}})


@pytest.mark.parametrize("template", ["classic", "basic"])
def test_the_page_is_htmlexporters_page_before_its_reserialization(template):
    nb = a_graded_notebook()
    ours, _ = FeedbackExporter(template_name=template).from_notebook_node(nb)
    # HTMLExporter's page of the same student content, made inert and with its maths as MathML as the course's
    # exporter writes them, BeautifulSoup pass included
    stock, _ = ReserializedFeedbackExporter(template_name=template).from_notebook_node(nb)
    assert ours != stock, "nothing to compare: the stock pass changed nothing on this page"
    assert reserialized(ours) == stock and "<math" in stock
    assert ours.count(f'alt="{NO_ALT_TEXT}"') >= 2


def test_a_jupyterlab_template_gets_the_stock_page():
    nb = a_graded_notebook()
    ours, _ = FeedbackExporter(template_name="lab").from_notebook_node(nb)
    stock, _ = ReserializedFeedbackExporter(template_name="lab").from_notebook_node(nb)
    assert 'tabindex="0"' in stock and ours == stock


def page_of(*cells, template="basic"):
    nb = nbformat.v4.new_notebook(cells=list(cells), metadata={"language_info": {"name": "python"}})
    return FeedbackExporter(template_name=template).from_notebook_node(nb)[0]


def test_maths_are_mathml_written_into_the_page_not_tex_for_a_script():
    """Issue 35: a page must render its maths on a student's machine, with no MathJax and no network."""
    page = page_of(nbformat.v4.new_markdown_cell(
        "Inline $QK^T/\\sqrt{d_k}$, display $$\\operatorname{softmax}(x)_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}$$ and "
        "\\begin{align} a &= b \\end{align} with `$not maths$` in code"))
    assert page.count("<math") == 3 and 'display="block"' in page and "<msqrt>" in page and "<mfrac>" in page
    assert "$QK^T" not in page and "\\sqrt" not in page and "$not maths$" in page
    assert "w3.org" not in page  # MathML in HTML needs no namespace URL


def test_a_formula_output_is_mathml_too():
    page = page_of(nbformat.v4.new_code_cell("Math(...)", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/latex": "$$\\alpha < \\beta$$", "text/plain": "<IPython.core.display.Math>"})]))
    assert "<math" in page and "<mi>&#x003B1;</mi>" in page and "\\alpha" not in page


def test_hostile_tex_stays_inert_and_unconvertible_tex_is_shown_escaped():
    """latex2mathml copies \\text{} and \\href's target into its MathML as they are: the allowlist takes them out."""
    page = page_of(nbformat.v4.new_markdown_cell(
        "$\\text{<script>window.__pwned=1</script><img src=x onerror=alert(1)>}$ "
        "$\\href{javascript:alert(1)}{x}$ $\\mathcolor{red}{y}$ $" + "{" * 2100 + "z" + "}" * 2100 + "$"),
        template="classic")
    body = page.split("<body", 1)[1]
    assert "<script>window" not in body and "onerror" not in body and "javascript:" not in body
    assert "<math" in body and "mathcolor" not in body
    assert '<code class="tex">{{{' in body  # too long to convert: the TeX itself, escaped


def test_a_markdown_cell_is_rendered_once_for_every_students_page(monkeypatch):
    """Every page of a class shows the lesson's markdown cells: each is rendered for the first page and remembered
    for the others, although each student's notebook is in a folder of its own (issue 45). Same page, byte for
    byte, as rendering it again."""
    import qkv_autograde.reports.feedback_html as feedback_html

    monkeypatch.setattr(FeedbackExporter, "remembered", feedback_html.Remembered())
    renders = []
    original = feedback_html.MarkdownWithMath.render
    monkeypatch.setattr(feedback_html.MarkdownWithMath, "render",
                        lambda self, source: renders.append(source) or original(self, source))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("The **lesson's** text, $x^2$.")])
    pages = [FeedbackExporter(template_name="basic").from_notebook_node(
        nb, resources={"metadata": {"path": f"autograded/{student}/01-lookup"}})[0] for student in ("ada", "bo")]
    assert renders == ["The **lesson's** text, $x^2$."]
    assert pages[0] == pages[1] and "<strong>lesson" in pages[0]
    monkeypatch.setattr(FeedbackExporter, "remembered", feedback_html.Remembered())
    assert FeedbackExporter(template_name="basic").from_notebook_node(
        nb, resources={"metadata": {"path": "autograded/cy/01-lookup"}})[0] == pages[0]
