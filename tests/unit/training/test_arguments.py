"""companion.training._arguments: a bad argument of fit and the steps is refused before anything is
traced, naming it; each check runs once per call."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.small_models import (
    IMAGE,
    META,
    dense,
    shapes_dataset,
    two_input_classifier,
)
from helpers.training_helpers import crossentropy, fit_regression, regression_data

from companion._checks import check_clip_norm
from companion.data import make_shapes
from companion.training import _arguments, fit, make_eval_step, make_train_step

PAIRS = r"^{}: expected a tf.data.Dataset of \(inputs, targets\) pairs"


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"dataset": "images"}, TypeError, PAIRS.format("dataset") + ", got str"),
        (
            {"dataset": "unpaired"},
            ValueError,
            PAIRS.format("dataset") + ", got elements TensorSpec",
        ),
        (
            {"dataset": "triples"},
            ValueError,
            r"^dataset: expected .* pairs, got elements \(.*map it to pairs first",
        ),
        (
            {"dataset": "infinite"},
            ValueError,
            r"^dataset: expected a finite dataset \(an epoch is one pass",
        ),
        (
            {"validation_data": "unpaired"},
            ValueError,
            r"^validation_data: expected a tf.data.Dataset of \(inputs",
        ),
        ({"epochs": 0}, ValueError, r"^epochs: expected an int >= 1 and <= 1000000, got int 0"),
        (
            {"epochs": 2.0},
            TypeError,
            r"^epochs: expected an int >= 1 and <= 1000000, got float 2.0",
        ),
        (
            {"epochs": 10**12},
            ValueError,
            r"^epochs: expected an int >= 1 and <= 1000000, got int 1000000000000",
        ),
        (
            {"clip_norm": 0.0},
            ValueError,
            r"^clip_norm: expected a finite number > 0 and <= 3.40282e\+38, got float 0.0",
        ),
        (
            {"clip_norm": -1},
            ValueError,
            r"^clip_norm: expected a finite number > 0 and <= 3.40282e\+38, got int -1",
        ),
        (
            {"optimizer": "sgd"},
            TypeError,
            r"^optimizer: expected a keras.optimizers.Optimizer, got str",
        ),
        ({"loss": 3}, TypeError, r"^loss: expected a callable"),
        (
            {"metrics": ["accuracy"]},
            TypeError,
            r"^metrics\[0\]: expected a keras.metrics.Metric, got str",
        ),
        ({"progress": 1}, TypeError, r"^progress: expected a bool, got int 1"),
        (
            {"strategy": "mirrored"},
            TypeError,
            r"^strategy: expected a tf.distribute.Strategy or None",
        ),
    ],
)
def test_bad_input_is_rejected_before_training(change, error, match):
    (images, meta), labels = make_shapes(8, image_size=IMAGE, meta_dim=META)
    datasets = {
        "images": "images",
        "unpaired": tf.data.Dataset.from_tensor_slices(images).batch(4),
        "triples": tf.data.Dataset.from_tensor_slices(((images, meta), labels, labels)).batch(4),
        "infinite": shapes_dataset(8).repeat(),
    }
    model = two_input_classifier()
    before = model.get_weights()
    arguments = {
        "dataset": shapes_dataset(8),
        "optimizer": keras.optimizers.SGD(0.1),
        "loss": crossentropy(),
        "progress": False,
    }
    arguments.update(
        {k: datasets.get(v, v) if isinstance(v, str) else v for k, v in change.items()}
    )
    with pytest.raises(error, match=match):
        fit(model, **arguments)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_an_empty_log_dir_or_a_file_is_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"^log_dir: expected a non-empty path \(str or os.PathLike\), got str ''"
    ):
        fit_regression(dense(2, seed=0), regression_data(), log_dir="")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        ValueError, match=r"^log_dir: expected a folder for TensorBoard's files, got PosixPath"
    ):
        fit_regression(dense(2, seed=0), regression_data(), log_dir=tmp_path / "a_file")


@pytest.mark.parametrize("how", ["model.trainable", "every layer"])
def test_a_fully_frozen_model_is_refused_before_training(how):
    model = two_input_classifier()
    for layer in [model] if how == "model.trainable" else model.layers:
        layer.trainable = False
    frozen = (
        r"^model: expected trainable variables, got none in Functional .*"
        r"\(is every layer frozen\?\)"
    )
    with pytest.raises(ValueError, match=frozen):
        fit(
            model,
            shapes_dataset(8),
            optimizer=keras.optimizers.SGD(0.1),
            loss=crossentropy(),
            progress=False,
        )
    with pytest.raises(ValueError, match=frozen):
        make_train_step(model, optimizer=keras.optimizers.SGD(0.1), loss=crossentropy())


def counted_checks(monkeypatch):
    """Every check of ``_arguments`` made to record ``(check, argument it names)`` when called."""
    calls = []

    def counted(name, check):
        def call(*args, **kwargs):
            named = next((a for a in args if isinstance(a, str)), None)
            calls.append((name, named))
            return check(*args, **kwargs)

        return call

    for name, check in list(vars(_arguments).items()):
        if name.startswith("_check") or name == "metric_entries":
            monkeypatch.setattr(_arguments, name, counted(name, check))
    monkeypatch.setattr(_arguments, "check_clip_norm", counted("check_clip_norm", check_clip_norm))
    return calls


def test_each_check_runs_once_per_fit_in_the_order_of_precedence(monkeypatch, tmp_path):
    calls = counted_checks(monkeypatch)
    fit_regression(
        dense(2, seed=0),
        regression_data(),
        validation_data=regression_data(),
        log_dir=tmp_path / "logs",
        checkpoint_dir=tmp_path / "checkpoints",
        on_epoch_end=lambda epoch, logs: None,
        metrics=[keras.metrics.MeanAbsoluteError()],
        epochs=2,
    )
    assert calls == [
        ("_check_optimizer", None),
        ("_check_signature", "loss"),
        ("_check_fit", None),
        ("_check_pairs", "dataset"),
        ("_check_pairs", "validation_data"),
        ("check_clip_norm", None),
        ("_check_records", None),
        ("_check_folder", "log_dir"),
        ("_check_folder", "checkpoint_dir"),
        ("_check_signature", "on_epoch_end"),
        ("metric_entries", None),
        ("_check_strategy", None),
        ("_check_element_spec", None),
        ("_check_inputs", "dataset"),
        ("_check_inputs", "validation_data"),
        ("_check_trainable", None),
        ("_check_built", None),
        ("_check_output_keys", None),
    ]


@pytest.mark.parametrize("make", ["make_train_step", "make_eval_step"])
def test_each_check_runs_once_per_step_built(monkeypatch, make):
    calls = counted_checks(monkeypatch)
    loss = keras.losses.MeanSquaredError()
    if make == "make_train_step":
        make_train_step(dense(2, seed=0), optimizer=keras.optimizers.SGD(0.1), loss=loss)
        first, model = [("_check_optimizer", None)], [("_check_trainable", None)]
    else:
        make_eval_step(dense(2, seed=0), loss=loss)
        first, model = [], []  # no optimizer; a frozen model is fine
    assert calls == [
        *first,
        ("_check_signature", "loss"),
        ("metric_entries", None),
        ("check_clip_norm", None),  # None for make_eval_step
        ("_check_strategy", None),
        ("_check_element_spec", None),
        *model,
        ("_check_built", None),
        ("_check_output_keys", None),
    ]
