"""Chapter 4, custom layers: a kernel constraint, inverted dropout, a layer that loads in a fresh
process, a normalised residual block."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

from companion.exercises._framework import LAYER_CLASS, Exercise, expect
from companion.exercises._probes import config_through_json, save_and_reload


def _constrained_model(answer, context):
    """A two-layer model whose first layer is the answer with ``NonNeg``, trained briefly."""
    import keras

    def make():
        keras.utils.set_random_seed(1)
        layer = answer(16, activation="relu", kernel_constraint=keras.constraints.NonNeg())
        model = keras.Sequential([keras.Input((8,)), layer, keras.layers.Dense(3)])
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        rng = np.random.default_rng(0)
        x = rng.normal(size=(128, 8)).astype("float32")
        y = rng.integers(0, 3, size=128)
        before = np.asarray(layer.kernel).copy()
        model.fit(x, y, epochs=2, batch_size=32, verbose=0)
        return model, before

    return context.once("constrained", make)


def kernel_stays_non_negative(answer, context):
    """The kernel has no negative entry after fit with NonNeg"""
    model, before = _constrained_model(answer, context)
    after = np.asarray(model.layers[0].kernel)
    expect(before.min() < 0, "expected some negative kernel entries at initialisation, got none")
    expect(
        after.min() >= 0,
        f"expected every kernel entry >= 0 after fit, got {int(np.sum(after < 0))} negative "
        f"(is the constraint passed to add_weight(constraint=...)?)",
    )


def constraint_survives_keras_file(answer, context):
    """The .keras round trip keeps the constraint and the kernel"""
    import keras

    model, _ = _constrained_model(answer, context)
    reloaded = save_and_reload(model, answer)
    constraint = getattr(reloaded.layers[0], "kernel_constraint", None)
    expect(
        isinstance(constraint, keras.constraints.NonNeg),
        f"expected kernel_constraint NonNeg after reloading, got {type(constraint).__name__} "
        "(does get_config serialize it with keras.constraints.serialize?)",
    )
    expect(
        np.array_equal(np.asarray(reloaded.layers[0].kernel), np.asarray(model.layers[0].kernel)),
        "expected the reloaded kernel to equal the trained one, got different values",
    )


def _dropped(answer, context):
    def make():
        layer = answer(0.3, seed=0)
        ones = np.ones((400, 250), "float32")
        return layer, ones, np.asarray(layer(ones, training=True))

    return context.once("dropped", make)


def identity_at_inference(answer, context):
    """At inference (training=False) the layer is the identity"""
    layer, ones, _ = _dropped(answer, context)
    for training in (None, False):
        out = np.asarray(layer(ones, training=training))
        expect(
            np.array_equal(out, ones),
            f"expected the input unchanged with training={training}, got "
            f"{float(np.mean(out == 0)):.1%} zeros and mean {out.mean():.3f}",
        )


def drops_a_fraction_rate(answer, context):
    """In training about `rate` of the entries are zero"""
    _, ones, out = _dropped(answer, context)
    fraction = float(np.mean(out == 0))
    bound = 5 * np.sqrt(0.3 * 0.7 / ones.size)
    expect(
        abs(fraction - 0.3) < bound,
        f"expected a fraction of zeros of 0.3 ± {bound:.4f} for rate=0.3, got {fraction:.4f}",
    )


def survivors_scaled(answer, context):
    """Survivors are scaled by 1 / (1 - rate), so the mean is kept"""
    _, ones, out = _dropped(answer, context)
    kept = out[out != 0]
    expect(kept.size > 0, "expected some entries to survive, got all zeros")
    expect(
        np.allclose(kept, 1 / 0.7),
        f"expected survivors of 1 / (1 - 0.3) = {1 / 0.7:.4f}, got values from "
        f"{kept.min():.4f} to {kept.max():.4f} (scale by 1 / (1 - rate), not by rate)",
    )


def rate_in_config(answer, context):
    """get_config holds rate, and from_config rebuilds the layer"""
    layer, _, _ = _dropped(answer, context)
    rebuilt = config_through_json(layer)
    expect(
        float(getattr(rebuilt, "rate", -1)) == 0.3,
        f"expected rate 0.3 after from_config(get_config()), got "
        f"{getattr(rebuilt, 'rate', 'no rate attribute')}",
    )


def _rbf_reference(x, centers, gamma):
    """``exp(-gamma * |x - centers[:, j]|**2)`` for each unit ``j``, in float64."""
    squared = ((x[:, :, None].astype("float64") - centers[None].astype("float64")) ** 2).sum(1)
    return np.exp(-gamma * squared)


def _rbf_probe():
    """Centers for 4 features and 3 units, and a batch of 8, the same for every check."""
    rng = np.random.default_rng(4)
    return (
        rng.normal(size=(4, 3)).astype("float32"),
        (0.5 * rng.normal(size=(8, 4))).astype("float32"),
    )


def _built_rbf(answer, gamma=0.5):
    """``answer(3, gamma=gamma)`` built for 4 features, its centers set to the probe's."""
    import tensorflow as tf

    centers, x = _rbf_probe()
    layer = answer(3, gamma=gamma)
    layer.build((None, 4))
    layer.set_weights([centers])
    with tf.device("/CPU:0"):  # the same kernels on every machine
        return layer, x, np.asarray(layer(x))


