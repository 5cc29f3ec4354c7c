"""The grader's side of the self-check variants (issue 43), piece by piece: the roster from Canvas's and Moodle's
exports, the typed key read without running the notebook, the true key chosen for each LMS, the kernel's preamble,
the edition's copy of the term's settings and its lock of the pools. The whole route: tests/test_variants_class.py."""
import csv
import json
import sys

import nbformat
import pytest
from traitlets.config import Config

from lessons import ROOT

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.grading import variants  # noqa: E402
from qkv_autograde.intake import roster  # noqa: E402
from qkv_autograde.reports.variant_rows import edit_distance  # noqa: E402
from qkv_edition import variants as edition_variants  # noqa: E402


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def test_canvas_gradebook_maps_user_ids_to_logins(tmp_path):
    export = write_csv(tmp_path / "gradebook.csv", [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lesson 3 (123)"],
        ["    Points Possible", "", "", "", "", "10"],
        ["Smith, Jane", "20001", "900001", "JSmith", "A", ""],
        ["Student, Test", "20002", "", "", "A", ""]])           # Canvas's test student: no login
    assert roster.store(tmp_path, export, "03-scaling") == 1
    known = roster.load(tmp_path)
    assert roster.key_of(known, {"lms": "canvas"}, "20001", "03-scaling") == ("jsmith", "Smith, Jane")
    assert roster.key_of(known, {"lms": "canvas"}, "20002", "03-scaling") is None
    assert (tmp_path / roster.ROSTER_FILE).stat().st_mode & 0o077 == 0  # class data: the instructor's alone


def test_moodle_worksheet_maps_participants_of_one_lesson_to_emails(tmp_path):
    export = write_csv(tmp_path / "worksheet.csv", [
        ["Identifier", "Full name", "Email address", "Status", "Grade"],
        ["Participant 1001", "John Smith", "J.Smith@uni.example", "Submitted", ""]])
    roster.store(tmp_path, export, "04-masking")
    known = roster.load(tmp_path)
    assert roster.key_of(known, {"lms": "moodle"}, "1001", "04-masking") == ("j.smith@uni.example", "John Smith")
    assert roster.key_of(known, {"lms": "moodle"}, "1001", "05-heads") is None  # participant ids are per assignment


def test_other_lms_and_the_exchange_use_the_id_as_the_key():
    assert roster.key_of({}, {"lms": "blackboard", "name": "Ann"}, "ann01", "01-lookup") == ("ann01", "Ann")
    assert roster.key_of({}, {}, "Bob", "01-lookup") == ("bob", "")  # the exchange: no .lms.json


def test_an_export_of_another_kind_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(ValueError, match="neither Canvas's gradebook export"):
        roster.read_export(write_csv(tmp_path / "x.csv", [["Name", "Score"], ["a", "1"]]), "01-lookup")


@pytest.mark.parametrize("source,typed", [
    ('from qkv.your_numbers import numbers\n\nSTUDENT = " JSmith "\nmy_numbers = numbers("03-scaling", STUDENT)',
     "jsmith"),
    ('STUDENT = ""', ""),
    ("STUDENT = input()", None),                      # never run: not a plain string, so unreadable
    ("STUDENT = 'a' +", None),
    ("STUDENT = 'x' * 1", None)])
def test_the_typed_key_is_read_as_a_literal_never_run(source, typed):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.cells[0]["id"] = "your_key"
    assert variants.typed_key(nb) == typed


def test_the_kernel_gets_the_key_as_a_quoted_literal():
    code = variants.preamble({"key": "o'neil\"; import os", "salt": "term"})
    namespace = {}
    exec(code, namespace)  # noqa: S102 - the grader's own code
    import os
    assert os.environ.pop("QKV_VARIANT_KEY") == "o'neil\"; import os" and os.environ.pop("QKV_VARIANT_SALT") == "term"
    exec(variants.preamble(None), {})  # variants off: the canonical numbers, whatever the notebook typed
    assert os.environ.pop("QKV_VARIANT_KEY") == "" and os.environ.pop("QKV_VARIANT_SALT") == "self-study"


def test_near_misses_are_counted_in_edits():
    assert edit_distance("jsmith", "jsmtih") == 2 and edit_distance("jsmith", "jsmith") == 0
    assert edit_distance("jsmith", "ann") > 2


def test_the_edition_carries_the_term_and_locks_the_pools(tmp_path):
    root = tmp_path / "course"
    (root / "autograde").mkdir(parents=True)
    (root / "autograde" / "nbgrader_config.py").write_text(
        'c = get_config()\nc.Variants.salt = "qkv-2026-autumn"\nc.Variants.lessons = ["03-scaling"]\n')
    stage = tmp_path / "edition"
    (stage / "source_lib" / "qkv" / "your_numbers").mkdir(parents=True)
    edition_variants.carry(stage, root)
    carried = json.loads((stage / "source_lib" / "qkv" / "your_numbers" / "config.json").read_text())
    assert carried["salt"] == "qkv-2026-autumn" and carried["lessons"] == ["03-scaling"]
    assert variants.changed_pools(root / "autograde", "03-scaling", "qkv-2026-autumn") == []
    assert variants.changed_pools(root / "autograde", "03-scaling", "another-term") == ["the salt"]


