"""What a student may hold in week N: the one declaration read by the student edition (qkv_edition.library) and by
the grader's kernel view (kernel_view), so the grader's kernel is never more generous than the edition (issue 41).

A lesson that is open or not released yet withholds (`withholds`):
- its hidden tests' GRADED_REFERENCES;
- its TWINS: functions elsewhere in qkv that compute one of its exercises alone or behind one call (the engines of
  the checks' catalogues of mistakes, whose defaults are the answer; a handout that answers it in one call:
  lesson 05's grouped_query_attention is lesson 07's attention_step with one query, withheld from weeks 06 and 07);
and with them every private function that only withheld functions use (`private_helpers`: the references' own code,
qkv.cost._online_softmax_update is the heart of chunked_attention).

`withheld_functions(released, handouts)` is the edition's list; `withheld_while_graded(lesson)` in kernel_view is the
list of lesson's own week (every earlier lesson a handout), where only that lesson's notebook runs, so the kernel
view withholds what the edition of that week withholds outside qkv.checks (whose modules the view replaces by empty
shells anyway), and the twins that only another lesson's notebook needs (NEEDED_BY) besides.

Imports only qkv (kernels imports no other part of the grader; the edition builder imports this).
"""
import ast
import collections
import importlib
import os
import pathlib
import re
from typing import NamedTuple

import qkv
import qkv.lessons

LIBRARY = os.path.dirname(os.path.abspath(qkv.__file__))

# Functions besides a lesson's GRADED_REFERENCES that answer one of its exercises, alone or behind one call and a
# reshape (tests/test_edition_answers.py and tests/test_edition_reading.py name any they find that this table and
# the rule of private_helpers do not withhold).
TWINS = {
    "01-lookup": (
        # the catalogue's max-shifted exponential: softmax with the shift done right, divided by the wrong sum
        "qkv.checks.lesson01._shifted_exp",
        # the temperature sweep of a soft_lookup: soft_lookup_by_temperature when given the right soft_lookup
        "qkv.checks.lesson01._sweep",
    ),
    "02-by-hand": ("qkv.checks.lesson02._raw",),
    "04-masking": ("qkv.checks.lesson04._tril",
                   # the padding catalogue's real keys [B, T] and its queries-hidden mask: padding_mask behind a
                   # broadcast, and behind a transpose
                   "qkv.checks.lesson04._real_keys", "qkv.checks.lesson04._rows_not_columns",
                   # the probe catalogue's signed change: dependence_matrix but for an abs (called on attend and on
                   # its negation, the two or-ed are the answer)
                   "qkv.checks.lesson04_probe._signed_change"),
    "05-heads": ("qkv.checks.lesson05._gqa", "qkv.checks.lesson05._mha"),
    "06-sinks": ("qkv.checks.lesson06._norms", "qkv.checks.lesson06._window", "qkv.checks.lesson06._induction",
                 # the diagonal and previous-token scores: each exercise's catalogue holds the other's answer
                 "qkv.checks.lesson06._offset_score"),
    "07-cost": ("qkv.checks.lesson07._step", "qkv.checks.lesson07._appended", "qkv.checks.lesson07_chunked._online",
                # lesson 05's handouts answer attention_step in one call (one query, the cache's keys and values)
                "qkv.heads.grouped_query_attention", "qkv.checks.lesson05._gqa"),
}


# Twins that would ship all the same where a lesson whose notebook runs there needs them ({dotted: lessons}). None
# does now: lesson 06 ran SmolLM2 with heads ablated through lesson 05's grouped_query_attention, which on one query
# is lesson 07's attention_step, so weeks 06 and 07 handed that exercise out; it ablates the model's own attention
# now (qkv.model.own_attention, which answers only inside the model's forward pass) and its checks wrap
# qkv.sinks.stand_in_attention (issue 41). SmolLM2's attention (qkv.model.layer_attention) is no twin: it answers
# only SmolLM2's own projections (qkv.own_weights), not a made-up layer's, so no q, k, v of a student's choosing.
# Lesson 02's attention, handed out from week 03, is no twin either: it wants Q, K and V with the same leading axes
# (a broadcast of key heads over groups of query heads was lesson 05's grouped_query_attention, and lesson 07's
# attention_step, as one call plus reshapes; the probe's "grouped" glue tries every candidate that way), so only the
# grouping written out, which is those exercises' own work, makes it share heads.
# tests/test_edition_answers.py allows whatever this table names to pass.
NEEDED_BY = {}


class Withheld(NamedTuple):
    lesson: str      # the lesson named when it is called on an input no fixture holds ("04")
    exercise: bool   # that lesson has an exercise of this very name (else it would answer one)
    released: bool   # that lesson is released in this edition


