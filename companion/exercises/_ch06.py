"""Chapter 6, modelling APIs: an identity shortcut, one run in two APIs, a modality switch."""

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
