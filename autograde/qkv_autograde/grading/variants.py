"""Self-checks graded by the student's true identity (issue 43; the design: ../shared/design/variants.md, 3.5).

Off until `c.Variants.salt` and `c.Variants.lessons` name the term's salt and the lessons with variants on. Then:
- `AssignVariant`, the last sanitize step, writes into the notebook's metadata the key of the submission's *true*
  identity (roster.py: the LMS id -> login), the term's salt and the key the notebook typed (read with `ast` from the
  `your_key` cell, never run); whatever the notebook held there is dropped first;
- `SandboxedExecute` starts the kernel with that key (`QKV_VARIANT_KEY`, in the preamble), so every cell derives the
  student's own numbers whatever `STUDENT` says, and grades the test cells with `qkv_grading.variant_of(key)`,
  recording the answers for the anomaly report (reports/variant_rows.py);
- `python -m qkv_autograde.grading.variants LESSON` (make grade runs the same check first, in its own process)
  refuses when a pool changed since `make student-edition` wrote autograde/variants.lock.json (FORCE_VARIANTS=1
  overrides), or when a collected Canvas or Moodle submission has no roster row (give ROSTER=...).
"""
import ast
import contextlib
import json
import os
import sys

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Dict, List, Unicode
from traitlets.config import Configurable

import qkv_grading
from qkv import your_numbers
from qkv_autograde.intake import roster
from qkv_autograde.intake.lms_names import LMS_RECORD

LOCK_FILE = "variants.lock.json"
TRUST_VARIABLE = "QKV_TRUST_TYPED_KEYS"  # make grade TRUST_TYPED_KEYS=1 sets it


class Variants(Configurable):
    """The term's self-check variants (nbgrader_config.py: c.Variants.salt = "qkv-2026-autumn", ...)."""
    salt = Unicode("", help="The term's public salt; empty: variants off.").tag(config=True)
    lessons = List(Unicode(), help="The lessons whose self-checks vary per student.").tag(config=True)
    key_label = Unicode("your university login", help="What students type as their key.").tag(config=True)
    key_pattern = Unicode("", help="A regular expression a key should match (a warning otherwise).").tag(config=True)
    accept_typed = Dict(help="{student id: typed key} accepted after review, e.g. a typo.").tag(config=True)
    trust_typed_keys = Bool(False, help="A Canvas or Moodle submission without a roster row is graded for the key "
                            "its notebook typed, reported 'variant key unverified' (make grade TRUST_TYPED_KEYS=1), "
                            "instead of stopping make grade.").tag(config=True)

    def on(self, lesson):
        return bool(self.salt.strip()) and lesson in self.lessons

    def trusts_typed_keys(self):
        return self.trust_typed_keys or os.environ.get(TRUST_VARIABLE, "").strip() not in ("", "0")


def typed_key(nb):
    """The key the notebook's `your_key` cell types (STUDENT = "..."), normalised; "" when empty, None when the
    cell is missing or is not a plain string assignment."""
    cell = next((c for c in nb.cells if c.get("id") == "your_key" and c.cell_type == "code"), None)
    if cell is None:
        return None
    try:
        tree = ast.parse(cell.source[:10000])
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["STUDENT"]
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            try:
                return your_numbers.normalise_key(node.value.value)
            except AssertionError:  # a Hint: too long, a control character
                return None
    return None


def lms_record(course_root, student, lesson):
    path = os.path.join(course_root, "submitted", student, lesson, LMS_RECORD)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


class AssignVariant(NbGraderPreprocessor):
    """Sanitize step: the submission's true key and the salt into nb.metadata.qkv.variant (nothing when off)."""

    def preprocess(self, nb, resources):
        meta = nb.metadata.setdefault("qkv", {})
        meta.pop("variant", None)  # the notebook's own copy, if any, is never trusted
        settings = Variants(config=self.config)
        lesson, student = resources["nbgrader"]["assignment"], resources["nbgrader"]["student"]
        if not settings.on(lesson):
            return nb, resources
        course_root = self.config.CourseDirectory.get("root") or os.getcwd()
        known, typed = roster.load(course_root), typed_key(nb)
        if not os.path.isdir(os.path.join(course_root, "submitted", student, lesson)):
            # graded again from .staged/ after its submitted/ folder (and .lms.json) went: the id is an LMS's, not
            # a login, unless a roster row says whose it is
            found = roster.key_of_id(known, student, lesson)
            if found is None:
                meta["variant"] = {"key": your_numbers.normalise_key(student), "salt": settings.salt,
                                   "typed": typed, "unverified": True, "staged_only": True}
                return nb, resources
        else:
            found = roster.key_of(known, lms_record(course_root, student, lesson), student, lesson)
        if found is None and not settings.trusts_typed_keys():
            raise ValueError(f"{student} has no row in {roster.ROSTER_FILE}: give the LMS's export, "
                             f"make grade LESSON={lesson} ROSTER=<gradebook export>")
        if found is None:  # TRUST_TYPED_KEYS: the typed key (the LMS id when none), which nothing verifies
            meta["variant"] = {"key": typed or your_numbers.normalise_key(student), "salt": settings.salt,
                               "typed": typed, "unverified": True}
            return nb, resources
        key = found[0]
        if student in settings.accept_typed and typed == your_numbers.normalise_key(settings.accept_typed[student]):
            key = typed
        meta["variant"] = {"key": key, "salt": settings.salt, "typed": typed}
        return nb, resources


