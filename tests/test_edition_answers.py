"""The student edition answers no open exercise (issue 33, item 2), found by running the hidden tests.

Seven student builds of qkv (qkv_edition.library.build_student_library), each built once for the module, one for
each lesson's usual week (LESSONS up to it, HANDOUTS up to the one before), so that every lesson is probed open:
- lesson 01's week: LESSONS=01-lookup (01 open, every later lesson unreleased);
- lesson 02's week: LESSONS=01-lookup,02-by-hand HANDOUTS=01-lookup (02 open);
- lessons 03-06 likewise (in lesson 05's week its checks' grouped-query engine, `_gqa`, is a twin);
- lesson 07's week: every lesson released, HANDOUTS=01-lookup,...,06-sinks (07 open).
Each is probed once (qkv_edition.probe: every function, method and catalogued callable of its qkv whose parameters
fit, tried as the student's answer to every hidden test of its open lessons, in a sandboxed kernel whose qkv is the
edition's), with what a student would paste into the notebook in the same run (`pasted=`), for every graded
function of an open lesson:
- the edition's own text of it (what the student sees opening the edition's qkv module), pasted under another name;
- a student's function that calls the edition's function of the same name (`return qkv.attention.softmax(x, axis)`);
- the twins the issues name: lesson 01's softmax as np.exp(qkv.sinks.log_softmax(x)) (qkv.sinks holds only stubs of
  lesson 06 in that week) and as qkv.attention.masked_softmax(x, None); lesson 02's attention through lessons 05's
  and 07's functions; lesson 07's chunked attentions written as calls of the handouts' full attention, and through
  the reference's own online-softmax step and lesson 07's own mistake engine;
- and in every probe run, SmolLM2's own attention on a made-up layer (qkv_edition.probe_routes) as lesson 05's
  grouped_query_attention and lesson 07's attention_step: it answers only SmolLM2's own projections (qkv.own_weights);
  and every candidate with the heads grouped (probe glue "grouped": q [H_kv, group, n, d] against k[:, None]), which
  made lesson 02's handed-out attention lesson 05's grouped_query_attention and lesson 07's attention_step until it
  stopped broadcasting leading axes between Q and K.
Nothing may pass, except what the one declaration of what a student holds names (holdings.NEEDED_BY), which names
nothing now: lesson 05's grouped-query attention, which answers lesson 07's attention_step in one call, shipped in
weeks 06 and 07 while lesson 06 ran SmolLM2 through it; lesson 06 ablates the model's own attention now
(qkv.model.own_attention, which answers only inside the model's forward pass), and weeks 06 and 07 withhold it.

What this found, and where it is withheld now (qkv_edition.library): the engines of the checks' catalogues of
mistakes, whose defaults are the answer (lesson 02's _raw, under dot_scores and the entries of scaled_scores and
attention_weights built on it; lesson 07's _step, _appended and _online), are library.TWINS; the private functions
that only withheld references call (qkv.cost._online_softmax_update, which a student's loop around it turns into
chunked_attention) are withheld with them.

Partial credit: the probe judges a whole hidden test, and a test cell's points are all or nothing. Lesson 07's
memory check is part of the chunked_attention and causal_chunked_attention hidden tests (one cell each), so a
full-matrix answer that fails it gets none of that cell's points; that it fails on memory alone (its values are
right) is shown here with the full library, in this process.
"""
import ast
import functools
import inspect
import os
import pathlib

import numpy as np
import pytest

import qkv.lessons
from qkv import attention, cost, heads, masking, sinks
from qkv.checking import Hint
from qkv_autograde.kernels import holdings, kernel_view, sandbox
from qkv_edition import library, probe, probe_routes

SLUGS = [row.slug for row in qkv.lessons.LESSONS]
WEEKS = {  # name -> (LESSONS, HANDOUTS)
    "01": (SLUGS[:1], []),
    "02": (SLUGS[:2], SLUGS[:1]),
    "03": (SLUGS[:3], SLUGS[:2]),
    "04": (SLUGS[:4], SLUGS[:3]),
    "05": (SLUGS[:5], SLUGS[:4]),
    "06": (SLUGS[:6], SLUGS[:5]),
    "07": (SLUGS, SLUGS[:6]),
}

