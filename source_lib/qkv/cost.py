"""Lesson 07: what attention costs, and three ideas every serving system uses against the cost.

- counting: a [T, T] score matrix per head per layer, so the cost of attention grows with T squared;
- measuring: time and peak memory of one head's attention, and the exponent of a power law fitted to them;
- recurrence, the design attention replaced: a sequential loop of T steps, paths of length T - 1;
- the KV cache: one new query against the keys and values kept from earlier steps (one layer's cache here;
  the whole model with a cache is qkv.kv_cache);
- online softmax: attention over keys in chunks with a running max, sum and output, never the [T, T] matrix.

Shapes follow qkv.attention: rows are queries, columns are keys; heads first, [H, T, d_head].
"""
import math
import os
import time
import tracemalloc

import numpy as np

from qkv.attention import attention, masked_softmax, scaled_scores
from qkv.heads import attention_flops, attention_parameter_count, grouped_query_attention, repeat_kv_heads
from qkv.masking import causal_mask
from qkv.own_attention import require_models_own
from qkv.shapes import as_float_array, require, whole_number


# ---------------------------------------------------------------- counting

def score_count(T, n_heads=1, n_layers=1):
    # int -> int: one score per (query, key) pair, in every head of every layer
    T = whole_number(T, "T", 0)
    return T * T * int(n_heads) * int(n_layers)


def cost_ratio(n_old, n_new):
    # int, int -> float: how many times the [n, n] score matrix grows when the context goes from n_old to n_new
    require(n_old > 0 and n_new > 0, f"context lengths must be positive; got {n_old!r} and {n_new!r}")
    return (n_new / n_old) ** 2


def mlp_flops(T, d_model, d_ffn):
    # floating-point operations of one SwiGLU MLP on T tokens: three [d_model, d_ffn] products (gate, up, down)
    return 2 * T * 3 * d_model * d_ffn


def layer_flops(config, T):
    # config, int -> dict of the FLOPs of one transformer layer on T tokens (a multiply-add counted as 2)
    projections = 2 * T * attention_parameter_count(config.d_model, config.n_heads, config.d_head, config.n_kv_heads)
    products = attention_flops(T, config.d_model, config.n_heads, config.d_head, config.n_kv_heads) - projections
    return {"projections": projections, "attention products": products,
            "MLP": mlp_flops(T, config.d_model, config.d_ffn)}


def crossover_length(config):
    # config -> float: the T at which Q K^T and weights @ V cost as much as the projections and the MLP together;
    # the products grow as T^2 and the rest as T, so both sides divided by T meet at one length
    per_token = layer_flops(config, 1)
    return (per_token["projections"] + per_token["MLP"]) / per_token["attention products"]


# ---------------------------------------------------------------- fitting a power law

def fit_exponent(sizes, values):
    # [n], [n] -> float: the least-squares slope of log(values) against log(sizes); values ~ c * sizes^slope
    sizes, values = as_float_array(sizes, "sizes"), as_float_array(values, "values")
    require(sizes.ndim == 1 and sizes.shape == values.shape and len(sizes) >= 2,
            f"sizes and values must be two 1-D lists of the same length >= 2; "
            f"got shapes {sizes.shape} and {values.shape}")
    require(np.all(sizes > 0) and np.all(values > 0), "sizes and values must all be positive to take logarithms")
    require(np.ptp(sizes) > 0, "the sizes must not all be equal: a slope needs at least two different sizes")
    slope, _ = np.polyfit(np.log(sizes), np.log(values), 1)
    return float(slope)


# ---------------------------------------------------------------- measuring, safely

# the naive attention of qkv.attention keeps up to four [T, T] arrays alive at once: the scores, the shifted
# scores, their exponentials and the weights
NAIVE_TT_ARRAYS = 4
PROBE_LIMIT_BYTES = 4 * 2**30


def naive_attention_bytes(T, itemsize=8, arrays=NAIVE_TT_ARRAYS):
    # int -> int: what naive attention's [T, T] arrays take at once, float64 by default
    return arrays * int(T) * int(T) * int(itemsize)


