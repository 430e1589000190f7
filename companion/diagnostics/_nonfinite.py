"""``first_nonfinite``: the first layer whose output holds NaN or Inf.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import keras

from companion._checks import (
    check_bool,
)
from companion._finite import has_nonfinite
from companion.diagnostics._inputs import call_on, check_layer, finite_arrays


def _layer_paths(model: keras.layers.Layer) -> dict[int, tuple[keras.layers.Layer, str]]:
    """id(layer) -> (layer, "outer/inner" path) for every layer nested in ``model``."""
    paths: dict[int, tuple[keras.layers.Layer, str]] = {}

    def visit(layer: keras.layers.Layer, prefix: str) -> None:
        for child in layer._flatten_layers(include_self=False, recursive=False):
            if id(child) not in paths:
                paths[id(child)] = (child, prefix + child.name)
                visit(child, prefix + child.name + "/")

    visit(model, "")
    return paths


@contextlib.contextmanager
def _watching_calls(
    layers: list[tuple[keras.layers.Layer, str]],
    entering: Callable[[str, tuple], None],
    leaving: Callable[[str, Any], None],
) -> Iterator[None]:
    """Within the block, each layer's ``call`` reports ``(path, args)`` to ``entering`` when it
    starts and ``(path, output)`` to ``leaving`` when it returns."""
    wrapped = []
    try:
        for layer, path in layers:
            if "call" in vars(layer):  # an instance-level call of the user's: leave it alone
                continue
            original = layer.call

            @functools.wraps(original)
            def call(
                *args: Any, _original: Callable = original, _path: str = path, **kwargs: Any
            ) -> Any:
                entering(_path, args)
                output = _original(*args, **kwargs)
                leaving(_path, output)
                return output

            layer.call = call
            wrapped.append(layer)
        yield
    finally:
        for layer in wrapped:
            del layer.call


def first_nonfinite(
    model: keras.layers.Layer, inputs: Any, *, training: bool = False
) -> str | None:
    """The first layer, in execution order, whose output contains NaN or Inf, or ``None``.

    The model is called once, eagerly, with every nested layer's ``call`` wrapped to inspect
    its output; a layer's output is complete when its sublayers have run, so inside a
    composite layer the innermost culprit is named (``"block/hidden"``). Sequential,
    functional and subclassed models all work, since each calls its layers. When a layer
    *receives* NaN or Inf that no layer produced (a raw op in a subclassed model's ``call``
    made it), the result is ``"<model>.call, before '<layer>'"``; when only the model's final
    output is non-finite, the model's own name.

    Args:
        model: A Keras model or layer.
        inputs: What the model is called with (finite values).
        training: The ``training`` flag of the call (``True`` enables dropout and the like).

    Returns:
        The layer's path (names joined by ``/``), or ``None`` if every output is finite.

    Raises:
        TypeError: If ``model`` is not a Keras layer or model, ``training`` not a bool, or
            ``inputs`` holds something other than arrays of numbers.
        ValueError: If ``inputs`` already contain NaN or Inf (no layer is to blame), or the
            model cannot be called on them.

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(2, name="dense")
        >>> log = keras.layers.Lambda(keras.ops.log, name="log")
        >>> model = keras.Sequential([keras.Input((2,)), dense, log])
        >>> dense.set_weights([-np.eye(2, dtype="float32"), np.zeros(2, "float32")])
        >>> first_nonfinite(model, np.ones((1, 2), "float32"))
        'log'

    Taught in chapter 11, "The first layer that produced it".
    """
    model = check_layer(model, "model")
    training = check_bool(training, "training")
    finite_arrays(inputs, "inputs")
    found: list[str] = []

    def entering(path: str, args: tuple) -> None:
        if not found and has_nonfinite(args):
            found.append(f"{model.name}.call, before {path!r}")

    def leaving(path: str, output: Any) -> None:
        if not found and has_nonfinite(output):
            found.append(path)

    with _watching_calls(list(_layer_paths(model).values()), entering, leaving):
        output = call_on(model, inputs, "inputs", training=training)
    if found:
        return found[0]
    return model.name if has_nonfinite(output) else None
