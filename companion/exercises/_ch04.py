"""Chapter 4, custom layers: a kernel constraint, inverted dropout, a normalised residual block."""

from __future__ import annotations

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
