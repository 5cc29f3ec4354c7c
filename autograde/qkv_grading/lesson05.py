"""Hidden tests for lesson 05, heads, designed from each function's contract: every dimension drawn different
(T, d_model, n_heads, d_head, H_q, H_kv, T_q, T_k), d_model != n_heads * d_head first, groupings where tile and
repeat disagree, masks that are not causal passed by keyword, configs carrying only the attributes the exercise
names; fixed cases first so that a mistake is caught, and named, on every draw."""
from types import SimpleNamespace

import numpy as np

from qkv import heads as ref_heads
from qkv.checks import lesson05 as visible
from qkv.checking import check_against, seal
from qkv_grading import answer_of, distinct_sizes, fresh_rng

# withheld from the student's kernel while this lesson is graded: each computes a graded answer
GRADED_REFERENCES = ("qkv.heads.split_heads", "qkv.heads.merge_heads", "qkv.heads.multi_head_attention",
                     "qkv.heads.grouped_query_attention", "qkv.heads.grouped_query_weights",
                     "qkv.heads.repeat_kv_heads", "qkv.heads.kv_cache_bytes_per_token")


def split_heads(student_split_heads):
    rng = fresh_rng()
    # fixed: entry (t, c) = 100 t + c, so every misplaced number shows; T, n_heads, d_head all differ
    check_against(student_split_heads, ref_heads.split_heads, (SPLIT_FIXED,), {"n_heads": 3},
                  declared=visible.SPLIT_HEADS)
    T, n_heads, d_head = distinct_sizes(rng, 3, 2, 8)
    cases = [(rng.normal(size=(T, n_heads * d_head)) * 1e6, n_heads),
             (rng.normal(size=(d_head, T * n_heads)).astype(np.float32) * 1e-6, T),
             (rng.normal(size=(n_heads, d_head)), 1)]
    for args in cases:
        check_against(student_split_heads, ref_heads.split_heads, args, declared=visible.SPLIT_HEADS)


SPLIT_FIXED = 100.0 * np.arange(2)[:, None] + np.arange(12)[None, :]      # T = 2, 3 heads of 4
MERGE_FIXED = 100.0 * np.arange(3)[:, None, None] + 10.0 * np.arange(2)[None, :, None] + np.arange(4)  # [3, 2, 4]


def merge_heads(student_merge_heads):
    rng = fresh_rng()
    check_against(student_merge_heads, ref_heads.merge_heads, (MERGE_FIXED,), declared=visible.MERGE_HEADS)
    n_heads, T, d_head = distinct_sizes(rng, 3, 2, 8)
    for x in (rng.normal(size=(n_heads, T, d_head)) * 1e6, rng.normal(size=(T, d_head, n_heads)).astype(np.float32),
              rng.normal(size=(1, n_heads, T))):
        check_against(student_merge_heads, ref_heads.merge_heads, (x,), declared=visible.MERGE_HEADS)


def _some_visible(rng, n_q, n_k, p=0.6):
    """A mask that is not causal, with at least one visible key per query (fully masked rows are lesson 04's)."""
    mask = rng.random((n_q, n_k)) < p
    mask[np.arange(n_q), rng.integers(n_k, size=n_q)] = True
    return mask


def _mha_shapes(rng):
    """(T, d_model, n_heads, d_head) all different and d_model != n_heads * d_head."""
    while True:
        T, d_model, n_heads, d_head = distinct_sizes(rng, 4, 2, 10)
        if d_model != n_heads * d_head:
            return T, d_model, n_heads, d_head


def multi_head_attention(student_mha):
    rng = fresh_rng()
    check = visible.check_mha
    # first, fixed: d_model (10) != n_heads * d_head (12), so every scaling mistake is told apart; a mask
    # that is not causal, passed by keyword
    fixed_rng = np.random.default_rng(1005)
    args = visible.mha_case(fixed_rng, 5, 10, 3, 4)
    check(student_mha, args, {"mask": _some_visible(fixed_rng, 5, 5)})
    T, d_model, n_heads, d_head = _mha_shapes(rng)
    args = visible.mha_case(rng, T, d_model, n_heads, d_head)
    check(student_mha, (*args, visible.causal(T)))  # the mask by position
    check(student_mha, args)                         # no mask
    # d_model = n_heads * d_head, as in real models; one head; float32
    check(student_mha, visible.mha_case(rng, 6, 12, 6, 2), {"mask": visible.causal(6)})
    check(student_mha, visible.mha_case(rng, 3, 9, 1, 5))
    X, W_Q, W_K, W_V, W_O, n_heads = visible.mha_case(rng, 4, 8, 4, 2)
    floats = [a.astype(np.float32) for a in (X, W_Q, W_K, W_V, W_O)]
    check(student_mha, (*floats, n_heads), {"mask": visible.causal(4)}, rtol=1e-3, atol=1e-4)
    # fixed: heads whose scores differ by ~800 (one maximum over every head leaves the low ones 0/0)
    check(student_mha, visible.uneven_mha_case(5, 8, 4, 2, top=800.0))


