"""The course's notebooks stored as JupyterLab saves them, so that an untouched notebook stays untouched (issue 41).

A student who opens a released notebook and saves it without an edit must get the same bytes back: JupyterLab marks a
notebook modified as soon as its model differs from the file, autosaves it, and writes what its model holds. Three
things differed:
- nbgrader's points, stored as floats (`"points": 2.0`): the browser keeps JSON numbers as JavaScript numbers, so a
  save writes `2`. nbgrader reads points through float() everywhere (checksums, the gradebook, autograde), so an
  integral number of points is stored as an integer and nothing else changes;
- language_info, which JupyterLab replaces with the kernel's own the moment the kernel starts: the notebook holds the
  kernel's, and the course's kernel reports Python as major.minor (jupyter/ipython_kernel_config.py: the patch
  release varies between machines, and a notebook cannot hold every one);
- the widgets' saved state (jupyter/lab-overrides.json saves it, so that a reopened notebook shows its widgets
  rather than "Error displaying widget: model not found"): every save writes it, empty for a notebook whose widgets
  never ran, so the notebook holds that empty state.
The JSON itself is nbformat's, as jupyter_server writes it (indent 1, sorted keys, UTF-8 unescaped, a final newline).

`make release` applies it through nbgrader (`AsJupyterLabSaves`, the last of GenerateAssignment's preprocessors in
autograde/nbgrader_config.py); `python -m qkv_edition.notebook_form FILE...` rewrites notebooks in place (solutions/).
tests/test_browser.py holds the result in JupyterLab itself; tests/test_notebook_form.py the files, without a browser.
"""
import sys

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# what jupyterlab-manager writes on every save when widget state is saved and no widget exists
NO_WIDGET_STATE = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2, "version_minor": 0}}


def kernel_language_info():
    """The language_info the course's kernel reports (jupyter/ipython_kernel_config.py): ipykernel's, Python x.y."""
    from ipykernel.ipkernel import IPythonKernel
    return {**IPythonKernel.language_info, "version": "%d.%d" % sys.version_info[:2]}


def integral(points):
    """2.0 -> 2; other numbers (1.5) and anything else unchanged."""
    return int(points) if isinstance(points, float) and points.is_integer() else points


def as_jupyterlab_saves(nb):
    """`nb` (a NotebookNode, changed in place and returned) with what JupyterLab would write on saving it untouched."""
    for cell in nb.cells:
        grading = cell.get("metadata", {}).get("nbgrader")
        if grading and "points" in grading:
            grading["points"] = integral(grading["points"])
    nb.metadata["kernelspec"] = nbformat.from_dict(KERNELSPEC)
    nb.metadata["language_info"] = nbformat.from_dict(kernel_language_info())
    nb.metadata.setdefault("widgets", nbformat.from_dict(NO_WIDGET_STATE))
    return nb


class AsJupyterLabSaves(NbGraderPreprocessor):
    """The released notebook as JupyterLab saves it (see the module's docstring)."""

    def preprocess(self, nb, resources):
        return as_jupyterlab_saves(nb), resources


def rewrite(path):
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.write(as_jupyterlab_saves(nb), path)


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        rewrite(argument)
