"""Copy detection (issue 34.4, qkv_autograde.reports.similarity): the fingerprinting's pure functions, then what it
flags on an honest class of 40 built from every lesson's release (false positives) and on references pasted into it
(true positives). No grading here: the detector reads notebooks; tests/test_class_resilience.py runs it through make
grade.
"""
import ast
import copy
import importlib
import random

import nbformat
import pytest

from lessons import LESSONS, RELEASE, grade_id, read
from qkv_autograde.reports import similarity

SOFTMAX = '''
def softmax(x, axis=-1):
    """[...] -> [...]"""
    x = np.asarray(x, dtype=float)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    total = np.sum(e, axis=axis, keepdims=True)
    out = e / total
    assert np.all(out >= 0)
    return out
'''

DISGUISED = '''
def softmax(x, axis=-1):
    # my own softmax, written from scratch!
    x   =  np.asarray( x , dtype = float )
    z = x - np.max(x, axis=axis,
                   keepdims=True)  # shift for stability
    ex = np.exp(z)
    s = np.sum(ex, axis=axis, keepdims=True)
    result = ex / s
    assert np.all(result >= 0)
    return result
'''


def prints(source, given=frozenset()):
    return similarity.fingerprints_of(source, given)


def test_names_layout_comments_and_docstrings_are_normalised_away():
    assert [t for t, _ in similarity.normalise(SOFTMAX)] == [t for t, _ in similarity.normalise(DISGUISED)]
    assert prints(SOFTMAX) == {h: v for h, v in prints(SOFTMAX).items()}
    assert prints(SOFTMAX).keys() == prints(DISGUISED).keys()
    tokens = [t for t, _ in similarity.normalise("y = np.sum(x)  # add\n")]
    assert tokens == ["V", "=", "V", ".", "sum", "(", "V", ")"]  # the attribute stays, the names do not


def test_a_renamed_reformatted_copy_is_found_and_shows_its_lines():
    references = {"qkv.attention.softmax": (SOFTMAX, prints(SOFTMAX))}
    answer = similarity.Answer("s1", "softmax", DISGUISED, prints(DISGUISED))
    name, shared = similarity.match_references(answer, references)
    assert name == "qkv.attention.softmax"
    lines = [text for _, text in similarity.matched_lines(DISGUISED, answer.prints, shared)]
    assert any("np.exp(z)" in line for line in lines)


def test_winnowing_finds_any_shared_run_of_k_plus_w_minus_1_tokens():
    rng = random.Random(0)
    for _ in range(50):
        words = [f"a{rng.randrange(30)}" for _ in range(80)]
        start = rng.randrange(0, 80 - 11)
        run = words[start:start + similarity.K + similarity.W - 1]
        tokens = [(w, 1) for w in words]
        other = [(f"b{i}", 1) for i in range(20)] + [(w, 1) for w in run] + [(f"c{i}", 1) for i in range(20)]
        assert similarity.fingerprints(tokens).keys() & similarity.fingerprints(other).keys()


def test_a_short_common_line_is_no_evidence():
    sweep = "def f(query, keys, values, temperatures):\n" \
            "    return np.array([soft_lookup(query, keys, values, t)[1] for t in temperatures])\n"
    mine = sweep.replace("t)[1] for t in", "temperature=tau)[1] for tau in")
    given = frozenset(prints("def f(query, keys, values, temperatures):\n    raise NotImplementedError()\n"))
    references = {"qkv.lookup.soft_lookup_by_temperature": (sweep, prints(sweep, given))}
    assert similarity.match_references(similarity.Answer("s", "f", mine, prints(mine, given)), references) is None
    # and between classmates: six students write it the same way
    answers = [similarity.Answer(f"s{k}", "f", sweep, prints(sweep, given)) for k in range(6)]
    pairs, similarities, _ = similarity.compare_class(answers)
    assert not similarity.flagged_pairs(pairs, similarities)


def test_what_the_release_gives_is_not_counted():
    release = SOFTMAX  # a cell the release hands out whole
    given = frozenset(prints(release))
    assert prints(DISGUISED, given) == {}
    references = {"r": (SOFTMAX, prints(SOFTMAX, given))}
    answer = similarity.Answer("s", "softmax", DISGUISED, prints(DISGUISED, given))
    assert similarity.match_references(answer, references) is None


