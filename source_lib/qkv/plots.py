"""Figures shared by the lessons. Every function draws on an Axes (made if not given) and returns it."""
import matplotlib.pyplot as plt
import numpy as np


def _axes(ax, size=(5, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def attention_heatmap(weights, query_labels=None, key_labels=None, ax=None, title=None, annotate=None):
    # [n_q, n_k] weights; rows are queries (who looks), columns are keys (who is looked at)
    weights = np.asarray(weights, dtype=float)
    n_q, n_k = weights.shape
    ax = _axes(ax, (max(3.5, 0.55 * n_k + 1.5), max(3.0, 0.5 * n_q + 1.0)))
    image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=max(1e-12, weights.max()))
    ax.set_xticks(range(n_k), key_labels if key_labels is not None else range(n_k), rotation=60, ha="right")
    ax.set_yticks(range(n_q), query_labels if query_labels is not None else range(n_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if annotate if annotate is not None else n_q * n_k <= 64:
        for i in range(n_q):
            for j in range(n_k):
                light = weights[i, j] < 0.6 * weights.max()
                ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if light else "black")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    if title:
        ax.set_title(title)
    return ax


def weights_bar(weights, labels=None, ax=None, title=None, ylim=(0, 1)):
    # [n] weights of one query over n keys
    weights = np.asarray(weights, dtype=float)
    ax = _axes(ax, (5, 3))
    ax.bar(range(len(weights)), weights, color="tab:blue")
    ax.set_xticks(range(len(weights)), labels if labels is not None else range(len(weights)))
    ax.set_ylim(*ylim)
    ax.set_ylabel("weight")
    if title:
        ax.set_title(title)
    return ax
