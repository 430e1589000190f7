"""The ``.keras`` rows: a model of the companion's custom layers saved on one backend, loaded,
run and trained on under another (TensorFlow's file, and JAX's and PyTorch's for a user
without TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from companion._backend import BACKENDS
from companion._checks import check_choice, check_str
from companion.backends._probes import CHANGED, UNCHANGED
from companion.backends._runner import run_on_backend

_BACKEND = keras.backend.backend()
#: How far the loader's predictions may be from the saver's: float32 matmuls summed in another
#: order by another library (measured: 3.6e-7 to 4.8e-7 between JAX and PyTorch).
LOAD_BOUND = 1e-5
#: The saver whose file each backend loads in the row without TensorFlow
#: (``probe_keras_file_across``): the other of JAX and PyTorch.
OTHER_SAVER = {"tensorflow": "jax", "jax": "torch", "torch": "jax"}
#: What loads the optimizer of a file saved under PyTorch on another backend: that file names
#: PyTorch's own Adam class, whose step calls ``torch._foreach_*`` on the loader's arrays.
ADAM = {"Adam": keras.optimizers.Adam}


def model_file(saver: str) -> str:
    """The name of the file ``save_here`` writes under ``saver``."""
    return f"saved_by_{saver}.keras"


def predictions_file(saver: str) -> str:
    """The name of the saver's predictions, next to its file."""
    return f"{saver}_predictions.npy"


def _inputs() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(16, 4)).astype("float32")


def save_here(folder: str) -> str:
    """Train a model of ``CustomDense``, ``AdditiveGaussianNoise`` (a seed generator) and
    ``ResidualBlock`` with Adam for 2 epochs on the running backend, and save it as
    ``saved_by_<backend>.keras`` in ``folder``, its predictions beside it; returns the file's name.

    ``compile`` keeps ``jit_compile="auto"``, so the file stores what Keras resolved it to:
    True under JAX, and under TensorFlow on a GPU runtime (or inside ``simulated_gpu``).

    Raises:
        TypeError, ValueError: If ``folder`` is not a non-empty str.

    Taught in chapter 14, "A .keras file across backends".
    """
    from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock

    folder = check_str(folder, "folder", "a folder's path (a non-empty str)")
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
    model.save(Path(folder) / model_file(_BACKEND))
    np.save(Path(folder) / predictions_file(_BACKEND), model.predict(x, verbose=0))
    return model_file(_BACKEND)


def save_under_tensorflow(folder: str) -> str:
    """The ``.keras`` row's file: ``save_here`` under TensorFlow, the first column's child."""
    return save_here(folder)


def _load(path: Path, custom_objects: dict | None = None) -> tuple[keras.Model, bool]:
    """The model in ``path``, with ``jit_compile`` off under PyTorch, and the ``jit_compile``
    the file stores.

    A file stores the ``jit_compile`` its saver resolved: True from JAX, and from TensorFlow on
    a GPU runtime. Under PyTorch, True makes ``fit`` start ``torch.compile``, which compiles
    the model before its first step (it trains too, in minutes on a CPU instead of a second).
    That is a speed setting, not what the file needs to load and train, so it is turned off
    whatever the file says: the cell is the same for a file saved on a CPU or a GPU.
    """
    import companion.layers  # noqa: F401  (registers the custom layers, as a reader's import)

    model = keras.models.load_model(path, custom_objects=custom_objects)
    stored = model.jit_compile
    if _BACKEND == "torch":
        model.jit_compile = False
    return model, stored


def _train_on(model: keras.Model) -> float:
    """One more epoch on the saver's data; the loss."""
    x = _inputs()
    return model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0).history["loss"][-1]


def probe_keras_file(folder: str, saver: str = "tensorflow") -> str:
    """Load the file ``save_here`` wrote under ``saver`` in ``folder``, predict within
    ``LOAD_BOUND`` of the saver, and train one more epoch; the cell names what that needed.

    The cell does not depend on the ``jit_compile`` the file stores (``_load``): a file saved
    on a GPU runtime gives the cell of one saved on a CPU.
    """
    path = Path(folder) / model_file(saver)
    model, _ = _load(path)
    x = _inputs()
    saved = np.load(Path(folder) / predictions_file(saver))
    gap = float(np.max(np.abs(model.predict(x, verbose=0) - saved)))
    if not gap <= LOAD_BOUND:
        raise AssertionError(f"predictions {gap:.3g} from the saver's, above {LOAD_BOUND:g}")
    change = None
    try:
        loss = _train_on(model)
    except TypeError:  # the optimizer class of another backend (a PyTorch file)
        change = 'custom_objects={"Adam": keras.optimizers.Adam}'
        loss = _train_on(_load(path, custom_objects=ADAM)[0])
    if not np.isfinite(loss):
        raise AssertionError(f"the resumed loss is {loss}")
    return CHANGED + change if change else UNCHANGED


def probe_keras_file_across(folder: str) -> str:
    """The row a user without TensorFlow can run: ``probe_keras_file`` on the file saved under
    the other of JAX and PyTorch (``OTHER_SAVER``; TensorFlow loads JAX's). Where ``folder``
    lacks that file, a child process of the saver's backend writes it first (``save_here``)."""
    saver = OTHER_SAVER[_BACKEND]
    if not (Path(folder) / predictions_file(saver)).exists():  # written after the model
        run_on_backend(save_here, saver, folder)
    return probe_keras_file(folder, saver)


def resume_here(folder: str, saver: str) -> dict:
    """Load ``saved_by_<saver>.keras`` on the running backend and try one more epoch of
    training: the optimizer's module, the file's ``jit_compile`` and what the epoch did (under
    PyTorch ``jit_compile`` is reported, and turned off before training).

    Raises:
        TypeError, ValueError: If ``folder`` is not a non-empty str or ``saver`` not a backend.

    Taught in chapter 14, "A .keras file across backends".
    """
    folder = check_str(folder, "folder", "a folder's path (a non-empty str)")
    saver = check_choice(saver, "saver", BACKENDS)

    path = Path(folder) / model_file(saver)
    model, stored = _load(path)
    found = {"optimizer": type(model.optimizer).__module__, "jit_compile": stored}
    try:
        _train_on(model)
        found["resumes"] = "trains on"
    except TypeError as error:
        found["resumes"] = f"TypeError: {str(error).splitlines()[0][:70]}"
        model, _ = _load(path, custom_objects=ADAM)
        _train_on(model)
        found["with custom_objects"] = type(model.optimizer).__module__
    return found
