"""Lesson 07's memory probes (lesson07.py re-exports memory_of_chunked and memory_of_causal): how much the student's
chunked attention allocates beyond its inputs, against what one block of scores and the whole score matrix need."""
import numpy as np

from qkv.checking import Hint, call_text, call_with_peak_memory, expect_array, seal


def _peak_beyond(student_fn, name, args, shape):
    """(the student's peak memory during the call, beyond the bytes of its inputs): a sandboxed kernel counts the
    inputs once, a local call their copies; what is left is what the function allocated."""
    result, peak = call_with_peak_memory(student_fn, *args, name=name)
    expect_array(result[0] if isinstance(result, tuple) else result, shape, call_text(name, args))
    inputs = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    return max(0, peak - inputs)


def _mib(n_bytes):
    return f"{n_bytes / 2**20:.2f} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:.0f} KiB"


def memory_of_chunked(student_chunked, name="chunked_attention", n_q=32, n_k=16384, chunk=64, d=4, seed=7):
    """Chunks of KEYS with a running max and sum need O(n_q * chunk) memory beyond the inputs, whatever n_k; the
    [n_q, n_k] score matrix, or a chunk of queries against every key ([n_q, n_k] too, since n_q <= chunk here)
    needs O(n_q * n_k). n_k is much larger than chunk, so the two are far apart."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(n_q, d)), rng.normal(size=(n_k, d)), rng.normal(size=(n_k, d))
    used = _peak_beyond(student_chunked, name, (Q, K, V, chunk), (n_q, d))
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
    used = _peak_beyond(student_causal, name, (Q, K, V, chunk), (T, d))
    strip = chunk * T * 8
    if used >= 0.75 * strip:    # the last chunk of queries against its past alone is a whole strip
        raise Hint(f"{name} allocated {_mib(used)} beyond its inputs for T = {T} in chunks of {chunk}: that is the "
                   f"scale of a [{chunk}, {T}] strip of scores, a chunk of queries against every key ({_mib(strip)}; "
                   f"the masked [T, T] matrix is {_mib(T * T * 8)}), not of one [{chunk}, {chunk}] block "
                   f"({_mib(chunk * chunk * 8)}). Cut the keys into chunks too: each block on or below the diagonal "
                   f"goes through the running max and sum, and the blocks above it are never computed.")
    return used


seal(__name__)
