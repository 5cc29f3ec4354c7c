"""Your numbers: each student's own parameters for the self-check questions (issue 43).

`numbers("03-scaling", STUDENT)` derives, from (term salt, lesson, question, key), one row of each question's pool
(qkv.your_numbers.pools) by rendezvous hashing: every row gets the weight sha256(salt, lesson, question, key, row)
and the heaviest row wins. Only hashlib and json, so a laptop, Binder and the grading machine derive the same
numbers, and retiring a row moves only the keys that had it. A choice question's four options are ranked the same
way: `params[q]["order"]` lists the canonical letters in the order the student sees them as (a) to (d).

The empty key gives the canonical variant, the numbers the lesson's text uses (in a graded edition it asks for a
key instead). A class edition (its config.json) whose course does not vary a lesson shows everyone that
lesson's canonical numbers, whatever key is typed. The grader starts the student's kernel with QKV_VARIANT_KEY
set to the key of the submission's true LMS identity, which then wins over whatever the notebook typed; in a
notebook kernel a second, different key is refused, so no notebook mixes two students' numbers. This module
holds no answers: the edition ships it.
"""
import hashlib
import json
import os
import re
import secrets
import sys
import unicodedata
from pathlib import Path

from qkv.checking.hints import Hint
from qkv.your_numbers.pools import POOLS
from qkv.your_numbers.texts import NUMBERS, OPTIONS

KEY_VARIABLE = "QKV_VARIANT_KEY"  # set by the grader: the true key, whatever the notebook typed
SALT_VARIABLE = "QKV_VARIANT_SALT"  # set by the grader: the term's salt (c.Variants.salt)
HUB_USER_VARIABLE = "JUPYTERHUB_USER"
SELF_STUDY_SALT = "self-study"  # the public repository's salt
CONFIG_FILE = Path(__file__).with_name("config.json")  # written into the student edition by make student-edition
KEY_LIMIT = 120  # characters: a login or an email, never a paragraph
LETTERS = "abcd"
_CODE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base 32: no I, L, O, U to misread
_kernel_key = {}  # in a notebook kernel: the one key this kernel has shown numbers for


# ---------------------------------------------------------------- configuration and the key

