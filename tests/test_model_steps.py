"""qkv.model's views inside a forward pass (lesson 05): the residual stream per layer and one block's steps."""
import numpy as np
import pytest

from qkv import model


@pytest.fixture(scope="module")
def smol():
    return model.load()


def test_hidden_states_are_the_residual_stream_and_change_nothing_else(smol):
    ids = model.encode(smol, "The animal crossed the street because it was tired.")
    plain = model.forward(smol, ids)
    traced = model.forward(smol, ids, return_hidden=True)
    assert plain.hidden is None
    assert len(traced.hidden) == smol.config.n_layers + 1
    assert all(h.shape == (len(ids), smol.config.d_model) for h in traced.hidden)
    np.testing.assert_array_equal(traced.hidden[0], smol.weights.token_embedding[ids])
    np.testing.assert_array_equal(traced.logits, plain.logits)
    np.testing.assert_allclose(model.logits_from_hidden(traced.hidden[-1], smol.weights, smol.config), plain.logits)


@pytest.mark.parametrize("layer_index", [0, 2])
def test_block_steps_go_from_one_hidden_state_to_the_next(smol, layer_index):
    ids = model.encode(smol, "Hello there, general Kenobi")
    hidden = model.forward(smol, ids, return_hidden=True).hidden
    steps = dict(model.block_steps(smol, ids, layer_index))
    np.testing.assert_array_equal(steps["input x"], hidden[layer_index])
    np.testing.assert_allclose(steps["x + MLP (residual add) = output"], hidden[layer_index + 1], atol=1e-5)
    assert steps["MLP hidden"].shape == (len(ids), smol.config.d_ffn)
    layer = smol.weights.layers[layer_index]
    np.testing.assert_allclose(steps["MLP"], model.swiglu_mlp(steps["RMSNorm"], layer.W_gate, layer.W_up, layer.W_down),
                               atol=1e-5)
