"""The TensorFlow-only pieces of the companion refuse another backend with ``TensorFlowRequired``,
naming the piece and what to use instead.

Under JAX and PyTorch (the backends lane) each case runs here. Under TensorFlow (``make test``)
the same cases run in a child process with ``KERAS_BACKEND=jax``: TensorFlow installed, JAX
running, where ``import companion.pyfunc`` must refuse too and not quietly use TensorFlow.
"""

import importlib
import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest

from companion.notebook import run_python

ROOT = Path(__file__).resolve().parents[2]


def importing(module):
    return lambda: importlib.import_module(module)


def calling(module, name, *args):
    return lambda: getattr(importlib.import_module(module), name)(*args)


#: case -> (what the error names, {backend: a phrase of the replacement it gives}, the action).
CASES = {
    "import pyfunc": (
        "companion.pyfunc",
        {"jax": "jax.pure_callback", "torch": "in eager code"},
        importing("companion.pyfunc"),
    ),
    "import tflite": (
        "companion.tflite",
        {"jax": "jax2tf", "torch": "litert_torch.convert"},
        importing("companion.tflite"),
    ),
    "import kernels": (
        "companion.kernels",
        {"jax": "XLA FFI", "torch": "torch.library"},
        importing("companion.kernels"),
    ),
    "import _kernels": (
        "companion._kernels",
        {"jax": "Pallas", "torch": "torch.library"},
        importing("companion._kernels"),
    ),
    "import training": (
        "companion.training",
        {"jax": "jax.value_and_grad", "torch": "loss.backward()"},
        importing("companion.training"),
    ),
    "traced_ops": (
        "companion.introspection.traced_ops",
        {"jax": "jax.make_jaxpr", "torch": "torch.fx"},
        calling("companion.introspection", "traced_ops", abs, np.ones(2, "float32")),
    ),
    "count_traces": (
        "companion.diagnostics.count_traces",
        {"jax": "jax_explain_cache_misses", "torch": "TORCH_LOGS=recompiles"},
        calling("companion.diagnostics", "count_traces", abs),
    ),
    "check_variable_batch": (
        "companion.diagnostics.check_variable_batch",
        {"jax": "jax.export", "torch": "torch.export"},
        calling("companion.diagnostics", "check_variable_batch", abs, np.ones((3, 2))),
    ),
    "value_and_gradient": (
        "companion.gradients.value_and_gradient",
        {"jax": "jax.value_and_grad", "torch": "torch.autograd.grad"},
        calling("companion.gradients", "value_and_gradient", abs, [1.0]),
    ),
    "gradient_error": (
        "companion.gradients.gradient_error",
        {"jax": "check_grads", "torch": "gradcheck"},
        calling("companion.gradients", "gradient_error", abs, [1.0]),
    ),
    "gradient_penalty": (
        "companion.gradients.gradient_penalty",
        {"jax": "jax.value_and_grad", "torch": "torch.autograd.grad"},
        calling("companion.gradients", "gradient_penalty", abs, [[1.0]], [[0.0]]),
    ),
    "split_cpu": (
        "companion.devices.split_cpu",
        {"jax": "xla_force_host_platform_device_count", "torch": "torch.distributed"},
        calling("companion.devices", "split_cpu", 2),
    ),
    "enable_gpu_memory_growth": (
        "companion.devices.enable_gpu_memory_growth",
        {"jax": "XLA_PYTHON_CLIENT_PREALLOCATE", "torch": "caching allocator"},
        calling("companion.devices", "enable_gpu_memory_growth"),
    ),
    "simulated_gpu": (
        "companion.devices.simulated_gpu",
        {"jax": "jit_compile=True", "torch": "torch.compile"},
        calling("companion.devices", "simulated_gpu"),
    ),
    "simulated_cpu_only": (
        "companion.devices.simulated_cpu_only",
        {"jax": "jit_compile=True", "torch": "torch.compile"},
        calling("companion.devices", "simulated_cpu_only"),
    ),
    "start_gpu_stand_in": (
        "companion.devices.start_gpu_stand_in",
        {"jax": "jit_compile=True", "torch": "torch.compile"},
        calling("companion.devices", "start_gpu_stand_in"),
    ),
}


def outcomes():
    """case -> [error class name, message], or [None, None] when the action did not raise."""
    found = {}
    for case, (_, _, action) in CASES.items():
        try:
            action()
            found[case] = [None, None]
        except Exception as error:  # the finding: which error, and what it says
            found[case] = [type(error).__name__, str(error)]
    return found


def check_refused(outcome, case, running):
    """The error is ``TensorFlowRequired`` and names the piece, the backend and the replacement."""
    what, instead, _ = CASES[case]
    kind, message = outcome
    assert kind == "TensorFlowRequired", f"{case}: {kind}: {message}"
    assert message.startswith(f"{what} needs the TensorFlow backend: Keras is running on ")
    assert f"KERAS_BACKEND={running!r}" in message and instead[running] in message


@pytest.fixture(scope="module")
def refused():
    """The outcome of every case under another backend, and which backend that was."""
    running = keras.backend.backend()
    if running != "tensorflow":
        return running, outcomes()
    code = (
        "import json\nfrom portable.test_tf_only import outcomes\n"
        "print('OUTCOMES=' + json.dumps(outcomes()))\n"
    )
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    result = run_python(code, timeout=300, env={"KERAS_BACKEND": "jax", "PYTHONPATH": path})
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("OUTCOMES="))
    return "jax", json.loads(line.removeprefix("OUTCOMES="))


@pytest.mark.parametrize("case", list(CASES))
def test_a_tensorflow_only_piece_refuses_another_backend_naming_the_replacement(refused, case):
    running, found = refused
    check_refused(found[case], case, running)


def test_the_error_is_an_import_error():
    from companion._backend import TensorFlowRequired

    assert issubclass(TensorFlowRequired, ImportError)
