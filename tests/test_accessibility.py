"""Issue 44: what a student or an instructor reads passes axe-core's WCAG 2.1 A and AA rules, in chromium, for
everything the course owns: lesson 01 solved and exported with nbconvert's lab template (its figures, printed
tables and texts), a feedback page as `make grade` writes it, and the instructor's item analysis and anomaly
report. What belongs to nbconvert or JupyterLab (the prompts, the code's syntax colours of the lab theme) is
printed apart, never asserted away silently: see tests/axe.py for how an element is attributed.

The lesson runs once for the module (about 3 s): its outputs feed the exported page and the feedback page. The
widgets are checked live in JupyterLab (tests/test_browser.py): an exported page draws them only with a script
from a CDN, which these tests, offline, never load.
"""
import os
import pathlib
import sys

import nbformat
import pytest

import axe
from axe import assert_none_of_the_courses, audited
from lessons import RELEASE, ROOT, solved_release

LESSON = "01-lookup"

if axe.skip_reason():
    pytest.skip(axe.skip_reason(), allow_module_level=True)

sys.path.insert(0, str(ROOT / "autograde"))


@pytest.fixture(scope="module")
def solved():
    """Lesson 01 as a student who solved it ran it (a front end's kernel: the widgets draw)."""
    from nbclient import NotebookClient

    nb = solved_release(LESSON)
    saved = {name: os.environ.pop(name, None) for name in ("QKV_NO_FRONT_END", "QKV_AUTOGRADE")}
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(RELEASE / LESSON)}}).execute()
    finally:
        os.environ.update({name: value for name, value in saved.items() if value is not None})
    return nb


@pytest.fixture(scope="module")
def browser():
    with axe.chromium() as browser:
        yield browser


def test_an_exported_lesson_with_its_figures_passes(solved, browser, tmp_path):
    page = axe.exported_lesson(solved, tmp_path / "lesson.html")
    assert page.count('<img alt="Figure: ') >= 2, "the lesson's figures, with their alt text, are not on the page"
    assert_none_of_the_courses(audited(browser, tmp_path / "lesson.html", axe.EXPORT_UPSTREAM), "exported lesson 01")


def feedback_page(nb):
    """The page nbgrader's generate_feedback writes with the course's configuration (autograde/nbgrader_config.py),
    for a notebook with full points."""
    import nbgrader
    from qkv_autograde.reports.feedback_html import TEMPLATES, FeedbackExporter

    nbgrader_templates = pathlib.Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    nb, total = nbformat.from_dict(nb), 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["score"] = meta.get("points", 0)
            total += meta["score"]
    exporter = FeedbackExporter(
        template_name="qkv_feedback", extra_template_basedirs=[TEMPLATES, str(nbgrader_templates / "templates")],
        extra_template_paths=[str(nbgrader_templates / "static" / "node_modules" / "bootstrap" / "dist" / "css")])
    resources = {"nbgrader": {"notebook": LESSON, "score": total, "max_score": total, "late_penalty": 0}}
    return exporter.from_notebook_node(nb, resources=resources)[0]


def test_a_feedback_page_passes(solved, browser, tmp_path):
    page = feedback_page(solved)
    assert '<html lang="en">' in page and page.count("<h1") == 1
    (tmp_path / "feedback.html").write_text(page)
    assert_none_of_the_courses(audited(browser, tmp_path / "feedback.html"), "feedback page")


def an_item_analysis():
    items = [{"notebook": LESSON, "name": f"test_{name}", "max_score": 2.0, "passed": passed,
              "pass_share": passed / 12, "mean": passed / 6, "discrimination": discrimination,
              "hints": [("the rows do not sum to 1", 3)], "failures_without_hint": 1,
              "flags": ["passed by few"] if passed < 2 else []}
             for name, passed, discrimination in (("softmax", 1, 0.4), ("soft_lookup", 10, 0.2),
                                                  ("hard_lookup", 12, None))]
    return {"lesson": LESSON, "items": items, "students": [f"s{i}" for i in range(12)], "missing": False,
            "totals": [i % 7 for i in range(12)], "max_total": 6.0, "similarities": [0.1 * (i % 9) for i in range(66)]}


def an_anomaly_report(folder, monkeypatch):
    from qkv_autograde.reports import report

    note = {"name": "copied from a classmate", "detail": "82% of uncommon code shared with bob", "rounds": ["round 1"],
            "evidence": [{"left_title": "alice", "right_title": "bob", "left": [(3, "return x")],
                          "right": [(4, "return x")]}]}
    rows = [{"student": "alice", "name": "Alice", "notebook": LESSON, "score": 4.0, "max_score": 10.0,
             "anomalies": [note], "collected": ["round 1, export.zip"], "hand_grading": ["written_trophy"]},
            {"student": "bob", "name": "", "notebook": LESSON, "score": 10.0, "max_score": 10.0, "anomalies": [],
             "collected": [], "hand_grading": []}]
    monkeypatch.setattr(report, "rows", lambda *args, **kwargs: rows)
    monkeypatch.setattr(report, "record_gradings", lambda *args, **kwargs: None)
    report.write(str(folder), None, LESSON, None)
    return folder / f"anomalies-{LESSON}.html"


def test_the_instructors_item_analysis_and_anomaly_report_pass(browser, tmp_path, monkeypatch):
    from qkv_autograde.reports import item_analysis

    (tmp_path / "items.html").write_text(item_analysis.render(an_item_analysis()))
    for path in (tmp_path / "items.html", an_anomaly_report(tmp_path, monkeypatch)):
        assert_none_of_the_courses(audited(browser, path), path.name)
