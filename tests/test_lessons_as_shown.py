"""What a student reads is what the notebook measured (issue 32, "Texts and library"): every figure a lesson draws
names both of its axes, a figure chosen to show that heads differ shows it, and a sentence about a measurement
agrees with the numbers the notebook prints.

Each solution notebook below runs once for the module, without its graded test cells (they draw nothing), in a
kernel that records every figure matplotlib draws, pyplot's and the widgets' alike (a Figure.draw wrapper), with
the cell it came from; a last cell hands the test the arrays a sentence is about. Lesson 05 reads SmolLM2's
results from qkv.model_cache, as every run of it does.
"""
import html
import json
import os
import re

import nbformat
import numpy as np
import pytest

from lessons import SOLUTIONS

# 06 (its labels checked by hand with this recorder: 45 s more) and 07 (it times forward passes) are left out
LESSONS = ("01-lookup", "02-by-hand", "03-scaling", "04-masking", "05-heads")

RECORDER = """
import json as _json
import numpy as _np
import matplotlib.figure as _figure

_qkv_drawn, _qkv_cell = {}, [None]
_qkv_draw = _figure.Figure.draw


def _qkv_label(ax, axis):
    # panels that share an axis (sharey=True) name it once, on one of them
    shared = ax.get_shared_x_axes() if axis == "x" else ax.get_shared_y_axes()
    return next((label for label in (getattr(a, f"get_{axis}label")() for a in [ax, *shared.get_siblings(ax)])
                 if label.strip()), "")


def _qkv_series(ax):
    # [kind, label, what tells it apart besides colour] for each series a legend names
    lines = [["line", line.get_label(), f"{line.get_marker()} {line.get_linestyle()}"] for line in ax.lines
             if not line.get_label().startswith("_")]
    bars = [["bars", c.get_label(), c.patches[0].get_hatch() or ""] for c in ax.containers
            if hasattr(c, "patches") and c.patches and not str(c.get_label()).startswith("_")]
    return lines + bars


def _qkv_axes(ax):
    return {"xlabel": _qkv_label(ax, "x"), "ylabel": _qkv_label(ax, "y"), "title": ax.get_title(),
            "series": _qkv_series(ax),
            "colour_bar": hasattr(ax, "_colorbar"), "shown": bool(ax.axison and ax.get_visible()),
            "images": [_np.asarray(image.get_array(), dtype=float).tolist() for image in ax.images]}


def _qkv_recording_draw(self, renderer):
    result = _qkv_draw(self, renderer)
    # one record per figure and cell: the inline backend and a widget's savefig may draw a figure twice
    _qkv_drawn[(_qkv_cell[0], id(self))] = {"cell": _qkv_cell[0], "axes": [_qkv_axes(ax) for ax in self.axes]}
    return result


_figure.Figure.draw = _qkv_recording_draw
"""

# what each lesson's last cell hands over, beside the figures: names the notebook defines
EXTRACTS = {
    "03-scaling": "{'dims': [int(d) for d in dims], 'median_norm': "
                  "{f'{part}/{label}': [float(x) for x in v] for (part, label), v in median_norm.items()}}",
    "05-heads": "{'sentence': sentence, 'rope_out': out.tolist(), 'rope_out_shuffled': out_shuffled.tolist(), "
                "'rope_shuffle': [int(i) for i in shuffle]}",
}


def is_graded_test(cell):
    meta = cell.metadata.get("nbgrader", {})
    return meta.get("grade", False) and not meta.get("solution", False)


