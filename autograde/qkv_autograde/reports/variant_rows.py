"""The anomaly report's rows about self-check variants (issue 43): whose key a notebook typed, and whose numbers
its answers fit. Read from each autograded notebook's metadata (qkv.variant: the true key, the salt, the typed key
and the answers as plain data, written by the grader), never from the notebook's code.

- "variant key missing": the notebook typed no key (it was graded for its true key all the same);
- "variant key differs": a near miss (edit distance <= 2, probably a typo), another student's key (named), or no
  student's key; with the score the answers would get for the typed key beside the one they got;
- "variant key unverified": no roster row named the submission's login (make grade TRUST_TYPED_KEYS=1), so it was
  graded for the key it typed; with the classmates whose submissions typed the same key;
- "answers fit a classmate's variant": answers wrong for the student's own numbers and right for one classmate's:
  at least 1 numeric question that neither a catalogued mistake of the student's own numbers nor the canonical
  (published) answer explains, and 1 more numeric question (explained or not) or 2 choice questions. The classmate
  and the questions are named.
"""
import bisect
import glob
import importlib
import os
import sys

import nbformat
from qkv.checking.questions import for_your_numbers, is_right
from qkv.lessons import lesson as lesson_row
from qkv.your_numbers import POOLS, question_params, variant_code

from qkv_autograde.intake import history, roster
from qkv_autograde.intake.lms_names import shown

MISSING, DIFFERS, FITS = "variant key missing", "variant key differs", "answers fit a classmate's variant"
UNVERIFIED = "variant key unverified"
CHANGED = "variant changed since first grading"


def _submissions(course_root, lesson, autograded):
    """{student: variant record} of every autograded notebook of `lesson` graded with variants on."""
    found = {}
    for path in sorted(glob.glob(os.path.join(course_root, autograded, "*", lesson, "*.ipynb"))):
        try:
            variant = nbformat.read(path, as_version=4).metadata.get("qkv", {}).get("variant")
        except (OSError, ValueError, AttributeError):  # an unreadable notebook: its own row says so elsewhere
            continue
        if isinstance(variant, dict) and isinstance(variant.get("key"), str):
            found[path.split(os.sep)[-3]] = variant
    return found


def _answers_table(lesson):
    module = importlib.import_module(lesson_row(lesson).hidden_tests)
    mistakes = importlib.import_module("qkv_grading.mistakes").MISTAKES
    return module.ANSWERS, mistakes


class Grader:
    """Is an answer right for a key's numbers (cached per key and question)."""

    def __init__(self, lesson, salt):
        self.lesson, self.salt = lesson, salt
        self.answers, self.mistakes = _answers_table(lesson)
        self.varied = POOLS.get(lesson, {})
        self._params = {}

    def params(self, key, name):
        if name not in self.varied:
            return None
        if (key, name) not in self._params:
            self._params[key, name] = question_params(self.lesson, name, key, self.salt)
        return self._params[key, name]

    def right(self, key, name, value):
        if value is None or name not in self.answers:
            return False
        correct, tolerance = self.answers[name]
        graded, correct = for_your_numbers(value, correct, self.params(key, name))
        if isinstance(correct, str):
            return graded == correct
        return not isinstance(value, str) and is_right(value, correct, tolerance)

    def score(self, key, answers):
        return sum(self.right(key, name, value) for name, value in answers.items())

    def honest_wrong(self, key, name, value):
        """A wrong numeric answer explained without a classmate: a catalogued mistake of the student's own
        numbers, or the canonical variant's right answer (the one the lesson's text and public solutions give)."""
        if isinstance(value, str):
            return False
        _, tolerance = self.answers[name]
        if self.right("", name, value):
            return True
        own = self.params(key, name)
        return any(wrong is not None and is_right(value, wrong, tolerance)
                   for wrong in (mistake(own) for _, mistake in self.mistakes.get(name, ())))

    def index(self, name, keys):
        """[(right answer, key)] of `keys` for the numeric question `name`, sorted (built once per class)."""
        if (name, keys) not in self._params:
            correct = self.answers[name][0]
            self._params[name, keys] = sorted(
                (float(correct(self.params(k, name))) if callable(correct) else correct, k) for k in keys)
        return self._params[name, keys]

    def is_numeric(self, name):
        return not isinstance(self.answers[name][0], str)


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def _fits(grader, mine, theirs_key, answers):
    """The questions where `answers` are wrong for `mine`, right for `theirs_key`, and not an honest mistake."""
    return [name for name, value in answers.items() if name in grader.varied
            and not grader.right(mine, name, value) and grader.right(theirs_key, name, value)
            and not grader.honest_wrong(mine, name, value)]


