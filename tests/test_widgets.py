"""Every lesson widget draws a figure at once and redraws it when a control moves (no front end needed:
the picture is an <img> in an HTML widget, which lives in the kernel). Issue 44: the <img> has the figure's
description as alt text, and every control is one whose label a screen reader reads (no slider)."""
import html
import re

import ipywidgets
import numpy as np

from qkv import NO_FRONT_END, attention, heads, lookup, masking, scaling, widgets


def controls_and_image(explorer):
    found = []

    def walk(widget):
        found.append(widget)
        for child in getattr(widget, "children", ()):
            walk(child)
    walk(explorer)
    images = [w for w in found if isinstance(w, ipywidgets.HTML)]
    controls = [w for w in found if isinstance(w, ipywidgets.ValueWidget) and not isinstance(w, ipywidgets.HTML)]
    assert len(images) == 1, "one figure per explorer"
    return controls, images[0]


PICTURE = re.compile(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="([^"]+)"')


def alt_text(image):
    found = PICTURE.match(image.value)
    assert found, f"the widget shows no PNG <img> with alt text: {image.value[:80]!r}"
    return html.unescape(found.group(1))


def assert_redraws(explorer, control_index, new_value):
    controls, image = controls_and_image(explorer)
    before, alt_before = image.value, alt_text(image)
    controls[control_index].value = new_value
    assert image.value != before, "moving a control redraws the figure"
    assert alt_text(image) != alt_before, "the alt text follows the figure"
    assert re.search(r"\d\.\d", alt_text(image)), "the alt text gives the figure's numbers"


def test_every_control_has_a_name_a_screen_reader_reads():
    # ipywidgets' slider handle (role=slider) has no accessible name; number fields and drop-downs have a <label for>
    rng = np.random.default_rng(0)
    W = [rng.normal(size=(4, 4)) for _ in range(3)]
    explorers = [widgets.lookup_explorer(lookup.soft_lookup, np.eye(4), np.eye(4)[:, :2], list("abcd")),
                 widgets.scaling_explorer(scaling.scale_for_unit_variance, scaling.entropy, n_keys=4, max_d_k=16),
                 widgets.leak_explorer({"causal": lambda X: masking.causal_self_attention(X, *W)},
                                       rng.normal(size=(3, 4)), ["a", "b", "c"]),
                 widgets.head_explorer([np.ones((2, 3, 3)) / 3], ["a", "b", "c"])]
    for explorer in explorers:
        controls, _ = controls_and_image(explorer)
        for control in controls:
            assert isinstance(control, (ipywidgets.BoundedFloatText, ipywidgets.Dropdown)), type(control).__name__
            assert control.description.strip(), f"{type(control).__name__} without a description"


def test_lookup_explorer_follows_the_query_and_the_temperature():
    keys, values = np.eye(4) * 3, np.arange(8.0).reshape(4, 2)
    explorer = widgets.lookup_explorer(lookup.soft_lookup, keys, values, list("abcd"), query=[0, 1, 1, 0])
    assert_redraws(explorer, 0, 2.5)
    assert_redraws(explorer, 4, 0.05)


def test_scaling_explorer_follows_d_k():
    explorer = widgets.scaling_explorer(scaling.scale_for_unit_variance, scaling.entropy, n_keys=6, max_d_k=256)
    assert_redraws(explorer, 0, 256)


def test_leak_explorer_follows_the_nudged_word():
    rng = np.random.default_rng(0)
    W = [rng.normal(size=(4, 4)) for _ in range(3)]
    explorer = widgets.leak_explorer({"no mask": lambda X: attention.self_attention(X, *W),
                                      "causal": lambda X: masking.causal_self_attention(X, *W)},
                                     rng.normal(size=(5, 4)), ["Hà", "Nội", "là", "thủ", "đô"])
    assert_redraws(explorer, 0, 1)


def test_head_explorer_follows_layer_and_head():
    rng = np.random.default_rng(0)
    weights = [heads.grouped_query_weights(rng.normal(size=(4, 6, 8)), rng.normal(size=(2, 6, 8)),
                                           masking.causal_mask(6)) for _ in range(3)]
    explorer = widgets.head_explorer(weights, [f"t{i}" for i in range(6)])
    assert_redraws(explorer, 0, 0)
    assert_redraws(explorer, 1, 3)


def test_lookup_explorer_names_its_controls_after_the_features():
    keys, values = np.eye(4) * 3, np.arange(8.0).reshape(4, 2)
    features = ["cooking", "history", "space", "fiction"]
    explorer = widgets.lookup_explorer(lookup.soft_lookup, keys, values, list("abcd"), query_labels=features)
    controls, _ = controls_and_image(explorer)
    assert [c.description for c in controls[:4]] == features
    assert controls[4].description == "temperature"


def test_a_kernel_without_a_front_end_builds_the_widgets_but_draws_nothing(monkeypatch):
    """The grader's kernels (QKV_NO_FRONT_END): no one sees the picture, and feedback pages do not show widgets."""
    monkeypatch.setenv(NO_FRONT_END, "1")
    calls = []
    keys, values = np.eye(4) * 3, np.arange(8.0).reshape(4, 2)
    explorer = widgets.lookup_explorer(lambda *a, **k: calls.append(a) or lookup.soft_lookup(*a, **k), keys, values,
                                       list("abcd"), query=[0, 1, 1, 0])
    controls, image = controls_and_image(explorer)
    assert len(controls) == 5 and image.value == "" and not calls
