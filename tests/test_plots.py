"""Figures a student reads (issue 12, item 9): colour bars as tall as their heatmap, long token lists thinned to
readable labels, a suptitle that does not sit on the panel titles."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from qkv import plots  # noqa: E402


def test_colour_bar_is_as_tall_as_a_wide_heatmap():
    figure, ax = plt.subplots(figsize=(14, 3.6))
    weights = np.random.default_rng(0).dirichlet(np.ones(50), size=9)     # 9 heads x 50 tokens
    plots.attention_heatmap(weights, [f"head {h}" for h in range(9)], [f"t{i}" for i in range(50)], ax=ax,
                            annotate=False)
    figure.canvas.draw()
    bar = next(a for a in figure.axes if a is not ax)
    image_box, bar_box = ax.get_window_extent(), bar.get_window_extent()
    assert abs(bar_box.height - image_box.height) < 2, (bar_box.height, image_box.height)
    plt.close(figure)


def test_long_token_lists_are_thinned_to_at_most_max_labels():
    labels = [f"t{i}" for i in range(50)]
    figure, ax = plt.subplots()
    plots.attention_heatmap(np.eye(50), labels, labels, ax=ax, max_labels=25)
    shown = [t.get_text() for t in ax.get_xticklabels()]
    assert 0 < len(shown) <= 25 and shown[0] == "t0" and shown[1] == "t2"
    plt.close(figure)


def test_suptitle_stays_above_the_panel_titles():
    weights = np.random.default_rng(1).dirichlet(np.ones(40), size=(2, 40))
    labels = [f"t{i}" for i in range(40)]
    axes = plots.head_heatmaps(weights, labels, labels, ncols=2, panel_size=6, titles=["a", "b"],
                               suptitle="two heads")
    figure = axes.flat[0].figure
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    suptitle_bottom = figure._suptitle.get_window_extent(renderer).y0
    assert all(ax.title.get_window_extent(renderer).y1 <= suptitle_bottom for ax in axes.flat)
    assert all(len(ax.get_xticklabels()) <= 25 for ax in axes.flat)
    plt.close(figure)


def test_every_figure_function_names_both_axes():
    # issue 32: a bar chart of weights had no x label (lessons 01-03 and 05 draw it); the lessons' own figures
    # are held to the same rule in test_lessons_as_shown
    drawn = [plots.weights_bar([0.2, 0.8], ["a", "b"]), plots.attention_heatmap(np.eye(2)),
             plots.mask_grid(np.eye(2, dtype=bool)), *plots.head_heatmaps(np.ones((2, 2, 2)) / 2).flat]
    for ax in (ax for ax in drawn if ax.axison):   # head_heatmaps switches off the cells of its grid it leaves empty
        assert ax.get_xlabel() and ax.get_ylabel(), (ax.get_title(), ax.get_xlabel(), ax.get_ylabel())
    plt.close("all")


def test_the_marked_key_is_told_by_more_than_colour_and_the_text_alternative_holds_every_weight():
    # issue 46: lesson 05's content-lookup head; the marked bar is hatched and every bar carries its weight as text
    ax = plots.marked_weights_bar([0.1, 0.7, 0.2], ["The", " animal", " it"], 1)
    assert ax.get_xlabel() and ax.get_ylabel() and "' animal'" in ax.get_xlabel()
    assert [bool(patch.get_hatch()) for patch in sorted(ax.patches, key=lambda p: p.get_x())] == [False, True, False]
    assert {text.get_text() for text in ax.texts} == {"0.10", "0.70", "0.20"}
    plt.close("all")
    text = plots.weights_description([0.1, 0.7, 0.2], ["The", " animal", " it"], 1, " it")
    assert "'The' 0.10, ' animal' 0.70, ' it' 0.20" in text and "Marked key ' animal': 0.70" in text