if not sandbox.bwrap_works() and not os.environ.get("CI"):
    # the candidates, the edition's own functions called with the hidden tests' data, run in a sandboxed kernel
    pytest.skip("the probe's kernel is sandboxed with bubblewrap (make sandbox)", allow_module_level=True)

# What passes and the one declaration allows (qkv_autograde.kernels.holdings.NEEDED_BY: each twin a released lesson
# needs, on lesson 07's attention_step). Nothing, since lesson 06 ablates
# SmolLM2's own attention rather than lesson 05's grouped-query attention, which in week 07 is lesson 07's
# attention_step in one call (issue 41); its checks' engine `_gqa` and the catalogue entries built on it are stubs
# in week 07 too.
_STEP = ("07-cost", "attention_step")
_GENERATION = ("07-cost", "generation_with_cache as attention_step")
ALLOWED = {probe.Passing(dotted, *exercise) for dotted in holdings.NEEDED_BY for exercise in (_STEP, _GENERATION)}


# ---------------------------------------------------------------- what a student pastes

HEADER = "import numpy as np\nimport qkv\n"

# The twins, each for one exercise (name -> (lesson, exercise argument)). Every one computes the answer with the full
# library (test_the_twins_are_twins_with_the_full_library); in an edition the function it calls is withheld.
TWINS = {
    "01": ('''
import qkv.attention
import qkv.sinks


def twin_softmax_by_log_softmax(x, axis=-1):
    # issue 34's example: lesson 06's log_softmax takes the last axis
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    return np.moveaxis(np.exp(qkv.sinks.log_softmax(moved)), -1, axis)


def twin_softmax_by_masked_softmax(x, axis=-1):
    return qkv.attention.masked_softmax(x, None, axis)


def twin_softmax_by_layer_attention(x, axis=-1):
    # issue 41: SmolLM2's attention (qkv.model) on a layer made for it: row 0's scores are the slice, its weights
    # the softmax (one-hot tokens, a gain that undoes RMSNorm, RoPE turned off, one head of width 2)
    import types
    import qkv.model
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    rows, T = moved.reshape(-1, moved.shape[-1]), moved.shape[-1]
    config = types.SimpleNamespace(n_heads=1, n_kv_heads=1, d_head=2, rms_eps=0.0)
    cos, sin = np.ones((T, 1)), np.zeros((T, 1))
    found = []
    for row in rows:
        W_q, W_k = np.zeros((T, 2)), np.zeros((T, 2))
        W_q[0, 0], W_k[:, 0] = 1.0, row * np.sqrt(2.0)
        layer = types.SimpleNamespace(attn_norm=np.full(T, 1 / np.sqrt(T)), W_q=W_q, W_k=W_k, W_v=np.zeros((T, 2)),
                                      W_o=np.zeros((2, 1)))
        _, weights = qkv.model.layer_attention(np.eye(T), layer, config, cos, sin, np.ones((T, T), bool),
                                               return_weights=True)
        found.append(weights[0, 0])
    return np.moveaxis(np.reshape(found, moved.shape), -1, axis)


def twin_softmax_by_shifted_exp(x, axis=-1):
    # issue 41: lesson 01's catalogue of mistakes held a correct max-shifted exponential
    import qkv.checks.lesson01
    e = qkv.checks.lesson01._shifted_exp(np.asarray(x, dtype=float), axis)
    return e / e.sum(axis=axis, keepdims=True)


def twin_soft_lookup_by_attention(query, keys, values, temperature=1.0):
    # lesson 02's attention divides by sqrt(d_k): undo it, divide by the temperature
    query = np.asarray(query, dtype=float)
    scaled = query[None] * np.sqrt(query.shape[-1]) / temperature
    return qkv.attention.attention_weights(scaled, keys)[0], qkv.attention.attention(scaled, keys, values)[0]
''', {"twin_softmax_by_log_softmax": "softmax", "twin_softmax_by_masked_softmax": "softmax",
      "twin_softmax_by_layer_attention": "softmax", "twin_softmax_by_shifted_exp": "softmax",
      "twin_soft_lookup_by_attention": "soft_lookup"}),
    "02": ('''
import qkv.cost
import qkv.heads


def twin_attention_by_gqa(Q, K, V, mask=None):
    # lesson 05's grouped-query weights with one head (its attention wants d_v = d_k)
    Q, K = (np.asarray(a, dtype=float)[None] for a in (Q, K))
    return qkv.heads.grouped_query_weights(Q, K, mask)[0] @ np.asarray(V, dtype=float)


def twin_attention_by_chunks(Q, K, V, mask=None):
    return qkv.cost.chunked_attention(Q, K, V, len(K))


def twin_attention_weights_by_gqa(Q, K, mask=None):
    Q, K = (np.asarray(a, dtype=float)[None] for a in (Q, K))
    return qkv.heads.grouped_query_weights(Q, K, mask)[0]
''', {"twin_attention_by_gqa": "attention", "twin_attention_by_chunks": "attention",
      "twin_attention_weights_by_gqa": "attention_weights"}),
    "03": ("", {}),  # nothing named by the issues: the probe's candidates and the stubs pasted above
    "04": ('''
import qkv.checks.lesson04_probe


def twin_dependence_matrix_by_signed_change(attend, X, delta=1.0, tol=1e-9):
    # issue 41: lesson 04's catalogued signed change, on attend and on its negation: a rise or a fall beyond tol
    signed = qkv.checks.lesson04_probe._signed_change
    return signed(attend, X, delta, tol) | signed(lambda x: -np.asarray(attend(x), dtype=float), X, delta, tol)
''', {"twin_dependence_matrix_by_signed_change": "dependence_matrix"}),
    "05": ('''
import qkv.checks.lesson05


def twin_gqa_by_mistake_engine(q, k, v, mask=None):
    # lesson 05's own catalogue: its engine with no mistake switched on
    return qkv.checks.lesson05._gqa(q, k, v, mask)


def twin_mha_by_mistake_engine(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    # issue 41: lesson 05's catalogue's multi-head attention, with nothing changed, in the inputs' precision
    out = qkv.checks.lesson05._mha(X, W_Q, W_K, W_V, W_O, n_heads, mask)
    return out.astype(np.result_type(X, W_Q, W_K, W_V, W_O))
''', {"twin_gqa_by_mistake_engine": "grouped_query_attention",
      "twin_mha_by_mistake_engine": "multi_head_attention"}),
    "06": ("", {}),
    "07": ('''
import qkv.attention
import qkv.checks.lesson05
import qkv.checks.lesson07_chunked
import qkv.cost
import qkv.heads
import qkv.masking


def twin_attention_step_by_gqa(q_new, k_cache, v_cache):
    # lesson 05's grouped-query attention (a handout that lesson 06 needed until issue 41)
    return qkv.heads.grouped_query_attention(q_new, k_cache, v_cache)


def twin_attention_step_by_own_attention(q_new, k_cache, v_cache):
    # issue 41: the model's own attention handed to lesson 06's ablate_heads, here called on the student's arrays
    import qkv.model
    return qkv.model.own_attention(q_new, k_cache, v_cache, None)


def twin_attention_step_by_timed_attention(q_new, k_cache, v_cache):
    # issue 41: the attention layer_seconds times step by step, made by a call (the probe lists no factory's result)
    return qkv.cost._timed_attention({})(q_new, k_cache, v_cache, None)


def twin_attention_step_by_gqa_engine(q_new, k_cache, v_cache):
    # lesson 05's catalogue's engine, with nothing changed
    return qkv.checks.lesson05._gqa(q_new, k_cache, v_cache)


def twin_chunked_attention_by_full_attention(Q, K, V, chunk):
    # the handout's attention: the right numbers, from the whole score matrix
    return qkv.attention.attention(Q, K, V)


def twin_causal_chunked_attention_by_full_attention(Q, K, V, chunk):
    T = len(Q)
    return (qkv.attention.attention(Q, K, V, qkv.masking.causal_mask(T)),
            qkv.cost.causal_block_counts(T, chunk)[0])


def twin_chunked_attention_by_online_update(Q, K, V, chunk):
    # the reference's own step, beside its stub in qkv.cost
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / np.sqrt(Q.shape[1]))
    state = qkv.cost._online_softmax_state(Q.shape[0], V.shape[1], dtype)
    for start in range(0, K.shape[0], chunk):
        state = qkv.cost._online_softmax_update(state, (Q @ K[start:start + chunk].T) * scale, V[start:start + chunk])
    return state[2] / state[1]


def twin_causal_chunked_attention_by_mistake_engine(Q, K, V, chunk):
    # lesson 07's own catalogue: its engine with no mistake switched on
    return (qkv.checks.lesson07_chunked._online(Q, K, V, chunk, causal=True),
            qkv.cost.causal_block_counts(len(Q), chunk)[0])
''', {"twin_attention_step_by_gqa": "attention_step", "twin_attention_step_by_gqa_engine": "attention_step",
      "twin_attention_step_by_own_attention": "attention_step",
      "twin_attention_step_by_timed_attention": "attention_step",
      "twin_chunked_attention_by_full_attention": "chunked_attention",
      "twin_causal_chunked_attention_by_full_attention": "causal_chunked_attention",
      "twin_chunked_attention_by_online_update": "chunked_attention",
      "twin_causal_chunked_attention_by_mistake_engine": "causal_chunked_attention"}),
}


