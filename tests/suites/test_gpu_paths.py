"""The code paths Keras takes on a GPU, run on this CPU, over every public companion layer, model
and optimizer (and every op, in float16).

On a GPU, ``model.compile()``'s default ``jit_compile="auto"`` means XLA; readers who turn on
``mixed_float16`` compute in float16 with float32 variables and a loss-scale optimizer. Neither
ever happens on a CPU by itself: ``simulated_gpu`` makes ``compile`` choose as on a GPU (XLA then
compiles for the CPU, with the same missing kernels), and the policy is set explicitly.
"""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers.public_api import MODELS, OPTIMIZERS, data, public_classes, vector_model

import companion
import companion.gradients
import companion.kernels
import companion.ops
import companion.pyfunc
from companion.diagnostics import simulated_gpu
from companion.optimizers import (
    MagnitudePruning,
)


@pytest.fixture
def policy(request):
    """Set the global dtype policy for one test and restore float32 afterwards."""
    keras.mixed_precision.set_global_policy(request.param)
    try:
        yield request.param
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_every_public_layer_model_and_optimizer_is_covered():
    covered = set(MODELS) | {name.split(",")[0] for name in OPTIMIZERS}
    assert public_classes(keras.layers.Layer) - covered == set()  # keras.Model is a Layer
    assert public_classes(keras.optimizers.Optimizer) - covered == set()
    assert {"image_branch", "meta_branch", "functional_multimodal"} <= covered


def test_simulated_gpu_restores_the_device_list_even_after_an_error():
    listed = tf.config.list_physical_devices
    with pytest.raises(RuntimeError, match="boom"), simulated_gpu():
        assert [d.device_type for d in tf.config.list_physical_devices("GPU")] == ["GPU"]
        raise RuntimeError("boom")
    assert tf.config.list_physical_devices is listed
    assert not tf.config.list_physical_devices("GPU")  # this machine has none


def _one_step(model, kind, optimizer, *, gpu, callbacks=()):
    """Compile (as on a GPU when ``gpu``), fit one batch; the loss and the weights before/after."""
    x, y = data(kind)
    model(x)  # build
    # chapter 6's models: softmax
    logits = model.layers[-1].get_config().get("activation") != "softmax"
    with simulated_gpu() if gpu else contextlib.nullcontext():
        model.compile(
            optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=logits)
        )
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(
        x, y, batch_size=len(y), epochs=1, shuffle=False, verbose=0, callbacks=list(callbacks)
    )
    return history.history["loss"][0], before, [w.numpy() for w in model.trainable_weights]


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"], indirect=True)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_step_fit_with_the_choice_keras_makes_on_a_gpu(name, policy):
    build, xla, kind = MODELS[name]
    keras.utils.set_random_seed(0)
    model = build()
    loss, before, after = _one_step(model, kind, keras.optimizers.SGD(0.1), gpu=True)
    assert model.jit_compile is xla, (
        f"{name}: compile chose jit_compile={model.jit_compile} on a GPU"
    )
    assert np.isfinite(loss)
    assert any(not np.array_equal(b, a) for b, a in zip(before, after)), f"{name}: no weight moved"
    assert all(w.dtype == "float32" for w in model.weights), (
        "variables stay float32 under any policy"
    )
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        x, _ = data(kind)
        assert model(x).dtype == "float16", f"{name}: compute dtype should be float16"


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"], indirect=True)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_trains_under_xla_as_it_does_without(name, policy):
    results = []
    for gpu in (True, False):
        keras.utils.set_random_seed(0)
        model = vector_model(keras.layers.Dense(6, activation="relu"))
        results.append(_one_step(model, "vector", OPTIMIZERS[name](), gpu=gpu))
        assert model.jit_compile is gpu
    (loss_xla, before, after_xla), (loss_graph, _, after_graph) = results
    assert np.isfinite(loss_xla) and any(
        not np.array_equal(b, a) for b, a in zip(before, after_xla)
    )
    if "GaussianNoise" in name:
        return
    tolerance = 1e-5 if policy == "float32" else 2e-3  # float16 rounds differently when XLA fuses
    for xla_weight, graph_weight in zip(after_xla, after_graph):
        np.testing.assert_allclose(xla_weight, graph_weight, atol=tolerance)


@pytest.mark.parametrize("policy", ["mixed_float16"], indirect=True)
def test_magnitude_pruning_under_xla_and_mixed_precision(policy):
    keras.utils.set_random_seed(0)
    model = vector_model(keras.layers.Dense(8, activation="relu"))
    pruning = MagnitudePruning(0.5, begin_step=0, end_step=1, frequency=1)
    loss, _, after = _one_step(
        model, "vector", keras.optimizers.SGD(0.1), gpu=True, callbacks=[pruning]
    )
    assert model.jit_compile is True and np.isfinite(loss)
    kernels = [w for w in model.trainable_weights if "kernel" in w.path]
    assert all(float(np.mean(w.numpy() == 0)) == 0.5 for w in kernels)


FLOAT16_OPS = {
    "ops.swish": lambda x: companion.ops.swish(x),
    "ops.softplus": lambda x: companion.ops.softplus(x),
    "ops.mish": lambda x: companion.ops.mish(x),
    "ops.logsumexp": lambda x: companion.ops.logsumexp(x, axis=-1),
    "ops.masked_mean": lambda x: companion.ops.masked_mean(x, x > 0, axis=-1),
    "gradients.clipped_identity": lambda x: companion.gradients.clipped_identity(x),
    "gradients.safe_norm": lambda x: companion.gradients.safe_norm(x),
    "gradients.log1p_exp": lambda x: companion.gradients.log1p_exp(x),
    "pyfunc.native_blur": lambda x: companion.pyfunc.native_blur(tf.reshape(x, (1, 4, 4, 1)), 3),
    "kernels.cpp_blur": lambda x: companion.kernels.cpp_blur(tf.reshape(x, (1, 4, 4, 1)), 3),
}


@pytest.mark.parametrize("name", sorted(FLOAT16_OPS))
def test_every_op_computes_in_float16_close_to_float32_with_a_gradient(name):
    op = FLOAT16_OPS[name]
    x32 = tf.constant(np.random.default_rng(0).normal(size=(4, 4)).astype("float32"))
    x16 = tf.cast(x32, tf.float16)
    with tf.GradientTape() as tape:
        tape.watch(x16)
        y16 = op(x16)
    gradient = tape.gradient(y16, x16)
    assert y16.dtype == tf.float16 and gradient is not None and gradient.dtype == tf.float16
    assert np.isfinite(y16.numpy()).all() and np.isfinite(gradient.numpy()).all()
    np.testing.assert_allclose(y16.numpy().astype("float32"), op(x32).numpy(), rtol=5e-3, atol=5e-3)


def test_chapter_14s_tape_loop_row_holds_where_fit_compiles_with_xla():
    """On a GPU TensorFlow's fit compiles with XLA, which draws other dropout masks than the
    eager loop; the row's probe pins ``jit_compile=False`` on the model it compares with."""
    from companion.backends._autodiff import probe_tape_loop
    from companion.backends._probes import UNCHANGED

    with simulated_gpu():
        assert probe_tape_loop() == UNCHANGED
