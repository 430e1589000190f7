"""What Keras and TensorFlow see of the devices, and a GPU stand-in for testing GPU paths on a CPU.

Keras decides some things by asking TensorFlow which devices exist: ``jit_compile="auto"``
means XLA as soon as a GPU is listed (at ``compile``, or at ``fit`` / ``predict`` time for a model
never compiled). TensorFlow's graph optimizer fuses some ops on the CPU only (oneDNN's
MatMul+BiasAdd+ReLU, ``_MklSwish``). A CPU alone shows neither GPU path; these helpers do:

- ``simulated_gpu()`` and ``simulated_cpu_only()``: for the length of a ``with`` block, TensorFlow
  lists one GPU more, or no GPU at all (what ``compile()`` decides inside the block).
- ``start_gpu_stand_in()``: for the whole process, a listed GPU and no CPU-only fusions; what
  ``setup()`` does when ``WHITE_BOX_TF_GPU_STAND_IN=1`` is set (``make test-colab`` runs every
  notebook so). It cannot show the numerics of real GPU kernels, TF32 or speed: the ops still
  run on the CPU. A JAX process under the stand-in (``pin_runtime``) sees one GPU in
  ``keras.distribution.list_devices()``, as on a one-GPU runtime.
- ``missing_xla_kernel(error)``: the op an XLA error names, on any device (``XLA_CPU_JIT`` on a
  CPU, ``XLA_GPU_JIT`` on a GPU).

The real devices, set once before TensorFlow's first op (``companion.notebook`` re-exports these,
where the chapters import them):

- ``gpu_available()``: whether TensorFlow lists a GPU.
- ``enable_gpu_memory_growth()``: the GPUs take memory as they need it, so a child process can
  share them (``setup()`` calls it).
- ``split_cpu(devices)``: the CPU as several logical devices, ``tf.distribute`` replicas on one
  machine.
- ``pin_runtime()``: what ``setup()`` and every child of ``run_on_backend`` pin first: TF32
  off, GPU memory taken as needed, the stand-in when the environment asks; ``runtime_line``
  says it in a line.

Backends: TensorFlow, JAX, PyTorch, except ``enable_gpu_memory_growth``, ``split_cpu``,
``simulated_gpu``, ``simulated_cpu_only`` and ``start_gpu_stand_in`` (TensorFlow only).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from companion._backend import require_tensorflow
from companion._checks import check_instance, check_int

__all__ = [
    "JAX_PREALLOCATE",
    "MAX_CPU_DEVICES",
    "PINNED",
    "STAND_IN_VARIABLE",
    "enable_gpu_memory_growth",
    "gpu_available",
    "gpu_stand_in_active",
    "missing_xla_kernel",
    "pin_runtime",
    "runtime_line",
    "simulated_cpu_only",
    "simulated_gpu",
    "split_cpu",
    "stand_in_requested",
    "start_gpu_stand_in",
]

#: The environment variable that makes ``setup()`` start the GPU stand-in (value ``"1"``).
STAND_IN_VARIABLE = "WHITE_BOX_TF_GPU_STAND_IN"
#: XLA's "no kernel for this op" message, for the CPU's and the GPU's compiler alike.
_NO_XLA_KERNEL = re.compile(r"No registered '(\w+)' OpKernel for XLA_(?:CPU|GPU)_JIT devices")
#: The most logical CPU devices ``split_cpu`` makes (replicas for ``tf.distribute`` tests,
#: not cores).
MAX_CPU_DEVICES = 256


#: What JAX and PyTorch write instead of the TensorFlow-only device settings.
_MEMORY_GROWTH_INSTEAD = {
    "jax": "XLA_PYTHON_CLIENT_PREALLOCATE=false in the environment before JAX starts",
    "torch": "nothing: PyTorch's caching allocator takes GPU memory as it needs it",
}
_SPLIT_CPU_INSTEAD = {
    "jax": "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts, then "
    "keras.distribution.DataParallel",
    "torch": "torch.distributed with the gloo backend, one process per replica",
}
_SIMULATED_GPU_INSTEAD = {
    "jax": "jit_compile=True (JAX compiles with XLA on every device)",
    "torch": "jit_compile=True for torch.compile; a CUDA machine for the GPU paths",
}


def gpu_available() -> bool:
    """Return True when the running Keras backend can see at least one GPU.

    TensorFlow: a physical GPU (the GPU stand-in's counts); JAX and PyTorch: a GPU device
    (``companion.timing.default_device``).

    Taught in chapter 1, "Ops: the atoms".
    """
    from companion._backend import backend

    if backend() != "tensorflow":
        from companion.timing import default_device

        return default_device() == "gpu:0"
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def enable_gpu_memory_growth() -> list[str]:
    """Let TensorFlow take GPU memory as it needs it instead of all of it at start-up.

    By default the first TensorFlow op maps nearly all GPU memory into the process. A
    notebook that then starts a child Python process with TensorFlow (chapters 3 and 4 reload
    saved models in one) would leave the child nothing. With memory growth the parent holds
    only what it uses, so the child can use the same GPU. Must run before the first op
    touches the GPU; afterwards TensorFlow refuses, and the GPU is left as it is.

    Returns:
        The names of the GPUs now growing their memory (empty on a CPU-only runtime).

    Raises:
        companion.backends.TensorFlowRequired: Under another backend (naming what to set there
            instead).

    Taught in chapter 2, "What composing gives you for free".
    """
    require_tensorflow("companion.devices.enable_gpu_memory_growth", _MEMORY_GROWTH_INSTEAD)
    import tensorflow as tf

    configured = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # the GPU is already initialised: its memory is already mapped
            continue
        except ValueError:  # a GPU TensorFlow's runtime does not know: the stand-in's
            continue
        configured.append(gpu.name)
    return configured


def split_cpu(devices: int = 2) -> list[str]:
    """Split the CPU into ``devices`` logical devices: ``tf.distribute`` replicas on one machine.

    ``tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])`` then runs two replicas in this
    process: the same code that runs one replica per GPU, testable without GPUs. Call it once,
    before TensorFlow runs its first op (right after ``setup()``, which runs none); calling it
    again with the same number is harmless.

    Args:
        devices: Number of logical CPU devices (an int from 1 to ``MAX_CPU_DEVICES``).

    Returns:
        The logical CPU device names, e.g. ``["/device:CPU:0", "/device:CPU:1"]``.

    Raises:
        TypeError: If ``devices`` is not an int.
        ValueError: If ``devices`` is below 1 or above ``MAX_CPU_DEVICES``.
        RuntimeError: If TensorFlow has already started with another number of CPU devices
            (restart the kernel and call it earlier).
        companion.backends.TensorFlowRequired: Under another backend (naming what to use there
            instead).

    Taught in chapter 7, "The same loop on two replicas: MirroredStrategy".
    """
    devices = check_int(devices, "devices", minimum=1, maximum=MAX_CPU_DEVICES)
    require_tensorflow("companion.devices.split_cpu", _SPLIT_CPU_INSTEAD)
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if len(current or [None]) != devices:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * devices
            )
        except RuntimeError as error:
            running = len(tf.config.list_logical_devices("CPU"))
            raise RuntimeError(
                f"devices: TensorFlow already runs with {running} CPU device(s) and cannot "
                f"switch to {devices}; call split_cpu before the first TensorFlow op "
                "(restart the kernel)"
            ) from error
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def _simulated_gpu_device() -> Any:
    import tensorflow as tf

    return tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")


def _with_a_gpu(listed: Any) -> Any:
    """``tf.config.list_physical_devices`` that also lists one GPU when none is there."""

    def list_physical_devices(device_type: str | None = None) -> list[Any]:
        devices = listed(device_type)
        if device_type in (None, "GPU") and not any(d.device_type == "GPU" for d in devices):
            devices = [*devices, _simulated_gpu_device()]
        return devices

    return list_physical_devices


def _without_gpus(listed: Any) -> Any:
    """``tf.config.list_physical_devices`` that lists no GPU, real or simulated."""

    def list_physical_devices(device_type: str | None = None) -> list[Any]:
        return [d for d in listed(device_type) if d.device_type != "GPU"]

    return list_physical_devices


@contextlib.contextmanager
def _listing(make: Any) -> Iterator[None]:
    import tensorflow as tf

    listed = tf.config.list_physical_devices
    tf.config.list_physical_devices = make(listed)
    try:
        yield
    finally:
        tf.config.list_physical_devices = listed


def simulated_gpu() -> contextlib.AbstractContextManager[None]:
    """Let Keras believe a GPU is visible, so that ``compile()`` chooses what it chooses on a GPU.

    ``model.compile()`` leaves ``jit_compile="auto"``, which Keras resolves by asking TensorFlow
    for its physical devices: with a GPU among them (and no ``tf.distribute`` strategy), the
    model is compiled with XLA unless one of its layers sets ``supports_jit = False`` or op
    determinism is on. Inside this block ``tf.config.list_physical_devices`` also lists one GPU;
    nothing else changes, and nothing runs on a GPU. Call ``compile`` inside the block and
    ``fit`` after it: XLA then compiles the step for the CPU, where an op without an XLA kernel
    (``py_function``, a custom C++ op) fails as it does on a GPU. Anything else that asks for
    devices inside the block (``gpu_available``, for one) sees the GPU too,
    so keep the block short. The device list is restored on exit, also after an error.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> with simulated_gpu():
        ...     model.compile(optimizer="sgd", loss="mse")
        >>> model.jit_compile
        True

    Taught in chapter 8, "XLA: jit_compile".
    """
    require_tensorflow("companion.devices.simulated_gpu", _SIMULATED_GPU_INSTEAD)
    return _listing(_with_a_gpu)


def simulated_cpu_only() -> contextlib.AbstractContextManager[None]:
    """The opposite of ``simulated_gpu``: inside the block TensorFlow lists no GPU at all.

    ``compile()`` inside it chooses what it chooses on a CPU-only machine (no XLA by default),
    also on a GPU runtime or under the stand-in.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> with simulated_gpu(), simulated_cpu_only():
        ...     model.compile(optimizer="sgd", loss="mse")
        >>> model.jit_compile
        False

    Taught in chapter 8, "XLA: jit_compile".
    """
    require_tensorflow("companion.devices.simulated_cpu_only", _SIMULATED_GPU_INSTEAD)
    return _listing(_without_gpus)


#: Set once ``start_gpu_stand_in()`` has run: the stand-in lasts as long as the process.
_STAND_IN = {"started": False}


def gpu_stand_in_active() -> bool:
    """True when the GPU stand-in has started in this process: ``start_gpu_stand_in()`` under
    TensorFlow, ``pin_runtime()`` under JAX (not inside ``simulated_gpu``).

    Taught in chapter 8, "XLA: jit_compile".
    """
    return _STAND_IN["started"]


def start_gpu_stand_in() -> None:
    """Make this whole process look like a GPU runtime to Keras and TensorFlow, on a CPU.

    From now on ``tf.config.list_physical_devices`` lists one GPU (so Keras compiles ``fit``,
    ``evaluate`` and ``predict`` with XLA by default, as on a GPU), and Grappler's remapper is
    off (it makes oneDNN's fused kernels, which exist on the CPU only). The ops still run on the
    CPU: ``tf.config.list_logical_devices`` lists no GPU, and the numerics of GPU kernels, TF32
    and speed are not simulated. Calling it again changes nothing. ``setup()`` calls it when the
    environment variable ``WHITE_BOX_TF_GPU_STAND_IN`` is ``"1"``.

    Taught in chapter 8, "XLA: jit_compile".
    """
    require_tensorflow("companion.devices.start_gpu_stand_in", _SIMULATED_GPU_INSTEAD)
    import tensorflow as tf

    if gpu_stand_in_active():
        return
    tf.config.list_physical_devices = _with_a_gpu(tf.config.list_physical_devices)
    tf.config.optimizer.set_experimental_options({"remapping": False})
    _STAND_IN["started"] = True


def stand_in_requested() -> bool:
    """True when the environment asks ``setup()`` for the GPU stand-in.

    Example:
        >>> import os
        >>> stand_in_requested() == (os.environ.get(STAND_IN_VARIABLE) == "1")
        True

    Taught in chapter 8, "XLA: jit_compile".
    """
    return os.environ.get(STAND_IN_VARIABLE, "") == "1"


#: Read by JAX at its first GPU array; without it JAX takes 75% of the GPU's memory at once.
JAX_PREALLOCATE = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
#: What ``pin_runtime`` pins on a GPU, by backend (``runtime_line`` says it).
PINNED = {
    "tensorflow": "TF32 off, memory grown as needed",
    "jax": "matmuls in full float32 (no TF32), memory taken as needed",
    "torch": "TF32 off for matmuls and cuDNN, memory taken as needed",
}


def pin_runtime() -> dict[str, object]:
    """Pin what this process's float32 results and GPU memory depend on, as ``setup()`` does.

    The book compares float32 results within 1e-5. On an A100 or L4, TF32 keeps 10 bits of
    mantissa (about 1e-3) where it is on: TensorFlow's and JAX's float32 matmuls and PyTorch's
    cuDNN convolutions, by default. A process that takes the GPU's memory up front leaves none
    to the notebook's other processes. So, by backend:

    - TensorFlow: memory growth (``enable_gpu_memory_growth``), the GPU stand-in when
      ``stand_in_requested()``, TF32 off.
    - JAX: ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set (read at JAX's first GPU array;
      ``run_on_backend`` sets it before JAX starts), ``jax_default_matmul_precision``
      ``"highest"``, and under the stand-in one GPU in ``keras.distribution.list_devices()``
      (what a one-GPU runtime lists; ``list_devices("cpu")`` still lists the host's devices).
    - PyTorch: ``allow_tf32`` off for matmuls and cuDNN; its allocator takes memory as needed.

    On a CPU nothing changes but the flags. Calling it again changes nothing more.

    Returns:
        What was pinned, under the keys ``backend``, ``version`` (the backend's), ``device``
        (``"GPU"``, ``"GPU stand-in"`` or ``"CPU"``), ``tf32`` (False) and
        ``gpu_memory_growth`` (the GPUs TensorFlow grows; always empty off TensorFlow).

    Example:
        >>> info = pin_runtime()
        >>> info["tf32"], info["device"] in ("GPU", "GPU stand-in", "CPU")
        (False, True)

    Taught in chapter 14, "One process per backend".
    """
    from companion._backend import backend

    running = backend()
    info = _PINS[running]() if running in _PINS else {"version": None, "tf32": False}
    device = "GPU" if gpu_available() else "CPU"
    if gpu_stand_in_active():
        device = "GPU stand-in"
    return {"backend": running, "device": device, "gpu_memory_growth": [], **info}


def _pin_tensorflow() -> dict[str, object]:
    import tensorflow as tf

    growing = enable_gpu_memory_growth()
    if stand_in_requested():
        start_gpu_stand_in()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return {
        "version": tf.__version__,
        "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "gpu_memory_growth": growing,
    }


def _pin_jax() -> dict[str, object]:
    for name, value in JAX_PREALLOCATE.items():
        os.environ.setdefault(name, value)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    if stand_in_requested() and not gpu_stand_in_active():
        _list_one_gpu_to_keras()
        _STAND_IN["started"] = True
    precision = jax.config.jax_default_matmul_precision
    return {"version": jax.__version__, "tf32": precision not in ("highest", "float32")}


def _pin_torch() -> dict[str, object]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
    return {"version": torch.__version__, "tf32": tf32}


#: Each backend's part of ``pin_runtime``.
_PINS = {"tensorflow": _pin_tensorflow, "jax": _pin_jax, "torch": _pin_torch}


def _list_one_gpu_to_keras() -> None:
    """JAX under the stand-in: ``keras.distribution.list_devices()`` (the default platform's
    devices) lists one GPU, as on a one-GPU runtime; ``list_devices("cpu")`` is left as it is."""
    import keras

    listed = keras.distribution.list_devices

    def list_devices(device_type: str | None = None) -> list[str]:
        if device_type is None or device_type.lower() == "gpu":
            return ["gpu:0"]
        return listed(device_type)

    keras.distribution.list_devices = list_devices


def runtime_line(info: dict) -> str:
    """Where a process ran, in words, from ``pin_runtime()``'s result: what its child says.

    Raises:
        TypeError: If ``info`` is not a dict.

    Example:
        >>> runtime_line({"backend": "jax", "device": "CPU"})
        'ran on the CPU'
        >>> runtime_line({"backend": "torch", "device": "GPU"})
        'ran on the GPU: TF32 off for matmuls and cuDNN, memory taken as needed'

    Taught in chapter 14, "One process per backend".
    """
    check_instance(info, "info", dict, "pin_runtime's result (a dict)")
    device = info.get("device")
    if device == "GPU":
        return f"ran on the GPU: {PINNED.get(str(info.get('backend')), 'TF32 off')}"
    if device == "GPU stand-in":
        return "ran on the CPU, under the GPU stand-in (Keras chooses as on a GPU)"
    return "ran on the CPU"


def missing_xla_kernel(error: BaseException | str) -> str | None:
    """The op XLA found no kernel for, from its error (on a CPU or a GPU), or None.

    XLA names the device it compiles for: ``... OpKernel for XLA_CPU_JIT devices`` on a CPU,
    ``XLA_GPU_JIT`` on a GPU. This reads the op's name from either.

    Raises:
        TypeError: If ``error`` is neither an exception nor a str.

    Example:
        >>> missing_xla_kernel(
        ...     "Detected unsupported operations when trying to compile graph ... on "
        ...     "XLA_GPU_JIT: EagerPyFunc (No registered 'EagerPyFunc' OpKernel for "
        ...     "XLA_GPU_JIT devices compatible with node {{node blur}})"
        ... )
        'EagerPyFunc'

    Taught in chapter 10, "What XLA refuses".
    """
    check_instance(error, "error", (BaseException, str), "an exception or a str")
    match = _NO_XLA_KERNEL.search(str(error))
    return match.group(1) if match else None
