"""Lesson 07's chunked attention, plain and causal (online softmax): the catalogues of mistakes, the NaN hints and
the declared Checks (kept apart from lesson07.py, which re-exports the declarations and runs the visible checks)."""
import dataclasses
import math

import numpy as np

from qkv import cost as ref_cost
from qkv.checking import Check, seal


# ---------------------------------------------------------------- chunked_attention

def _online(Q, K, V, chunk, rescale_sum=True, rescale_out=True, flip=False, drop_last=False, scale=True,
            causal=False, skip_diagonal=False, mask_diagonal=True, first_max=None):
    """Online-softmax attention with one thing changed, to recognise a mistake (a block grid when causal)."""
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    factor = 1 / math.sqrt(Q.shape[1]) if scale else 1.0
    n_k = K.shape[0]
    stop = n_k - n_k % chunk if drop_last else n_k
    q_blocks = [(s, min(s + chunk, len(Q))) for s in range(0, len(Q), chunk)] if causal else [(0, len(Q))]
    out = np.zeros((len(Q), V.shape[1]))
    for q_start, q_end in q_blocks:
        m = l = acc = None
        if first_max is not None:  # a running max started at a number instead of at the first chunk's maximum
            m, l, acc = np.full((q_end - q_start, 1), first_max), np.zeros((q_end - q_start, 1)), 0.0
        last = (q_start if skip_diagonal else q_end) if causal else stop
        for start in range(0, last, chunk):
            end = min(start + chunk, stop)
            if end <= start:
                break
            s = Q[q_start:q_end] @ K[start:end].T * factor
            if causal and mask_diagonal:
                s = np.where(np.arange(q_start, q_end)[:, None] >= np.arange(start, end)[None, :], s, -np.inf)
            block_max = s.max(axis=1, keepdims=True)
            if m is None:
                m, l, acc = block_max, np.exp(s - block_max).sum(1, keepdims=True), np.exp(s - block_max) @ V[start:end]
                continue
            m_new = np.maximum(m, block_max)
            r = np.exp(m_new - m) if flip else np.exp(m - m_new)
            p = np.exp(s - m_new)
            l = (l * r if rescale_sum else l) + p.sum(1, keepdims=True)
            acc = (acc * r if rescale_out else acc) + p @ V[start:end]
            m = m_new
        if acc is not None:
            out[q_start:q_end] = acc / l
    return out


MAX_STARTED_AT_ZERO = ("the rows whose every score lies far below 0 came out 0/0: the running max was started at 0, so "
                       "exp(score - 0) underflows to 0 in every chunk and the running sum stays 0. Start it at -inf "
                       "(np.full((n_q, 1), -np.inf)): the first chunk's maximum then replaces it.")

CHUNKED_MISTAKES = [
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, rescale_sum=False),
     "the running sum is not rescaled when the running max grows: what was summed under the old max must be "
     "multiplied by exp(old_max - new_max) before the new chunk's exponentials are added."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, rescale_out=False),
     "the running output is not rescaled when the running max grows: multiply it by exp(old_max - new_max) "
     "before adding the new chunk's p @ V."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, rescale_sum=False, rescale_out=False),
     "neither the running sum nor the running output is rescaled when the running max grows: both must be "
     "multiplied by exp(old_max - new_max)."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, flip=True),
     "the rescaling factor is upside down: exp(new_max - old_max) is >= 1; what was summed under the old max "
     "shrinks under a larger one, by exp(old_max - new_max)."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, drop_last=True),
     "the last, shorter chunk is missing: when the number of keys is not a multiple of `chunk`, the final "
     "chunk holds the remaining keys (range(0, n_k, chunk) and slicing handle it)."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, scale=False),
     "the scores are not scaled: divide Q @ K_chunk^T by sqrt(d_k)."),
    (lambda Q, K, V, chunk: _online(Q, K, V, chunk, first_max=0.0), MAX_STARTED_AT_ZERO),
]

CHUNKED_NONFINITE = ("on the first chunk the running max is -inf, so a factor exp(new_max - old_max) is infinite; "
                     "the factor is exp(old_max - new_max), which is 0 there and never above 1. (Or a running sum "
                     "stayed 0: is every chunk, the last shorter one included, added?)")


