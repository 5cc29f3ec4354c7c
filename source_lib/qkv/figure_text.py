"""A figure said in words, for a reader who cannot see it (issue 44): what each panel plots and the numbers that
matter, read from the figure's own artists so that the text always matches the picture.

- a heatmap: its size, the range of its values and, row by row, the column holding the largest value; a grid of
  two values (a mask) says which columns each row has on;
- a line or marker series: where it starts and ends and its smallest and largest value;
- bars: each bar's value by its tick label;
- a horizontal or vertical reference line: where it sits.

A lesson may put its own sentence first (`qkv.plots.caption(figure, text)`).
"""
import numpy as np

MAX_ROWS = 12     # rows of a heatmap said one by one; a longer one is summarised
MAX_BARS = 24     # bars said one by one
MAX_CHARACTERS = 4000


def number(x):
    # 3 significant digits, plain for ordinary sizes (4096, not 4.1e+03: a sequence length is read whole),
    # scientific for the very small or large
    x = float(x)
    if not np.isfinite(x):
        return str(x)
    if 1e3 <= abs(x) < 1e5:
        return f"{x:.0f}"
    if x == 0 or 1e-3 <= abs(x) < 1e3:
        return f"{x:.3g}"
    return f"{x:.2e}"


def _tick_labels(axis_ticks, labels, n):
    # the text of each tick at integer positions 0..n-1, else the position itself
    by_position = {}
    for tick, label in zip(axis_ticks, labels):
        text = label.get_text()
        if text and abs(tick - round(tick)) < 1e-9:
            by_position[int(round(tick))] = text
    return [by_position.get(i, str(i)) for i in range(n)]


def _axis_label(ax, axis):
    # panels that share an axis (sharey=True) label it once, on one of them: each panel is said with that label
    shared = ax.get_shared_x_axes() if axis == "x" else ax.get_shared_y_axes()
    labels = (a.get_xlabel() if axis == "x" else a.get_ylabel() for a in [ax, *shared.get_siblings(ax)])
    return next((label for label in labels if label.strip()), "")


def _is_colour_bar(ax):
    return hasattr(ax, "_colorbar")


def describe_image(ax, image):
    values = np.ma.filled(np.ma.masked_invalid(np.asarray(image.get_array(), dtype=float)), np.nan)
    if values.ndim != 2:
        return f"an image of {values.shape[0]} by {values.shape[1]} pixels"
    n_rows, n_cols = values.shape
    rows = _tick_labels(ax.get_yticks(), ax.get_yticklabels(), n_rows)
    cols = _tick_labels(ax.get_xticks(), ax.get_xticklabels(), n_cols)
    row_name, col_name = _axis_label(ax, "y") or "row", _axis_label(ax, "x") or "column"
    finite = values[np.isfinite(values)]
    head = f"a grid of {n_rows} rows ({row_name}) by {n_cols} columns ({col_name})"
    if finite.size and set(np.unique(finite)) <= {0.0, 1.0}:
        on = values == 1
        said = [f"{rows[i]}: {', '.join(cols[j] for j in np.flatnonzero(on[i])) or 'none'}"
                for i in range(min(n_rows, MAX_ROWS))]
        more = f"; {n_rows - MAX_ROWS} more rows" if n_rows > MAX_ROWS else ""
        return f"{head}, {int(on.sum())} of {on.size} cells marked; marked columns by row: {'; '.join(said)}{more}"
    if not finite.size:
        return f"{head}, no finite value"
    text = f"{head}, values from {number(finite.min())} to {number(finite.max())}"
    filled = np.where(np.isfinite(values), values, -np.inf)
    if n_rows <= MAX_ROWS:
        best = [f"{rows[i]}: all equal ({number(filled[i].max())})" if np.ptp(filled[i]) < 1e-9 * max(1.0, abs(
                    filled[i].max())) else f"{rows[i]} → {cols[int(np.argmax(filled[i]))]} ({number(filled[i].max())})"
                for i in range(n_rows)]
        return f"{text}; largest value in each row: {'; '.join(best)}"
    i, j = np.unravel_index(int(np.argmax(filled)), values.shape)
    column_means = np.nanmean(values, axis=0)
    k = int(np.nanargmax(column_means))
    return (f"{text}; the largest, {number(values[i, j])}, at {rows[i]} and {cols[j]}; the column with the largest "
            f"mean is {cols[k]} ({number(column_means[k])})")


