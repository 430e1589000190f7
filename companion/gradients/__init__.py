"""Custom gradients (custom-op path 4): ``tf.custom_gradient`` ops and a gradient checker.

Chapter 5 builds each of these inline first:

- ``clipped_identity``: clips in the forward pass, lets a small ``leak`` of the gradient
  through where it clipped (instead of ``tf.clip_by_value``'s zero);
- ``ClippedIdentity``: the same op as a serializable Keras layer;
- ``safe_norm`` and ``log1p_exp``: ops whose custom gradient fixes a numerical problem of
  plain autodiff (NaN at the zero vector; NaN for large inputs, wrong value at 0);
- ``gradient_error``: autodiff against central finite differences, to check any of them;
- ``value_and_gradient``: a function's values and pointwise derivatives, for tables and plots;
- ``gradient_penalty``: the WGAN-GP term, a gradient taken inside a tape (nested tapes), so
  that training can differentiate the gradient itself.

The pattern every op here follows: validate and convert the non-tensor parameters
outside, then decorate an inner function that takes only the tensor input(s), closes over
the parameters and returns exactly one gradient per tensor input. The ops are written with
``keras.ops.custom_gradient`` (on TensorFlow: ``tf.custom_gradient``), whose ``grad`` is
``def grad(*args, upstream=None)``: TensorFlow and JAX pass the upstream gradient as the only
argument, PyTorch passes the saved inputs and ``upstream=`` by keyword.

Backends: TensorFlow, JAX, PyTorch, except ``value_and_gradient``, ``gradient_error`` and
``gradient_penalty`` (TensorFlow only).

Those three take their gradients with ``tf.GradientTape`` and ``tf.test.compute_gradient``; on JAX
use ``jax.value_and_grad``, on PyTorch ``torch.autograd.grad``.
"""

from companion.gradients._ops import CHECKABLE_DTYPES as CHECKABLE_DTYPES
from companion.gradients._ops import (
    ClippedIdentity,
    clipped_identity,
    default_delta,
    log1p_exp,
    safe_norm,
)
from companion.gradients._tape import gradient_error, gradient_penalty, value_and_gradient

__all__ = [
    "CHECKABLE_DTYPES",
    "ClippedIdentity",
    "clipped_identity",
    "default_delta",
    "gradient_error",
    "gradient_penalty",
    "log1p_exp",
    "safe_norm",
    "value_and_gradient",
]
