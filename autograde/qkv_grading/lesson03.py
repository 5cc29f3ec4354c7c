"""Hidden tests for lesson 03."""
import numpy as np

from qkv import attention as ref_attention, scaling
from qkv.checks import lesson03 as visible
from qkv.checking import check_against, seal
from qkv_grading import answer_of, distinct_sizes, fresh_rng

# withheld from the student's kernel while this lesson is graded: each computes a graded answer (numerical_jacobian
# gives query_jacobian's answer to within the tolerance, random_attention_weights the scaled softmax)
GRADED_REFERENCES = ("qkv.scaling.dot_product_variance", "qkv.scaling.scale_for_unit_variance", "qkv.scaling.entropy",
                     "qkv.scaling.softmax_jacobian", "qkv.scaling.query_jacobian", "qkv.scaling.numerical_jacobian")


def _seeds(rng, n):
    return [int(s) for s in rng.choice(2**31, size=n, replace=False)]


def dot_product_variance(student_fn):
    rng = fresh_rng()
    seed, other_seed, *seeds = _seeds(rng, 6)
    # the generator is the only source of randomness: same seed -> same number, another seed -> another
    visible.uses_the_generator(student_fn, int(rng.integers(2, 20)), 300, seed, other_seed)
    # small n_samples keep every mistake (axis, ddof-free estimators, scaling) far from the right number
    for (d_k, n_samples), case_seed in zip([(1, 7), (5, 40), (32, 500), (128, 2000)], seeds):
        visible.compare_variance(student_fn, d_k, n_samples, case_seed)
    visible.compare_variance(student_fn, int(rng.integers(2, 300)), int(rng.integers(10, 400)), seeds[-1])


def scale_for_unit_variance(student_fn):
    rng = fresh_rng()
    for d_k in [1, 4, 64, 128, 1000, int(rng.integers(2, 4096)), np.int64(256)]:
        check_against(student_fn, scaling.scale_for_unit_variance, (d_k,), declared=visible.SCALE_FOR_UNIT_VARIANCE,
                      rtol=1e-6, atol=1e-9)


def _random_weights(rng, shape, zeros=0.0):
    raw = rng.exponential(size=shape) * (rng.random(shape) >= zeros)
    raw[..., 0] += 1e-3  # no all-zero row
    return raw / raw.sum(axis=-1, keepdims=True)


def entropy(student_fn):
    rng = fresh_rng()
    cases = [
        _random_weights(rng, 7),
        _random_weights(rng, (4, 6)),
        _random_weights(rng, (5, 3), zeros=0.4),
        _random_weights(rng, (2, 3, 5)),
        _random_weights(rng, (3, 8)).astype(np.float32),
        np.full(8, 1 / 8),
        np.eye(4)[[2, 0, 3]],  # one-hot rows: entropy exactly 0
        ref_attention.softmax(rng.normal(size=(3, 16)) * 30),  # saturated rows with weights that underflow to 0
        np.array([[1.0 - 2e-12, 1e-12, 1e-12], [1e-300, 0.5, 0.5 - 1e-300], [0.2, 0.3, 0.5]]),  # magnitude extremes
        _random_weights(rng, tuple(distinct_sizes(rng, 3))),  # every dimension different
    ]
    for weights in cases:
        visible.check_entropy(student_fn, weights)


def _finite_difference_softmax_jacobian(scores):
    return scaling.numerical_jacobian(ref_attention.softmax, np.asarray(scores, dtype=np.float64))


def softmax_jacobian(student_fn):
    rng = fresh_rng()
    cases = [rng.normal(size=5), rng.normal(size=2) * 3, rng.normal(size=9).astype(np.float32),
             np.array([4.0]), np.array([1.0, 1.0, 1.0, 1.0]), (rng.normal(size=6) * 2).tolist(),
             np.array([0.0, 3.0, 2.5, -1.0]) * 1e-4]  # tiny scores: nearly uniform weights
    for scores in cases:
        # the truth is the finite-difference Jacobian of softmax, not a formula
        check_against(student_fn, _finite_difference_softmax_jacobian, (scores,), declared=visible.SOFTMAX_JACOBIAN)
    check_against(student_fn, scaling.softmax_jacobian, (np.array([10.0, 20.0, 30.0]),),
                  # tiny entries judged relatively; 1 - s cancels, so float32 work is only good to ~1e-3
                  declared=visible.SOFTMAX_JACOBIAN, atol=1e-9, rtol=5e-3)
    # scores spanning 800 with a near tie between the two largest: a softmax without its max overflows
    check_against(student_fn, scaling.softmax_jacobian, (np.array([0.0, 800.0, 799.5, -5.0]),),
                  declared=visible.SOFTMAX_JACOBIAN)


def _finite_difference_query_jacobian(q, K):
    K = np.asarray(K, dtype=np.float64)
    d_k = np.shape(q)[-1]
    return scaling.numerical_jacobian(lambda x: ref_attention.softmax(K @ x / np.sqrt(d_k)), np.asarray(q, np.float64))


def query_jacobian(student_fn):
    rng = fresh_rng()
    # fixed first: a square K, where a transposed Jacobian has the right shape and only its values give it away
    visible.check_query_jacobian(student_fn, _finite_difference_query_jacobian, np.array([0.5, -1.0, 1.0]),
                                 np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]]))
    # square K (n_k = d_k) too: there a transposed Jacobian has the right shape and only its values give it away
    for n_k, d_k in [(5, 3), (3, 8), (4, 4), (6, 6), (1, 3), tuple(distinct_sizes(rng, 2))]:
        q, K = rng.normal(size=d_k), rng.normal(size=(n_k, d_k))
        visible.check_query_jacobian(student_fn, _finite_difference_query_jacobian, q, K)
    q, K = rng.normal(size=6).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    visible.check_query_jacobian(student_fn, _finite_difference_query_jacobian, q, K)
    q, K = rng.normal(size=5) * 4, rng.normal(size=(7, 5))  # large scores: a nearly saturated softmax
    visible.check_query_jacobian(student_fn, _finite_difference_query_jacobian, q, K, atol=1e-7)


ANSWERS = {
    "why_scale": ("b", None),
    "without_scaling": ("c", None),
    "variance_at_128": (lambda p: float(p["d_k"]), 1e-6),  # canonical d_k = 128
    "entropy_uniform_8": (lambda p: float(np.log(p["n"])), 1e-3),  # canonical n = 8
}

# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered.
EXPLANATIONS = {
    "why_scale": "Var(q.k) grows like d_k; dividing by sqrt(d_k) brings it back near 1 so the softmax does not "
                 "saturate, and it changes no ranking.",
    "without_scaling": "Raw scores at d_k = 128 have a typical size near sqrt(128), about 11, so most rows become "
                       "nearly one-hot and the gradient with respect to the scores is about a tenth of the scaled "
                       "one; the query still gets about as much as with the scale, through keys sqrt(128) times "
                       "larger, and loses it only at larger d_k.",
    "variance_at_128": "q.k is a sum of d_k independent products of variance 1 each, so its variance is d_k itself.",
    "entropy_uniform_8": "Equal weights 1/n give -sum (1/n) ln(1/n) = ln n nats.",
}


answer = answer_of(ANSWERS)


seal(__name__)
