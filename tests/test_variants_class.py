"""A class graded with per-student self-check numbers (issue 43; design ../shared/design/variants.md, A2-A4, A7):
a Canvas class of lesson 03 (2 numeric and 2 choice self-checks) graded ONCE through `make grade LESSON=03-scaling
SUBMISSIONS=<Canvas download> ROSTER=<Canvas gradebook export>`, read by every test below (module fixture).

The class: honest students (answers computed from their numbers, letters read off their own options), honest
students making every catalogued mistake of their own numbers or typing the lesson text's canonical numbers, five
copiers handing in a classmate's literal answers, three who typed a classmate's login and one a typo of their own
(computing their answers all the same), one who typed none. Exercises are left blank except for two perfect
students, whose notebooks (different keys) give the figures A7 compares. Grading costs ~1 s of kernel per blank
notebook, so the class stays cheap."""
import csv
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from lessons import ROOT, copy_course, solved_release
from qkv.your_numbers import question_params, shown_letter
from test_class_intake import entry, make_zip
from test_grading_sandbox import with_fast_limits

sys.path.insert(0, str(ROOT / "autograde"))
from qkv_autograde.grading import variants  # noqa: E402
from qkv_autograde.reports import variant_rows  # noqa: E402
from qkv_grading.mistakes import MISTAKES  # noqa: E402

LESSON = "03-scaling"
SALT = "qkv-test-term"
BIN = pathlib.Path(sys.executable).parent
pytestmark = pytest.mark.grading_class
NUMERIC = {"variance_at_128": lambda p: p["d_k"], "entropy_uniform_8": lambda p: __import__("math").log(p["n"])}
CHOICE = {"why_scale": "b", "without_scaling": "c"}
SELF_CHECKS = [*CHOICE, *NUMERIC]
COMPUTED = {"variance_at_128": 'variance_at_128 = my_numbers.params["variance_at_128"]["d_k"]',
            "entropy_uniform_8": 'entropy_uniform_8 = float(np.log(my_numbers.params["entropy_uniform_8"]["n"]))'}


def env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def login(i):
    return f"s{i:02d}x"


def user_id(i):
    return str(20000 + i)


# i -> (kind, detail); honest 1..15 (1 and 2 fully solved), mistakes 16..21, copiers 22..26 (copying 3..7),
# classmate's key 27..29 (typing 8..10's), typo 30, no key 31
CLASS = {i: ("honest", None) for i in range(1, 16)}
CLASS.update({15 + m: ("mistake", m) for m in range(1, 6)})
CLASS[21] = ("canonical", None)
CLASS.update({21 + c: ("copier", 2 + c) for c in range(1, 6)})
CLASS.update({26 + k: ("classmate key", 7 + k) for k in range(1, 4)})
CLASS[30] = ("typo", None)
CLASS[31] = ("no key", None)


def params(i, name):
    return question_params(LESSON, name, login(i), SALT)


def literal_answers(i):
    """Student i's right answers, as literals (what a copier hands in)."""
    answers = {name: repr(float(fn(params(i, name)))) for name, fn in NUMERIC.items()}
    answers.update({name: repr(shown_letter(params(i, name)["order"], right)) for name, right in CHOICE.items()})
    return answers


def submission(i):
    kind, detail = CLASS[i]
    nb = solved_release(LESSON, None if i in (1, 2) else [])
    typed = {"classmate key": login(detail or 0), "typo": login(i)[:-1] + "z", "no key": ""}.get(kind, login(i))
    answers = {name: COMPUTED[name] for name in NUMERIC}
    answers.update({name: f"{name} = {shown_letter(params(i, name)['order'], right)!r}"
                    for name, right in CHOICE.items()})
    if kind == "mistake":  # catalogued mistake number `detail` of the student's own numbers, where it has one
        for name in NUMERIC:
            mistakes = MISTAKES[name]
            answers[name] = f"{name} = {float(mistakes[(detail - 1) % len(mistakes)][1](params(i, name)))!r}"
        answers["why_scale"] = "why_scale = 'a'"
    elif kind == "canonical":  # the numbers of the lesson's text instead of the student's own
        answers.update(variance_at_128="variance_at_128 = 128", entropy_uniform_8="entropy_uniform_8 = 2.0794")
    elif kind == "copier":
        answers = {name: f"{name} = {value}" for name, value in literal_answers(detail).items()}
    for cell in nb.cells:
        if cell.get("id") == "your_key":
            cell.source = cell.source.replace('STUDENT = ""', f"STUDENT = {typed!r}")
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.removeprefix("answer_") in answers:
            cell.source = answers[grade_id.removeprefix("answer_")]
    return nb


def canvas_files(parent):
    entries = [entry(f"student{i:02d}_{user_id(i)}_{600000 + i}_{LESSON}.ipynb",
                     nbformat.writes(submission(i)).encode()) for i in CLASS]
    export = make_zip(parent / "submissions.zip", entries)
    gradebook = parent / "gradebook.csv"
    with gradebook.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lesson 3 (3)"])
        writer.writerow(["    Points Possible", "", "", "", "", "10"])
        writer.writerows([f"Student {i:02d}", user_id(i), f"9{i:04d}", login(i).upper(), "A", ""] for i in CLASS)
    return export, gradebook


