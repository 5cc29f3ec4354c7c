"""qkv.lessons is the course's one list of lessons: it matches the course's folders, and a lesson added there (a
dummy one, lesson 99, with stand-in modules for its hidden tests and checks) is mutated, warmed up and withheld
from its kernel with no other edit. What the dummy cannot show: the notebook-wide pipeline tests need a real
notebook, and the kill rate needs EQUIVALENCE_INPUTS for its functions (tests/mutation.py asks for them)."""
import importlib
import importlib.util
import os
import subprocess
import sys
import types

import pytest

import lessons as lesson_helpers
import mutation
import qkv.lessons
from qkv.lessons import Lesson, course_paths
from qkv_autograde.kernels import kernel_view
from qkv_autograde.grading import parallel

ROOT = lesson_helpers.ROOT
DUMMY = Lesson("99", "99-dummy", "heads", uses_model=False)
DUMMY_GRADES = "qkv.heads.repeat_kv_heads"  # a qkv function no real lesson grades under its own name


def test_the_registry_rows_are_the_course_folders():
    paths = course_paths()
    assert paths.root == ROOT and paths.solutions == ROOT / "solutions"
    slugs = [row.slug for row in qkv.lessons.LESSONS]
    assert slugs == sorted(p.name for p in paths.solutions.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert slugs == sorted(p.name for p in paths.notebooks.iterdir() if p.is_dir() and not p.name.startswith("."))
    numbers = [row.number for row in qkv.lessons.LESSONS]
    assert numbers == sorted(p.stem[len("lesson"):] for p in paths.hidden_tests.glob("lesson*.py"))
    assert numbers == sorted(p.stem[len("lesson"):]
                             for p in (ROOT / "source_lib" / "qkv" / "checks").glob("lesson??.py"))
    for row in qkv.lessons.LESSONS:
        assert row.slug.startswith(row.number + "-")
        importlib.import_module(f"qkv.{row.concept}")
        importlib.import_module(row.checks)
        importlib.import_module(row.hidden_tests)
    assert [row.number for row in qkv.lessons.LESSONS if row.uses_model] == ["05", "06", "07"]
    # the tripwire's modules stay a literal tuple, so that test_library_structure can read its imports: the same set
    from qkv.checking import REFERENCE_MODULES
    assert set(REFERENCE_MODULES) == {row.concept for row in qkv.lessons.LESSONS}


def test_a_lesson_is_named_by_slug_or_number_and_an_unknown_one_is_refused():
    assert qkv.lessons.lesson("05-heads") == qkv.lessons.lesson("05") == qkv.lessons.LESSONS[4]
    with pytest.raises(ValueError, match="no lesson '42-x' in qkv.lessons.LESSONS"):
        qkv.lessons.lesson("42-x")


DUMMY_HIDDEN_TESTS = '''"""Lesson 99\'s hidden tests (a dummy): one graded function."""
import numpy as np

from qkv.checking import check_against
from qkv.heads import repeat_kv_heads as reference

GRADED_REFERENCES = ("qkv.heads.repeat_kv_heads",)


def repeat_kv_heads(student_fn):
    check_against(student_fn, reference, (np.arange(12.0).reshape(2, 3, 2), 2))
'''


@pytest.fixture
def dummy_lesson(monkeypatch, tmp_path_factory):
    """Lesson 99 in the registry; its hidden tests a file outside the course that the tamper guard trusts as it
    trusts autograde/qkv_grading (the grader's folders), its checks an empty module."""
    from qkv.checking import guard
    folder = tmp_path_factory.mktemp("dummy_grading")
    (folder / "lesson99.py").write_text(DUMMY_HIDDEN_TESTS)
    guard._TRUSTED_DIRS.append(str(folder))  # a sealed module: its list is changed in place, and restored
    spec = importlib.util.spec_from_file_location(DUMMY.hidden_tests, folder / "lesson99.py")
    hidden = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, DUMMY.hidden_tests, hidden)
    spec.loader.exec_module(hidden)
    monkeypatch.setitem(sys.modules, DUMMY.checks, types.ModuleType(DUMMY.checks))
    monkeypatch.setattr(qkv.lessons, "LESSONS", (*qkv.lessons.LESSONS, DUMMY))
    yield DUMMY
    monkeypatch.undo()
    guard._TRUSTED_DIRS.remove(str(folder))
    importlib.reload(lesson_helpers)


def test_a_new_registry_row_is_picked_up_by_the_mutation_engine(dummy_lesson):
    graded = mutation.graded_functions()
    assert graded[DUMMY_GRADES] == ("99", "repeat_kv_heads")
    assert {lesson for lesson, _ in graded.values()} == {*mutation.LESSONS, "99"}
    assert {k: v for k, v in graded.items() if k != DUMMY_GRADES} == mutation.GRADED  # the real lessons unchanged
    mutants = mutation.mutants(DUMMY_GRADES)
    assert mutants, "the engine made no mutants of the dummy lesson's function"
    hidden = mutation.hidden_module("99")
    hidden.repeat_kv_heads(mutation.student_reference(DUMMY_GRADES))  # the unmutated reference passes
    assert any(mutation.killed(m, hidden.repeat_kv_heads) for m in mutants)


def test_a_new_registry_row_is_warmed_up_by_the_grader(dummy_lesson, monkeypatch):
    imported, viewed = [], []

    def import_module(name):
        imported.append(name)
        return importlib.import_module(name)
    monkeypatch.setattr(parallel, "importlib", types.SimpleNamespace(import_module=import_module))
    for owner in (getattr(parallel, "preprocessors", None), getattr(parallel, "kernel_setup", None)):
        if hasattr(owner, "library_view"):  # the kernel's view of qkv, built from the registry (tested below)
            monkeypatch.setattr(owner, "library_view", viewed.append)
    monkeypatch.setattr(parallel, "share_blas_threads", lambda: None)
    monkeypatch.setattr(parallel, "kernel_template", lambda lesson, limit: None)  # a sandboxed kernel: elsewhere
    monkeypatch.setattr(parallel, "_warm", set())
    parallel.warm_up("99-dummy")
    assert {"qkv_grading.lesson99", "qkv.checks.lesson99", "qkv.heads"} <= set(imported)
    assert viewed == ["99-dummy"] and parallel._warm == {"99-dummy"}
    assert not parallel.uses_model("99-dummy")
    monkeypatch.setattr(qkv.lessons, "LESSONS", (*qkv.lessons.LESSONS[:-1], DUMMY._replace(uses_model=True)))
    assert parallel.uses_model("99-dummy")


def test_a_new_registry_row_is_withheld_from_its_kernel_and_listed_for_the_grading_pieces(dummy_lesson, tmp_path):
    assert kernel_view.graded_references("99-dummy") == (DUMMY_GRADES,)
    kernel_view.build("99-dummy", str(tmp_path / "qkv"))
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import numpy as np;"
                            "import qkv.heads as h; print(h.split_heads(np.zeros((4, 4)), 2).shape);"
                            "h.repeat_kv_heads(np.zeros((1, 2, 2)), 2)", str(tmp_path)], capture_output=True,
                           text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path)
    assert probe.stdout.strip() == "(2, 4, 2)" and "withheld while this lesson is graded" in probe.stderr, probe.stderr
    # tests/lessons.LESSONS, which parametrizes test_grading_pieces and test_pipeline, is read from the registry
    assert importlib.reload(lesson_helpers).LESSONS[-1] == "99-dummy"
