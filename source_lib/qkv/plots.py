"""Figures shared by the lessons. Every function draws on an Axes (made if not given) and returns it.

Importing this module makes the course's figures accessible (issue 44): in a notebook every figure is shown with a
description as its alt text (qkv.figure_display), series get a colour, a marker and a line style each on a palette
safe under colour-vision deficiencies, and text on a coloured cell is black or white by contrast (qkv.colours).
"""
import matplotlib.pyplot as plt
import numpy as np

from qkv.colours import MASK_COLOURS, SERIES_COLOURS, series_cycler, series_style, text_colour_on  # noqa: F401 (series_style: for the lessons)
from qkv.figure_display import show_figures_with_alt_text

plt.rcParams["axes.prop_cycle"] = series_cycler()
show_figures_with_alt_text()


def caption(figure, text):
    """Put a lesson's own sentence first in the figure's description (its alt text); returns the figure."""
    figure.qkv_caption = str(text)
    return figure


def annotate_cells(ax, image, values, texts, fontsize=8):
    # [n_q, n_k] texts centred on the cells of `image`, each black or white, whichever contrasts more with its cell
    for (i, j), text in np.ndenumerate(np.asarray(texts, dtype=object)):
        ax.text(j, i, text, ha="center", va="center", fontsize=fontsize,
                color=text_colour_on(image.cmap(image.norm(values[i, j]))))


