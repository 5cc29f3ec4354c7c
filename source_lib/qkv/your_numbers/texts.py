"""How each varied question shows the student's numbers: a line of text per numeric question (what the markdown
stem calls "your ..."), and the four options of a choice question in canonical order, unmarked (the student sees
them in the order of their variant, lettered (a) to (d)). Plain text, read aloud by a screen reader as it is."""

# question -> the sentence giving this student's numbers; {name} are the pool's parameter names
NUMBERS = {
    "blended_output": "Your numbers: the query is q = [{x}, 0], the value of k1 is v1 = [{v1}] (v2 = [0]), and the "
                      "temperature is {T}.",
    "dot_products": "Your numbers: the input grows to T = {T} tokens.",
    "scale_d128": "Your numbers: the model's heads have width d_k = {d_k}.",
    "variance_at_128": "Your numbers: d_k = {d_k}.",
    "entropy_uniform_8": "Your numbers: equal weights over n = {n} keys.",
    "blocked_pairs": "Your numbers: the context holds T = {T} tokens.",
    "future_share_zero_mask": "Your numbers: a sentence of T = {T} words; the query is word number {position} "
                              "(counting from 1).",
    "qwen_kv_bytes_per_token": "Your model: {n_layers} layers, {n_kv_heads} key/value heads of {d_head} "
                               "dimensions, {bytes}-byte numbers.",
    "qwen_kv_saving_factor": "Your model: {n_heads} query heads sharing {n_kv_heads} key/value heads.",
    "gpt2_uniform_share": "Your numbers: a sentence of T = {T} tokens.",
    "sink_peak_layer": "Your numbers: layer {layer} of SmolLM2 (layers count from 0).",
    "context_growth": "Your numbers: the context grows from {n_old:,} to {n_new:,} tokens.",
    "smollm2_cache_mib": "Your numbers: one sequence of T = {T:,} tokens.",
}

# choice question -> its four options, canonical order (a, b, c, d of the answer key)
OPTIONS = {
    "lookup_on_miss": ("it raises an error too", "the value of the first key",
                       "a weighted blend of all the values, whatever the match", "a vector of zeros"),
    "why_separate": ("to halve the memory", "so that what makes a position findable can differ from what it hands over",
                     "because softmax needs two inputs", "so that the output has the same size as the query"),
    "score_shape": ("`[T, d_k]`", "`[T, T]`", "`[d_k, d_k]`", "`[T]`"),
    "is_symmetric": ("yes, always, because the dot product is symmetric", "yes, because the matrix is square",
                     "not in general: entry `(i, j)` pairs the query of `i` with the key of `j`, entry `(j, i)` the "
                     "query of `j` with the key of `i`", "no, because the softmax is taken along the rows"),
    "why_scale": ("so that the weights of a row sum to 1",
                  "so that the scores keep a variance near 1 whatever d_k, which keeps the softmax out of saturation",
                  "to change which key gets the largest weight", "to make the matrix product cheaper"),
    "without_scaling": ("the weights become uniform, every key gets the same share",
                        "the weights no longer sum to 1",
                        "most rows put nearly all their weight on one key, and the gradient of the weights with "
                        "respect to the scores (the softmax Jacobian) is about ten times smaller than with the scale",
                        "nothing measurable changes"),
    "causal_blocks": ("query i attending keys j < i", "query i attending keys j > i", "query i attending itself",
                      "only the padding tokens"),
    "why_meaningless": ("the softmax overflows on long sentences", "the rows of weights stop summing to 1",
                        "each position's target is the next token, which is part of the input, so attention can "
                        "copy it: the loss falls without the model learning to predict, and at generation time "
                        "there is nothing to copy", "the model can no longer attend to earlier tokens"),
    "design_choice": ("dividing the scores by sqrt(d_head)", "running several attention heads in parallel, each with "
                      "its own projections, instead of one", "the causal mask",
                      "sharing key/value heads among query heads"),
    "gqa_saves": ("multi-query attention; it saves the FLOPs of the queries",
                  "grouped-query attention; it saves the output projection's parameters",
                  "grouped-query attention; it shrinks the key/value cache kept while generating",
                  "sparse attention; it skips distant tokens"),
    "weight_refutes": ("because full stops carry the meaning of a sentence",
                       "because attention weights do not sum to 1, so they cannot be compared",
                       "because the largest weights land on tokens that say nothing about the answer, so a large "
                       "weight alone does not show that a token was used: only an intervention such as deleting it "
                       "(section 4) can", "because the model does not use attention at all"),
    "sink_explanation": ("the token the model copies into its answer; softmax sharpens it",
                         "a position, usually the first, that absorbs the weight of heads with nothing useful to "
                         "read: the weights must go somewhere, and a position every query sees, where weight moves "
                         "the output less than on other tokens, is a harmless place",
                         "a bug of the causal mask that a correct implementation removes",
                         "the token whose value vector is the longest, so it dominates every output"),
    "ablation_outcome": ("ablating the top induction heads raises the loss on the second copy far more than ablating "
                         "as many random heads", "both ablations raise it about equally", "neither changes it",
                         "random heads matter more than induction heads"),
    "more_important_reason": ("short paths, because they removed vanishing gradients completely",
                              "parallelism, because it let much larger models be trained on much more data on "
                              "parallel hardware", "neither: attention does less arithmetic than a recurrence",
                              "short paths, because attention has fewer parameters"),
}