def test_with_variants_off_the_edition_varies_no_lesson(tmp_path):
    root = tmp_path / "course"
    (root / "autograde").mkdir(parents=True)
    (root / "autograde" / "nbgrader_config.py").write_text("c = get_config()\n")
    stage = tmp_path / "edition"
    (stage / "source_lib" / "qkv" / "your_numbers").mkdir(parents=True)
    edition_variants.carry(stage, root)
    assert not (root / "autograde" / variants.LOCK_FILE).exists()
    carried = json.loads((stage / "source_lib" / "qkv" / "your_numbers" / "config.json").read_text())
    assert carried == {"salt": "", "lessons": []}  # a class edition: every key shows the canonical numbers


def test_a_canvas_submission_without_a_roster_row_stops_grading_naming_the_file(tmp_path):
    folder = tmp_path / "submitted" / "20001" / "03-scaling"
    folder.mkdir(parents=True)
    (folder / ".lms.json").write_text(json.dumps({"lms": "canvas", "user_id": "20001", "name": "Jane"}))
    settings = variants.Variants(salt="term", lessons=["03-scaling"])
    assert "ROSTER=<Canvas gradebook export or Moodle grading worksheet>" in variants.check(
        tmp_path, "03-scaling", settings, force=True)
    assert variants.check(tmp_path, "04-masking", settings) is None  # a lesson without variants needs none
    with pytest.raises(SystemExit, match="have no row in roster.csv"):
        variants.stop_without_roster(tmp_path, "03-scaling",
                                     Config(Variants={"salt": "term", "lessons": ["03-scaling"]}))


def assign(tmp_path, student="20001", typed="jsmith", trust=False):
    """AssignVariant on a Canvas submission that the (empty) roster does not name; its nb.metadata.qkv.variant."""
    folder = tmp_path / "submitted" / student / "03-scaling"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".lms.json").write_text(json.dumps({"lms": "canvas", "user_id": student, "name": "Jane"}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"STUDENT = {typed!r}")])
    nb.cells[0]["id"] = "your_key"
    config = Config(Variants={"salt": "term", "lessons": ["03-scaling"], "trust_typed_keys": trust},
                    CourseDirectory={"root": str(tmp_path)})
    resources = {"nbgrader": {"assignment": "03-scaling", "student": student}}
    nb, _ = variants.AssignVariant(config=config).preprocess(nb, resources)
    return nb.metadata["qkv"]["variant"]


def test_trusted_typed_keys_grade_a_submission_without_a_roster_row_for_its_typed_key(tmp_path, monkeypatch):
    monkeypatch.delenv(variants.TRUST_VARIABLE, raising=False)
    with pytest.raises(ValueError, match="no row in roster.csv"):
        assign(tmp_path)
    assert assign(tmp_path, trust=True) == {"key": "jsmith", "salt": "term", "typed": "jsmith", "unverified": True}
    assert assign(tmp_path, "20002", typed="", trust=True)["key"] == "20002"  # none typed: the LMS id
    monkeypatch.setenv(variants.TRUST_VARIABLE, "1")  # make grade TRUST_TYPED_KEYS=1
    assert assign(tmp_path)["unverified"] is True
    assert variants.check(tmp_path, "03-scaling", variants.Variants(salt="term", lessons=["03-scaling"])) is None
    monkeypatch.setenv(variants.TRUST_VARIABLE, "0")
    assert "TRUST_TYPED_KEYS=1" in variants.check(tmp_path, "03-scaling",
                                                  variants.Variants(salt="term", lessons=["03-scaling"]))


def test_an_unverified_key_is_reported_with_the_classmates_who_typed_the_same(tmp_path):
    from qkv_autograde.reports import variant_rows
    records = {"20001": {"key": "jsmith", "typed": "jsmith", "unverified": True},
               "20002": {"key": "jsmith", "typed": "jsmith", "unverified": True},
               "20003": {"key": "ann", "typed": "ann"}}
    for student, record in records.items():
        folder = tmp_path / "autograded" / student / "03-scaling"
        folder.mkdir(parents=True)
        nb = nbformat.v4.new_notebook(metadata={"qkv": {"variant": dict(record, salt="term", answers={})}})
        nbformat.write(nb, folder / "03-scaling.ipynb")
    rows = variant_rows.class_rows(tmp_path, "03-scaling")
    assert [r["name"] for r in rows["20001"]] == ["variant key unverified"]
    assert "graded for the key its notebook typed" in rows["20001"][0]["detail"]
    assert "the same key as 20002" in rows["20001"][0]["detail"]
    assert "the same key as 20001" in rows["20002"][0]["detail"]
    assert "20003" not in rows
