"""Magnitude pruning: a sparsity schedule, a sparsity measure, and the callback that prunes.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from companion._checks import (
    check_fraction,
    check_int,
    check_real,
    check_sequence,
    describe,
    dtype_max,
)
from companion.optimizers._shared import MAX_STEP, check_words, selects, variable_path


def _check_steps(begin_step: Any, end_step: Any) -> tuple[int, int]:
    """Each step in its own range, then ``begin_step < end_step``; a pair out of order is reported
    as ``begin_step``'s (``MagnitudePruning(0.5, begin_step=5000)`` names the argument given)."""
    begin = check_int(begin_step, "begin_step", minimum=0, maximum=MAX_STEP - 1)
    end = check_int(end_step, "end_step", minimum=1, maximum=MAX_STEP)
    if begin >= end:
        raise ValueError(
            f"begin_step: expected an int >= 0 and < end_step ({end}), got {describe(begin_step)}"
        )
    return begin, end


def polynomial_sparsity(
    step: Any,
    *,
    target_sparsity: float,
    begin_step: int,
    end_step: int,
    initial_sparsity: float = 0.0,
    power: float = 3.0,
) -> Any:
    """The sparsity schedule of Zhu & Gupta (2017): fast at first, levelling off at the target.

    ``s(t) = target + (initial - target) * (1 - (t - begin) / (end - begin)) ** power`` for
    ``begin <= t <= end``; ``initial`` before, ``target`` after.

    Args:
        step: The step ``t``: an int >= 0, or an integer tensor or variable (an optimizer's
            ``iterations``, inside ``tf.function`` too), which gives a float32 tensor.
        target_sparsity: The sparsity reached at ``end_step``, in [0, 1).
        begin_step: The step the schedule starts rising (>= 0).
        end_step: The step it reaches the target (> ``begin_step``).
        initial_sparsity: The sparsity up to ``begin_step``, in [0, 1).
        power: The exponent (> 0; 3 in the paper).

    Returns:
        The sparsity at ``step``: a float, or a float32 tensor for a tensor ``step``.

    Raises:
        TypeError: If an argument is not a number (an int for the steps).
        ValueError: If a number is NaN, infinite or out of its range (``begin_step`` not below
            ``end_step``).

    Example:
        >>> schedule = dict(target_sparsity=0.8, begin_step=0, end_step=10)
        >>> [round(polynomial_sparsity(t, **schedule), 3) for t in (0, 5, 10, 20)]
        [0.0, 0.7, 0.8, 0.8]

    Taught in chapter 9, "Pruning: masking the update is not pruning".
    """
    target = check_fraction(target_sparsity, "target_sparsity", below_one=True)
    initial = check_fraction(initial_sparsity, "initial_sparsity", below_one=True)
    begin, end = _check_steps(begin_step, end_step)
    span = end - begin
    power = check_real(power, "power", above=0, maximum=dtype_max("float32"))
    if ops.is_tensor(step):
        progress = ops.clip((ops.cast(step, "float32") - begin) / span, 0.0, 1.0)
    else:
        progress = min(
            max((check_int(step, "step", minimum=0, maximum=MAX_STEP) - begin) / span, 0.0), 1.0
        )
    return target + (initial - target) * (1.0 - progress) ** power


def _weights_array(value: Any, name: str) -> np.ndarray:
    """``value`` (an array, tensor or variable) as a NumPy array of numbers or bools."""
    what = "an array, tensor or variable of numbers"
    try:
        array = np.asarray(ops.convert_to_numpy(value) if ops.is_tensor(value) else value)
    except ValueError as error:  # a ragged nested list
        raise TypeError(f"{name}: expected {what}, got {describe(value)}") from error
    if array.dtype.kind not in "biuf":  # str, bytes, None, a dict
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return array


def sparsity(variables: Any) -> float:
    """The fraction of exact zeros in ``variables``.

    Args:
        variables: A layer or model (its kernels: the weights whose own name contains
            ``kernel``), one array, tensor or variable, or a list or tuple of them.

    Raises:
        TypeError: If ``variables`` is none of these (a str, a dict, ``None`` inside a list).
        ValueError: If it holds no weights at all (an empty list, a model without kernels), or a
            weight is NaN or infinite.

    Example:
        >>> sparsity([np.array([0.0, 1.0]), keras.Variable([[0.0, 2.0], [3.0, 0.0]])])
        0.5

    Taught in chapter 9, "Pruning: masking the update is not pruning".
    """
    what = "a layer, model, array or variable, or a list or tuple of them, with at least one weight"
    if isinstance(variables, keras.layers.Layer):
        arrays = [
            _weights_array(v, "variables") for v in variables.weights if selects(v, ("kernel",))
        ]
    elif isinstance(variables, np.ndarray) or ops.is_tensor(
        variables
    ):  # Keras and TF variables too
        arrays = [_weights_array(variables, "variables")]
    else:
        arrays = check_sequence(variables, "variables", what, item=_weights_array)
    size = sum(array.size for array in arrays)
    if size == 0:
        raise ValueError(f"variables: expected {what}, got {describe(variables)}")
    if not all(np.isfinite(array).all() for array in arrays):  # NaN weights hold no zeros to count
        raise ValueError(
            f"variables: expected weights that are all finite, got {describe(variables)}"
        )
    return float(sum(np.count_nonzero(array == 0) for array in arrays) / size)