def rbf_weights_in_build(answer, context):
    """build creates one weight, (input width, units), from the input it is given"""
    layer = answer(3, gamma=0.5)
    expect(
        not layer.weights,
        f"expected no weights before the layer sees an input, got {len(layer.weights)} "
        "(created in __init__? there the input width is unknown)",
    )
    for width in (5, 7):
        layer = answer(3, gamma=0.5)
        layer.build((None, width))
        shapes = [tuple(weight.shape) for weight in layer.weights]
        expect(
            shapes,
            f"expected one weight of shape ({width}, 3) after build((None, {width})), got none "
            "(created in call? Keras refuses new weights once a layer is built)",
        )
        expect(
            shapes == [(width, 3)],
            f"expected one weight of shape ({width}, 3) after build((None, {width})), got "
            f"{shapes} (take the width from input_shape[-1], not a fixed number)",
        )


def rbf_computes_the_formula(answer, context):
    """The output is exp(-gamma * squared distance to each center)"""
    centers, _ = _rbf_probe()
    _, x, got = _built_rbf(answer)
    expected = _rbf_reference(x, centers, 0.5)
    expect(
        got.shape == expected.shape,
        f"expected an output of shape {expected.shape} for 8 rows and 3 units, got {got.shape} "
        "(sum the squares over the features axis only)",
    )
    error = float(np.max(np.abs(got - expected)))
    expect(
        error < 1e-5,
        f"expected exp(-gamma * squared distance) within 1e-5, got an error of {error:.3g} "
        "(squared distance, not distance; multiplied by -gamma before exp)",
    )


def rbf_config_holds_arguments(answer, context):
    """get_config holds units and gamma: from_config rebuilds a layer that computes the same"""
    import tensorflow as tf

    layer, x, before = _built_rbf(answer)
    rebuilt = config_through_json(layer)
    rebuilt.build((None, 4))
    rebuilt.set_weights(layer.get_weights())
    with tf.device("/CPU:0"):
        after = np.asarray(rebuilt(x))
    default = _rbf_reference(x, _rbf_probe()[0], 1.0)
    missing = (
        " (it computes as with the default gamma=1.0: is gamma in get_config?)"
        if after.shape == default.shape and np.allclose(after, default, atol=1e-5)
        else ""
    )
    expect(
        after.shape == before.shape and np.allclose(after, before, atol=1e-6),
        "expected the layer rebuilt from get_config (through JSON) to compute what gamma=0.5 "
        f"computes, got different outputs{missing}",
    )


def rbf_registered(answer, context):
    """The class is registered, so load_model can find it by name"""
    import keras

    name = keras.saving.get_registered_name(answer)
    expect(
        keras.saving.get_registered_object(name) is answer,
        f"expected a registered class, got {answer.__name__} unregistered: a fresh process "
        "finds a class only by its registered name (decorate it with "
        "@keras.saving.register_keras_serializable)",
    )


