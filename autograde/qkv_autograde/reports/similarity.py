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
run, and whatever is shown of it goes through html.escape in the report.
"""
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
    """Tukey's far-out fence of the values: upper quartile + 3 interquartile ranges (0 for no values)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0

    def quantile(q):
        position = q * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    q1, q3 = quantile(0.25), quantile(0.75)
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
    if len(answer.prints) < MIN_SHARED:
        return None
    best = None
    for name, (_, prints) in references.items():
        shared = answer.prints.keys() & prints.keys()
        if len(shared) >= MIN_SHARED and len(shared) >= REFERENCE_SHARE * len(answer.prints):
            if best is None or len(shared) > len(best[1]):
                best = (name, shared)
    return best


def canonical_code(answers):
    """The fingerprints more than half of the class's students hold (in a class of at least MIN_STUDENTS): the way
    most write it, which is no evidence of copying from the reference either."""
    holders = {}
    for answer in answers:
        for value in answer.prints:
            holders.setdefault(value, set()).add(answer.student)
    students = len({a.student for a in answers})
    if students < MIN_STUDENTS:
        return set()
    return {h for h, who in holders.items() if len(who) > students / 2}


def compare_class(answers):
    """Pairs of students whose answers share rare fingerprints: (pairs, similarities, limit), where pairs is
    {(a, b): {"shared": n, "similarity": s, "cells": {cell_a: (cell_b, shared hashes)}}} for every pair sharing
    any rare fingerprint, similarities the similarity of every pair of students with answers (0 for most), and
    limit the class's common-code limit."""
    by_student = {}
    for answer in answers:
        by_student.setdefault(answer.student, []).append(answer)
    students = sorted(by_student)
    limit = common_limit(len(students))
    holders = {}
    for student, own in by_student.items():
        for value in {h for a in own for h in a.prints}:
            holders.setdefault(value, set()).add(student)
    rare = {h for h, who in holders.items() if len(who) <= limit}
    size = {s: len({h for a in own for h in a.prints}) for s, own in by_student.items()}
    shared_by_pair = {}
    for value in rare:
        who = sorted(holders[value])
        for i, a in enumerate(who):
            for b in who[i + 1:]:
                shared_by_pair.setdefault((a, b), set()).add(value)
    pairs = {}
    for (a, b), shared in shared_by_pair.items():
        smaller = min(size[a], size[b]) or 1
        cells = {}
        for left in by_student[a]:
            for right in by_student[b]:
                common = left.prints.keys() & right.prints.keys() & shared
                if common and (left.cell not in cells or len(common) > len(cells[left.cell][1])):
                    cells[left.cell] = (right.cell, common)
        pairs[(a, b)] = {"shared": len(shared), "similarity": len(shared) / smaller, "cells": cells}
    count = len(students) * (len(students) - 1) // 2
    similarities = [p["similarity"] for p in pairs.values()] + [0.0] * (count - len(pairs))
    return pairs, similarities, limit


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
    """{student: [anomaly]} and the class's pair similarities, for {(student, notebook name): notebook}.

    An anomaly is {"name", "detail", "evidence": [{"cell", "left", "right", "left_title", "right_title"}]} where
    left and right are [(line, text)]: the student's matching lines and the other text's."""
    answer_ids, given = release_of(release_nb)
    references = reference_prints(given) if references is None else references
    answers = []
    for (student, _), nb in sorted(notebooks.items()):
        for cell, source in sorted(answer_cells(nb, answer_ids).items()):
            answers.append(Answer(student, cell, source, fingerprints_of(source, given)))
    notes = {}
    canonical = canonical_code(answers)
    for answer in answers:
        own = Answer(answer.student, answer.cell, answer.source,
                     {h: lines for h, lines in answer.prints.items() if h not in canonical})
        found = match_references(own, references)
        if found:
            name, shared = found
            source, prints = references[name]
            share = len(shared) / len(own.prints)
            notes.setdefault(answer.student, []).append({
                "name": COPIED,
                "detail": f"{answer.cell}: {100 * share:.0f}% of its code matches {name} "
                          f"({len(shared)} fingerprints), after names, layout and comments are normalised",
                "evidence": [{"cell": answer.cell, "left_title": f"{answer.student}: {answer.cell}",
                              "left": matched_lines(answer.source, answer.prints, shared), "right_title": name,
                              "right": matched_lines(source, prints, shared)}]})
    pairs, similarities, limit = compare_class(answers)
    sources = {(a.student, a.cell): a for a in answers}
    for (a, b), found in sorted(flagged_pairs(pairs, similarities).items()):
        for me, other, flip in ((a, b, False), (b, a, True)):
            evidence = []
            for left_cell, (right_cell, shared) in sorted(found["cells"].items()):
                mine, theirs = (right_cell, left_cell) if flip else (left_cell, right_cell)
                evidence.append({"cell": mine, "left_title": f"{me}: {mine}", "right_title": f"{other}: {theirs}",
                                 "left": matched_lines(sources[(me, mine)].source, sources[(me, mine)].prints, shared),
                                 "right": matched_lines(sources[(other, theirs)].source,
                                                        sources[(other, theirs)].prints, shared)})
            notes.setdefault(me, []).append({
                "name": CLASSMATE,
                "detail": f"{other}: {found['shared']} uncommon fingerprints in common, "
                          f"{100 * found['similarity']:.0f}% of the smaller of the two (class norm: "
                          f"{100 * far_out_fence(similarities):.0f}%; code held by more than {limit} students "
                          f"is not counted)",
                "evidence": evidence})
    return notes, similarities


def class_notebooks(course_root, lesson, autograded="autograded"):
    """{(student, notebook): notebook} of every autograded notebook of the lesson that can be read, each kept as its
    graded code cells alone (slim), all that detect reads: whole graded notebooks, outputs and all, made the
    coordinator's memory grow with the class (issue 45)."""
    found = {}
    top = os.path.join(course_root, autograded)
    if not os.path.isdir(top):
        return found
    for student in sorted(os.listdir(top)):
        folder = os.path.join(top, student, lesson)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".ipynb"):
                try:
                    found[(student, name[:-len(".ipynb")])] = slim(nbformat.read(os.path.join(folder, name),
                                                                                 as_version=4))
                except Exception:  # an unreadable notebook has nothing to compare
                    continue
    return found


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
    return detect(class_notebooks(course_root, lesson, autograded), release)