class MagnitudePruning(keras.callbacks.Callback):
    """Progressive magnitude pruning under ``fit``: a schedule, a mask, weights multiplied by it.

    Every ``frequency`` training batches from ``begin_step`` to ``end_step`` the mask of each
    pruned variable is recomputed: the ``s(t)`` fraction (:func:`polynomial_sparsity`) of its
    entries with the smallest magnitudes are masked, exactly ``round(s * size)`` of them. After
    *every* batch the weights are multiplied by the mask, so pruned weights are exactly zero
    and stay zero although the optimizer's momentum would move them (masking the *update*
    instead, as the article does, freezes small weights at non-zero values). Since the schedule
    only rises and zeros have the smallest magnitude, a pruned weight is never revived.

    ``step`` counts the batches this callback has seen; call ``on_train_batch_end`` yourself
    (after ``set_model``) to prune in a custom loop.

    Args:
        target_sparsity: Final fraction of zeros per variable, in [0, 1).
        begin_step: First batch at which to prune (>= 0).
        end_step: Batch at which the target is reached (> begin_step).
        frequency: Batches between mask updates (>= 1).
        include: Which variables to prune: a word without ``/`` is part of a variable's own name
            (the default ``kernel`` selects ``kernel``, ``recurrent_kernel``, ... and never the
            bias of a layer named ``kernel_net``); a word with ``/`` is part of its path
            (``dense_1/kernel``).

    Raises:
        TypeError: If an argument has the wrong type (``include`` a str instead of a list).
        ValueError: If ``target_sparsity`` is outside [0, 1), ``begin_step`` is not below
            ``end_step`` or a word of ``include`` is empty; at the start of training, if no
            variable matches ``include``.

    Example:
        >>> keras.utils.set_random_seed(0)
        >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        >>> model.compile("adam", "mse")
        >>> x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
        >>> pruning = MagnitudePruning(0.75, begin_step=0, end_step=4, frequency=2)
        >>> _ = model.fit(x, x[:, :4], batch_size=8, verbose=0, callbacks=[pruning])
        >>> sparsity(model)
        0.75

    Taught in chapter 9, "Pruning: masking the update is not pruning".
    """

    def __init__(
        self,
        target_sparsity: float,
        *,
        begin_step: int = 0,
        end_step: int = 1000,
        frequency: int = 100,
        include: Sequence[str] = ("kernel",),
    ) -> None:
        super().__init__()
        self.target_sparsity = check_fraction(target_sparsity, "target_sparsity", below_one=True)
        self.begin_step, self.end_step = _check_steps(begin_step, end_step)
        self.frequency = check_int(frequency, "frequency", minimum=1)
        self.include = check_words(include, "include", min_length=1)
        self.step, self.masks, self._checked = 0, {}, False

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.pruned:
            raise ValueError(
                f"include: expected parts of the names or paths of the model's variables,"
                f" got {describe(self.include)}"
            )
        self._checked = True
        self._apply_masks()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._checked:
            self.on_train_begin()
        self.step += 1
        due = self.begin_step <= self.step <= self.end_step and (
            (self.step - self.begin_step) % self.frequency == 0 or self.step == self.end_step
        )
        if due:
            self._update_masks(
                polynomial_sparsity(
                    self.step,
                    target_sparsity=self.target_sparsity,
                    begin_step=self.begin_step,
                    end_step=self.end_step,
                )
            )
        self._apply_masks()

    @property
    def pruned(self) -> list[Any]:
        """The pruned variables, looked up through ``self.model`` at every use: on JAX, ``fit``
        detaches the values from the model's variables during an epoch and only the ``model``
        property puts them back (a variable kept from ``on_train_begin`` holds no value then).

        Taught in chapter 9, "Pruning: masking the update is not pruning".
        """
        return [v for v in self.model.trainable_weights if selects(v, self.include)]

    def _update_masks(self, level: float) -> None:
        for variable in self.pruned:
            magnitude = np.abs(ops.convert_to_numpy(variable)).ravel()
            mask = np.ones(magnitude.size, variable.dtype)
            mask[np.argsort(magnitude, kind="stable")[: round(level * magnitude.size)]] = 0
            self.masks[variable_path(variable)] = mask.reshape(variable.shape)

    def _apply_masks(self) -> None:
        for variable in self.pruned:
            mask = self.masks.get(variable_path(variable))
            if mask is not None:
                variable.assign(variable * ops.convert_to_tensor(mask, variable.dtype))