def _importable_from(answer):
    """The folders a fresh process needs on its path to import ``answer``'s module."""
    expect(
        answer.__module__ != "__main__",
        f"expected a class a fresh process can import, got {answer.__name__} defined in the "
        "notebook itself (__main__, which no other process has): write it to a module file "
        "and import it from there",
    )
    return [entry for entry in [os.getcwd(), *sys.path] if entry and os.path.isdir(entry)]


def _load_in_this_process(model_path, module, x_path, out_path):
    """Import ``module``, load the model, save its CPU output: run in the fresh process."""
    import importlib

    import keras
    import tensorflow as tf

    from companion._text import error_text

    importlib.import_module(module)
    try:
        model = keras.saving.load_model(model_path)
    except Exception as error:  # noqa: BLE001 - the error's first sentence is the finding
        print(json.dumps({"error": error_text(error).split(". ")[0]}))
        return
    with tf.device("/CPU:0"):
        np.save(out_path, np.asarray(model(np.load(x_path))))
    config = model.layers[-1].get_config()
    print(json.dumps({"error": None, "config": config}, default=repr))


def rbf_survives_a_fresh_process(answer, context):
    """A model saved to .keras loads in a fresh Python process: same outputs, same config"""
    import keras
    import tensorflow as tf

    from companion.notebook import run_python

    search_path = _importable_from(answer)
    centers, x = _rbf_probe()
    model = keras.Sequential([keras.Input((4,)), answer(3, gamma=0.5)])
    model.set_weights([centers])
    with tf.device("/CPU:0"):
        expected = np.asarray(model(x))
    config = json.loads(json.dumps(model.layers[-1].get_config(), default=repr))
    with tempfile.TemporaryDirectory() as folder:
        paths = [os.path.join(folder, name) for name in ("m.keras", "x.npy", "out.npy")]
        model.save(paths[0])
        np.save(paths[1], x)
        request = (paths[0], answer.__module__, paths[1], paths[2])
        child = run_python(
            "from companion.exercises._ch04 import _load_in_this_process\n"
            f"_load_in_this_process(*{request!r})\n",
            env={"PYTHONPATH": os.pathsep.join(search_path)},
        )
        lines = child.stdout.strip().splitlines()
        expect(
            child.returncode == 0 and lines,
            f"expected the fresh process to import {answer.__module__} and load the file, got "
            f"{(child.stderr.strip().splitlines() or ['no output'])[-1]}",
        )
        found = json.loads(lines[-1])
        expect(
            found["error"] is None,
            f"expected load_model to find the class in a fresh process that imports "
            f"{answer.__module__}, got {found['error']} (is the class in that module decorated "
            "with @keras.saving.register_keras_serializable?)",
        )
        got = np.load(paths[2])
    gap = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else np.inf
    expect(
        gap <= 1e-6,
        f"expected the reloaded model's outputs within 1e-6 of the saved model's, got max "
        f"|difference| {gap:.3g} (is every constructor argument, gamma too, in get_config?)",
    )
    changed = sorted(
        key for key in {*config, *found["config"]} if config.get(key) != found["config"].get(key)
    )
    expect(
        not changed,
        f"expected the reloaded layer's config to equal the saved one, got differences in "
        f"{changed}",
    )


def _normed_block(answer, context):
    def make():
        block = answer(6, hidden_units=8, norm=True, name="normed")
        block.build((None, 4))
        rng = np.random.default_rng(3)
        block.set_weights([rng.normal(size=w.shape).astype("float32") for w in block.weights])
        return block, rng.normal(size=(5, 4)).astype("float32")

    return context.once("block", make)


