"""Lesson 04's future-dependence probe, dependence_matrix: its catalogue of mistakes, the inputs that confirm a
diagnosis, its declared Check and the readout targets (kept apart from lesson04.py, which re-exports them and
runs the visible check on its sentence's probe targets)."""
import functools

import numpy as np

from qkv import attention as ref_attention, masking, probes
from qkv.checking import Check, check_boolean, seal


DEPENDENCE_MISTAKES = [
    (lambda attend, X, delta=1.0, tol=1e-9: masking.dependence_matrix(attend, X, delta, tol).T,
     "rows and columns are swapped. D[i, j] answers: does OUTPUT row i change when INPUT row j is nudged? "
     "Put the change of output i in row i, column j."),
    (lambda attend, X, delta=1.0, tol=1e-9: np.triu(masking.dependence_matrix(attend, X, delta, tol), 1),
     "only the future (j > i) is filled in. D records every dependence, on the past and on itself too."),
    (lambda attend, X, delta=1.0, tol=1e-9: np.zeros((len(X), len(X)), dtype=bool),
     "nothing depends on anything: is the output computed again on the nudged input and compared with "
     "the output on the original X?"),
]


def _cumulative_nudges(attend, X, delta=1.0, tol=1e-9):
    X = np.array(X, dtype=float)
    baseline = np.asarray(attend(X))
    depends = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        X[j] += delta  # never undone: row j stays nudged while later rows are probed
        depends[:, j] = np.abs(np.asarray(attend(X)) - baseline).max(axis=1) > tol
    return depends


DEPENDENCE_MISTAKES.append(
    (_cumulative_nudges, "the nudges accumulate: nudge a fresh copy of X for every j, so that only row j differs "
                         "from the original."))


def _part_nudged(attend, X, delta=1.0, tol=1e-9, part="component 0"):
    # what a probe finds when it nudges `part` instead of the whole of row j: "component 0" moves X[j, 0] only,
    # "column" moves X[:, j], component j of every row (an IndexError past the last component, as the student's)
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    depends = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        if part == "column":
            nudged[:, j] += delta
        else:
            nudged[j, 0] += delta
        depends[:, j] = np.abs(np.asarray(attend(nudged)) - baseline).max(axis=1) > tol
    return depends


DEPENDENCE_MISTAKES += [
    (_part_nudged, "only component 0 of row j is nudged, and an output that does not read it seems not to depend "
                   "on row j: add delta to every component of the row, X[j] += delta."),
    (functools.partial(_part_nudged, part="column"),
     "column j is nudged (component j of every row), so every output moves: nudge row j, X[j], one input token."),
]


def _compared_with_allclose(attend, X, delta=1.0, tol=1e-9):
    # each output row compared with np.allclose: its tolerance grows with the output's size, and `tol` is unused
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    depends = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        nudged[j] += delta
        moved = np.asarray(attend(nudged))
        depends[:, j] = [not np.allclose(new, old) for new, old in zip(moved, baseline)]
    return depends


DEPENDENCE_MISTAKES.append(
    (_compared_with_allclose,
     "a change below `tol` counts as a dependence where the outputs are near 0 (or a real one is missed where "
     "they are large): is each row compared with np.allclose (or np.isclose)? Their tolerance is relative to the "
     "output's size and ignores `tol`; compare the largest absolute change with tol, "
     "np.abs(new - old).max(axis=1) > tol."))


def _signed_change(attend, X, delta=1.0, tol=1e-9):
    # the change compared with tol keeps its sign: an output that falls when row j is nudged seems not to move
    X = np.asarray(X, dtype=float)
    baseline = np.asarray(attend(X))
    depends = np.zeros((len(X), len(X)), dtype=bool)
    for j in range(len(X)):
        nudged = X.copy()
        nudged[j] += delta
        depends[:, j] = (np.asarray(attend(nudged)) - baseline).max(axis=1) > tol
    return depends


DEPENDENCE_MISTAKES.append(
    (_signed_change,
     "an output that FALLS when row j is nudged is not counted: the change new - old is compared with tol with its "
     "sign, so only rises are found. Compare its size, np.abs(new - old).max(axis=1) > tol."))


