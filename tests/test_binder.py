"""The Binder configuration, checked offline and quickly (no image is built; `make binder-check` runs repo2docker
--no-build for the full plan): what Binder installs, what it runs, and where the README's badge leads."""
import os
import pathlib
import re
import subprocess
import urllib.parse

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEST_ONLY = {"pytest", "playwright"}


def pip_names(lines):
    return {line.split("==")[0].strip().lower() for line in lines}


def makefile_requirements():
    """The requirement lines exactly as `make install` extracts them from environment.yml."""
    recipe = (ROOT / "Makefile").read_text()
    command = re.search(r"\tsed -n (.*?) \\\n\s*environment.yml", recipe, re.S).group(1).replace("$$", "$")
    result = subprocess.run(f"sed -n {command} environment.yml", shell=True, cwd=ROOT, capture_output=True,
                            text=True, check=True)
    return result.stdout.split()


def test_binder_uses_the_root_configuration():
    # a binder/ or .binder/ folder would make repo2docker ignore environment.yml, postBuild and start at the root
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists()
    for script in ("postBuild", "start"):
        path = ROOT / script
        assert os.access(path, os.X_OK), f"{script} must be executable"
        assert path.read_text().startswith("#!/usr/bin/env bash")
        subprocess.run(["bash", "-n", str(path)], check=True)


def test_binder_installs_no_test_only_package_and_make_installs_every_package_once():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    binder = pip_names(pip_section)
    assert not binder & TEST_ONLY, "Binder would install test-only packages"
    assert {"jupyterlab", "nbgrader", "numpy", "ipywidgets", "threadpoolctl"} <= binder
    not_for_binder = pip_names(re.findall(r"^#test: *- (\S+==\S+)$", (ROOT / "environment.yml").read_text(), re.M))
    assert TEST_ONLY <= not_for_binder
    make = makefile_requirements()
    assert all("==" in line for line in make), "every version is pinned"
    assert pip_names(make) == binder | not_for_binder and len(make) == len(set(pip_names(make))), \
        "make install reads the same list, plus the #test: lines, once each"


def test_binder_start_turns_on_self_study_and_the_student_lab():
    start = (ROOT / "start").read_text()
    assert "export QKV_SELF_STUDY=1" in start
    assert 'JUPYTER_CONFIG_PATH="$here/jupyter/student' in start
    assert start.rstrip().endswith('exec "$@"')
    post_build = (ROOT / "postBuild").read_text()
    assert "pip install --no-deps -e source_lib" in post_build and "python -m qkv.model" in post_build
    assert "jupyter/lab-overrides.json" in post_build


def test_readme_badge_opens_lesson_01_in_jupyterlab():
    readme = (ROOT / "README.md").read_text()
    link = re.search(r"\(https://mybinder\.org/v2/gh/[^)]*\)", readme).group(0)[1:-1]
    urlpath = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)["urlpath"][0]
    assert urlpath.startswith("lab/tree/")
    assert (ROOT / urlpath.removeprefix("lab/tree/")).is_file(), urlpath
