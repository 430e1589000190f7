"""Bad inputs for ``companion.backends``: the runner, the table, the steps and the extension."""

import keras
import numpy as np
from helpers.badinput import Bool, Callable_, Case, Int, Kind, Real, Seq, Str, is_real
from suites.bad_inputs.cluster import ENV

from companion._subprocess import MAX_TIMEOUT
from companion.backends import (
    BACKENDS,
    ROWS,
    VAESampling,
    changed_cells,
    compare_step_speed,
    ddp_replicas,
    ffi_blur,
    gaussian_weights,
    gradient,
    ordinary_data,
    ordinary_model,
    pallas_blur,
    portability_table,
    probe_column,
    resume_here,
    run_on_backend,
    save_here,
    step_gaps,
    step_losses,
    torch_blur,
    train_by_hand,
)


def _backend_value():
    return "tensorflow"


DEF_FUNCTION = Kind(
    "a def function",
    lambda v: type(v).__name__ == "function",
    extra_bad=(print, len),
)
BACKEND_LIST = Seq(Str(*BACKENDS))

IMAGES = [[[[0.5]]]]  # one 1x1 image, one channel
NHWC = Kind(
    "a rank-4 NHWC array of numbers",
    lambda v: np.asarray(v).ndim == 4 and np.issubdtype(np.asarray(v).dtype, np.number),
)
KSIZE = Kind(
    "an odd int from 1 to 31",
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v in range(1, 32, 2),
)
MODEL_CLASS = Kind(
    "a keras.Model subclass", lambda v: isinstance(v, type) and issubclass(v, keras.Model)
)


def _compiled():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


CASES = [
    Case(
        "run_on_backend",
        run_on_backend,
        {
            "function": _backend_value,
            "backend": "jax",
            "helpers": (),
            "timeout": 60.0,
            "env": None,
            "verbose": False,
        },
        {
            "function": DEF_FUNCTION,
            "helpers": Seq(DEF_FUNCTION, min_length=0),
            "backend": Str(*BACKENDS),
            "timeout": Real(above=0, maximum=MAX_TIMEOUT),
            "env": ENV,
            "verbose": Bool(),
        },
    ),
    Case(
        "portability_table",
        portability_table,
        {"backends": ["jax"], "timeout": 60.0},
        {"backends": BACKEND_LIST, "timeout": Real(above=0, maximum=MAX_TIMEOUT)},
    ),
    Case(
        "probe_column",
        probe_column,
        {"folder": "/tmp", "rows": [next(iter(ROWS))]},
        {"folder": Str(), "rows": Seq(Str(*ROWS)).or_none()},
    ),
    Case("save_here", save_here, {"folder": "/tmp"}, {"folder": Str()}),
    Case(
        "resume_here",
        resume_here,
        {"folder": "/tmp", "saver": "jax"},
        {"folder": Str(), "saver": Str(*BACKENDS)},
    ),
    Case(
        "changed_cells",
        changed_cells,
        {"columns": {}},
        {
            "columns": Kind(
                "a dict by backend of dicts with 'cells'",
                lambda v: (
                    isinstance(v, dict)
                    and all(
                        b in BACKENDS and isinstance(c, dict) and isinstance(c.get("cells"), dict)
                        for b, c in v.items()
                    )
                ),
                extra_bad=({"jax": {}}, {"nope": {"cells": {}}}),
            )
        },
    ),
    Case(
        "step_losses",
        step_losses,
        {"custom_step": True, "epochs": 1},
        {"custom_step": Bool(), "epochs": Int(1)},
    ),
    Case("gradient", gradient, {"fn": abs, "x": [1.0]}, {"fn": Callable_()}),
    Case(
        "train_by_hand",
        train_by_hand,
        {"model": None, "x": [], "y": [], "batch_size": 16, "sample_weight": None},
        {"model": Kind("a compiled keras.Model", lambda v: False)},
    ),
    Case(
        "train_by_hand",
        lambda **kwargs: train_by_hand(_compiled(), **kwargs),
        {"x": [[1.0]], "y": [[1.0]], "batch_size": 16, "sample_weight": None},
        {
            "sample_weight": Kind(
                "None or one number per example",
                lambda v: v is None or (np.shape(v) == (1,) and is_real(np.asarray(v)[0])),
            ),
            "batch_size": Int(1),
        },
    ),
    Case("ordinary_data", ordinary_data, {"n": 1}, {"n": Int(1)}),
    Case(
        "ordinary_model",
        ordinary_model,
        {"model_class": keras.Model, "l2": 0.0},
        {"model_class": MODEL_CLASS, "l2": Real(minimum=0)},
    ),
    Case(
        "step_gaps",
        step_gaps,
        {"model_class": keras.Model, "epochs": 1},
        {"model_class": MODEL_CLASS, "epochs": Int(1)},
    ),
    Case(
        "VAESampling",
        VAESampling,
        {"kl_weight": 0.01, "seed": 0},
        {"kl_weight": Real(minimum=0), "seed": Int(0, 2**32 - 1)},
    ),
    *(
        Case(blur.__name__, blur, {"images": IMAGES, "ksize": 1}, {"images": NHWC, "ksize": KSIZE})
        for blur in (torch_blur, ffi_blur, pallas_blur)
    ),
    Case("gaussian_weights", gaussian_weights, {"ksize": 1}, {"ksize": KSIZE}),
    Case(
        "ddp_replicas",
        ddp_replicas,
        {"timeout": 60.0},
        {"timeout": Real(above=0, maximum=MAX_TIMEOUT)},
    ),
    Case(
        "compare_step_speed",
        compare_step_speed,
        {"rounds": 1, "backends": ["jax"], "repeats": 1},
        {"rounds": Int(1), "backends": BACKEND_LIST, "repeats": Int(1)},
    ),
]

EXEMPT = {
    "StepModel": "keras.Model's keyword arguments, checked by Keras",
    "CustomStepModel": "keras.Model's arguments, checked by Keras",
    "BackendRunError": "an exception: its message",
    "TensorFlowRequired": "an exception: its message",
    "compile_report": "torch._dynamo.explain's function and torch.tensor's images, checked there",
}
