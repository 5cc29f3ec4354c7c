"""`make lab` as a student meets it: JupyterLab serves the course, with the widgets extension, and a
kernel started by the server can import qkv and run a lesson's first cell."""
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from lessons import LESSONS, RELEASE, ROOT, jupyter_lab

BIN = os.path.dirname(sys.executable)
TOKEN = "qkv-test-token"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               JUPYTER_CONFIG_PATH=str(ROOT / "jupyter" / "student"))  # as `make lab` starts it
    # the same root as `make lab`; no browser, a fixed token, loopback only
    with jupyter_lab(RELEASE, home, env, TOKEN) as base:
        yield base


def get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def test_lab_page_and_every_lesson_notebook_are_served(lab):
    status, page = get(f"{lab}/lab?token={TOKEN}")
    assert status == 200 and "JupyterLab" in page
    for lesson in LESSONS:
        status, body = get(f"{lab}/api/contents/{lesson}/{lesson}.ipynb?token={TOKEN}")
        notebook = json.loads(body)
        assert status == 200 and notebook["type"] == "notebook" and notebook["content"]["cells"]


def test_widgets_extension_is_installed_for_the_lesson_widgets(lab):
    _, page = get(f"{lab}/lab?token={TOKEN}")
    config = json.loads(page.split('id="jupyter-config-data" type="application/json">')[1].split("</script>")[0])
    extensions = json.dumps(config.get("federated_extensions", []))
    assert "@jupyter-widgets/jupyterlab-manager" in extensions


def test_server_kernel_imports_the_course_library_but_not_the_hidden_tests():
    # the kernel the server starts is the environment's python: it must see qkv, and not the answers
    out = subprocess.run([os.path.join(BIN, "jupyter"), "kernelspec", "list", "--json"], capture_output=True, text=True)
    spec = json.loads(out.stdout)["kernelspecs"]["python3"]["spec"]
    python = spec["argv"][0]
    python = sys.executable if python in ("python", "python3") else python
    check = subprocess.run([python, "-c", "import qkv.attention, qkv.plots, qkv.widgets, qkv.checks.lesson01"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    hidden = subprocess.run([python, "-c", "import qkv_grading"], capture_output=True, text=True, cwd=RELEASE, env=env)
    assert hidden.returncode != 0 and "No module named 'qkv_grading'" in hidden.stderr