def pictures_shown(notebook):
    """[(cell id, alt text or None)] for every picture the executed notebook's outputs show (issue 44)."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", ()):
            data = output.get("data", {})
            if "image/png" in data or "image/jpeg" in data:
                found.append((cell.get("id"), None))      # JupyterLab draws these with no alt
            for tag in re.findall(r"<img\b[^>]*>", data.get("text/html", "")):
                alt = re.search(r' alt="([^"]*)"', tag)
                found.append((cell.get("id"), html.unescape(alt.group(1)) if alt else None))
    return found


def run_recorded(lesson, folder):
    """The lesson's solution notebook run with the recorder; returns {"figures": [...], "extract": {...},
    "pictures": [(cell id, alt text)]}."""
    from nbclient import NotebookClient

    source = nbformat.read(SOLUTIONS / lesson / f"{lesson}.ipynb", as_version=4)
    record = folder / f"{lesson}.json"
    cells = [nbformat.v4.new_code_cell(RECORDER)]
    for cell in source.cells:
        if cell.cell_type != "code" or is_graded_test(cell):
            continue
        cells += [nbformat.v4.new_code_cell(f"_qkv_cell[0] = {cell.get('id')!r}"), cell]
    cells.append(nbformat.v4.new_code_cell(
        f"_qkv_cell[0] = None\n_json.dump({{'figures': list(_qkv_drawn.values()), "
        f"'extract': {EXTRACTS.get(lesson, '{}')}}}, open({str(record)!r}, 'w'))"))
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=source.metadata)
    saved = {name: os.environ.pop(name, None) for name in ("QKV_NO_FRONT_END", "QKV_AUTOGRADE")}
    try:   # the kernel inherits this environment: a front end's, so that the widgets draw
        NotebookClient(notebook, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(SOLUTIONS / lesson)}}).execute()
    finally:
        os.environ.update({name: value for name, value in saved.items() if value is not None})
    tables = sum('<table class="qkv-table">' in output.get("data", {}).get("text/html", "")
                 for cell in notebook.cells for output in cell.get("outputs", ()))
    return dict(json.loads(record.read_text()), pictures=pictures_shown(notebook), tables=tables)


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shown")
    return {lesson: run_recorded(lesson, folder) for lesson in LESSONS}


def figures_of(shown, lesson, cell_id):
    return [figure for figure in shown[lesson]["figures"] if figure["cell"] == cell_id]


def plotted_axes(figure):
    # a colour bar is labelled along its one axis; an axes switched off shows no axis to label
    return [ax for ax in figure["axes"] if ax["shown"] and not ax["colour_bar"]]


# ---------------------------------------------------------------- figures

@pytest.mark.parametrize("lesson", LESSONS)
def test_every_axes_of_every_figure_a_lesson_draws_has_both_axis_labels(shown, lesson):
    figures = shown[lesson]["figures"]
    assert figures, f"{lesson} drew no figure: the recorder saw nothing"
    unlabelled = [(figure["cell"], ax["title"] or "(untitled)", axis)
                  for figure in figures for ax in plotted_axes(figure)
                  for axis in ("xlabel", "ylabel") if not ax[axis].strip()]
    assert not unlabelled, f"{lesson}: axes without a label (cell, panel, axis): {unlabelled}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_figure_a_lesson_shows_has_alt_text_with_its_numbers(shown, lesson):
    # issue 44: a screen reader reads the alt text; "the numbers that matter" means at least one number in it
    pictures = shown[lesson]["pictures"]
    assert pictures, f"{lesson} showed no picture"
    undescribed = [(cell, alt) for cell, alt in pictures if not alt or len(alt) < 40 or not re.search(r"\d", alt)]
    assert not undescribed, f"{lesson}: pictures without a description (cell, alt): {undescribed}"


@pytest.mark.parametrize("lesson, count", [("01-lookup", 1), ("02-by-hand", 1), ("03-scaling", 3), ("04-masking", 1),
                                           ("05-heads", 1)])
def test_the_tables_a_lesson_prints_are_html_tables(shown, lesson, count):
    # issue 44: a screen reader moves through an HTML table by rows and columns, not through aligned text
    assert shown[lesson]["tables"] == count, f"{lesson} shows {shown[lesson]['tables']} qkv.tables tables"


@pytest.mark.parametrize("lesson", LESSONS)
def test_series_in_one_panel_differ_by_more_than_colour(shown, lesson):
    # issue 44: lines by marker or line style, bars by hatch, so that a reader who cannot tell the colours apart can
    # tell the series apart (the legend shows the same marker, style or hatch)
    alike = []
    for figure in shown[lesson]["figures"]:
        for ax in plotted_axes(figure):
            for kind in ("line", "bars"):
                looks = [look for k, _, look in ax["series"] if k == kind]
                if len(looks) != len(set(looks)):
                    alike.append((figure["cell"], ax["title"], [s for s in ax["series"] if s[0] == kind]))
    assert not alike, f"{lesson}: series told apart by colour alone (cell, panel, series): {alike}"


def total_variation_by_row(a, b):
    # [n, n] weights of two heads -> [n - 1], half the L1 distance of each row, first query and first key left out:
    # the first column is the attention sink both kinds of head share (lesson 06), not what sets them apart
    a, b = np.asarray(a)[1:, 1:], np.asarray(b)[1:, 1:]
    return 0.5 * np.abs(a - b).sum(axis=-1)


def test_lesson05_heads_shown_side_by_side_differ_in_most_rows_of_what_is_shown(shown):
    from qkv import model

    panels = [np.array(ax["images"][0]) for figure in figures_of(shown, "05-heads", "cell-36")
              for ax in plotted_axes(figure) if ax["images"]]
    assert len(panels) == 2, f"lesson 05's comparison should show two heads, it shows {len(panels)} panels"
    smol = model.load()
    weights = np.array(model.forward(smol, model.encode(smol, shown["05-heads"]["extract"]["sentence"]),
                                     return_weights=True).weights)              # [n_layers, H, T, T]
    found = [{(layer, head) for layer in range(weights.shape[0]) for head in range(weights.shape[1])
              if panels[i].shape == weights.shape[2:] and np.allclose(panels[i], weights[layer, head], atol=1e-6)}
             for i in range(2)]
    assert all(found) and {layer for layer, _ in found[0]} & {layer for layer, _ in found[1]}, \
        "the two panels should be two heads of one layer of SmolLM2 on the notebook's sentence"
    distance = total_variation_by_row(*panels)
    assert np.median(distance) >= 0.4 and np.mean(distance > 0.25) >= 0.75, (
        f"with the first column left out, the two heads shown differ little in most rows (median row distance "
        f"{np.median(distance):.3f}, rows above 0.25: {np.mean(distance > 0.25):.0%}): pick heads whose difference "
        f"the picture shows")


# ---------------------------------------------------------------- sentences about a measurement

VANISHING = re.compile(r"vanish|little gradient|almost no gradient|hardly any gradient|no gradient|stops? learning",
                       re.IGNORECASE)


def markdown_before(lesson, grade_id):
    cells = nbformat.read(SOLUTIONS / lesson / f"{lesson}.ipynb", as_version=4).cells
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    return cells[ids.index(grade_id) - 1].source


def test_lesson03_self_check_on_d_k_128_says_what_its_gradient_table_measures(shown):
    from qkv_grading import lesson03

    measured = shown["03-scaling"]["extract"]
    at = measured["dims"].index(128)
    norm = measured["median_norm"]
    query_ratio = norm["query/raw"][at] / norm["query/scaled"][at]
    scores_ratio = norm["scores/raw"][at] / norm["scores/scaled"][at]
    question, explanation = markdown_before("03-scaling", "answer_without_scaling"), \
        lesson03.EXPLANATIONS["without_scaling"]
    assert "128" in question and lesson03.ANSWERS["without_scaling"][0] == "c"
    right_option = question.split("(c)", 1)[1].split("(d)", 1)[0]
    if query_ratio > 0.5:   # the query's gradient did not vanish at d_k = 128: no text may say it did
        for text in (right_option, explanation):
            assert not VANISHING.search(text), (
                f"at d_k = 128 the notebook measured ||dw/dq|| raw / scaled = {query_ratio:.2f}, yet the self-check "
                f"says the gradient vanishes: {text!r}")
    if scores_ratio < 0.5:  # what did shrink is the gradient with respect to the scores: say so
        for text in (right_option, explanation):
            assert "scores" in text, f"say which gradient the table shows smaller (dw/dscores): {text!r}"


COMPARABLE = re.compile(r"comparable|as large as|the same size|same order", re.IGNORECASE)


def test_lesson05_rope_sentence_sizes_the_change_as_measured(shown):
    measured = shown["05-heads"]["extract"]
    out, out_shuffled = np.array(measured["rope_out"]), np.array(measured["rope_out_shuffled"])
    change = np.abs(out_shuffled - out[measured["rope_shuffle"]]).max() / np.abs(out).max()
    outro = nbformat.read(SOLUTIONS / "05-heads" / "05-heads.ipynb", as_version=4).cells
    text = next(c.source for c in outro if c.get("id") == "cell-rope-outro")
    if change < 0.5:
        assert not COMPARABLE.search(text), (
            f"RoPE's largest change is {change:.2f} of the largest output entry: 'comparable' says more: {text!r}")
