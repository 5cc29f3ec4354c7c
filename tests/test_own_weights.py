"""SmolLM2's own attention answers only SmolLM2's own projections (issue 41, item 2; qkv.own_weights).

qkv.model.layer_attention on a made-up layer (identity W_q, a column that makes each row's RMS 1, RoPE off) was
lesson 05's open grouped_query_attention for any q, k, v, and grow= handed it any keys and values; own_attention, the
model's own attention handed to wrappers, computed it through the same layer. Each route raises the short
NotTheModelsWeights now; the real model gives the same logits bit for bit, and W_o, the MLP, the embedding and the
config stay the caller's to change.
"""
import dataclasses
import types

import numpy as np
import pytest

from qkv import kv_cache, model_cache, own_weights
from qkv import model as M
from qkv.heads import grouped_query_attention
from qkv.own_weights import NotTheModelsWeights

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def smol():
    return M.load()


def made_up_layer(width, H_q, H_kv, d):
    # identity W_q: the rows of x are the queries (the extra column keeps each row's RMS 1); W_k, W_v unused (grow)
    return types.SimpleNamespace(attn_norm=np.ones(width), W_q=np.eye(width, H_q * d),
                                 W_k=np.zeros((width, H_kv * d)), W_v=np.zeros((width, H_kv * d)), W_o=None)


def test_a_made_up_layer_grow_and_own_attention_raise_the_short_error(smol):
    rng = np.random.default_rng(41)
    H_q, H_kv, n, T, d = 4, 2, 3, 5, 2
    config = types.SimpleNamespace(n_heads=H_q, n_kv_heads=H_kv, d_head=d, rms_eps=0.0)
    layer = made_up_layer(H_q * d + 1, H_q, H_kv, d)
    x = np.ones((n, H_q * d + 1))
    cos, sin = np.ones((n, d // 2)), np.zeros((n, d // 2))
    k, v = rng.normal(size=(H_kv, T, d)), rng.normal(size=(H_kv, T, d))
    routes = {
        "made-up layer": lambda: M.layer_attention(x, layer, config, cos, sin, np.ones((n, n), bool), heads=True),
        "grow": lambda: M.layer_attention(x, layer, config, cos, sin, np.ones((n, T), bool),
                                          grow=lambda k_new, v_new: (k, v), heads=True),
        "weights": lambda: M.attention_block(x, layer, config, cos, sin, np.ones((n, n), bool),
                                             grouped_query_attention, return_weights=True),
        "own_attention": lambda: M.attention_block(x, layer, config, cos, sin, np.ones((n, n), bool),
                                                   M.own_attention),
    }
    for route, call in routes.items():
        with pytest.raises(NotTheModelsWeights, match="only with SmolLM2's own") as raised:
            call()
        assert len(raised.value._render_traceback_()) == 3, route
    # SmolLM2's own arrays, copied (a view, a copy or another dtype) are not its own either
    real = smol.weights.layers[0]
    c = smol.config
    cos, sin = M.rope_angles(n, c.d_head, c.rope_base)
    x = smol.weights.token_embedding[:n]
    for copied in (real._replace(W_q=real.W_q[:]), real._replace(W_k=np.array(real.W_k)),
                   real._replace(attn_norm=real.attn_norm.astype(np.float64))):
        with pytest.raises(NotTheModelsWeights):
            M.layer_attention(x, copied, c, cos, sin)
    M.layer_attention(x, real._replace(W_o=np.zeros_like(real.W_o)), c, cos, sin)  # W_o is the caller's


def test_whole_models_with_other_projections_raise_and_the_real_one_is_unchanged(smol, monkeypatch):
    monkeypatch.setenv(model_cache.MODE_VARIABLE, "off")
    ids = M.encode(smol, PROMPT)
    w = smol.weights
    layers = (w.layers[0]._replace(W_v=np.array(w.layers[0].W_v)), *w.layers[1:])
    other = smol._replace(weights=w._replace(layers=layers))
    for route in (lambda: M.forward(other, ids), lambda: M.forward(other, ids, attention=M.own_attention),
                  lambda: M.forward(other, ids, attention=grouped_query_attention, return_weights=True),
                  lambda: M.block_steps(other, ids), lambda: kv_cache.generate_with_cache(other, ids, 1)):
        with pytest.raises(NotTheModelsWeights):
            route()
    np.testing.assert_allclose(M.forward(other, ids, attention=grouped_query_attention).logits,
                               M.forward(smol, ids).logits, rtol=1e-4, atol=1e-4)   # your own attention runs
    # the real model: every number as without the check, bit for bit, and what the lessons change still runs
    logits = M.forward(smol, ids).logits
    ablated = w._replace(layers=(w.layers[0]._replace(W_o=np.zeros_like(w.layers[0].W_o),
                                                      W_down=np.zeros_like(w.layers[0].W_down)), *w.layers[1:]),
                         token_embedding=np.array(w.token_embedding))
    changed = [M.forward(smol._replace(weights=ablated), ids).logits,
               M.forward(smol._replace(config=dataclasses.replace(smol.config, rms_eps=1e-3)), ids).logits]
    monkeypatch.setattr(own_weights, "require_own_projections", lambda layer: None)
    assert np.array_equal(M.forward(smol, ids).logits, logits)
    assert np.array_equal(M.forward(smol._replace(weights=ablated), ids).logits, changed[0])
    assert np.array_equal(M.forward(smol._replace(config=dataclasses.replace(smol.config, rms_eps=1e-3)),
                                    ids).logits, changed[1])


def test_a_load_kept_in_memory_can_never_be_made_writeable():
    """A verified load whose float32 cache could not be written keeps its arrays in memory: frozen into immutable
    buffers, they are trusted as the memory maps are (model_cache.trust, then own_weights.adopt)."""
    arrays = own_weights.frozen({"W": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert np.array_equal(arrays["W"], np.arange(6).reshape(2, 3)) and model_cache._never_writeable(arrays["W"])
    with pytest.raises(ValueError):
        arrays["W"].setflags(write=True)


def test_lesson_02s_attention_shares_no_key_heads_by_broadcasting():
    """Lesson 02's attention, a handout from week 03 on, was lesson 05's grouped_query_attention (and lesson 07's
    attention_step) as one call plus reshapes: q [H_kv, group, n, d] against k[:, None] broadcast the shared heads.
    It wants the same leading axes now and says how to share heads; written out, the grouping is the exercise's own."""
    from qkv.attention import attention, attention_weights
    rng = np.random.default_rng(41)
    H_q, H_kv, n, T, d = 6, 2, 3, 5, 4
    q, k, v = rng.normal(size=(H_q, n, d)), rng.normal(size=(H_kv, T, d)), rng.normal(size=(H_kv, T, d))
    for route in (lambda: attention(q.reshape(H_kv, -1, n, d), k[:, None], v[:, None]),
                  lambda: attention_weights(q.reshape(H_kv, -1, n, d), k[:, None]),
                  lambda: attention(q, k[:1], v[:1])):
        with pytest.raises(ValueError, match=r"same leading \(batch, head\) axes"):
            route()
    with pytest.raises(ValueError, match="each key has its value"):
        attention(q[:2], k, v[:1])
    shared = np.repeat(k, H_q // H_kv, axis=0), np.repeat(v, H_q // H_kv, axis=0)
    np.testing.assert_array_equal(attention(q, *shared), grouped_query_attention(q, k, v))
