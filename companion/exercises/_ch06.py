"""Chapter 6, modelling APIs: an identity shortcut, one run in two APIs, a subclass built before
any data, a modality switch."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import MAPPING, MODEL_CLASS, Exercise, expect

CONCATENATED = 48  # image_units 32 + meta_units[1] 16: the width the fusion block receives


def _fusion(answer):
    import keras

    model = answer.get("model")
    expect(
        isinstance(model, keras.Model),
        f"expected answer['model'] to be the keras.Model functional_multimodal built, got "
        f"{type(model).__name__}",
    )
    return model.get_layer("fusion")


def no_projection(answer, context):
    """The fusion block of answer['model'] has no projection (width 48 in, 48 out)"""
    fusion = _fusion(answer)
    expect(
        fusion.projection is None,
        f"expected no projection, got a projection to width {fusion.units} (fused_units must "
        f"equal the concatenated width, image_units + meta_units[1] = {CONCATENATED})",
    )


def count_by_hand(answer, context):
    """answer['parameters'] equals the model's count_params()"""
    fusion = _fusion(answer)
    model = answer["model"]
    expected, got = model.count_params(), answer.get("parameters")
    expect(
        isinstance(got, (int, np.integer)),
        f"expected answer['parameters'] to be your count as an int, got {type(got).__name__}",
    )
    gap = int(got) - expected
    widths = fusion.units
    likely = ""
    if gap == CONCATENATED * widths:
        likely = " (a projection counted: with equal widths the shortcut is the identity)"
    elif gap < 0:
        likely = " (are the biases counted, one per unit of every Dense and convolution?)"
    expect(gap == 0, f"expected count_params() = {expected}, got {got}{likely}")


def _pair(answer):
    import keras

    from companion.models import MultiModalModel

    functional, subclass = answer.get("functional"), answer.get("subclass")
    expect(
        isinstance(functional, keras.Model) and not isinstance(functional, MultiModalModel),
        f"expected answer['functional'] to be a functional_multimodal model, got "
        f"{type(functional).__name__}",
    )
    expect(
        isinstance(subclass, MultiModalModel),
        f"expected answer['subclass'] to be a MultiModalModel, got {type(subclass).__name__}",
    )
    return functional, subclass


def two_apis(answer, context):
    """answer['functional'] is Functional, answer['subclass'] a MultiModalModel"""
    _pair(answer)


def same_steps(answer, context):
    """Both models were trained for the same number of optimizer steps"""
    functional, subclass = _pair(answer)
    steps = []
    for model in (functional, subclass):
        optimizer = getattr(model, "optimizer", None)
        steps.append(None if optimizer is None else int(optimizer.iterations))
    expect(
        None not in steps and steps[0] == steps[1] and steps[0] > 0,
        f"expected both models compiled and fit for the same number of steps (> 0), got "
        f"{steps[0]} and {steps[1]} steps (functional, subclass)",
    )


def losses_agree(answer, context):
    """The two loss histories agree within 1e-5"""
    losses = answer["losses"]
    first, second = list(losses["functional"]), list(losses["subclass"])
    expect(
        len(first) == len(second) > 0,
        f"expected two loss histories of the same length, got {len(first)} and {len(second)}",
    )
    gap = max(abs(float(a) - float(b)) for a, b in zip(first, second))
    expect(
        gap < 1e-5,
        f"expected the losses within 1e-5, got a gap of {gap:.2g} (copy the weights before "
        "either fit, and fit both with shuffle=False and the same optimizer settings)",
    )


def weights_agree(answer, context):
    """The trained weights agree within 1e-5, layer by layer"""
    functional, subclass = _pair(answer)
    twins = {layer.name: layer for layer in subclass.layers}
    gap = 0.0
    for layer in functional.layers:
        twin = twins.get(layer.name)
        if not layer.weights or twin is None:
            continue
        for a, b in zip(layer.get_weights(), twin.get_weights()):
            gap = max(gap, float(np.max(np.abs(a - b))))
    expect(
        gap < 1e-5,
        f"expected the weights within 1e-5, got a gap of {gap:.2g} (were the functional "
        "model's weights copied into the subclass, with copy_weights, before training?)",
    )


SIDE, META, CLASSES = 16, 10, 6


TWO_BRANCH_SHAPES = [(None, 32, 32, 3), (None, 10)]
TWO_BRANCH_WIDTH = 48  # the concatenation: image_branch's 32 features + meta_branch's 16


