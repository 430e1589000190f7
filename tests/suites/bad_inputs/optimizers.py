"""Bad inputs for ``companion.optimizers``: numbers kept in float32 are capped at what it holds."""

import keras
import numpy as np
from helpers.badinput import NAN, Bool, Case, Instance, Int, Kind, Real, Seq, Str

from companion import optimizers as opt

F32 = float(np.finfo("float32").max)
TINY = float(np.finfo("float32").tiny)
STEP = Kind(
    "a step (int64)", Int(0, 2**63 - 2).accepts, extra_bad=(2**64,)
)  # Keras counts steps in int64
#: ``begin_step`` below the tables' ``end_step`` of 10: one at or after it is begin_step's error.
FIRST_STEP = Kind("a first step below end_step (10)", Int(0, 9).accepts, extra_bad=(10, 11, 2**62))
LAST_STEP = Kind("a last step (int64)", Int(1, 2**63 - 1).accepts, extra_bad=(2**64,))
NOISE_STDDEV = Real(0, F32 / 8)  # |noise| < 8 standard deviations: stddev * noise stays finite
BELOW_ONE = Kind("a number in [0, 1)", lambda v: Real(0, 1).accepts(v) and v < 1)
UP_TO_ONE = Real(maximum=1, above=0)
OPTIMIZER = Instance(keras.optimizers.Optimizer, what="a Keras optimizer")
NAME = Str().or_none()
WORDS = Seq(Str(), min_length=0)


def _learning_rate(value):
    schedule = isinstance(value, keras.optimizers.schedules.LearningRateSchedule) or callable(value)
    return schedule or Real(0, F32).accepts(value)


def _weights(value):
    return isinstance(value, dict) and all(
        Str().accepts(k) and Real(0, F32).accepts(w) for k, w in value.items()
    )


def _numeric(value):
    try:
        array = np.asarray(value)
        return array.dtype.kind in "biuf" and bool(np.all(np.isfinite(array)))
    except ValueError:
        return False


def _variables(value):
    if isinstance(value, (np.ndarray, keras.Variable)):
        return _numeric(value) and np.size(value) > 0
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(_numeric(v) for v in value)


def _recording():
    return opt.TransformGradients(keras.optimizers.SGD(), record_update_norms=True)


LEARNING_RATE = Kind(
    "a number >= 0, a schedule or a callable",
    _learning_rate,
    extra_bad=(3.5e38, -1e-3, np.float64(NAN)),
)
TASK_WEIGHTS = Kind(
    "a mapping from non-empty str to a number >= 0",
    _weights,
    extra_bad=(
        {"": 0.0},
        {"a": -1.0},
        {"a": NAN},
        {"a": 1e300},
        {1: 1.0},
        {"a": "1"},
        [("a", 1.0)],
    ),
)
VARIABLES = Kind(
    "a model, an array or a list of arrays",
    lambda v: isinstance(v, keras.Layer) or _variables(v),
    extra_bad=(
        np.zeros(0),
        ["a"],
        [np.zeros(2), None],
        {"w": np.zeros(2)},
        "abc",
        np.array(["a"]),
        [np.array([NAN, 1.0])],
        np.array([0.0, np.inf]),
    ),
)
RECORDER = Kind(
    "a TransformGradients that records update norms",
    lambda v: isinstance(v, opt.TransformGradients) and v.record_update_norms,
    extra_bad=(opt.TransformGradients(keras.optimizers.SGD()), keras.optimizers.SGD()),
)

CASES = [
    Case(
        "AdamW",
        opt.AdamW,
        {
            "learning_rate": 0.001,
            "beta_1": 0.9,
            "beta_2": 0.999,
            "epsilon": 1e-7,
            "weight_decay": 0.004,
            "epsilon_placement": "keras",
            "exclude_from_decay": ("bias",),
        },
        {
            "learning_rate": LEARNING_RATE,
            "beta_1": BELOW_ONE,
            "beta_2": BELOW_ONE,
            "epsilon": Real(TINY, F32),
            "weight_decay": Real(0, F32),
            "epsilon_placement": Str("keras", "paper"),
            "exclude_from_decay": WORDS,
        },
    ),
    Case("ClipGlobalNorm", opt.ClipGlobalNorm, {"clip_norm": 1.0}, {"clip_norm": Real(TINY, F32)}),
    Case(
        "GaussianNoise",
        opt.GaussianNoise,
        {"stddev": 0.1, "decay": 0.55, "seed": 0},
        {"stddev": NOISE_STDDEV, "decay": Real(0, F32), "seed": Int(0, 2**32 - 1)},
    ),
    Case("TopK", opt.TopK, {"fraction": 0.5}, {"fraction": UP_TO_ONE}),
    Case("TaskWeights", opt.TaskWeights, {"weights": {"head": 0.5}}, {"weights": TASK_WEIGHTS}),
    Case(
        "TransformGradients",
        opt.TransformGradients,
        lambda: {
            "optimizer": keras.optimizers.SGD(),
            "transforms": (),
            "record_update_norms": False,
            "name": None,
        },
        {
            "optimizer": OPTIMIZER,
            "transforms": Seq(Instance(opt.GradientTransform), min_length=0),
            "record_update_norms": Bool(),
            "name": NAME,
        },
    ),
    Case(
        "Lookahead",
        opt.Lookahead,
        lambda: {
            "optimizer": keras.optimizers.SGD(),
            "sync_period": 5,
            "slow_step_size": 0.5,
            "name": None,
        },
        {
            "optimizer": OPTIMIZER,
            "sync_period": LAST_STEP,
            "slow_step_size": UP_TO_ONE,
            "name": NAME,
        },
    ),
    Case(
        "UpdateNormLogger",
        opt.UpdateNormLogger,
        lambda: {"optimizer": _recording()},
        {"optimizer": RECORDER},
    ),
    Case(
        "polynomial_sparsity",
        opt.polynomial_sparsity,
        {
            "step": 5,
            "target_sparsity": 0.8,
            "begin_step": 0,
            "end_step": 10,
            "initial_sparsity": 0.0,
            "power": 3.0,
        },
        {
            "step": STEP,
            "target_sparsity": BELOW_ONE,
            "begin_step": FIRST_STEP,
            "end_step": LAST_STEP,
            "initial_sparsity": BELOW_ONE,
            "power": Real(0, F32, above=0),
        },
    ),
    Case(
        "WarmupCosine",
        opt.WarmupCosine,
        {"base_lr": 0.1, "warmup_steps": 10, "decay_steps": 100, "alpha": 0.0, "warmup_start": 0.0},
        {
            "base_lr": Real(0, F32),
            "warmup_steps": Int(0, 2**63 - 1),
            "decay_steps": Int(1, 2**63 - 1),
            "alpha": Real(0, 1),
            "warmup_start": Real(0, F32),
        },
    ),
    Case("sparsity", opt.sparsity, {"variables": [np.zeros(2)]}, {"variables": VARIABLES}),
    Case(
        "MagnitudePruning",
        opt.MagnitudePruning,
        {
            "target_sparsity": 0.5,
            "begin_step": 0,
            "end_step": 10,
            "frequency": 2,
            "include": ("kernel",),
        },
        {
            "target_sparsity": BELOW_ONE,
            "begin_step": FIRST_STEP,
            "end_step": LAST_STEP,
            "frequency": Int(1),
            "include": Seq(Str()),
        },
    ),
]
