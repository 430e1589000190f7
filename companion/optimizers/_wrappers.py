"""Optimizers that hold another optimizer and override ``apply``: a chain of gradient transforms
in front of it, and Lookahead.

On TensorFlow they cooperate with ``tf.distribute`` (gradients summed over the replicas, one
Lookahead sync across them); on JAX and PyTorch one program runs, and the same steps are written
in ``keras.ops`` (Lookahead's every-``k``-steps sync as an ``ops.where``, which JAX's traced step
needs).

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from companion._checks import (
    check_bool,
    check_fraction,
    check_instance,
    check_int,
    check_sequence,
    check_str,
)
from companion.optimizers._shared import MAX_STEP, register, replicas_in_sync, variable_path
from companion.optimizers._transforms import GradientTransform


def _outside_traced_functions() -> Any:
    """``tf.init_scope()`` on TensorFlow; nothing elsewhere (JAX builds before tracing its step,
    PyTorch runs eagerly)."""
    if keras.backend.backend() != "tensorflow":
        return contextlib.nullcontext()
    import tensorflow as tf

    return tf.init_scope()


class _Wrapper(keras.optimizers.Optimizer):
    """An optimizer that holds another and overrides ``apply`` (the pattern of LossScaleOptimizer).

    The wrapped optimizer owns the learning rate and the step count; the wrapper's variables
    come first in ``variables``, then the wrapped optimizer's, so ``.keras`` files and
    checkpoints hold both.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, name: str | None = None) -> None:
        check_instance(
            optimizer, "optimizer", keras.optimizers.Optimizer, "a keras.optimizers.Optimizer"
        )
        if name is not None:
            check_str(name, "name", "a non-empty str or None")
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = optimizer

    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        # Outside any function being traced: without a strategy, model.fit builds the optimizer
        # while tracing its first step, and XLA (compile's default on a GPU) cannot lift out a
        # variable whose initial value reads another variable, as Lookahead's slow copies do.
        with _outside_traced_functions():
            self.inner_optimizer.build(variables)
            super().build(variables)
            self._build_own(list(variables))

    def _build_own(self, variables: list[Any]) -> None:
        """Create the wrapper's own variables."""

    def apply(self, grads: Any, trainable_variables: Any = None) -> None:
        variables = list(
            self._trainable_variables if trainable_variables is None else trainable_variables
        )
        if not self.built:
            self.build(variables)
        self._apply(list(grads), variables)

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        raise NotImplementedError

    @property
    def variables(self) -> list[Any]:
        return self._variables[:] + self.inner_optimizer.variables

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    def finalize_variable_values(self, var_list: list[Any]) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def scale_loss(self, loss: Any) -> Any:
        """Scale ``loss`` by the wrapped optimizer's ``loss_scale_factor``, which unscales.

        ``model.fit`` asks the optimizer it was given (the wrapper) to scale the loss; the
        wrapped optimizer divides the gradients by its own factor, so the two must agree.

        Taught in chapter 9, "What the base class adds: accumulation, averaging, loss scaling".
        """
        return self.inner_optimizer.scale_loss(loss)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> _Wrapper:
        config = dict(config)
        optimizer = keras.saving.deserialize_keras_object(
            config.pop("optimizer"), custom_objects=custom_objects
        )
        return cls(optimizer, **config)


