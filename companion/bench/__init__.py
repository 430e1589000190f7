"""Chapter 12's experiments and ``python -m companion.bench`` (``make bench``).

The experiments time calls side by side with the harness of ``companion.timing`` (``compare``)
and return ``Row`` records (name, device, sizes, medians, spreads, reference, ratio and each
round's ratio): the blur through ``py_function`` against ``native_blur`` as an op, inside a
model and in a ``tf.data`` pipeline (``blur_op``, ``blur_in_model``, ``blur_pipeline``, each
taking a mapping of blur methods); eager vs ``tf.function`` vs XLA training steps
(``training_step_modes``); a per-image loop vs ``tf.vectorized_map`` vs batched ops
(``per_example_vs_batched``). Sizes scale with the device (``default_sizes``). ``python -m
companion.bench`` (``make bench``) runs the headline ones with chapters 7 and 9's measures
(``Entry`` records), prints a table and writes ``_build/bench.json``.

One job per file: the records and their tables (``_records``), the sizing harness
(``_harness``), chapter 12's experiments (``_experiments``), the headline measures of chapters 7
and 9 (``_headline``) and the command line (``_cli``, run by ``__main__``). The timing harness
itself (``time_call``, ``compare``, ``default_device``) is imported from ``companion.timing``.

Backends: TensorFlow only (on JAX use ``companion.timing.compare`` on your own jitted functions;
on PyTorch use ``companion.timing.compare`` with ``OMP_NUM_THREADS=1`` on a shared CPU).
"""

from companion._backend import require_tensorflow

require_tensorflow(
    "companion.bench",
    {
        "jax": "companion.timing.compare on your own jitted functions",
        "torch": "companion.timing.compare on your own functions",
    },
)

from companion.bench._cli import QUICK_SIZES, main  # noqa: E402
from companion.bench._experiments import (  # noqa: E402
    PER_EXAMPLE_METHODS,
    STEP_MODES,
    blur_in_model,
    blur_op,
    blur_pipeline,
    compiled_blur_vs_opencv,
    default_blur_methods,
    per_example_vs_batched,
    training_step_modes,
)
from companion.bench._harness import (  # noqa: E402
    MAX_BATCH_BYTES,
    MAX_IMAGE_SIZE,
    RUN_ARGS,
    SHARED_ARGS,
    SIZES,
    default_sizes,
)
from companion.bench._headline import (  # noqa: E402
    LOOP_MODELS,
    MAX_EPOCHS,
    MAX_EXAMPLES,
    MAX_STEPS,
    adamw_step_time,
    training_loop_vs_fit,
)
from companion.bench._records import ROW_KEYS, Entry, Row, rows_table, rows_to_entries  # noqa: E402

__all__ = [
    "LOOP_MODELS",
    "MAX_BATCH_BYTES",
    "MAX_EPOCHS",
    "MAX_EXAMPLES",
    "MAX_IMAGE_SIZE",
    "MAX_STEPS",
    "PER_EXAMPLE_METHODS",
    "QUICK_SIZES",
    "ROW_KEYS",
    "RUN_ARGS",
    "SHARED_ARGS",
    "SIZES",
    "STEP_MODES",
    "Entry",
    "Row",
    "adamw_step_time",
    "blur_in_model",
    "blur_op",
    "blur_pipeline",
    "compiled_blur_vs_opencv",
    "default_blur_methods",
    "default_sizes",
    "main",
    "per_example_vs_batched",
    "rows_table",
    "rows_to_entries",
    "training_loop_vs_fit",
    "training_step_modes",
]
