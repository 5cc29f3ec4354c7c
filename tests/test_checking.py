"""The check machinery: every way a student's function can go wrong becomes one clear sentence."""
import numpy as np
import pytest

from qkv import attention
from qkv.checking import Hint, call, check_against, expect_array

X = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])


def hint_for(student, reference=attention.softmax, args=(X,)):
    with pytest.raises(Hint) as caught:
        check_against(student, reference, args, name="softmax")
    message = str(caught.value)
    assert "\n" not in message, "a hint is one line"
    return message


def test_none_is_named_with_the_expected_shape():
    assert hint_for(lambda x: None) == ("softmax(array(2, 3) float64) returned None; expected an array of "
                                        "shape (2, 3). Is a `return` missing?")


def own_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_list_tuple_scalar_and_wrong_shape():
    assert "returned a list; expected an array of shape (2, 3)" in hint_for(lambda x: own_softmax(x).tolist())
    assert "returned a tuple" in hint_for(lambda x: (1, 2))
    assert "returned the single number 1.0; expected an array of shape (2, 3)" in hint_for(lambda x: 1.0)
    assert "returned shape (3, 2); expected (2, 3)" in hint_for(lambda x: own_softmax(x).T.copy())


def test_nan_and_non_numeric():
    assert "returned NaN in its result; expected finite numbers" in hint_for(lambda x: np.full((2, 3), np.nan))
    assert "returned values of type <U1" in hint_for(lambda x: np.full((2, 3), "a"))


def test_exceptions_name_the_student_line():
    def broken(x):
        y = x @ np.ones((4, 4))  # wrong inner dimension
        return y
    message = hint_for(broken)
    assert message.startswith("softmax(array(2, 3) float64) raised ValueError: matmul")
    assert "line" in message and "x @ np.ones((4, 4))" in message


def test_blank_stub_says_not_written_yet():
    def softmax(x, axis=-1):
        raise NotImplementedError()
    assert "`softmax` is not written yet" in hint_for(softmax)


def test_the_reference_itself_or_a_call_into_it_earns_nothing():
    assert "is qkv's reference implementation, not yours" in hint_for(attention.softmax)
    assert "calls qkv's reference `softmax`" in hint_for(lambda x: attention.softmax(x))
    sneaky = attention.softmax
    assert "calls qkv's reference `softmax`" in hint_for(lambda x: sneaky(np.asarray(x)))


def test_allowed_tools_are_not_tripped():
    def weights(Q, K):
        return attention.softmax(Q @ K.T / np.sqrt(Q.shape[-1]))
    Q = np.eye(3)
    check_against(weights, attention.attention_weights, (Q, Q), allowed=(attention.softmax,))
    with pytest.raises(Hint, match="calls qkv's reference"):
        check_against(weights, attention.attention_weights, (Q, Q))


def test_tripwire_restores_the_previous_profiler():
    import sys
    seen = []
    sys.setprofile(lambda *a: seen.append(1))
    try:
        call(lambda: 1)
        assert sys.getprofile() is not None
    finally:
        sys.setprofile(None)


def test_expect_array_accepts_float32_and_ints():
    assert expect_array(np.ones((2, 2), np.float32), (2, 2), "f()").dtype == np.float64
    assert expect_array(np.ones(3, int), (None,), "f()").shape == (3,)


@pytest.mark.parametrize("fn, args, message", [
    (attention.attention, (np.ones((2, 4)), np.ones((3, 5)), np.ones((3, 2))), r"Q \(2, 4\) and K \(3, 5\) must share"),
    (attention.attention, (np.ones((2, 4)), np.ones((3, 4)), np.ones((2, 2))),
     r"V \(2, 2\) must have one row per key; K is \(3, 4\)"),
    (attention.project_qkv, (np.ones((5, 8)), np.ones((7, 4)), np.ones((8, 4)), np.ones((8, 4))),
     r"W_Q must be \[d_model, d\] with d_model = 8 to match X \(5, 8\); got \(7, 4\)"),
    (attention.masked_softmax, (np.ones((2, 3)), np.ones((3, 3), bool)),
     r"mask of shape \(3, 3\) does not broadcast to scores of shape \(2, 3\)"),
    (attention.softmax, ([[1, 2], [3]],), "rectangular"),
    (attention.softmax, (np.array(["a"]),), "dtype <U1"),
])
def test_library_rejects_bad_input_with_shapes_in_the_message(fn, args, message):
    with pytest.raises(ValueError, match=message):
        fn(*args)


def test_fully_masked_row_gives_zero_weights_and_zero_output_not_nan():
    mask = np.array([[True, False], [False, False]])
    w = attention.masked_softmax(np.array([[3.0, 1.0], [2.0, 5.0]]), mask)
    assert np.array_equal(w, [[1.0, 0.0], [0.0, 0.0]])
    out = attention.attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 3)), mask)
    assert np.all(np.isfinite(out)) and np.array_equal(out[1], np.zeros(3))


