"""Lesson 07's memory probes (lesson07.py re-exports memory_of_chunked and memory_of_causal): how much the student's
chunked attention allocates beyond its inputs, against what one block of scores and the whole score matrix need."""
import numpy as np

from qkv.checking import Hint, call_text, call_with_peak_memory, expect_array, measured_by_grader, seal


def _peak_beyond(student_fn, name, args, shape):
    """(the student's peak memory during the call beyond the bytes of its inputs, whether the grader measured it).

    In a student's own notebook tracemalloc counts what the call allocates, the copies of the inputs included, which
    are taken off. At grading time the grader measures the rise of the sandboxed kernel's memory (its cgroup) during
    the call, the arguments already in the kernel (qkv.checking.memory): nothing to take off, and never the kernel's
    own word (issue 34)."""
    result, peak = call_with_peak_memory(student_fn, *args, name=name)
    expect_array(result[0] if isinstance(result, tuple) else result, shape, call_text(name, args))
    if measured_by_grader(student_fn):
        return peak, True
    inputs = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    return max(0, peak - inputs), False


# What counts as "chunked" when the grader measures the kernel's memory (cgroup v1, charged in 64-page batches per
# CPU, so a right answer can read up to a few 256 KiB batches). Measured on the 2-core grading machine through
# `make grade`'s forked kernels, at the hidden tests' sizes (the rise of the kernel's memory during the call, MiB):
#   chunked_attention, n_k = 16384, n_q in 24..64, chunk 32/64: the solution 0-0.25; the whole score matrix
#     (full = n_q * n_k * 8 = 3-8 MiB) 1.0 x full; a naive softmax, or chunks of the queries, 3.0 x full
#     (with or without `tracemalloc.reset_peak()` before return). Bound: full / 2 (>= 1.5 MiB), as locally.
#   causal_chunked_attention, T = 2048, chunk 32/64: the solution 0-0.38 (the [chunk, chunk] blocks live in malloc's
#     heap); chunks of the queries against their past 2.5-3.3 MiB at chunk 32 (5-6.5 strips of 0.5 MiB), 4.9-6.0 at
#     64 (strips of 1 MiB); the masked [T, T] matrix 108 MiB. The local bound, 3/4 of a strip (0.375 MiB at chunk
#     32), is within the batches' noise of the solution's 0.38: the grader's bound is 2 strips (1-2 MiB), 2.6 x the
#     solution's highest reading and 2.45 x under the strip mistake's lowest. (Three runs, fresh and forked kernels.)
GRADER_CAUSAL_STRIPS = 2.0


def _mib(n_bytes):
    return f"{n_bytes / 2**20:.2f} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:.0f} KiB"


def memory_of_chunked(student_chunked, name="chunked_attention", n_q=32, n_k=16384, chunk=64, d=4, seed=7):
    """Chunks of KEYS with a running max and sum need O(n_q * chunk) memory beyond the inputs, whatever n_k; the
    [n_q, n_k] score matrix, or a chunk of queries against every key ([n_q, n_k] too, since n_q <= chunk here)
    needs O(n_q * n_k). n_k is much larger than chunk, so the two are far apart."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(n_q, d)), rng.normal(size=(n_k, d)), rng.normal(size=(n_k, d))
    used, _ = _peak_beyond(student_chunked, name, (Q, K, V, chunk), (n_q, d))
    full = n_q * n_k * 8
    if used >= full / 2:
        raise Hint(f"{name} allocated {_mib(used)} beyond its inputs for {n_q} queries against {n_k} keys in chunks "
                   f"of {chunk}: that is the scale of the whole [{n_q}, {n_k}] float64 score matrix ({_mib(full)}), "
                   f"not of one [{n_q}, {chunk}] block ({_mib(n_q * chunk * 8)}). Loop over chunks of the KEYS with a "
                   f"running max, sum and output per query: a loop over chunks of the queries with a full softmax "
                   f"over every key, or scores computed before the loop, holds every score of a query at once.")
    return used


def memory_of_causal(student_causal, name="causal_chunked_attention", T=2048, chunk=32, d=2, seed=8):
    """Blocks of [chunk, chunk] need O(chunk^2 + T * d) memory beyond the inputs; a block of queries against every
    (past) key needs [chunk, T], the masked [T, T] matrix T / chunk times more."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(T, d)), rng.normal(size=(T, d)), rng.normal(size=(T, d))
    used, by_grader = _peak_beyond(student_causal, name, (Q, K, V, chunk), (T, d))
    strip = chunk * T * 8
    # the last chunk of queries against its past alone is a whole strip (the grader's bound: see above)
    if used >= (GRADER_CAUSAL_STRIPS if by_grader else 0.75) * strip:
        raise Hint(f"{name} allocated {_mib(used)} beyond its inputs for T = {T} in chunks of {chunk}: that is the "
                   f"scale of a [{chunk}, {T}] strip of scores, a chunk of queries against every key ({_mib(strip)}; "
                   f"the masked [T, T] matrix is {_mib(T * T * 8)}), not of one [{chunk}, {chunk}] block "
                   f"({_mib(chunk * chunk * 8)}). Cut the keys into chunks too: each block on or below the diagonal "
                   f"goes through the running max and sum, and the blocks above it are never computed.")
    return used


seal(__name__)
