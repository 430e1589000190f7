"""companion.training._checkpoint: a run that crashed resumes from its checkpoints to the
weights and history of one that did not, on one device and on two replicas."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import dense, one_weight
from helpers.training_helpers import constant_data, fit_regression, mixed_float16, regression_data

from companion.training import fit
from companion.training._checkpoint import TrainingCheckpoint


def crashing(data, at):
    """``data``, whose pipeline raises when it reads its ``at``-th batch (counted over epochs)."""
    read = {"batches": 0}

    def count(x):
        read["batches"] += 1
        if read["batches"] == at:
            raise RuntimeError("the machine is gone")
        return x

    def through(x, y):
        x = tf.ensure_shape(tf.py_function(count, [x], x.dtype), x.shape)
        return x, y

    return data.map(through)


def resumable_run(directory, data, epochs=3, **kwargs):
    """A fresh model, optimizer and metric (as a restarted process has), trained by ``fit``."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = kwargs.pop("optimizer", None) or keras.optimizers.Adam(0.05)
    history = fit(
        model,
        data,
        optimizer=optimizer,
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
        epochs=epochs,
        checkpoint_dir=directory,
        **({"progress": False} | kwargs),
    )
    return model, optimizer, history


def test_a_run_that_crashed_mid_epoch_resumes_to_the_weights_of_one_that_did_not(tmp_path, capsys):
    data = regression_data(n=40, batch=4, targets=np.arange(40) / 10)
    validation = regression_data(n=8, batch=4)
    model, optimizer, history = resumable_run(tmp_path / "whole", data, validation_data=validation)
    with pytest.raises(tf.errors.OpError, match="the machine is gone"):
        resumable_run(
            tmp_path / "cut", crashing(data, at=17), checkpoint_every=3, validation_data=validation
        )
    again, again_optimizer, again_history = resumable_run(
        tmp_path / "cut", data, checkpoint_every=3, validation_data=validation, progress=True
    )
    printed = capsys.readouterr().out
    # batch 17 is epoch 2's seventh: the newest checkpoint holds epoch 2 up to step 6
    assert printed.startswith("Resumed from ckpt-6 (epoch 2, after step 6)\nEpoch 2/3\n")
    assert "Epoch 1/3" not in printed
    # the history, metrics included, and every bit of every weight are those of the whole run
    assert again_history == history
    assert variables_equal(model.weights, again.weights)
    assert variables_equal(optimizer.variables, again_optimizer.variables)
    assert int(again_optimizer.iterations) == 30


def variables_equal(first, second):
    return len(first) == len(second) and all(
        np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
        for a, b in zip(first, second)
    )


def test_a_finished_run_is_not_trained_again_and_more_epochs_carry_on(tmp_path, capsys):
    data = regression_data(n=16, batch=4, targets=np.arange(16) / 4)
    longer, _, longer_history = resumable_run(tmp_path / "five", data, epochs=5)
    model, _, history = resumable_run(tmp_path / "resumed", data, epochs=3)
    weights = [w.copy() for w in model.get_weights()]
    again, _, again_history = resumable_run(tmp_path / "resumed", data, epochs=3, progress=True)
    assert capsys.readouterr().out == "Resumed from ckpt-3 (after epoch 3)\n"
    assert again_history == history and variables_equal(weights, again.get_weights())
    more, _, more_history = resumable_run(tmp_path / "resumed", data, epochs=5)
    assert more_history == longer_history and variables_equal(longer.weights, more.weights)


def test_mixed_precision_resumes_with_its_loss_scale(tmp_path):
    with mixed_float16():
        # Input 1 overflows the first scaled gradient, so the loss scale halves to 2**14 in step 1;
        # a resumed run that lost it would skip another step and end elsewhere.
        data = constant_data(1.0, steps=4, targets=[0.0, 0.2, 0.1, 0.3])

        def run(directory, data):
            model = one_weight()
            optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
            fit(
                model,
                data,
                optimizer=optimizer,
                loss=keras.losses.MeanSquaredError(),
                epochs=2,
                checkpoint_dir=directory,
                checkpoint_every=2,
                progress=False,
            )
            return model, optimizer

        model, optimizer = run(tmp_path / "whole", data)
        with pytest.raises(tf.errors.OpError):
            run(tmp_path / "cut", crashing(data, at=7))
        again, again_optimizer = run(tmp_path / "cut", data)
        assert float(again_optimizer.dynamic_scale) == float(optimizer.dynamic_scale) == 2.0**14
        assert variables_equal(model.weights, again.weights)


