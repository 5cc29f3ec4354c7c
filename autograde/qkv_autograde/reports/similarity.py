"""Copy detection (issue 34.4): answer cells that match a course reference, and pairs of students whose answers
match each other far beyond the class's norm, named in the anomaly report. It flags; it never changes a score.

How, as MOSS does it (Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):
- each answer cell's code is tokenized (Python's `tokenize`) and normalised: comments, docstrings, blank lines and
  layout are dropped, every name a student chooses becomes `V` (an attribute after a dot stays: `np.sum` is
  `V.sum`), every string literal `S`; so renaming, reformatting and re-commenting change nothing;
- every run of K tokens is hashed, and of every W consecutive hashes the smallest is kept (winnowing): two texts
  sharing a run of K + W - 1 tokens share at least one fingerprint, wherever the run sits;
- what the release gives (the notebook handed out: signatures, docstrings, set-up code) is subtracted first;
- `copied from the course reference`: an answer whose fingerprints lie mostly (REFERENCE_SHARE) in one reference
  function of the course library (the GRADED_REFERENCES of every lesson, read with inspect.getsource, with the
  private helpers they call), with at least MIN_SHARED fingerprints in common; code that more than half of the
  class wrote the same way is the canonical answer and not counted (so a class in which most students paste the
  same reference is not named by this rule);
- `answers match a classmate's`: two students sharing at least MIN_SHARED fingerprints that few classmates have
  (a fingerprint held by more than `common_limit(n)` students is the class's common code and is no evidence, as
  MOSS's -m), these covering at least PAIR_SHARE of all the fingerprints of the smaller of the two (so a pair that
  happens to write one exercise the same uncommon way, and the rest as many do, is not named), and far beyond
  the class's norm (above the upper quartile of every pair's similarity plus three interquartile ranges, Tukey's
  far-out fence; a class of fewer than MIN_STUDENTS students with answers has no norm, and no pair is named).
So a short answer that many would write the same way (a one-line temperature sweep, a canonical softmax) is no
evidence: it has too few fingerprints, or the class shares them. A rewrite by hand (another algorithm, reordered
statements, code inlined or split into helpers) is not caught, nor is copying that only one of the students'
notebooks shows (a pair where one wrote and both handed in different code).

Student text is data here: it is read from the autograded notebooks, cut to MAX_SOURCE characters a cell, never
run, and whatever is shown of it goes through html.escape in the report. The notebooks are read one at a time and
the class's fingerprints kept as bare hashes (similarity_index.py), so make grade's coordinator does not grow with
the class (issue 45); a finding's lines come from its notebooks read again.
"""
import collections.abc
import hashlib
import importlib
import inspect
import io
import keyword
import os
import re
import tokenize
import types
from dataclasses import dataclass, field

import nbformat
import numpy as np

from qkv_autograde.reports.similarity_index import ClassIndex, Held, PairSimilarities, hashes_of

K = 8                 # tokens per k-gram
W = 4                 # winnowing window: a shared run of K + W - 1 = 11 tokens always shares a fingerprint
MIN_SHARED = 8        # fingerprints in common before a match is evidence (about three lines of code)
REFERENCE_SHARE = 0.6  # share of an answer's fingerprints found in one reference function
PAIR_SHARE = 0.3      # share of the smaller of two students' fingerprints that are uncommon ones both hold
MIN_STUDENTS = 5      # a class's norm needs at least this many students with answers (ten pairs)
MAX_SOURCE = 20_000   # characters of an answer cell read; more is cut
MAX_LINES_SHOWN = 30  # lines of each side shown in the report
COPIED = "copied from the course reference"
CLASSMATE = "answers match a classmate's"

_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}


# ------------------------------------------------------------------------------------------------ pure functions

def normalise(source):
    """[(token, line)]: the code's tokens with names, strings, comments, docstrings and layout normalised away.

    IPython magics and shell lines are dropped; a cell that stops tokenizing (a syntax error) keeps the tokens read
    before the error."""
    source = "\n".join("" if re.match(r"\s*[%!]", line) else line for line in str(source)[:MAX_SOURCE].splitlines())
    raw = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
            raw.append(tok)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    out = []
    statement_start = True  # the next significant token starts a statement: a lone string there is a docstring
    for i, tok in enumerate(raw):
        if tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            statement_start = True
        if tok.type in _SKIPPED:
            continue
        if tok.type == tokenize.STRING and statement_start and _ends_statement(raw, i):
            continue  # a docstring, or a string standing alone as a comment
        statement_start = False
        if tok.type == tokenize.NAME:
            after_dot = bool(out) and out[-1][0] == "."
            text = tok.string if keyword.iskeyword(tok.string) or after_dot else "V"
        elif tok.type == tokenize.STRING:
            text = "S"
        else:
            text = tok.string
        out.append((text, tok.start[0]))
    return out


