"""Lesson 06: attention sinks, head patterns, and measuring what attention weights do (and do not) explain.

Masks follow the course convention (qkv.masking): boolean, True where a query MAY attend a key,
rows are queries, columns are keys.
"""
import numpy as np

from qkv.masking import _sequence_length
from qkv.shapes import require


def sliding_window_mask(T, window, n_sink=0):
    # int, int, int -> bool [T, T]: query i may read key j when j <= i and (i - j < window or j < n_sink)
    # StreamingLLM's cache: the last `window` keys (itself included) plus the first `n_sink` keys, never the future.
    T = _sequence_length(T)
    require(np.ndim(window) == 0 and isinstance(window, (int, np.integer)) and window >= 1,
            f"window must be a whole number >= 1; got {window!r}")
    require(np.ndim(n_sink) == 0 and isinstance(n_sink, (int, np.integer)) and n_sink >= 0,
            f"n_sink must be a whole number >= 0; got {n_sink!r}")
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    return (j <= i) & ((i - j < window) | (j < n_sink))
