"""Global-norm clipping of the gradients summed over the replicas, for every training step that
clips: chapter 7's loop (``companion.training``), chapter 8's ``GuardedModel`` and chapter 9's
``ClipGlobalNorm`` transform.

On TensorFlow the norm is that of the gradients summed over the ``tf.distribute`` replicas, and a
sparse ``tf.IndexedSlices`` gradient stays sparse. On JAX and PyTorch one program runs (a
``keras.distribution`` shards it, nothing is replicated), so the norm is computed in
``keras.ops`` from the gradients as they are, with the same rule and dtypes.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from companion._checks import check_clip_norm, check_sequence, float_tensor


def _is_indexed_slices(value: Any) -> bool:
    """Whether ``value`` is a sparse ``tf.IndexedSlices`` (only TensorFlow makes them)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return isinstance(value, tf.IndexedSlices)


def _gradient(value: Any, name: str) -> Any:
    """A gradient as the backend gives it: None, ``tf.IndexedSlices`` (kept sparse) or a tensor."""
    if value is None or _is_indexed_slices(value):
        return value
    return float_tensor(value, name)


def _clip_tf(gradients: list[Any], present: list[Any], clip_norm: float, loss_scale: Any) -> list:
    """TensorFlow: the norm of the gradients summed over the replicas, IndexedSlices kept."""
    import tensorflow as tf

    summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, present)
    # float64 gradients (a float64 model) in float64, the others in float32
    dtype = tf.float64 if any(g.dtype == tf.float64 for g in summed) else tf.float32
    norm = tf.linalg.global_norm([tf.cast(g, dtype) for g in summed])
    relative = norm / tf.cast(loss_scale, dtype) / clip_norm
    clipped, _ = tf.clip_by_global_norm(gradients, 1.0, use_norm=relative)
    return clipped


def _clip_ops(gradients: list[Any], present: list[Any], clip_norm: float, loss_scale: Any) -> list:
    """JAX and PyTorch (one replica): ``tf.clip_by_global_norm``'s rule in ``keras.ops``."""
    wide = any(ops.dtype(g) == "float64" for g in present)
    dtype = "float64" if wide else "float32"
    squares = [ops.sum(ops.square(ops.cast(g, dtype))) for g in present]
    norm = ops.sqrt(sum(squares[1:], squares[0]))
    relative = norm / ops.cast(loss_scale, dtype) / clip_norm
    # min(1, 1 / relative), and NaN (through relative - relative) when the norm is not finite;
    # a where, as ops.minimum on PyTorch computes float64 arguments in float32
    scale = ops.where(relative > 1.0, 1.0 / relative, ops.ones((), dtype)) + (relative - relative)
    return [None if g is None else g * ops.cast(scale, ops.dtype(g)) for g in gradients]


_CLIPPERS = {"tensorflow": _clip_tf, "jax": _clip_ops, "torch": _clip_ops}


def clip_by_global_norm(
    gradients: Sequence[Any], clip_norm: float, loss_scale: Any = 1.0
) -> list[Any]:
    """Scale every replica's gradients by ``min(1, clip_norm / norm)`` of the *summed* gradients.

    For a training step that runs on each replica (``strategy.run``, Keras's ``train_step``):
    the optimizer sums the replicas' gradients, and clipping each replica's part by its own norm
    (as ``global_clipnorm`` does) would bound the wrong vector. With one replica the all-reduce
    is the identity. The gradients are those of the loss times ``loss_scale`` (under a
    ``LossScaleOptimizer``, ``optimizer.scale_loss(1.0)``). The norm is divided by the scale and
    by ``clip_norm``, and clipped to 1: ``tf.clip_by_global_norm`` with ``clip_norm`` itself
    computes ``1 / clip_norm``, which float32 flushes to 0 above about 8.5e37 (every gradient
    zeroed), and a limit multiplied by the scale overflows. Non-finite gradients come out NaN.
    The norm is computed in float64 when a gradient is float64 (a float64 model), in float32
    otherwise (float16 gradients too), and each gradient keeps its dtype. On JAX and PyTorch
    there is one replica: the same rule, computed in ``keras.ops``.

    Args:
        gradients: A list of gradient tensors, None for a variable without one.
        clip_norm: The largest global norm, as for :func:`fit`.
        loss_scale: The factor the loss was multiplied by before taking gradients.

    Returns:
        The gradients, scaled (None where there was none).

    Raises:
        TypeError: If ``gradients`` is not a list or tuple, or ``clip_norm`` not a number.
        ValueError: If ``gradients`` is empty or ``clip_norm`` is out of range.

    Example:
        >>> clipped = clip_by_global_norm([ops.array([3.0, 4.0]), None], clip_norm=1.0)
        >>> [round(float(v), 3) for v in clipped[0]], clipped[1]
        ([0.6, 0.8], None)

    Taught in chapter 7, "What a custom loop lets you change".
    """
    gradients = check_sequence(
        gradients,
        "gradients",
        "a list of gradient tensors",
        item=_gradient,
    )
    clip_norm = check_clip_norm(clip_norm)
    if clip_norm is None:
        raise TypeError("clip_norm: expected a finite number > 0, got NoneType None")
    present = [g for g in gradients if g is not None]
    if not present:
        return list(gradients)
    return _CLIPPERS[keras.backend.backend()](list(gradients), present, clip_norm, loss_scale)
