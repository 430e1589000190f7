"""companion.training._metrics: metrics with clashing names or keys that are not outputs are
refused; an entry unpacks as (key, metric, name)."""

import keras
import pytest
from helpers.small_models import dense
from helpers.training_helpers import fit_regression, regression_data

from companion.training._metrics import metric_entries


def test_metrics_whose_names_clash_or_whose_keys_are_not_outputs_are_refused():
    mae = keras.metrics.MeanAbsoluteError
    for metrics, match in [
        ([mae(name="m"), keras.metrics.MeanSquaredError(name="m")], r"clash on 'm'"),
        ([mae(name="loss")], r"clash on 'loss'"),
        (
            {"nope": mae()},
            r"^metrics: expected keys of the model's outputs \(none: a single tensor\)",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            fit_regression(dense(2, seed=0), regression_data(), metrics=metrics)


def test_metric_entries_unpack_as_key_metric_and_log_name():
    mae, mse = keras.metrics.MeanAbsoluteError(), keras.metrics.MeanSquaredError()
    entries = metric_entries({"head": [mae], "tail": mse})
    assert [tuple(entry) for entry in entries] == [
        ("head", mae, "head_mean_absolute_error"),
        ("tail", mse, "tail_mean_squared_error"),
    ]
    key, metric, name = metric_entries([mae])[0]
    assert (key, metric, name) == (None, mae, "mean_absolute_error")
