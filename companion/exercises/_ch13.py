"""Chapter 13, a compiled op: a box blur from the op, the dot-product test, the wrong gradient,
one core each."""

from __future__ import annotations

import math

import numpy as np

from companion.exercises._framework import FUNCTION, MAPPING, Exercise, Kind, expect

SCRIPT = Kind(
    "the code of a Python script (a str) that run_python runs and that prints the ratio last",
    lambda answer: isinstance(answer, str),
)


def _box_images():
    from companion.data import make_shapes

    (images, _), _ = make_shapes(4, image_size=32, seed=0)
    return images


def box_matches_cv2(answer, context):
    """box_blur(images, k) is within 1e-5 of cv2.blur for k = 3, 5, 9"""
    import cv2

    images = _box_images()
    for k in (3, 5, 9):
        got = np.asarray(answer(images, k), "float32")
        reference = np.stack([cv2.blur(image, (k, k)) for image in images])
        expect(
            got.shape == reference.shape,
            f"expected a blur of shape {reference.shape} for k={k}, got {got.shape}",
        )
        error = float(np.max(np.abs(got - reference)))
        why = ""
        if np.allclose(got, reference * k * k, rtol=1e-4, atol=1e-4):
            why = " (the kernel sums to k, not 1: divide it by k, np.ones(k) / k)"
        elif np.allclose(got, reference / (k * k), rtol=1e-4, atol=1e-4):
            why = " (the op applies the 1-D kernel along both axes: divide by k, not k * k)"
        expect(
            error < 1e-5,
            f"expected the box blur within 1e-5 of cv2.blur(image, ({k}, {k})), got a max "
            f"|difference| of {error:.3g}{why}",
        )


def _gap(answer, forward, adjoint, shape):
    """``answer(forward, adjoint, shape)``, checked to be a number >= 0."""
    gap = answer(forward, adjoint, shape)
    expect(
        isinstance(gap, (int, float, np.floating)) and not isinstance(gap, bool),
        f"expected the gap as a number, got {type(gap).__name__}",
    )
    expect(math.isfinite(gap) and gap >= 0, f"expected a finite gap >= 0, got {gap}")
    return float(gap)


def _matrix():
    """A 6x6 matrix that is not symmetric: its transpose is another map."""
    return np.random.default_rng(7).standard_normal((6, 6))


def _why_a_gap(gap):
    """The likely mistake when a true adjoint pair shows a gap."""
    if gap < 1e-5:
        return " (draw x and y in float64: float32 rounding alone leaves about 1e-7)"
    return (
        " (compare <forward(x), y> with <x, adjoint(y)>: the adjoint is applied to y, and the "
        "result is paired with x)"
    )


def true_pair_passes(answer, context):
    """A matrix M and its transpose M.T give a gap below 1e-9"""
    matrix = _matrix()
    gap = _gap(answer, lambda v: matrix @ v, lambda v: matrix.T @ v, (6,))
    expect(
        gap < 1e-9,
        f"expected a gap below 1e-9 for M and M.T, which are adjoint, got {gap:.3g}"
        + _why_a_gap(gap),
    )


def wrong_pair_fails(answer, context):
    """M as its own adjoint shows a gap (above 1e-9)"""
    matrix = _matrix()
    gap = _gap(answer, lambda v: matrix @ v, lambda v: matrix @ v, (6,))
    expect(
        gap > 1e-9,
        f"expected a gap above 1e-9 for M against itself, M != M.T, got {gap:.3g} (are x and "
        "y random? With constant vectors, <M x, y> = <x, M y> for any square M: draw them "
        "with a NumPy random generator)",
    )


