"""``check_variable_batch``: does a layer work when the batch size is unknown while tracing?

Backends: TensorFlow only (on JAX use ``jax.export`` shapes; on PyTorch use ``torch.export``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from companion._backend import require_tensorflow
from companion._checks import (
    check_callable,
)
from companion._text import error_text
from companion.diagnostics._inputs import as_arrays, call_on, describe_input, to_numpy

#: How JAX and PyTorch users check a layer on a batch size left open while tracing.
VARIABLE_BATCH_INSTEAD = {
    "jax": "jax.export.symbolic_shape('b') in a jax.ShapeDtypeStruct, traced with jax.eval_shape",
    "torch": "torch.export.export(model, args, dynamic_shapes=...) with torch.export.Dim('b')",
}


def check_variable_batch(layer: Any, sample_input: Any) -> list[str]:
    """Check that ``layer`` works when the batch size is unknown while tracing.

    Keras traces layers with the batch dimension ``None`` (``keras.Input``, ``fit``,
    ``model.export``). A layer that uses ``x.shape[0]`` as a number works eagerly and breaks
    there. This traces ``layer`` under ``tf.function`` with every input's first dimension set
    to ``None``, then runs the traced graph on the whole sample and on its first row, and
    compares both with the eager call.

    Args:
        layer: A Keras layer or model (or any callable taking one, possibly nested, input).
        sample_input: An input with a batch of at least 2 (an array, or a list/dict of arrays).

    Returns:
        Problems, one sentence each; an empty list when the layer passes.

    Raises:
        TypeError: If ``layer`` is not callable, or ``sample_input`` holds something other than
            arrays of numbers.
        ValueError: If an input of ``sample_input`` has no batch dimension or a batch below 2,
            or the layer cannot be called on it (eagerly: nothing to compare the trace with).
        companion.backends.TensorFlowRequired: Under another backend (the trace is
            ``tf.function``'s).

    Example:
        >>> import keras
        >>> import numpy as np
        >>> check_variable_batch(keras.layers.Dense(2), np.ones((3, 4), "float32"))
        []

    Taught in chapter 11, "Shapes: what is known while tracing".
    """
    require_tensorflow("companion.diagnostics.check_variable_batch", VARIABLE_BATCH_INSTEAD)
    import tensorflow as tf

    check_callable(layer, "layer", "a callable layer or model")
    sample_input = as_arrays(sample_input, "sample_input")
    for leaf in tf.nest.flatten(sample_input):
        if leaf.ndim < 1 or leaf.shape[0] < 2:
            raise ValueError(
                "sample_input: expected arrays with a batch of at least 2, "
                f"got {describe_input(leaf)}"
            )
    expected = to_numpy(call_on(layer, sample_input, "sample_input"))
    specs = tf.nest.map_structure(
        lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), sample_input
    )
    traced = tf.function(lambda inputs: layer(inputs), input_signature=[specs])
    try:
        concrete = traced.get_concrete_function()
    except Exception as error:  # whatever the layer raises while tracing is the finding
        return [f"tracing with batch size None failed: {error_text(error)}"]
    problems = []
    for rows in (None, 1):
        part = tf.nest.map_structure(lambda a: a[:rows], sample_input)
        try:
            got = to_numpy(concrete(part))
        except Exception as error:  # a graph that runs for one batch size only
            problems.append(
                f"the traced graph failed on a batch of {len(tf.nest.flatten(part)[0])}: "
                f"{error_text(error)}"
            )
            continue
        want = [a[:rows] for a in expected]
        if any(g.shape != w.shape or not np.allclose(g, w, atol=1e-5) for g, w in zip(got, want)):
            problems.append(
                f"the traced graph's output on a batch of {len(tf.nest.flatten(part)[0])} "
                f"differs from the eager call's"
            )
    return problems
