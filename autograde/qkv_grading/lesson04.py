"""Hidden tests for lesson 04, the causal mask: fresh random inputs, several T, batches, float32,
huge hidden scores and fully masked rows."""
import numpy as np

from qkv import attention as ref, masking
from qkv.checking import check_against, seal
from qkv.checks import lesson04 as visible
from qkv_grading import expect_answer, fresh_rng


def _some_lengths(rng):
    return [int(rng.integers(1, 4)), 2, 3, int(rng.integers(5, 9)), int(rng.integers(10, 33))]


def causal_mask(student_causal_mask):
    rng = fresh_rng()
    for T in [1] + _some_lengths(rng) + [np.int64(rng.integers(2, 7))]:
        visible.check_boolean(student_causal_mask, masking.causal_mask, (T,), "causal_mask",
                              visible.CAUSAL_MASK_MISTAKES, meaning="query i may attend key j exactly when j <= i")


def _loud_hidden(rng, scores, mask, loudness):
    """Give every hidden entry a score far above the visible ones: it must still get no weight."""
    return np.where(mask, scores, scores + loudness * (1 + rng.random(scores.shape)))


def masked_softmax(student_masked_softmax):
    rng = fresh_rng()
    check = visible.MASKED_SOFTMAX_CHECK
    T = int(rng.integers(3, 8))
    causal = masking.causal_mask(T)
    cases = [(rng.normal(size=(T, T)) * 2, causal)]
    # an arbitrary mask with one row fully masked, on a rectangular [n_q, n_k] score matrix
    mask = rng.random((4, 6)) < 0.6
    fully_masked = int(rng.integers(4))
    mask[fully_masked] = False
    mask[(fully_masked + 1) % 4, rng.integers(6)] = True
    cases.append((rng.normal(size=(4, 6)), mask))
    # a padded batch: scores [B, T, T], causal & padding mask, a sequence of length 0 (every row masked)
    lengths = [T, int(rng.integers(1, T)), 0]
    cases.append((rng.normal(size=(3, T, T)), masking.causal_padding_mask(lengths, T)))
    # one [T, T] mask broadcast over a batch and heads, float32
    cases.append((rng.normal(size=(2, 3, T, T)).astype(np.float32), causal))
    # a key-padding mask [B, 1, T] broadcast over the queries
    cases.append((rng.normal(size=(3, T, T)), masking.padding_mask(lengths, T)[:, :1, :]))
    # hidden scores far larger than the visible ones (float64 and float32): they must not matter
    cases.append((_loud_hidden(rng, rng.normal(size=(T, T)), causal, 1000.0), causal))
    cases.append((_loud_hidden(rng, rng.normal(size=(T, T)), causal, 200.0).astype(np.float32), causal))
    # nothing hidden: the plain softmax
    cases.append((rng.normal(size=(3, 5)), np.ones((3, 5), dtype=bool)))
    for scores, mask in cases:
        check_against(student_masked_softmax, visible.MASKED_SOFTMAX_REFERENCE, (scores, mask), **check)


def _random_projections(rng, d_model, d_k, d_v):
    W_Q, W_K = (rng.normal(size=(d_model, d_k)) / np.sqrt(d_model) for _ in range(2))
    return W_Q, W_K, rng.normal(size=(d_model, d_v)) / np.sqrt(d_model)


def causal_self_attention(student_attention):
    rng = fresh_rng()
    check = visible.CAUSAL_ATTENTION_CHECK
    for T, d_model, d_k, d_v in [(int(rng.integers(4, 9)), 6, 4, 3), (1, 5, 3, 2), (int(rng.integers(10, 17)), 8, 8, 5)]:
        W = _random_projections(rng, d_model, d_k, d_v)
        check_against(student_attention, visible.CAUSAL_ATTENTION_REFERENCE, (rng.normal(size=(T, d_model)), *W), **check)
    W = _random_projections(rng, 6, 4, 4)
    T = int(rng.integers(3, 8))
    batch = rng.normal(size=(3, T, 6))
    check_against(student_attention, visible.CAUSAL_ATTENTION_REFERENCE, (batch, *W), **check)
    W32 = tuple(w.astype(np.float32) for w in W)
    check_against(student_attention, visible.CAUSAL_ATTENTION_REFERENCE, (batch.astype(np.float32), *W32), **check)
    check_against(student_attention, visible.CAUSAL_ATTENTION_REFERENCE, (visible.loud_future_input(rng, T, W[0], W[1]), *W),
                  **check)


def _lengths(rng, B, T):
    lengths = rng.integers(0, T + 1, size=B)
    lengths[0], lengths[-1] = T, 0
    return rng.permutation(lengths)


def padding_mask(student_padding_mask):
    rng = fresh_rng()
    for B, T in [(3, int(rng.integers(4, 9))), (1, 1), (5, int(rng.integers(9, 20)))]:
        lengths = _lengths(rng, B, T)
        for form in (lengths.tolist(), lengths):
            visible.check_boolean(student_padding_mask, masking.padding_mask, (form, T), "padding_mask",
                                  visible.PADDING_MASK_MISTAKES,
                                  meaning="in sequence b, key j is visible exactly when j < lengths[b]")


def causal_padding_mask(student_causal_padding_mask):
    rng = fresh_rng()
    for B, T in [(3, int(rng.integers(4, 9))), (1, 1), (5, int(rng.integers(9, 20)))]:
        lengths = _lengths(rng, B, T)
        for form in (lengths.tolist(), lengths):
            visible.check_boolean(student_causal_padding_mask, masking.causal_padding_mask, (form, T),
                                  "causal_padding_mask", visible.CAUSAL_PADDING_MISTAKES,
                                  meaning="key j is visible to query i of sequence b when j <= i and j < lengths[b]")


def _positionwise(W):
    return visible.named(lambda X: np.tanh(np.asarray(X) @ W), "positionwise")


def _clear_cut(attend, X):
    """Every real dependence moves the output by far more than any threshold a student might choose."""
    return np.array_equal(masking.dependence_matrix(attend, X, tol=1e-9),
                          masking.dependence_matrix(attend, X, tol=1e-4))


def dependence_matrix(student_probe):
    rng = fresh_rng()
    for T, d_model in [(int(rng.integers(4, 9)), 6), (1, 4), (int(rng.integers(9, 14)), 5)]:
        for _ in range(50):
            X = rng.normal(size=(T, d_model))
            W_Q, W_K, W_V = _random_projections(rng, d_model, 4, 3)
            random_mask = (rng.random((T, T)) < 0.5) | np.eye(T, dtype=bool)
            targets = visible.probe_targets(W_Q, W_K, W_V) + [
                visible.named(lambda X, m=random_mask: ref.self_attention(X, W_Q, W_K, W_V, mask=m), "random_mask_attention"),
                _positionwise(W_V),
            ]
            if all(_clear_cut(attend, X) for attend in targets):
                break
        for attend in targets:
            visible.check_dependence(student_probe, attend, X)


ANSWERS = {
    "causal_blocks": ("b", None),
    "blocked_pairs": (28.0, 0.01),
    "future_share_zero_mask": (0.8, 0.005),
    "why_meaningless": ("c", None),
}


def answer(name, value):
    correct, tolerance = ANSWERS[name]
    expect_answer(value, correct, name, tolerance)


seal(__name__)
