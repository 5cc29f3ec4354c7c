"""Hidden tests for lesson 05: heads. Shapes are drawn so that tile != repeat and d_model != d_head."""
import numpy as np

from qkv import heads as ref
from qkv.checks import lesson05 as visible
from qkv.checking import check_against, seal
from qkv_grading import expect_answer, fresh_rng


def split_heads(student_split_heads):
    rng = fresh_rng()
    check = dict(name="split_heads", diagnoses=visible.SPLIT_HEADS_MISTAKES)
    for T, n_heads, d_head in [(int(rng.integers(3, 7)), 3, 4), (5, 6, 2), (2, 4, 5), (7, 2, 8), (4, 1, 6)]:
        x = rng.normal(size=(T, n_heads * d_head))
        check_against(student_split_heads, ref.split_heads, (x, n_heads), **check)
    x = rng.normal(size=(3, 12)).astype(np.float32)
    check_against(student_split_heads, ref.split_heads, (x, 4), **check)


def merge_heads(student_merge_heads):
    rng = fresh_rng()
    check = dict(name="merge_heads", diagnoses=visible.MERGE_HEADS_MISTAKES)
    for n_heads, T, d_head in [(3, int(rng.integers(3, 7)), 4), (6, 5, 2), (2, 4, 7), (1, 3, 5)]:
        check_against(student_merge_heads, ref.merge_heads, (rng.normal(size=(n_heads, T, d_head)),), **check)
    check_against(student_merge_heads, ref.merge_heads,
                  (rng.normal(size=(4, 3, 2)).astype(np.float32),), **check)


def multi_head_attention(student_mha):
    rng = fresh_rng()
    check = dict(name="multi_head_attention", diagnoses=visible.MULTI_HEAD_ATTENTION_MISTAKES,
                 allowed=visible.TOOLS)
    # (T, d_model, n_heads, d_head): d_model = n_heads * d_head as in real models, and also not
    for T, d_model, n_heads, d_head, masked in [(5, 12, 3, 4, True), (6, 12, 6, 2, True), (4, 8, 2, 4, False),
                                                (6, 10, 3, 4, True), (3, 9, 1, 5, True)]:
        args = visible._mha_case(rng, T, d_model, n_heads, d_head)
        kwargs = {"mask": visible.causal(T)} if masked else {}
        check_against(student_mha, ref.multi_head_attention, args, kwargs, **check)
    X, W_Q, W_K, W_V, W_O, n_heads = visible._mha_case(rng, 4, 8, 4, 2)
    floats = [a.astype(np.float32) for a in (X, W_Q, W_K, W_V, W_O)]
    check_against(student_mha, ref.multi_head_attention, (*floats, n_heads), {"mask": visible.causal(4)},
                  rtol=1e-3, atol=1e-4, **check)


def grouped_query_attention(student_gqa):
    rng = fresh_rng()
    check = dict(name="grouped_query_attention", diagnoses=visible.GROUPED_QUERY_ATTENTION_MISTAKES,
                 allowed=visible.TOOLS)
    # groupings where np.tile and np.repeat disagree (6:2, 6:3, 9:3, 8:2) and the edge cases 5:5 and 4:1
    for n_q, n_kv, T, d_head in [(6, 2, 5, 4), (6, 3, 4, 3), (9, 3, int(rng.integers(3, 7)), 4), (8, 2, 3, 2),
                                 (5, 5, 4, 3), (4, 1, 5, 2)]:
        check_against(student_gqa, ref.grouped_query_attention, visible.gqa_case(rng, n_q, n_kv, T, d_head),
                      {"mask": visible.causal(T)}, **check)
    check_against(student_gqa, ref.grouped_query_attention, visible.gqa_case(rng, 6, 2, 3, 4, T_k=5), **check)
    q, k, v = (a.astype(np.float32) for a in visible.gqa_case(rng, 6, 3, 4, 4))
    check_against(student_gqa, ref.grouped_query_attention, (q, k, v, visible.causal(4)),
                  rtol=1e-3, atol=1e-4, **check)


def kv_cache_bytes_per_token(student_kv_bytes):
    rng = fresh_rng()
    check = dict(name="kv_cache_bytes_per_token", diagnoses=visible.KV_CACHE_MISTAKES)
    for _ in range(3):
        n_kv = int(rng.integers(1, 5))
        n_heads = n_kv * int(rng.integers(2, 6))
        d_head = int(rng.choice([16, 32, 64, 128]))
        config = ref.AttentionShape("drawn", n_layers=int(rng.integers(2, 40)), d_model=n_heads * d_head,
                                    n_heads=n_heads, n_kv_heads=n_kv, d_head=d_head)
        for bytes_per_element in (1, 2, 4):
            check_against(student_kv_bytes, ref.kv_cache_bytes_per_token, (config, bytes_per_element), **check)
    check_against(student_kv_bytes, ref.kv_cache_bytes_per_token, (ref.QWEN25_05B, 2), **check)
    check_against(student_kv_bytes, ref.kv_cache_bytes_per_token, (ref.GPT2_SMALL, 4), **check)


HIDDEN_PROMPTS = ["Water freezes at a temperature of", "One, two, three, four,", "The opposite of hot is"]


def plugged_into_smollm2(student_gqa):
    prompt = HIDDEN_PROMPTS[int(fresh_rng().integers(len(HIDDEN_PROMPTS)))]
    visible.plugged_into_smollm2(student_gqa, prompt=prompt)


ANSWERS = {
    "design_choice": ("b", None),
    "gqa_saves": ("c", None),
    # Qwen2.5-0.5B in 16-bit floats: 2 (K and V) x 24 layers x 2 kv heads x 64 dims x 2 bytes
    "qwen_kv_bytes_per_token": (2 * 24 * 2 * 64 * 2, 0.5),
    "qwen_kv_saving_factor": (14 / 2, 0.01),
}


def answer(name, value):
    correct, tolerance = ANSWERS[name]
    expect_answer(value, correct, name, tolerance)


seal(__name__)