def test_checkpoints_of_another_model_or_a_file_are_refused(tmp_path):
    resumable_run(tmp_path / "other", regression_data(), epochs=1)
    with pytest.raises(
        ValueError, match=r"^checkpoint_dir: expected checkpoints of this model, optimizer and"
    ):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_dir=tmp_path / "other")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"^checkpoint_dir: expected a folder for checkpoints"):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_dir=tmp_path / "a_file")
    with pytest.raises(ValueError, match=r"^checkpoint_every: expected None without a check"):
        fit_regression(dense(2, seed=0), regression_data(), checkpoint_every=2)
    assert not (tmp_path / "a_file").read_text()


@pytest.mark.parametrize(
    "every, states",
    [
        (2, [(0, 2), (1, 0), (1, 2), (2, 0)]),  # divides the epoch's 4 steps (it wrote 6)
        (3, [(0, 3), (1, 0), (1, 3), (2, 0)]),  # does not
        (1, [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]),  # (it wrote 10)
    ],
)
def test_each_state_is_checkpointed_once(tmp_path, monkeypatch, every, states):
    # After the epoch's last step fit used to save twice: (epoch - 1, its length) and then
    # (epoch, 0), the same weights: 2 epochs of 4 steps with checkpoint_every=2 wrote 6.
    saved = []
    save = TrainingCheckpoint.save

    def spy(self, epoch, step, history):
        saved.append((epoch, step))
        save(self, epoch, step, history)

    monkeypatch.setattr(TrainingCheckpoint, "save", spy)
    data = regression_data(n=16, batch=4)
    resumable_run(tmp_path, data, epochs=2, checkpoint_every=every)
    assert saved == states
    # the manager numbers its checkpoints by the saves written
    assert os.path.basename(tf.train.latest_checkpoint(tmp_path)) == f"ckpt-{len(states)}"


MIRRORED_RESUME = """
from companion.notebook import split_cpu
split_cpu(2)
import os, tempfile
import numpy as np, tensorflow as tf, keras
from companion.cluster import variables_digest
from companion.training import fit

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)
read = [0]

def crash_at_12(x):
    read[0] += 1
    if read[0] == 12:
        raise RuntimeError("the machine is gone")
    return x

def run(folder, data):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer, mae = keras.optimizers.Adam(0.05), keras.metrics.MeanAbsoluteError()
    history = fit(model, data, optimizer=optimizer, loss=keras.losses.MeanSquaredError(),
                  metrics=[mae], epochs=2, strategy=strategy, progress=False,
                  checkpoint_dir=folder, checkpoint_every=3)
    return variables_digest(model), history

scratch = tempfile.TemporaryDirectory()  # removed when the script ends
whole = run(os.path.join(scratch.name, "whole"), data)
folder = os.path.join(scratch.name, "resumed")
try:
    run(folder, data.map(lambda x, y: (
        tf.ensure_shape(tf.py_function(crash_at_12, [x], x.dtype), x.shape), y)))
except tf.errors.OpError:
    print("crashed")
resumed = run(folder, data)
print(whole[0] == resumed[0], whole[1]["loss"] == resumed[1]["loss"])
print(np.allclose(whole[1]["mean_absolute_error"], resumed[1]["mean_absolute_error"],
                  rtol=1e-6, atol=0))
"""


@pytest.mark.slow
def test_two_replicas_resume_to_the_same_weights_and_history(tmp_path):
    # A metric's variables are summed over the replicas when saved and restored as one total,
    # so its later sums may round differently (last bit); weights and loss come back exactly.
    from companion.notebook import run_python

    result = run_python(MIRRORED_RESUME)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["crashed", "True", "True", "True"], result.stdout