def test_a_notebook_that_replaces_the_reference_or_numpy_cannot_grade_itself(monkeypatch):
    import qkv.attention
    wrong = lambda x, axis=-1: np.asarray(x) / np.sum(x, axis=axis, keepdims=True)  # noqa: E731
    wrong.__module__ = "__main__"
    monkeypatch.setattr(qkv.attention, "softmax", wrong)
    with pytest.raises(Hint, match=r"`qkv.attention.softmax` has been replaced in this notebook"):
        check_against(wrong, qkv.attention.softmax, (X,), name="softmax")
    monkeypatch.undo()
    monkeypatch.setattr(np, "allclose", lambda *a, **k: True)
    with pytest.raises(Hint, match=r"`numpy.allclose` has been replaced"):
        check_against(lambda x: x, attention.softmax, (X,), name="softmax")
    monkeypatch.undo()
    check_against(own_softmax, attention.softmax, (X,), name="softmax")


# ---------------------------------------------------------------- tricks a student could try (found in review)

def test_reading_the_expected_answer_from_the_graders_stack_finds_nothing():
    import sys as _sys

    def peek(x):
        frame = _sys._getframe(1)
        while frame is not None:
            if "expected" in frame.f_locals:
                return frame.f_locals["expected"]
            frame = frame.f_back
        return np.zeros_like(x)
    with pytest.raises(Hint, match="is wrong"):
        check_against(peek, attention.softmax, (X,), name="softmax")


def test_switching_the_profiler_off_or_using_a_thread_does_not_hide_a_reference_call():
    import sys as _sys
    from concurrent.futures import ThreadPoolExecutor

    def profiler_off(x):
        _sys.setprofile(None)
        return attention.softmax(x)
    assert "switched off the profiler" in hint_for(profiler_off)

    def in_a_thread(x):
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(attention.softmax, x).result()
    assert "calls qkv's reference `softmax`" in hint_for(in_a_thread)


def test_the_checks_own_helpers_count_as_reference():
    from qkv.checks import lesson01
    assert "calls qkv's reference" in hint_for(
        lambda x: lesson01.SOFTMAX_MISTAKES[0][0](x, axis=0))


def test_functions_handed_to_the_student_may_be_called():
    def apply(f, x):
        return f(x)
    check_against(apply, lambda f, x: own_softmax(x), (attention.softmax, X), name="apply")


def test_a_replacement_disguised_under_numpys_file_name_is_still_caught(monkeypatch):
    disguised = eval(compile("lambda *a, **k: True", np.__file__, "eval"))
    monkeypatch.setattr(np, "allclose", disguised)
    with pytest.raises(Hint, match=r"`numpy.allclose` has been replaced"):
        check_against(lambda x: x, attention.softmax, (X,), name="softmax")


def test_parts_of_a_tuple_in_the_wrong_order_are_named():
    from qkv import lookup

    def output_first(q, K, V):
        weights = own_softmax(K @ q)
        return weights @ V, weights
    q, K, V = np.ones(2), np.eye(3, 2), np.ones((3, 4))
    with pytest.raises(Hint, match=r"returned parts of shapes \[\(4,\), \(3,\)\]; expected \(weights, output\) "
                                   r"of shapes \[\(3,\), \(4,\)\]: are the parts in the wrong order\?"):
        check_against(output_first, lookup.soft_lookup, (q, K, V), name="soft_lookup", outputs=("weights", "output"))


def test_a_list_of_arrays_is_described_in_one_line():
    assert "returned a list; expected" in hint_for(lambda x: [np.ones(3), np.ones(3)])


def test_a_broadcast_error_from_a_forgotten_keepdims_says_so():
    def softmax(x):
        e = np.exp(x - x.max(axis=-1))
        return e / e.sum(axis=-1)
    assert "keepdims=True keeps it" in hint_for(softmax)


def test_grader_modules_cannot_be_replaced_by_assignment():
    import qkv.checking
    import qkv.checks.lesson01
    import qkv_grading.lesson01
    for module, name in ((qkv_grading.lesson01, "softmax"), (qkv.checks.lesson01, "softmax"),
                         (qkv.checking, "close"), (qkv.checking, "assert_untampered")):
        with pytest.raises(AttributeError, match="belongs to the grader"):
            setattr(module, name, lambda *a, **k: None)
        with pytest.raises(AttributeError, match="belongs to the grader"):
            delattr(module, name)


def test_keepdims_advice_when_a_reduction_bound_earlier_meets_its_input():
    def softmax(x):
        top = np.max(x, axis=1)
        e = np.exp(x - top)
        return e / e.sum(axis=1, keepdims=True)
    assert "keepdims=True keeps it" in hint_for(softmax)