def open_lessons(week):
    released, handouts = WEEKS[week]
    return [slug for slug in released if slug not in handouts]


@functools.cache
def exercises(slug):
    return probe.exercises(slug)


@functools.cache
def graded_functions(week):
    """{student's function name: (lesson slug, dotted name of the edition's function)} for the open lessons' exercises
    (every function a hidden test takes), from the edition's own rule of what it withholds."""
    released, handouts = WEEKS[week]
    withheld = library.withheld_functions(released, handouts)
    found = {}
    for slug in open_lessons(week):
        number = qkv.lessons.lesson(slug).number
        for exercise in exercises(slug):
            for argument in exercise.arguments:
                dotted = [d for d, w in withheld.items() if d.rpartition(".")[2] == argument and w.lesson == number]
                assert len(dotted) == 1, (slug, argument, dotted)
                found[argument] = (slug, dotted[0])
    return found


def _function_node(path, name):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)


def pasted_source(folder, week):
    """(source, {pasted function: exercise argument it stands for}) of what a student of `week` pastes."""
    parts, meant = [HEADER], {}
    for argument, (_, dotted) in graded_functions(week).items():
        module, _, name = dotted.rpartition(".")
        path = pathlib.Path(folder, *module.split(".")).with_suffix(".py")
        text = path.read_text(encoding="utf-8")
        node = _function_node(path, name)
        stub = ast.get_source_segment(text, node).replace(f"def {name}(", f"def stub_{name}(", 1)
        arguments = node.args
        call = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
        call += [f"*{arguments.vararg.arg}"] if arguments.vararg else []
        call += [f"{a.arg}={a.arg}" for a in arguments.kwonlyargs]
        call += [f"**{arguments.kwarg.arg}"] if arguments.kwarg else []
        wrapper = (f"def calls_{name}({ast.unparse(arguments)}):\n"
                   f"    return {module}.{name}({', '.join(call)})\n")
        parts += [f"import {module}\n", stub + "\n", wrapper]
        meant.update({f"stub_{name}": argument, f"calls_{name}": argument})
    twins, stands_for = TWINS[week]
    parts.append(twins)
    meant.update(stands_for)
    return "\n\n".join(parts), meant