def _ends_statement(raw, i):
    for tok in raw[i + 1:]:
        if tok.type == tokenize.COMMENT:
            continue
        return tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER) or tok.string == ";"
    return True


def _hash(tokens):
    return int.from_bytes(hashlib.blake2b("\x1f".join(tokens).encode(), digest_size=8).digest(), "big")


def fingerprints(tokens, k=K, w=W):
    """{hash: [(first line, last line), ...]}: the winnowed k-gram hashes of normalised tokens, each with the source
    lines of the k-grams it stands for. Text shorter than k tokens has none."""
    grams = [(_hash([t for t, _ in tokens[i:i + k]]), (tokens[i][1], tokens[i + k - 1][1]))
             for i in range(len(tokens) - k + 1)]
    chosen = {}
    for start in range(max(len(grams) - w + 1, 1 if grams else 0)):
        window = grams[start:start + w]
        # the rightmost minimum, as the paper's robust winnowing
        pick = min(range(len(window)), key=lambda j: (window[j][0], -j))
        position = start + pick
        chosen[position] = grams[position]
    found = {}
    for _, (value, lines) in sorted(chosen.items()):
        found.setdefault(value, []).append(lines)
    return found


def fingerprints_of(source, given=frozenset()):
    """The fingerprints of `source` minus those in `given` (what the release gives)."""
    return {h: lines for h, lines in fingerprints(normalise(source)).items() if h not in given}


