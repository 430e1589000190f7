import json
import re

import cv2
import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.pyfunc import (
    GaussianBlur,
    cv2_blur,
    gaussian_kernel,
    native_blur,
    numpy_function_blur,
    py_function_blur,
)

WRAPPERS = [py_function_blur, numpy_function_blur]


@pytest.mark.parametrize("ksize", range(1, 32, 2))
@pytest.mark.parametrize("sigma", [0.0, 0.3, 0.8, 1.0, 1.1, 2.0, 3.7, 10.0])
def test_kernel_equals_opencv(ksize, sigma, opencv_blur):
    expected = cv2.getGaussianKernel(ksize, sigma).ravel()
    np.testing.assert_allclose(gaussian_kernel(ksize, sigma), expected, rtol=0, atol=1e-12)


def test_kernel_size_5_is_binomial():
    np.testing.assert_array_equal(gaussian_kernel(5) * 16, [1, 4, 6, 4, 1])


def test_native_blur_matches_opencv_rank4_including_borders(blur_case, random_images, opencv_blur):
    ksize, sigma = blur_case
    images = random_images((3, 19, 23, 3))
    got = native_blur(images, ksize, sigma).numpy()
    expected = opencv_blur(images, ksize, sigma)
    assert np.abs(got - expected).max() < 1e-5
    border = np.ones(got.shape[1:3], bool)
    border[ksize // 2 : -(ksize // 2) or None, ksize // 2 : -(ksize // 2) or None] = False
    if ksize > 1:  # the border pixels are where padding matters: check them on their own
        assert np.abs(got[:, border] - expected[:, border]).max() < 1e-5


@pytest.mark.parametrize("ksize, sigma", [(3, 0.0), (5, 0.0), (9, 2.0)])
@pytest.mark.parametrize("channels", [1, 4])
def test_native_blur_matches_opencv_rank3(ksize, sigma, channels, random_images):
    image = random_images((16, 12, channels), seed=1)
    got = native_blur(image, ksize, sigma)
    assert got.shape == image.shape
    expected = cv2.GaussianBlur(image, (ksize, ksize), sigma).reshape(image.shape)
    assert np.abs(got.numpy() - expected).max() < 1e-5


def test_native_blur_float64_and_unknown_shape(random_images, opencv_blur):
    images = random_images((2, 10, 14, 2)).astype(np.float64)
    spec = tf.TensorSpec([None, None, None, 2], tf.float64)
    traced = tf.function(lambda x: native_blur(x, 7, 1.5), input_signature=[spec])
    got = traced(images).numpy()
    assert got.dtype == np.float64
    assert np.abs(got - opencv_blur(images, 7, 1.5)).max() < 1e-12


def test_cv2_blur_matches_opencv_for_each_rank_and_uint8(random_images):
    image = random_images((9, 11, 3))
    np.testing.assert_array_equal(cv2_blur(image), cv2.GaussianBlur(image, (5, 5), 0))
    np.testing.assert_array_equal(
        cv2_blur(image[..., 0]), cv2.GaussianBlur(image[..., 0], (5, 5), 0)
    )
    assert cv2_blur(image[..., :1]).shape == (9, 11, 1)
    np.testing.assert_array_equal(
        cv2_blur(image[None], 3, 1.0)[0], cv2.GaussianBlur(image, (3, 3), 1.0)
    )
    as_uint8 = (image * 255).astype(np.uint8)
    np.testing.assert_array_equal(cv2_blur(as_uint8), cv2.GaussianBlur(as_uint8, (5, 5), 0))


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_wrappers_in_tf_data_keep_shape_and_equal_opencv(wrapper, random_images, opencv_blur):
    images = random_images((4, 20, 18, 3))
    dataset = tf.data.Dataset.from_tensor_slices(images).map(lambda x: wrapper(x, 7, 2.0))
    assert dataset.element_spec.shape == (20, 18, 3)
    got = np.stack([x.numpy() for x in dataset])
    np.testing.assert_array_equal(got, opencv_blur(images, 7, 2.0))
    batched = wrapper(tf.constant(images))
    assert batched.shape == images.shape
    np.testing.assert_array_equal(batched.numpy(), opencv_blur(images, 5, 0.0))


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_wrappers_keep_uint8_and_rank2(wrapper, random_images):
    image = (random_images((9, 11, 3)) * 255).astype(np.uint8)
    got = wrapper(image)
    assert got.dtype == tf.uint8
    np.testing.assert_array_equal(got.numpy(), cv2.GaussianBlur(image, (5, 5), 0))
    np.testing.assert_array_equal(
        wrapper(image[..., 0], 3).numpy(), cv2.GaussianBlur(image[..., 0], (3, 3), 0)
    )


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_wrappers_declare_the_shape_with_a_run_time_check(wrapper, random_images):
    # ensure_shape is an op in the graph (set_shape would leave none); unknown sizes stay unknown.
    spec = tf.TensorSpec([None, None, 3], tf.float32)
    concrete = tf.function(wrapper).get_concrete_function(spec)
    assert "EnsureShape" in [op.type for op in concrete.graph.get_operations()]
    assert concrete.output_shapes.as_list() == [None, None, 3]
    image = random_images((7, 9, 3))
    np.testing.assert_array_equal(
        concrete(tf.constant(image)).numpy(), cv2.GaussianBlur(image, (5, 5), 0)
    )


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("graph", [False, True])
def test_wrappers_have_no_gradient(wrapper, graph, random_images):
    # OpenCV is invisible to the tape. A bare py_function would give a scalar zero; we give None.
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(wrapper(x))
        return tape.gradient(total, x)

    fn = tf.function(gradient) if graph else gradient
    assert fn(tf.constant(random_images((8, 8, 3)))) is None


def test_bare_py_function_around_opencv_reports_a_scalar_zero_gradient(random_images):
    # The TensorFlow behaviour py_function_blur guards against (chapter 3 shows it).
    x = tf.constant(random_images((8, 8, 3)))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.py_function(lambda a: cv2.GaussianBlur(a.numpy(), (5, 5), 0), [x], tf.float32)
    gradient = tape.gradient(y, x)
    assert gradient is not None and gradient.shape.rank == 0 and float(gradient) == 0.0


def test_gaussian_blur_layer_matches_opencv_and_round_trips(tmp_path, random_images, opencv_blur):
    images = random_images((2, 16, 16, 3))
    inputs = keras.Input((16, 16, 3))
    model = keras.Model(inputs, GaussianBlur(ksize=7, sigma=1.3, name="blur")(inputs))
    expected = model(images).numpy()
    assert np.abs(expected - opencv_blur(images, 7, 1.3)).max() < 1e-5
    json.dumps(model.get_layer("blur").get_config())
    path = tmp_path / "blur.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored.get_layer("blur"), GaussianBlur)
    assert (restored.get_layer("blur").ksize, restored.get_layer("blur").sigma) == (7, 1.3)
    np.testing.assert_array_equal(restored(images).numpy(), expected)


def test_gaussian_blur_layer_is_differentiable(random_images):
    images = tf.constant(random_images((1, 8, 8, 1)))
    with tf.GradientTape() as tape:
        tape.watch(images)
        total = tf.reduce_sum(GaussianBlur(3)(images))
    # Each output pixel is a weighted average (weights sum to 1), so the gradient of the sum
    # (the column sums of the blur operator) averages exactly 1 and reaches every pixel.
    grad = tape.gradient(total, images).numpy()
    assert grad.min() > 0 and abs(grad.mean() - 1) < 1e-6


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"ksize": 4}, ValueError, "ksize: expected an odd int >= 1 and <= 32767, got int 4"),
        ({"ksize": 0}, ValueError, "ksize"),
        ({"ksize": -3}, ValueError, "ksize"),
        ({"ksize": 5.0}, TypeError, "ksize"),
        ({"sigma": -1.0}, ValueError, "sigma"),
        ({"sigma": float("nan")}, ValueError, "sigma"),
        ({"sigma": "1"}, TypeError, "sigma"),
    ],
)
@pytest.mark.parametrize(
    "fn", [cv2_blur, py_function_blur, numpy_function_blur, native_blur, gaussian_kernel]
)
def test_bad_ksize_and_sigma(fn, kwargs, error, match, random_images):
    with pytest.raises(error, match=match):
        if fn is gaussian_kernel:
            fn(**kwargs)
        else:
            fn(random_images((8, 8, 3)), **kwargs)


