"""``companion.models`` on the running backend: the functional and subclassed multimodal models
build and fit, ``copy_weights`` makes them compute the same, and a ``.keras`` file of each
reloads in a fresh process."""

import keras
import numpy as np

from companion.diagnostics import check_roundtrip
from companion.models import MultiModalModel, copy_weights, functional_multimodal

SHAPE, META, CLASSES = (16, 16, 3), 4, 3


def batch(size=8):
    rng = np.random.default_rng(0)
    images = rng.random((size, *SHAPE)).astype("float32")
    meta = rng.normal(size=(size, META)).astype("float32")
    return [images, meta], rng.integers(0, CLASSES, size)


def test_the_functional_model_fits_and_reloads_in_a_fresh_process():
    keras.utils.set_random_seed(0)
    model = functional_multimodal(SHAPE, meta_dim=META, num_classes=CLASSES)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    inputs, labels = batch()
    history = model.fit(inputs, labels, epochs=1, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    report = check_roundtrip(model, inputs, fresh_process=True)
    assert report.ok, str(report)


def test_copy_weights_makes_the_subclassed_model_compute_the_functional_ones_outputs():
    keras.utils.set_random_seed(1)
    functional = functional_multimodal(SHAPE, meta_dim=META, num_classes=CLASSES)
    subclassed = MultiModalModel(CLASSES)
    subclassed.build([(None, *SHAPE), (None, META)])
    copied = copy_weights(functional, subclassed)
    assert copied and len(subclassed.weights) == len(functional.weights)
    inputs, _ = batch(4)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(subclassed(inputs)),
        keras.ops.convert_to_numpy(functional(inputs)),
    )  # the same weights, the same ops: bit for bit


def test_the_subclassed_model_fits():
    keras.utils.set_random_seed(2)
    model = MultiModalModel(CLASSES)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    inputs, labels = batch()
    history = model.fit(inputs, labels, epochs=1, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
