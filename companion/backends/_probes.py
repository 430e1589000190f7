"""One probe per customisation that ports: each runs it on the running backend, checks the
numbers, and returns the table's cell for that backend."""

from __future__ import annotations

import functools

import keras
import numpy as np
from keras import ops

#: The three kinds of cell in chapter 14's table.
UNCHANGED = "runs unchanged"
CHANGED = "runs with this change: "
TF_ONLY = "TF-only → use "


def _numpy(tensor: object) -> np.ndarray:
    """A tensor of any backend as NumPy (``stop_gradient`` first: torch refuses a tensor that
    requires grad)."""
    return ops.convert_to_numpy(ops.stop_gradient(ops.convert_to_tensor(tensor)))


def _near(got: object, expected: object, bound: float, what: str) -> None:
    """Raise AssertionError unless ``got`` is within ``bound`` of ``expected`` everywhere."""
    gap = float(np.max(np.abs(_numpy(got) - _numpy(expected))))
    if not gap <= bound:
        raise AssertionError(f"{what}: max |difference| {gap:.3g} > {bound:g}")


def _data(n: int = 32, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)).astype("float32"), rng.normal(size=(n, 1)).astype(
        "float32"
    )


def probe_composed_op() -> str:
    """A swish written in ``keras.ops`` equals NumPy's x * sigmoid(x) within 1e-6."""

    def swish(x, beta=1.0):
        return x * ops.sigmoid(beta * x)

    x = np.linspace(-5, 5, 11, dtype="float32")
    _near(swish(ops.convert_to_tensor(x)), x / (1 + np.exp(-x)), 1e-6, "swish")
    return UNCHANGED


def probe_custom_layer() -> str:
    """``CustomDense`` and ``AdditiveGaussianNoise`` (``build``, ``add_weight``, ``get_config``,
    a ``SeedGenerator``): noise only in training, a config round trip with the same outputs."""
    from companion.layers import AdditiveGaussianNoise, CustomDense

    x, _ = _data(8)
    model = keras.Sequential([keras.Input((4,)), CustomDense(3), AdditiveGaussianNoise(0.5)])
    copy = keras.Sequential.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    _near(copy(x), model(x), 0.0, "from_config")
    if np.allclose(_numpy(model(x, training=True)), _numpy(model(x))):
        raise AssertionError("no noise in training")
    return UNCHANGED


def probe_modelling_apis() -> str:
    """The same layers as a Sequential, a functional and a subclassed model: equal outputs."""

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(8, activation="relu")
            self.out = keras.layers.Dense(1)

        def call(self, x):
            return self.out(self.hidden(x))

    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    functional = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    sequential = keras.Sequential([keras.Input((4,)), *functional.layers[1:]])
    subclassed = Subclassed()
    x, _ = _data(8)
    subclassed(x)
    subclassed.set_weights(functional.get_weights())
    _near(sequential(x), functional(x), 0.0, "Sequential")
    _near(subclassed(x), functional(x), 1e-6, "subclassed")
    return UNCHANGED


def _numpy_ece(labels: np.ndarray, probabilities: np.ndarray, bins: int) -> float:
    """The expected calibration error, in NumPy: the reference for the metric."""
    confidence, predicted = probabilities.max(1), probabilities.argmax(1)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            gap = np.mean(predicted[inside] == labels[inside]) - confidence[inside].mean()
            total += inside.mean() * abs(gap)
    return float(total)


def probe_loss_and_metric() -> str:
    """A loss written in ``keras.ops`` trains in ``fit``; ``ExpectedCalibrationError`` as a
    compiled metric equals NumPy's ECE within 1e-5."""
    from companion.fitting import ExpectedCalibrationError

    def hinge_squared(y_true, y_pred):
        return ops.mean(ops.square(ops.maximum(1.0 - y_true * y_pred, 0.0)), axis=-1)

    x, y = _data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", hinge_squared)
    losses = model.fit(x, np.sign(y), epochs=3, verbose=0).history["loss"]
    if not losses[-1] < losses[0]:
        raise AssertionError(f"the loss did not fall: {losses}")
    labels = (y[:, 0] > 0).astype("int32")
    classifier = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, "softmax")])
    classifier.compile(
        loss="sparse_categorical_crossentropy", metrics=[ExpectedCalibrationError(num_bins=5)]
    )
    result = classifier.evaluate(x, labels, batch_size=8, verbose=0, return_dict=True)
    probabilities = _numpy(classifier(x))
    expected = _numpy_ece(labels, probabilities, 5)
    _near(result["expected_calibration_error"], expected, 1e-5, "ECE")
    return UNCHANGED


def probe_callback() -> str:
    """A callback that reads the weights through ``self.model`` after every batch and stops
    training after the second epoch."""

    class Watch(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.norms = []

        def on_train_batch_end(self, batch, logs=None):
            kernel = self.model.layers[0].kernel
            self.norms.append(float(_numpy(ops.norm(kernel))))

        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = epoch >= 1

    x, y = _data()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    watch = Watch()
    history = model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[watch])
    if len(history.epoch) != 2 or len(watch.norms) != 8 or len(set(watch.norms)) != 8:
        raise AssertionError(f"epochs {history.epoch}, norms {watch.norms}")
    return UNCHANGED


