"""Self-study mode (QKV_SELF_STUDY=1, set by Binder's `start`): self-checks say right or wrong at once, with a
one-line explanation; in a graded class (variable unset) they only record the answer."""
import importlib
import pathlib

import numpy as np
import pytest

from qkv import checking
from qkv.checking import Hint, answered_choice, answered_number
from qkv.your_numbers import POOLS, question_params
from qkv_grading import expected_answer

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ("01", "02", "03", "04", "05", "06", "07")


# every varied question's canonical parameters (the empty key's)
POOLS_BY_NAME = {name: question_params(lesson, name, "", "self-study") for lesson, pools in POOLS.items()
                 for name in pools}


def hidden(lesson):
    return importlib.import_module(f"qkv_grading.lesson{lesson}")


def wrong_value(correct):
    if isinstance(correct, str):
        return "a" if correct != "a" else "b"
    return float(correct) * 1.5 + 1.0


@pytest.fixture
def graded_class(monkeypatch):
    monkeypatch.delenv("QKV_SELF_STUDY", raising=False)
    monkeypatch.delenv("QKV_AUTOGRADE", raising=False)


@pytest.fixture
def self_study(monkeypatch):
    monkeypatch.setenv("QKV_SELF_STUDY", "1")
    monkeypatch.delenv("QKV_AUTOGRADE", raising=False)


def test_in_a_graded_class_a_wrong_answer_is_only_recorded(graded_class, capsys):
    answered_choice("a", ["a", "b", "c", "d"], "lookup_on_miss")   # right answer: "c"
    answered_number(3.0, "blended_output")
    out = capsys.readouterr().out
    assert out.count("answer recorded") == 2 and "graded when the notebook is collected" in out
    assert "right" not in out


def test_in_self_study_mode_a_right_answer_says_so_with_its_explanation(self_study, capsys):
    answered_choice("c", ["a", "b", "c", "d"], "lookup_on_miss")
    out = capsys.readouterr().out
    assert out.startswith("lookup_on_miss: right ('c').")
    assert hidden("01").EXPLANATIONS["lookup_on_miss"] in out


def test_in_self_study_mode_a_wrong_answer_fails_with_its_explanation(self_study):
    with pytest.raises(Hint, match=r"`blended_output` = 3 is not right\. Scores q\.k are x and 0"):
        answered_number(3.0, "blended_output")
    with pytest.raises(Hint, match="not right"):
        answered_choice("a", ["a", "b", "c", "d"], "lookup_on_miss")


def test_the_form_is_checked_before_the_verdict(self_study):
    with pytest.raises(Hint, match="not answered yet"):
        answered_choice(None, ["a", "b"], "lookup_on_miss")
    with pytest.raises(Hint, match="must be one of"):
        answered_choice("e", ["a", "b", "c", "d"], "lookup_on_miss")


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_self_check_has_an_explanation_and_the_verdict_agrees_with_the_hidden_grading(lesson, self_study, capsys):
    module = hidden(lesson)
    assert set(module.EXPLANATIONS) == set(module.ANSWERS), "one explanation per self-check question"
    for name in module.ANSWERS:
        correct = expected_answer(f"{lesson}-", name, module.ANSWERS, {} if name not in POOLS_BY_NAME
                                  else POOLS_BY_NAME[name])  # the canonical numbers: no key typed
        assert module.EXPLANATIONS[name].strip(), name
        module.answer(name, correct)                       # the hidden test accepts it ...
        if isinstance(correct, str):
            answered_choice(correct, ["a", "b", "c", "d"], name)
        else:
            answered_number(correct, name)
        assert f"{name}: right" in capsys.readouterr().out  # ... and so does self-study mode
        wrong = wrong_value(correct)
        with pytest.raises(Hint):
            module.answer(name, wrong)
        with pytest.raises(Hint, match="not right"):
            (answered_choice(wrong, ["a", "b", "c", "d"], name) if isinstance(correct, str)
             else answered_number(wrong, name))


def test_without_the_autograde_folder_self_study_falls_back_to_recording_and_says_why(self_study, monkeypatch,
                                                                                      tmp_path, capsys):
    monkeypatch.setenv("QKV_AUTOGRADE", str(tmp_path / "no-autograde-here"))
    answered_choice("a", ["a", "b", "c", "d"], "lookup_on_miss")
    out = capsys.readouterr().out
    assert "answer recorded" in out and "Self-study mode is on, but the course's autograde/ folder is not" in out


def test_self_study_finds_the_answers_from_a_notebook_folder_of_the_checkout(self_study, monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks" / "01-lookup")
    assert pathlib.Path(checking._answer_key_folder()) == ROOT / "autograde" / "qkv_grading"
    blended_output = checking._answer_key()["blended_output"][0]  # a function of the student's numbers
    assert np.isclose(blended_output({"x": 2, "v1": 10, "T": 1}), 10 * np.exp(2) / (np.exp(2) + 1))


def test_binder_launch_switches_self_study_on():
    start = (ROOT / "start").read_text()
    assert "export QKV_SELF_STUDY=1" in start and start.rstrip().endswith('exec "$@"')


@pytest.mark.parametrize("mode, answer, expected", [("1", '"a"', "is not right"), ("1", '"c"', "lookup_on_miss: right"),
                                                    ("", '"a"', "answer recorded")])
def test_a_student_kernel_on_the_release_notebook(mode, answer, expected, monkeypatch):
    """End to end, as on Binder: a kernel in notebooks/01-lookup runs the release's import cell, the answer and its
    check cell; the verdict depends only on QKV_SELF_STUDY."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    folder = ROOT / "notebooks" / "01-lookup"
    release = nbformat.read(folder / "01-lookup.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in release.cells]
    answer_cell = release.cells[ids.index("answer_lookup_on_miss")]
    answer_cell.source = f"lookup_on_miss = {answer}"
    cells = [c for c in release.cells if c.cell_type == "code"][:1] + [answer_cell,
                                                                     release.cells[ids.index("test_answer_lookup_on_miss")]]
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=release.metadata)
    monkeypatch.setenv("QKV_SELF_STUDY", mode)   # the kernel inherits it, as on Binder from `start`
    monkeypatch.delenv("QKV_AUTOGRADE", raising=False)
    client = NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()
    except CellExecutionError as error:
        text = str(error)
    else:
        text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    assert expected in text, text
