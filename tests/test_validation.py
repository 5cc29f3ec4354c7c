"""The library checks a whole number, and token ids, one way (qkv.shapes): the same mistake, the same message.

A whole number is an int or a numpy integer: never a bool (True is no length) nor a float, even 3.0 (int() would
hide a 2.5). Each case below was accepted, or named the wrong argument, before the validators were shared.
"""
import numpy as np
import pytest

from qkv import attention, cost, heads, kv_cache, masking, model, scaling, sinks

CACHE = (np.zeros((2, 6, 4)), np.zeros((2, 6, 4)))
QKV = (np.zeros((3, 4)), np.zeros((3, 4)), np.zeros((3, 2)))

WHOLE_NUMBER_CASES = {
    "causal_mask(True)": (lambda: masking.causal_mask(True), "T must be a positive whole number; got True"),
    "padding_mask T = 4.0": (lambda: masking.padding_mask([2, 1], 4.0), "T must be a positive whole number; got 4.0"),
    "scale_for_unit_variance(64.0)": (lambda: scaling.scale_for_unit_variance(64.0),
                                      "d_k must be a positive whole number; got 64.0"),
    "scale_for_unit_variance(True)": (lambda: scaling.scale_for_unit_variance(True),
                                      "d_k must be a positive whole number; got True"),
    "dot_product_variance n_samples 0": (lambda: scaling.dot_product_variance(8, 0, np.random.default_rng(0)),
                                         "n_samples must be a positive whole number; got 0"),
    "score_count(True)": (lambda: cost.score_count(True), "T must be a whole number >= 0; got True"),
    "score_count(3.0)": (lambda: cost.score_count(3.0), "T must be a whole number >= 0; got 3.0"),
    "check_probe_fits(True)": (lambda: cost.check_probe_fits(True), "T must be a positive whole number; got True"),
    "evict window 2.0": (lambda: cost.evict(*CACHE, 2.0), "window must be a positive whole number; got 2.0"),
    "evict n_sink True": (lambda: cost.evict(*CACHE, 2, n_sink=True), "n_sink must be a whole number >= 0; got True"),
    "causal_block_counts chunk 2.0": (lambda: cost.causal_block_counts(8, 2.0),
                                      "chunk must be a positive whole number; got 2.0"),
    "chunked_attention chunk True": (lambda: cost.chunked_attention(*QKV, True),
                                     "chunk must be a positive whole number; got True"),
    "sliding_window_mask window True": (lambda: sinks.sliding_window_mask(4, True),
                                        "window must be a positive whole number; got True"),
    "induction_score period True": (lambda: sinks.induction_score(np.zeros((1, 4, 4)), True),
                                    "period must be a positive whole number; got True"),
    "split_heads n_heads 2.0": (lambda: heads.split_heads(np.zeros((3, 4)), 2.0),
                                "n_heads must be a positive whole number; got 2.0"),
    "split_heads n_heads True": (lambda: heads.split_heads(np.zeros((3, 4)), True),
                                 "n_heads must be a positive whole number; got True"),
}

TOKEN_ID_CASES = {  # sinks' token ids, checked by qkv.shapes.token_ids as the model checks them
    "packed_mask no lengths": (lambda: sinks.packed_mask([]),
                               "lengths must be a non-empty 1-D sequence of token ids; got shape (0,)"),
}


@pytest.mark.parametrize("case", WHOLE_NUMBER_CASES)
def test_a_whole_number_is_an_int_never_a_bool_or_a_float_with_one_message(case):
    call, message = WHOLE_NUMBER_CASES[case]
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


@pytest.mark.parametrize("case", TOKEN_ID_CASES)
def test_token_ids_are_checked_one_way(case):
    call, message = TOKEN_ID_CASES[case]
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


def test_the_model_takes_whole_numbers_and_token_ids_the_same_way():
    smol = model.load()
    ids = model.encode(smol, "Hello")
    cases = [
        (lambda: model.generate(smol, ids, 1.5), "n_new must be a whole number >= 0; got 1.5"),
        (lambda: kv_cache.generate_with_cache(smol, ids, True), "n_new must be a whole number >= 0; got True"),
        (lambda: model.block_steps(smol, ids, 1.0), "layer_index must be a whole number >= 0; got 1.0"),
        (lambda: model.generate(smol, [3.7, 5.0], 1), "ids must be whole numbers (token ids); got dtype float64"),
        (lambda: kv_cache.generate_with_cache(smol, [3.7], 1),
         "ids must be whole numbers (token ids); got dtype float64"),
        (lambda: model.forward(smol, []), "ids must be a non-empty 1-D sequence of token ids; got shape (0,)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as error:
            call()
        assert str(error.value) == message
    assert model.decode(smol, []) == ""          # an empty sequence of ids is still ids


NON_BOOLEAN_MASKS = {  # each was cast to bool before: an additive mask came out inverted, 0 (visible) -> hidden
    "additive": masking.additive_mask(masking.causal_mask(3)),
    "float 0/1": masking.causal_mask(3).astype(float),
    "int 0/1": masking.causal_mask(3).astype(int),
}


@pytest.mark.parametrize("kind", NON_BOOLEAN_MASKS)
def test_attention_refuses_a_mask_that_is_not_boolean_as_the_model_does(kind):
    mask = NON_BOOLEAN_MASKS[kind]
    message = f"mask must be boolean (True where a query may attend a key); got dtype {mask.dtype}"
    Q = np.arange(12.0).reshape(3, 4) / 10
    with pytest.raises(ValueError) as error:
        attention.attention(Q, Q, Q, mask=mask)
    assert str(error.value) == message
    with pytest.raises(ValueError) as error:
        model.forward(model.load(), [1, 2, 3], mask=mask)
    assert str(error.value) == message