@pytest.fixture(scope="module", params=sorted(WEEKS))
def week(request, tmp_path_factory):
    """(week, edition folder, pasted source, {pasted name: argument}, probe report): one build and one probe each."""
    released, handouts = WEEKS[request.param]
    folder = tmp_path_factory.mktemp(f"edition{request.param}")
    library.build_student_library(folder, released, handouts)
    source, meant = pasted_source(folder, request.param)
    report = probe.run(str(folder), open_lessons(request.param), pasted=source)
    return request.param, folder, source, meant, report


def test_nothing_in_the_edition_or_pasted_from_it_passes_an_open_exercise(week):
    name, folder, _, _, report = week
    assert report.qkv_file.startswith(os.path.realpath(folder) + os.sep), report.qkv_file
    unexpected = [p for p in report.passing if p not in ALLOWED]
    assert not unexpected, (f"in lesson {name}'s week ({' '.join(open_lessons(name))} open) these answer an open "
                            f"exercise: " + "; ".join(map(str, unexpected)))


def test_the_probe_judged_every_exercise_and_its_controls_passed(week):
    name, _, _, _, report = week
    labels = {f"{slug} {e.label(i)}" for slug in open_lessons(name) for e in exercises(slug)
              for i in range(len(e.arguments))}
    assert set(report.tried) == labels, report.tried
    assert all(count > 0 for count in report.tried.values()), report.tried
    assert not report.not_probed and not report.import_failures, (report.not_probed, report.import_failures)
    assert all(why is None for why in {**report.controls_before, **report.controls_after}.values()), report