CHUNKED_OVERFLOW = ("these scores go above 709, where np.exp overflows to infinity (and inf / inf is NaN): is the "
                    "running max subtracted before the exponentials, exp(scores - m_new), and are the running sum "
                    "and output rescaled by exp(old_max - new_max) when it grows?")

CHUNKED_ATTENTION = Check(name="chunked_attention", diagnoses=CHUNKED_MISTAKES, nonfinite_hint=CHUNKED_NONFINITE,
                          rtol=1e-6, atol=1e-6)
# the same check on scores past exp's limit, where a NaN or infinity means an unsubtracted max
CHUNKED_ATTENTION_OVERFLOW = dataclasses.replace(CHUNKED_ATTENTION, nonfinite_hint=CHUNKED_OVERFLOW)


# ---------------------------------------------------------------- causal_chunked_attention

def _with_count(output_fn, count_fn):
    return lambda Q, K, V, chunk: (output_fn(Q, K, V, chunk), count_fn(len(Q), chunk))


def _computed(T, chunk):
    return ref_cost.causal_block_counts(T, chunk)[0]


# Missing the last, shorter chunk's blocks (T // chunk chunks) and leaving out the diagonal blocks give one count
# whenever the first is wrong (chunk does not divide T): one hint for both, so that it can be said at all
COUNT_SHORT_BY_A_ROW = ("the output is right but the count is short: the blocks on the diagonal are computed (half "
                        "masked), so they count, and a last, shorter chunk makes blocks too (ceil(T / chunk) chunks, "
                        "not T // chunk).")

CAUSAL_MISTAKES = [
    (_with_count(lambda Q, K, V, c: _online(Q, K, V, c, causal=True, mask_diagonal=False), _computed),
     "queries see later keys inside the blocks on the diagonal: a diagonal block holds both past and future "
     "keys, so mask the scores where the key's position is after the query's."),
    (_with_count(lambda Q, K, V, c: _online(Q, K, V, c, causal=True, rescale_sum=False, rescale_out=False), _computed),
     "the running sum and output are not rescaled when the running max grows (multiply both by "
     "exp(old_max - new_max))."),
    (_with_count(lambda Q, K, V, c: _online(Q, K, V, c, causal=True, first_max=0.0), _computed), MAX_STARTED_AT_ZERO),
    (_with_count(lambda Q, K, V, c: ref_cost.causal_chunked_attention(Q, K, V, c)[0],
                 lambda T, c: ref_cost.causal_block_counts(T, c)[1]),
     "the output is right, but every block of the grid was computed: a block whose first key comes after its "
     "last query is entirely in the future; skip it (do not compute and mask it), and count only the blocks "
     "you compute."),
    (_with_count(lambda Q, K, V, c: ref_cost.causal_chunked_attention(Q, K, V, c)[0],
                 lambda T, c: (T // c) * (T // c + 1) // 2), COUNT_SHORT_BY_A_ROW),
    (_with_count(lambda Q, K, V, c: ref_cost.causal_chunked_attention(Q, K, V, c)[0],
                 lambda T, c: _computed(T, c) - (-(-T // c))), COUNT_SHORT_BY_A_ROW),
]

CAUSAL_NONFINITE = ("a block of queries ended up with no key at all: the block on the diagonal must be computed "
                    "(with its future half masked), since it holds each query's own key; only blocks strictly "
                    "above the diagonal are skipped. (An upside-down rescaling exp(new_max - old_max) overflows too.)")

CAUSAL_CHUNKED_ATTENTION = Check(name="causal_chunked_attention", diagnoses=CAUSAL_MISTAKES,
                                 nonfinite_hint=CAUSAL_NONFINITE, outputs=("output", "blocks computed"),
                                 rtol=1e-6, atol=1e-6)
# the same check on scores past exp's limit
CAUSAL_CHUNKED_ATTENTION_OVERFLOW = dataclasses.replace(CAUSAL_CHUNKED_ATTENTION, nonfinite_hint=CHUNKED_OVERFLOW)


seal(__name__)
