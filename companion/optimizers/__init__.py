"""Custom optimizers on the Keras 3 API (chapter 9): AdamW written out, a warmup-then-cosine
learning-rate schedule, gradient transforms that chain in front of any optimizer, magnitude
pruning, a debug recorder of update norms, Lookahead.

Keras 3 optimizers are written with three methods: ``build(variables)`` creates the slot
variables (``add_optimizer_variables``), ``update_step(gradient, variable, learning_rate)``
changes one variable through ``self.assign*``, and ``get_config`` lists the hyperparameters.
``self.assign*`` are Keras's hooks for backend-specific updates: on TensorFlow they cast the value
to the variable's dtype and turn a sparse ``IndexedSlices`` gradient (an ``Embedding``'s) into a
scatter update of the rows it touches, where ``variable.assign_sub`` would densify it. They are not
what keeps ``tf.distribute`` replicas in sync: the base class all-reduces the gradients and runs
``update_step`` on every replica's copy, so a plain ``variable.assign*`` stays in sync too.

The wrappers here (:class:`TransformGradients`, :class:`Lookahead`) hold another optimizer and
override ``apply``, the one method that both ``model.fit`` and a custom loop
(``apply_gradients``) go through, as ``keras.optimizers.LossScaleOptimizer`` does. Every class is
registered serializable, so ``.keras`` files that use them load in any process that has imported
this module.

Backends: TensorFlow, JAX, PyTorch.
"""

from companion.optimizers._adamw import DEFAULT_EXCLUDE as DEFAULT_EXCLUDE
from companion.optimizers._adamw import AdamW
from companion.optimizers._pruning import MagnitudePruning, polynomial_sparsity, sparsity
from companion.optimizers._schedules import WarmupCosine
from companion.optimizers._shared import MAX_STEP as MAX_STEP
from companion.optimizers._transforms import MAX_NOISE_STDDEV as MAX_NOISE_STDDEV
from companion.optimizers._transforms import (
    ClipGlobalNorm,
    GaussianNoise,
    GradientTransform,
    TaskWeights,
    TopK,
)
from companion.optimizers._update_norm_logger import UpdateNormLogger
from companion.optimizers._wrappers import Lookahead, TransformGradients

__all__ = [
    "AdamW",
    "ClipGlobalNorm",
    "GaussianNoise",
    "GradientTransform",
    "Lookahead",
    "MagnitudePruning",
    "TaskWeights",
    "TopK",
    "TransformGradients",
    "UpdateNormLogger",
    "WarmupCosine",
    "polynomial_sparsity",
    "sparsity",
]