def test_each_pasted_function_fits_the_exercise_it_stands_for(week):
    """So the probe tried it there: a signature that does not bind the hidden test's first call is never tried."""
    name, _, source, meant, _ = week
    namespace = {}
    exec(compile(source, "<pasted>", "exec"), namespace)  # defines only: nothing is called
    first_calls = {(e.lesson, a): e.first_calls[i] for slug in open_lessons(name) for e in exercises(slug)
                   for i, a in enumerate(e.arguments)}
    for function, argument in meant.items():
        signature = [[p.name, int(p.kind), p.default is not p.empty]
                     for p in inspect.signature(namespace[function]).parameters.values()]
        calls = [call for (_, arg), call in first_calls.items() if arg == argument]
        assert calls and all(probe.fits(signature, call) for call in calls), (function, argument, calls)


def test_what_passes_by_the_declarations_leave_is_what_it_names(week):
    """The allowance is the declaration's (holdings.NEEDED_BY), read against the week: it holds only while the lesson
    that needs it is released, and the grader's kernel of the lesson it answers withholds it. It is empty since issue
    41: in week 07 lesson 05's grouped-query attention (alone, called by a student or through its checks' engine),
    SmolLM2's own attention called on the student's arrays and the attention layer_seconds times pass no more."""
    name, _, _, _, report = week
    released, handouts = WEEKS[name]
    for passing in report.passing:
        assert passing in ALLOWED, passing
        assert set(holdings.NEEDED_BY[passing.candidate]) <= set(released), passing
        assert passing.candidate in kernel_view.withheld_while_graded(passing.lesson), passing
    if name == "07":
        assert not holdings.NEEDED_BY and not report.passing, report.passing
        assert report.tried["07-cost attention_step"] > 0, report.tried
        for candidate in ("qkv.heads.grouped_query_attention", "qkv.checks.lesson05._gqa",
                          "pasted.twin_attention_step_by_gqa", "pasted.twin_attention_step_by_gqa_engine",
                          "pasted.twin_attention_step_by_own_attention",
                          "pasted.twin_attention_step_by_timed_attention",
                          "qkv.checks.lesson05.GROUPED_QUERY_ATTENTION_MISTAKES[4][0]"):
            assert probe.Passing(candidate, *_STEP) not in report.passing, candidate


def test_what_is_pasted_is_what_the_edition_holds(week):
    """The pasted stub is the edition's own text of the function (its replay stub), the wrapper calls the edition's
    function; in lesson 01's week lesson 06's log_softmax, through which issue 34's twin computes softmax, is a stub."""
    name, folder, source, meant, _ = week
    assert set(meant.values()) == set(graded_functions(name))
    for _, dotted in graded_functions(name).values():
        module, _, function = dotted.rpartition(".")
        assert f"def stub_{function}(" in source and f"_answer({dotted!r}" in source, dotted
        assert f"    return {module}.{function}(" in source, dotted
    if name == "01":
        assert "def calls_softmax(x, axis=-1):\n    return qkv.attention.softmax(x, axis)\n" in source
        node = _function_node(pathlib.Path(folder, "qkv", "sinks.py"), "log_softmax")
        assert "_answer('qkv.sinks.log_softmax'" in ast.unparse(node) and len(node.body) <= 3, ast.unparse(node)


def test_the_twins_the_probe_found_are_stubs_in_the_edition(week):
    """What the probe found answering an open exercise besides GRADED_REFERENCES, now withheld: the engines of lesson
    02's and 07's catalogues of mistakes (library.TWINS) and the private functions only withheld references call
    (qkv.cost._online_softmax_update, the heart of chunked_attention, which no exercise's signature fits: only a
    student's composition finds it). Checked on the edition's text too, so a probe that missed one would not hide it."""
    name, folder, *_ = week
    released, handouts = WEEKS[name]
    withheld = library.withheld_functions(released, handouts)
    expected = [dotted for slug in open_lessons(name) for dotted in library.TWINS.get(slug, ())
                if not set(holdings.NEEDED_BY.get(dotted, ())) & set(released)]  # what a released lesson needs ships
    if name == "07":
        expected += ["qkv.cost._online_softmax_update", "qkv.cost._online_softmax_state"]
    for dotted in expected:
        module, _, function = dotted.rpartition(".")
        assert dotted in withheld, dotted
        node = _function_node(pathlib.Path(folder, *module.split(".")).with_suffix(".py"), function)
        assert f"_answer({dotted!r}" in ast.unparse(node) and len(node.body) <= 3, ast.unparse(node)


