"""Lesson 06: attention sinks, head patterns, and measuring what attention weights do (and do not) explain.

Masks follow the course convention (qkv.masking): boolean, True where a query MAY attend a key,
rows are queries, columns are keys. One layer's attention weights are [H, T, T] (heads, queries, keys),
as qkv.model.forward(..., return_weights=True) returns them.
"""
import functools

import numpy as np

from qkv.lessons import course_paths
from qkv.shapes import as_float_array, require, token_ids, whole_number


# ---------------------------------------------------------------- checking inputs

def _layer_weights(weights, min_T=1):
    weights = as_float_array(weights, "weights")
    require(weights.ndim == 3 and weights.shape[1] == weights.shape[2],
            f"weights must be one layer's attention weights [H, T, T]; got shape {weights.shape}")
    require(weights.shape[1] >= min_T, f"weights need at least {min_T} tokens; got T = {weights.shape[1]}")
    return weights


# ---------------------------------------------------------------- the sink

def first_token_share(weights):
    # [H, T, T] -> float: mean over heads and queries 1..T-1 of the weight on key 0
    # (query 0 can only read key 0, so it says nothing about a preference and is left out)
    weights = _layer_weights(weights, min_T=2)
    return float(weights[:, 1:, 0].mean())


def uniform_first_token_share(T):
    # int -> float: first_token_share of causal weights with no preference, query i spreading 1/(i+1)
    T = whole_number(T, "T", 1)
    require(T >= 2, f"T must be >= 2 (query 0 is left out); got {T}")
    return float(np.mean(1.0 / (np.arange(1, T) + 1)))


def top_attended(row, k):
    # [T] -> [k] key indices, most weight first (ties: the earlier key first)
    row = as_float_array(row, "row")
    require(row.ndim == 1, f"row must be one query's weights [T]; got shape {row.shape}")
    return np.argsort(-row, kind="stable")[:k]


# ---------------------------------------------------------------- weight is not contribution

def contribution_norms(weights, v, W_O_head):
    # [T_k], [T_k, d_head], [d_head, d_model] -> [T_k]: ||w_j * v_j W_O|| for every key j
    # what key j actually adds to one head's output for one query, after the output projection
    weights, v, W_O_head = (as_float_array(a, n) for a, n in ((weights, "weights"), (v, "v"), (W_O_head, "W_O_head")))
    require(weights.ndim == 1 and v.ndim == 2 and W_O_head.ndim == 2,
            f"need weights [T_k], v [T_k, d_head], W_O_head [d_head, d_model]; "
            f"got {weights.shape}, {v.shape}, {W_O_head.shape}")
    require(v.shape[0] == weights.shape[0] and v.shape[1] == W_O_head.shape[0],
            f"weights {weights.shape}, v {v.shape} and W_O_head {W_O_head.shape} do not fit together "
            f"(one value row per key, v's width = W_O_head's rows)")
    return np.linalg.norm(weights[:, None] * (v @ W_O_head), axis=-1)


# ---------------------------------------------------------------- occlusion

def occlusion_effects(next_token_logprob, ids):
    # fn([T-1] ids) -> float, [T] ids -> [T]: how much the log-probability drops when position i is deleted
    ids = token_ids(ids, min_length=2)
    base = float(next_token_logprob(ids))
    return np.array([base - float(next_token_logprob(np.delete(ids, i))) for i in range(len(ids))])


def toy_next_token_logprob(ids, token_values, decay):
    """A stand-in for a language model, for testing occlusion without one (plain data in, a float out).

    Each token id t adds token_values[t] to a score, discounted by decay^(distance from the end), so
    both WHICH token and WHERE it stands matter; the "next token" has log-probability log sigmoid(score).
    """
    ids = token_ids(ids, min_length=0)
    token_values = as_float_array(token_values, "token_values")
    discounts = float(decay) ** np.arange(len(ids))[::-1]
    score = float(np.sum(token_values[ids] * discounts))
    return -float(np.logaddexp(0.0, -score))  # log sigmoid, without overflow


def toy_first_token_logprob(ids, token_values, sink_bonus):
    """A stand-in whose answer hangs on the first token (a "sink"): whatever stands at position 0 adds
    sink_bonus; every token adds token_values[t]; log-probability log sigmoid(score)."""
    ids = token_ids(ids, min_length=0)
    token_values = as_float_array(token_values, "token_values")
    score = float(np.sum(token_values[ids])) + (float(sink_bonus) if len(ids) else 0.0)
    return -float(np.logaddexp(0.0, -score))


