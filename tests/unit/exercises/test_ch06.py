"""Chapter 6's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np
import pytest

from companion.models import (
    MultiModalModel,
    copy_weights,
    functional_multimodal,
    image_branch,
    meta_branch,
)


def _identity(fused_units=48):
    return functional_multimodal((32, 32, 3), meta_dim=10, num_classes=6, fused_units=fused_units)


def _by_hand(model):
    branches = sum(model.get_layer(name).count_params() for name in ("image_branch", "meta_branch"))
    return branches + 2 * (48 * 48 + 48) + (48 * 6 + 6)


def test_an_identity_shortcut(accepted, caught):
    identity = _identity()
    accepted("6.1", {"model": identity, "parameters": _by_hand(identity)})
    projected = _identity(64)
    caught("6.1", {"model": projected, "parameters": projected.count_params()}, r"fused_units")
    caught("6.1", {"model": identity, "parameters": _by_hand(identity) - 102}, r"biases")
    caught("6.1", {"model": identity, "parameters": _by_hand(identity) + 48 * 48}, r"projection")


def _twins(copy=True):
    keras.utils.set_random_seed(3)
    functional = functional_multimodal((16, 16, 3), meta_dim=10, num_classes=6)
    subclass = MultiModalModel(6)
    subclass.build({"image": (None, 16, 16, 3), "meta": (None, 10)})
    if copy:
        copy_weights(functional, subclass)
    rng = np.random.default_rng(0)
    inputs = {
        "image": rng.normal(size=(96, 16, 16, 3)).astype("float32"),
        "meta": rng.normal(size=(96, 10)).astype("float32"),
    }
    labels = rng.integers(0, 6, size=96)
    losses = {}
    for name, model in (("functional", functional), ("subclass", subclass)):
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy())
        history = model.fit(inputs, labels, batch_size=32, shuffle=False, verbose=0)
        losses[name] = history.history["loss"]
    return {"functional": functional, "subclass": subclass, "losses": losses}


def test_one_model_two_apis(accepted, caught):
    accepted("6.2", _twins())
    caught("6.2", _twins(copy=False), r"weights copied into the subclass")
    # a broken answer (no "losses" key) is reported, not raised
    result = caught("6.2", {**_twins(), "losses": None}, r"raised TypeError")
    assert len(result.failures) == 1


class SwitchableModel(MultiModalModel):
    def call(self, inputs, use_meta=True):
        if use_meta:
            return super().call(inputs)
        meta = keras.ops.zeros_like(self.meta_branch(inputs["meta"]))
        features = self.concatenate([self.image_branch(inputs["image"]), meta])
        return self.classifier(self.fusion(features))


class ZeroesTheInput(SwitchableModel):
    def call(self, inputs, use_meta=True):
        if use_meta:
            return super().call(inputs)
        return MultiModalModel.call(self, {**inputs, "meta": keras.ops.zeros_like(inputs["meta"])})


class IgnoresTheFlag(SwitchableModel):
    def call(self, inputs, use_meta=True):
        return super().call(inputs)


def test_switch_a_modality_off(accepted, caught):
    accepted("6.4", SwitchableModel)
    caught("6.4", ZeroesTheInput, r"not its input")
    caught("6.4", IgnoresTheFlag, r"is the flag read in call")


class TwoBranchModel(keras.Model):
    def __init__(self, num_classes, **kwargs):
        super().__init__(**kwargs)
        self.image_branch = image_branch(None)
        self.meta_branch = meta_branch(None)
        self.concatenate = keras.layers.Concatenate()
        self.classifier = keras.layers.Dense(num_classes, activation="softmax")

    def build(self, input_shape):
        image_shape, meta_shape = input_shape
        self.image_branch.build(image_shape)
        self.meta_branch.build(meta_shape)
        self.concatenate.build([(None, 32), (None, 16)])
        self.classifier.build((None, 48))

    def call(self, inputs):
        images, meta = inputs
        return self.classifier(
            self.concatenate([self.image_branch(images), self.meta_branch(meta)])
        )


class WithoutBuild(TwoBranchModel):
    build = keras.Model.build


class ClassifierTooWide(TwoBranchModel):
    def build(self, input_shape):
        super().build(input_shape)
        self.classifier = keras.layers.Dense(6, activation="softmax")
        self.classifier.build((None, 64))


class SixClassesAlways(TwoBranchModel):
    def __init__(self, num_classes, **kwargs):
        super().__init__(6, **kwargs)


class ImagesOnly(TwoBranchModel):
    def call(self, inputs):
        images, meta = inputs
        zeros = keras.ops.zeros_like(self.meta_branch(meta))
        return self.classifier(self.concatenate([self.image_branch(images), zeros]))


@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer:UserWarning")
def test_a_subclass_built_before_any_data(accepted, caught):
    accepted("6.3", TwoBranchModel)
    caught("6.3", WithoutBuild, r"Model\.build only marks the model built")
    caught("6.3", ClassifierTooWide, r"built for 64 inputs.*32 \+ 16 = 48")
    caught("6.3", SixClassesAlways, r"\(8, 4\) for num_classes=4.*is num_classes passed")
    caught("6.3", ImagesOnly, r"change with the metadata")