# ---------------------------------------------------------------- the twins, with the full library, here

def _twins_here():
    namespace = {}
    for week in TWINS:
        exec(compile(HEADER + TWINS[week][0], f"<twins {week}>", "exec"), namespace)
    return namespace


def test_the_twins_are_twins_with_the_full_library():
    """Each pasted twin computes its exercise's answer where nothing is withheld: it fails in an edition because what
    it calls is withheld there, not because it is wrong."""
    twins, rng = _twins_here(), np.random.default_rng(33)
    x = rng.normal(size=(4, 5)) * 3
    np.testing.assert_allclose(twins["twin_softmax_by_log_softmax"](x, 0), attention.softmax(x, 0))
    np.testing.assert_allclose(twins["twin_softmax_by_masked_softmax"](x), attention.softmax(x))
    np.testing.assert_allclose(twins["twin_softmax_by_shifted_exp"](x, 0), attention.softmax(x, 0))
    np.testing.assert_allclose(twins["twin_softmax_by_shifted_exp"](x), attention.softmax(x))
    # issue 41: SmolLM2's own attention answers only SmolLM2's own projections (test_the_models_attention_...)
    from qkv.own_weights import NotTheModelsWeights
    with pytest.raises(NotTheModelsWeights, match="only with SmolLM2's own"):
        twins["twin_softmax_by_layer_attention"](x)
    q, K, V = rng.normal(size=3), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    from qkv import lookup
    for got, expected in zip(twins["twin_soft_lookup_by_attention"](q, K, V, 0.3), lookup.soft_lookup(q, K, V, 0.3)):
        np.testing.assert_allclose(got, expected)
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(7, 4)), rng.normal(size=(7, 2))
    for twin in ("twin_attention_by_gqa", "twin_attention_by_chunks"):
        np.testing.assert_allclose(twins[twin](Q, K, V), attention.attention(Q, K, V), err_msg=twin)
    np.testing.assert_allclose(twins["twin_attention_weights_by_gqa"](Q, K), attention.attention_weights(Q, K))
    q, k, v = rng.normal(size=(6, 1, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 4))
    for twin in ("twin_attention_step_by_gqa", "twin_attention_step_by_gqa_engine"):
        np.testing.assert_allclose(twins[twin](q, k, v), cost.attention_step(q, k, v), err_msg=twin)
    # issue 41: the model's own attention, and the one layer_seconds times, answer only inside the model's forward
    from qkv.own_attention import NotTheModelsAttention
    for twin in ("twin_attention_step_by_own_attention", "twin_attention_step_by_timed_attention"):
        with pytest.raises(NotTheModelsAttention, match="only inside model.forward"):
            twins[twin](q, k, v)
    from qkv.checks.lesson04_probe import dependence_confirmations
    for (attend, X), _ in dependence_confirmations():
        np.testing.assert_array_equal(twins["twin_dependence_matrix_by_signed_change"](attend, X),
                                      masking.dependence_matrix(attend, X))
    X, W = rng.normal(size=(5, 6)), [rng.normal(size=(6, 6)) for _ in range(4)]
    np.testing.assert_allclose(twins["twin_mha_by_mistake_engine"](X, *W, 3, masking.causal_mask(5)),
                               heads.multi_head_attention(X, *W, 3, masking.causal_mask(5)))
    q, mask = rng.normal(size=(6, 5, 4)), masking.causal_mask(5)
    np.testing.assert_allclose(twins["twin_gqa_by_mistake_engine"](q, k, v, mask),
                               heads.grouped_query_attention(q, k, v, mask))
    Q, K, V = rng.normal(size=(9, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 3))
    for twin in ("twin_chunked_attention_by_full_attention", "twin_chunked_attention_by_online_update"):
        np.testing.assert_allclose(twins[twin](Q, K, V, 4), cost.chunked_attention(Q, K, V, 4), err_msg=twin)
    for twin in ("twin_causal_chunked_attention_by_full_attention", "twin_causal_chunked_attention_by_mistake_engine"):
        got, expected = twins[twin](Q, K, V, 4), cost.causal_chunked_attention(Q, K, V, 4)
        np.testing.assert_allclose(got[0], expected[0], err_msg=twin)
        assert got[1] == expected[1], twin
    assert heads and masking and sinks  # the modules the twins reach, imported here as in the kernel