def next_token_logprob(model, target, ids, attention=None):
    # Model, int, [T] ids -> float: log-probability the model gives `target` right after `ids`
    # (lesson 01's softmax in float64, not this lesson's log_softmax, which is graded and withheld while grading)
    from qkv.attention import softmax
    from qkv.model import forward
    logits = forward(model, ids, attention=attention).logits[-1]
    return float(np.log(softmax(logits.astype(np.float64))[int(target)]))


def packed_mask(lengths):
    # [n] lengths -> bool [sum, sum]: causal inside each sequence, nothing visible across sequences
    lengths = token_ids(lengths, name="lengths")
    require(np.all(lengths >= 1), f"every sequence needs at least one token; got lengths {lengths.tolist()}")
    sequence = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(sequence))
    return (sequence[:, None] == sequence[None, :]) & (position[:, None] >= position[None, :])


def packed_next_token_logprobs(model, target, sequences):
    """Model, int, [[ids], ...] -> [n]: next_token_logprob(model, target, s) for every sequence s, in ONE pass.

    The sequences are laid end to end and a block-diagonal causal mask keeps each one from seeing the others.
    That gives the same numbers as separate passes because SmolLM2 has no absolute positions: RoPE makes
    every score depend on i - j only, so shifting a whole sequence along the text changes nothing (up to
    rounding). One pass of ~100 tokens replaces dozens of tiny ones, which a busy machine runs slowly.
    """
    from qkv.attention import softmax
    from qkv.model import forward
    sequences = [token_ids(s, name="each sequence") for s in sequences]
    lengths = np.array([len(s) for s in sequences])
    logits = forward(model, np.concatenate(sequences), mask=packed_mask(lengths)).logits
    last = logits[np.cumsum(lengths) - 1].astype(np.float64)          # [n, vocab]: each sequence's last row
    return np.log(softmax(last)[:, int(target)])


# ---------------------------------------------------------------- evicting the sink (StreamingLLM)

def sliding_window_mask(T, window, n_sink=0):
    # int, int, int -> bool [T, T]: query i may read key j when j <= i and (i - j < window or j < n_sink)
    # StreamingLLM's cache: the last `window` keys (itself included) plus the first `n_sink` keys, never the future.
    T = whole_number(T, "T", 1)
    window, n_sink = whole_number(window, "window", 1), whole_number(n_sink, "n_sink", 0)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & ((i - j < window) | (j < n_sink))


def log_softmax(logits):
    # [..., vocab] -> [..., vocab]: log of softmax, via the log-sum-exp of max-shifted logits (no overflow)
    logits = as_float_array(logits, "logits")
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def token_losses(logits, ids):
    # [T, vocab], [T] -> [T-1]: -ln p(ids[t+1] | ids[..t]), the loss on each predicted token, in nats
    logits = as_float_array(logits, "logits")
    ids = token_ids(ids, min_length=2)
    require(logits.ndim == 2 and logits.shape[0] == len(ids),
            f"logits must be [T, vocab] with one row per id; got logits {logits.shape} for {len(ids)} ids")
    require(ids.min() >= 0 and ids.max() < logits.shape[1],
            f"ids must lie in [0, {logits.shape[1]}); got min {ids.min()}, max {ids.max()}")
    # row t predicts the NEXT token: logits[:-1] against ids[1:]
    return -log_softmax(logits[:-1])[np.arange(len(ids) - 1), ids[1:]]


def perplexity(logits, ids):
    # [T, vocab], [T] -> float: exp of the mean negative log-likelihood of ids[1:] given logits[:-1] (nats)
    return float(np.exp(np.mean(token_losses(logits, ids))))


def course_text(lessons=("01-lookup", "02-by-hand", "03-scaling")):
    """The markdown of the course's own lesson notebooks (offline, English prose with some maths), joined."""
    import json
    notebooks = course_paths().notebooks
    parts = []
    for lesson in lessons:
        path = notebooks / lesson / f"{lesson}.ipynb"
        require(path.is_file(), f"no lesson notebook at {path}: course_text reads the course's own notebooks")
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        parts += ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"]
    return "\n\n".join(parts)


# ---------------------------------------------------------------- head patterns

def diagonal_score(weights):
    # [H, T, T] -> [H]: mean weight a query i >= 1 puts on itself (key i)
    weights = _layer_weights(weights, min_T=2)
    T = weights.shape[1]
    i = np.arange(1, T)
    return weights[:, i, i].mean(axis=-1)


