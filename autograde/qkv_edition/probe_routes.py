"""Routes to an open exercise through a bigger function the library ships: the glue a student would write around it,
tried by the probe (qkv_edition.probe) in every kernel it runs, as candidates named route.<name> (issue 41, item 2).

- SmolLM2's own attention on a made-up layer: qkv.model.layer_attention computes grouped-query attention of the
  q, k, v its layer projects; a layer with identity W_q, a column that makes each row's RMS 1 (so RMSNorm leaves
  the row as it is), RoPE turned off (cos = 1, sin = 0) and the keys and values handed in by grow= makes it lesson
  05's grouped_query_attention of any q, k, v, and lesson 07's attention_step on one query. It answers only
  SmolLM2's own projections now (qkv.own_weights); these routes are what holds that, in editions and grading kernels.

ROUTES is source run in the probe's kernel (plain Python, no name of the probe's), each function a candidate.
"""

ROUTES = '''
def layer_attention_on_a_made_up_layer_as_grouped_query_attention(q, k, v, mask=None):
    # [H_q, n, d], [H_kv, T, d], [H_kv, T, d_v] -> [H_q, n, d_v], through qkv.model.layer_attention
    import types
    import numpy as np
    import qkv.model
    q, k, v = (np.asarray(a) for a in (q, k, v))
    (H_q, n, d), (H_kv, T, d_v), dtype = q.shape, v.shape, np.result_type(q, k, v)
    D = max(d, d_v) + max(d, d_v) % 2                                  # one even width for q, k and v (RoPE pairs)
    padded = [np.zeros(a.shape[:2] + (D,)) for a in (q, k, v)]
    for a, given in zip(padded, (q * np.sqrt(D / d), k, v)):           # q rescaled: the model divides by sqrt(D)
        a[..., :given.shape[-1]] = given
    rows = padded[0].transpose(1, 0, 2).reshape(n, H_q * D)            # the n query rows, heads side by side
    width = H_q * D + 1
    scale = max(1.0, np.sqrt(np.max(np.sum(rows ** 2, axis=1)) / width))
    x = np.concatenate([rows / scale, np.zeros((n, 1))], axis=1)
    x[:, -1] = np.sqrt(np.maximum(width - np.sum(x ** 2, axis=1), 0.0))  # every row's mean square is 1
    W_q = np.eye(width, H_q * D)
    layer = types.SimpleNamespace(attn_norm=np.ones(width), W_q=W_q, W_k=np.zeros((width, H_kv * D)),
                                  W_v=np.zeros((width, H_kv * D)), W_o=None)
    config = types.SimpleNamespace(n_heads=H_q, n_kv_heads=H_kv, d_head=D, rms_eps=0.0)
    cos, sin = np.full((n, D // 2), scale), np.zeros((n, D // 2))      # no rotation; the rows' scale undone
    mask = np.ones((n, T), bool) if mask is None else np.asarray(mask, bool)
    out, _ = qkv.model.layer_attention(x, layer, config, cos, sin, mask, grow=lambda k_new, v_new: padded[1:],
                                       heads=True)
    return out[..., :d_v].astype(dtype)


def layer_attention_on_a_made_up_layer_as_attention_step(q_new, k_cache, v_cache):
    # [H_q, 1, d], [H_kv, T, d], [H_kv, T, d_v] -> [H_q, 1, d_v]: one query sees the whole cache
    return layer_attention_on_a_made_up_layer_as_grouped_query_attention(q_new, k_cache, v_cache)
'''