def _suspects(grader, key, answers, keys):
    """The classmates' keys for whose numbers at least one of `answers`' numeric values is right while wrong for
    `key`: only they can fit (a numeric question must), found through a sorted index of the class's right answers,
    so the report costs O(n log n) per question, not a comparison of every pair."""
    found = set()
    for name, value in answers.items():
        if name not in grader.varied or not grader.is_numeric(name) or isinstance(value, str) or value is None \
                or grader.right(key, name, value):
            continue
        index = grader.index(name, tuple(keys))
        tolerance = grader.answers[name][1]
        start = bisect.bisect_left(index, (value - tolerance - 1e-12,))
        for right, other in index[start:]:
            if right > value + tolerance + 1e-12:
                break
            found.add(other)
    found.discard(key)
    return sorted(found)


def _explained_fits(grader, mine, theirs_key, answers):
    """The numeric questions where `answers` are wrong for `mine` and right for `theirs_key`, yet an honest mistake
    of `mine` too (a catalogued mistake, the canonical answer): alone they accuse nobody; beside a fit they count."""
    return [name for name, value in answers.items() if name in grader.varied and grader.is_numeric(name)
            and not grader.right(mine, name, value) and grader.right(theirs_key, name, value)
            and grader.honest_wrong(mine, name, value)]


def fitting_classmates(grader, key, answers, keys):
    """[(classmate's key, the questions their numbers fit)] for the answers of the student graded for `key`, among
    the class's `keys`: at least 1 numeric question no honest mistake explains, and 1 more numeric question
    (explained or not) or 2 choice questions. A pool row's right answer can be another row's catalogued mistake
    (a factor 2 between two rows: "K only", "32-bit floats"), so a copied number is often explained; two numbers
    that both fit one classmate, one of them unexplained, are not an honest student's chance."""
    found = []
    for other_key in _suspects(grader, key, answers, keys):
        fits = _fits(grader, key, other_key, answers)
        numeric = sum(grader.is_numeric(name) for name in fits)
        explained = _explained_fits(grader, key, other_key, answers)
        if numeric >= 1 and (numeric + len(explained) >= 2 or len(fits) - numeric >= 2):
            found.append((other_key, sorted(fits + explained)))
    return found


def class_rows(course_root, lesson, autograded="autograded"):
    """{student: [anomaly]} for the variant rows above."""
    submissions = _submissions(course_root, lesson, autograded)
    if not submissions:
        return {}
    names = {key: name for (_, _, _), (key, name) in roster.load(course_root).items()}
    keys = {variant["key"]: student for student, variant in submissions.items()}
    holders = {}  # key -> the students graded for it: two when unverified keys coincide
    for student, variant in submissions.items():
        holders.setdefault(variant["key"], []).append(student)
    name_of_key = {key: shown(names.get(key) or student) for key, student in keys.items()}
    name_of_key.update({key: shown(name) for key, name in names.items() if name})
    graders, rows = {}, {}
    for student, variant in submissions.items():
        grader = graders.setdefault(variant["salt"], Grader(lesson, variant["salt"]))
        key, typed, answers = variant["key"], variant.get("typed"), variant.get("answers") or {}
        out = rows.setdefault(student, [])
        total = len(grader.answers)
        if variant.get("unverified"):
            same = [shown(other) for other in holders[key] if other != student]
            why = (f"submitted/{shown(student)}/{lesson} is gone and no roster row names {shown(student)}: graded "
                   f"again from the staged copy for the numbers of that id" if variant.get("staged_only") else
                   "no roster row names this submission (TRUST_TYPED_KEYS=1): graded for the key its notebook typed")
            out.append({"name": UNVERIFIED, "detail": f"{why}, which nothing verifies"
                                                      + (f"; the same key as {', '.join(same)}" if same else "")})
        if not typed:
            out.append({"name": MISSING, "detail": "the your_key cell types no key; graded for the numbers of the "
                                                   "submission's own login"})
        elif typed != key:
            if typed in name_of_key:
                kind = f"another student's key: {name_of_key[typed]}"
            elif edit_distance(typed, key) <= 2:
                kind = "near miss (probably a typo)"
            else:
                kind = "no student's key"
            out.append({"name": DIFFERS, "detail": f"{kind}; for the typed key the answers would score "
                                                   f"{grader.score(typed, answers)}/{total}, for the submission's "
                                                   f"own {grader.score(key, answers)}/{total}"})
        for other_key, fits in fitting_classmates(grader, key, answers, keys):
            out.append({"name": FITS, "detail": f"{name_of_key.get(other_key, keys[other_key])}'s numbers fit "
                                                f"{', '.join(sorted(fits))}, wrong for this student's own"})
    for student, found in _history(course_root, lesson, submissions, graders).items():
        rows.setdefault(student, []).extend(found)
    return {student: found for student, found in rows.items() if found}