def common_limit(students):
    """A fingerprint held by more than this many of the class's students is the class's common code."""
    return max(3, -(-students // 10))


def far_out_fence(values):
    """Tukey's far-out fence of the values (a list, or the PairSimilarities of a class): upper quartile + 3
    interquartile ranges (0 for no values)."""
    counted = PairSimilarities.of_any(values)
    if not len(counted):
        return 0.0
    q1, q3 = counted.quantile(0.25), counted.quantile(0.75)
    return q3 + 3 * (q3 - q1)


@dataclass
class Answer:
    student: str
    cell: str
    source: str
    prints: dict = field(default_factory=dict)


def match_references(answer, references):
    """(reference name, shared hashes) of the reference function the answer's fingerprints lie mostly in, or None.

    `references`: {name: (source, fingerprints)}."""
    return best_reference(answer.prints.keys(), references)


def best_reference(own, references):
    """match_references for the set of an answer's fingerprints `own`."""
    if len(own) < MIN_SHARED:
        return None
    best = None
    for name, (_, prints) in references.items():
        shared = own & prints.keys()
        if len(shared) >= MIN_SHARED and len(shared) >= REFERENCE_SHARE * len(own):
            if best is None or len(shared) > len(best[1]):
                best = (name, shared)
    return best


def compare_class(answers):
    """Pairs of students whose answers share rare fingerprints: (pairs, similarities, limit), where pairs is
    {(a, b): {"shared": n, "similarity": s}} for every pair sharing at least MIN_SHARED rare fingerprints that cover
    PAIR_SHARE of the smaller (the only ones flagged_pairs may name), similarities the similarity of every pair of
    students with answers (PairSimilarities: 0 for most), and limit the class's common-code limit."""
    index = answers if isinstance(answers, ClassIndex) else ClassIndex(
        [Held(a.student, a.cell, None, hashes_of(a.prints)) for a in answers], common_limit)
    pairs, similarities = index.pairs(lambda shared, share: (shared >= MIN_SHARED) & (share >= PAIR_SHARE))
    return pairs, similarities, index.limit


def flagged_pairs(pairs, similarities):
    """The pairs far beyond the class's norm, with enough evidence of their own; none in a class too small to have a
    norm (fewer than MIN_STUDENTS students with answers)."""
    if len(similarities) < MIN_STUDENTS * (MIN_STUDENTS - 1) // 2:
        return {}
    fence = far_out_fence(similarities)
    return {pair: found for pair, found in pairs.items()
            if found["shared"] >= MIN_SHARED and found["similarity"] >= PAIR_SHARE and found["similarity"] > fence}


def matched_lines(source, prints, shared):
    """The source's lines covered by the k-grams of the shared fingerprints, as [(line number, text)]."""
    numbers = sorted({n for h in shared for first, last in prints.get(h, []) for n in range(first, last + 1)})
    lines = str(source)[:MAX_SOURCE].splitlines()
    return [(n, lines[n - 1][:200]) for n in numbers[:MAX_LINES_SHOWN] if 0 < n <= len(lines)]


# ------------------------------------------------------------------------------------------------ the course's texts

def reference_functions():
    """{dotted name: source} of every lesson's GRADED_REFERENCES, from the full library (the grader's side); a
    reference that calls private helpers of its module (`_check_lookup_shapes`) comes with their source, as whoever
    pastes it must paste them too."""
    from qkv import lessons

    found = {}
    for row in lessons.LESSONS:
        for dotted in importlib.import_module(row.hidden_tests).GRADED_REFERENCES:
            module_name, _, name = dotted.rpartition(".")
            try:
                module = importlib.import_module(module_name)
                function = getattr(module, name)
                helpers = [getattr(module, n) for n in function.__code__.co_names
                           if n.startswith("_") and inspect.isfunction(getattr(module, n, None))]
                found[dotted] = "".join(inspect.getsource(f) for f in helpers + [function])
            except (AttributeError, OSError, TypeError, ImportError):
                continue
    return found


def reference_prints(given=frozenset()):
    return {name: (source, fingerprints_of(source, given)) for name, source in reference_functions().items()}


def answer_cells(nb, answer_ids):
    """{grade_id: source} of the notebook's code cells that are the lesson's answer cells (the first of each)."""
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if cell.get("cell_type") == "code" and isinstance(grade_id, str) and grade_id in answer_ids:
            found.setdefault(grade_id, str(cell.get("source", "")))
    return found


def release_of(nb):
    """(answer cell ids, the fingerprints of everything the release gives): every code cell of the release."""
    answer_ids = set()
    given = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code":
            continue
        if meta.get("solution") and meta.get("grade_id"):
            answer_ids.add(meta["grade_id"])
        given |= fingerprints(normalise(cell.source)).keys()
    return answer_ids, frozenset(given)


def release_folder(course_root, lesson):
    """The lesson's release folder, as the course's nbgrader_config.py names it."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=course_root).load_config()
    folder = config.CourseDirectory.get("release_directory", "release")
    return os.path.join(course_root, folder, lesson)


# ------------------------------------------------------------------------------------------------ the class

def detect(notebooks, release_nb, references=None):
    """{student: [anomaly]} and the class's pair similarities, for {(student, notebook name): notebook} (any mapping:
    each notebook is asked for once while the class's fingerprints are gathered, and again only if a finding
    shows its lines).

    An anomaly is {"name", "detail", "evidence": [{"cell", "left", "right", "left_title", "right_title"}]} where
    left and right are [(line, text)]: the student's matching lines and the other text's."""
    answer_ids, given = release_of(release_nb)
    references = reference_prints(given) if references is None else references
    held = [Held(student, cell, (student, name), hashes_of(fingerprints_of(source, given)))
            for student, name in sorted(notebooks)
            for cell, source in sorted(answer_cells(notebooks[(student, name)], answer_ids).items())]
    index = ClassIndex(held, common_limit)
    canonical = index.held_by_more_than(0.5) if len(index.students) >= MIN_STUDENTS else index.values[:0]
    reread = Reread(notebooks, answer_ids, given)
    notes = {}
    for answer in held:
        own = set(np.setdiff1d(answer.hashes, canonical, assume_unique=True).tolist())
        found = best_reference(own, references)
        if found:
            name, shared = found
            source, prints = references[name]
            share = len(shared) / len(own)
            notes.setdefault(answer.student, []).append({
                "name": COPIED,
                "detail": f"{answer.cell}: {100 * share:.0f}% of its code matches {name} "
                          f"({len(shared)} fingerprints), after names, layout and comments are normalised",
                "evidence": [{"cell": answer.cell, "left_title": f"{answer.student}: {answer.cell}",
                              "left": matched_lines(*reread(answer.notebook, answer.cell), shared),
                              "right_title": name,
                              "right": matched_lines(source, prints, shared)}]})
    pairs, similarities, limit = compare_class(index)
    last = {(a.student, a.cell): a.notebook for a in held}  # a cell handed in twice: the later notebook's
    for (a, b), found in sorted(flagged_pairs(pairs, similarities).items()):
        cells = index.cells(a, b)
        for me, other, flip in ((a, b, False), (b, a, True)):
            evidence = []
            for left_cell, (right_cell, shared) in sorted(cells.items()):
                mine, theirs = (right_cell, left_cell) if flip else (left_cell, right_cell)
                evidence.append({"cell": mine, "left_title": f"{me}: {mine}", "right_title": f"{other}: {theirs}",
                                 "left": matched_lines(*reread(last[(me, mine)], mine), shared),
                                 "right": matched_lines(*reread(last[(other, theirs)], theirs), shared)})
            notes.setdefault(me, []).append({
                "name": CLASSMATE,
                "detail": f"{other}: {found['shared']} uncommon fingerprints in common, "
                          f"{100 * found['similarity']:.0f}% of the smaller of the two (class norm: "
                          f"{100 * far_out_fence(similarities):.0f}%; code held by more than {limit} students "
                          f"is not counted)",
                "evidence": evidence})
    return notes, similarities


class Reread:
    """(source, fingerprints with their lines) of an answer cell, from its notebook read again: the class's
    fingerprints are kept as bare hashes (similarity_index), lines only for what a finding shows."""

    def __init__(self, notebooks, answer_ids, given):
        self.notebooks, self.answer_ids, self.given, self.last = notebooks, answer_ids, given, (None, {})

    def __call__(self, key, cell):
        if self.last[0] != key:  # a student's findings come one after the other: their notebook is read once
            self.last = (key, answer_cells(self.notebooks[key], self.answer_ids))
        source = self.last[1][cell]
        return source, fingerprints_of(source, self.given)


class ClassNotebooks(collections.abc.Mapping):
    """{(student, notebook): notebook} of every autograded notebook of the lesson, read from disk when asked for,
    each as its graded code cells alone (slim), all that detect reads: the whole class held at once, outputs and
    all, made the coordinator's memory grow with the class (issue 45). A notebook that cannot be read has nothing
    to compare (an empty one)."""

    def __init__(self, course_root, lesson, autograded="autograded"):
        self.folder, self.lesson = os.path.join(course_root, autograded), lesson
        self.keys = []
        for student in sorted(os.listdir(self.folder)) if os.path.isdir(self.folder) else []:
            folder = os.path.join(self.folder, student, lesson)
            if os.path.isdir(folder):
                self.keys += [(student, name[:-len(".ipynb")]) for name in sorted(os.listdir(folder))
                              if name.endswith(".ipynb")]

    def __getitem__(self, key):
        try:
            return slim(nbformat.read(os.path.join(self.folder, key[0], self.lesson, f"{key[1]}.ipynb"),
                                      as_version=4))
        except Exception:  # an unreadable notebook has nothing to compare
            return types.SimpleNamespace(cells=[])

    def __iter__(self):
        return iter(self.keys)

    def __len__(self):
        return len(self.keys)


def slim(nb):
    """The notebook's code cells that carry a grade id, as plain dicts of their type, that id and their source (a
    NotebookNode per cell took 37 MB for a class of 1,000)."""
    return types.SimpleNamespace(cells=[
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": meta["grade_id"]}}, "source": cell.source}
        for cell in nb.cells if cell.get("cell_type") == "code"
        for meta in [cell.get("metadata", {}).get("nbgrader")]
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str) and isinstance(cell.get("source"), str)])


def class_report(course_root, lesson, autograded="autograded"):
    """(notes by student, every pair's similarity) for the lesson's graded class; ({}, []) when there is no release
    to compare with."""
    folder = release_folder(course_root, lesson)
    try:
        release = nbformat.read(os.path.join(folder, f"{lesson}.ipynb"), as_version=4)
    except (OSError, ValueError):
        return {}, []
    return detect(ClassNotebooks(course_root, lesson, autograded), release)
