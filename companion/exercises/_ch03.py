"""Chapter 3, tf.py_function: OpenCV's median in tf.data, a native box blur, a kernel size per
image, two kernel sizes, the GPU picture."""

from __future__ import annotations

import numpy as np

from companion.exercises._framework import FUNCTION, MAPPING, Exercise, Failed, expect
from companion.notebook import describe_error


def _images(context):
    """Eight 32x32 RGB images, and four 24x40 ones (not square), float32 in [0, 1]."""

    def make():
        from companion.data import make_shapes

        (square, _), _ = make_shapes(8, image_size=32, seed=0)
        (large, _), _ = make_shapes(4, image_size=40, seed=5)
        return square, np.ascontiguousarray(large[:, :24])

    return context.once("images", make)


def _stack(blur, images):
    """``blur`` applied image by image, with the channel axis kept for one-channel images."""
    return np.stack([blur(image).reshape(image.shape) for image in images])


def _called(answer, *args, shape_hint=False):
    """The answer's output as a NumPy array. With ``shape_hint``, a raise is reported with the
    input's shape and the likely mistake (a size written out instead of read)."""
    if not shape_hint:
        return np.asarray(answer(*args))
    try:
        return np.asarray(answer(*args))
    except Exception as error:  # noqa: BLE001 - reported with the input that made it
        shape = tuple(np.shape(args[0]))
        raise Failed(
            f"expected an output for a batch of shape {shape}, got {describe_error(error)} "
            "(are the height, width and channels read from the input's shape?)"
        ) from None


PAD_HINT = "pad k // 2 on each side, then a 'VALID' convolution keeps the size"
SLICE_HINT = "is each pass's slice as long as its own axis, the width for x, the height for y?"


def _compare(got, reference, ksize, what, shape_hint=PAD_HINT):
    """Fail unless ``got`` equals ``reference`` within 1e-5, naming the likely mistake."""
    expect(
        got.shape == reference.shape,
        f"expected the output shape {reference.shape} for {what}, got {got.shape} ({shape_hint})",
    )
    error = np.abs(got - reference)
    pad_y, pad_x = ksize[1] // 2, ksize[0] // 2
    inside = error[:, pad_y : error.shape[1] - pad_y, pad_x : error.shape[2] - pad_x]
    likely = ""
    if inside.max() < 1e-5:
        likely = (
            " at the borders only (OpenCV's default border mirrors without repeating the edge "
            "pixel: tf.pad(mode='REFLECT'), not zeros, not 'SYMMETRIC')"
        )
    elif np.allclose(got, reference * ksize[0] * ksize[1], rtol=1e-4, atol=1e-5):
        likely = f" (the output is {ksize[0] * ksize[1]} times too large: divide by k * k)"
    expect(
        error.max() < 1e-5,
        f"expected {what} within 1e-5 of OpenCV, got an error of {error.max():.3g}{likely}",
    )


def _median_reference(images):
    import cv2

    return np.stack([cv2.medianBlur(image, 5) for image in images])


def _median_dataset(answer, context):
    """The 32x32 images mapped with the answer (tracing it, running nothing yet)."""
    import tensorflow as tf

    images, _ = _images(context)
    return context.once(
        "median dataset", lambda: tf.data.Dataset.from_tensor_slices(images).map(answer)
    )


NOT_AN_ARRAY = (
    "OpenCV received an EagerTensor (tf.py_function passes tensors: call x.numpy() before "
    "cv2.medianBlur)"
)


def _median_values(answer, context):
    """The mapped dataset's images, with OpenCV refusing a tensor named as the mistake."""

    def make():
        try:
            return np.stack([np.asarray(x) for x in _median_dataset(answer, context)])
        except Exception as error:
            if "not a numpy array" not in str(error):
                raise
            raise Failed(f"expected the dataset to iterate, got an error: {NOT_AN_ARRAY}") from None

    return context.once("median values", make)


