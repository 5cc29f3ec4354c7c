"""Hidden tests for lesson 07: the cost of attention. Fresh random inputs plus the edge cases the known mistakes
trip over: a running max that keeps growing, key counts that are not a multiple of the chunk, chunks of 1 and
longer than the sequence, groupings where np.tile and np.repeat differ, a cache of one token."""
import numpy as np

from qkv import cost as ref_cost
from qkv.checks import lesson07 as visible, lesson07_chunked as chunked
from qkv.checking import check_against, seal
from qkv_grading import answer_of, fresh_rng

# computed by the graded exercises: withheld from the student's kernel while this lesson is graded
GRADED_REFERENCES = ("qkv.cost.cost_ratio", "qkv.cost.fit_exponent", "qkv.cost.attention_step",
                     "qkv.cost.append_to_cache", "qkv.cost.chunked_attention", "qkv.cost.causal_chunked_attention")


def cost_ratio(student_cost_ratio):
    rng = fresh_rng()
    check_against(student_cost_ratio, ref_cost.cost_ratio, (4096, 16384), declared=visible.COST_RATIO)
    for _ in range(4):
        n_old, n_new = (int(n) for n in rng.integers(16, 40000, size=2))
        check_against(student_cost_ratio, ref_cost.cost_ratio, (n_old, n_new), declared=visible.COST_RATIO)
    check_against(student_cost_ratio, ref_cost.cost_ratio, (int(rng.integers(600, 900)), 300),
                  declared=visible.COST_RATIO)
    check_against(student_cost_ratio, ref_cost.cost_ratio, (1000.0, 1500.0), declared=visible.COST_RATIO)


def fit_exponent(student_fit_exponent):
    rng = fresh_rng()
    for _ in range(3):
        exponent = float(rng.uniform(1.2, 3.0))
        check_against(student_fit_exponent, ref_cost.fit_exponent,
                      visible.power_law(rng, int(rng.integers(5, 10)), exponent, 0.25), declared=visible.FIT_EXPONENT)
    sizes = 2.0 ** np.arange(7, 13)
    check_against(student_fit_exponent, ref_cost.fit_exponent, (sizes, 1e-9 * sizes ** 2.5),
                  declared=visible.FIT_EXPONENT)  # exact law
    noisy = visible.power_law(rng, 4, 0.7, 0.3)
    check_against(student_fit_exponent, ref_cost.fit_exponent, (list(noisy[0]), list(noisy[1])),
                  declared=visible.FIT_EXPONENT)
    check_against(student_fit_exponent, ref_cost.fit_exponent, ([100, 200], [7.0, 3.0]),
                  declared=visible.FIT_EXPONENT)  # two points, falling


def attention_step(student_attention_step):
    rng = fresh_rng()
    # groupings where np.tile and np.repeat disagree (6:2, 6:3, 9:3), no grouping (3:3), one kv head (4:1)
    for n_q, n_kv in [(6, 2), (6, 3), (9, 3), (3, 3), (4, 1)]:
        T = int(rng.integers(2, 9))
        check_against(student_attention_step, ref_cost.attention_step, visible.step_case(rng, n_q, n_kv, T, 4),
                      declared=visible.ATTENTION_STEP)
    check_against(student_attention_step, ref_cost.attention_step, visible.step_case(rng, 4, 2, 1, 3),
                  declared=visible.ATTENTION_STEP)
    q, k, v = (a.astype(np.float32) for a in visible.step_case(rng, 6, 3, 7, 8))
    check_against(student_attention_step, ref_cost.attention_step, (q, k, v), declared=visible.ATTENTION_STEP,
                  rtol=1e-3, atol=1e-4)
    # fixed: heads whose scores differ by ~800 (one maximum over every head leaves the low ones 0/0)
    check_against(student_attention_step, ref_cost.attention_step, visible.uneven_step_case(6, 3, 4, 5, top=800.0),
                  declared=visible.ATTENTION_STEP)


def append_to_cache(student_append):
    rng = fresh_rng()
    for n_kv, T, n_new, d, d_v in [(3, int(rng.integers(1, 7)), 1, 4, 4), (2, 0, 1, 4, 4), (1, 5, 3, 2, 2),
                                   (2, 4, 1, 3, 5), (4, 2, 2, 6, 6)]:
        check_against(student_append, ref_cost.append_to_cache, visible.cache_case(rng, n_kv, T, n_new, d, d_v),
                      declared=visible.APPEND_TO_CACHE)
    case = tuple(a.astype(np.float32) for a in visible.cache_case(rng, 3, 4, 1, 8))
    check_against(student_append, ref_cost.append_to_cache, case, declared=visible.APPEND_TO_CACHE)


HIDDEN_PROMPTS = ["Water freezes at a temperature of", "One, two, three, four,", "The opposite of hot is"]


def generation_with_cache(student_attention_step, student_append):
    prompt = HIDDEN_PROMPTS[int(fresh_rng().integers(len(HIDDEN_PROMPTS)))]
    visible.generation_matches(student_attention_step, student_append, prompt=prompt)


