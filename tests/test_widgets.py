"""Every lesson widget draws a figure at once and redraws it when a control moves (no front end needed:
the picture is the Image widget's PNG, which lives in the kernel)."""
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
    images = [w for w in found if isinstance(w, ipywidgets.Image)]
    controls = [w for w in found if isinstance(w, ipywidgets.ValueWidget) and not isinstance(w, ipywidgets.Image)]
    assert len(images) == 1, "one figure per explorer"
    return controls, images[0]


def assert_redraws(explorer, control_index, new_value):
    controls, image = controls_and_image(explorer)
    before = bytes(image.value)
    assert before.startswith(b"\x89PNG"), "the widget shows a PNG figure as soon as it is created"
    controls[control_index].value = new_value
    after = bytes(image.value)
    assert after.startswith(b"\x89PNG") and after != before, "moving a control redraws the figure"


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


def test_lookup_explorer_names_its_sliders_after_the_features():
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
    assert len(controls) == 5 and bytes(image.value) == b"" and not calls