def median_keeps_static_shape(answer, context):
    """The mapped dataset's elements keep the image's static shape, (32, 32, 3)"""
    shape = _median_dataset(answer, context).element_spec.shape
    expect(
        shape.rank is not None and tuple(shape) == (32, 32, 3),
        f"expected the element shape (32, 32, 3), got {shape} (tf.py_function forgets the "
        "shape: restore it with blurred.set_shape(image.shape) or tf.ensure_shape)",
    )


def median_equals_opencv(answer, context):
    """Every image equals cv2.medianBlur(image, 5), exactly"""
    import cv2

    images, _ = _images(context)
    got, reference = _median_values(answer, context), _median_reference(images)
    expect(
        got.shape == reference.shape,
        f"expected images of shape {reference.shape[1:]}, got {got.shape[1:]}",
    )
    wrong = int(sum(not np.array_equal(g, r) for g, r in zip(got, reference)))
    three = np.array_equal(got, np.stack([cv2.medianBlur(image, 3) for image in images]))
    expect(
        not wrong,
        f"expected each image to equal cv2.medianBlur(image, 5), got {wrong} of {len(images)} "
        "different" + (" (they equal the 3x3 median: the size is 5)" if three else ""),
    )


def median_in_a_tf_function(answer, context):
    """In a tf.function its output has the input's static shape, for 24 x 40 images too"""
    import tensorflow as tf

    _, large = _images(context)
    traced = tf.function(answer)
    for spec in (tf.TensorSpec([24, 40, 3]), tf.TensorSpec([None, None, 3])):
        shape = traced.get_concrete_function(spec).output_shapes
        why = " (restore it with set_shape(image.shape))"
        if shape.rank is not None and tuple(shape) == (32, 32, 3):
            why = " (the shape is written out: give set_shape the image's own, image.shape)"
        expect(
            shape.rank is not None and shape.as_list() == spec.shape.as_list(),
            f"expected the static shape {tuple(spec.shape)} for a {tuple(spec.shape)} input, "
            f"got {shape}{why}",
        )
    try:
        got = np.stack([np.asarray(traced(image)) for image in large])
    except Exception as error:
        if "not a numpy array" not in str(error):
            raise
        raise Failed(f"expected it to run in a tf.function, got an error: {NOT_AN_ARRAY}") from None
    expect(
        np.array_equal(got, _median_reference(large)),
        "expected 24x40 images blurred as cv2.medianBlur(image, 5) does, got different values",
    )


def box_blur_matches(answer, context):
    """native_box_blur(images, k) equals cv2.blur within 1e-5 for k = 3, 5, 9"""
    import cv2

    images, _ = _images(context)
    for k in (3, 5, 9):
        reference = _stack(lambda image: cv2.blur(image, (k, k)), images)
        _compare(_called(answer, images, k), reference, (k, k), f"k = {k}, borders included")


def box_blur_any_shape(answer, context):
    """It works on non-square and one-channel images (24 x 40, 1 or 3 channels)"""
    import cv2

    _, images = _images(context)
    for batch in (images, np.ascontiguousarray(images[..., :1])):
        reference = _stack(lambda image: cv2.blur(image, (5, 5)), batch)
        shape = "x".join(map(str, batch.shape[1:]))
        _compare(
            _called(answer, batch, 5, shape_hint=True),
            reference,
            (5, 5),
            f"{shape} images and k = 5",
        )


KSIZES = (3, 5, 7, 3, 7, 5, 5, 3)  # a size per image, each of 3, 5 and 7 used


def _mapped(answer, images, ksizes):
    """The dataset of (image, ksize) pairs mapped with the answer, and its images."""
    import tensorflow as tf

    pairs = tf.data.Dataset.from_tensor_slices((images, np.asarray(ksizes, "int64")))
    try:
        dataset = pairs.map(answer)
        return dataset, np.stack([np.asarray(x) for x in dataset])
    except Exception as error:
        if "compatible with expected shape" not in str(error):
            raise
        shape = "x".join(map(str, images.shape[1:]))
        raise Failed(
            f"expected the dataset of {shape} images to iterate, got {describe_error(error)} "
            "(is the shape given to tf.ensure_shape the image's own, image.shape?)"
        ) from None


