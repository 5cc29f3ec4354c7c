"""Hidden tests for lesson 06: sinks, contributions, occlusion, sliding windows, perplexity, head patterns.

Inputs are drawn fresh each run; fixed edge cases target the mistakes the lesson names (query 0 included,
off-by-one windows, future-leaking sinks, unshifted or overflowing perplexity, wrong diagonals, ablation in
every layer or by renormalised weights).
"""
import numpy as np

from qkv import sinks as ref_sinks
from qkv.checking import check_against, seal
from qkv.checks import lesson06 as visible
from qkv_grading import answer_of, fresh_rng

# Withheld from the student's kernel while this lesson is graded: every qkv function that computes a graded
# answer (token_losses and log_softmax compute perplexity; ablated_attention is what ablate_heads returns).
GRADED_REFERENCES = (
    "qkv.sinks.first_token_share",
    "qkv.sinks.contribution_norms",
    "qkv.sinks.occlusion_effects",
    "qkv.sinks.sliding_window_mask",
    "qkv.sinks.log_softmax",
    "qkv.sinks.token_losses",
    "qkv.sinks.perplexity",
    "qkv.sinks.diagonal_score",
    "qkv.sinks.previous_token_score",
    "qkv.sinks.induction_score",
    "qkv.sinks.ablate_heads",
    "qkv.sinks.ablated_attention",
)


def first_token_share(student_fn):
    rng = fresh_rng()
    for H, T in [(int(rng.integers(2, 5)), int(rng.integers(4, 9))), (9, 6), (1, 3), (4, 2)]:
        check_against(student_fn, ref_sinks.first_token_share, (visible.causal_weights(rng, H, T),),
                      declared=visible.FIRST_TOKEN_SHARE)
    # a strong sink: every query gives key 0 most of its weight, query 0 excluded or not makes a difference
    sink = visible.causal_weights(rng, 3, 6)
    sink[:, :, 0] += 4.0
    sink /= sink.sum(axis=-1, keepdims=True)
    check_against(student_fn, ref_sinks.first_token_share, (sink,), declared=visible.FIRST_TOKEN_SHARE)
    check_against(student_fn, ref_sinks.first_token_share, (visible.causal_weights(rng, 3, 5).astype(np.float32),),
                  declared=visible.FIRST_TOKEN_SHARE, rtol=1e-4, atol=1e-6)


def contribution_norms(student_fn):
    rng = fresh_rng()
    for T, d_head, d_model in [(int(rng.integers(3, 8)), 4, 6), (5, 3, 3), (2, 5, 4), (6, 2, 9)]:
        check_against(student_fn, ref_sinks.contribution_norms, visible.contribution_case(rng, T, d_head, d_model),
                      declared=visible.CONTRIBUTION_NORMS)
    # a sink-like case: a large weight on a small value vector
    w, v, W_O = visible.contribution_case(rng, 5, 3, 4)
    w = np.array([0.8, 0.05, 0.05, 0.05, 0.05])
    v[0] *= 0.01
    check_against(student_fn, ref_sinks.contribution_norms, (w, v, W_O), declared=visible.CONTRIBUTION_NORMS)
    w, v, W_O = (a.astype(np.float32) for a in visible.contribution_case(rng, 4, 3, 5))
    check_against(student_fn, ref_sinks.contribution_norms, (w, v, W_O), declared=visible.CONTRIBUTION_NORMS, rtol=1e-3,
                  atol=1e-5)


def occlusion_effects(student_fn):
    rng = fresh_rng()
    confirm = visible.occlusion_confirmations(rng)
    for T in (int(rng.integers(4, 8)), 2, 6):
        vocab = int(rng.integers(8, 20))
        check_against(student_fn, ref_sinks.occlusion_effects,
                      (visible.toy_logprob(rng, vocab, decay=float(rng.uniform(0.5, 0.9))),
                       rng.integers(0, vocab, size=T)), declared=visible.OCCLUSION_EFFECTS, confirm_with=confirm)
    check_against(student_fn, ref_sinks.occlusion_effects, (visible.sink_logprob(rng, 10), rng.integers(0, 10, size=5)),
                  declared=visible.OCCLUSION_EFFECTS, confirm_with=confirm)
    # ids given as a plain list, and a sequence whose tokens are all different
    check_against(student_fn, ref_sinks.occlusion_effects, (visible.toy_logprob(rng, 9), [8, 0, 5, 3]),
                  declared=visible.OCCLUSION_EFFECTS, confirm_with=confirm)