def preamble(variant):
    """Kernel code giving the kernel the true key (QKV_VARIANT_KEY) and the salt; with variants off, the empty key:
    the canonical numbers the lesson is graded on, whatever key the notebook typed."""
    key, salt = (variant["key"], variant["salt"]) if variant else ("", your_numbers.SELF_STUDY_SALT)
    return (f"import os as _os; _os.environ[{your_numbers.KEY_VARIABLE!r}] = {json.dumps(key)}; "
            f"_os.environ[{your_numbers.SALT_VARIABLE!r}] = {json.dumps(salt)}; del _os")


@contextlib.contextmanager
def grading(variant):
    """Around a test cell: graded for the true key's numbers; the answers recorded into variant["answers"]."""
    if not variant:
        yield
        return
    with qkv_grading.variant_of(variant["key"], variant["salt"], variant.get("typed")), \
            qkv_grading.recording_answers(variant.setdefault("answers", {})):
        yield


# ---------------------------------------------------------------- the lock, and the check before grading

def lock(salt):
    return your_numbers.pools_lock(salt)


def write_lock(course_root, salt):
    with open(os.path.join(course_root, LOCK_FILE), "w", encoding="utf-8") as f:
        json.dump(lock(salt), f, indent=1, sort_keys=True)
        f.write("\n")


def changed_pools(course_root, lesson, salt):
    """The pools of `lesson` whose digest differs from the lock's (all of them when the salt differs); None when
    there is no lock."""
    try:
        with open(os.path.join(course_root, LOCK_FILE), encoding="utf-8") as f:
            locked = json.load(f)
    except (OSError, ValueError):
        return None
    now = lock(salt)
    if locked.get("salt") != salt:
        return ["the salt"]
    before, after = locked.get("lessons", {}).get(lesson, {}), now["lessons"].get(lesson, {})
    return sorted(q for q in set(before) | set(after) if before.get(q) != after.get(q))


def check(course_root, lesson, settings, force=False):
    """Why grading `lesson` must not start, or None."""
    if not settings.on(lesson):
        return None
    changed = changed_pools(course_root, lesson, settings.salt)
    if changed and not force:
        return (f"the pool of {lesson}/{', '.join(changed)} changed after the edition was built ({LOCK_FILE}): "
                f"students saw the old numbers. Restore it, or grade anyway with FORCE_VARIANTS=1.")
    known = roster.load(course_root)
    missing = []
    for student in sorted(os.listdir(os.path.join(course_root, "submitted"))
                          if os.path.isdir(os.path.join(course_root, "submitted")) else []):
        record = lms_record(course_root, student, lesson)
        if record and roster.key_of(known, record, student, lesson) is None:
            missing.append(student)
    if missing and not settings.trusts_typed_keys():
        return (f"{len(missing)} {lesson} submissions ({', '.join(missing[:5])}) have no row in "
                f"{roster.ROSTER_FILE}: give the LMS's export, make grade LESSON={lesson} ROSTER=<Canvas gradebook "
                f"export or Moodle grading worksheet>, or grade them for the keys they typed with TRUST_TYPED_KEYS=1.")
    return None


def stop_without_roster(course_root, lesson, config):
    """make grade, once the export is collected: a Canvas or Moodle submission without a roster row stops it."""
    problem = check(course_root, lesson, Variants(config=config), force=True)  # the lock was checked before
    if problem:
        sys.exit(f"qkv grader: {problem}")


def main(argv=None):
    from traitlets.config.loader import PyFileConfigLoader
    args = list(sys.argv[1:] if argv is None else argv)
    force = "--force-variants" in args
    lesson = next(a for a in args if not a.startswith("--"))
    config = PyFileConfigLoader("nbgrader_config.py", path=os.getcwd()).load_config()
    problem = check(os.getcwd(), lesson, Variants(config=config), force)
    if problem:
        sys.exit(f"qkv grader: {problem}")


if __name__ == "__main__":
    main()