def test_no_keepdims_advice_for_a_broadcast_error_without_a_reduction():
    def softmax(x):
        e = np.exp(x)
        return e / np.ones((3, 2))  # a wrong shape, but nothing was reduced
    message = hint_for(softmax)
    assert "could not be broadcast" in message and "keepdims" not in message


def test_no_keepdims_advice_when_the_reduction_meets_something_else():
    def softmax(x):
        total = np.sum(np.exp(x), axis=1)
        return np.ones((3, 3)) / total  # the reduction is not broadcast against its own input
    assert "keepdims" not in hint_for(softmax)


def test_keepdims_advice_also_from_the_line_a_remote_kernel_reports():
    from qkv.checking import likely_cause
    error = ValueError("operands could not be broadcast together with shapes (2,3) (2,)")
    error.where_in_student_code = " (in your code, line 3: `return e / e.sum(axis=-1)`)"
    assert "keepdims" in likely_cause(error)
    error.where_in_student_code = " (in your code, line 3: `return e / mask`)"
    assert likely_cause(error) == ""


def values_off_by(fraction_of_scale, dtype):
    """A stand-in answer to `scaled`: the expected values, off by `fraction_of_scale` of their largest size."""
    def answer(x):
        expected = 10.0 * x
        signs = np.where(np.arange(x.size) % 2, 1.0, -1.0).reshape(x.shape)
        return (expected + fraction_of_scale * np.abs(expected).max() * signs).astype(dtype)
    return answer


def scaled(x):
    return 10.0 * x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float32_answer_is_compared_at_float32_precision_and_no_looser(dtype):
    x = np.array([[1e-3, -2.0, 30.0], [0.5, -0.01, 4.0]])
    # rounding in float32 of the size a sharp softmax produces (up to ~3e-5 of the scale): fine in float32 only
    if dtype is np.float32:
        check_against(values_off_by(5e-5, dtype), scaled, (x,), name="scaled")
    else:
        with pytest.raises(Hint, match="is wrong"):
            check_against(values_off_by(5e-5, dtype), scaled, (x,), name="scaled")
    # a real mistake is still one, whatever the precision
    with pytest.raises(Hint, match="is wrong"):
        check_against(values_off_by(1e-3, dtype), scaled, (x,), name="scaled")


def test_every_module_of_the_checking_package_is_sealed_and_its_functions_guarded():
    import importlib
    import inspect
    import pkgutil
    import qkv.checking
    from qkv.checking import assert_untampered
    names = ["qkv.checking"] + [f"qkv.checking.{m.name}" for m in pkgutil.iter_modules(qkv.checking.__path__)]
    assert len(names) > 5
    for name in names:
        module = importlib.import_module(name)
        function = next(attr for attr, value in sorted(vars(module).items())
                        if inspect.isfunction(value) and value.__module__.startswith("qkv.checking"))
        with pytest.raises(AttributeError, match="belongs to the grader"):
            setattr(module, function, lambda *a, **k: None)
        original = vars(module)[function]
        vars(module)[function] = lambda *a, **k: None  # round the seal: the tamper guard still sees it
        try:
            with pytest.raises(Hint, match=f"`{name}.{function}` has been replaced"):
                assert_untampered()
        finally:
            vars(module)[function] = original
    assert_untampered()


def test_the_tripwire_covers_every_module_holding_a_graded_reference():
    import importlib
    from lessons import LESSONS
    from qkv.checking import REFERENCE_MODULES
    for lesson in LESSONS:
        hidden = importlib.import_module(f"qkv_grading.lesson{lesson[:2]}")
        outside = {r for r in hidden.GRADED_REFERENCES if r.split(".")[1] not in REFERENCE_MODULES}
        assert not outside, f"{lesson}: graded references outside the tripwire's modules: {sorted(outside)}"


def test_a_self_check_answer_is_right_by_one_rule_in_self_study_and_in_hidden_grading():
    from qkv.checking import expect_answer, is_right
    for value, correct, tolerance in ((0.1668, 1 / 6, None), (0.17, 1 / 6, None), (3.0, 3.1, 0.2), ("b", "b", None),
                                      ("a", "b", None)):
        try:
            expect_answer(value, correct, "q", tolerance)
            graded = True
        except Hint:
            graded = False
        assert graded == is_right(value, correct, tolerance), (value, correct, tolerance)


def test_peak_memory_is_what_the_call_allocates_beyond_its_start_and_tracing_is_left_as_it_was():
    import tracemalloc
    from qkv.checking import call_with_peak_memory
    from qkv.peak_memory import traced_peak
    kept = np.ones(200_000)  # allocated before: not counted
    with traced_peak() as peak:
        np.ones(1_000_000).sum()
    assert 8_000_000 <= peak.bytes < 9_000_000 and not tracemalloc.is_tracing()
    result, peak_bytes = call_with_peak_memory(lambda n: float(np.ones(n).sum()), 500_000)
    assert result == 500_000.0 and 4_000_000 <= peak_bytes < 5_000_000 and kept.size
