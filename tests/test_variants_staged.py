"""A submission graded again from the grader's staged copy after its submitted/ folder went (issue 43): nbgrader
grades every folder of .staged/, and without submitted/<id>/<lesson>/.lms.json the grader took the LMS id for the
login (the exchange's rule), so a Canvas or Moodle student was graded for the numbers of "20001", not their own.
The roster's row for the id now gives the true key; with none, the id is graded and the report says so."""
import csv
import json
import sys

import nbformat
from traitlets.config import Config

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.grading import variants  # noqa: E402
from qkv_autograde.intake import roster  # noqa: E402
from qkv_autograde.reports import variant_rows  # noqa: E402

LESSON, SALT = "03-scaling", "term"


def write_roster(root, rows):
    with open(root / roster.ROSTER_FILE, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, roster.COLUMNS)
        writer.writeheader()
        writer.writerows(dict(zip(roster.COLUMNS, row)) for row in rows)


def assign(root, student="20001", typed="jsmith", submitted=False):
    """AssignVariant on `student`'s notebook staged in .staged/ (and collected in submitted/ when `submitted`)."""
    for tree in (".staged", "submitted") if submitted else (".staged",):
        (root / tree / student / LESSON).mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"STUDENT = {typed!r}")])
    nb.cells[0]["id"] = "your_key"
    config = Config(Variants={"salt": SALT, "lessons": [LESSON]}, CourseDirectory={"root": str(root)})
    resources = {"nbgrader": {"assignment": LESSON, "student": student}}
    nb, _ = variants.AssignVariant(config=config).preprocess(nb, resources)
    return nb.metadata["qkv"]["variant"]


def test_a_staged_canvas_submission_without_its_submitted_folder_is_graded_for_the_roster_s_key(tmp_path):
    write_roster(tmp_path, [("canvas", "", "20001", "jsmith", "Jane Smith")])
    assert assign(tmp_path, typed="")["key"] == "jsmith"  # was "20001": the LMS id taken for the login


def test_a_staged_moodle_submission_is_graded_for_the_roster_s_key_of_its_lesson(tmp_path):
    write_roster(tmp_path, [("moodle", LESSON, "1001", "j.smith@uni.example", "Jane Smith"),
                            ("moodle", "04-masking", "20001", "someone@uni.example", "Someone")])
    assert assign(tmp_path, "1001", typed="")["key"] == "j.smith@uni.example"


def test_a_staged_submission_no_roster_row_names_is_graded_for_its_id_and_reported(tmp_path):
    write_roster(tmp_path, [("canvas", "", "20002", "ann", "Ann")])
    variant = assign(tmp_path, typed="jsmith")
    assert variant["key"] == "20001" and variant["unverified"] and variant["staged_only"]
    folder = tmp_path / "autograded" / "20001" / LESSON
    folder.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(metadata={"qkv": {"variant": dict(variant, answers={})}}),
                   folder / f"{LESSON}.ipynb")
    rows = variant_rows.class_rows(tmp_path, LESSON)["20001"]
    unverified = next(r["detail"] for r in rows if r["name"] == variant_rows.UNVERIFIED)
    assert "submitted/20001/03-scaling is gone" in unverified and "no roster row names 20001" in unverified


def test_the_exchange_s_collected_submission_still_uses_its_id_as_the_key(tmp_path):
    variant = assign(tmp_path, "bob", typed="bob", submitted=True)  # no .lms.json: nbgrader's exchange
    assert variant == {"key": "bob", "salt": SALT, "typed": "bob"}


def test_a_collected_canvas_submission_still_needs_its_roster_row(tmp_path):
    (tmp_path / "submitted" / "20001" / LESSON).mkdir(parents=True)
    (tmp_path / "submitted" / "20001" / LESSON / ".lms.json").write_text(json.dumps({"lms": "canvas"}))
    write_roster(tmp_path, [("canvas", "", "20001", "jsmith", "Jane Smith")])
    assert assign(tmp_path, typed="")["key"] == "jsmith"
