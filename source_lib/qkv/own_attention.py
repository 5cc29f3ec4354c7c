"""SmolLM2's own attention as a callable for wrappers (issue 41): `qkv.model.own_attention(q, k, v, mask)`.

A wrapper such as lesson 06's ablate_heads(attention, heads) needs an attention function to wrap. Lesson 05's
grouped_query_attention would do, but on one query it is lesson 07's open exercise attention_step, so an edition that
ships it hands that exercise out. own_attention is bound to the model instead: qkv.model.attention_block records the
layer it is computing (`running`) before it calls the attention it was given, and own_attention answers only for
that layer's own q, k, v and mask (the very arrays, or arrays of exactly their values), with the model's own head
outputs [H_q, T, d_head] (qkv.model.layer_attention before W_o). Anywhere else it raises NotTheModelsAttention: it
computes no attention of its own, so no input of a student's own choosing gets one out of it. The same principle one
level down (qkv.own_weights): the model's own attention answers only SmolLM2's own query, key and value projections,
so a forward pass through a made-up layer does not turn own_attention into grouped_query_attention either.

Imports nothing of qkv.model (which imports this): the layer's computation comes in, bound, with `running`.
"""
import contextlib
import contextvars
from typing import Callable, NamedTuple

import numpy as np

from qkv.readable_errors import ThreeLineError


class _Layer(NamedTuple):
    heads: Callable    # () -> ([H_q, T, d_head], None): the model's own attention of this layer, before W_o
    arrays: tuple      # (q, k, v, mask) as the model computed them


_running = contextvars.ContextVar("qkv_model_layer", default=None)


class NotTheModelsAttention(ThreeLineError):
    """own_attention called outside qkv.model.forward, or on arrays that are not the model's (three lines)."""

    lines = ("qkv.model.own_attention answers only inside model.forward, for the q, k, v and mask of the layer the "
             "model is computing.",
             "Why: it is SmolLM2's own attention handed to wrappers such as ablate_heads, not an attention function "
             "for inputs of your own.",
             "What to do: give it (or your wrapper of it) to model.forward(..., attention=...); for other inputs use "
             "your own grouped_query_attention from lesson 05.")


@contextlib.contextmanager
def running(heads, q, k, v, mask):
    """While the model's attention_block calls an attention function: the layer's own computation (`heads`, taking
    nothing: qkv.model.layer_attention with the layer's inputs bound, heads=True) and the q, k, v and mask it hands
    that function."""
    token = _running.set(_Layer(heads, (q, k, v, mask)))
    try:
        yield
    finally:
        _running.reset(token)


def _same(given, recorded):
    # the very array, or one of the same shape and exactly the same values (a wrapper's np.asarray or copy)
    if given is recorded:
        return True
    if recorded is None or given is None:
        return False
    try:
        given = np.asarray(given)
    except (TypeError, ValueError):
        return False
    return given.shape == recorded.shape and bool(np.array_equal(given, recorded))


def require_models_own(q, k, v, mask):
    """The layer the model is computing now, when q, k, v and mask are its own; NotTheModelsAttention otherwise."""
    layer = _running.get()
    if layer is None or not all(_same(given, recorded) for given, recorded in zip((q, k, v, mask), layer.arrays)):
        raise NotTheModelsAttention()
    return layer


def own_attention(q, k, v, mask=None):
    """SmolLM2's own attention, for wrappers given to qkv.model.forward: [H_q, T, d_head], every head's output.

    Answers only inside model.forward (its attention_block), for the q, k, v and mask of the layer being computed;
    raises NotTheModelsAttention anywhere else."""
    return require_models_own(q, k, v, mask).heads()[0]
