"""JupyterLab as `make lab` and Binder start it for students (JUPYTER_CONFIG_PATH=jupyter/student): no nbgrader
instructor panels or formgrader, no "No nbgrader_config.py" warning, no news pop-up; `make lab-instructor`
(autograde/, no student configuration) keeps the panels."""
import json
import os
import pathlib
import sys
import urllib.error
import urllib.request

import pytest

from lessons import RELEASE, ROOT, jupyter_lab

BIN = os.path.dirname(sys.executable)
TOKEN = "qkv-student-lab-token"
INSTRUCTOR_PLUGINS = {"@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:menu",
                      "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:assignment-list"}


def environment(student):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    env.pop("JUPYTER_CONFIG_PATH", None)
    if student:
        env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter" / "student")
    return env


def status_and_body(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def disabled_plugins(base):
    _, page = status_and_body(f"{base}/lab?token={TOKEN}")
    config = json.loads(page.split('id="jupyter-config-data" type="application/json">')[1].split("</script>")[0])
    return set(config.get("disabledExtensions", []))


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("student")
    with jupyter_lab(RELEASE, home, environment(student=True), TOKEN) as base:
        yield base, home / "lab.log"


def test_students_see_no_instructor_panels_but_keep_validate(student_lab):
    base, _ = student_lab
    disabled = disabled_plugins(base)
    assert INSTRUCTOR_PLUGINS <= disabled
    assert "@jupyter/nbgrader:validate-assignment" not in disabled
    assert status_and_body(f"{base}/formgrader?token={TOKEN}")[0] == 404


def test_students_get_no_news_pop_up(student_lab):
    base, _ = student_lab
    status, body = status_and_body(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={TOKEN}")
    assert status == 200
    # the overrides change the setting's default, which is what a student without own settings gets
    default = json.loads(body)["schema"]["properties"]["fetchNews"]["default"]
    assert default == "false", "make install copies jupyter/lab-overrides.json into the environment"


def test_students_lab_logs_no_missing_nbgrader_config(student_lab):
    base, log = student_lab
    status_and_body(f"{base}/lab?token={TOKEN}")
    assert "No nbgrader_config.py" not in pathlib.Path(log).read_text()


def test_instructors_keep_the_panels(tmp_path):
    with jupyter_lab(ROOT / "autograde", tmp_path, environment(student=False), TOKEN) as base:
        assert not INSTRUCTOR_PLUGINS & disabled_plugins(base)
        assert status_and_body(f"{base}/formgrader?token={TOKEN}")[0] == 200
