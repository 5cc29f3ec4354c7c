"""Functions of a sequence whose dependence on each input row is known exactly, by construction.

Lesson 04's probe (`dependence_matrix`) is graded on them: unlike attention, they can ignore some
components of every input row, move every output in one direction only, or depend on an input only
weakly, so a probe that nudges one component, forgets an absolute value or compares with the wrong
threshold gives itself away. They take plain data only, so a grader may hand them to a student's
function as `functools.partial(mixed_readout, mix=..., readout=...)`.
"""
import numpy as np

from qkv.shapes import as_float_array, require


def mixed_readout(X, mix, readout, ignored=()):
    # [T, d_in], [T, T], [d_in, d_out] -> [T, d_out]: output i = sum_j mix[i, j] * (X[j] @ readout),
    # with the components listed in `ignored` left unread; output i depends on input j iff mix[i, j] != 0
    X = as_float_array(X, "X")
    mix, readout = as_float_array(mix, "mix"), as_float_array(readout, "readout")
    require(X.ndim == 2 and mix.shape == (X.shape[0], X.shape[0]) and readout.shape[0] == X.shape[1],
            f"need X [T, d_in], mix [T, T], readout [d_in, d_out]; got {X.shape}, {mix.shape}, {readout.shape}")
    kept = np.ones(X.shape[1])
    kept[list(ignored)] = 0.0
    return mix @ (X * kept) @ readout
