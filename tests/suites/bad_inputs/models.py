"""Bad inputs for ``companion.models``: the three ways of building the two-input classifier."""

import keras
import numpy as np
from helpers.badinput import Case, Int, Kind, Seq, Str

from companion.models import (
    MultiModalModel,
    copy_weights,
    functional_multimodal,
    image_branch,
    meta_branch,
)

WIDTH = Int(1, 2**20)
WIDTHS = Kind("a list or tuple of 2 widths", lambda v: Seq(WIDTH).accepts(v) and len(v) == 2)
IMAGE_SHAPE = Kind(
    "(height, width, channels), sides >= 8",
    lambda v: (
        Seq(Int(1, 2**20)).accepts(v) and len(v) == 3 and min(v[:2]) >= 8 and max(v[:2]) <= 2**16
    ),
)
SMALL = {"filters": (2, 2), "image_units": 2, "meta_units": (2, 2), "fused_units": 2}
IMAGES = np.zeros((2, 8, 8, 3), "float32")
META = np.zeros((2, 3), "float32")
MODEL = Kind(
    "a built keras.Model",
    lambda v: isinstance(v, keras.Model) and v.built,
    extra_bad=(
        MultiModalModel(2, filters=(2, 2), image_units=2, meta_units=(2, 2), fused_units=2),
    ),
)


def _small_functional():
    return functional_multimodal((8, 8, 3), 3, 2, **SMALL)


def _call_subclass(inputs):
    return MultiModalModel(2, **SMALL)(inputs)


CASES = [
    Case(
        "image_branch",
        image_branch,
        {"image_shape": (8, 8, 3), "filters": (2, 2), "units": 2, "name": "b"},
        {"image_shape": IMAGE_SHAPE.or_none(), "filters": WIDTHS, "units": WIDTH, "name": Str()},
    ),
    Case(
        "meta_branch",
        meta_branch,
        {"meta_dim": 3, "units": (2, 2), "name": "b"},
        {"meta_dim": WIDTH.or_none(), "units": WIDTHS, "name": Str()},
    ),
    Case(
        "functional_multimodal",
        functional_multimodal,
        {"image_shape": (8, 8, 3), "meta_dim": 3, "num_classes": 2, **SMALL, "name": "m"},
        {
            "image_shape": IMAGE_SHAPE,
            "meta_dim": WIDTH,
            "num_classes": Int(2, 2**20),
            "filters": WIDTHS,
            "image_units": WIDTH,
            "meta_units": WIDTHS,
            "fused_units": WIDTH,
            "name": Str(),
        },
    ),
    Case(
        "MultiModalModel",
        MultiModalModel,
        {"num_classes": 2, **SMALL},
        {
            "num_classes": Int(2, 2**20),
            "filters": WIDTHS,
            "image_units": WIDTH,
            "meta_units": WIDTHS,
            "fused_units": WIDTH,
        },
    ),
    Case(
        "MultiModalModel.__call__",
        _call_subclass,
        {"inputs": (IMAGES, META)},
        {
            "inputs": Kind(
                "a pair (images, meta) or a dict with keys 'image' and 'meta'",
                lambda v: False,
                extra_bad=(
                    IMAGES,
                    [IMAGES],
                    (IMAGES, META, META),
                    {"image": IMAGES},
                    (META, META),
                    (IMAGES, IMAGES),
                ),
            )
        },
    ),
    Case(
        "copy_weights",
        copy_weights,
        lambda: {"source": _small_functional(), "target": _small_functional()},
        {"source": MODEL, "target": MODEL},
    ),
]