@register
class TransformGradients(_Wrapper):
    """Run gradients through a chain of :class:`GradientTransform` s, then any Keras optimizer.

    Works wherever an optimizer does (``compile/fit``, ``companion.training.fit``, a hand-written
    ``apply_gradients``, inside ``tf.function``). Under a strategy with ``n`` replicas it first
    sums the gradients over the replicas (what the optimizer would apply), transforms that sum,
    and hands every replica ``1/n`` of the result, which the wrapped optimizer sums again: global
    clipping then clips the global gradient, not each replica's part (Keras's own ``clipnorm`` and
    ``global_clipnorm`` clip each replica's part before the sum: on two replicas an update of norm
    up to 2 instead of 1).

    With ``record_update_norms``, after each step ``update_norms()`` gives the Euclidean norm of
    every variable's change (``||w_new - w_old||``), kept in non-trainable optimizer variables, so
    recording works inside a compiled step; :class:`UpdateNormLogger` puts them into the logs.

    Args:
        optimizer: The Keras optimizer that applies the transformed gradients.
        transforms: Transforms applied in order.
        record_update_norms: Record each variable's update norm (debug mode).
        name: The optimizer's name.

    Example:
        >>> from companion.optimizers import ClipGlobalNorm
        >>> variable = keras.Variable([3.0, -4.0], name="w")
        >>> optimizer = TransformGradients(
        ...     keras.optimizers.SGD(1.0), [ClipGlobalNorm(1.0)], record_update_norms=True
        ... )
        >>> _ = optimizer.apply_gradients([(ops.array([30.0, -40.0]), variable)])
        >>> norm = optimizer.transforms[0].norm
        >>> [round(float(w), 4) for w in variable.numpy()], round(float(norm), 4)
        ([2.4, -3.2], 50.0)
        >>> {path: round(norm, 4) for path, norm in optimizer.update_norms().items()}
        {'w': 1.0}

    Taught in chapter 9, "Changing gradients without writing an optimizer".
    """

    def __init__(
        self,
        optimizer: keras.optimizers.Optimizer,
        transforms: Sequence[GradientTransform] = (),
        *,
        record_update_norms: bool = False,
        name: str | None = None,
    ) -> None:
        transforms = check_sequence(
            transforms,
            "transforms",
            "a list or tuple of GradientTransform",
            min_length=0,
            item=lambda transform, name: check_instance(
                transform, name, GradientTransform, "a GradientTransform"
            ),
        )
        record_update_norms = check_bool(record_update_norms, "record_update_norms")
        super().__init__(optimizer, name=name)
        self._transforms = transforms  # a tuple: the tracker leaves it alone
        self.record_update_norms = record_update_norms

    @property
    def transforms(self) -> tuple[GradientTransform, ...]:
        return self._transforms

    def _build_own(self, variables: list[Any]) -> None:
        for transform in self._transforms:
            transform.build(self, variables)
        self._norms = (
            [
                self.add_variable(
                    (),
                    aggregation="only_first_replica",
                    name=f"{variable_path(v).replace('/', '_')}_update_norm",
                )
                for v in variables
            ]
            if self.record_update_norms
            else []
        )

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        if self._transforms:
            # Transforms see the gradient of the loss itself: with the wrapped optimizer's
            # loss_scale_factor s, undo the scaling for them and redo it for the optimizer
            # (exact for a power of two).
            scale = self.inner_optimizer.loss_scale_factor
            if scale is not None:
                gradients = [g if g is None else g / scale for g in gradients]
            gradients = self._transform(gradients, variables)
            if scale is not None:
                gradients = [g if g is None else g * scale for g in gradients]
        before = [ops.copy(v.value) for v in variables] if self.record_update_norms else []
        self.inner_optimizer.apply(gradients, variables)
        for old, variable in zip(before, variables):
            change = ops.cast(variable.value, "float32") - ops.cast(old, "float32")
            norm = ops.sqrt(ops.sum(ops.square(change)))
            self._norms[self._get_variable_index(variable)].assign(norm)

    def _transform(self, gradients: list[Any], variables: list[Any]) -> list[Any]:
        replicas = replicas_in_sync()
        present = [i for i, g in enumerate(gradients) if g is not None]
        if replicas > 1:  # only under a tf.distribute strategy
            import tensorflow as tf

            summed = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, [tf.convert_to_tensor(gradients[i]) for i in present]
            )
            gradients = list(gradients)
            for i, g in zip(present, summed):
                gradients[i] = g
        step = self.iterations
        for transform in self._transforms:
            gradients = transform(gradients, variables, step)
        return gradients if replicas == 1 else [g if g is None else g / replicas for g in gradients]

    def update_norms(self) -> dict[str, float]:
        """The last step's update norm of each variable by path (without ``record_update_norms``:
        empty).

        Taught in chapter 9, "Chaining transforms and recording update norms".
        """
        return {
            variable_path(v): float(ops.convert_to_numpy(n))
            for v, n in zip(self._trainable_variables, self._norms)
        }

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "record_update_norms": self.record_update_norms,
            "transforms": [keras.saving.serialize_keras_object(t) for t in self._transforms],
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> TransformGradients:
        config = dict(config)
        config["transforms"] = [
            keras.saving.deserialize_keras_object(t, custom_objects=custom_objects)
            for t in config.get("transforms", [])
        ]
        return super().from_config(config, custom_objects)


