"""One table of every public companion layer, model and optimizer, each with a builder.

The GPU-path suite trains each one as Keras would on a GPU; the conformance suite runs the book's
chapter-9 checks on each. A new public class is added here, in one place.
"""

import inspect
import pkgutil
from importlib import import_module

import keras
import numpy as np

import companion
from companion.fitting import GuardedModel
from companion.gradients import ClippedIdentity
from companion.kernels import CppGaussianBlur
from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock
from companion.models import MultiModalModel, functional_multimodal, image_branch, meta_branch
from companion.optimizers import (
    AdamW,
    ClipGlobalNorm,
    GaussianNoise,
    Lookahead,
    TaskWeights,
    TopK,
    TransformGradients,
)
from companion.pyfunc import GaussianBlur

IMAGE = (8, 8, 3)
META = 4
CLASSES = 3


def head(*body):
    """A classifier of IMAGE-shaped inputs whose first layers are ``body``."""
    return keras.Sequential(
        [keras.Input(IMAGE), *body, keras.layers.Flatten(), keras.layers.Dense(CLASSES)]
    )


def vector_model(*body):
    return keras.Sequential([keras.Input((META,)), *body, keras.layers.Dense(CLASSES)])


def guarded_model():
    """A GuardedModel in its Functional form: its own train_step under XLA and float16."""
    inputs = keras.Input((META,))
    hidden = keras.layers.Dense(6, activation="relu")(inputs)
    return GuardedModel(inputs, keras.layers.Dense(CLASSES)(hidden), clip_norm=1.0)


#: name -> (build the model, does XLA compile it, input kind). Layers without weights get a head.
MODELS = {
    "CustomDense": (lambda: vector_model(CustomDense(6, activation="relu")), True, "vector"),
    "ResidualBlock": (lambda: vector_model(ResidualBlock(META, hidden_units=6)), True, "vector"),
    "AdditiveGaussianNoise": (
        lambda: vector_model(AdditiveGaussianNoise(0.1, seed=1)),
        True,
        "vector",
    ),
    "ClippedIdentity": (
        lambda: vector_model(keras.layers.Dense(META), ClippedIdentity()),
        True,
        "vector",
    ),
    "GuardedModel": (guarded_model, True, "vector"),
    "GaussianBlur": (lambda: head(GaussianBlur(3)), True, "image"),
    "CppGaussianBlur": (lambda: head(CppGaussianBlur(3)), False, "image"),
    "image_branch": (
        lambda: keras.Sequential(
            [image_branch(IMAGE, filters=(4, 4), units=8), keras.layers.Dense(CLASSES)]
        ),
        True,
        "image",
    ),
    "meta_branch": (
        lambda: keras.Sequential([meta_branch(META, units=(8, 8)), keras.layers.Dense(CLASSES)]),
        True,
        "vector",
    ),
    "functional_multimodal": (
        lambda: functional_multimodal(
            IMAGE, META, CLASSES, filters=(4, 4), image_units=8, meta_units=(8, 8), fused_units=8
        ),
        True,
        "pair",
    ),
    "MultiModalModel": (
        lambda: MultiModalModel(
            CLASSES, filters=(4, 4), image_units=8, meta_units=(8, 8), fused_units=8
        ),
        True,
        "pair",
    ),
}

#: name -> a fresh optimizer (the inner optimizers of the wrappers are plain Keras ones).
OPTIMIZERS = {
    "AdamW": lambda: AdamW(0.01),
    "Lookahead": lambda: Lookahead(keras.optimizers.SGD(0.1), sync_period=1),
    "TransformGradients": lambda: TransformGradients(
        keras.optimizers.SGD(0.1), [ClipGlobalNorm(1.0), TopK(0.5), TaskWeights({"dense": 0.5})]
    ),
    # XLA draws other normal numbers from the same seed: trained, but not compared with the graph.
    "TransformGradients, GaussianNoise": lambda: TransformGradients(
        keras.optimizers.SGD(0.1), [GaussianNoise(0.01)]
    ),
}


def data(kind, batch=8, seed=0):
    """Seeded inputs of one kind (image, vector or pair) and integer labels."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(batch, *IMAGE)).astype("float32")
    meta = rng.normal(size=(batch, META)).astype("float32")
    x = {"image": images, "vector": meta, "pair": (images, meta)}[kind]
    return x, rng.integers(0, CLASSES, size=batch).astype("int32")


def public_classes(base):
    """The names of every public companion class that subclasses ``base``."""
    found = set()
    for module in pkgutil.iter_modules(companion.__path__):
        if module.name.startswith("_"):
            continue
        for name, obj in vars(import_module(f"companion.{module.name}")).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, base)
                and not name.startswith("_")
                and obj.__module__ == f"companion.{module.name}"
            ):
                found.add(name)
    return found