def grouped_query_attention(student_gqa):
    rng = fresh_rng()
    # fixed first: 6 query heads over 2 key/value heads (np.tile and np.repeat disagree, and h // H_kv is
    # another grouping again), T_q != T_k, a mask that is not causal, by keyword
    fixed_rng = np.random.default_rng(1006)
    q, k, v = visible.gqa_case(fixed_rng, 6, 2, 3, 4, T_k=5)
    check_against(student_gqa, ref_heads.grouped_query_attention, (q, k, v),
                  {"mask": _some_visible(fixed_rng, 3, 5, 0.7)}, declared=visible.GROUPED_QUERY_ATTENTION)
    T, T_k, d_head = distinct_sizes(rng, 3, 2, 8)
    for n_q, n_kv in [(6, 3), (9, 3), (8, 2), (5, 5), (4, 1)]:
        check_against(student_gqa, ref_heads.grouped_query_attention,
                      visible.gqa_case(rng, n_q, n_kv, T, d_head, T_k=T_k), {"mask": _some_visible(rng, T, T_k, 0.7)},
                      declared=visible.GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention, visible.gqa_case(rng, 6, 2, T, d_head),
                  {"mask": visible.causal(T)}, declared=visible.GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention, visible.gqa_case(rng, 8, 4, T, d_head, T_k=T_k),
                  declared=visible.GROUPED_QUERY_ATTENTION)
    q, k, v = (a.astype(np.float32) for a in visible.gqa_case(rng, 6, 3, 4, 4))
    check_against(student_gqa, ref_heads.grouped_query_attention, (q, k, v, visible.causal(4)),
                  rtol=1e-3, atol=1e-4, declared=visible.GROUPED_QUERY_ATTENTION)
    # fixed: heads whose scores differ by ~800 (one maximum over every head leaves the low ones 0/0)
    check_against(student_gqa, ref_heads.grouped_query_attention, visible.uneven_gqa_case(6, 3, 4, 5, top=800.0),
                  declared=visible.GROUPED_QUERY_ATTENTION)


def kv_cache_bytes_per_token(student_kv_bytes):
    rng = fresh_rng()
    # fixed: an object with only the attributes the exercise names; 4 bytes first, where ignoring
    # bytes_per_element and forgetting the factor 2 give different numbers
    only_contract = SimpleNamespace(n_layers=3, n_heads=12, n_kv_heads=4, d_head=5)
    for bytes_per_element in (4, 1, 2):
        check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (only_contract, bytes_per_element),
                      declared=visible.KV_CACHE_BYTES_PER_TOKEN)
    n_layers, n_kv, d_head, group = distinct_sizes(rng, 4, 2, 40)
    config = ref_heads.AttentionShape("drawn", n_layers=n_layers, d_model=int(rng.integers(2, 4000)),
                                      n_heads=n_kv * group, n_kv_heads=n_kv, d_head=d_head)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (config,), {"bytes_per_element": 2},
                  declared=visible.KV_CACHE_BYTES_PER_TOKEN)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (ref_heads.QWEN25_05B, 2),
                  declared=visible.KV_CACHE_BYTES_PER_TOKEN)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (ref_heads.GPT2_SMALL, 4),
                  declared=visible.KV_CACHE_BYTES_PER_TOKEN)


HIDDEN_PROMPTS = ["Water freezes at a temperature of", "One, two, three, four,", "The opposite of hot is"]


def plugged_into_smollm2(student_gqa):
    prompt = HIDDEN_PROMPTS[int(fresh_rng().integers(len(HIDDEN_PROMPTS)))]
    visible.plugged_into_smollm2(student_gqa, prompt=prompt)


ANSWERS = {
    "design_choice": ("b", None),
    "gqa_saves": ("c", None),
    # Qwen2.5-0.5B in 16-bit floats: 2 (K and V) x 24 layers x 2 kv heads x 64 dims x 2 bytes
    "qwen_kv_bytes_per_token": (lambda p: float(2 * p["n_layers"] * p["n_kv_heads"] * p["d_head"] * p["bytes"]), 0.5),
    "qwen_kv_saving_factor": (lambda p: p["n_heads"] / p["n_kv_heads"], 0.01),  # canonical 14 / 2
}

# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered.
EXPLANATIONS = {
    "design_choice": "Heads of one layer doing different things on the same input is the case for several heads "
                     "with their own projections.",
    "gqa_saves": "Several query heads sharing one key/value head is grouped-query attention; it shrinks the "
                 "key/value cache kept while generating.",
    "qwen_kv_bytes_per_token": "2 (K and V) x layers x key/value heads x their width x bytes per number.",
    "qwen_kv_saving_factor": "The cache scales with the number of key/value heads: one per query head instead of the "
                             "shared ones.",
}


answer = answer_of(ANSWERS)


seal(__name__)
