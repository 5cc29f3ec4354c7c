"""The course's notebooks are stored as JupyterLab saves them (issue 41, item 5; qkv_edition/notebook_form.py), checked
on the files without a browser: every notebook of solutions/ and notebooks/ is byte for byte what saving it untouched
writes, and the kernel the course installs reports the language_info they hold. tests/test_browser.py holds the same
in JupyterLab itself."""
import json
import subprocess
import sys

import nbformat
import pytest

from lessons import RELEASE, ROOT, SOLUTIONS

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_edition import notebook_form  # noqa: E402

NOTEBOOKS = sorted([*SOLUTIONS.glob("*/*.ipynb"), *RELEASE.glob("*/*.ipynb")])


def as_saved(path):
    text = nbformat.writes(notebook_form.as_jupyterlab_saves(nbformat.read(path, as_version=nbformat.NO_CONVERT)))
    return (text if text.endswith("\n") else text + "\n").encode()  # nbformat.write ends the file with a newline


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_a_course_notebook_is_stored_as_jupyterlab_saves_it(path):
    stored = path.read_bytes()
    assert stored == as_saved(path), f"{path.relative_to(ROOT)}: run make release (or python -m " \
                                     f"qkv_edition.notebook_form on a solution notebook)"
    nb = json.loads(stored)
    points = [c["metadata"]["nbgrader"]["points"] for c in nb["cells"] if "points" in c["metadata"].get("nbgrader", {})]
    assert points and not any(isinstance(p, float) and p.is_integer() for p in points)


def test_the_course_s_kernel_reports_the_language_info_the_notebooks_hold():
    # the kernel's configuration (copied into the environment by make install) applied in a fresh interpreter
    config = ROOT / "jupyter" / "ipython_kernel_config.py"
    program = (f"exec(open({str(config)!r}).read()); import json; from ipykernel.ipkernel import IPythonKernel; "
               "print(json.dumps(IPythonKernel.language_info))")
    reported = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert json.loads(reported) == notebook_form.kernel_language_info()
    for path in NOTEBOOKS:
        assert json.loads(path.read_text())["metadata"]["language_info"] == json.loads(reported), path
