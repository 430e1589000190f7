"""Chapter 6's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import numpy as np

from companion.models import MultiModalModel, copy_weights, functional_multimodal


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
    accepted("6.3", SwitchableModel)
    caught("6.3", ZeroesTheInput, r"not its input")
    caught("6.3", IgnoresTheFlag, r"is the flag read in call")
