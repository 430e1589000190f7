"""Set-up and environment: the seeds, TensorFlow's quiet start, and where the notebook runs.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import os
import sys

from companion._backend import BACKEND_NAMES, backend
from companion._checks import check_bool, check_seed
from companion.devices import pin_runtime


def in_colab() -> bool:
    """Return True when running inside a Google Colab kernel.

    Taught in chapter 1, "Ops: the atoms".
    """
    return "google.colab" in sys.modules


def setup(seed: int = 42, *, verbose: bool = True) -> dict[str, object]:
    """Seed Python, NumPy and the backend, quiet TensorFlow's logs, describe the runtime.

    Call it once at the top of a notebook (before building models). Two runs of the same
    small CPU training after ``setup(seed)`` give identical weights. On a GPU runtime it
    also turns on memory growth (``enable_gpu_memory_growth``), so that a child Python
    process started by the notebook can use the GPU too.

    It turns TF32 off (``tf.config.experimental.enable_tensor_float_32_execution(False)``):
    A100, L4 and later GPUs otherwise run float32 matrix products and convolutions with a
    10-bit mantissa, and the book's comparisons with NumPy, Keras built-ins or a CPU run would
    miss their bounds there. It changes nothing on a CPU or a T4. Chapter 12 turns TF32 back on
    where it times matrix products.

    When the environment variable ``WHITE_BOX_TF_GPU_STAND_IN`` is ``"1"``, it also starts the
    GPU stand-in (``companion.devices.start_gpu_stand_in``): Keras and TensorFlow see a GPU and
    make a GPU's choices, while the ops run on the CPU.

    Under JAX and PyTorch it seeds with ``keras.utils.set_random_seed`` as well, turns TF32 off
    in that framework (JAX's default matmul precision "highest"; torch's ``allow_tf32`` flags),
    leaves JAX's GPU memory to be taken as needed, and prints the backend and its version in
    the first line. The pinning is ``companion.devices.pin_runtime``, which every child of
    ``run_on_backend`` runs too.

    Args:
        seed: Integer seed for ``random``, NumPy and the backend, from 0 to ``2**32 - 1``.
        verbose: Print the versions, the device, TF32 and whether this is Colab (a bool).

    Returns:
        A dict with keys ``backend`` (``"tensorflow"``, ``"jax"`` or ``"torch"``),
        ``tensorflow`` (its version, or None under another backend), ``backend_version``,
        ``keras``, ``python``, ``device`` (``"GPU"``, ``"GPU stand-in"`` or ``"CPU"``),
        ``colab``, ``seed``, ``tf32`` (False) and ``gpu_memory_growth`` (the GPUs set to grow
        their memory; always empty off TensorFlow).

    Raises:
        TypeError: If ``seed`` is not an int or ``verbose`` not a bool.
        ValueError: If ``seed`` is negative or above ``2**32 - 1``.

    Example:
        >>> from companion.notebook import setup
        >>> info = setup(seed=0, verbose=False)
        >>> info["seed"], info["tf32"]
        (0, False)

    Taught in chapter 1, "Ops: the atoms".
    """
    seed = check_seed(seed)
    verbose = check_bool(verbose, "verbose")

    # Must be set before TensorFlow's C++ runtime loads to silence its start-up chatter.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    running = backend()
    if running == "tensorflow":
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
    runtime = pin_runtime()
    keras.utils.set_random_seed(seed)  # seeds random, NumPy and the backend together
    info: dict[str, object] = {
        "backend": running,
        "tensorflow": runtime["version"] if running == "tensorflow" else None,
        "backend_version": runtime["version"] or keras.__version__,
        "keras": keras.__version__,
        "python": sys.version.split()[0],
        "device": runtime["device"],
        "colab": in_colab(),
        "seed": seed,
        "tf32": runtime["tf32"],
        "gpu_memory_growth": runtime["gpu_memory_growth"],
    }
    if verbose:
        _print_runtime(info)
    return info


def _print_runtime(info: dict[str, object]) -> None:
    """The two or three lines ``setup`` prints (TensorFlow's as they always were)."""
    device, seed = info["device"], info["seed"]
    if info["backend"] == "tensorflow":
        print(f"TensorFlow {info['tensorflow']}, Keras {info['keras']}, Python {info['python']}")
    else:
        name = BACKEND_NAMES.get(str(info["backend"]), info["backend"])
        print(f"Keras {info['keras']} on {name} {info['backend_version']}, Python {info['python']}")
    print(f"device: {device}, Colab: {'yes' if info['colab'] else 'no'}, seed: {seed}")
    print("TF32: off (float32 matmuls are exact float32 on A100/L4 too)")
