"""A named diagnosis only when it is certain (issue 8, item 3).

For every mistake a check lists: a function that IS the mistake (the check's own mistake function, compiled
as a student's code) gets the named hint; a different wrong function that coincides with the mistake on the
checked input only gets the generic "largest difference" hint, never the named one.
"""
import functools
import types

import numpy as np
import pytest

import mutation
from qkv import attention, heads, lookup, masking, probes, scaling, sinks
from qkv.checking import Hint, _Probes, check_against, check_boolean
from qkv.checks import lesson01, lesson02, lesson03, lesson04, lesson05, lesson06

MODULES = {"01": lesson01, "02": lesson02, "03": lesson03, "04": lesson04, "05": lesson05, "06": lesson06}

RNG = np.random.default_rng(8)
SQUARE = tuple(RNG.normal(size=(4, 4)) for _ in range(3))


def _boolean(student, reference, args, kwargs, diagnoses, outputs, confirm=()):
    check_boolean(student, reference, args, kwargs, name="fn", diagnoses=diagnoses, require_bool=False)


def _dependence(student, reference, args, kwargs, diagnoses, outputs):
    check_boolean(student, reference, args, kwargs, name="fn", diagnoses=diagnoses, require_bool=False,
                  confirm_with=_dependence.confirm, allowed=lesson04.PROBE_ALLOWED)


_dependence.confirm = lesson04.dependence_confirmations()


def _against(student, reference, args, kwargs, diagnoses, outputs, confirm=()):
    check_against(student, reference, args, kwargs, name="fn", diagnoses=diagnoses, outputs=outputs,
                  confirm_with=confirm)


HARD_KEYS = np.array([[1.0, 2, 0], [2, 1, 0], [2, 4, 0], [1, 2, 1]])
HARD_VALUES = np.array([[10.0], [20.0], [30.0], [40.0]])


def _hard_lookup(student, reference, args, kwargs, diagnoses, outputs):
    # a moved query matches no key: the diagnosis is confirmed on the table's other queries
    _against(student, reference, args, kwargs, diagnoses, outputs, confirm=_other_keys(args))


def _other_keys(args):
    return [((key.copy(), HARD_KEYS, HARD_VALUES), {}) for key in HARD_KEYS if not np.array_equal(key, args[0])]


_hard_lookup.confirm = _other_keys


def _confirmed_by(confirm):
    def run(student, reference, args, kwargs, diagnoses, outputs):
        _against(student, reference, args, kwargs, diagnoses, outputs, confirm=confirm)
    run.confirm = confirm
    return run


def _window_mask(student, reference, args, kwargs, diagnoses, outputs):
    lesson06.mask_check(student, args, name="fn", diagnoses=diagnoses)


_window_mask.confirm = lesson06.SLIDING_WINDOW_CONFIRMATIONS

_mix = np.array([[1.0, 0, 0, 1], [0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]])
ATTEND = functools.partial(probes.mixed_readout, mix=_mix, readout=np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 0.25]]))
WEAK = functools.partial(probes.mixed_readout, mix=np.where(_mix > 0, 1.0, 1e-4), readout=ATTEND.keywords["readout"])
TOY = heads.AttentionShape("toy", n_layers=4, d_model=48, n_heads=6, n_kv_heads=2, d_head=8)