def sliding_window_mask(student_fn):
    rng = fresh_rng()
    cases = [(int(rng.integers(6, 12)), int(rng.integers(2, 4)), int(rng.integers(1, 3))),
             (8, 3, 2), (8, 3, 0), (5, 1, 1), (6, 6, 0), (4, 2, 4), (7, 8, 1), (1, 1, 1), (9, 2, 3)]
    for args in cases:
        visible.mask_check(student_fn, args, declared=visible.SLIDING_WINDOW_MASK)


def perplexity(student_fn):
    rng = fresh_rng()
    for T, vocab in [(int(rng.integers(3, 9)), int(rng.integers(5, 30))), (2, 3), (10, 50)]:
        check_against(student_fn, ref_sinks.perplexity, visible.perplexity_case(rng, T, vocab),
                      declared=visible.PERPLEXITY)
    # large logits: a log-softmax that exponentiates them directly overflows
    check_against(student_fn, ref_sinks.perplexity, visible.perplexity_case(rng, 5, 8, scale=20.0, offset=3000.0),
                  declared=visible.PERPLEXITY)
    logits, ids = visible.perplexity_case(rng, 6, 12)
    check_against(student_fn, ref_sinks.perplexity, (logits.astype(np.float32), ids), declared=visible.PERPLEXITY,
                  rtol=1e-3, atol=1e-4)


def _score_cases(rng):
    return [(visible.scores_case(rng, int(rng.integers(2, 5)), int(rng.integers(4, 9))),),
            (visible.scores_case(rng, 3, 6, causal=False),), (visible.scores_case(rng, 9, 5),),
            (visible.scores_case(rng, 1, 2),)]


def diagonal_score(student_fn):
    rng = fresh_rng()
    for args in _score_cases(rng):
        check_against(student_fn, ref_sinks.diagonal_score, args, declared=visible.DIAGONAL_SCORE)
    check_against(student_fn, ref_sinks.diagonal_score, (visible.scores_case(rng, 2, 5).astype(np.float32),),
                  declared=visible.DIAGONAL_SCORE, rtol=1e-4, atol=1e-6)


def previous_token_score(student_fn):
    rng = fresh_rng()
    for args in _score_cases(rng):
        check_against(student_fn, ref_sinks.previous_token_score, args, declared=visible.PREVIOUS_TOKEN_SCORE)
    check_against(student_fn, ref_sinks.previous_token_score, (visible.scores_case(rng, 2, 5).astype(np.float32),),
                  declared=visible.PREVIOUS_TOKEN_SCORE, rtol=1e-4, atol=1e-6)


def induction_score(student_fn):
    rng = fresh_rng()
    for H, period in [(int(rng.integers(2, 5)), int(rng.integers(2, 6))), (9, 3), (2, 1), (3, 7)]:
        check_against(student_fn, ref_sinks.induction_score, (visible.scores_case(rng, H, 2 * period), period),
                      declared=visible.INDUCTION_SCORE)
    check_against(student_fn, ref_sinks.induction_score, (visible.scores_case(rng, 2, 8, causal=False), 4),
                  declared=visible.INDUCTION_SCORE)
    check_against(student_fn, ref_sinks.induction_score, (visible.scores_case(rng, 3, 6).astype(np.float32), 3),
                  declared=visible.INDUCTION_SCORE, rtol=1e-4, atol=1e-6)