#: Training steps of the optimizer row: 25 epochs of 8 batches, the schedule's whole span.
ADAMW_STEPS = 200
#: How far the companion's ``AdamW`` may end from ``keras.optimizers.AdamW`` after
#: ``ADAMW_STEPS``, by backend. Measured on a CPU: 0 on TensorFlow (with XLA too) and JAX, the
#: same float32 operations in the same order (1e-5 leaves room for a GPU's fusions, not
#: measured); 6.8e-6 on PyTorch 2.11 and 2.13, whose Keras AdamW is its own version, every
#: variable updated at once with ``torch._foreach_*`` kernels that round differently.
ADAMW_BOUNDS = {"tensorflow": 1e-5, "jax": 1e-5, "torch": 5e-5}


@functools.cache
def adamw_drift() -> float:
    """The largest weight gap between the companion's ``AdamW`` with ``WarmupCosine`` and
    ``keras.optimizers.AdamW`` with ``CosineDecay`` (bias excluded from decay), after
    ``ADAMW_STEPS`` steps of ``fit`` on a Dense(16, relu), Dense(1) regressor from the same seed
    (cached: the optimizer row's probe measures it once per process).

    Taught in chapter 14, "One table, generated by running".
    """
    from companion.optimizers import AdamW, WarmupCosine

    x, y = _data()
    epochs, warmup = ADAMW_STEPS // 8, ADAMW_STEPS // 10
    weights = []
    for ours in (True, False):
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(16, "relu"), keras.layers.Dense(1)]
        )
        if ours:
            optimizer = AdamW(WarmupCosine(0.1, warmup, ADAMW_STEPS - warmup), weight_decay=0.1)
        else:
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0, ADAMW_STEPS - warmup, warmup_target=0.1, warmup_steps=warmup
            )
            optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.1)
            optimizer.exclude_from_weight_decay(var_names=["bias"])
        model.compile(optimizer, "mse")
        model.fit(x, y, batch_size=4, epochs=epochs, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    if int(_numpy(model.optimizer.iterations)) != ADAMW_STEPS:
        raise AssertionError(f"{int(_numpy(model.optimizer.iterations))} steps")
    return max(float(np.max(np.abs(a - b))) for a, b in zip(*weights))


def probe_optimizer_and_schedule() -> str:
    """The companion's ``AdamW`` with its ``WarmupCosine`` schedule trains to the weights of
    ``keras.optimizers.AdamW`` with ``CosineDecay`` within ``ADAMW_BOUNDS`` after
    ``ADAMW_STEPS`` steps (``adamw_drift``)."""
    bound = ADAMW_BOUNDS[keras.backend.backend()]
    if not adamw_drift() <= bound:
        raise AssertionError(f"AdamW after {ADAMW_STEPS} steps: {adamw_drift():.3g} > {bound:g}")
    return UNCHANGED


def probe_compute_loss() -> str:
    """An overridden ``compute_loss`` that adds an L2 penalty trains as ``kernel_regularizer``."""

    class Penalised(keras.Sequential):
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            loss = super().compute_loss(x, y, y_pred, sample_weight, training)
            return loss + 0.01 * ops.sum(ops.square(self.layers[0].kernel))

    x, y = _data()
    weights = []
    for model_class, regularizer in ((Penalised, None), (keras.Sequential, "l2")):
        keras.utils.set_random_seed(0)
        dense = keras.layers.Dense(1, kernel_regularizer=regularizer)
        model = model_class([keras.Input((4,)), dense])
        model.compile(keras.optimizers.SGD(0.1), "mse")
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for ours, theirs in zip(*weights):
        _near(ours, theirs, 1e-6, "compute_loss")
    return UNCHANGED


def probe_custom_gradient() -> str:
    """``keras.ops.custom_gradient`` for log(1 + e^x) with its gradient sigmoid(x): the
    TensorFlow/JAX form ``grad(upstream)`` first, then the form every backend accepts."""
    from companion.backends._autodiff import gradient

    def log1p_exp(grad_form):
        @ops.custom_gradient
        def forward(x):
            def grad_one(upstream):
                return upstream * ops.sigmoid(x)

            def grad_any(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream
                return upstream * ops.sigmoid(x)

            return ops.softplus(x), grad_one if grad_form == "one" else grad_any

        return forward

    x = np.array([-2.0, 0.0, 3.0], "float32")
    expected = 1 / (1 + np.exp(-x))
    try:
        _near(gradient(log1p_exp("one"), x), expected, 1e-6, "grad(upstream)")
        return UNCHANGED
    except TypeError:
        _near(gradient(log1p_exp("any"), x), expected, 1e-6, "grad(*args, upstream=None)")
        return CHANGED + "def grad(*args, upstream=None)"