# (lesson, list name, reference, candidate inputs, outputs, runner): each mistake is tried on the first candidate
# input on which it differs from the reference and from every other mistake of the list
CASES = [
    ("01", "SOFTMAX_MISTAKES", attention.softmax,
     [((np.array([[0.5, 2.0, -1.0], [3.0, 0.0, 1.5]]),), {}),
      ((np.array([[0.5, 2.0, -1.0], [3.0, 0.0, 1.5]]),), {"axis": 0}),
      ((np.array([[1.0, 2.0], [1000.0, 1001.0]]),), {}), ((np.array([1000.0, 1001.0, 1002.0]),), {})], None,
     _confirmed_by(lesson01.SOFTMAX_CONFIRMATIONS)),
    ("01", "HARD_LOOKUP_MISTAKES", lookup.hard_lookup,
     [((np.array([2.0, 1.0, 0.0]), HARD_KEYS, HARD_VALUES), {}),
      ((np.array([1.0, 2.0, 1.0]), HARD_KEYS, HARD_VALUES), {})],
     None, _hard_lookup),
    ("01", "SOFT_LOOKUP_MISTAKES", lookup.soft_lookup,
     [((np.array([1.0, 0.5, -1.0]), RNG.normal(size=(4, 3)), RNG.normal(size=(4, 2))), {"temperature": 0.25}),
      ((np.array([1.0, 0.5, -1.0]), RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))), {"temperature": 0.25})],
     ("weights", "output"), _against),
    ("01", "SWEEP_MISTAKES", lookup.soft_lookup_by_temperature,
     [((np.array([1.0, 0.5, -1.0]), RNG.normal(size=(4, 3)), RNG.normal(size=(4, 2)), np.array([4.0, 1.0, 0.3])), {}),
      ((np.array([1.0, 0.5, -1.0]), RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3)), np.array([4.0, 1.0, 0.3])), {})],
     None, _against),
    ("02", "DOT_SCORES_MISTAKES", attention.dot_scores,
     [((lesson02.SMALL_Q, lesson02.SMALL_K), {}), (SQUARE[:2], {})], None, _against),
    ("02", "SCALED_SCORES_MISTAKES", attention.scaled_scores,
     [((lesson02.SMALL_Q, lesson02.SMALL_K), {}), (SQUARE[:2], {})], None, _against),
    ("02", "ATTENTION_WEIGHTS_MISTAKES", attention.attention_weights,
     [((lesson02.SMALL_Q, lesson02.SMALL_K), {}), (SQUARE[:2], {}), ((lesson02.UNEVEN_Q, lesson02.SMALL_K), {})],
     None, _against),
    ("02", "ATTENTION_MISTAKES", attention.attention,
     [((lesson02.SMALL_Q, lesson02.SMALL_K, lesson02.SMALL_V), {}), (SQUARE, {}),
      ((lesson02.UNEVEN_Q, lesson02.SMALL_K, lesson02.SMALL_V), {})], None, _against),
    ("02", "PROJECT_QKV_MISTAKES", attention.project_qkv,
     [((lesson02.SMALL_X, lesson02.SQUARE_W_Q, lesson02.SQUARE_W_K, lesson02.SQUARE_W_V), {}),
      ((lesson02.SMALL_X, lesson02.SMALL_W_Q, lesson02.SMALL_W_K, lesson02.SMALL_W_V), {})], ("Q", "K", "V"), _against),
    ("02", "SELF_ATTENTION_MISTAKES", attention.self_attention,
     [((lesson02.SMALL_X, lesson02.SQUARE_W_Q, lesson02.SQUARE_W_K, lesson02.SQUARE_W_V), {}),
      ((lesson02.SMALL_X, lesson02.SMALL_W_Q, lesson02.SMALL_W_K, lesson02.SMALL_W_V), {})], None, _against),
    ("03", "SCALE_MISTAKES", scaling.scale_for_unit_variance, [((64,), {}), ((3,), {})], None, _against),
    ("03", "ENTROPY_MISTAKES", scaling.entropy,
     [((np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [0.1, 0.6, 0.3]]),), {})], None, _against),
    ("03", "SOFTMAX_JACOBIAN_MISTAKES", scaling.softmax_jacobian, [((np.array([0.5, -1.0, 2.0, 0.3]),), {})], None,
     _against),
    ("03", "QUERY_JACOBIAN_MISTAKES", scaling.query_jacobian,
     [((np.array([0.5, -1.0, 1.0]), np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]])), {}),
      ((np.array([0.5, -1.0, 1.0, 2.0]), RNG.normal(size=(3, 4))), {})], None, _against),
    ("04", "CAUSAL_MASK_MISTAKES", masking.causal_mask, [((5,), {})], None, _boolean),
    ("04", "MASKED_SOFTMAX_MISTAKES", lesson04.MASKED_SOFTMAX_REFERENCE,
     [((RNG.normal(size=(3, 3)), masking.causal_mask(3)), {}),
      ((RNG.normal(size=(2, 3)), np.array([[True, True, False], [False, False, False]])), {}),
      ((np.array([[1000.0, 999.0, 5.0], [0.5, 0.2, 3.0], [-2.0, 0.0, 1.0]]), masking.causal_mask(3)), {}),
      ((RNG.normal(size=(2, 3, 3)), masking.causal_mask(3)), {})],  # a batch under one mask (issue 41)
     None, _against),
    ("04", "CAUSAL_ATTENTION_MISTAKES", lesson04.CAUSAL_ATTENTION_REFERENCE,
     [(lesson04.sentence_inputs(), {}),
      ((lesson04.loud_future_input(np.random.default_rng(0), 5, *lesson04.sentence_inputs()[1:3]),
        *lesson04.sentence_inputs()[1:]), {})], None, _against),
    ("04", "PADDING_MASK_MISTAKES", masking.padding_mask, [(([5, 3, 2], 5), {})], None, _boolean),
    ("04", "CAUSAL_PADDING_MISTAKES", masking.causal_padding_mask, [(([5, 3, 2], 5), {}), (([4, 2], 4), {})], None,
     _boolean),
    ("04", "DEPENDENCE_MISTAKES", masking.dependence_matrix,
     [((ATTEND, np.linspace(-1, 1, 12).reshape(4, 3)), {}), *lesson04.dependence_confirmations(),
      ((WEAK, np.zeros((4, 3))), {"delta": 1e-3, "tol": 1e-5})], None, _dependence),
    ("05", "SPLIT_HEADS_MISTAKES", heads.split_heads, [((RNG.normal(size=(2, 12)), 3), {})], None, _against),
    ("05", "MERGE_HEADS_MISTAKES", heads.merge_heads, [((RNG.normal(size=(3, 2, 4)),), {})], None, _against),
    ("05", "MULTI_HEAD_ATTENTION_MISTAKES", heads.multi_head_attention,
     [(lesson05.mha_case(np.random.default_rng(3), 4, 10, 3, 4), {"mask": masking.causal_mask(4)}),
      (lesson05.mha_case(np.random.default_rng(4), 5, 8, 4, 2), {"mask": masking.causal_mask(5)}),
      (lesson05.mha_case(np.random.default_rng(5), 4, 6, 2, 3), {})], None,
     _confirmed_by(lesson05.MHA_CONFIRMATIONS)),
    ("05", "GROUPED_QUERY_ATTENTION_MISTAKES", heads.grouped_query_attention,
     [(lesson05.gqa_case(np.random.default_rng(6), 6, 2, 4, 3), {"mask": masking.causal_mask(4)}),
      (lesson05.gqa_case(np.random.default_rng(7), 6, 3, 4, 3), {"mask": masking.causal_mask(4)})], None, _against),
    ("05", "KV_CACHE_MISTAKES", heads.kv_cache_bytes_per_token,
     [((TOY, 4), {}), ((TOY, 3), {}), ((types.SimpleNamespace(n_layers=3, n_heads=12, n_kv_heads=4, d_head=5), 2), {})],
     None, _against),
    ("06", "FIRST_TOKEN_SHARE_MISTAKES", sinks.first_token_share,
     [((lesson06.causal_weights(np.random.default_rng(60), 3, 5),), {}),
      ((np.random.default_rng(602).uniform(size=(2, 4, 4)),), {})], None,
     _confirmed_by(lesson06.FIRST_TOKEN_SHARE_CONFIRMATIONS)),
    ("06", "CONTRIBUTION_MISTAKES", sinks.contribution_norms,
     [(lesson06.contribution_case(np.random.default_rng(61), 4, 3, 5), {})], None, _against),
    ("06", "OCCLUSION_MISTAKES", sinks.occlusion_effects,
     [((lesson06.toy_logprob(np.random.default_rng(62)), np.array([3, 1, 4, 1, 5])), {})], None,
     _confirmed_by(lesson06.occlusion_confirmations(np.random.default_rng(620)))),
    ("06", "SLIDING_WINDOW_MISTAKES", sinks.sliding_window_mask,
     [((6, 2, 1), {}), ((7, 2, 2), {}), ((5, 3, 0), {})], None, _window_mask),
    ("06", "PERPLEXITY_MISTAKES", sinks.perplexity,
     [(lesson06.perplexity_case(np.random.default_rng(63), 5, 7), {}),
      (lesson06.perplexity_case(np.random.default_rng(64), 6, 5), {})], None, _against),
    ("06", "DIAGONAL_MISTAKES", sinks.diagonal_score,
     [((lesson06.scores_case(np.random.default_rng(64), 3, 5),), {})], None, _against),
    ("06", "PREVIOUS_TOKEN_MISTAKES", sinks.previous_token_score,
     [((lesson06.scores_case(np.random.default_rng(65), 3, 5),), {})], None, _against),
    ("06", "INDUCTION_MISTAKES", sinks.induction_score,
     [((lesson06.scores_case(np.random.default_rng(66), 3, 8), 4), {})], None, _against),
]


