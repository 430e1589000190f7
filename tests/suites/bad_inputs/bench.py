"""Bad inputs for ``companion.bench``: every bad value is refused before any timing work.

The valid calls are tiny (one repeat of 8x8 images on the CPU), so a value that were wrongly
accepted would cost a fraction of a second, not a benchmark run.
"""

from collections.abc import Mapping

from helpers.badinput import Bool, Case, Int, Kind, Seq, Str
from suites.bad_inputs.timing import DEVICE, REPEATS, calls_kind

from companion.bench import (
    adamw_step_time,
    blur_in_model,
    blur_op,
    blur_pipeline,
    compiled_blur_vs_opencv,
    default_sizes,
    main,
    per_example_vs_batched,
    rows_table,
    rows_to_entries,
    training_loop_vs_fit,
    training_step_modes,
)

SEED = Int(0, 2**32 - 1)
SIZES = Seq(Int(8, 4096))
BATCH = Int(1, 2**30 // (8 * 8 * 12))  # at most 1 GiB of float32 RGB images (here 8x8)

METHODS = calls_kind("native").or_none()
ROW = {
    "name": "x",
    "device": "/CPU:0",
    "sizes": {"batch_size": 1},
    "medians": {"a": 1.0, "b": 2.0},
    "spreads": {"a": 0.0, "b": 0.0},
    "reference": "a",
    "ratio": {"a": 1.0, "b": 2.0},
}
ROWS = Kind(
    "a list or tuple of experiment rows",
    lambda v: (
        isinstance(v, (list, tuple))
        and all(isinstance(r, Mapping) and set(ROW) <= set(r) for r in v)
    ),
    extra_bad=([{"name": "x"}], [ROW, None], [{**ROW, "medians": [1.0]}]),
)
ARGV = Kind(
    "None or a list of str",
    lambda v: v is None or (isinstance(v, (list, tuple)) and all(isinstance(a, str) for a in v)),
    extra_bad=(["--quick", 1],),
)
COMMON = {"device": "/CPU:0", "repeats": 1, "seed": 0, "progress": False}
COMMON_KINDS = {"device": DEVICE, "repeats": REPEATS, "seed": SEED, "progress": Bool()}
BLUR = {"methods": None, "reference": "native", "batch_size": 1, **COMMON}
BLUR_KINDS = {
    "methods": METHODS,
    "reference": Str("native", "py_function"),
    "batch_size": BATCH.or_none(),
    **COMMON_KINDS,
}

CASES = [
    Case(
        "training_loop_vs_fit",
        training_loop_vs_fit,
        {"model": "mlp", "examples": 128, "batch_size": 128, "epochs": 1, "repeats": 1, "seed": 0},
        {
            "model": Str("chapter 7", "mlp"),
            "examples": Int(128, 10**5).or_none(),
            "batch_size": Int(1, 128).or_none(),
            "epochs": Int(1, 1000),
            "repeats": REPEATS,
            "seed": SEED,
        },
    ),
    Case(
        "adamw_step_time",
        adamw_step_time,
        {"batch_size": 2, "steps": 1, "repeats": 1, "seed": 0},
        {
            "batch_size": Int(1, 2**30 // (32 * 32 * 12)),
            "steps": Int(1, 10**5),
            "repeats": REPEATS,
            "seed": SEED,
        },
    ),
    Case("default_sizes", default_sizes, {"device": "/CPU:0"}, {"device": DEVICE}),
    Case(
        "blur_op",
        blur_op,
        {**BLUR, "image_sizes": [8]},
        {**BLUR_KINDS, "image_sizes": SIZES.or_none()},
    ),
    Case(
        "blur_in_model",
        blur_in_model,
        {**BLUR, "image_sizes": [8]},
        {**BLUR_KINDS, "image_sizes": SIZES.or_none()},
    ),
    Case(
        "blur_pipeline",
        blur_pipeline,
        {**BLUR, "image_size": 8, "examples": 16},
        {**BLUR_KINDS, "image_size": Int(8, 4096).or_none(), "examples": BATCH.or_none()},
    ),
    Case(
        "training_step_modes",
        training_step_modes,
        {"models": ["mlp"], "image_size": 8, "batch_size": 1, **COMMON},
        {
            "models": Seq(Str("mlp", "cnn")),
            "image_size": Int(8, 4096).or_none(),
            "batch_size": BATCH.or_none(),
            **COMMON_KINDS,
        },
    ),
    Case(
        "per_example_vs_batched",
        per_example_vs_batched,
        {"batch_sizes": [1], "image_size": 8, **COMMON},
        {"batch_sizes": Seq(BATCH).or_none(), "image_size": Int(8, 4096).or_none(), **COMMON_KINDS},
    ),
    Case(
        "compiled_blur_vs_opencv",
        compiled_blur_vs_opencv,
        {"image_sizes": [8], "batch_size": 1, "repeats": 1, "seed": 0, "progress": False},
        {
            "image_sizes": SIZES.or_none(),
            "batch_size": BATCH.or_none(),
            "repeats": REPEATS,
            "seed": SEED,
            "progress": Bool(),
        },
    ),
    Case("rows_table", rows_table, {"rows": [ROW]}, {"rows": ROWS}),
    Case("rows_to_entries", rows_to_entries, {"rows": [ROW]}, {"rows": ROWS}),
    Case(
        "main",
        main,
        {
            "argv": [
                "--quick",
                "--repeats",
                "1",
                "--device",
                "/CPU:0",
                "--output",
                "/tmp/e2/bench.json",
            ],
            "blur_methods": None,
        },
        {"argv": ARGV, "blur_methods": METHODS},
    ),
]

EXEMPT = {
    "Row": "a frozen result record that the experiments build; users read it, not make it",
    "Entry": "a frozen result record that make bench builds; users read it, not make it",
}