def test_the_way_most_of_the_class_writes_it_is_not_copying_the_reference_but_a_pasted_reference_is():
    import inspect

    from qkv import heads

    release = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        'def split_heads(x, n_heads):\n    """[T, n_heads * d_head] -> [n_heads, T, d_head]"""\n'
        '    # YOUR CODE HERE\n    raise NotImplementedError()', metadata={"nbgrader": {
            "solution": True, "grade": False, "grade_id": "split_heads", "locked": False}})])
    canonical = ("def split_heads(x, n_heads):\n    x = np.asarray(x)\n    T, width = x.shape\n"
                 "    return x.reshape(T, n_heads, width // n_heads).transpose(1, 0, 2)\n")
    others = ["def split_heads(x, n_heads):\n    return np.stack(np.split(np.asarray(x), n_heads, axis=1))\n",
              "def split_heads(x, n_heads):\n    return np.array([x[:, h::n_heads] for h in range(n_heads)])\n"]
    sources = [canonical] * 4 + others + [inspect.getsource(heads.split_heads)]
    notebooks = {}
    for k, source in enumerate(sources):
        nb = copy.deepcopy(release)
        nb.cells[0].source = source
        notebooks[(f"s{k}", "split")] = nb
    found, _ = similarity.detect(notebooks, release)
    assert list(found) == [f"s{len(sources) - 1}"], found
    assert "qkv.heads.split_heads" in found[f"s{len(sources) - 1}"][0]["detail"]
    # alone, with nobody else to show it is the way most write it, the canonical answer matches the reference
    alone, _ = similarity.detect({("s0", "split"): notebooks[("s0", "split")]}, release)
    assert [n["name"] for n in alone["s0"]] == [similarity.COPIED]


def test_two_students_sharing_rare_code_are_paired_and_common_code_is_not():
    everyone = "def g(x):\n    y = np.cumsum(np.sort(np.abs(x)))[::-1]\n    z = y / np.linalg.norm(y, ord=3)\n" \
               "    return np.clip(z, 0.25, 0.75).mean(axis=0) + np.median(y)\n"
    copied = "def h(x):\n    w = np.fft.rfft(np.diff(x, n=2))\n    w[np.abs(w) < 1e-3] = 0\n" \
             "    for k in range(len(w) // 2, 0, -3):\n        w[k] = w[k - 1] * 0.5 + w[k] * 1.5j\n" \
             "    return np.fft.irfft(w, n=len(x) - 2).std() * np.pi ** 2\n"
    answers = []
    for student in [f"s{k}" for k in range(8)]:
        answers.append(similarity.Answer(student, "g", everyone, prints(everyone)))
        if student in ("s2", "s5"):
            answers.append(similarity.Answer(student, "h", copied, prints(copied)))
    pairs, similarities, limit = similarity.compare_class(answers)
    assert limit == 3 and len(similarities) == 28
    assert set(similarity.flagged_pairs(pairs, similarities)) == {("s2", "s5")}


# ------------------------------------------------------------------------------------------------ a class of 40

def _renamed(source, rng):
    """The same code as another student would type it: its own local names, its own layout and comments."""
    tree = ast.parse(source)
    params = {a.arg for node in ast.walk(tree) if isinstance(node, ast.arguments)
              for a in node.args + node.kwonlyargs + node.posonlyargs}
    stored = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                    - params)
    mapping = {name: f"{rng.choice(['my', 'the', 'tmp', 'v', 'res'])}_{name}_{rng.randrange(100)}" for name in stored}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in mapping:
            node.id = mapping[node.id]
    lines = ast.unparse(tree).splitlines()
    return "\n".join(line + ("  # " + rng.choice(["ok", "step", "see lecture"]) if rng.random() < 0.3 else "")
                     for line in lines)


def honest_class(lesson, size=40, seed=0):
    """{(student, lesson): notebook} of `size` students who each answer every exercise with one of the lesson's
    correct variants (tests/test_lessonNN.py), in their own names and layout; questions as the solution does."""
    rng = random.Random(seed)
    variants = importlib.import_module(f"test_lesson{lesson[:2]}").VARIANTS
    solution = {grade_id(c): c.source for c in read(lesson).cells if c.metadata.get("nbgrader", {}).get("solution")}
    notebooks = {}
    for k in range(size):
        nb = read(lesson, RELEASE)
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid in variants:
                cell.source = _renamed(rng.choice(list(variants[gid].values())), rng)
            elif gid in solution and not gid.startswith("written"):
                cell.source = solution[gid]
        notebooks[(f"s{k:02d}", lesson)] = nb
    return notebooks