def config():
    """The edition's {salt, key_label, key_pattern} (empty outside a student edition)."""
    try:
        loaded = json.loads(CONFIG_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def term_salt(salt=None):
    """The salt of the derivation: given, else the grader's QKV_VARIANT_SALT, else the edition's, else the public
    repository's "self-study"."""
    for candidate in (salt, os.environ.get(SALT_VARIABLE), config().get("salt"), SELF_STUDY_SALT):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return SELF_STUDY_SALT


def normalise_key(key):
    """A key as the derivation reads it: Unicode NFKC, stripped, casefolded (so 'JSmith ' is 'jsmith')."""
    if key is None:
        return ""
    if not isinstance(key, str):
        raise Hint(f"STUDENT must be text in quotes, such as STUDENT = \"jsmith\", not {type(key).__name__}.")
    key = unicodedata.normalize("NFKC", key).strip().casefold()
    if len(key) > KEY_LIMIT:
        raise Hint(f"STUDENT is {len(key)} characters long; type your login (at most {KEY_LIMIT} characters).")
    if any(unicodedata.category(c).startswith("C") for c in key):
        raise Hint("STUDENT holds a control character (a tab or a line break?); type your login on one line.")
    return key


def _in_notebook_kernel():
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


# ---------------------------------------------------------------- the derivation (pure)

def _weight(salt, lesson, question, key, row):
    text = json.dumps([salt, lesson, question, key, list(row)], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def pool_of(lesson, question):
    try:
        return POOLS[lesson][question]
    except KeyError:
        raise ValueError(f"{lesson}/{question} has no pool of variants") from None


def question_params(lesson, question, key, salt):
    """One question's parameters for a normalised key: the canonical row for the empty key, else the row of
    highest weight; a choice question's `order`, its letters by weight."""
    pool = pool_of(lesson, question)
    if pool.names == ("order",):
        ranked = LETTERS if not key else sorted(LETTERS, key=lambda c: -_weight(salt, lesson, question, key, (c,)))
        return {"order": "".join(ranked)}
    row = pool.rows[0] if not key else max(pool.rows, key=lambda r: _weight(salt, lesson, question, key, r))
    return dict(zip(pool.names, row))


def variant_code(lesson, key, salt):
    """4 characters naming (salt, lesson, key)'s variant without quoting the key."""
    digest = hashlib.sha256(json.dumps([salt, lesson, key]).encode("utf-8")).digest()
    return "".join(_CODE_ALPHABET[b % 32] for b in digest[:4])


def derive(lesson, key, salt):
    """Every varied question's parameters for an already normalised key: {question: params}."""
    return {question: question_params(lesson, question, key, salt) for question in POOLS.get(lesson, {})}


def pool_digest(lesson, question):
    """sha256 of a pool's canonical JSON: the edition's lock compares it at every grading."""
    pool = pool_of(lesson, question)
    return hashlib.sha256(json.dumps([list(pool.names), [list(r) for r in pool.rows]]).encode()).hexdigest()


def pools_lock(salt):
    """{salt, lessons: {lesson: {question: digest}}}: what `make student-edition` writes and `make grade` checks."""
    return {"salt": salt, "lessons": {lesson: {q: pool_digest(lesson, q) for q in questions}
                                      for lesson, questions in POOLS.items()}}


# ---------------------------------------------------------------- letters of a choice question

def canonical_letter(order, shown):
    """The canonical option behind the letter a student answered with (None when it is not a letter a..d)."""
    return order[LETTERS.index(shown)] if isinstance(shown, str) and len(shown) == 1 and shown in LETTERS else None


def shown_letter(order, canonical):
    """The letter a student with this order sees for a canonical option."""
    return LETTERS[order.index(canonical)]


# ---------------------------------------------------------------- the notebook's side

class YourNumbers:
    """One student's numbers for one lesson: .lesson, .key, .code, .params {question: {name: value}}."""

    def __init__(self, lesson, key, salt, source):
        self.lesson, self.key, self.salt, self.source = lesson, key, salt, source
        self.code = variant_code(lesson, key, salt)
        self.params = derive(lesson, key, salt)

    def text(self, question):
        """The question's numbers as a sentence, or a choice question's options in this student's order."""
        params = self.params[question]
        if "order" in params:
            options = OPTIONS.get(question)
            if options is None:
                return f"Your order of the options: {', '.join(params['order'])}."
            return "\n".join(f"({shown}) {options[LETTERS.index(c)]}" for shown, c in zip(LETTERS, params["order"]))
        return NUMBERS[question].format(**params)

    def show(self, question):
        """Print the question's numbers (or options) for this student: plain text a screen reader reads as is."""
        print(self.text(question))

    def another(self):
        """Outside a graded edition: the numbers of a fresh random key, to practise on another set."""
        if config().get("salt"):
            raise Hint("another() is for self-study: in a graded class your numbers are those of your own key.")
        _kernel_key.clear()
        return numbers(self.lesson, "practice-" + secrets.token_hex(3), salt=self.salt)

    def __repr__(self):
        numeric = "; ".join(NUMBERS[q].split(": ", 1)[-1].format(**p).rstrip(".")
                            for q, p in self.params.items() if "order" not in p)
        whose = ("the lesson's own numbers (your course uses them for everyone)" if self.source == "course" else
                 "the canonical numbers (empty key)" if not self.key else f"numbers for {self.key!r}")
        origin = {"hub": " (from your JupyterHub login: change STUDENT if it is not yours)",
                  "grader": " (the grader's key for this submission)"}.get(self.source, "")
        warning = _pattern_warning(self.key)
        return (f"Lesson {self.lesson[:2]} · {whose}{origin}, variant code {self.code}."
                + (f"\n{numeric}." if numeric else "") + (f"\n{warning}" if warning else ""))


def _pattern_warning(key):
    pattern, label = config().get("key_pattern"), config().get("key_label", "your login")
    if key and isinstance(pattern, str) and not re.fullmatch(pattern, key):
        return f"Warning: {key!r} does not look like {label}. Check it: your numbers follow it."
    return ""


def numbers(lesson, key, *, salt=None):
    """This student's numbers for `lesson` (its folder name, "03-scaling"): .key, .code, .params."""
    if lesson not in POOLS and not re.fullmatch(r"\d\d-[a-z-]+", str(lesson)):
        raise Hint(f"numbers() takes the lesson's folder name, such as \"03-scaling\", not {lesson!r}.")
    salt, course = term_salt(salt), config()
    typed, source = normalise_key(key), "typed"
    if KEY_VARIABLE in os.environ:  # the grader's: the true key, or "" for a lesson graded on the canonical numbers
        typed, source = normalise_key(os.environ[KEY_VARIABLE]), "grader"
    elif course and lesson not in course.get("lessons", []):  # a class edition whose course keeps this lesson fixed
        typed, source = "", "course"
    elif not typed and os.environ.get(HUB_USER_VARIABLE, "").strip():
        typed, source = normalise_key(os.environ[HUB_USER_VARIABLE]), "hub"
    if not typed and source == "typed" and course.get("salt"):
        label = course.get("key_label", "your login")
        raise Hint(f"Type your key between the quotes of STUDENT = \"\": {label}. Your numbers for the "
                   f"self-check questions come from it.")
    if _in_notebook_kernel():
        shown = _kernel_key.setdefault("key", typed)
        if shown != typed:
            raise Hint(f"This notebook already shows the numbers for {shown!r}: restart the kernel and run all "
                       f"cells to use another key.")
    _kernel_key["current"] = (typed, salt)
    return YourNumbers(lesson, typed, salt, source)


def current_params(question):
    """The parameters of `question` for the key this process last asked numbers() for (the canonical ones before
    any): self-study mode says right or wrong for them. None when the question is not varied."""
    key, salt = _kernel_key.get("current", ("", term_salt()))
    lesson = next((lesson for lesson, pools in POOLS.items() if question in pools), None)
    return None if lesson is None else question_params(lesson, question, key, salt)
