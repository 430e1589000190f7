"""Bad inputs for ``companion.data``."""

from helpers.badinput import Case, Int

from companion.data import class_name, make_shapes

CASES = [
    Case("class_name", class_name, {"label": 1}, {"label": Int(0, 5)}),
    Case(
        "make_shapes",
        make_shapes,
        {"n": 2, "image_size": 16, "meta_dim": 2, "seed": 0},
        {
            "n": Int(1, 10**6),
            "image_size": Int(16, 4096),
            "meta_dim": Int(1, 10**4),
            "seed": Int(0, 2**32 - 1),
        },
    ),
]