def _per_image_reference(images, ksizes):
    import cv2

    return np.stack([cv2.GaussianBlur(x, (int(k), int(k)), 0) for x, k in zip(images, ksizes)])


def keeps_static_shape(answer, context):
    """The mapped dataset's elements have the image's static shape, (32, 32, 3)"""
    images, _ = _images(context)
    dataset, _ = context.once("per image", lambda: _mapped(answer, images, KSIZES))
    shape = dataset.element_spec.shape
    expect(
        shape.rank is not None and tuple(shape) == (32, 32, 3),
        f"expected the element shape (32, 32, 3), got {shape} (tf.numpy_function forgets the "
        "shape: declare it with tf.ensure_shape)",
    )


def blurs_with_own_ksize(answer, context):
    """Every image equals cv2.GaussianBlur with its own ksize, exactly"""
    images, _ = _images(context)
    _, got = context.once("per image", lambda: _mapped(answer, images, KSIZES))
    reference = _per_image_reference(images, KSIZES)
    wrong = [i for i in range(len(images)) if not np.array_equal(got[i], reference[i])]
    fixed = [
        size
        for size in (3, 5, 7)
        if np.array_equal(got, _per_image_reference(images, [size] * len(images)))
    ]
    expect(
        not wrong,
        f"expected each image blurred by cv2.GaussianBlur with its ksize, got {len(wrong)} of "
        f"{len(images)} different (ksizes {[KSIZES[i] for i in wrong]})"
        + (f" (every image got ksize {fixed[0]}: pass the pair's ksize on)" if fixed else ""),
    )


def any_image_size(answer, context):
    """It works for 24 x 40 images too, with their own static shape"""
    _, images = _images(context)
    ksizes = KSIZES[: len(images)]
    dataset, got = _mapped(answer, images, ksizes)
    shape = dataset.element_spec.shape
    expect(
        shape.rank is not None and tuple(shape) == (24, 40, 3),
        f"expected the element shape (24, 40, 3), got {shape} (declare the image's own shape)",
    )
    expect(
        np.array_equal(got, _per_image_reference(images, ksizes)),
        "expected the 24x40 images blurred as cv2.GaussianBlur does, got different values",
    )


def _two_kernels(answer, context, ksize, sigmas):
    import cv2
    import tensorflow as tf

    _, images = _images(context)
    (kx, ky), (sx, sy) = ksize, sigmas
    reference = np.stack([cv2.GaussianBlur(x, (kx, ky), sx, sigmaY=sy) for x in images])
    got = _called(answer, tf.constant(images), kx, ky, sx, sy, shape_hint=True)
    if got.shape == reference.shape and np.abs(got - reference).max() >= 1e-5:
        swapped = np.stack([cv2.GaussianBlur(x, (ky, kx), sy, sigmaY=sx) for x in images])
        expect(
            np.abs(got - swapped).max() >= 1e-5,
            f"expected kx = {kx} along the width and ky = {ky} along the height, got them "
            "swapped (x is axis 2, the columns; OpenCV's size is (width, height))",
        )
    what = f"(kx, ky) = {ksize}, sigmas {sigmas} on 24x40 images"
    _compare(got, reference, ksize, what, SLICE_HINT)


def sizes_3_7_sigmas_1_2(answer, context):
    """blur_xy(batch, 3, 7, 1.0, 2.0) equals cv2.GaussianBlur within 1e-5"""
    _two_kernels(answer, context, (3, 7), (1.0, 2.0))


