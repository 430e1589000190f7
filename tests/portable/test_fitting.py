"""``companion.fitting`` on the running backend: GuardedModel's step, the calibration metric, the
range test and a ``.keras`` round trip in a fresh process."""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

from companion.fitting import ExpectedCalibrationError, GuardedModel, find_learning_rate
from companion.notebook import run_python
from companion.optimizers import AdamW, WarmupCosine

BATCH = 16


def classification_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 8)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")


def classifier(guarded, *, clip=1.0, optimizer=None):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(3)(keras.layers.Dense(16, activation="relu")(inputs))
    if guarded:
        model = GuardedModel(inputs=inputs, outputs=outputs, clip_norm=clip)
    else:
        model = keras.Model(inputs, outputs)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer or keras.optimizers.Adam(0.05), loss, metrics=["accuracy"])
    return model


def weight_difference(first, second):
    return max(
        float(np.max(np.abs(a - b))) for a, b in zip(first.get_weights(), second.get_weights())
    )


def fitted(model, x, y):
    return model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0).history


def test_a_nan_batch_is_skipped_and_the_rest_clipped_as_global_clipnorm():
    x, y = classification_data()
    bad = x.copy()
    bad[BATCH : 2 * BATCH] = np.nan  # the second of three batches
    guarded = classifier(True)
    history = fitted(guarded, bad, y)
    kept = np.r_[0:BATCH, 2 * BATCH : 3 * BATCH]
    reference = classifier(False, optimizer=keras.optimizers.Adam(0.05, global_clipnorm=1.0))
    expected = fitted(reference, x[kept], y[kept])
    # The same steps on the same batches. Keras scales by clip / max(norm, clip), the companion
    # by 1 / max(norm / clip, 1): with clip = 1 the same float, so the weights agree exactly.
    assert weight_difference(guarded, reference) == 0.0
    assert history["skipped_steps"] == [1.0]
    assert history["loss"] == expected["loss"]
    assert history["accuracy"] == expected["accuracy"]
    assert int(ops.convert_to_numpy(guarded.optimizer.iterations)) == 2


def test_without_nan_and_clip_the_guarded_step_is_keras_own():
    x, y = classification_data()
    guarded, plain = classifier(True, clip=None), classifier(False)
    history, expected = fitted(guarded, x, y), fitted(plain, x, y)
    assert weight_difference(guarded, plain) == 0.0  # the same operations
    assert history["skipped_steps"] == [0.0]
    assert history["loss"] == expected["loss"]


def test_a_subclassed_guarded_model_trains():
    class TwoLayers(GuardedModel):
        def __init__(self):
            super().__init__(clip_norm=0.5)
            self.hidden, self.out = keras.layers.Dense(8), keras.layers.Dense(1)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

    keras.utils.set_random_seed(0)
    model = TwoLayers()
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x, _ = classification_data()
    history = model.fit(x, x[:, :1], batch_size=BATCH, epochs=2, verbose=0).history
    assert history["skipped_steps"] == [0.0, 0.0] and history["loss"][1] < history["loss"][0]


def numpy_ece(probabilities, labels, bins):
    confidence = probabilities.max(axis=1)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    correct = probabilities.argmax(axis=1) == labels
    gaps = [abs(correct[which == b].sum() - confidence[which == b].sum()) for b in range(bins)]
    return sum(gaps) / len(labels)


def test_the_calibration_error_of_the_docstring():
    metric = ExpectedCalibrationError(num_bins=10)
    metric.update_state([0, 1], [[0.9, 0.1], [0.7, 0.3]])
    assert float(ops.convert_to_numpy(metric.result())) == pytest.approx(0.4, abs=1e-7)


def test_the_calibration_error_as_a_compiled_metric_matches_numpy():
    x, y = classification_data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=[ExpectedCalibrationError(10)])
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    probabilities = model.predict(x, verbose=0)
    logs = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    # float32 sums of 48 numbers below 1 against NumPy's float64: a few 1e-7
    assert logs["expected_calibration_error"] == pytest.approx(
        numpy_ece(probabilities, y, 10), abs=1e-6
    )


class Batches(keras.utils.PyDataset):
    """``(x, y)`` in order, ``size`` rows a batch: a PyDataset, which every backend's fit reads."""

    def __init__(self, x, y, size):
        super().__init__()
        self.x, self.y, self.size = x, y, size

    def __len__(self):
        return -(-len(self.x) // self.size)

    def __getitem__(self, index):
        rows = slice(index * self.size, (index + 1) * self.size)
        return self.x[rows], self.y[rows]


def range_inputs(kind, x, y):
    """The same batches of 16 rows as each kind of input ``find_learning_rate`` takes."""
    if kind == "arrays":
        return (x, y), {"batch_size": BATCH}
    if kind == "PyDataset":
        return Batches(x, y, BATCH), {}
    if kind == "DataLoader":
        data = pytest.importorskip("torch.utils.data")
        pairs = data.TensorDataset(*(data.default_convert(a) for a in (x, y)))
        return data.DataLoader(pairs, batch_size=BATCH, shuffle=False), {}
    tf = pytest.importorskip("tensorflow")  # a JAX or PyTorch user may not have it
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), {}


