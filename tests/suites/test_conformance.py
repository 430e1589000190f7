"""Every public companion layer, model and optimizer passes the book's own chapter-9 checks.

In the spirit of Keras's ``run_layer_test``: one table of constructors
(``tests/helpers/public_api.py``, so that a new class is added in one place) and the same checks
for every entry.
``check_roundtrip`` saves to a ``.keras`` file and loads it back (in a fresh process for one
representative of each kind, in this process for the rest, to keep the run short);
``check_variable_batch`` traces layers and models with an unknown batch size.
"""

import keras
import pytest
from helpers.public_api import MODELS, OPTIMIZERS, data, public_classes

from companion.diagnostics import check_roundtrip, check_variable_batch

#: One representative of each kind is loaded in a fresh Python process, as a reader would.
FRESH = {"CustomDense", "MultiModalModel", "AdamW"}


def test_the_tables_cover_every_public_layer_model_and_optimizer():
    covered = set(MODELS) | {name.split(",")[0] for name in OPTIMIZERS}
    public = public_classes(keras.layers.Layer) | public_classes(keras.optimizers.Optimizer)
    assert public - covered == set()
    assert FRESH <= covered


@pytest.mark.parametrize("name", sorted(MODELS))
def test_layers_and_models_round_trip_and_take_any_batch_size(name):
    build, _, kind = MODELS[name]
    keras.utils.set_random_seed(0)
    model = build()
    inputs, _ = data(kind, batch=4)
    report = check_roundtrip(model, inputs, fresh_process=name in FRESH)
    assert report.ok, str(report)
    assert check_variable_batch(model, inputs) == []


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_round_trip(name):
    report = check_roundtrip(OPTIMIZERS[name](), fresh_process=name in FRESH)
    assert report.ok, str(report)
