"""The catalogued mistakes of the varied numeric self-checks, as functions of the student's numbers (issue 43).

Each pool row of qkv.your_numbers.pools keeps every mistake here outside its own right answer's tolerance window
(tests/test_your_numbers_answers.py checks it), so a variant never makes a known mistake right. The anomaly report
uses them too: an answer that is a catalogued mistake of the student's own numbers is an honest mistake, never
"answers fit a classmate's variant". A mistake that is the right answer for some numbers returns None there (a
forgotten temperature is no mistake at temperature 1).
"""
import numpy as np


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _sink_share(layer):
    # SmolLM2's first-token share at `layer` (the answer table of lesson 06)
    from qkv_grading.lesson06 import ANSWERS
    return ANSWERS["sink_peak_layer"][0]({"layer": layer})


NO_PREFERENCE_SHARE_06 = 0.07141  # the seed sentence's no-preference baseline, printed in lesson 06's section 2


# question -> (what the student did, the number it gives for params p)
MISTAKES = {
    "blended_output": (
        ("the two values averaged (uniform weights)", lambda p: p["v1"] / 2),
        ("the hard lookup's value", lambda p: p["v1"]),
        ("the temperature ignored", lambda p: p["v1"] * _sigmoid(p["x"]) if p["T"] != 1 else None),
        ("the scores multiplied by the temperature", lambda p: p["v1"] * _sigmoid(p["x"] * p["T"])
         if p["T"] != 1 else None),
        ("the scores divided by sqrt(d_k) too", lambda p: p["v1"] * _sigmoid(p["x"] / p["T"] / np.sqrt(2))),
        ("the weight of k1, not the output", lambda p: _sigmoid(p["x"] / p["T"])),
        ("the weight of k2 times v1", lambda p: p["v1"] * (1 - _sigmoid(p["x"] / p["T"]))),
    ),
    "dot_products": (("T, not T^2", lambda p: p["T"]), ("only pairs i < j", lambda p: p["T"] * (p["T"] - 1) / 2),
                     ("pairs i <= j", lambda p: p["T"] * (p["T"] + 1) / 2), ("2T", lambda p: 2 * p["T"])),
    "scale_d128": (("d_k, not its root", lambda p: p["d_k"]), ("GPT-2's 8", lambda p: 8),
                   ("1 / sqrt(d_k)", lambda p: 1 / np.sqrt(p["d_k"])), ("d_k / 2", lambda p: p["d_k"] / 2)),
    "variance_at_128": (("sqrt(d_k), the typical size", lambda p: np.sqrt(p["d_k"])),
                        ("1, after scaling", lambda p: 1),
                        ("d_k^2", lambda p: p["d_k"] ** 2), ("d_k / 2", lambda p: p["d_k"] / 2)),
    "entropy_uniform_8": (("bits, not nats", lambda p: np.log2(p["n"])), ("log10", lambda p: np.log10(p["n"])),
                          ("1 / n", lambda p: 1 / p["n"]), ("the sign lost", lambda p: -np.log(p["n"])),
                          ("one term only", lambda p: np.log(p["n"]) / p["n"])),
    "blocked_pairs": (("T^2", lambda p: p["T"] ** 2), ("the diagonal too", lambda p: p["T"] * (p["T"] + 1) / 2),
                      ("both triangles", lambda p: p["T"] * (p["T"] - 1)), ("T^2 / 2", lambda p: p["T"] ** 2 / 2)),
    "future_share_zero_mask": (
        ("0, as a real mask gives", lambda p: 0),
        ("the word itself counted", lambda p: (p["T"] - p["position"] + 1) / p["T"]),
        ("divided by T - 1", lambda p: (p["T"] - p["position"]) / (p["T"] - 1)),
        ("one word's share", lambda p: 1 / p["T"]), ("all of it", lambda p: 1)),
    "qwen_kv_bytes_per_token": (
        ("K only, not K and V", lambda p: p["n_layers"] * p["n_kv_heads"] * p["d_head"] * p["bytes"]),
        ("one layer", lambda p: 2 * p["n_kv_heads"] * p["d_head"] * p["bytes"]),
        ("bits, not bytes", lambda p: 16 * p["n_layers"] * p["n_kv_heads"] * p["d_head"] * p["bytes"]),
        ("numbers, not bytes", lambda p: 2 * p["n_layers"] * p["n_kv_heads"] * p["d_head"])),
    "qwen_kv_saving_factor": (("the query heads", lambda p: p["n_heads"]),
                              ("the kv heads", lambda p: p["n_kv_heads"]),
                              ("the inverse", lambda p: p["n_kv_heads"] / p["n_heads"])),
    "gpt2_uniform_share": (("query 0 left out: 1 / (T - 1)", lambda p: 1 / (p["T"] - 1)),
                           ("GPT-2's measured 61%", lambda p: 0.61),
                           ("a percentage", lambda p: 100 / p["T"]),
                           ("one more token: 1 / (T + 1)", lambda p: 1 / (p["T"] + 1))),
    "sink_peak_layer": (("the layer number", lambda p: p["layer"]),
                        ("a percentage", lambda p: 100 * _sink_share(p["layer"])),
                        ("the peak's share", lambda p: _sink_share(25) if p["layer"] != 25 else None),
                        ("the layer before (layers counted from 1)",
                         lambda p: _sink_share(p["layer"] - 1) if p["layer"] > 0 else None),
                        ("the no-preference baseline", lambda p: NO_PREFERENCE_SHARE_06)),
    "context_growth": (("linear", lambda p: p["n_new"] / p["n_old"]),
                       ("cubic", lambda p: (p["n_new"] / p["n_old"]) ** 3),
                       ("the difference", lambda p: p["n_new"] - p["n_old"])),
    "smollm2_cache_mib": (
        ("9 query heads, not 3 kv heads", lambda p: 2 * 30 * 9 * 64 * 2 * p["T"] / 2**20),
        ("K only", lambda p: 30 * 3 * 64 * 2 * p["T"] / 2**20),
        ("MB, not MiB", lambda p: 2 * 30 * 3 * 64 * 2 * p["T"] / 1e6),
        ("32-bit floats", lambda p: 2 * 30 * 3 * 64 * 4 * p["T"] / 2**20),
        ("one layer", lambda p: 2 * 3 * 64 * 2 * p["T"] / 2**20)),
}
