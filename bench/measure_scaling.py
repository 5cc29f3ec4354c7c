"""Lesson 03's key figures, measured with the reference: why attention divides the scores by sqrt(d_k).

Prints (it never asserts): the variance of q.k against d_k with and without the 1/sqrt(d_k) scale; the
mean largest weight and entropy of softmax rows against d_k; the norms of the softmax Jacobian and of the
Jacobian with respect to the query; softmax of [1, 2, 3] against [10, 20, 30].

    .venv/bin/python bench/measure_scaling.py [--samples 20000] [--seed 0]
"""
import argparse
import time

import numpy as np

from qkv import attention, scaling

DIMS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def variance_table(rng, n_samples):
    print(f"variance of q.k over {n_samples} unit-variance pairs")
    print(" d_k   raw variance   raw / d_k   scaled variance")
    for d_k in DIMS:
        raw = scaling.dot_product_variance(d_k, n_samples, rng)
        q, k = rng.standard_normal((n_samples, d_k)), rng.standard_normal((n_samples, d_k))
        scaled = np.var(np.sum(q * k, axis=1) * scaling.scale_for_unit_variance(d_k))
        print(f"{d_k:4d}   {raw:12.2f}   {raw / d_k:9.3f}   {scaled:15.3f}")


def saturation_table(rng, n_queries=200, n_keys=16):
    stats = scaling.saturation_by_dimension(DIMS, n_queries, n_keys, rng)
    print(f"\nsoftmax rows of {n_queries} random queries over {n_keys} random keys (max entropy ln {n_keys} = "
          f"{np.log(n_keys):.3f} nats)")
    print(" d_k   mean largest weight raw / scaled   mean entropy raw / scaled (nats)")
    for i, d_k in enumerate(DIMS):
        print(f"{d_k:4d}   {stats['max_unscaled'][i]:13.3f} / {stats['max_scaled'][i]:.3f}"
              f"              {stats['entropy_unscaled'][i]:8.3f} / {stats['entropy_scaled'][i]:.3f}")


def jacobian_tables(rng, n_trials=200, n_keys=16):
    print("\nsoftmax(c * [1, 2, 3]): Frobenius norm of its Jacobian")
    for c in (0.1, 1, 3, 10, 30, 50):
        J = scaling.softmax_jacobian(c * np.array([1.0, 2.0, 3.0]))
        print(f"  c = {c:5.1f}: largest weight {attention.softmax(c * np.array([1.0, 2.0, 3.0])).max():.6f}, "
              f"||J|| = {np.linalg.norm(J):.3e}")
    print(f"\nmedian Frobenius norms over {n_trials} random queries, {n_keys} keys each")
    print(" d_k   ||dw/dscores|| raw / scaled   ||dw/dq|| raw / scaled")
    for d_k in DIMS:
        norms = np.zeros((n_trials, 4))
        for t in range(n_trials):
            q, K = rng.standard_normal(d_k), rng.standard_normal((n_keys, d_k))
            raw = scaling.softmax_jacobian(K @ q)
            scaled = scaling.softmax_jacobian(K @ q * scaling.scale_for_unit_variance(d_k))
            norms[t] = [np.linalg.norm(raw), np.linalg.norm(scaled),
                        np.linalg.norm(scaling.query_jacobian(q, K, scale=1.0)),
                        np.linalg.norm(scaling.query_jacobian(q, K))]
        m = np.median(norms, axis=0)
        print(f"{d_k:4d}   {m[0]:9.2e} / {m[1]:.2e}      {m[2]:9.2e} / {m[3]:.2e}")


def seed_example():
    print("\nthe seed's example")
    for scores in ([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]):
        s = attention.softmax(scores)
        J = scaling.softmax_jacobian(scores)
        print(f"  softmax({scores}) = {np.array2string(s, precision=6)}, entropy {scaling.entropy(s):.4f} nats, "
              f"||J|| = {np.linalg.norm(J):.3e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    variance_table(rng, args.samples)
    saturation_table(rng)
    jacobian_tables(rng)
    seed_example()
    print(f"\n(measured in {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
