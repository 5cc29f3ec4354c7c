"""make grade never grades quietly weaker (issue 42): where a kernel would lack its sandbox or its cgroup limits,
it stops before collecting anything, naming each missing wall and its fix; ALLOW_PARTIAL_ISOLATION=1 grades all the
same. tests/test_hub.py runs the real thing as a non-root instructor with a delegated cgroup subtree."""
import os

import pytest

from qkv_autograde.grading import grade_class
from qkv_autograde.kernels import delegation, isolation, sandbox


def test_without_cgroups_the_missing_limits_are_named_with_their_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "CGROUP_ROOT", str(tmp_path))  # no hierarchy here: no cgroup can be made
    monkeypatch.setattr(delegation, "CGROUP_ROOT", str(tmp_path))
    missing = isolation.missing_isolation()
    assert len(missing) == 1 and "no memory or pids cgroup" in missing[0] and "fix:" in missing[0], missing
    if os.geteuid() != 0:
        assert "make hub-setup INSTRUCTOR=" in missing[0]


def test_make_grade_stops_before_anything_when_a_wall_is_missing(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # grade() moves to autograde/: come back after
    monkeypatch.setattr(isolation, "missing_isolation", lambda: ["no sandbox: ... (fix: `sudo make sandbox`)"])
    monkeypatch.setattr(grade_class.lms_export, "collect", lambda *a, **k: pytest.fail("collected all the same"))
    with pytest.raises(SystemExit) as stopped:
        grade_class.grade("01-lookup", submissions_path=str(tmp_path))
    assert "not grading" in str(stopped.value) and "sudo make sandbox" in str(stopped.value)
    assert "ALLOW_PARTIAL_ISOLATION=1" in str(stopped.value)


def test_a_delegated_subtree_is_where_a_non_root_grader_makes_its_kernels_cgroups(tmp_path, monkeypatch):
    import pwd
    me = pwd.getpwuid(os.geteuid()).pw_name
    (tmp_path / "memory" / delegation.subtree_name(me)).mkdir(parents=True)
    monkeypatch.setattr(os, "geteuid", lambda: 4242 if me == "root" else os.getuid())
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.getpwnam(me))
    assert delegation.parent(str(tmp_path / "memory")) == str(tmp_path / "memory" / delegation.subtree_name(me))
    assert delegation.parent(str(tmp_path / "pids")) == str(tmp_path / "pids")  # none delegated: the root, refused
