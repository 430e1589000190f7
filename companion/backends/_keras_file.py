"""The ``.keras`` row: a model of the companion's custom layers saved under TensorFlow, loaded,
run and trained on under JAX and PyTorch."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from companion._backend import BACKENDS
from companion._checks import check_choice, check_str
from companion.backends._probes import CHANGED, UNCHANGED

_BACKEND = keras.backend.backend()
#: The file and the saver's predictions, in the folder given to the probe.
MODEL_FILE, PREDICTIONS = "saved_by_tensorflow.keras", "tensorflow_predictions.npy"
#: How far the loader's predictions may be from the saver's: float32 matmuls summed in another
#: order by another library (measured: 3.6e-7 to 4.8e-7 between JAX and PyTorch).
LOAD_BOUND = 1e-5


def _inputs() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(16, 4)).astype("float32")


def save_under_tensorflow(folder: str) -> str:
    """Train a model of ``CustomDense``, ``AdditiveGaussianNoise`` (a seed generator) and
    ``ResidualBlock`` for 2 epochs and save it with its predictions in ``folder``."""
    from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            CustomDense(8, activation="relu"),
            AdditiveGaussianNoise(0.1, seed=3),
            ResidualBlock(8),
            CustomDense(1),
        ]
    )
    model.compile(keras.optimizers.Adam(0.01), "mse")
    x = _inputs()
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0)
    model.save(Path(folder) / MODEL_FILE)
    np.save(Path(folder) / PREDICTIONS, model.predict(x, verbose=0))
    return _BACKEND


def probe_keras_file(folder: str) -> str:
    """Load the file ``save_under_tensorflow`` wrote in ``folder``, predict within
    ``LOAD_BOUND`` of the saver, and train one more epoch; the cell names what that needed."""
    import companion.layers  # noqa: F401  (registers the custom layers, as a reader's import)

    path = Path(folder) / MODEL_FILE
    model = keras.models.load_model(path)
    x = _inputs()
    gap = float(np.max(np.abs(model.predict(x, verbose=0) - np.load(Path(folder) / PREDICTIONS))))
    if not gap <= LOAD_BOUND:
        raise AssertionError(f"predictions {gap:.3g} from the saver's, above {LOAD_BOUND:g}")
    changes = []
    if _BACKEND == "torch" and model.jit_compile:
        model.jit_compile = False  # True from the file would turn on torch.compile (~20 s)
        changes.append("model.jit_compile = False")
    losses = model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0).history["loss"]
    if not np.isfinite(losses[-1]):
        raise AssertionError(f"the resumed loss is {losses[-1]}")
    return CHANGED + ", ".join(changes) if changes else UNCHANGED


def save_here(folder: str) -> str:
    """Train a small model of the companion's layers with Adam on the running backend and save
    it as ``saved_by_<backend>.keras`` in ``folder``; returns the file's name.

    Raises:
        TypeError, ValueError: If ``folder`` is not a non-empty str.

    Taught in chapter 14, "A .keras file across backends".
    """
    from companion.layers import CustomDense, ResidualBlock

    folder = check_str(folder, "folder", "a folder's path (a non-empty str)")

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), CustomDense(8), ResidualBlock(8), CustomDense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    x = _inputs()
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0)
    name = f"saved_by_{_BACKEND}.keras"
    model.save(Path(folder) / name)
    return name


def resume_here(folder: str, saver: str) -> dict:
    """Load ``saved_by_<saver>.keras`` on the running backend and try one more epoch of
    training: the optimizer's module, the file's ``jit_compile`` and what the epoch did (under
    PyTorch ``jit_compile`` is reported, and turned off before training).

    Raises:
        TypeError, ValueError: If ``folder`` is not a non-empty str or ``saver`` not a backend.

    Taught in chapter 14, "A .keras file across backends".
    """
    import companion.layers  # noqa: F401  (registers the custom layers)

    folder = check_str(folder, "folder", "a folder's path (a non-empty str)")
    saver = check_choice(saver, "saver", BACKENDS)

    path = Path(folder) / f"saved_by_{saver}.keras"
    model = keras.models.load_model(path)
    found = {"optimizer": type(model.optimizer).__module__, "jit_compile": model.jit_compile}
    if _BACKEND == "torch":
        model.jit_compile = False  # True would start torch.compile: about 20 s here
    x = _inputs()
    try:
        model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)
        found["resumes"] = "trains on"
    except TypeError as error:
        found["resumes"] = f"TypeError: {str(error).splitlines()[0][:70]}"
        model = keras.models.load_model(path, custom_objects={"Adam": keras.optimizers.Adam})
        model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)
        found["with custom_objects"] = type(model.optimizer).__module__
    return found
