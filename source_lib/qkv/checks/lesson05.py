"""Visible checks for lesson 05, heads: multi-head and grouped-query attention."""
from types import SimpleNamespace

import numpy as np

from qkv import attention as ref_attention, heads as ref_heads
from qkv.masking import causal_mask as causal
from qkv.checking import Check, Hint, call, call_text, check_against, expect_array, expect_number, seal

# The exercises hand out the library's softmax and masked softmax: the lesson is about heads, not softmax.
TOOLS = (ref_attention.softmax, ref_attention.masked_softmax)


# ---------------------------------------------------------------- split_heads / merge_heads

def _split_interleaved(x, n_heads):
    # reshape to [T, d_head, H]: head h gets every H-th column
    x = np.asarray(x, dtype=float)
    T, width = x.shape
    return x.reshape(T, width // n_heads, n_heads).transpose(2, 0, 1)


def _split_without_transpose(x, n_heads):
    x = np.asarray(x, dtype=float)
    T, width = x.shape
    return x.reshape(n_heads, T, width // n_heads)


SPLIT_HEADS_MISTAKES = [
    (_split_interleaved,
     "head h holds every n_heads-th column instead of a block of d_head neighbouring columns: reshape to "
     "[T, n_heads, d_head] (heads before d_head), then move the head axis to the front."),
    (_split_without_transpose,
     "the shape is right but each head mixes several tokens: x.reshape(n_heads, T, d_head) cuts the "
     "flattened array in the wrong place. Reshape to [T, n_heads, d_head] first, then transpose to "
     "[n_heads, T, d_head]."),
]
SPLIT_HEADS = Check(name="split_heads", diagnoses=SPLIT_HEADS_MISTAKES)


def _merge_interleaved(x):
    x = np.asarray(x, dtype=float)
    n_heads, T, d_head = x.shape
    return x.transpose(1, 2, 0).reshape(T, n_heads * d_head)


def _merge_without_transpose(x):
    x = np.asarray(x, dtype=float)
    n_heads, T, d_head = x.shape
    return x.reshape(T, n_heads * d_head)


MERGE_HEADS_MISTAKES = [
    (_merge_interleaved,
     "the columns of the heads are interleaved: head 0's d_head numbers must come first, side by side, then "
     "head 1's, and so on (transpose to [T, n_heads, d_head] before reshaping)."),
    (_merge_without_transpose,
     "the shape is right but rows mix tokens: reshaping [n_heads, T, d_head] straight to [T, ...] does not "
     "move the head axis. Transpose to [T, n_heads, d_head] first."),
    (lambda x: ref_heads.merge_heads(np.asarray(x)[::-1]),
     "the heads are concatenated in reverse order: head 0 must own the first d_head columns."),
]
MERGE_HEADS = Check(name="merge_heads", diagnoses=MERGE_HEADS_MISTAKES)


def split_heads(student_split_heads):
    x = np.arange(24, dtype=float).reshape(2, 12)  # T=2, 3 heads of 4: column c belongs to head c // 4
    check_against(student_split_heads, ref_heads.split_heads, (x, 3), declared=SPLIT_HEADS)
    check_against(student_split_heads, ref_heads.split_heads,
                  (np.random.default_rng(5).normal(size=(4, 12)), 2), declared=SPLIT_HEADS)
    check_against(student_split_heads, ref_heads.split_heads, (x, 1), declared=SPLIT_HEADS)
    # n_heads by keyword; float32 values spanning thousands (T=3, 5 heads of 2)
    wide = (np.random.default_rng(8).normal(size=(3, 10)) * 1000).astype(np.float32)
    check_against(student_split_heads, ref_heads.split_heads, (wide,), {"n_heads": 5}, declared=SPLIT_HEADS)
    print("split_heads: all visible checks passed.")


def merge_heads(student_merge_heads):
    heads = np.arange(24, dtype=float).reshape(3, 2, 4)
    check_against(student_merge_heads, ref_heads.merge_heads, (heads,), declared=MERGE_HEADS)
    check_against(student_merge_heads, ref_heads.merge_heads,
                  (np.random.default_rng(6).normal(size=(2, 5, 3)),), declared=MERGE_HEADS)
    wide = (np.random.default_rng(9).normal(size=(5, 3, 2)) * 1000).astype(np.float32)  # float32, spanning thousands
    check_against(student_merge_heads, ref_heads.merge_heads, (wide,), declared=MERGE_HEADS)
    x = np.random.default_rng(7).normal(size=(3, 12))
    got = call(student_merge_heads, ref_heads.split_heads(x, 4), name="merge_heads")
    if not np.allclose(expect_array(got, x.shape, "merge_heads(split_heads(x, 4))"), x):
        raise Hint("merge_heads(split_heads(x, 4)) does not give back x: merging must undo splitting exactly.")
    print("merge_heads: all visible checks passed (and it undoes split_heads).")


# ---------------------------------------------------------------- multi_head_attention

def _mha(X, W_Q, W_K, W_V, W_O, n_heads, mask=None, scale="d_head", project_output=True, use_mask=True,
         split="in order", one_head=False, merge="in order"):
    """Multi-head attention with one thing changed, to recognise a mistake. Its arguments are plain data, so that
    the student edition can record it and withhold it while lesson 05 is open (qkv_autograde.kernels.holdings.TWINS):
    with nothing changed it is the answer."""
    Q, K, V = (np.asarray(X, dtype=float) @ np.asarray(W, dtype=float) for W in (W_Q, W_K, W_V))
    cut = {"in order": ref_heads.split_heads, "interleaved": _split_interleaved}[split]
    q, k, v = (cut(M, 1 if one_head else n_heads) for M in (Q, K, V))
    width = {"d_head": q.shape[-1], "d_model": np.shape(X)[-1], "all heads": Q.shape[-1], "none": 1.0,
             "all heads / n_heads": Q.shape[-1] / n_heads}[scale]
    weights = ref_attention.masked_softmax(q @ k.swapaxes(-1, -2) / np.sqrt(width), mask if use_mask else None)
    heads = weights @ v
    merged = ref_heads.merge_heads(heads[::-1] if merge == "reversed" else heads)
    return merged @ np.asarray(W_O, dtype=float) if project_output else merged


MULTI_HEAD_ATTENTION_MISTAKES = [
    (lambda *a, **k: _mha(*a, **k, scale="d_model"),
     "the scores are divided by sqrt(d_model). Each head compares d_head-dimensional vectors, so divide by "
     "sqrt(d_head)."),
    (lambda *a, **k: _mha(*a, **k, scale="all heads"),
     "the scores are divided by sqrt(n_heads * d_head), the width of all heads together. Each head compares "
     "d_head-dimensional vectors, so divide by sqrt(d_head)."),
    (lambda *a, **k: _mha(*a, **k, scale="none"),
     "the scores are not scaled: divide q @ k^T by sqrt(d_head) before the softmax."),
    (lambda *a, **k: _mha(*a, **k, project_output=False),
     "this is the concatenation of the heads without the output projection: multiply the merged heads by W_O."),
    (lambda *a, **k: _mha(*a, **k, use_mask=False),
     "the result does not depend on the mask: pass `mask` to masked_softmax so masked keys get weight 0."),
    (lambda *a, **k: _mha(*a, **k, one_head=True),
     "this is ONE attention over the full width: split Q, K and V into n_heads heads first."),
    (lambda *a, **k: _mha(*a, **k, one_head=True, scale="all heads / n_heads"),
     "this is ONE attention over the full width (scaled by sqrt(d_head)): split Q, K and V into n_heads heads "
     "first, so that each head has its own softmax."),
    (lambda *a, **k: _mha(*a, **k, merge="reversed"),
     "the heads are concatenated in reverse order before W_O: head 0 must own the first d_head columns "
     "(does your merge_heads pass its own check?)."),
    (lambda *a, **k: _mha(*a, **k, split="interleaved"),
     "the heads are cut from interleaved columns: does your split_heads pass its own check?"),
]


def mha_case(rng, T, d_model, n_heads, d_head):
    X = rng.normal(size=(T, d_model))
    W_Q, W_K, W_V = (rng.normal(size=(d_model, n_heads * d_head)) / np.sqrt(d_model) * 2 for _ in range(3))
    W_O = rng.normal(size=(n_heads * d_head, d_model)) / np.sqrt(n_heads * d_head)
    return X, W_Q, W_K, W_V, W_O, n_heads


def uneven_mha_case(T, d_model, n_heads, d_head, top=1000.0):
    """Fixed: head 0's scores are all near `top`, the other heads' near 0, so a softmax shifted by ONE maximum over
    every head leaves the others at exp(-top) = 0 (0/0); each head's rows must be shifted by their own maximum."""
    X, W_Q, W_K, W_V, W_O, n_heads = mha_case(np.random.default_rng(T * 100 + d_model), T, d_model, n_heads, d_head)
    X[:, 0] = 1.0
    W_Q[:, :d_head], W_K[:, :d_head] = 0.0, 0.0
    W_Q[0, 0] = W_K[0, 0] = np.sqrt(top * np.sqrt(d_head))     # head 0 scores top + X[i, 1] * X[j, 1] / sqrt(d_head)
    W_Q[1, 1] = W_K[1, 1] = 1.0
    return X, W_Q, W_K, W_V, W_O, n_heads


# Where d_model = n_heads * d_head, dividing by sqrt(d_model) or by sqrt(n_heads * d_head) is the same mistake;
# a diagnosis made on such a case is confirmed on these, where the widths differ (and a mask matters).
MHA_CONFIRMATIONS = [(mha_case(np.random.default_rng(51), 4, 10, 3, 4), {"mask": causal(4)}),
                     (mha_case(np.random.default_rng(52), 5, 7, 2, 5), {"mask": causal(5)})]
MULTI_HEAD_ATTENTION = Check(name="multi_head_attention", diagnoses=MULTI_HEAD_ATTENTION_MISTAKES, allowed=TOOLS,
                             confirm_with=MHA_CONFIRMATIONS)


def check_mha(student_mha, args, kwargs=None, rtol=MULTI_HEAD_ATTENTION.rtol, atol=MULTI_HEAD_ATTENTION.atol):
    """check_against MULTI_HEAD_ATTENTION, with the missing output projection named when the shape gives it away
    ([T, n_heads * d_head] instead of [T, d_model], where the two widths differ)."""
    try:
        return check_against(student_mha, ref_heads.multi_head_attention, args, kwargs,
                             declared=MULTI_HEAD_ATTENTION, rtol=rtol, atol=atol)
    except Hint as hint:
        T, width = np.shape(args[0])[0], np.shape(args[4])[0]
        if width != np.shape(args[0])[1] and f"returned shape ({T}, {width});" in str(hint):
            raise Hint(f"{hint} That is the width of the merged heads: {MULTI_HEAD_ATTENTION_MISTAKES[3][1]}") from None
        raise


# every query sees at least one key, not only its past (a padding or window mask, say)
NOT_CAUSAL_3x3 = np.array([[True, False, True], [False, True, True], [True, True, False]])
NOT_CAUSAL_3x5 = np.array([[False, True, True, False, True], [True, False, False, False, True],
                           [True, True, False, True, False]])


def multi_head_attention(student_mha):
    rng = np.random.default_rng(50)
    check_mha(student_mha, mha_case(rng, 4, 6, 2, 3))
    check_mha(student_mha, mha_case(rng, 5, 8, 4, 2), {"mask": causal(5)})
    check_mha(student_mha, mha_case(rng, 3, 6, 1, 6), {"mask": causal(3)})
    check_mha(student_mha, mha_case(rng, 4, 10, 3, 4), {"mask": causal(4)})  # d_model != n_heads * d_head
    check_mha(student_mha, (*mha_case(rng, 3, 7, 2, 5), NOT_CAUSAL_3x3))  # a mask that is not causal, by position
    floats = tuple(a.astype(np.float32) for a in mha_case(rng, 5, 7, 3, 2)[:5])  # d_model 7 != 3 heads x 2
    check_mha(student_mha, (*floats, 3), {"mask": causal(5)}, rtol=1e-3, atol=1e-4)  # float32 in, float32 out
    check_mha(student_mha, uneven_mha_case(4, 6, 2, 3), {"mask": causal(4)})  # heads of very different size
    print("multi_head_attention: all visible checks passed.")


# ---------------------------------------------------------------- grouped_query_attention

def _gqa(q, k, v, mask=None, grouping="repeat", scale="d_head", use_mask=True):
    """Grouped-query attention with one thing changed, to recognise a mistake. Its arguments are plain data, so that
    the student edition can record it and withhold it while lesson 05 is open (qkv_edition.library.TWINS): with
    nothing changed it is the answer."""
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    n_q, n_kv = q.shape[0], k.shape[0]
    heads = np.arange(n_q)
    index = {"repeat": heads // (n_q // n_kv), "tile": heads % n_kv, "divided by H_kv": heads // n_kv}[grouping]
    width = {"d_head": q.shape[-1], "model": q.shape[0] * q.shape[-1], "none": 1.0}[scale]
    weights = ref_attention.masked_softmax(q @ k[index].swapaxes(-1, -2) / np.sqrt(width),
                                           mask if use_mask else None)
    return weights @ v[index]


GROUPED_QUERY_ATTENTION_MISTAKES = [
    (lambda *a, **k: _gqa(*a, **k, grouping="tile"),
     "query head h used key/value head h % H_kv (what np.tile gives: 0, 1, 2, 0, 1, 2, ...). Consecutive query "
     "heads form a group: head h reads key/value head h // (H_q // H_kv), which is what np.repeat gives "
     "(0, 0, 1, 1, 2, 2, ...)."),
    (lambda *a, **k: _gqa(*a, **k, grouping="divided by H_kv"),
     "query head h used key/value head h // H_kv; the divisor is the group size H_q // H_kv."),
    (lambda *a, **k: _gqa(*a, **k, scale="model"),
     "the scores are divided by sqrt(H_q * d_head), the model's width. Each head compares d_head-dimensional "
     "vectors, so divide by sqrt(d_head)."),
    (lambda *a, **k: _gqa(*a, **k, scale="none"),
     "the scores are not scaled: divide q @ k^T by sqrt(d_head) before the softmax."),
    (lambda *a, **k: _gqa(*a, **k, use_mask=False),
     "the result does not depend on the mask: pass `mask` to masked_softmax so masked keys get weight 0."),
]
GROUPED_QUERY_ATTENTION = Check(name="grouped_query_attention", diagnoses=GROUPED_QUERY_ATTENTION_MISTAKES,
                                allowed=TOOLS)


def gqa_case(rng, n_q, n_kv, T, d_head, T_k=None):
    T_k = T if T_k is None else T_k
    return (rng.normal(size=(n_q, T, d_head)) * 1.5, rng.normal(size=(n_kv, T_k, d_head)) * 1.5,
            rng.normal(size=(n_kv, T_k, d_head)))


def uneven_gqa_case(n_q, n_kv, T, d_head, top=1000.0):
    """Fixed: the query heads of key/value head 0 score exactly `top` on every key, the others near 0 (one maximum
    over every head leaves those at exp(-top) = 0: 0/0). Equal scores keep a correct float32 answer exact: scores
    near 1000 that differ would carry float32's rounding (1e-4) into the weights."""
    q, k, v = gqa_case(np.random.default_rng(n_q * 100 + T), n_q, n_kv, T, d_head)
    q[: n_q // n_kv], k[0, :, 0] = 0.0, top * np.sqrt(d_head) / 20.0
    q[: n_q // n_kv, :, 0] = 20.0
    return q, k, v


def grouped_query_attention(student_gqa):
    rng = np.random.default_rng(51)
    check_against(student_gqa, ref_heads.grouped_query_attention, gqa_case(rng, 4, 2, 3, 2),
                  declared=GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention,
                  gqa_case(rng, 6, 3, 4, 3), {"mask": causal(4)}, declared=GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention,
                  gqa_case(rng, 3, 3, 4, 2), {"mask": causal(4)}, declared=GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention,
                  gqa_case(rng, 4, 1, 4, 2), {"mask": causal(4)}, declared=GROUPED_QUERY_ATTENTION)
    # 3 queries over 5 keys, under a mask that is not causal and is given by position: the mask passed is the one
    check_against(student_gqa, ref_heads.grouped_query_attention, (*gqa_case(rng, 6, 2, 3, 7, T_k=5), NOT_CAUSAL_3x5),
                  declared=GROUPED_QUERY_ATTENTION)
    floats = tuple(a.astype(np.float32) for a in gqa_case(rng, 6, 3, 5, 2))  # float32 in, float32 out
    check_against(student_gqa, ref_heads.grouped_query_attention, floats, {"mask": causal(5)},
                  rtol=1e-3, atol=1e-4, declared=GROUPED_QUERY_ATTENTION)
    check_against(student_gqa, ref_heads.grouped_query_attention, uneven_gqa_case(4, 2, 3, 2), {"mask": causal(3)},
                  declared=GROUPED_QUERY_ATTENTION)  # heads of very different size
    print("grouped_query_attention: all visible checks passed.")


# ---------------------------------------------------------------- kv_cache_bytes_per_token

KV_CACHE_MISTAKES = [
    (lambda c, bytes_per_element: c.n_layers * c.n_kv_heads * c.d_head * bytes_per_element,
     "this is half the answer: the cache keeps a key AND a value for every key/value head (a factor 2)."),
    (lambda c, bytes_per_element: 2 * c.n_layers * c.n_heads * c.d_head * bytes_per_element,
     "this counts one cached head per QUERY head; with grouped-query attention only n_kv_heads key/value heads "
     "are computed and kept."),
    (lambda c, bytes_per_element: c.n_layers * c.n_heads * c.d_head * bytes_per_element,
     "this counts one head per query head and forgets that K and V are both kept (factor 2)."),
    (lambda c, bytes_per_element: 2 * c.n_layers * c.n_kv_heads * c.d_head,
     "this counts numbers, not bytes: multiply by bytes_per_element."),
    (lambda c, bytes_per_element: 2 * c.n_layers * c.n_kv_heads * c.d_head * bytes_per_element * 8,
     "this counts bits, not bytes: bytes_per_element is already in bytes."),
    (lambda c, bytes_per_element: 2 * c.n_kv_heads * c.d_head * bytes_per_element,
     "this is one layer's cache: every layer keeps its own keys and values."),
]
KV_CACHE_BYTES_PER_TOKEN = Check(name="kv_cache_bytes_per_token", diagnoses=KV_CACHE_MISTAKES)


def kv_cache_bytes_per_token(student_kv_bytes):
    toy = ref_heads.AttentionShape("toy", n_layers=4, d_model=48, n_heads=6, n_kv_heads=2, d_head=8)
    # 4 bytes first: at 2 bytes, ignoring bytes_per_element and forgetting the factor 2 give the same number
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (toy, 4), declared=KV_CACHE_BYTES_PER_TOKEN)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (ref_heads.as_multi_head(toy), 2),
                  declared=KV_CACHE_BYTES_PER_TOKEN)
    # any object with the four attributes the exercise names will do, e.g. SmolLM2's own config
    only_named = SimpleNamespace(n_layers=3, n_heads=4, n_kv_heads=1, d_head=16)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (only_named, 1),
                  declared=KV_CACHE_BYTES_PER_TOKEN)
    check_against(student_kv_bytes, ref_heads.kv_cache_bytes_per_token, (only_named,), {"bytes_per_element": 2},
                  declared=KV_CACHE_BYTES_PER_TOKEN)
    print("kv_cache_bytes_per_token: all visible checks passed.")


# ---------------------------------------------------------------- the student's GQA inside SmolLM2

VISIBLE_PROMPT = "The capital of France is"


def _student_attention(student_gqa):
    """Wrap the student's function for model.forward: each call is checked like any graded call."""
    def attention(q, k, v, mask):
        shown = call_text("grouped_query_attention", (q, k, v, mask))
        result = call(student_gqa, q, k, v, mask, name="grouped_query_attention", allowed=TOOLS)
        return expect_array(result, q.shape, f"inside SmolLM2, {shown}").astype(np.float32)
    return attention


def plugged_into_smollm2(student_gqa, prompt=VISIBLE_PROMPT, atol=2e-3):
    """SmolLM2 with the student's attention in all 30 layers must predict what it predicts with qkv's."""
    from qkv import model

    m = model.load()
    ids = model.encode(m, prompt)
    reference = model.forward(m, ids).logits
    try:
        ours = model.forward(m, ids, attention=_student_attention(student_gqa)).logits
    except Hint:
        raise
    except ValueError as error:
        raise Hint(f"SmolLM2 could not run with your grouped_query_attention: {error}") from None
    expected_id, got_id = int(np.argmax(reference[-1])), int(np.argmax(ours[-1]))
    gap = float(np.max(np.abs(ours - reference)))
    expect_number(gap, "the largest logit difference")
    words = model.tokens(m, [expected_id, got_id])
    if got_id != expected_id:
        raise Hint(f"with your grouped_query_attention SmolLM2 predicts {words[1]!r} after {prompt!r}; with the "
                   f"reference it predicts {words[0]!r} (largest logit difference {gap:.3g}). Check which key/value "
                   f"head each query head reads (h // (H_q // H_kv)), the sqrt(d_head) scale and the mask.")
    if gap > atol:
        raise Hint(f"with your grouped_query_attention SmolLM2 predicts the same next token {words[0]!r} after "
                   f"{prompt!r}, but its logits differ from the reference by up to {gap:.3g} (allowed {atol:g}): "
                   f"the same top token is not proof. Check the grouping (h // (H_q // H_kv)), the scale "
                   f"(sqrt(d_head)) and the mask.")
    return words[0], gap


def smollm2(student_gqa):
    word, gap = plugged_into_smollm2(student_gqa)
    print(f"SmolLM2 with your grouped_query_attention in all its layers predicts {word!r} after "
          f"{VISIBLE_PROMPT!r}, like the reference; largest logit difference {gap:.2g}.")


seal(__name__)