def _axes(ax, size=(5, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def _thinned_ticks(n, labels, max_labels):
    # a long sentence cannot show every token at a readable size: label every k-th one
    labels = list(labels) if labels is not None else list(range(n))
    step = 1 if max_labels is None or n <= max_labels else -(-n // max_labels)
    return range(0, n, step), labels[::step]


def attention_heatmap(weights, query_labels=None, key_labels=None, ax=None, title=None, annotate=None,
                      max_labels=None):
    # [n_q, n_k] weights; rows are queries (who looks), columns are keys (who is looked at)
    # max_labels: at most this many tick labels per axis (every k-th token), so long inputs stay readable
    weights = np.asarray(weights, dtype=float)
    n_q, n_k = weights.shape
    ax = _axes(ax, (max(3.5, 0.55 * n_k + 1.5), max(3.0, 0.5 * n_q + 1.0)))
    image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=max(1e-12, weights.max()))
    ax.set_xticks(*_thinned_ticks(n_k, key_labels, max_labels), rotation=60, ha="right")
    ax.set_yticks(*_thinned_ticks(n_q, query_labels, max_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if annotate if annotate is not None else n_q * n_k <= 64:
        annotate_cells(ax, image, weights, [[f"{w:.2f}" for w in row] for row in weights])
    # a colour bar beside the image itself, as tall as the image whatever the figure's proportions
    from mpl_toolkits.axes_grid1 import make_axes_locatable
    bar_axes = make_axes_locatable(ax).append_axes("right", size=0.15, pad=0.1)
    ax.figure.colorbar(image, cax=bar_axes, label="weight")
    if title:
        ax.set_title(title)
    return ax


def weights_bar(weights, labels=None, ax=None, title=None, ylim=(0, 1)):
    # [n] weights of one query over n keys
    weights = np.asarray(weights, dtype=float)
    ax = _axes(ax, (5, 3))
    ax.bar(range(len(weights)), weights, color=SERIES_COLOURS[0])
    labels = list(labels) if labels is not None else list(range(len(weights)))
    long_labels = max(len(str(label)) for label in labels) > 6
    ax.set_xticks(range(len(weights)), labels, rotation=30 if long_labels else 0,
                  ha="right" if long_labels else "center")
    ax.set_ylim(*ylim)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("weight")
    if title:
        ax.set_title(title)
    return ax


# ---------------------------------------------------------------- lesson 05: heads

_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def readable_token_labels(decode, ids, longest=4):
    """One label per token. A character split over several byte-level tokens (shown as "�" alone) is
    named on each of its pieces with a subscript, e.g. " Nội" -> " N", "ộ₁", "ộ₂", "i"."""
    ids = [int(i) for i in ids]
    labels, start = [], 0
    while start < len(ids):
        for length in range(1, longest + 1):
            text = decode(ids[start:start + length])
            if "\ufffd" not in text or start + length >= len(ids):
                break
        if length == 1 or "\ufffd" in text:
            labels.append(decode(ids[start:start + 1]))
            start += 1
            continue
        # label each piece with the character(s) the group spells; keep a leading space visible
        labels.extend(text + str(piece + 1).translate(_SUBSCRIPTS) for piece in range(length))
        start += length
    return labels


def head_heatmaps(weights, query_labels=None, key_labels=None, titles=None, ncols=3, label_size=8,
                  panel_size=4.2, suptitle=None, max_labels=25):
    # [H, n_q, n_k] -> a grid of heatmaps, one per head; rows are queries, columns are keys
    weights = np.asarray(weights, dtype=float)
    n_heads = weights.shape[0]
    nrows = -(-n_heads // ncols)
    figure, axes = plt.subplots(nrows, ncols, figsize=(panel_size * ncols * 1.1, panel_size * nrows),
                                squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head >= n_heads:
            ax.axis("off")
            continue
        attention_heatmap(weights[head], query_labels, key_labels, ax=ax, annotate=False, max_labels=max_labels,
                          title=titles[head] if titles is not None else f"head {head}")
        ax.tick_params(labelsize=label_size)
        ax.xaxis.label.set_size(label_size + 2)
        ax.yaxis.label.set_size(label_size + 2)
    if suptitle:
        figure.suptitle(suptitle)
    figure.tight_layout(rect=(0, 0, 1, 0.95) if suptitle else (0, 0, 1, 1))  # keep the suptitle off the panel titles
    return axes


def mask_grid(mask, query_labels=None, key_labels=None, ax=None, title=None, marks=("✓", "✗")):
    # bool [n_q, n_k]; rows are queries, columns keys; True (may attend / depends) is drawn ✓, False ✗
    mask = np.asarray(mask, dtype=bool)
    n_q, n_k = mask.shape
    ax = _axes(ax, (max(3.0, 0.5 * n_k + 1.2), max(2.6, 0.45 * n_q + 1.0)))
    from matplotlib.colors import ListedColormap
    image = ax.imshow(mask, cmap=ListedColormap(MASK_COLOURS), vmin=0, vmax=1)
    ax.set_xticks(range(n_k), key_labels if key_labels is not None else range(n_k), rotation=60, ha="right")
    ax.set_yticks(range(n_q), query_labels if query_labels is not None else range(n_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if n_q * n_k <= 400:
        annotate_cells(ax, image, mask, np.where(mask, marks[0], marks[1]), fontsize=10)
    if title:
        ax.set_title(title)
    return ax


# ---------------------------------------------------------------- one query's row, one key marked (lesson 05)

def marked_weights_bar(weights, labels, marked, ax=None, title=None):
    # [n] weights of one query over n keys; key `marked` is hatched and named on the figure, so that colour is not
    # the only thing that sets it apart, and every bar carries its weight as text
    weights = np.asarray(weights, dtype=float)
    ax = _axes(ax, (max(5.0, 0.6 * len(weights) + 1.5), 3.2))
    others = np.arange(len(weights)) != marked
    ax.bar(np.flatnonzero(others), weights[others], color="#1f5f99", edgecolor="black")
    ax.bar([marked], weights[[marked]], color="#f5b971", edgecolor="black", hatch="//")
    for j, weight in enumerate(weights):
        ax.text(j, weight + 0.02, f"{weight:.2f}", ha="center", va="bottom", fontsize=8,
                fontweight="bold" if j == marked else "normal")
    ax.set_xticks(range(len(weights)), [repr(str(label)) for label in labels], rotation=30, ha="right")
    ax.set_ylim(0, 1.15)
    ax.set_xlabel(f"key (attended to); hatched: {str(labels[marked])!r}")
    ax.set_ylabel("weight")
    if title:
        ax.set_title(title)
    return ax


def weights_description(weights, labels, marked, query=None):
    """The text alternative of marked_weights_bar: every key's weight in order, the marked key and the largest named."""
    weights = np.asarray(weights, dtype=float)
    largest = int(np.argmax(weights))
    who = f"the query {str(query)!r}" if query is not None else "one query"
    return (f"Bar chart of the weights {who} puts on each of {len(weights)} keys: "
            + ", ".join(f"{str(label)!r} {weight:.2f}" for label, weight in zip(labels, weights))
            + f". Marked key {str(labels[marked])!r}: {weights[marked]:.2f}; largest: {str(labels[largest])!r}.")