def _available_bytes():
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _address_space_headroom():
    # a kernel run under an address-space limit (a grading sandbox) has less room than the machine's free memory
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status") as status:
            used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        return max(0, soft - used)
    except (ImportError, OSError, StopIteration, ValueError):
        return None


def probe_limit_bytes():
    # the most a probe may allocate: 4 GiB, half of the memory the machine has free, or most of what an
    # address-space limit leaves, whichever is least
    limits = [PROBE_LIMIT_BYTES]
    available, headroom = _available_bytes(), _address_space_headroom()
    if available is not None:
        limits.append(available // 2)
    if headroom is not None:
        limits.append(int(headroom * 0.6))
    return min(limits)


def check_probe_fits(T, limit=None, itemsize=8, arrays=NAIVE_TT_ARRAYS,
                     what="naive attention's [T, T] float64 arrays"):
    """Refuse, before anything is allocated, a T whose [T, T] arrays would not fit."""
    whole_number(T, "T", 1)
    limit = probe_limit_bytes() if limit is None else limit
    need = naive_attention_bytes(T, itemsize, arrays)
    largest = int(math.isqrt(limit // (itemsize * arrays)))
    require(need <= limit,
            f"T = {T} would need about {need / 2**30:.1f} GiB for {what} ({arrays} alive at once), more than "
            f"this probe allows here ({limit / 2**30:.1f} GiB); choose T <= {largest}.")


def random_qkv(T, d_head=64, seed=0, dtype=np.float64):
    # int -> Q, K, V, each [T, d_head]: a random head of the sizes the measurements use
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=(T, d_head)).astype(dtype) for _ in range(3))


def measure_attention(fn, T, d_head=64, repeats=1, seed=0, **kwargs):
    """(seconds, peak bytes) of fn(Q, K, V, **kwargs) on one random head of T tokens.

    Each run is timed and traced by tracemalloc at once (it only books allocations, so numpy's arithmetic
    runs at full speed); the time is the best of `repeats` runs, the peak is what numpy allocated beyond the
    inputs, which are made before. T is checked first: a size whose naive [T, T] float64 arrays would not fit
    is refused before anything is allocated.
    """
    check_probe_fits(T)
    Q, K, V = random_qkv(T, d_head, seed)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    best, peak = math.inf, 0
    try:
        for _ in range(max(1, int(repeats))):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            start = time.perf_counter()
            fn(Q, K, V, **kwargs)
            best = min(best, time.perf_counter() - start)
            peak = max(peak, tracemalloc.get_traced_memory()[1] - before)
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return best, peak


def naive_attention(Q, K, V):
    # [T, d], [T, d], [T, d_v] -> [T, d_v]: lesson 02's attention, the whole [T, T] matrix at once
    return attention(Q, K, V)


# ---------------------------------------------------------------- the design attention replaced

def rnn_forward(X, W_x, W_h):
    # [T, d_in], [d_in, d], [d, d] -> [T, d]: h_t = tanh(h_{t-1} W_h + x_t W_x), h_{-1} = 0, one step after another
    X, W_x, W_h = as_float_array(X, "X"), as_float_array(W_x, "W_x"), as_float_array(W_h, "W_h")
    require(X.ndim == 2 and W_x.ndim == 2 and W_x.shape[0] == X.shape[1] and W_h.shape == (W_x.shape[1],) * 2,
            f"need X [T, d_in], W_x [d_in, d], W_h [d, d]; got {X.shape}, {W_x.shape}, {W_h.shape}")
    inputs = X @ W_x            # every x_t W_x at once: only the recurrence itself has to wait
    h = np.zeros(W_h.shape[0], dtype=inputs.dtype)
    states = np.empty_like(inputs)
    for t in range(len(X)):
        h = np.tanh(h @ W_h + inputs[t])
        states[t] = h
    return states


def rnn_flops(T, d_in, d):
    # FLOPs of rnn_forward on T tokens (a multiply-add counted as 2): x_t W_x and h_{t-1} W_h for every t
    return 2 * int(T) * (int(d_in) + int(d)) * int(d)


def path_length(i, j, kind):
    # the number of steps the signal of token j takes to reach token i (j <= i): a chain, or one attention
    require(0 <= j <= i, f"need 0 <= j <= i; got i = {i}, j = {j}")
    require(kind in ("recurrent", "attention"), f"kind must be 'recurrent' or 'attention'; got {kind!r}")
    if kind == "recurrent":
        return i - j
    return 0 if i == j else 1


# ---------------------------------------------------------------- the KV cache

def _check_cache(k_cache, v_cache):
    k_cache, v_cache = as_float_array(k_cache, "k_cache"), as_float_array(v_cache, "v_cache")
    require(k_cache.ndim == 3 and v_cache.ndim == 3,
            f"a cache is k and v of shape [H_kv, T, d_head]; got k {k_cache.shape}, v {v_cache.shape}")
    require(k_cache.shape[:2] == v_cache.shape[:2],
            f"k_cache {k_cache.shape} and v_cache {v_cache.shape} must hold the same heads and tokens")
    return k_cache, v_cache


def empty_cache(n_kv_heads, d_head, d_v=None, dtype=np.float32):
    # -> k [H_kv, 0, d_head], v [H_kv, 0, d_v]: the cache before the first token
    d_v = d_head if d_v is None else d_v
    return np.zeros((n_kv_heads, 0, d_head), dtype), np.zeros((n_kv_heads, 0, d_v), dtype)


def append_to_cache(k_cache, v_cache, k_new, v_new):
    # [H_kv, T, d], [H_kv, T, d_v], [H_kv, n, d], [H_kv, n, d_v] -> [H_kv, T + n, d], [H_kv, T + n, d_v]
    k_cache, v_cache = _check_cache(k_cache, v_cache)
    k_new, v_new = _check_cache(k_new, v_new)
    require(k_new.shape[0] == k_cache.shape[0] and k_new.shape[2] == k_cache.shape[2]
            and v_new.shape[2] == v_cache.shape[2],
            f"the new keys/values (k {k_new.shape}, v {v_new.shape}) do not fit a cache of k {k_cache.shape}, "
            f"v {v_cache.shape}: is the cache from another layer or another model?")
    return np.concatenate([k_cache, k_new], axis=1), np.concatenate([v_cache, v_new], axis=1)


def attention_step(q_new, k_cache, v_cache):
    # [H_q, 1, d], [H_kv, T, d], [H_kv, T, d] -> [H_q, 1, d]: the newest token's query against every cached
    # key, its own included (the cache is appended before the step); nothing to mask, the future is not there yet
    q_new = as_float_array(q_new, "q_new")
    k_cache, v_cache = _check_cache(k_cache, v_cache)
    require(q_new.ndim == 3 and q_new.shape[1] == 1,
            f"q_new must be one new query per head, [H_q, 1, d_head]; got shape {q_new.shape}")
    require(q_new.shape[2] == k_cache.shape[2],
            f"q_new has d_head = {q_new.shape[2]} but the cached keys have width {k_cache.shape[2]}: "
            f"is the cache from another model?")
    require(k_cache.shape[1] >= 1, "the cache is empty: append the new token's key and value before the step")
    require(q_new.shape[0] % k_cache.shape[0] == 0,
            f"{q_new.shape[0]} query heads cannot share {k_cache.shape[0]} cached key/value heads evenly: "
            f"is the cache from another model?")
    return grouped_query_attention(q_new, k_cache, v_cache)


def evict(k_cache, v_cache, window, n_sink=0):
    # [H_kv, T, d], [H_kv, T, d_v] -> at most n_sink + window tokens: the first n_sink and the last window
    # (lesson 06's sliding window with sinks, as a cache that stops growing)
    k_cache, v_cache = _check_cache(k_cache, v_cache)
    window, n_sink = whole_number(window, "window", 1), whole_number(n_sink, "n_sink", 0)
    T = k_cache.shape[1]
    if T <= n_sink + window:
        return k_cache, v_cache
    keep = np.r_[0:n_sink, T - window:T]
    return k_cache[:, keep], v_cache[:, keep]


# ---------------------------------------------------------------- online softmax

def _check_chunked(Q, K, V, chunk):
    Q, K, V = as_float_array(Q, "Q"), as_float_array(K, "K"), as_float_array(V, "V")
    require(Q.ndim == 2 and K.ndim == 2 and V.ndim == 2,
            f"Q, K, V must be [n, d] matrices; got Q {Q.shape}, K {K.shape}, V {V.shape}")
    require(Q.shape[1] == K.shape[1], f"Q {Q.shape} and K {K.shape} must share d_k")
    require(K.shape[0] == V.shape[0] and K.shape[0] >= 1,
            f"K {K.shape} and V {V.shape} need the same number (>= 1) of rows")
    return Q, K, V, whole_number(chunk, "chunk", 1)


def _online_softmax_state(n_q, d_v, dtype):
    # running max m, running sum l and running (unnormalised) output acc of n_q queries
    return np.full((n_q, 1), -np.inf, dtype), np.zeros((n_q, 1), dtype), np.zeros((n_q, d_v), dtype)


def _online_softmax_update(state, scores, V_chunk):
    # absorb one chunk of scores [n_q, c] and values [c, d_v]; when the max grows, what was summed
    # under the old max is worth exp(old - new) of itself under the new one
    m, l, acc = state
    m_new = np.maximum(m, np.max(scores, axis=1, keepdims=True))
    rescale = np.exp(m - m_new)                 # 0 on the first chunk (m = -inf), <= 1 after
    p = np.exp(scores - m_new)                  # [n_q, c]
    return m_new, l * rescale + p.sum(axis=1, keepdims=True), acc * rescale + p @ V_chunk


def chunked_attention(Q, K, V, chunk):
    # [n_q, d], [n_k, d], [n_k, d_v], int -> [n_q, d_v]: attention(Q, K, V) reading `chunk` keys at a time;
    # at most [n_q, chunk] scores exist at once, never the [n_q, n_k] matrix
    Q, K, V, chunk = _check_chunked(Q, K, V, chunk)
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / math.sqrt(Q.shape[1]))
    state = _online_softmax_state(Q.shape[0], V.shape[1], dtype)
    for start in range(0, K.shape[0], chunk):
        scores = (Q @ K[start:start + chunk].T) * scale
        state = _online_softmax_update(state, scores, V[start:start + chunk])
    _, l, acc = state
    return acc / l