def test_layer_rejects_bad_arguments_at_construction():
    with pytest.raises(ValueError, match="ksize"):
        GaussianBlur(ksize=2)
    with pytest.raises(ValueError, match="sigma"):
        GaussianBlur(sigma=-0.5)


def test_bad_images(random_images):
    with pytest.raises(
        TypeError, match=r"^images: expected a floating-point tensor .*, got dtype int32"
    ):
        native_blur(np.zeros((8, 8, 3), np.int32))
    with pytest.raises(
        TypeError, match=r"^inputs: expected a floating-point tensor .*, got dtype uint8"
    ):
        GaussianBlur()(np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="images: expected rank 3"):
        native_blur(np.zeros((8, 8), np.float32))
    with pytest.raises(ValueError, match="ksize // 2"):
        native_blur(np.zeros((8, 2, 3), np.float32), ksize=5)
    with pytest.raises(TypeError, match="call .numpy"):
        cv2_blur(tf.zeros((8, 8, 3)))
    with pytest.raises(TypeError, match="dtype uint8, float32 or float64, got float16"):
        cv2_blur(np.zeros((8, 8, 3), np.float16))
    for wrapper in WRAPPERS:
        with pytest.raises(TypeError, match="dtype uint8, float32 or float64, got int32"):
            wrapper(np.zeros((8, 8, 3), np.int32))
        with pytest.raises(ValueError, match="rank 2, 3 or 4"):
            wrapper(np.zeros((8,), np.float32))
    with pytest.raises(ValueError, match="rank 2, 3 or 4"):
        cv2_blur(np.zeros((2, 2, 8, 8, 3), np.float32))


# ---------------------------------------------------------------- issue 16