def _copy_of(variable: Any) -> Any:
    """An initializer returning ``variable``'s value when the new variable is initialized."""
    # A copy: on PyTorch a cast to the same dtype returns the variable's own tensor, which the
    # new variable would then share.
    return lambda shape, dtype=None: ops.copy(
        ops.cast(ops.convert_to_tensor(variable), dtype or variable.dtype)
    )


@register
class Lookahead(_Wrapper):
    """Lookahead (Zhang et al., 2019) around any Keras optimizer: fast weights, slow weights.

    The wrapped ("fast") optimizer steps as usual; every ``sync_period`` steps the slow copy
    moves ``slow_step_size`` of the way towards the fast weights, ``slow += a * (fast - slow)``,
    and the fast weights restart from it. The slow weights are optimizer variables: saved in
    ``.keras`` files and checkpoints, and restored with them.

    Args:
        optimizer: The fast optimizer.
        sync_period: Steps between synchronizations (``k``, >= 1).
        slow_step_size: ``alpha``, in (0, 1].
        name: The optimizer's name.

    Example:
        >>> variable = keras.Variable([0.0])
        >>> inner = keras.optimizers.SGD(1.0)
        >>> optimizer = Lookahead(inner, sync_period=2, slow_step_size=0.5)
        >>> for _ in range(2):
        ...     _ = optimizer.apply_gradients([(ops.array([-1.0]), variable)])
        >>> float(variable.numpy()[0])  # the fast weights reached 2.0, then went halfway
        1.0

    Taught in chapter 9, "Combining optimizers: Lookahead".
    """

    def __init__(
        self,
        optimizer: keras.optimizers.Optimizer,
        sync_period: int = 5,
        slow_step_size: float = 0.5,
        name: str | None = None,
    ) -> None:
        super().__init__(optimizer, name=name)
        self.sync_period = check_int(sync_period, "sync_period", minimum=1, maximum=MAX_STEP)
        self.slow_step_size = check_fraction(slow_step_size, "slow_step_size", above_zero=True)

    def _build_own(self, variables: list[Any]) -> None:
        # An initializer, not an assign after creation: Keras may create the variables lazily
        # (model.fit builds the optimizer in a scope that initializes them later), which would
        # overwrite an assigned value with the initializer's.
        self._slow = [
            self.add_variable_from_reference(v, name="slow", initializer=_copy_of(v))
            for v in variables
        ]

    def _apply(self, gradients: list[Any], variables: list[Any]) -> None:
        self.inner_optimizer.apply(gradients, variables)
        if keras.backend.backend() == "tensorflow":
            self._sync_replicas(variables)
        else:
            self._sync_where(variables)

    def _sync_where(self, variables: list[Any]) -> None:
        """JAX and PyTorch: every ``k`` steps move the slow weights and reset the fast ones, as an
        ``ops.where`` (a Python ``if`` on the step would not trace under ``jax.jit``)."""
        due = ops.equal(self.iterations % self.sync_period, 0)
        for fast in variables:
            slow = self._slow[self._get_variable_index(fast)]
            old, new = slow.value, fast.value
            moved = ops.where(due, old + self.slow_step_size * (new - old), old)
            slow.assign(moved)
            fast.assign(ops.where(due, moved, new))

    def _sync_replicas(self, variables: list[Any]) -> None:
        """TensorFlow: sync once, across the replicas of a strategy if there is one."""
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        if tf.distribute.has_strategy() and context is not None:
            # In a replica under a strategy (model.fit, strategy.run): sync once, across replicas.
            context.merge_call(self._sync, args=(variables,))
        else:  # no strategy, or already in cross-replica context
            self._sync(tf.distribute.get_strategy(), variables)

    def _sync(self, strategy: Any, variables: list[Any]) -> None:
        """In cross-replica context (``merge_call``, or no strategy): every ``k`` steps, move the
        slow weights and reset the fast ones."""
        import tensorflow as tf

        alpha = self.slow_step_size

        def synchronize() -> tf.Tensor:
            for fast in variables:
                slow = self._slow[self._get_variable_index(fast)].value
                strategy.extended.update(
                    slow,
                    lambda s, f: s.assign_add(alpha * (f - s)),
                    args=(fast.value,),
                    group=False,
                )
                strategy.extended.update(
                    fast.value, lambda f, s: f.assign(s), args=(slow,), group=False
                )
            return tf.constant(True)

        tf.cond(
            tf.equal(self.iterations % self.sync_period, 0), synchronize, lambda: tf.constant(False)
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "sync_period": self.sync_period,
            "slow_step_size": self.slow_step_size,
        }
