"""Custom training loops (chapter 7): the training step written out, and ``fit`` around it.

``make_train_step`` builds the compiled step a reader would write by hand (``GradientTape``,
loss, gradients, optional global-norm clipping, ``apply_gradients``, metrics), and
``make_eval_step`` its validation twin. ``fit`` is the outer loop: epochs, metrics reset each
epoch, validation, a ``keras.utils.Progbar``, TensorBoard scalars, and a stop at the first
non-finite loss, gradient or learning rate, with the weights from before that step (or right
after an update that made a weight non-finite, or after an epoch whose validation loss is not).

The same code runs on one device and under a ``tf.distribute`` strategy: the step always goes
through ``strategy.run`` and ``strategy.reduce`` (without a strategy, TensorFlow's default
strategy, whose ``run`` is a plain call). Each replica scales its loss by the *global* batch
size, so the gradients the optimizer sums over the replicas are those of the global mean loss.
Under mixed precision the step scales the loss with ``optimizer.scale_loss`` before taking
gradients, as Keras's own ``train_step`` does, so a ``keras.optimizers.LossScaleOptimizer`` works.

``fit`` runs as ``model.fit`` does: the compiled function takes the dataset's *iterator* and
fetches each batch inside the graph, the epoch's totals stay on the device (nothing is read
back after each step), and the traced function is kept on the model, so calling ``fit`` again
with the same model, optimizer, loss, metrics and data layout does not trace again.

With ``checkpoint_dir`` (chapter 10) ``fit`` writes checkpoints of the model, the optimizer,
the history and the epoch in progress, so that a job that crashed can be restarted where it
stopped: it carries on from the newest one, to the weights an unbroken run reaches (the same
weights and losses to the bit, metrics to float rounding on several replicas) if the datasets
yield the same batches each pass (no reshuffling, or a seeded shuffle with
``reshuffle_each_iteration=False``). Under a multi-worker strategy the chief's checkpoints are
kept (every worker takes part in a save) and every worker restores from the folder, which must
be one they all see.

Backends: TensorFlow only (on JAX use ``jax.value_and_grad``; on PyTorch use ``loss.backward()``).
"""

from companion._backend import require_tensorflow

require_tensorflow(
    "companion.training",
    {
        "jax": (
            "model.fit, or jax.value_and_grad over model.stateless_call + optimizer.stateless_apply"
        ),
        "torch": "model.fit, or a loop of loss.backward() and optimizer.apply",
    },
)

from companion._clipping import clip_by_global_norm  # noqa: E402
from companion.training._arguments import MAX_EPOCHS as MAX_EPOCHS  # noqa: E402
from companion.training._errors import NonFiniteError  # noqa: E402
from companion.training._loop import fit  # noqa: E402
from companion.training._step import make_eval_step, make_train_step  # noqa: E402

__all__ = ["NonFiniteError", "clip_by_global_norm", "fit", "make_eval_step", "make_train_step"]
