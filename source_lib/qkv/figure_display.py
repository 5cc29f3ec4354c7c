"""How a notebook shows a matplotlib figure: as an <img> with its description in `alt` (issue 44).

JupyterLab draws an image/png output as an <img> without alt whatever the output's metadata says, and nbconvert's
lab template writes "No description has been provided for this image". An HTML output carries its own alt, and
JupyterLab, Notebook 7, VS Code, nbconvert (the exported lesson) and the course's feedback pages all show it. So
in a kernel, once qkv.plots is imported, a Figure's display is
- text/html: <img src="data:image/png;base64,…" alt="(qkv.figure_text.describe)">, the PNG drawn as the inline
  backend draws it;
- text/plain: the same description, for a terminal or a reader of the .ipynb;
and no separate image/png, which would store the picture twice.

A grading kernel (issue 45) describes a figure instead of drawing it (`describe_figures_only`): text/html is the
description in a paragraph, saying the picture was not drawn; text/plain the description. No grade depends on the
picture, and the student already has it in their own notebook; the description, read from the figure's own artists,
says on the feedback page what their figure shows (about 90 ms of CPU saved per figure).

A notebook opened untrusted in JupyterLab (someone else's, or on another machine) still shows the picture: its HTML
output is sanitized, and JupyterLab 4's sanitizer keeps <img> with its src, alt and style, checking the scheme of
href and cite only (allowedSchemesAppliedToAttributes); measured in JupyterLab 4.6.6 on a notebook "not trusted: 0 of
1 code cells trusted", the <img> kept its data: URL and its alt and drew the PNG. An image/png beside the HTML would
not change what JupyterLab picks (text/html ranks before image/png, trusted or not) and would store the picture twice.
"""
import base64
import html
import io
import sys

from qkv.figure_text import describe


def png_base64(figure, dpi=None):
    # what the inline backend draws: the figure's own dpi, the tight bounding box
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi or figure.dpi, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def figure_html(figure, dpi=None):
    """The figure as one <img> with its description as alt text."""
    return (f'<img src="data:image/png;base64,{png_base64(figure, dpi)}" alt="{html.escape(describe(figure))}" '
            f'style="max-width: 100%; height: auto">')


NOT_DRAWN = "(A figure, not drawn by the grader: run your notebook to see it.)"


def figure_described_html(figure):
    """The figure as its description alone, in a paragraph: no PNG is drawn."""
    return f'<p class="qkv-figure-text"><em>{NOT_DRAWN}</em> {html.escape(describe(figure))}</p>'


def _plain(figure, printer, cycle):
    printer.text(describe(figure))


def show_figures_with_alt_text(shell=None):
    """In an IPython kernel: figures display as HTML with alt text (above). Outside one: nothing to do (IPython
    and matplotlib are not imported for it). A kernel that imported qkv before its shell existed (the grader's
    kernel template) calls this again with the shell."""
    if shell is None:
        shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is None:
        return False
    _register_printers(shell)
    if not getattr(shell, "_qkv_figures_with_alt_text", False):
        # `%matplotlib inline` (IPython's select_figure_formats) takes every Figure printer out and puts its PNG one
        # back: ours are registered again before every cell runs
        shell.events.register("pre_run_cell", lambda *info: _register_printers(shell))
        shell._qkv_figures_with_alt_text = True
    return True


def describe_figures_only(shell):
    """In a grading kernel: figures display as their description, never drawn (the module's docstring). The inline
    backend makes no PNG (its formats emptied, as `%config InlineBackend.figure_formats = set()` does, without the
    magic's loading of every lazy magic: 26 ms a kernel), and a figure's `tight_layout` does nothing: it lays out
    text for a picture that is never drawn (a quarter of a lesson-01 grading kernel's CPU); what a description reads
    (titles, labels, data, ticks set by the plot) does not depend on it."""
    shell._qkv_figures_drawn = False
    for configurable in shell.configurables:
        if type(configurable).__name__ == "InlineBackend":
            configurable.figure_formats = set()
    if "matplotlib.figure" in sys.modules:
        sys.modules["matplotlib.figure"].Figure.tight_layout = _no_layout_for_a_figure_never_drawn
    return show_figures_with_alt_text(shell)


def _no_layout_for_a_figure_never_drawn(figure, *args, **kwargs):
    return None


def _register_printers(shell):
    formatters = shell.display_formatter.formatters
    html_printer = figure_html if getattr(shell, "_qkv_figures_drawn", True) else figure_described_html
    for kind, printer in (("text/html", html_printer), ("text/plain", _plain), ("image/png", _no_png)):
        _register(formatters[kind], printer)


def _no_png(figure):
    return None  # the picture is in the HTML


def _register(formatter, printer):
    if "matplotlib.figure" in sys.modules:  # the inline backend registers its PNG printer by type
        formatter.for_type(sys.modules["matplotlib.figure"].Figure, printer)
    else:
        formatter.for_type_by_name("matplotlib.figure", "Figure", printer)