def make_grade(course, *args):
    return subprocess.run(["make", "-f", str(ROOT / "Makefile"), "-C", str(course), "grade", f"LESSON={LESSON}",
                           f"VENV={ROOT / '.venv'}", *args], capture_output=True, text=True, timeout=1800,
                          env=env())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    parent = tmp_path_factory.mktemp("variants")
    instructor = copy_course(parent)
    course = instructor.parent
    for name in ("environment.yml", "source_lib/pyproject.toml"):  # make's prerequisites of the installed venv
        (course / name).parent.mkdir(exist_ok=True)
        (course / name).symlink_to(ROOT / name)
    with_fast_limits(instructor)
    with (instructor / "nbgrader_config.py").open("a") as config:  # no PNGs: the figures' text outputs stay
        config.write(f"\nc.Variants.salt = {SALT!r}\nc.Variants.lessons = [{LESSON!r}]\n"
                     "c.SandboxedExecute.render_figures = False\n")
    variants.write_lock(instructor, SALT)  # what make student-edition writes
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force"], cwd=instructor, env=env(),
                   check=True, capture_output=True)
    export, gradebook = canvas_files(parent)
    done = make_grade(course, f"SUBMISSIONS={export}", f"ROSTER={gradebook}", "JOBS=2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return instructor


def scores(instructor):
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        for sub in gb.assignment_submissions(LESSON):
            out[sub.student_id] = {g.name.removeprefix("test_answer_"): g.score for nb in sub.notebooks
                                   for g in nb.grades if g.name.startswith("test_answer_")}
    return out


def anomalies(instructor):
    with (instructor / f"anomalies-{LESSON}.csv").open() as f:
        return {row["student"]: row["details"] for row in csv.DictReader(f)}


def self_check_share(row):
    return sum(row[name] for name in SELF_CHECKS) / len(SELF_CHECKS)


def test_honest_students_get_every_self_check_point_and_no_flag(graded):
    got, rows = scores(graded), anomalies(graded)
    for i, (kind, _) in CLASS.items():
        if kind == "honest":
            assert self_check_share(got[user_id(i)]) == 1, (i, got[user_id(i)])
            assert "variant" not in rows.get(user_id(i), "") and "fit" not in rows.get(user_id(i), ""), rows[user_id(i)]


def test_no_honest_mistake_is_flagged_as_copying(graded):
    rows = anomalies(graded)
    for i, (kind, _) in CLASS.items():
        if kind in ("honest", "mistake", "canonical"):
            assert "answers fit a classmate" not in rows.get(user_id(i), ""), (i, rows[user_id(i)])


def test_copiers_keep_little_and_are_named_with_their_source(graded):
    # a copied letter is still right when the two students' orders put the right option at the same letter (1 in
    # 4 per question): one copier of five may keep both choice points, so the bound is on the copiers together
    got, rows = scores(graded), anomalies(graded)
    kept = []
    for i, (kind, source) in CLASS.items():
        if kind == "copier":
            row = got[user_id(i)]
            assert sum(row[name] for name in NUMERIC) == 0, (i, row)
            assert f"answers fit a classmate's variant: Student {source:02d}'s numbers fit" in rows[user_id(i)]
            kept.append(self_check_share(row))
    assert len(kept) >= 5 and sum(kept) / len(kept) <= 0.35, kept


def test_a_classmate_s_key_is_named_and_changes_nothing_in_the_score(graded):
    got, rows = scores(graded), anomalies(graded)
    for i, (kind, whose) in CLASS.items():
        if kind == "classmate key":
            assert f"variant key differs: another student's key: Student {whose:02d}" in rows[user_id(i)]
            assert self_check_share(got[user_id(i)]) == 1  # computed answers and letters right for the true key


def test_a_typo_is_a_near_miss_and_a_missing_key_is_named_and_both_computed_answers_pass(graded):
    got, rows = scores(graded), anomalies(graded)
    assert "variant key differs: near miss" in rows[user_id(30)]
    assert "variant key missing" in rows[user_id(31)]
    for i in (30, 31):
        assert sum(got[user_id(i)][name] for name in NUMERIC) == len(NUMERIC)


def test_figures_are_the_same_under_two_keys(graded):
    # A7: every output outside the key cell, the question display cells and the self-check cells is identical
    def outputs(i):
        nb = nbformat.read(graded / "autograded" / user_id(i) / LESSON / f"{LESSON}.ipynb", as_version=4)
        return [re.sub(r'"model_id": "[0-9a-f]+"', "", json.dumps(c.get("outputs", []), sort_keys=True))
                for c in nb.cells  # a widget's model id is new in every kernel
                if c.cell_type == "code" and c.get("id") != "your_key" and not c.get("id", "").startswith("show_")
                and "answer" not in c.metadata.get("nbgrader", {}).get("grade_id", "")]
    assert outputs(1) == outputs(2)
    # figures show as their text alternative ("Figure: ...", issue 44) when the grader renders no PNG
    assert sum('"Figure: ' in o for o in outputs(1)) >= 5 and sum("stdout" in o for o in outputs(1)) >= 5


def test_feedback_shows_the_student_s_own_numbers_never_a_classmate(graded):
    page = next((graded / "feedback" / user_id(27) / LESSON).glob("*.html")).read_text()
    mine = params(27, "variance_at_128")["d_k"]
    assert f"Your numbers: d_k = {mine}." in page
    assert "Student 08" not in page


def test_a_pool_changed_after_the_edition_stops_make_grade_unless_forced(graded, tmp_path):
    lock = json.loads((graded / variants.LOCK_FILE).read_text())
    lock["lessons"][LESSON]["variance_at_128"] = "0" * 64
    (graded / variants.LOCK_FILE).write_text(json.dumps(lock))
    try:
        for command in ("qkv_autograde.grading.variants", "qkv_autograde"):  # the check alone, and make grade's
            refused = subprocess.run([sys.executable, "-m", command, LESSON], cwd=graded, capture_output=True,
                                     text=True)
            assert refused.returncode != 0 and "03-scaling/variance_at_128 changed after the edition" in \
                refused.stderr, (command, refused.stderr[-2000:])
        settings = variants.Variants(salt=SALT, lessons=[LESSON])
        assert variants.check(graded, LESSON, settings, force=True) is None  # FORCE_VARIANTS=1
    finally:
        variants.write_lock(graded, SALT)


def test_each_student_s_numbers_and_expected_answers_go_to_the_history_once(graded):
    def variant_events():
        lines = (graded / f"history-{LESSON}.jsonl").read_text().splitlines()
        return [r for r in map(json.loads, lines) if r.get("event") == "variant"]
    before = variant_events()
    assert {r["student"] for r in before} == {user_id(i) for i in CLASS}
    record = next(r for r in before if r["student"] == user_id(27))  # typed a classmate's key: graded for its own
    assert record["params"]["variance_at_128"] == params(27, "variance_at_128")
    assert record["expected"]["variance_at_128"] == params(27, "variance_at_128")["d_k"]
    # the record is written once: the report, written again, appends nothing while nothing changed

    variant_rows.class_rows(graded, LESSON)
    assert variant_events() == before
    assert "variant changed since first grading" not in (graded / f"anomalies-{LESSON}.csv").read_text()


def test_item_analysis_groups_the_answers_by_canonical_option_and_kind(graded):
    page = (graded / f"items-{LESSON}.html").read_text()
    row = page[page.index("test_answer_why_scale</td>"):].split("</tr>")[0]  # the table's row, not a figure's text
    assert "× option (b)" in row and "× option (a)" in row  # the honest ones' right option; the mistaken ones' a
    row = page[page.index("test_answer_variance_at_128</td>"):].split("</tr>")[0]
    assert "× right" in row and "× mistake: sqrt(d_k), the typical size" in row
    assert "× the canonical numbers&#x27; answer" in row or "× the canonical numbers' answer" in row


REGRADED = (1, 22, 27)  # a perfect notebook, a copier and a classmate's key: every path of variant grading


def class_outputs(instructor):
    """What a grading hands out, as bytes: grades.csv, every feedback page and its digest, the variant records."""
    files = {"grades.csv": (instructor / "grades.csv").read_bytes()}
    for page in sorted((instructor / "feedback").glob(f"*/{LESSON}/*")):
        if page.is_file():
            files[str(page.relative_to(instructor))] = page.read_bytes()
    history = (instructor / f"history-{LESSON}.jsonl").read_text().splitlines()
    files["variant records"] = "\n".join(r for r in history if json.loads(r).get("event") == "variant").encode()
    return files


def test_regrading_gives_byte_identical_grades_feedback_and_variant_records(graded, tmp_path):
    # A5: `make grade FORCE=1` again, on a copy of the graded class (the module's fixture stays as graded) holding
    # the submissions of three students only (make grade regrades every submission it finds, so the others are
    # taken out of the copy's submitted/ and .staged/; their grades stay in the gradebook): the three's grades,
    # feedback pages and digests come out byte for byte as the first grading wrote them, and so does grades.csv
    # and every other page, written again from the gradebook
    course = tmp_path / "qkv"
    shutil.copytree(graded.parent, course, symlinks=True)
    instructor = course / "autograde"
    kept = {user_id(i) for i in REGRADED}
    for folder in [*(instructor / "submitted").iterdir(), *(instructor / ".staged").iterdir()]:  # collected, staged
        if folder.name not in kept:
            shutil.rmtree(folder)
    before = class_outputs(instructor)
    assert len([f for f in before if f.endswith(".html")]) == len(CLASS)
    done = make_grade(course, "FORCE=1", "JOBS=1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"graded {len(REGRADED)} submission(s)" in done.stdout, done.stdout[-2000:]
    after = class_outputs(instructor)
    assert after.keys() == before.keys()
    changed = [name for name in before if after[name] != before[name]]
    assert not changed, changed