def _two_branch_reference(num_classes):
    """The exercise's model with the Functional API: both branches, a concatenation, a softmax."""
    import keras

    from companion.models import image_branch, meta_branch

    # named layers: an unnamed one would take a name the chapter's later cells expect to be free
    images = keras.Input(TWO_BRANCH_SHAPES[0][1:], name="image")
    meta = keras.Input(TWO_BRANCH_SHAPES[1][1:], name="meta")
    joined = keras.layers.Concatenate(name="concatenate")
    features = joined([image_branch(None)(images), meta_branch(None)(meta)])
    output = keras.layers.Dense(num_classes, activation="softmax", name="classifier")(features)
    return keras.Model([images, meta], output, name="two_branch_reference")


def _built_two_branch(answer, context, num_classes=CLASSES):
    """``answer(num_classes)``, built for the exercise's shapes, not yet called on data."""

    def make():
        model = answer(num_classes)
        model.build(TWO_BRANCH_SHAPES)
        return model

    return context.once(f"two_branch_{num_classes}", make)


def _probe(rows=8):
    rng = np.random.default_rng(63)
    images = rng.normal(size=(rows, *TWO_BRANCH_SHAPES[0][1:])).astype("float32")
    return images, rng.normal(size=(rows, TWO_BRANCH_SHAPES[1][1])).astype("float32")


def built_before_data(answer, context):
    """build creates every weight, before any call on data"""
    model = _built_two_branch(answer, context)
    expect(
        len(model.weights) > 0,
        "expected weights after build, got none (without a build method of your own, "
        "Model.build only marks the model built: build each layer with its input shape)",
    )
    unbuilt = [layer.name for layer in model.layers if not layer.built]
    expect(
        not unbuilt,
        f"expected every layer built after build, got {unbuilt} unbuilt (build each one, in "
        "build, with the shape it will receive)",
    )


def count_like_functional(answer, context):
    """count_params() after build equals the same layers wired with the Functional API"""
    import keras

    model = _built_two_branch(answer, context)
    expected, got = _two_branch_reference(CLASSES).count_params(), model.count_params()
    likely = ""
    for layer in model.layers:
        kernel = getattr(layer, "kernel", None)
        if isinstance(layer, keras.layers.Dense) and kernel is not None:
            if kernel.shape[0] != TWO_BRANCH_WIDTH:
                likely = (
                    f" (the classifier's kernel is built for {kernel.shape[0]} inputs: it "
                    f"receives the concatenation, 32 + 16 = {TWO_BRANCH_WIDTH} features)"
                )
    if not likely and got > expected:
        likely = " (a layer too many: this model has the two branches and a classifier only)"
    expect(got == expected, f"expected {expected:,} parameters, got {got:,}{likely}")


def probabilities_per_class(answer, context):
    """A pair (images, meta) gives one probability per class, for num_classes 6 and 4"""
    for num_classes in (CLASSES, 4):
        model = _built_two_branch(answer, context, num_classes)
        images, meta = _probe()
        out = np.asarray(model([images, meta]))
        expect(
            out.shape == (len(images), num_classes),
            f"expected an output of shape ({len(images)}, {num_classes}) for num_classes="
            f"{num_classes}, got {out.shape} (is num_classes passed to the classifier?)",
        )
        expect(
            np.allclose(out.sum(axis=1), 1.0, atol=1e-5) and (out >= 0).all(),
            f"expected probabilities (rows summing to 1), got row sums "
            f"{np.round(out.sum(axis=1), 3).tolist()} (a softmax on the classifier)",
        )


def uses_both_inputs(answer, context):
    """The output changes with the images and with the metadata"""
    model = _built_two_branch(answer, context)
    images, meta = _probe()
    base = np.asarray(model([images, meta]))
    for name, pair in (("images", [-images, meta]), ("metadata", [images, -3 * meta])):
        gap = float(np.max(np.abs(np.asarray(model(pair)) - base)))
        expect(
            gap > 1e-6,
            f"expected the output to change with the {name}, got the same output (does call "
            "feed each input to its branch and concatenate both?)",
        )


def _switch(answer, context):
    """The answer and a MultiModalModel with the same random weights, and a probe batch."""
    import keras

    from companion.models import MultiModalModel, copy_weights

    def make():
        shapes = {"image": (None, SIDE, SIDE, 3), "meta": (None, META)}
        parent = MultiModalModel(CLASSES)
        parent.build(shapes)
        rng = np.random.default_rng(6)
        # random biases too, so that zero metadata and zero metadata features differ
        parent.set_weights([0.3 * rng.normal(size=w.shape) for w in parent.get_weights()])
        model = answer(CLASSES)
        model.build(shapes)
        copy_weights(parent, model)
        probe = {
            "image": rng.normal(size=(8, SIDE, SIDE, 3)).astype("float32"),
            "meta": rng.normal(size=(8, META)).astype("float32"),
        }
        keras.utils.set_random_seed(6)
        return parent, model, probe

    return context.once("switch", make)


