"""Visible checks for lesson 06's head ablation (kept apart from lesson06.py, which re-exports check_ablation and
gqa_inputs): ablate_heads returns a function, checked against the reference's on every case. The attention it wraps
in the checks is qkv.sinks.stand_in_attention, whose heads all differ, not lesson 05's grouped-query attention,
which an edition of weeks 06 and 07 withholds (on one query it is lesson 07's attention_step; issue 41)."""
import numpy as np

from qkv import sinks as ref_sinks
from qkv.checking import Check, Hint, call, check_against, seal
from qkv.masking import causal_mask


def _ablation(attention, heads, every_layer=False, zero_queries=False, kv_head=False):
    pairs = [tuple(int(x) for x in p) for p in heads]

    def ablated(q, k, v, mask, layer):
        chosen = [h for L, h in pairs if every_layer or L == int(layer)]
        if zero_queries:  # the weights become uniform after the softmax: still renormalised
            q = np.array(q, dtype=float, copy=True)
            q[chosen] = 0.0
            return np.asarray(attention(q, k, v, mask))
        out = np.array(attention(q, k, v, mask), dtype=float, copy=True)
        if kv_head:
            group = np.shape(q)[0] // np.shape(k)[0]
            chosen = [h2 for h in chosen for h2 in range(np.shape(q)[0]) if h2 // group == h // group]
        out[chosen] = 0.0
        return out

    return ablated


def ablation_mistakes(attention, heads):
    return [
        (_ablation(attention, heads, every_layer=True),
         "the listed heads are zeroed in EVERY layer; only the pairs (layer, head) given should be, each in its own "
         "layer (compare the `layer` argument)."),
        (_ablation(attention, heads, zero_queries=True),
         "the head still has an output: zeroing its query (or its scores) makes the weights uniform after the "
         "softmax, which renormalises them. Ablation sets the head's OUTPUT to zero."),
        (_ablation(attention, heads, kv_head=True),
         "every query head sharing the key/value head was zeroed; ablate only the listed query heads."),
    ]


def gqa_inputs(rng, n_q, n_kv, T, d_head):
    return (rng.normal(size=(n_q, T, d_head)), rng.normal(size=(n_kv, T, d_head)), rng.normal(size=(n_kv, T, d_head)),
            causal_mask(T))


def ablated_check(name, attention, heads):
    """The Check of the function that ablate_heads(attention, heads) returns, declared once for both layers: its name
    in hints, its mistakes and the tool it may call (`attention`) depend on the attention and heads it was given."""
    return Check(name=f"{name} called as f", diagnoses=ablation_mistakes(attention, heads), allowed=(attention,))


def check_ablation(student_fn, attention, heads, cases, shown_heads=None):
    """cases: [(q, k, v, mask, layer), ...] to run the returned function on."""
    name = f"ablate_heads({getattr(attention, '__name__', 'attention')}, {shown_heads or list(heads)!r})"
    ablated = call(student_fn, attention, heads, name="ablate_heads")
    if not callable(ablated):
        raise Hint(f"{name} returned {type(ablated).__name__}; it must return a function "
                   f"ablated(q, k, v, mask, layer) (define one inside and return it).")
    reference = ref_sinks.ablate_heads(attention, heads)
    declared = ablated_check(name, attention, heads)
    for args in cases:
        check_against(ablated, reference, args, declared=declared)


seal(__name__)