def sizes_7_3_sigmas_0(answer, context):
    """blur_xy(batch, 7, 3) with both sigmas 0 equals cv2.GaussianBlur within 1e-5"""
    _two_kernels(answer, context, (7, 3), (0.0, 0.0))


def names_the_device(answer, context):
    """answer['device'] names the device the batch is on: GPU on a GPU runtime, else CPU"""
    import tensorflow as tf

    expected = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    device = answer.get("device")
    expect(
        isinstance(device, str),
        f"expected answer['device'] to be a device string such as "
        f"'/job:localhost/replica:0/task:0/device:{expected}:0', got {type(device).__name__}",
    )
    expect(
        f"{expected}:" in device.upper(),
        f"expected a {expected} device, got {device!r} (read x.device inside the py_function "
        f"callback, with the batch placed on the {expected})",
    )


def ratio_of_times(answer, context):
    """answer['ratio'] is py_function time / native time: a positive, finite number"""
    ratio = answer.get("ratio")
    expect(
        isinstance(ratio, (int, float, np.floating)) and not isinstance(ratio, bool),
        f"expected answer['ratio'] to be a number, got {type(ratio).__name__}",
    )
    expect(
        np.isfinite(ratio) and ratio > 0,
        f"expected a positive, finite ratio of two times, got {ratio}",
    )


EXERCISES = (
    Exercise(
        "3.1",
        "OpenCV's median filter in `tf.data`.",
        FUNCTION,
        (median_keeps_static_shape, median_equals_opencv, median_in_a_tf_function),
        (
            "tf.py_function hands your Python function an EagerTensor, while OpenCV wants a "
            "NumPy array; and the op it creates has an output of unknown shape.",
            "Inside median_blur, call tf.py_function with a function that runs "
            "cv2.medianBlur(x.numpy(), 5) and Tout tf.float32; then call set_shape(image.shape) "
            "on the result and return it.",
        ),
    ),
    Exercise(
        "3.2",
        "A native box blur.",
        FUNCTION,
        (box_blur_matches, box_blur_any_shape),
        (
            "A box blur is a depthwise convolution with a window of equal weights, and "
            "cv2.blur's border is the same as GaussianBlur's.",
            "Pad k // 2 on each side with tf.pad(mode='REFLECT'), then "
            "tf.nn.depthwise_conv2d with 'VALID' and a window of ones / (k * k) of shape "
            "[k, k, channels, 1], channels from images.shape[-1].",
        ),
    ),
    Exercise(
        "3.3",
        "A kernel size per image, in `tf.data`.",
        FUNCTION,
        (keeps_static_shape, blurs_with_own_ksize, any_image_size),
        (
            "Dataset.map calls your function with two tensors, the image and its size; "
            "tf.numpy_function hands both to Python as NumPy values.",
            "Inside blur_pair: tf.numpy_function(a function of (image, ksize) that calls "
            "cv2_blur, [image, ksize], tf.float32), then tf.ensure_shape(result, image.shape).",
        ),
    ),
    Exercise(
        "3.4",
        "Different sizes along x and y.",
        FUNCTION,
        (sizes_3_7_sigmas_1_2, sizes_7_3_sigmas_0),
        (
            "The blur is two 1-D passes: along the width (axis 2) with the x kernel, then "
            "along the height (axis 1) with the y kernel; each pass pads by its own half-size.",
            "gaussian_kernel(kx, sigma_x) and gaussian_kernel(ky, sigma_y) give the two "
            "kernels; pad axis 2 by kx // 2 and sum kx shifted slices, then do the same on "
            "axis 1 with ky.",
        ),
    ),
    Exercise(
        "3.5",
        "The GPU picture.",
        MAPPING,
        (names_the_device, ratio_of_times),
        (
            "Inside tf.py_function the Python code receives an EagerTensor, and an "
            "EagerTensor has a .device.",
            "Record x.device from a function run by tf.py_function on the model batch placed "
            "with tf.device; time both models with time_call and divide the medians.",
        ),
    ),
)