def pasted(notebook, references):
    """The notebook with every answer cell whose exercise has a reference replaced by that reference, disguised."""
    by_name = {dotted.rpartition(".")[2]: source for dotted, source in references.items()}
    rng = random.Random(1)
    for cell in notebook.cells:
        if grade_id(cell) in by_name:
            cell.source = _renamed(by_name[grade_id(cell)], rng)
    return notebook


@pytest.fixture(scope="module")
def references():
    return similarity.reference_functions()


MEASURED = {}


@pytest.mark.parametrize("lesson", LESSONS)
def test_an_honest_class_of_40_is_not_flagged_and_pasted_references_are(lesson, references):
    notebooks = honest_class(lesson)
    release = read(lesson, RELEASE)
    honest, _ = similarity.detect(notebooks, release)
    assert honest == {}, {s: [n["detail"] for n in notes] for s, notes in honest.items()}
    # one student pastes every reference the lesson's exercises are named after; two copy each other
    notebooks[("paster", lesson)] = pasted(read(lesson, RELEASE), references)
    first = notebooks[("s00", lesson)]
    for k, cell in enumerate(first.cells):  # s00 writes code of their own (a copy of a variant many wrote is none)
        if cell.source.startswith("def ") and grade_id(cell):
            first_param = ast.parse(cell.source).body[0].args.args[0].arg
            header, body = cell.source.split("\n", 1)
            cell.source = (f"{header}\n    checked = np.asarray({first_param}, dtype=object)\n"
                           f"    if checked.size > 10 ** {7 + k} or checked.ndim > {6 + k}:\n"
                           f"        raise MemoryError(f'{{checked.shape}} is more than this needs')\n"
                           f"    elif checked.size == 0 and not isinstance({first_param}, (list, tuple)):\n"
                           f"        warnings.warn('an empty input', RuntimeWarning, stacklevel=2)\n"
                           f"    for position, item in enumerate(checked.flat[:{3 + k}]):\n"
                           f"        assert item is not None, ('a missing entry at', position)\n"
                           f"        if isinstance(item, str) or hasattr(item, 'keys'):\n"
                           f"            raise TypeError(('not a number at', position, type(item).__name__))\n"
                           f"    summary = {{'shape': getattr({first_param}, 'shape', None), 'kind': 'input'}}\n"
                           f"    if summary['shape'] is not None and len(summary['shape']) > {5 + k}:\n"
                           f"        raise ValueError(('unexpected rank', summary))\n"
                           f"    while len(summary) < {3 + k}:\n"
                           f"        summary.setdefault('extra', [{k}] * len(summary))\n"
                           f"    del checked, summary\n{body}")
    rng = random.Random(2)
    twin = read(lesson, RELEASE)
    for mine, theirs in zip(twin.cells, first.cells):
        if grade_id(mine) and mine.metadata.get("nbgrader", {}).get("solution"):
            mine.source = _renamed(theirs.source, rng) if "def " in theirs.source else theirs.source
    notebooks[("twin", lesson)] = twin
    found, similarities = similarity.detect(notebooks, release)
    exercises = {grade_id(c) for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")}
    pastable = sorted(exercises & {d.rpartition(".")[2] for d in references})
    copied = [n for n in found.get("paster", []) if n["name"] == similarity.COPIED]
    MEASURED[lesson] = (len(copied), len(pastable))
    print(f"{lesson}: honest class of 40, 0 flagged; pasted references: {len(copied)} of {len(pastable)} "
          f"answer cells flagged")
    assert len(copied) >= len(pastable) - 2  # one-line references (cost_ratio, ...) are no evidence by design
    pairs = {(s, n["detail"].split(":")[0]) for s, notes in found.items() for n in notes
             if n["name"] == similarity.CLASSMATE}
    assert {("twin", "s00"), ("s00", "twin")} <= pairs, pairs
    assert {s for s, _ in pairs} == {"twin", "s00"}, pairs