def _history(course_root, lesson, submissions, graders):
    """Each grading's {code, params, expected} into the lesson's history when new or changed (a fixed answer formula
    shows there); {student: [row]} for a student whose numbers differ from those of their first grading."""
    past = [r for r in history.read(course_root, lesson) if r.get("event") == "variant"]
    first, last = {}, {}
    for record in past:
        first.setdefault(record.get("student"), record)
        last[record.get("student")] = record
    new, rows = [], {}
    for student, variant in sorted(submissions.items()):
        grader = graders[variant["salt"]]
        params = {q: grader.params(variant["key"], q) for q in sorted(grader.varied)}
        expected = {q: (float(c(params[q])) if callable(c) else c) for q, (c, _) in sorted(grader.answers.items())
                    if q in params}
        code = variant_code(lesson, variant["key"], variant["salt"])
        if student in first and first[student].get("params") != params:
            rows[student] = [{"name": CHANGED, "detail": f"variant code {first[student].get('code')} at the first "
                                                         f"grading, {code} now: the pool or the key changed"}]
        if student not in last or (last[student].get("params"), last[student].get("expected")) != (params, expected):
            new.append({"event": "variant", "at": history.now(), "student": student, "code": code,
                        "params": params, "expected": expected})
    history.append(course_root, lesson, new)
    return rows


def merge(copying, course_root, lesson, autograded="autograded"):
    """Add the variant rows to the copying rows {student: [anomaly]} (report.rows shows both). They flag only, so a
    failure of their own never stops the report."""
    try:
        found_rows = class_rows(course_root, lesson, autograded)
    except Exception as error:
        print(f"qkv grader: the variant rows failed ({type(error).__name__}: {error}); the report has none",
              file=sys.stderr)
        return copying
    for student, found in found_rows.items():
        copying.setdefault(student, []).extend(found)
    return copying


def answer_groups(course_root, lesson, autograded="autograded"):
    """{question: Counter of what the class answered}, comparable across variants: a choice by the canonical option
    the letter stood for, a number as right, a catalogued mistake (named), the canonical numbers' answer, or other
    (item analysis shows these instead of each student's own numbers in the hints)."""
    import collections
    groups = collections.defaultdict(collections.Counter)
    graders = {}
    for variant in _submissions(course_root, lesson, autograded).values():
        grader = graders.setdefault(variant["salt"], Grader(lesson, variant["salt"]))
        for name, value in (variant.get("answers") or {}).items():
            if name not in grader.varied:
                continue
            params = grader.params(variant["key"], name)
            if "order" in params:
                graded, _ = for_your_numbers(value, "", params)
                groups[name][f"option ({graded})" if graded else "no option"] += 1
            elif grader.right(variant["key"], name, value):
                groups[name]["right"] += 1
            else:
                groups[name][_mistake_name(grader, variant["key"], name, value)] += 1
    return groups


def _mistake_name(grader, key, name, value):
    if isinstance(value, str) or value is None:
        return "not a number"
    _, tolerance = grader.answers[name]
    for what, mistake in grader.mistakes.get(name, ()):
        wrong = mistake(grader.params(key, name))
        if wrong is not None and is_right(value, wrong, tolerance):
            return f"mistake: {what}"
    return "the canonical numbers' answer" if grader.right("", name, value) else "another number"
