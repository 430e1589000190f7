"""Companion package of *White-Box TensorFlow*.

One module per chapter of the book, imported on demand so that ``import companion``
stays cheap and never imports TensorFlow by itself::

    from companion.notebook import setup        # every chapter's first cell
    from companion.data import make_shapes      # the synthetic dataset
    from companion.introspection import traced_ops, weights_table   # chapter 1
    from companion.ops import swish, softplus                       # chapter 2
    from companion.pyfunc import native_blur, GaussianBlur          # chapter 3
    from companion.tflite import convert, run                       # chapters 3, 13: TFLite
    from companion.layers import CustomDense, ResidualBlock         # chapter 4
    from companion.gradients import clipped_identity, gradient_error  # chapter 5
    from companion.models import functional_multimodal, MultiModalModel  # chapter 6
    from companion.training import fit, make_train_step             # chapters 7, 10
    from companion.fitting import GuardedModel                      # chapter 8
    from companion.optimizers import AdamW, TransformGradients      # chapter 9
    from companion.cluster import run_workers, variables_digest     # chapter 10
    from companion.diagnostics import check_roundtrip, first_nonfinite  # chapter 11
    from companion.timing import time_call, compare                 # timing harness (chapters 1-13)
    from companion.bench import blur_op, compiled_blur_vs_opencv    # chapter 12 (make bench)
    from companion.kernels import cpp_blur                          # chapter 13 (needs g++)
    from companion.exercises import check, hint                     # every chapter's exercises
"""

__version__ = "0.1.0"