def finds_the_blur_border(answer, context):
    """On TensorFlow ops: the blur's gradient passes, the blur as its own adjoint fails"""
    import tensorflow as tf

    from companion.pyfunc import native_blur

    def blur(t):
        with tf.device("/CPU:0"):  # float64 on the CPU: the same sums on every machine
            return native_blur(tf.constant(t, tf.float64), 5)

    def gradient(t):  # B^T t: the gradient of sum(blur(x) * t)
        x = tf.zeros(shape, tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = blur(x)
        return tape.gradient(y, x, output_gradients=tf.constant(t, tf.float64))

    shape = (2, 9, 10, 3)
    right = _gap(answer, blur, gradient, shape)
    expect(
        right < 1e-9,
        f"expected a gap below 1e-9 for native_blur and its gradient, got {right:.3g}"
        + _why_a_gap(right),
    )
    wrong = _gap(answer, blur, blur, shape)
    expect(
        wrong > 1e-9,
        f"expected a gap above 1e-9 for native_blur as its own adjoint (wrong at the "
        f"borders), got {wrong:.3g} (are x and y random, not constant?)",
    )


def _wrong_gradient(answer, context):
    """The answer's and ``cpp_blur``'s gradients of sum(blur(x) * upstream), float64, 9x10."""

    def make():
        import tensorflow as tf

        from companion.kernels import cpp_blur

        x = np.random.default_rng(0).random((1, 9, 10, 1))
        upstream = tf.constant(np.random.default_rng(1).random((1, 9, 10, 1)))
        grads = {}
        for name, fn in [("answer", answer["blur"]), ("right", lambda t: cpp_blur(t, 5))]:
            with tf.GradientTape() as tape:
                xt = tf.constant(x)
                tape.watch(xt)
                total = tf.reduce_sum(fn(xt) * upstream)
            grads[name] = np.asarray(tape.gradient(total, xt))[0, :, :, 0]
        return x, upstream, grads

    return context.once("gradients", make)


def forward_is_cpp_blur(answer, context):
    """The forward pass is cpp_blur(x, 5)"""
    from companion.kernels import cpp_blur

    x, _, _ = _wrong_gradient(answer, context)
    got, expected = np.asarray(answer["blur"](x)), np.asarray(cpp_blur(x, 5))
    expect(got.shape == expected.shape, f"expected shape {expected.shape}, got {got.shape}")
    error = float(np.max(np.abs(got - expected)))
    expect(
        error < 1e-9, f"expected cpp_blur(x, 5) in float64, got a max |difference| of {error:.3g}"
    )


def backward_is_the_blur(answer, context):
    """The backward pass is the blur of the upstream gradient, so gradient_error is > 0.01"""
    from companion.gradients import gradient_error
    from companion.kernels import cpp_blur

    x, upstream, grads = _wrong_gradient(answer, context)
    blurred = np.asarray(cpp_blur(upstream, 5))[0, :, :, 0]
    gap = float(np.max(np.abs(grads["answer"] - blurred)))
    why = ""
    if np.max(np.abs(grads["answer"] - grads["right"])) < 1e-9:
        why = " (this is the right gradient, GaussianBlurGrad's: return cpp_blur(upstream, 5))"
    expect(
        gap < 1e-9,
        f"expected the gradient cpp_blur(upstream, 5), got a max |difference| of {gap:.3g}{why}",
    )
    error = gradient_error(answer["blur"], x)
    expect(error > 0.01, f"expected a gradient_error above 0.01, got {error:.3g}")


def wrong_pixels_named(answer, context):
    """`wrong` is True exactly where the gradient differs from cpp_blur's (a 9x10 array)"""
    _, _, grads = _wrong_gradient(answer, context)
    truth = np.abs(grads["answer"] - grads["right"]) > 1e-9
    wrong = np.asarray(answer.get("wrong"))
    expect(
        wrong.shape == (9, 10),
        f"expected wrong of shape (9, 10), one entry per pixel, got {wrong.shape} (drop the "
        "batch and channel axes: [0, :, :, 0])",
    )
    wrong = wrong.astype(bool)
    if np.array_equal(wrong, ~truth):
        expect(False, "expected True at the wrong pixels, got True at the right ones")
    expect(
        np.array_equal(wrong, truth),
        f"expected {int(truth.sum())} wrong pixels, all within 2 of an edge, got "
        f"{int(wrong.sum())}, {int(np.sum(wrong != truth))} of them misplaced (compare the two "
        "gradients with a tolerance such as 1e-9, float64)",
    )


def _one_core(answer, context):
    """The reader's script run by run_python, with the thread counts printed after it."""

    def make():
        from companion.notebook import run_python

        probe = (
            "\nimport tensorflow as _tf, cv2 as _cv2\n"
            "print('threads:', _tf.config.threading.get_intra_op_parallelism_threads(), "
            "_cv2.getNumThreads())\n"
        )
        return run_python(answer + probe)

    return context.once("run", make)


def prints_a_ratio(answer, context):
    """The script runs in a fresh process and prints a finite, positive ratio"""
    child = _one_core(answer, context)
    said = (child.stderr.strip().splitlines() or ["no output"])[-1]
    if "cannot be modified after initialization" in child.stderr:
        said += " (set both thread counts before any TensorFlow op runs)"
    expect(child.returncode == 0, f"expected exit code 0, got {child.returncode}: {said}")
    lines = child.stdout.strip().splitlines()
    last = lines[-2].split()[-1] if len(lines) >= 2 else "nothing"
    try:
        ratio = float(last)
    except ValueError:
        ratio = math.nan
    expect(
        math.isfinite(ratio) and ratio > 0,
        f"expected the ratio (a positive number) as the last word the script prints, got {last!r}",
    )


def one_thread_each(answer, context):
    """TensorFlow's intra-op threads and OpenCV's threads are both 1 in that process"""
    child = _one_core(answer, context)
    threads = [line for line in child.stdout.splitlines() if line.startswith("threads:")]
    expect(threads, "expected the script to finish, got no thread counts (see the check above)")
    tf_threads, cv2_threads = (int(n) for n in threads[-1].split()[1:])
    expect(
        tf_threads == 1,
        f"expected 1 intra-op thread, got {tf_threads} "
        "(tf.config.threading.set_intra_op_parallelism_threads(1))",
    )
    expect(cv2_threads == 1, f"expected 1 OpenCV thread, got {cv2_threads} (cv2.setNumThreads(1))")


EXERCISES = (
    Exercise(
        "13.1",
        "A box blur from the same op.",
        FUNCTION,
        (box_matches_cv2,),
        (
            "The op takes a 1-D kernel and applies it along both axes, like a separable "
            "Gaussian; a box kernel of length k gives every pixel the same weight.",
            "box_blur(images, k) returns load_blur_op().gaussian_blur(images, kernel) with a "
            "float32 kernel of k equal entries summing to 1.",
        ),
    ),
    Exercise(
        "13.2",
        "The dot-product test.",
        FUNCTION,
        (true_pair_passes, wrong_pair_fails, finds_the_blur_border),
        (
            "For a linear map B, the adjoint is the map A with <B x, y> = <x, A y> for every x "
            "and y; one random pair of vectors already catches almost every wrong A.",
            "Draw x and y of the given shape in float64 with a NumPy random generator, compute "
            "np.vdot of forward(x) with y and np.vdot of x with adjoint(y), and return the "
            "absolute difference divided by the absolute value of the first.",
        ),
    ),
    Exercise(
        "13.3",
        "The wrong gradient.",
        MAPPING,
        (forward_is_cpp_blur, backward_is_the_blur, wrong_pixels_named),
        (
            "@tf.custom_gradient wants the function to return (output, grad_fn); grad_fn "
            "maps the upstream gradient to the input's gradient.",
            "Take the gradients of tf.reduce_sum(fn(x) * upstream) with a GradientTape for "
            "your blur and for cpp_blur, and mark the pixels where they differ by more "
            "than 1e-9.",
        ),
    ),
    Exercise(
        "13.4",
        "One core each.",
        SCRIPT,
        (prints_a_ratio, one_thread_each),
        (
            "TensorFlow fixes its thread pools when it runs its first op; after that "
            "set_intra_op_parallelism_threads raises.",
            "Start the script with import tensorflow as tf, cv2 and the two set calls, then "
            "import the rest, time cpp_blur and cv2_blur with time_call and print the ratio "
            "of their medians last.",
        ),
    ),
)