def off_ignores_meta(answer, context):
    """With use_meta=False the output does not depend on the metadata"""
    _, model, probe = _switch(answer, context)
    other = {"image": probe["image"], "meta": -3 * probe["meta"]}
    gap = float(
        np.max(np.abs(np.asarray(model(probe, use_meta=False)) - model(other, use_meta=False)))
    )
    expect(
        gap < 1e-6,
        f"expected the same output (within 1e-6) for other metadata when use_meta=False, got "
        f"a gap of "
        f"{gap:.2g} (is the flag read in call, and the metadata branch's output replaced?)",
    )


def off_zeroes_features(answer, context):
    """use_meta=False is the model on zero metadata features"""
    import keras

    _, model, probe = _switch(answer, context)
    images = model.image_branch(probe["image"])
    zeros = keras.ops.zeros((len(probe["meta"]), model.meta_units[-1]))
    expected = model.classifier(model.fusion(keras.ops.concatenate([images, zeros], axis=-1)))
    got = model(probe, use_meta=False)
    gap = float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))
    expect(
        gap < 1e-5,
        f"expected the output on zero metadata features within 1e-5, got a gap of {gap:.2g} "
        "(zero the meta branch's output, not its input: its biases turn zero inputs into "
        "nonzero features)",
    )


def on_is_parent(answer, context):
    """use_meta=True, and no flag, give MultiModalModel's output"""
    parent, model, probe = _switch(answer, context)
    expected = np.asarray(parent(probe))
    for kwargs in ({"use_meta": True}, {}):
        gap = float(np.max(np.abs(np.asarray(model(probe, **kwargs)) - expected)))
        expect(
            gap < 1e-6,
            f"expected the parent's output with {kwargs or 'no flag'}, got a gap of {gap:.2g}",
        )


def one_trace_per_flag(answer, context):
    """A tf.function around the model traces once per flag value"""
    import tensorflow as tf

    _, model, probe = _switch(answer, context)
    traced = tf.function(lambda x, flag: model(x, use_meta=flag))
    for flag in (True, False, True, False):
        traced(probe, flag)
    count = traced.experimental_get_tracing_count()
    expect(
        count == 2,
        f"expected 2 traces for 4 calls with flags True, False, True, False, got {count}",
    )


EXERCISES = (
    Exercise(
        "6.1",
        "An identity shortcut.",
        MAPPING,
        (no_projection, count_by_hand),
        (
            "The fusion block projects its shortcut only when its input width differs from "
            "fused_units. What width does the concatenation hand it?",
            "image_units (32) + meta_units[1] (16) = 48. Count each Dense as inputs x units + "
            "units, each convolution as kh x kw x in x filters + filters; the branches' "
            "count_params() can be added as they are.",
        ),
    ),
    Exercise(
        "6.2",
        "One model, two APIs, one training run.",
        MAPPING,
        (two_apis, same_steps, losses_agree, weights_agree),
        (
            "The two models must start from the same weights, see the batches in the same "
            "order and step with the same optimizer settings.",
            "Build the MultiModalModel, copy_weights(functional, subclass), then compile each "
            "with its own Adam(1e-3) and fit both with shuffle=False on the same slice of data.",
        ),
    ),
    Exercise(
        "6.3",
        "A subclass built before any data.",
        MODEL_CLASS,
        (built_before_data, count_like_functional, probabilities_per_class, uses_both_inputs),
        (
            "InlineMultiModal in the core is the pattern: the layers in __init__, a build that "
            "builds each of them with the exact shape it will receive, the wiring in call. This "
            "model has no fusion block; name its layers as the core does.",
            "In build, unpack the two shapes; build image_branch and meta_branch with them, the "
            "Concatenate with [(None, 32), (None, 16)] and the Dense(num_classes, "
            "activation='softmax') with (None, 48).",
        ),
    ),
    Exercise(
        "6.4",
        "Switch a modality off.",
        MODEL_CLASS,
        (off_ignores_meta, off_zeroes_features, on_is_parent, one_trace_per_flag),
        (
            "A subclass's call is Python: a Python bool argument picks a branch while "
            "tracing, so each value gives its own graph.",
            "In call(self, inputs, use_meta=True): return super().call(inputs) when the flag "
            "is on; otherwise keras.ops.zeros_like the meta branch's output and run "
            "concatenate, fusion and classifier yourself.",
        ),
    ),
)
