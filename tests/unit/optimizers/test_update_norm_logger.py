"""companion.optimizers._update_norm_logger: update norms recorded under fit and logged."""

import keras
import numpy as np
import pytest
from helpers.small_models import regressor, regressor_data

from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    TransformGradients,
    UpdateNormLogger,
)


def test_transforms_run_under_fit_and_the_update_norms_are_recorded():
    x, y, data = regressor_data()
    model = regressor()
    optimizer = TransformGradients(AdamW(0.01), [ClipGlobalNorm(1.0)], record_update_norms=True)
    model.compile(optimizer, "mse")
    before = [w.copy() for w in model.get_weights()]

    class LastStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.before = [w.copy() for w in model.get_weights()]

    last = LastStep()
    history = model.fit(
        data, epochs=2, verbose=0, shuffle=False, callbacks=[last, UpdateNormLogger(optimizer)]
    ).history
    norms = optimizer.update_norms()
    assert list(norms) == [v.path for v in model.trainable_variables]
    expected = [float(np.linalg.norm(a - b)) for a, b in zip(model.get_weights(), last.before)]
    np.testing.assert_allclose(list(norms.values()), expected, rtol=1e-5)
    assert history["update_norm/" + model.trainable_variables[0].path][-1] == pytest.approx(
        expected[0]
    )
    assert float(optimizer.transforms[0].norm) > 0
    assert any(np.any(a != b) for a, b in zip(before, model.get_weights()))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: UpdateNormLogger(TransformGradients(AdamW())),
            ValueError,
            r"^optimizer: expected a Transform",
        ),
        (
            lambda: UpdateNormLogger(AdamW()),
            TypeError,
            r"^optimizer: expected a TransformGradients",
        ),
    ],
)
def test_bad_input_is_rejected_naming_the_argument_update_norm_logger(make, error, match):
    with pytest.raises(error, match=match):
        make()