def test_a_full_matrix_chunked_attention_fails_lesson_07s_hidden_tests_on_memory_alone():
    """What the handout's full attention gives lesson 07's chunked exercises: right numbers, no points, because the
    memory check is in the same hidden test (one cell, all or nothing). Plain numpy here (a call of qkv's reference
    from a student's function is refused in this process), so the memory check is what says no."""
    from qkv_grading import lesson07 as hidden

    def full(Q, K, V, chunk):
        scores = np.asarray(Q) @ np.asarray(K).T / np.sqrt(np.shape(Q)[1])
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        return (weights / weights.sum(axis=1, keepdims=True)) @ np.asarray(V)

    def causal(Q, K, V, chunk):
        T = len(Q)
        scores = np.asarray(Q) @ np.asarray(K).T / np.sqrt(np.shape(Q)[1])
        scores = np.where(np.tri(T, dtype=bool), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        blocks = -(-T // chunk)  # those on and below the diagonal (cost.causal_block_counts is refused here)
        return (weights / weights.sum(axis=1, keepdims=True)) @ np.asarray(V), blocks * (blocks + 1) // 2

    for test, student in ((hidden.chunked_attention, full), (hidden.causal_chunked_attention, causal)):
        with pytest.raises(Hint, match="allocated"):
            test(student)



# ---------------------------------------------------------------- SmolLM2's own attention on a made-up layer

# issue 41, item 2: qkv.model.layer_attention on a layer made up for it (probe_routes.ROUTES, tried in every probe run)
# answers lesson 05's grouped_query_attention and lesson 07's attention_step; it answers only SmolLM2's own
# projections now (qkv.own_weights)
ROUTED = {"05": ("05-heads", "grouped_query_attention",
                 "layer_attention_on_a_made_up_layer_as_grouped_query_attention"),
          "07": ("07-cost", "attention_step", "layer_attention_on_a_made_up_layer_as_attention_step")}


def _routes():
    namespace = {}
    exec(compile(probe_routes.ROUTES, "<routes>", "exec"), namespace)
    return namespace


def test_the_models_attention_on_a_made_up_layer_answers_no_open_exercise(week):
    """In weeks 05 and 07 the route was a candidate for its exercise (its signature binds the hidden test's first
    call) and neither it nor any glue of it passes."""
    name, _, _, _, report = week
    if name not in ROUTED:
        return
    lesson, exercise, route = ROUTED[name]
    signature = [[p.name, int(p.kind), p.default is not p.empty]
                 for p in inspect.signature(_routes()[route]).parameters.values()]
    first_call = next(e.first_calls[0] for e in exercises(lesson) if e.name == exercise)
    assert probe.fits(signature, first_call) and report.tried[f"{lesson} {exercise}"] > 0
    assert not [p for p in report.passing if p.candidate.startswith("route.")], report.passing


def test_the_routes_answer_their_exercise_but_for_the_models_own_weights(monkeypatch):
    """With the full library here the routes raise the short NotTheModelsWeights (3 lines), so the probe finds them
    failing for that reason alone: with the check switched off, they are the exercises' answers."""
    from qkv import own_weights
    routes, rng = _routes(), np.random.default_rng(41)
    q, k, v = rng.normal(size=(6, 3, 5)), rng.normal(size=(2, 4, 5)), rng.normal(size=(2, 4, 3))
    mask = rng.random((3, 4)) < 0.7
    mask[:, 0] = True
    gqa, step = (routes[ROUTED[week][2]] for week in ("05", "07"))
    for call in (lambda: gqa(q, k, v, mask), lambda: step(q[:, :1], k, v)):
        with pytest.raises(own_weights.NotTheModelsWeights) as raised:
            call()
        assert len(raised.value._render_traceback_()) == 3
    monkeypatch.setattr(own_weights, "require_own_projections", lambda layer: None)
    np.testing.assert_allclose(gqa(q, k, v, mask), heads.grouped_query_attention(q, k, v, mask), rtol=1e-10)
    np.testing.assert_allclose(step(q[:, :1], k, v), cost.attention_step(q[:, :1], k, v), rtol=1e-10)