def output_matches_formula(answer, context):
    """The output is output_dense(hidden(LayerNorm(x))) + projection(x)"""
    block, x = _normed_block(answer, context)
    norm = getattr(block, "layer_norm", None)
    expect(norm is not None, "expected a layer_norm sublayer when norm=True, got none")
    gamma, beta = norm.get_weights()
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + norm.epsilon) * gamma + beta
    (w1, b1), (w2, b2) = block.hidden.get_weights(), block.output_dense.get_weights()
    expected = np.maximum(normed @ w1 + b1, 0) @ w2 + b2 + x @ block.projection.get_weights()[0]
    got = np.asarray(block(x))
    error = float(np.max(np.abs(got - expected)))
    expect(
        error < 1e-4,
        f"expected the normalised block's output within 1e-4, got an error of {error:.3g} "
        "(is the norm applied to the hidden layer's input, and the shortcut left unnormalised?)",
    )


def norm_built_with_the_block(answer, context):
    """build creates every weight: 7 after build(), the norm's included"""
    block, _ = _normed_block(answer, context)
    expect(
        len(block.weights) == 7,
        f"expected 7 weights after build (hidden 2, output 2, projection 1, norm 2), got "
        f"{len(block.weights)} (is the LayerNormalization built in build?)",
    )


def norm_survives_keras_file(answer, context):
    """norm is in get_config, and the .keras round trip gives the same outputs"""
    import keras

    block, x = _normed_block(answer, context)
    expect(
        config_through_json(block).norm is True,
        "expected norm=True after from_config(get_config()), got norm off",
    )
    plain = answer(6, hidden_units=8, norm=False)
    plain.build((None, 4))
    expect(
        len(plain.weights) == 5,
        f"expected 5 weights with norm=False, got {len(plain.weights)}",
    )
    model = keras.Sequential([keras.Input((4,)), block])
    reloaded = save_and_reload(model, answer)
    expect(
        np.array_equal(reloaded.predict(x, verbose=0), model.predict(x, verbose=0)),
        "expected the reloaded model's outputs to equal the original's, got different ones",
    )


EXERCISES = (
    Exercise(
        "4.1",
        "A kernel constraint.",
        LAYER_CLASS,
        (kernel_stays_non_negative, constraint_survives_keras_file),
        (
            "add_weight takes a constraint= argument; Keras applies it after every optimizer step.",
            "Store keras.constraints.get(kernel_constraint) in __init__, pass it to "
            "add_weight(constraint=...) in build, and return "
            "keras.constraints.serialize(...) from get_config.",
        ),
    ),
    Exercise(
        "4.2",
        "Inverted dropout.",
        LAYER_CLASS,
        (identity_at_inference, drops_a_fraction_rate, survivors_scaled, rate_in_config),
        (
            "call(self, inputs, training=None): return the inputs unchanged unless training "
            "is true.",
            "Draw keras.random.uniform with a keras.random.SeedGenerator made in __init__, "
            "keep the entries >= rate, and divide what you keep by 1 - rate.",
        ),
    ),
    Exercise(
        "4.3",
        "A layer that survives a fresh-process reload.",
        LAYER_CLASS,
        (
            rbf_weights_in_build,
            rbf_computes_the_formula,
            rbf_config_holds_arguments,
            rbf_registered,
            rbf_survives_a_fresh_process,
        ),
        (
            "A fresh Python process knows only what it imports. So the class must live in a "
            "module file, be registered with @keras.saving.register_keras_serializable, and "
            "its get_config must hold every constructor argument.",
            "Store units and gamma in __init__ and return both on top of super().get_config(). "
            "In build, add_weight(shape=(input_shape[-1], self.units), ...). In call, expand the "
            "inputs to (batch, features, 1), subtract the centers, square, sum over axis 1, "
            "multiply by -gamma and take keras.ops.exp. Write it all with %%writefile, then "
            "import it.",
        ),
    ),
    Exercise(
        "4.4",
        "A normalised residual block.",
        LAYER_CLASS,
        (output_matches_formula, norm_built_with_the_block, norm_survives_keras_file),
        (
            "A sublayer that needs no input shape can be created in __init__; it still has "
            "to be built before its weights exist.",
            "Create keras.layers.LayerNormalization in __init__ when norm is true, call its "
            "build(input_shape) from your build after super().build, apply it to the hidden "
            "layer's input only, and add norm to get_config.",
        ),
    ),
)