def dependence_confirmations():
    """Targets [T = 4, d_in = 5] on which every catalogued probe mistake gives its own pattern, for confirming a
    diagnosis made where two coincide (on causal attention a column nudge and accumulating nudges both find
    everything; where component 0 is unread, nudging only it finds nothing, as a probe that never recomputes):
    previous-token mixes, one of them also reading the future, read through every component (a column nudge moves
    every output, accumulated nudges move those after their first input), and full self-attention whose component
    0 reaches the queries only (nudging X[j, 0] alone moves output j alone)."""
    X = np.linspace(-1.0, 1.0, 20).reshape(4, 5)
    mix = np.array([[1.0, 0, 0, 1], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
    readout = np.array([[1.0, 0.5], [0.25, 1.0], [2.0, 0.5], [1.0, -1.0], [0.5, 0.5]])
    W_Q, W_K, W_V = np.random.default_rng(41).normal(size=(3, 5, 3))
    W_K[0], W_V[0] = 0.0, 0.0
    queries_only = functools.partial(ref_attention.self_attention, W_Q=W_Q, W_K=W_K, W_V=W_V)
    # and mixes whose odd rows fall as the inputs rise: a signed change finds only the even rows' dependences
    falling_rows = np.array([[1.0], [-1.0], [1.0], [-1.0]])
    return tuple(((attend, x), {}) for attend, x in (
        (functools.partial(probes.mixed_readout, mix=mix, readout=readout), X),
        (functools.partial(probes.mixed_readout, mix=mix.T.copy(), readout=readout), X[::-1].copy()),
        (queries_only, X), (queries_only, X[::-1].copy()),
        (functools.partial(probes.mixed_readout, mix=mix * falling_rows, readout=readout), X),
        (functools.partial(probes.mixed_readout, mix=mix.T * falling_rows, readout=readout), X[::-1].copy())))


PROBE_ALLOWED = (masking.causal_self_attention, ref_attention.self_attention)
DEPENDENCE_MATRIX = Check(name="dependence_matrix", diagnoses=DEPENDENCE_MISTAKES, allowed=PROBE_ALLOWED,
                          confirm_with=dependence_confirmations(),
                          meaning="D[i, j]: does output i change when input j is nudged?")


def check_dependence(student_probe, attend, X, **kwargs):
    # a dependence pattern, not a mask: 0/1 numbers are as good as booleans
    return check_boolean(student_probe, masking.dependence_matrix, (attend, X), kwargs, declared=DEPENDENCE_MATRIX,
                         require_bool=False)


def readout_targets():
    """Targets whose dependences are exact by construction (qkv.probes): outputs that only fall and never
    read input component 0 (so nudge every component and compare absolute changes), and dependences of
    1e-4 that a nudge of delta = 1e-3 moves by less than tol = 1e-5 (so use the delta and tol given)."""
    X = np.linspace(-1.0, 1.0, 15).reshape(5, 3)
    mix = np.array([[1.0, 0, 0, 0, 0], [1, 1, 0, 0, 1], [0, 0, 1, 0, 0], [0, 1, 0, 1, 0], [1, 0, 0, 0, 1]])
    readout = np.array([[1.0, 0.5], [0.25, 1.0], [2.0, 0.5]])
    falling = functools.partial(probes.mixed_readout, mix=mix, readout=-readout, ignored=[0])
    weak = functools.partial(probes.mixed_readout, mix=np.where(mix > 0, 1.0, 1e-4), readout=readout)
    # outputs near 0, then outputs near 1e3 (a dependence of 1e-4 moves them by far more than tol): a tolerance
    # relative to the output's size (np.allclose) gets one of the two wrong
    loud = functools.partial(probes.mixed_readout, mix=np.where(mix > 0, 1.0, 1e-4), readout=readout / 3)
    return [((falling, X), {}), ((weak, X), {"delta": 1e-3, "tol": 1e-5}),
            ((weak, np.zeros_like(X)), {"delta": 1e-3, "tol": 1e-5}), ((loud, X + 500.0), {})]


seal(__name__)