def previous_token_score(weights):
    # [H, T, T] -> [H]: mean weight a query i >= 1 puts on the token just before it (key i - 1)
    weights = _layer_weights(weights, min_T=2)
    T = weights.shape[1]
    i = np.arange(1, T)
    return weights[:, i, i - 1].mean(axis=-1)


def induction_score(weights, period):
    # [H, T, T], int -> [H]: on a text whose last 2*period tokens are period tokens said twice, the mean
    # weight each query i of the second copy puts on key i - period + 1, the token that FOLLOWED i's
    # earlier occurrence (what an induction head copies)
    period = whole_number(period, "period", 1)
    weights = _layer_weights(weights, min_T=2 * period)
    T = weights.shape[1]
    i = np.arange(T - period, T)
    return weights[:, i, i - period + 1].mean(axis=-1)


def ablate_heads(attention, heads):
    """attention(q, k, v, mask), [(layer, head), ...] -> ablated(q, k, v, mask, layer).

    The returned attention function runs `attention` and then sets to zero the outputs of the listed
    query heads of the layer it is called for (qkv.model.forward(..., attention_takes_layer=True) passes
    the layer index). Zeroing the OUTPUT removes the head; zeroing its weights and renormalising would not.
    On SmolLM2, `attention` is the model's own, qkv.model.own_attention:
    forward(model, ids, attention=ablate_heads(own_attention, heads), attention_takes_layer=True).
    """
    pairs = tuple(tuple(int(x) for x in pair) for pair in heads)
    require(all(len(pair) == 2 for pair in pairs), f"heads must be (layer, head) pairs; got {heads!r}")
    return functools.partial(ablated_attention, attention=attention, heads=pairs)


def ablated_attention(q, k, v, mask, layer, attention, heads):
    # [H_q, T, d], [H_kv, T, d], [H_kv, T, d], bool [T, T], int -> [H_q, T, d]: what ablate_heads returns,
    # with its attention and (layer, head) pairs bound
    out = np.array(attention(q, k, v, mask), copy=True)
    for ablated_layer, head in heads:
        if ablated_layer == int(layer):
            out[head] = 0.0
    return out


def stand_in_attention(q, k, v, mask=None):
    # [H_q, T, d], [H_kv, T_k, d], [H_kv, T_k, d_v], mask unused -> [H_q, T, d_v]: no attention at all, a stand-in
    # for checking wrappers such as ablate_heads: query head h's output is (h + 1) (1 + (sum of its query)^2) in every
    # column, so every head differs, none is zero, and zeroing a query changes it (issue 41: the checks need no
    # lesson 05 grouped-query attention, which on one query is lesson 07's open attention_step)
    q, v = as_float_array(q, "q"), as_float_array(v, "v")
    require(q.ndim == 3 and v.ndim == 3, f"q and v must be [heads, T, d]; got q {q.shape}, v {v.shape}")
    numbered = np.arange(1, q.shape[0] + 1)[:, None, None] * (1.0 + q.sum(axis=-1, keepdims=True) ** 2)
    return numbered * np.ones(v.shape[-1])   # [H_q, T, 1] -> [H_q, T, d_v]


def top_heads(scores, k):
    # [n_layers, H], int -> [(layer, head), ...]: the k highest-scoring heads, best first
    scores = as_float_array(scores, "scores")
    require(scores.ndim == 2, f"scores must be [n_layers, H]; got shape {scores.shape}")
    flat = np.argsort(-scores, axis=None, kind="stable")[:k]
    return [tuple(int(x) for x in np.unravel_index(index, scores.shape)) for index in flat]


# ---------------------------------------------------------------- measuring without scipy

def ranks(x):
    # [n] -> [n]: 0-based ranks, ties sharing the mean of their ranks (what Spearman needs)
    x = as_float_array(x, "x")
    require(x.ndim == 1, f"x must be 1-D; got shape {x.shape}")
    order = np.argsort(x, kind="stable")
    plain = np.empty(len(x))
    plain[order] = np.arange(len(x))
    _, group, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(group, weights=plain) / counts)[group]


def spearman(x, y):
    # [n], [n] -> float in [-1, 1]: Pearson correlation of the ranks
    rx, ry = ranks(x), ranks(y)
    require(len(rx) == len(ry) and len(rx) >= 2, f"x and y must have the same length >= 2; got {len(rx)}, {len(ry)}")
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt(np.sum(rx * rx) * np.sum(ry * ry))
    require(denominator > 0, "spearman is undefined when x or y is constant")
    return float(np.sum(rx * ry) / denominator)