def chunked_attention(student_chunked):
    rng = fresh_rng()
    n_k = int(rng.integers(9, 15))
    # chunk sizes: 1, one that leaves a shorter last chunk, an exact divisor, exactly n_k, longer than n_k
    for chunk in (1, 4 if n_k % 4 else 5, 3 if n_k % 3 == 0 else 2, n_k, n_k + 3):
        check_against(student_chunked, ref_cost.chunked_attention,
                      (*visible.chunked_case(rng, int(rng.integers(2, 6)), n_k, 4, 3, rising=True), chunk),
                      declared=chunked.CHUNKED_ATTENTION)
    # a falling max (the first chunk holds the largest scores) and large scores that would overflow a plain exp
    Q, K, V = visible.chunked_case(rng, 3, 11, 4, 2, rising=True)
    check_against(student_chunked, ref_cost.chunked_attention, (Q, K[::-1].copy(), V, 3),
                  declared=chunked.CHUNKED_ATTENTION)
    check_against(student_chunked, ref_cost.chunked_attention,
                  (*visible.overflow_case(rng, int(rng.integers(2, 6)), n_k, 4, 3, top=float(rng.uniform(800, 3000))),
                   int(rng.integers(2, 5))), declared=chunked.CHUNKED_ATTENTION_OVERFLOW)
    check_against(student_chunked, ref_cost.chunked_attention,
                  (*visible.chunked_case(rng, 3, 10, 4, 2, spread=300.0), 4),
                  declared=chunked.CHUNKED_ATTENTION_OVERFLOW)
    Q, K, V = (a.astype(np.float32) for a in visible.chunked_case(rng, 4, 13, 8, 8, rising=True))
    check_against(student_chunked, ref_cost.chunked_attention, (Q, K, V, 5), declared=chunked.CHUNKED_ATTENTION,
                  rtol=1e-4, atol=1e-5)
    # fixed: rows whose every score is far below 0 (a running max started at 0 underflows them to 0/0)
    check_against(student_chunked, ref_cost.chunked_attention, (*visible.sunken_case(4, 10, 3, 5, depth=800.0), 4),
                  declared=chunked.CHUNKED_ATTENTION)
    # few queries, many keys: a chunk of queries against every key is the whole [n_q, n_k] matrix
    chunk = int(rng.choice([32, 64]))
    visible.memory_of_chunked(student_chunked, n_q=int(rng.integers(24, chunk + 1)), chunk=chunk,
                              seed=int(rng.integers(2**31)))


def causal_chunked_attention(student_causal):
    rng = fresh_rng()
    T = int(rng.integers(9, 15))
    for chunk in (1, 4 if T % 4 else 5, 3 if T % 3 == 0 else 2, T, T + 2):
        check_against(student_causal, ref_cost.causal_chunked_attention, (*visible.causal_case(rng, T, 4, 3), chunk),
                      declared=chunked.CAUSAL_CHUNKED_ATTENTION)
    check_against(student_causal, ref_cost.causal_chunked_attention,
                  (*visible.overflow_case(rng, T, T, 4, 3, top=float(rng.uniform(800, 3000))), int(rng.integers(2, 5))),
                  declared=chunked.CAUSAL_CHUNKED_ATTENTION_OVERFLOW)
    check_against(student_causal, ref_cost.causal_chunked_attention,
                  (*visible.causal_case(rng, 10, 4, 2, spread=300.0), 3),
                  declared=chunked.CAUSAL_CHUNKED_ATTENTION_OVERFLOW)
    Q, K, V = (a.astype(np.float32) for a in visible.causal_case(rng, 11, 8, 8))
    check_against(student_causal, ref_cost.causal_chunked_attention, (Q, K, V, 4),
                  declared=chunked.CAUSAL_CHUNKED_ATTENTION, rtol=1e-4, atol=1e-5)
    # fixed: rows whose every score is far below 0 (a running max started at 0 underflows them to 0/0)
    check_against(student_causal, ref_cost.causal_chunked_attention,
                  (*visible.sunken_case(10, 10, 3, 5, depth=800.0), 4), declared=chunked.CAUSAL_CHUNKED_ATTENTION)
    visible.memory_of_causal(student_causal, chunk=int(rng.choice([32, 64])), seed=int(rng.integers(2**31)))


ANSWERS = {
    # 2,048 -> 8,192 tokens: four times the length, 4^2 = 16 times the scores
    "context_growth": (lambda p: (p["n_new"] / p["n_old"]) ** 2, 1e-6),
    "more_important_reason": ("b", None),
    # peak memory of naive attention ~ 4 [T, T] arrays: its log-log slope over T >= 1,024 is 2 up to small terms
    "memory_exponent": (2.0, 0.1),
    # SmolLM2 (30 layers, 3 kv heads of 64) in 16-bit floats at 8,192 tokens: 2*30*3*64*2 B * 8192 / 2^20
    "smollm2_cache_mib": (lambda p: 2 * 30 * 3 * 64 * 2 * p["T"] / 2**20, 0.5),  # canonical T = 8,192
}


# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered: the reasoning,
# so that a wrong answer can be redone, not the letter or the number.
EXPLANATIONS = {
    "context_growth": "The score matrix is [n, n], so its size grows by the square of the ratio of the lengths: "
                      "divide the new length by the old one, then square (your cost_ratio).",
    "more_important_reason": "Attention does more arithmetic than a recurrence, and gated recurrences already eased "
                             "vanishing gradients; what it changed is that no step waits for the one before, so "
                             "training can use all of a parallel machine, and so far larger models and datasets.",
    "memory_exponent": "Naive attention keeps a few [T, T] arrays alive at once, T * T numbers each: fit log(peak) "
                       "against log(T) on your lengths T >= 1,024 and naive_bytes; that slope is the power of T.",
    "smollm2_cache_mib": "Per token the cache keeps one key and one value per layer and per key/value head (3, not the "
                         "9 query heads): 2 * 30 * 3 * 64 numbers of 2 bytes; times the tokens, divided by 2^20.",
}


answer = answer_of(ANSWERS)


seal(__name__)