def _blur_in(how, fn, images):
    """``fn(images)`` eagerly, in a tf.function with an unknown batch size, or XLA-compiled."""
    if how == "eager":
        return fn(images)
    signature = [tf.TensorSpec([None, *images.shape[1:]], images.dtype)]
    return tf.function(fn, input_signature=signature, jit_compile=how == "xla")(images)


_BLURS = {
    "native_blur": native_blur,
    "GaussianBlur": GaussianBlur(5),
    "py_function_blur": py_function_blur,
    "numpy_function_blur": numpy_function_blur,
}
# py_function and numpy_function have no XLA kernel: they run eagerly and in a tf.function only.
_EMPTY_BATCH_RUNS = [
    (blur, how)
    for blur in _BLURS
    for how in ("eager", "tf.function", "xla")
    if how != "xla" or blur in ("native_blur", "GaussianBlur")
]


@pytest.mark.parametrize("blur, how", _EMPTY_BATCH_RUNS)
def test_an_empty_batch_gives_an_empty_batch(blur, how):
    # XLA's mirror pad used to stop native_blur: "RET_CHECK failure (mirror_pad_op.cc:62)".
    out = _blur_in(how, _BLURS[blur], tf.zeros((0, 8, 8, 3)))
    assert tuple(out.shape) == (0, 8, 8, 3)


def test_an_empty_batch_passes_a_model_with_the_layer_in_fit_and_predict_on_batch(random_images):
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), GaussianBlur(3), keras.layers.Flatten(), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    assert model.predict_on_batch(np.zeros((0, 8, 8, 3), "float32")).shape == (0, 1)
    history = model.fit(
        random_images((4, 8, 8, 3)), np.zeros((4, 1), "float32"), batch_size=4, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("ksize, sigma", [(1, 0.0), (3, 0.0), (5, 1.1), (15, 2.5)])
def test_reflect_padding_by_slices_still_equals_opencv_at_the_smallest_sizes(
    ksize, sigma, random_images, opencv_blur
):
    # the smallest images reflect padding takes
    images = random_images((2, ksize // 2 + 1, ksize // 2 + 2, 2))
    np.testing.assert_allclose(
        native_blur(images, ksize, sigma), opencv_blur(images, ksize, sigma), atol=1e-6
    )


KSIZE_RULE = "ksize: expected an odd int >= 1 and <= 32767, got "


@pytest.mark.parametrize("ksize", [0, 4, 32769, 10**12 + 1])
def test_every_bad_ksize_gets_the_whole_rule(ksize):
    # gaussian_kernel(10**12 + 1) used to ask NumPy for 8 TB: the check comes first.
    with pytest.raises(ValueError, match=rf"^{KSIZE_RULE}int {ksize}$"):
        gaussian_kernel(ksize)
    with pytest.raises(TypeError, match=rf"^{KSIZE_RULE}float {ksize}\.0$"):
        gaussian_kernel(float(ksize))


def test_the_largest_ksize_makes_a_kernel():
    assert gaussian_kernel(32767).shape == (32767,)


@pytest.mark.parametrize("images", [None, "abc", [[None]], {"a": 1}])
def test_images_that_are_no_float_tensor_are_named(images):
    with pytest.raises(TypeError, match=r"^images: expected a floating-point tensor.*, got "):
        native_blur(images)
    with pytest.raises(TypeError, match=r"^inputs: expected a floating-point tensor.*, got "):
        GaussianBlur(3)(images)


def test_layer_call_errors_name_inputs_before_keras_rewrites_them():
    with pytest.raises(ValueError, match=r"^inputs: expected height and width > ksize // 2 = 2"):
        GaussianBlur(5)(np.zeros((1, 2, 8, 3), "float32"))
    with pytest.raises(
        ValueError, match=r"^inputs: expected rank 3 \(H, W, C\) or 4 \(N, H, W, C\)"
    ):
        GaussianBlur(5)(np.zeros((8, 8), "float32"))


@pytest.mark.parametrize("images", [[[1.0, 2.0]], None, tf.zeros((8, 8))])
def test_cv2_blur_says_what_it_got(images):
    with pytest.raises(
        TypeError,
        match=r"^images: expected a NumPy array \(call .numpy\(\) on a tensor\), got \w+ ",
    ):
        cv2_blur(images)


CHANNELS_RULE = r"expected images \(H, W, C\) or \(N, H, W, C\) with at least 1 channel, got shape "


@pytest.mark.parametrize("shape", [(8, 8, 0), (2, 8, 8, 0)])
def test_images_without_a_channel_are_refused_by_every_blur(shape):
    # native_blur and GaussianBlur used to return them empty; OpenCV failed with its own error.
    images = np.zeros(shape, "float32")
    for blur in (cv2_blur, py_function_blur, numpy_function_blur, native_blur):
        with pytest.raises(ValueError, match=rf"^images: {CHANNELS_RULE}{re.escape(str(shape))}$"):
            blur(images)
    with pytest.raises(ValueError, match=rf"^inputs: {CHANNELS_RULE}{re.escape(str(shape))}$"):
        GaussianBlur(3)(images)
