"""Colours of the course's figures, chosen for readers with low vision or a colour-vision deficiency (issue 44).

Text drawn on a coloured cell is black or white, whichever contrasts more with the cell (WCAG 2.1's relative
luminance and contrast ratio): on any colour one of the two reaches at least 4.58:1, above AA's 4.5:1.

Series are never told apart by colour alone: each carries a marker and a line style of its own, and bars a hatch.
Their colours are Okabe and Ito's palette, which stays apart under protanopia, deuteranopia and tritanopia
(tests/test_figure_access.py simulates the three with Machado et al.'s 2009 matrices and checks every pair).
"""
import numpy as np

AA_TEXT_CONTRAST = 4.5  # WCAG 2.1 AA, 1.4.3: normal-size text
# Okabe & Ito (2008): blue, orange, bluish green, reddish purple, sky blue, vermillion, black
SERIES_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
SERIES_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)))
SERIES_HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo")
# the mask grid's two cells: allowed (bluish green) and hidden (light grey)
MASK_COLOURS = ("#e8e8e8", "#009E73")


def srgb_to_linear(rgb):
    # [..., 3] sRGB in [0, 1] -> [..., 3] linear light
    rgb = np.asarray(rgb, dtype=float)
    return np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)


def relative_luminance(rgb):
    # [..., 3 or 4] sRGB(A) in [0, 1] -> [...]: WCAG 2.1's relative luminance (alpha ignored)
    return srgb_to_linear(np.asarray(rgb, dtype=float)[..., :3]) @ np.array([0.2126, 0.7152, 0.0722])


def contrast_ratio(a, b):
    # two sRGB colours -> (L_lighter + 0.05) / (L_darker + 0.05), from 1 to 21
    la, lb = relative_luminance(a), relative_luminance(b)
    return (np.maximum(la, lb) + 0.05) / (np.minimum(la, lb) + 0.05)


def text_colour_on(background):
    """"black" or "white", whichever contrasts more with `background` (any matplotlib colour)."""
    from matplotlib.colors import to_rgb

    rgb = to_rgb(background)
    return "black" if contrast_ratio(rgb, (0, 0, 0)) >= contrast_ratio(rgb, (1, 1, 1)) else "white"


def series_cycler():
    """matplotlib's property cycle: a colour, a marker and a line style per series."""
    from cycler import cycler

    return (cycler(color=SERIES_COLOURS) + cycler(marker=SERIES_MARKERS)
            + cycler(linestyle=SERIES_LINESTYLES))


def series_style(i):
    """Colour, hatch and edge of the i-th bar series (bars take only a colour from the cycle)."""
    i %= len(SERIES_COLOURS)
    return {"color": SERIES_COLOURS[i], "hatch": SERIES_HATCHES[i], "edgecolor": "black", "linewidth": 0.6}
