"""Interactive explorers (ipywidgets). Each takes the function to explore, usually the student's own.

Each explorer redraws a matplotlib Figure into an Image widget as a PNG. The usual recipe, plt.show()
inside interactive_output's Output widget, left nbgrader waiting forever at lesson 05's explorer cell
(seen twice here on a loaded machine; nbclient issue 312 describes such hangs), and an image shows
the same picture in every front end.

Accessible (issue 44): the picture is an <img> in an HTML widget, with the figure's description as its alt text
(qkv.figure_text), redrawn with it; every control is one a screen reader can name. ipywidgets' sliders cannot be:
their handle (role="slider") is not tied to the description's <label>, so the explorers use number fields and
drop-downs, whose <label for=...> ipywidgets writes.

A kernel with no front end (the grader's, which sets QKV_NO_FRONT_END) builds the widgets but draws no picture:
no one can see it, and a graded notebook does not keep a widget's state, so feedback pages never show it. That
was a fifth of a lesson 01 kernel's CPU time during grading.
"""
import os

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from qkv import NO_FRONT_END, colours, plots
from qkv.figure_display import figure_html

LABELLED = {"style": {"description_width": "initial"}}


def number_field(description, value, low, high, step):
    """A labelled number field (arrow keys step it), where a slider's handle would have no accessible name."""
    return widgets.BoundedFloatText(value=value, min=low, max=high, step=step, description=description,
                                    layout=widgets.Layout(width="12em"), **LABELLED)


def choice(description, options, value):
    """A labelled drop-down of the values a slider would stop at."""
    return widgets.Dropdown(options=options, value=value, description=description, **LABELLED)


def live_figure(draw, controls, figsize):
    """An HTML widget showing draw(figure, **values of controls) as an <img> with alt text, redrawn when any
    control changes."""
    image = widgets.HTML(layout=widgets.Layout(max_width="100%"))

    def redraw(_change=None):
        figure = Figure(figsize=figsize)
        draw(figure, **{name: control.value for name, control in controls.items()})
        image.value = figure_html(figure, dpi=90)

    for control in controls.values():
        control.observe(redraw, names="value")
    if not os.environ.get(NO_FRONT_END):
        redraw()
    return image


def lookup_explorer(soft_lookup, keys, values, key_labels, query=None, value_labels=None, query_labels=None):
    """A number field for each query component and a temperature drop-down; shows weights and the blended output.

    query_labels name the sliders after the features the key components stand for ("cooking", ...);
    without them the sliders are q[0], q[1], ...
    """
    keys, values = np.asarray(keys, dtype=float), np.asarray(values, dtype=float)
    query = np.zeros(keys.shape[1]) if query is None else np.asarray(query, dtype=float)
    query_labels = list(query_labels) if query_labels is not None else [f"q[{i}]" for i in range(len(query))]
    component_sliders = [number_field(label, float(x), -3, 3, 0.1) for label, x in zip(query_labels, query)]
    temperature_slider = choice("temperature", [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0], 1.0)
    value_labels = value_labels or [f"v[{i}]" for i in range(values.shape[1])]

    def draw(figure, **settings):
        q = np.array([settings[f"q{i}"] for i in range(len(query))])
        weights, output = soft_lookup(q, keys, values, temperature=settings["temperature"])
        left, right = figure.subplots(1, 2)
        plots.weights_bar(weights, key_labels, ax=left, title="weights = softmax(keys @ q / T)")
        right.bar(range(len(output)), output, **colours.series_style(1))
        right.set_xticks(range(len(output)), value_labels)
        right.set_ylim(min(0.0, values.min()) * 1.05, values.max() * 1.05)
        right.set_xlabel("component of the output")
        right.set_ylabel("blended value")
        right.set_title("output = weights @ values")
        figure.tight_layout()

    controls = {f"q{i}": s for i, s in enumerate(component_sliders)} | {"temperature": temperature_slider}
    output = live_figure(draw, controls, figsize=(9, 3))
    return widgets.VBox([widgets.HBox(component_sliders[:4]),
                         widgets.HBox(component_sliders[4:] + [temperature_slider]), output])


