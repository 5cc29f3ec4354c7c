"""Lesson 01: attention as a soft dictionary lookup."""
import numpy as np

from qkv.attention import softmax
from qkv.shapes import as_float_array, require


def _check_lookup_shapes(query, keys, values):
    query, keys, values = as_float_array(query, "query"), as_float_array(keys, "keys"), as_float_array(values, "values")
    require(query.ndim == 1, f"query must be one vector [d_k]; got shape {query.shape}")
    require(keys.ndim == 2 and keys.shape[1] == query.shape[0],
            f"keys must be [n, d_k] with d_k = {query.shape[0]} to match the query; got {keys.shape}")
    require(values.ndim == 2 and values.shape[0] == keys.shape[0],
            f"values must be [n, d_v] with one row per key (n = {keys.shape[0]}); got {values.shape}")
    return query, keys, values


def hard_lookup(query, keys, values):
    # [d_k], [n, d_k], [n, d_v] -> [d_v]: the value of the key equal to the query, like dict[query]
    query, keys, values = _check_lookup_shapes(query, keys, values)
    matches = np.flatnonzero(np.all(keys == query, axis=1))
    if matches.size == 0:
        raise KeyError(f"no key equals the query {query.tolist()}: a hard lookup has nothing to return")
    return values[matches[0]]


def soft_lookup(query, keys, values, temperature=1.0):
    # [d_k], [n, d_k], [n, d_v] -> weights [n], output [d_v]
    query, keys, values = _check_lookup_shapes(query, keys, values)
    require(np.ndim(temperature) == 0 and temperature > 0,
            f"temperature must be a positive number; got {temperature!r}")
    weights = softmax(keys @ query / temperature)
    return weights, weights @ values


def soft_lookup_by_temperature(query, keys, values, temperatures):
    # [d_k], [n, d_k], [n, d_v], [n_t] -> [n_t, d_v]: one soft-lookup output per temperature
    return np.stack([soft_lookup(query, keys, values, t)[1] for t in np.asarray(temperatures, dtype=float)])