def _result(fn, args, kwargs):
    with np.errstate(all="ignore"):
        try:
            return fn(*args, **kwargs)
        except Exception:
            return None


def _same(a, b):
    if a is None or b is None:
        return False
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True))


def _same_shapes(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(_same_shapes, a, b))
    return np.shape(a) == np.shape(b)


def _equal_inputs(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.array_equal(np.asarray(a), np.asarray(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_equal_inputs, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal_inputs(a[k], b[k]) for k in a)
    if isinstance(a, types.SimpleNamespace) and isinstance(b, types.SimpleNamespace):
        return _equal_inputs(vars(a), vars(b))
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _moved(value):
    """A wrong answer unlike any listed mistake: the right one, moved."""
    if isinstance(value, tuple):
        return tuple(_moved(v) for v in value)
    array = np.array(value)
    if array.dtype == bool:  # one entry flipped (flipping all would be the "inverted" mistake)
        array.flat[0] = not array.flat[0]
        return array
    return array * 1.5 + 0.5


def _coincides_once(mistake_value, args, kwargs, reference_copy):
    """The mistake's answer on (args, kwargs), a different wrong answer on every other input."""
    def student(*given_args, **given_kwargs):
        if _equal_inputs(given_args, args) and _equal_inputs(given_kwargs, kwargs):
            return mistake_value
        return _moved(reference_copy(*given_args, **given_kwargs))
    return student


def _items():
    for lesson, list_name, reference, inputs, outputs, run in CASES:
        diagnoses = getattr(MODULES[lesson], list_name)
        for index in range(len(diagnoses)):
            yield pytest.param(lesson, list_name, index, reference, inputs, outputs, run,
                               id=f"{lesson}:{list_name}[{index}]")


def _distinguishing_input(diagnoses, index, reference, inputs):
    for args, kwargs in inputs:
        mistaken, expected = _result(diagnoses[index][0], args, kwargs), _result(reference, args, kwargs)
        if mistaken is None or _same(mistaken, expected) or not _same_shapes(mistaken, expected):
            continue  # a wrong shape is reported as such, before any diagnosis
        hint = diagnoses[index][1]
        if any(_same(mistaken, _result(fn, args, kwargs)) for i, (fn, other) in enumerate(diagnoses)
               if i != index and other != hint):
            continue
        return args, kwargs, mistaken
    pytest.fail(f"mistake {index} is never told apart from the reference and the other mistakes on these inputs")


@pytest.mark.parametrize("lesson, list_name, index, reference, inputs, outputs, run", list(_items()))
def test_a_mistake_is_named_only_when_the_function_is_that_mistake(lesson, list_name, index, reference, inputs,
                                                                   outputs, run):
    real = getattr(MODULES[lesson], list_name)
    copies = mutation.checks_copy(lesson)[list_name]
    hint = real[index][1]
    args, kwargs, mistaken = _distinguishing_input(real, index, reference, inputs)
    # the mistake itself, as a student would write it: named
    with pytest.raises(Hint) as named:
        run(copies[index][0], reference, args, kwargs, real, outputs)
    assert hint in str(named.value), str(named.value)
    # a different function that coincides with the mistake on this input only: not named
    reference_copy = _student_copy_of(reference)
    with pytest.raises(Hint) as generic:
        run(_coincides_once(mistaken, args, kwargs, reference_copy), reference, args, kwargs, real, outputs)
    assert hint not in str(generic.value), str(generic.value)


COPY_OF = {lesson04.MASKED_SOFTMAX_REFERENCE: "qkv.attention.masked_softmax",
           lesson04.CAUSAL_ATTENTION_REFERENCE: "qkv.masking.causal_self_attention"}


def _student_copy_of(reference):
    """The reference compiled as a student's code: a function outside qkv may call it without tripping the wire."""
    return mutation.student_reference(COPY_OF.get(reference) or f"{reference.__module__}.{reference.__name__}")


# ---------------------------------------------------------------- issue 20: confirmations that can tell mistakes apart

def _confirming_inputs(run, reference, args, kwargs):
    """The inputs on which qkv.checking confirms a diagnosis made on (args, kwargs): the check's own
    confirmations, then this input moved a little."""
    confirm = getattr(run, "confirm", ())
    confirm = confirm(args) if callable(confirm) else confirm
    probes = _Probes(_student_copy_of(reference), reference, args, kwargs, "fn", (), confirm_with=confirm)
    return [(probe_args, probe_kwargs) for probe_args, probe_kwargs, _, _ in probes]


def _catalogues():
    for lesson, list_name, reference, inputs, _outputs, run in CASES:
        yield pytest.param(getattr(MODULES[lesson], list_name), reference, inputs, run, id=f"{lesson}:{list_name}")


@pytest.mark.parametrize("diagnoses, reference, inputs, run", list(_catalogues()))
def test_every_two_mistakes_that_give_the_same_wrong_answer_are_told_apart_by_the_confirming_inputs(
        diagnoses, reference, inputs, run):
    # Two listed mistakes that coincide on a checked input stand for all the mistakes nobody listed that
    # coincide there too (lesson 01: no max and a whole-array sum give the same NaN on one slice; lesson 06:
    # a window one too narrow and sinks counted inside it give the same mask when n_sink = 1). A diagnosis is
    # only as good as the inputs that confirm it: they must separate every such pair.
    for args, kwargs in inputs:
        expected, confirming = _result(reference, args, kwargs), None
        for a, (first, first_hint) in enumerate(diagnoses):
            for second, second_hint in diagnoses[a + 1:]:
                here = _result(first, args, kwargs)
                if first_hint == second_hint or here is None or _same(here, expected):
                    continue
                if not _same(here, _result(second, args, kwargs)):
                    continue
                confirming = confirming if confirming is not None else _confirming_inputs(run, reference, args, kwargs)
                apart = [(c_args, c_kwargs) for c_args, c_kwargs in confirming
                         if _result(first, c_args, c_kwargs) is not None
                         and not _same(_result(first, c_args, c_kwargs), _result(second, c_args, c_kwargs))]
                assert apart, (f"on {args!r} {kwargs!r}, {first_hint!r} and {second_hint!r} give the same answer "
                               f"and no confirming input tells them apart")