def head_explorer(layer_weights, labels, layer=None, head=0):
    """Drop-downs for layer and head over a forward pass's weights (list over layers of [H, T, T])."""
    n_layers, n_heads = len(layer_weights), np.shape(layer_weights[0])[0]
    layer_slider = choice("layer", list(range(n_layers)), n_layers - 1 if layer is None else layer)
    head_slider = choice("head", list(range(n_heads)), head)

    def draw(figure, layer, head):
        weights = np.asarray(layer_weights[layer][head], dtype=float)
        left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        plots.attention_heatmap(weights, labels, labels, ax=left, annotate=False, max_labels=30,
                                title=f"layer {layer}, head {head}: rows are queries")
        left.tick_params(labelsize=7)
        plots.weights_bar(weights[-1], labels, ax=right, title=f"last token ({labels[-1]!r}) looks at",
                          ylim=(0, max(0.05, weights[-1].max() * 1.1)))
        right.tick_params(axis="x", labelsize=6, rotation=90)
        figure.tight_layout()

    output = live_figure(draw, {"layer": layer_slider, "head": head_slider}, figsize=(13, 5.5))
    return widgets.VBox([widgets.HBox([layer_slider, head_slider]), output])


def scaling_explorer(scale_for_unit_variance, entropy, n_keys=8, max_d_k=1024, seed=0):
    """A d_k slider: one random query's weights over random keys, without and with the 1/sqrt(d_k) scale.

    The query and keys are drawn once at max_d_k and cut to the first d_k components, so moving the
    slider adds components to the same vectors. softmax is the library's; the scale and the entropy
    in the titles come from the functions passed in (the student's).
    """
    from qkv.attention import softmax

    rng = np.random.default_rng(seed)
    query, keys = rng.standard_normal(max_d_k), rng.standard_normal((n_keys, max_d_k))
    labels = [f"k{i}" for i in range(n_keys)]
    d_k_slider = choice("d_k", [2 ** i for i in range(int(np.log2(max_d_k)) + 1)], min(64, max_d_k))

    def draw(figure, d_k):
        scores = keys[:, :d_k] @ query[:d_k]  # [n_keys]: unit-variance q.k, variance d_k
        axes = figure.subplots(1, 2)
        for ax, factor, label in ((axes[0], 1.0, "unscaled: softmax(q.k)"),
                                  (axes[1], scale_for_unit_variance(d_k), "scaled: softmax(q.k / sqrt(d_k))")):
            weights = softmax(scores * factor)
            plots.weights_bar(weights, labels, ax=ax,
                              title=f"{label}\nmax {weights.max():.3f}, entropy {float(entropy(weights)):.3f} nats")
        figure.suptitle(f"d_k = {d_k}: scores range over [{scores.min():.1f}, {scores.max():.1f}]", y=1.02)
        figure.tight_layout()

    output = live_figure(draw, {"d_k": d_k_slider}, figsize=(10, 3))
    return widgets.VBox([d_k_slider, output])


def leak_explorer(attend_by_name, X, labels):
    """Pick a word and a nudge size; bars show how far every output moves, once per attention function.

    attend_by_name: {"no mask": fn, "causal": fn}, each fn [T, d_in] -> [T, d_out] (usually the student's).
    """
    X = np.asarray(X, dtype=float)
    word = widgets.Dropdown(options=[(str(label), j) for j, label in enumerate(labels)], value=len(labels) - 1,
                            description="nudge word")
    size = choice("nudge size", [10.0 ** k for k in range(-6, 2)], 1.0)
    baselines = {name: np.asarray(fn(X)) for name, fn in attend_by_name.items()}

    def draw(figure, j, delta):
        nudged = X.copy()
        nudged[j] += delta
        axes = figure.subplots(1, len(attend_by_name), squeeze=False)
        for ax, (name, fn) in zip(axes[0], attend_by_name.items()):
            moved = np.abs(np.asarray(fn(nudged)) - baselines[name]).max(axis=1)
            # earlier outputs in orange and hatched, the nudged word and later ones in plain blue: not colour alone
            earlier, later = colours.series_style(1), colours.series_style(0)
            ax.bar(range(j), moved[:j], label="earlier tokens", **earlier)
            ax.bar(range(j, len(labels)), moved[j:], label="the nudged token and later", **later)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_xlabel("output of the token")
            ax.set_ylabel("largest change of the output")
            ax.set_title(f"{name}: earlier outputs (hatched) moved {moved[:j].max(initial=0):.3g}")
            ax.legend(fontsize=7)
        figure.tight_layout()

    output = live_figure(draw, {"j": word, "delta": size}, figsize=(4.5 * len(attend_by_name), 3))
    return widgets.VBox([widgets.HBox([word, size]), output])