def causal_block_counts(T, chunk):
    # int, int -> (blocks computed, blocks in the full grid): [chunk, chunk] blocks of the causal score matrix;
    # a block whose first key comes after its last query is entirely above the diagonal and never computed
    T, chunk = whole_number(T, "T", 1), whole_number(chunk, "chunk", 1)
    blocks = -(-T // chunk)
    return blocks * (blocks + 1) // 2, blocks * blocks


def causal_chunked_attention(Q, K, V, chunk):
    # [T, d], [T, d], [T, d_v], int -> ([T, d_v], blocks computed): causal self-attention in [chunk, chunk]
    # blocks, queries and keys both cut into chunks; blocks above the diagonal are skipped, not masked
    Q, K, V, chunk = _check_chunked(Q, K, V, chunk)
    T = Q.shape[0]
    require(K.shape[0] == T, f"causal self-attention needs as many keys as queries; got Q {Q.shape}, K {K.shape}")
    dtype = np.result_type(Q, K, V)
    scale = dtype.type(1 / math.sqrt(Q.shape[1]))
    out = np.empty((T, V.shape[1]), dtype)
    blocks = 0
    for q_start in range(0, T, chunk):
        q_end = min(q_start + chunk, T)
        state = _online_softmax_state(q_end - q_start, V.shape[1], dtype)
        for k_start in range(0, q_end, chunk):       # key blocks starting after q_end - 1 are all in the future
            k_end = min(k_start + chunk, T)
            scores = (Q[q_start:q_end] @ K[k_start:k_end].T) * scale
            if k_end - 1 > q_start:                  # the block crosses the diagonal: hide its future part
                visible = np.arange(q_start, q_end)[:, None] >= np.arange(k_start, k_end)[None, :]
                scores = np.where(visible, scores, -np.inf)
            state = _online_softmax_update(state, scores, V[k_start:k_end])
            blocks += 1
        _, l, acc = state
        out[q_start:q_end] = acc / l
    return out, blocks


# ---------------------------------------------------------------- the whole model

def _timed_attention(parts):
    """The model's own attention (qkv.model.own_attention), step by step as qkv.attention computes it, each step's
    seconds written into `parts`: the two products a FLOP count charges, and the mask and softmax it does not. Like
    own_attention it answers only the q, k, v and mask of the layer the model is computing (issue 41: on any inputs
    it would be lesson 07's attention_step, for anyone who calls _timed_attention({}))."""
    def attention_in_parts(q, k, v, mask):
        # [H_q, T, d], [H_kv, T, d], [H_kv, T, d], bool [T, T] -> [H_q, T, d]
        require_models_own(q, k, v, mask)
        k, v = repeat_kv_heads(k, q.shape[0]), repeat_kv_heads(v, q.shape[0])
        start = time.perf_counter()
        scores = scaled_scores(q, k)                          # [H_q, T, T]
        scored = time.perf_counter()
        weights = masked_softmax(scores, mask)
        del scores
        normalised = time.perf_counter()
        out = weights @ v
        parts.update({"Q K^T": scored - start, "mask and softmax": normalised - scored,
                      "weights @ V": time.perf_counter() - normalised})
        return out
    return attention_in_parts


def layer_seconds(model, T, layer_index=0, seed=0):
    """Measured seconds of one SmolLM2 layer on T tokens: {"attention block": s, "MLP": s}, and inside the
    attention block the seconds of its products and of its softmax: {"Q K^T": s, "mask and softmax": s,
    "weights @ V": s}.

    The attention block (RMSNorm, projections, RoPE, Q K^T, softmax, weights @ V, output projection) and the
    MLP run on random token embeddings with the causal mask, exactly as inside qkv.model.forward.
    """
    from qkv import model as smollm2  # not at the top: qkv.checking imports qkv.cost, and lessons 01-04 need no model

    c = model.config
    # scores, their exponentials, the masked copies and the weights: about five [H_q, T, T] float32 arrays at once
    check_probe_fits(T, itemsize=4, arrays=5 * c.n_heads,
                     what="one layer's float32 [T, T] arrays (about five per head)")
    layer = model.weights.layers[int(layer_index)]
    ids = np.random.default_rng(seed).integers(0, c.vocab_size, size=int(T))
    x = model.weights.token_embedding[ids]
    cos, sin = smollm2.rope_angles(int(T), c.d_head, c.rope_base)
    parts = {}
    start = time.perf_counter()
    attended, _ = smollm2.attention_block(x, layer, c, cos, sin, causal_mask(int(T)),
                                          _timed_attention(parts), False)
    middle = time.perf_counter()
    x = x + attended
    smollm2.swiglu_mlp(smollm2.rms_norm(x, layer.ffn_norm, c.rms_eps), layer.W_gate, layer.W_up, layer.W_down)
    end = time.perf_counter()
    return {"attention block": middle - start, "MLP": end - middle, **parts}


def largest_cache_bytes(cpu="/sys/devices/system/cpu/cpu0/cache"):
    """The size of this CPU's largest cache (the last level, shared by its cores), or None where Linux does not say."""
    sizes = []
    for index in sorted(os.listdir(cpu)) if os.path.isdir(cpu) else []:
        try:
            text = open(os.path.join(cpu, index, "size")).read().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes) if sizes else None
