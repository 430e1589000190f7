"""Finding the classic pitfalls of custom layers and models: a save/load round trip that names
what breaks, the first layer (and the first gradient) that goes NaN, a ``tf.function`` that
counts its traces, and a check that a layer works on a batch size it has not seen.

Chapter 11 reproduces each pitfall, detects it with these helpers, fixes it and checks the fix:

- ``check_roundtrip(obj, sample_input)`` saves a layer, model or optimizer to ``.keras``, loads
  it (by default in a fresh Python process, as a user reloading the file would) and compares
  config, weights and outputs; each problem found is a sentence that names what differs.
- ``first_nonfinite(model, inputs)`` runs the model eagerly, watching every sublayer's output,
  and names the first layer that produced a NaN or an Inf; ``first_nonfinite_gradient`` and
  ``gradient_norms`` do the same for the gradients of a training step.
- ``count_traces(fn)`` is ``tf.function(fn)`` that records how often it was traced, and with
  which arguments, so retracing can be measured; ``explain_retrace(counter)`` says which
  argument changed (shape, dtype or Python value) between a trace and the one before it.
- ``check_variable_batch(layer, sample_input)`` traces a layer with the batch size unknown and
  runs it on two batch sizes.
- ``simulated_gpu()`` (from ``companion.devices``) makes ``model.compile()`` choose as it does on
  a machine with a GPU (XLA by default), so the GPU's code path can be tested on a CPU.

One tool per file: ``_roundtrip`` (with ``_configs``, the config and registration checks),
``_variable_batch``, ``_nonfinite``, ``_gradients`` and ``_tracing``; ``_inputs`` and
``_errors`` check their arguments and shorten the errors they report.

Backends: TensorFlow, JAX, PyTorch, except ``count_traces``, ``explain_retrace``,
``check_variable_batch`` and ``simulated_gpu`` (TensorFlow only).
"""

from companion.devices import simulated_gpu
from companion.diagnostics._gradients import first_nonfinite_gradient, gradient_norms
from companion.diagnostics._nonfinite import first_nonfinite
from companion.diagnostics._roundtrip import RoundtripReport, check_roundtrip
from companion.diagnostics._tracing import TraceCounter, count_traces, explain_retrace
from companion.diagnostics._variable_batch import check_variable_batch

__all__ = [
    "RoundtripReport",
    "TraceCounter",
    "check_roundtrip",
    "check_variable_batch",
    "count_traces",
    "explain_retrace",
    "first_nonfinite",
    "first_nonfinite_gradient",
    "gradient_norms",
    "simulated_gpu",
]