@pytest.mark.parametrize("kind", ["arrays", "PyDataset", "DataLoader", "tf.data"])
def test_find_learning_rate_takes_arrays_a_py_dataset_and_a_data_loader(kind):
    x, y = classification_data()  # 3 batches, repeated over the 12 steps
    dataset, options = range_inputs(kind, x, y)
    model = classifier(False)
    result = find_learning_rate(model, dataset, min_lr=1e-4, max_lr=1.0, steps=12, **options)
    assert len(result.losses) == len(result.learning_rates) == 12 and not result.diverged
    np.testing.assert_allclose(result.learning_rates, np.geomspace(1e-4, 1.0, 12), rtol=1e-6)
    assert weight_difference(model, classifier(False)) == 0.0  # the weights were put back
    # The loss of each step is that of its batch, the model as the steps before left it: the
    # same as a hand-run of those steps, batch by batch, cycling through the data.
    reference = classifier(False)
    for step, rate in enumerate(result.learning_rates[:4]):
        rows = slice(step % 3 * BATCH, (step % 3 + 1) * BATCH)
        logs = reference.evaluate(x[rows], y[rows], verbose=0, return_dict=True)
        assert result.losses[step] == pytest.approx(logs["loss"], rel=1e-5), step
        reference.optimizer.learning_rate = rate
        reference.train_on_batch(x[rows], y[rows])


def test_find_learning_rate_refuses_what_it_cannot_read_in_the_project_form():
    x, y = classification_data()
    model = classifier(False)
    with pytest.raises(TypeError, match=r"^dataset: expected a tf.data.Dataset, a keras.utils"):
        find_learning_rate(model, [x, y])
    with pytest.raises(ValueError, match=r"^dataset: expected \(x, y\) arrays of the same len"):
        find_learning_rate(model, (x, y[:-1]))
    with pytest.raises(ValueError, match=r"^batch_size: expected None for a dataset"):
        find_learning_rate(model, Batches(x, y, BATCH), batch_size=BATCH)
    with pytest.raises(ValueError, match=r"^dataset: expected at least one batch, got none"):
        find_learning_rate(model, Batches(x[:0], y[:0], BATCH))
    assert weight_difference(model, classifier(False)) == 0.0


def test_find_learning_rate_names_an_empty_data_loader_of_unknown_length():
    data = pytest.importorskip("torch.utils.data")

    class Nothing(data.IterableDataset):  # no __len__: the DataLoader cannot say its length
        def __iter__(self):
            return iter([])

    model = classifier(False)
    with pytest.raises(ValueError, match=r"^dataset: expected at least one batch, got none"):
        find_learning_rate(model, data.DataLoader(Nothing(), batch_size=BATCH))
    assert weight_difference(model, classifier(False)) == 0.0


CHILD = """
import json, sys
import keras, numpy as np
import companion.fitting, companion.optimizers
model = keras.saving.load_model(sys.argv[1])
x = np.load(sys.argv[2])
print(json.dumps({
    "backend": keras.backend.backend(),
    "cls": type(model).__name__, "clip": model.clip_norm,
    "optimizer": type(model.optimizer).__name__,
    "schedule": type(model.optimizer._learning_rate).__name__,
    "outputs": model.predict(x, verbose=0).tolist(),
}))
"""


def test_a_keras_file_with_adamw_warmup_cosine_and_guarded_model_loads_in_a_fresh_process(
    tmp_path,
):
    x, y = classification_data()
    schedule = WarmupCosine(0.01, warmup_steps=2, decay_steps=4)
    model = classifier(True, clip=0.5, optimizer=AdamW(schedule, weight_decay=0.01))
    fitted(model, x, y)
    path, inputs = tmp_path / "guarded.keras", tmp_path / "x.npy"
    model.save(path)
    np.save(inputs, x)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    code = f"import runpy, sys; sys.argv = ['child', {str(path)!r}, {str(inputs)!r}]; "
    code += f"runpy.run_path({str(script)!r}, run_name='__main__')"
    env = {"KERAS_BACKEND": keras.backend.backend(), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    child = run_python(code, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    loaded = json.loads(child.stdout.strip().splitlines()[-1])
    assert loaded["backend"] == keras.backend.backend()
    assert (loaded["cls"], loaded["clip"]) == ("GuardedModel", 0.5)
    assert (loaded["optimizer"], loaded["schedule"]) == ("AdamW", "WarmupCosine")
    # The same weights and the same backend: the same float32 computation.
    np.testing.assert_allclose(loaded["outputs"], model.predict(x, verbose=0), rtol=0, atol=1e-6)


def test_under_mixed_float16_a_nan_batch_is_skipped_by_the_loss_scale_optimizer_too():
    x, _ = classification_data()
    bad = x.copy()
    bad[BATCH : 2 * BATCH] = np.nan
    keras.config.set_dtype_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8,))
        hidden = keras.layers.Dense(16)(inputs)
        model = GuardedModel(
            inputs=inputs, outputs=keras.layers.Dense(1, dtype="float32")(hidden), clip_norm=1.0
        )
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(keras.optimizers.SGD(0.1), "mse")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    history = model.fit(bad, x[:, :1], batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    assert history.history["skipped_steps"] == [1.0, 1.0]
    assert np.isfinite(history.history["loss"]).all()
    assert int(ops.convert_to_numpy(model.optimizer.iterations)) == 4  # 2 good batches a epoch
    assert all(np.isfinite(w).all() for w in model.get_weights())