def _reference_line(line):
    x, y = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    if x.size == 2 and y.size == 2:
        if y[0] == y[1] and tuple(x) == (0.0, 1.0):
            return f"a horizontal line at {number(y[0])}"
        if x[0] == x[1] and tuple(y) == (0.0, 1.0):
            return f"a vertical line at {number(x[0])}"
    return None


def describe_line(line, index):
    label = line.get_label()
    name = label if label and not label.startswith("_") else ("the line" if index is None else f"line {index}")
    reference = _reference_line(line)
    if reference:
        return f"{reference} ({name})" if not label.startswith("_") else reference
    x, y = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if not x.size:
        return f"{name}: no point"
    low, high = int(np.argmin(y)), int(np.argmax(y))
    return (f"{name}: {x.size} points from ({number(x[0])}, {number(y[0])}) to ({number(x[-1])}, {number(y[-1])}), "
            f"lowest {number(y[low])} at {number(x[low])}, highest {number(y[high])} at {number(x[high])}")


def describe_bars(ax, container, index):
    label = container.get_label()
    name = label if label and not label.startswith("_") else ("bars" if index is None else f"bars {index}")
    patches = list(container.patches)
    across = getattr(container, "orientation", "vertical") == "horizontal"   # barh: the value is the width
    axis_ticks = (ax.get_yticks(), ax.get_yticklabels()) if across else (ax.get_xticks(), ax.get_xticklabels())
    ticks = {round(float(t), 6): lab.get_text() for t, lab in zip(*axis_ticks)}
    centres = np.array([p.get_y() + p.get_height() / 2 if across else p.get_x() + p.get_width() / 2 for p in patches])
    offsets = centres - np.round(centres)
    # bars side by side (x - 0.2, x + 0.2) stand for the category at the whole number x: say that category
    grouped = centres.size and np.ptp(offsets) < 1e-9 and 1e-9 < abs(offsets[0]) < 0.5
    said = []
    for patch, centre in zip(patches[:MAX_BARS], centres):
        position = round(float(np.round(centre) if grouped else centre), 6)
        where = ticks.get(position) or number(position)
        said.append(f"{where} {number(patch.get_width() if across else patch.get_height())}")
    more = f"; {len(patches) - MAX_BARS} more" if len(patches) > MAX_BARS else ""
    heights = np.array([p.get_width() if across else p.get_height() for p in patches], dtype=float)
    top = int(np.argmax(heights)) if heights.size else 0
    summary = f" (highest: bar {top}, {number(heights[top])})" if len(patches) > MAX_BARS else ""
    return f"{name}: {'; '.join(said)}{more}{summary}"


def describe_axes(ax):
    title = ax.get_title() or ax.get_title(loc="left")
    parts = [title] if title else []
    axes_named = [f"{axis} axis: {label}" + (" (log scale)" if scale == "log" else "")
                  for axis, label, scale in (("x", ax.get_xlabel(), ax.get_xscale()),
                                             ("y", ax.get_ylabel(), ax.get_yscale())) if label]
    if axes_named and not ax.images:
        parts.append(", ".join(axes_named))
    parts += [describe_image(ax, image) for image in ax.images]
    bars = [c for c in ax.containers if hasattr(c, "patches")]
    parts += [describe_bars(ax, c, i + 1 if len(bars) > 1 else None) for i, c in enumerate(bars)]
    lines = [line for line in ax.lines if line.get_visible()]
    parts += [describe_line(line, i + 1 if len(lines) > 1 else None) for i, line in enumerate(lines)]
    return ". ".join(parts)


def describe(figure):
    """The figure in words: its caption if a lesson gave one, its title, then each panel in reading order."""
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.axison and not _is_colour_bar(ax)
              and (ax.images or ax.lines or ax.containers or ax.collections)]
    said = [getattr(figure, "qkv_caption", "")]
    if figure._suptitle is not None and figure._suptitle.get_text():
        said.append(figure._suptitle.get_text())
    for n, ax in enumerate(panels, start=1):
        said.append((f"Panel {n} of {len(panels)}: " if len(panels) > 1 else "") + describe_axes(ax))
    text = ". ".join(s.rstrip(". ") for s in said if s) + "."
    text = "Figure: " + text if not getattr(figure, "qkv_caption", "") else text
    return text if len(text) <= MAX_CHARACTERS else text[:MAX_CHARACTERS - 1] + "…"