def graded_references(lesson):
    """('qkv.attention.softmax', ...) for lesson '01-lookup', from its hidden tests."""
    return tuple(importlib.import_module(qkv.lessons.lesson(lesson).hidden_tests).GRADED_REFERENCES)


def rows(names):
    """Lesson rows for names given by slug or number (a list, or one comma-separated string)."""
    if isinstance(names, str):
        names = [name for name in names.split(",") if name.strip()]
    return tuple(dict.fromkeys(name if isinstance(name, qkv.lessons.Lesson) else qkv.lessons.lesson(name.strip())
                               for name in names or ()))


def withholds(lesson, withheld=None):
    """The dotted names a lesson withholds while it is open or not released: its GRADED_REFERENCES, its TWINS and
    those `withheld` ({lesson: dotted names}) adds."""
    row = qkv.lessons.lesson(lesson) if not isinstance(lesson, qkv.lessons.Lesson) else lesson
    extra = [names for name, names in TWINS.items() if qkv.lessons.lesson(name) == row]
    extra += [names for name, names in (withheld or {}).items() if qkv.lessons.lesson(name) == row]
    return tuple(dict.fromkeys((*graded_references(row.slug), *(dotted for names in extra for dotted in names))))


def week_of(lesson):
    """(released, handouts) of `lesson`'s own week: every lesson up to it released, every earlier one a handout."""
    number = qkv.lessons.lesson(lesson).number
    released = tuple(row for row in qkv.lessons.LESSONS if row.number <= number)
    return released, released[:-1]


def withheld_functions(released, handouts, withheld=None, running=None):
    """{dotted name: Withheld} for an edition: every function withheld by a lesson that is not a handout and is open
    or not released yet (`withholds`), and the private functions only those call (`private_helpers`). `withheld`
    maps lessons to further dotted names withheld for them (twins). `running`: the lessons whose notebooks run where
    this applies (default: every released one, as in an edition; the grader's kernel runs the graded lesson's only):
    a twin that one of them needs ships (NEEDED_BY)."""
    released, handouts = rows(released), rows(handouts)
    running = released if running is None else rows(running)
    owners = collections.defaultdict(list)
    for row in qkv.lessons.LESSONS:
        if row not in handouts:
            for dotted in withholds(row, withheld):
                owners[dotted].append(row)
    found = {}
    for dotted, lessons in owners.items():
        name = dotted.rpartition(".")[2]
        exercises = [row for row in lessons if _has_exercise(row, name)]
        if not exercises and set(rows(NEEDED_BY.get(dotted, ()))) & set(running):
            continue  # a twin that a lesson running here needs (NEEDED_BY)
        owner = (exercises or lessons)[0]
        found[dotted] = Withheld(owner.number, bool(exercises), owner in released)
    for dotted, caller in private_helpers(found).items():
        found[dotted] = found[caller]._replace(exercise=False)
    return found


def private_helpers(found):
    """{dotted: a withheld caller} of the private top-level functions (`_name`) that only withheld functions use: the
    withheld references' own code (qkv.cost._online_softmax_update is the heart of chunked_attention), which would
    otherwise ship beside their stubs. A helper that any other code uses (another function, a module-level statement,
    another module) ships."""
    sources = {path: path.read_text(encoding="utf-8") for path in pathlib.Path(LIBRARY).rglob("*.py")}
    words = {path: set(re.findall(r"\w+", text)) for path, text in sources.items()}  # a name's whole-word uses
    helpers = {}
    for module in sorted({dotted.rpartition(".")[0] for dotted in found}):
        path = pathlib.Path(importlib.import_module(module).__file__)
        tree = ast.parse(sources[path])
        private = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                   and node.name.startswith("_") and not node.name.startswith("__")}
        users = {name: set() for name in private}
        for node in tree.body:
            own = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & private:
                if name != own:
                    users[name].add(own)  # None: a module-level statement or a class
        elsewhere = {name for name in private for other, found_there in words.items()
                     if other != path and name in found_there}
        changed = True
        while changed:
            changed = False
            for name, callers in users.items():
                dotted = f"{module}.{name}"
                if dotted in found or dotted in helpers or name in elsewhere or not callers:
                    continue
                withheld_callers = [f"{module}.{c}" for c in sorted(callers, key=str)
                                    if c is not None and (f"{module}.{c}" in found or f"{module}.{c}" in helpers)]
                if len(withheld_callers) == len(callers):
                    caller = withheld_callers[0]
                    helpers[dotted] = helpers.get(caller, caller)
                    changed = True
    return helpers


def _has_exercise(row, name):
    hidden = importlib.import_module(row.hidden_tests)
    return getattr(getattr(hidden, name, None), "__module__", None) == hidden.__name__
