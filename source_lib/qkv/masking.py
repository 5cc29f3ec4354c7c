"""Lesson 04: the causal mask, padding masks, and a probe that measures what an output depends on.

Masks follow the course convention: boolean, True where a query MAY attend a key, rows are queries
and columns are keys. Applying a mask is qkv.attention.masked_softmax's job (hidden scores get exactly
zero weight; a row with nothing visible gets all-zero weights, never NaN); this module only builds
masks and measures their effect.
"""
import numpy as np

from qkv.attention import self_attention
from qkv.shapes import as_float_array, require, whole_number
from qkv.tables import Table


def _sequence_length(T):
    return whole_number(T, "T", 1)


def causal_mask(T):
    # int -> bool [T, T]: query i may attend key j exactly when j <= i (itself and the past)
    positions = np.arange(_sequence_length(T))
    return positions[:, None] >= positions[None, :]


def _lengths_array(lengths, T):
    T = _sequence_length(T)
    lengths = np.asarray(lengths)
    require(lengths.ndim == 1 and lengths.dtype.kind in "iu",
            f"lengths must be a 1-D list of whole numbers [B]; got shape {lengths.shape}, dtype {lengths.dtype}")
    require(np.all((lengths >= 0) & (lengths <= T)), f"every length must lie in 0..T = 0..{T}; got {lengths.tolist()}")
    return lengths


def padding_mask(lengths, T):
    # [B] ints, int -> bool [B, T, T]: in a right-padded batch, key j is real when j < lengths[b]
    lengths = _lengths_array(lengths, T)
    real_key = np.arange(T)[None, :] < lengths[:, None]               # [B, T]
    # padding hides keys (columns); every query row of sequence b sees the same real keys
    return np.broadcast_to(real_key[:, None, :], (len(lengths), T, T)).copy()


def causal_padding_mask(lengths, T):
    # [B] ints, int -> bool [B, T, T]: the past (and itself), and only real tokens
    return padding_mask(lengths, T) & causal_mask(T)


def additive_mask(mask, fill=-np.inf):
    # bool [...] -> float [...]: 0 where attending is allowed, `fill` where it is not (added to the scores)
    return np.where(np.asarray(mask, dtype=bool), 0.0, fill)


def causal_self_attention(X, W_Q, W_K, W_V):
    # [..., T, d_model], [d_model, d_k], [d_model, d_k], [d_model, d_v] -> [..., T, d_v]
    X = as_float_array(X, "X")
    require(X.ndim >= 2, f"X must be [..., T, d_model]; got shape {X.shape}")
    return self_attention(X, W_Q, W_K, W_V, mask=causal_mask(X.shape[-2]))


def dependence_matrix(attend, X, delta=1.0, tol=1e-9):
    # fn [T, d_in] -> [T, d_out], [T, d_in] -> bool [T, T]
    # D[i, j] is True when adding `delta` to every component of input row j moves some component of
    # output row i by more than `tol`: "output i depends on input j". Rows are outputs, columns inputs.
    X = as_float_array(X, "X")
    require(X.ndim == 2, f"X must be one sequence [T, d_model]; got shape {X.shape}")
    baseline = np.asarray(attend(X), dtype=np.float64)
    require(baseline.ndim == 2 and baseline.shape[0] == X.shape[0],
            f"attend(X) must return one output row per input row [T, d_out]; got {baseline.shape} for X {X.shape}")
    T = X.shape[0]
    depends = np.zeros((T, T), dtype=bool)
    for j in range(T):
        nudged = X.copy()
        nudged[j] += delta
        change = np.abs(np.asarray(attend(nudged), dtype=np.float64) - baseline)
        depends[:, j] = change.max(axis=1) > tol
    return depends


def future_leaks(depends):
    # bool [T, T] -> bool [T]: output i depends on at least one LATER input j > i
    return np.triu(np.asarray(depends, dtype=bool), k=1).any(axis=1)


def _labelled_mask(mask, query_labels, key_labels):
    # bool [n_q, n_k] and its labels, checked -> (mask, query labels, key labels)
    mask = np.asarray(mask, dtype=bool)
    require(mask.ndim == 2, f"mask must be [n_q, n_k]; got shape {mask.shape}")
    key_labels = query_labels if key_labels is None else key_labels
    require(len(query_labels) == mask.shape[0] and len(key_labels) == mask.shape[1],
            f"need {mask.shape[0]} query labels and {mask.shape[1]} key labels for a mask of shape {mask.shape}")
    return mask, query_labels, key_labels


def mask_table(mask, query_labels, key_labels=None, hidden="✗"):
    # bool [n_q, n_k] -> qkv.tables.Table: ✓ (may attend) or `hidden` in each cell, a row per query, a header per key
    # (issue 44: a screen reader reads each cell with its query and its key)
    mask, query_labels, key_labels = _labelled_mask(mask, query_labels, key_labels)
    return Table(["query \\ key", *key_labels], [[q, *("✓" if ok else hidden for ok in row)]
                                                for q, row in zip(query_labels, mask)],
                 caption=f"rows are queries, columns keys: ✓ may attend, {hidden} hidden")


def mask_grid_text(mask, query_labels, key_labels=None):
    # bool [n_q, n_k] -> str: the mask as a table of ✓ (may attend) and ✗ (hidden), rows are queries
    mask, query_labels, key_labels = _labelled_mask(mask, query_labels, key_labels)
    width = max(len(str(label)) for label in list(query_labels) + list(key_labels)) + 1
    lines = [" " * width + "".join(f"{label:>{width}}" for label in key_labels)]
    for label, row in zip(query_labels, mask):
        lines.append(f"{label:<{width}}" + "".join(f"{'✓' if allowed else '✗':>{width}}" for allowed in row))
    return "\n".join(lines)