def ablate_heads(student_fn):
    # the attention wrapped is a stand-in, not lesson 05's grouped-query attention: the grader's kernel for this
    # lesson withholds that (on one query it is lesson 07's attention_step; issue 41), and it resolves what it is
    # given by name. Every head of the stand-in's output differs and none is zero, so each mistake shows
    rng = fresh_rng()
    n_layers = 4
    # heads in two layers, and a layer with none: only the right layer's heads go to zero; (3, 0) listed twice,
    # fixed (a drawn head equal to (1, 2) made it so on one draw in six), is zeroed, not removed twice or restored
    heads = [(1, int(rng.integers(0, 6))), (3, 0), (3, 5), (1, 2), (3, 0)]
    cases = [(*visible.gqa_inputs(rng, 6, 3, int(rng.integers(3, 6)), 4), layer) for layer in range(n_layers)]
    visible.check_ablation(student_fn, ref_sinks.stand_in_attention, heads, cases)
    # a single pair given as a tuple of tuples, ordinary multi-head attention (H_kv = H_q)
    cases = [(*visible.gqa_inputs(rng, 3, 3, 4, 2), layer) for layer in (0, 2)]
    visible.check_ablation(student_fn, ref_sinks.stand_in_attention, ((2, 1),), cases)
    # nothing ablated: the function must give back what attention gives
    visible.check_ablation(student_fn, ref_sinks.stand_in_attention, [], [(*visible.gqa_inputs(rng, 4, 2, 3, 2), 0)])


ANSWERS = {
    "weight_refutes": ("c", None),
    "sink_explanation": ("b", None),
    # seed 003 quotes GPT-2's last token of a 6-token sentence; the student's sentence has T tokens (canonical 6):
    # no preference spreads 1/T on each. Three decimals (rounded or cut): the window 0.001 keeps 1/29 and 1/30
    # apart, and 1/(T-1) (query 0 left out) and GPT-2's measured 0.61 outside it
    "gpt2_uniform_share": (lambda p: 1 / p["T"], 0.001),
    # SmolLM2's first-token share (lesson's `shares`, queries 1..T-1) at the student's layer on the seed-002
    # sentence, layers 0..29 (canonical: the peak, layer 25); tests/test_lesson06.py recomputes the table from the model
    "sink_peak_layer": (lambda p, shares=(
        0.09028, 0.05650, 0.41169, 0.77767, 0.81110, 0.87145, 0.73536, 0.91955, 0.80987, 0.73158, 0.20704, 0.02433,
        0.55825, 0.60811, 0.77290, 0.71346, 0.46070, 0.79118, 0.81113, 0.62462, 0.88326, 0.80896, 0.78668, 0.86165,
        0.93834, 0.95103, 0.93030, 0.84703, 0.83359, 0.56161): shares[p["layer"]], 0.002),
    "ablation_outcome": ("a", None),
}


# One line per self-check, shown in self-study mode (QKV_SELF_STUDY=1) once the student has answered, right or
# wrong: so it explains the idea and never names the answer (tests/test_lesson06.py checks that it does not).
EXPLANATIONS = {
    "weight_refutes": "The biggest weights go to tokens that carry nothing about the answer, so a weight alone cannot "
                      "show that a token was used; only an intervention, deleting it and watching the answer, can.",
    "sink_explanation": "Every row must sum to 1, so a head with nothing to read has to park its weight somewhere: "
                        "on a position all queries see, whose short value vectors make that weight move the output "
                        "less than on other tokens (section 3: less, not nothing).",
    "gpt2_uniform_share": "With no preference the last query spreads its weight evenly over every token it can see, "
                          "itself included: one over the number of tokens, whatever GPT-2 measured.",
    "sink_peak_layer": "Read your layer's entry of the per-layer first-token shares of section 2 (`shares`, layers "
                       "counted from 0), not its share of the contribution, and as a fraction, not a percentage.",
    "ablation_outcome": "Compare the second-copy losses printed in section 6: the intact model, the top induction "
                        "heads ablated, and the random heads ablated, against the first copy's loss (no copying).",
}


answer = answer_of(ANSWERS)


seal(__name__)
