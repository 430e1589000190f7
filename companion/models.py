"""One two-input classifier built three ways: Sequential branches, a Functional model, a subclass.

The task is the article's multimodal classifier on :func:`companion.data.make_shapes`: a small
CNN reads the image, a small MLP reads the metadata vector, their features are concatenated,
a residual block fuses them (its shortcut is projected when the widths differ) and a softmax
layer gives class probabilities. Chapter 6 builds it with each API.

- :func:`image_branch` and :func:`meta_branch` are ``keras.Sequential`` stacks: one input,
  one output, layer after layer -- all that Sequential can express.
- :func:`functional_multimodal` wires the two branches, the concatenation, the fusion block
  and the head into a Functional ``keras.Model`` with inputs named ``"image"`` and ``"meta"``.
- :class:`MultiModalModel` owns the same layers and wires them in Python, in ``call``; it has a
  real ``build``, a ``get_config`` and is registered, so ``.keras`` files of it load anywhere
  the companion is imported.

Both models output **probabilities** (softmax), so train them with
``keras.losses.SparseCategoricalCrossentropy()`` (``from_logits=False``, the default). Built
with the same arguments they have the same layers, the same parameter count and, after
:func:`copy_weights`, the same outputs.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from companion._checks import check_int, check_sequence, check_str, describe
from companion.layers import MAX_UNITS, ResidualBlock

__all__ = [
    "INPUT_NAMES",
    "MultiModalModel",
    "copy_weights",
    "functional_multimodal",
    "image_branch",
    "meta_branch",
]

#: The names of the two inputs, in order (the keys of a dict input and of ``model.input``).
INPUT_NAMES = ("image", "meta")
#: Smallest image side the CNN accepts: conv 3x3, pool 2, conv 3x3 must leave >= 1 pixel.
MIN_IMAGE_SIDE = 8
#: Largest image side: 65536 pixels (the CNN's weights do not depend on it, its activations do).
MAX_IMAGE_SIDE = 2**16


def _check_width(value: Any, name: str, minimum: int = 1) -> int:
    """A layer width (or class count) in ``[minimum, MAX_UNITS]``.

    Checked before any weight is made.
    """
    return check_int(value, name, minimum=minimum, maximum=MAX_UNITS)


def _check_widths(values: Any, name: str, length: int) -> tuple[int, ...]:
    """``values`` as a tuple of ``length`` widths, or a TypeError/ValueError naming ``name``."""
    what = f"a sequence of {length} positive ints"
    widths = check_sequence(values, name, what, item=_check_width)
    if len(widths) != length:
        raise ValueError(f"{name}: expected {what}, got {describe(values)}")
    return widths


def _check_image_shape(image_shape: Any, name: str = "image_shape") -> tuple[int, int, int]:
    """``(height, width, channels)`` of one image, without the batch axis."""
    what = f"(height, width, channels): 3 ints, sides >= {MIN_IMAGE_SIDE}, channels >= 1"
    shape = check_sequence(image_shape, name, what)
    if len(shape) != 3:
        raise ValueError(
            f"{name}: expected {what} (one image, no batch axis), got {describe(image_shape)}"
        )
    height, width, channels = shape
    return (
        check_int(height, f"{name}[0]", minimum=MIN_IMAGE_SIDE, maximum=MAX_IMAGE_SIDE),
        check_int(width, f"{name}[1]", minimum=MIN_IMAGE_SIDE, maximum=MAX_IMAGE_SIDE),
        _check_width(channels, f"{name}[2]"),
    )


def image_branch(
    image_shape: Sequence[int] | None = (32, 32, 3),
    filters: Sequence[int] = (16, 32),
    units: int = 32,
    name: str = "image_branch",
) -> keras.Sequential:
    """The image branch as a ``keras.Sequential``: conv, pool, conv, global pool, dense.

    ``Conv2D(filters[0], 3, relu) -> MaxPooling2D(2) -> Conv2D(filters[1], 3, relu) ->
    GlobalAveragePooling2D -> Dense(units, relu)``, the article's CNN backbone at a smaller width.

    Args:
        image_shape: ``(height, width, channels)`` of one image: the stack starts with a
            ``keras.Input`` of that shape and is built at once. ``None`` leaves it unbuilt, to be
            built by its first call (what :class:`MultiModalModel` does).
        filters: Number of filters of the two convolutions.
        units: Width of the feature vector it outputs.
        name: Name of the Sequential model.

    Returns:
        The ``keras.Sequential`` model, mapping ``(batch, *image_shape)`` to ``(batch, units)``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``image_shape`` is not 3 ints (height and width in ``[8, 65536]``), a width
            is not in ``[1, MAX_UNITS]`` or ``name`` is empty.

    Example:
        >>> branch = image_branch((32, 32, 3), filters=(8, 16), units=12)
        >>> branch.output_shape, branch.count_params()
        ((None, 12), 1596)

    Taught in chapter 6, "Sequential: a stack with one input and one output".
    """
    first, second = _check_widths(filters, "filters", 2)
    units = _check_width(units, "units")
    name = check_str(name, "name")
    stack = (
        [] if image_shape is None else [keras.Input(_check_image_shape(image_shape), name="image")]
    )
    return keras.Sequential(
        stack
        + [
            keras.layers.Conv2D(first, 3, activation="relu", name="conv_1"),
            keras.layers.MaxPooling2D(2, name="pool"),
            keras.layers.Conv2D(second, 3, activation="relu", name="conv_2"),
            keras.layers.GlobalAveragePooling2D(name="global_pool"),
            keras.layers.Dense(units, activation="relu", name="image_features"),
        ],
        name=name,
    )


def meta_branch(
    meta_dim: int | None = 10, units: Sequence[int] = (16, 16), name: str = "meta_branch"
) -> keras.Sequential:
    """The metadata branch as a ``keras.Sequential``: two ReLU ``Dense`` layers.

    Args:
        meta_dim: Length of the metadata vector (the stack starts with a ``keras.Input`` and is
            built at once), or ``None`` to leave it unbuilt until its first call.
        units: Widths of the two layers; the second is the width of the features it outputs.
        name: Name of the Sequential model.

    Returns:
        The ``keras.Sequential`` model, mapping ``(batch, meta_dim)`` to ``(batch, units[1])``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``meta_dim`` or a width is not in ``[1, MAX_UNITS]`` or ``name`` is empty.

    Example:
        >>> meta_branch(10, units=(16, 8)).count_params()
        312

    Taught in chapter 6, "Functional: the model is a graph of layers".
    """
    hidden, features = _check_widths(units, "units", 2)
    name = check_str(name, "name")
    stack = (
        []
        if meta_dim is None
        else [keras.Input((_check_width(meta_dim, "meta_dim"),), name="meta")]
    )
    return keras.Sequential(
        stack
        + [
            keras.layers.Dense(hidden, activation="relu", name="meta_hidden"),
            keras.layers.Dense(features, activation="relu", name="meta_features"),
        ],
        name=name,
    )


def _head(num_classes: int) -> keras.layers.Dense:
    return keras.layers.Dense(num_classes, activation="softmax", name="classifier")


def _fusion(fused_units: int) -> ResidualBlock:
    return ResidualBlock(fused_units, name="fusion")


def functional_multimodal(
    image_shape: Sequence[int] = (32, 32, 3),
    meta_dim: int = 10,
    num_classes: int = 6,
    *,
    filters: Sequence[int] = (16, 32),
    image_units: int = 32,
    meta_units: Sequence[int] = (16, 16),
    fused_units: int = 64,
    name: str = "functional_multimodal",
) -> keras.Model:
    """The two-input classifier as a Functional ``keras.Model`` (uncompiled).

    ``image -> image_branch``, ``meta -> meta_branch``, concatenated (``image_units +
    meta_units[1]`` wide), fused by a :class:`~companion.layers.ResidualBlock` of width
    ``fused_units`` (``Dense -> relu -> Dense`` plus a shortcut, projected when the concatenated
    width differs from ``fused_units``), then ``Dense(num_classes, softmax)``.

    The model outputs class **probabilities**: compile it with
    ``keras.losses.SparseCategoricalCrossentropy()`` (not ``from_logits=True``). It accepts
    ``[images, meta]`` or ``{"image": images, "meta": meta}``.

    Args:
        image_shape: ``(height, width, channels)`` of one image (no batch axis).
        meta_dim: Length of the metadata vector.
        num_classes: Number of classes, >= 2 (``companion.data.NUM_CLASSES`` is 6).
        filters: Filters of the image branch's two convolutions.
        image_units: Width of the image features.
        meta_units: Widths of the metadata branch's two layers.
        fused_units: Width of the fusion block's output.
        name: Name of the model.

    Returns:
        An uncompiled, built ``keras.Model`` with inputs named ``"image"`` and ``"meta"`` and
        output shape ``(None, num_classes)``.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``image_shape`` is not ``(height, width, channels)`` with sides in
            ``[8, 65536]``, ``num_classes`` is not in ``[2, MAX_UNITS]``, a width (``meta_dim``
            too) is not in ``[1, MAX_UNITS]`` or ``name`` is empty. Each message names the
            argument passed here (``image_units``, not the branch's ``units``).

    Example:
        >>> model = functional_multimodal((32, 32, 3), meta_dim=10, num_classes=6)
        >>> [t.name for t in model.inputs], model.output_shape
        (['image', 'meta'], (None, 6))

    Taught in chapter 6, "Functional: the model is a graph of layers".
    """
    image_shape = _check_image_shape(image_shape)
    meta_dim = _check_width(meta_dim, "meta_dim")
    num_classes = _check_width(num_classes, "num_classes", minimum=2)
    filters = _check_widths(filters, "filters", 2)
    # named here: image_branch calls it units
    image_units = _check_width(image_units, "image_units")
    meta_units = _check_widths(meta_units, "meta_units", 2)
    fused_units = _check_width(fused_units, "fused_units")
    name = check_str(name, "name")
    images = keras.Input(image_shape, name="image")
    meta = keras.Input((meta_dim,), name="meta")
    features = keras.layers.Concatenate(name="concatenate")(
        [image_branch(None, filters, image_units)(images), meta_branch(None, meta_units)(meta)]
    )
    outputs = _head(num_classes)(_fusion(fused_units)(features))
    return keras.Model([images, meta], outputs, name=name)


def _split_pair(structure: Any, name: str) -> tuple[Any, Any]:
    """``(image, meta)`` from ``{"image": ..., "meta": ...}`` or a 2-item list/tuple."""
    what = "a pair (image, meta) or a dict with keys 'image' and 'meta'"
    if isinstance(structure, Mapping):
        if set(structure) != set(INPUT_NAMES):
            raise ValueError(f"{name}: expected {what}, got a dict with keys {sorted(structure)}")
        return structure["image"], structure["meta"]
    if isinstance(structure, (list, tuple)) and len(structure) == 2:
        return structure[0], structure[1]
    raise ValueError(f"{name}: expected {what}, got {_shape_text(structure)}")


def _shape_text(value: Any) -> str:
    """How a message shows a value that should have been a tensor or a structure of them."""
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if getattr(value, "shape", None) is not None:
        return f"one {type(value).__name__} of shape {tuple(value.shape)}"
    return describe(value)


def _check_batch_shape(shape: Any, name: str, rank: int) -> tuple[int | None, ...]:
    """``shape`` as a tuple of ``rank`` dimensions (batch first).

    Else a ValueError naming ``name``.
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or len(shape) != rank:
        raise ValueError(
            f"{name}: expected a shape of rank {rank} (batch axis first), got {describe(shape)}"
        )
    return tuple(shape)


def _static_shape(value: Any) -> tuple[int | None, ...] | None:
    """The shape Python can see (``None`` for a tensor of unknown rank); ``()`` for a non-array."""
    shape = getattr(value, "shape", None)
    if shape is None:
        try:
            return np.shape(value)
        except ValueError:  # a ragged nested list
            return ()
    return None if getattr(shape, "rank", 0) is None else tuple(shape)


def _check_inputs(inputs: Any) -> None:
    """What ``MultiModalModel`` is called with.

    An (images, meta) pair or a dict, of the right ranks.
    """
    images, meta = _split_pair(inputs, "inputs")
    image_shape, meta_shape = _static_shape(images), _static_shape(meta)
    if image_shape is not None and (
        len(image_shape) != 4
        or any(side is not None and side < MIN_IMAGE_SIDE for side in image_shape[1:3])
    ):
        what = f"images (batch, height, width, channels) with height and width >= {MIN_IMAGE_SIDE}"
        raise ValueError(f"inputs['image']: expected {what}, got {_shape_text(images)}")
    if meta_shape is not None and len(meta_shape) != 2:
        raise ValueError(
            f"inputs['meta']: expected metadata (batch, meta_dim), got {_shape_text(meta)}"
        )


@keras.saving.register_keras_serializable(package="companion")
class MultiModalModel(keras.Model):
    """The two-input classifier as a subclassed ``keras.Model``: the layers of
    :func:`functional_multimodal`, wired in Python in ``call``.

    ``__init__`` creates the layers (input shapes unknown yet); ``build`` builds each one with
    its exact input shape, so the weights exist right after ``model.build(...)`` and
    ``summary()``, ``count_params()`` and ``set_weights`` work before any data has flowed.
    ``call`` accepts ``{"image": images, "meta": meta}`` or ``[images, meta]`` and returns class
    **probabilities** (softmax). ``get_config`` holds the constructor arguments, and the class is
    registered as ``"companion>MultiModalModel"``, so a ``.keras`` file loads in any process that
    imported ``companion.models``.

    Args:
        num_classes: Number of classes, >= 2.
        filters: Filters of the image branch's two convolutions.
        image_units: Width of the image features.
        meta_units: Widths of the metadata branch's two layers.
        fused_units: Width of the fusion block's output.
        **kwargs: Base-model arguments (``name``, ``dtype``, ``trainable``). A ``dtype`` policy
            such as ``"mixed_float16"`` is every layer's policy.

    Raises:
        TypeError: If an argument has the wrong type.
        ValueError: If ``num_classes`` is not in ``[2, MAX_UNITS]`` or a width not in
            ``[1, MAX_UNITS]``; when called (``inputs``, checked before Keras builds anything) or
            built (``input_shape``), if the inputs are not an (image, meta) pair or dict, the
            images are not ``(batch, height, width, channels)`` with sides >= 8, or the metadata
            is not rank 2.

    Example:
        >>> model = MultiModalModel(num_classes=6)
        >>> model.build({"image": (None, 32, 32, 3), "meta": (None, 10)})
        >>> functional = functional_multimodal((32, 32, 3), 10, 6)
        >>> model.count_params() == functional.count_params()
        True

    Taught in chapter 6, "Subclassing: the model is Python code".
    """

    def __init__(
        self,
        num_classes: int = 6,
        *,
        filters: Sequence[int] = (16, 32),
        image_units: int = 32,
        meta_units: Sequence[int] = (16, 16),
        fused_units: int = 64,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_classes = _check_width(num_classes, "num_classes", minimum=2)
        self.filters = _check_widths(filters, "filters", 2)
        self.image_units = _check_width(image_units, "image_units")
        self.meta_units = _check_widths(meta_units, "meta_units", 2)
        self.fused_units = _check_width(fused_units, "fused_units")
        # The same layers, with the same names, in the same order as functional_multimodal.
        self.image_branch = image_branch(None, self.filters, self.image_units)
        self.meta_branch = meta_branch(None, self.meta_units)
        self.concatenate = keras.layers.Concatenate(name="concatenate")
        self.fusion = _fusion(self.fused_units)
        self.classifier = _head(self.num_classes)
        # A dtype given to the model (``dtype="mixed_float16"``) is every layer's policy; Keras
        # leaves a model's sublayers at the global policy otherwise.
        for layer in self._flatten_layers(include_self=False):
            layer.dtype_policy = self.dtype_policy

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        _check_inputs(inputs)  # before Keras: its errors would come from build or a sublayer
        return super().__call__(inputs, *args, **kwargs)

    def build(self, input_shape: Any) -> None:
        image_shape, meta_shape = _split_pair(input_shape, "input_shape")
        image_shape = _check_batch_shape(image_shape, "input_shape['image']", 4)
        for axis in (1, 2):  # None (any size) is fine: the CNN ends in a global pooling
            if image_shape[axis] is not None:
                check_int(
                    image_shape[axis], f"input_shape['image'][{axis}]", minimum=MIN_IMAGE_SIDE
                )
        check_int(image_shape[3], "input_shape['image'][3]", minimum=1)
        meta_shape = _check_batch_shape(meta_shape, "input_shape['meta']", 2)
        batch = image_shape[0]
        self.image_branch.build(image_shape)
        self.meta_branch.build(meta_shape)
        feature_shapes = [(batch, self.image_units), (batch, self.meta_units[1])]
        self.concatenate.build(feature_shapes)
        self.fusion.build((batch, self.image_units + self.meta_units[1]))
        self.classifier.build((batch, self.fused_units))

    def call(self, inputs: Any) -> Any:
        images, meta = _split_pair(inputs, "inputs")
        features = self.concatenate([self.image_branch(images), self.meta_branch(meta)])
        return self.classifier(self.fusion(features))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            filters=list(self.filters),
            image_units=self.image_units,
            meta_units=list(self.meta_units),
            fused_units=self.fused_units,
        )
        return config


def copy_weights(source: keras.Model, target: keras.Model) -> list[str]:
    """Copy every weight of ``source`` into the layer of the same name in ``target``.

    Works across the APIs: from :func:`functional_multimodal` to :class:`MultiModalModel` and
    back, since both name their layers alike. Both models must be built.

    Args:
        source: The model to read weights from.
        target: The model to write them into.

    Returns:
        The names of the layers whose weights were copied, in ``source``'s order.

    Raises:
        TypeError: If either argument is not a ``keras.Model``.
        ValueError: If either model is not built, if a layer of ``source`` that has weights is
            missing from ``target`` (the error names ``source``), or if ``target``'s layer of
            that name holds weights of other shapes (it names ``target``).

    Example:
        >>> functional = functional_multimodal((16, 16, 3), meta_dim=4, num_classes=3)
        >>> subclass = MultiModalModel(3)
        >>> subclass.build([(None, 16, 16, 3), (None, 4)])
        >>> copy_weights(functional, subclass)
        ['image_branch', 'meta_branch', 'fusion', 'classifier']

    Taught in chapter 6, "Functional: the model is a graph of layers".
    """
    for argument, model in (("source", source), ("target", target)):
        if not isinstance(model, keras.Model):
            raise TypeError(f"{argument}: expected a keras.Model, got {describe(model)}")
        if not model.built:
            raise ValueError(
                f"{argument}: expected a built keras.Model (build it or call it on data "
                f"first), got {describe(model)}"
            )
    target_layers = {layer.name: layer for layer in target.layers}
    copied = []
    for layer in source.layers:
        if not layer.weights:
            continue
        twin = target_layers.get(layer.name)
        shapes = [tuple(w.shape) for w in layer.weights]
        if twin is None:  # the source has a layer too many
            raise ValueError(
                f"source: expected only layers that target has too, got a layer {layer.name!r} "
                f"(weights of shapes {shapes}) that target lacks"
            )
        if [tuple(w.shape) for w in twin.weights] != shapes:
            raise ValueError(
                f"target: expected a layer {layer.name!r} with weights of shapes {shapes}, got "
                f"{[tuple(w.shape) for w in twin.weights]}"
            )
        twin.set_weights(layer.get_weights())
        copied.append(layer.name)
    return copied
