"""Chapter 3's exercise checks: a correct answer passes, each likely mistake is named."""

import cv2
import tensorflow as tf

from companion.pyfunc import cv2_blur, gaussian_kernel


def median_blur(image):
    blurred = tf.py_function(lambda x: cv2.medianBlur(x.numpy(), 5), [image], tf.float32)
    blurred.set_shape(image.shape)
    return blurred


def median_blur_no_shape(image):
    return tf.py_function(lambda x: cv2.medianBlur(x.numpy(), 5), [image], tf.float32)


def median_blur_tensor_to_opencv(image):
    blurred = tf.py_function(lambda x: cv2.medianBlur(x, 5), [image], tf.float32)
    blurred.set_shape(image.shape)
    return blurred


def median_blur_shape_written_out(image):
    blurred = tf.py_function(lambda x: cv2.medianBlur(x.numpy(), 5), [image], tf.float32)
    blurred.set_shape((32, 32, 3))
    return blurred


def median_blur_3x3(image):
    blurred = tf.py_function(lambda x: cv2.medianBlur(x.numpy(), 3), [image], tf.float32)
    blurred.set_shape(image.shape)
    return blurred


def test_opencvs_median_in_tf_data(accepted, caught):
    accepted("3.1", median_blur)
    result = caught("3.1", median_blur_no_shape, r"got <unknown> .*set_shape\(image.shape\)")
    assert len(result.failures) == 2  # the dataset's shape, and the tf.function's
    caught("3.1", median_blur_tensor_to_opencv, r"received an EagerTensor.*call x.numpy\(\)")
    caught("3.1", median_blur_shape_written_out, r"got \(32, 32, 3\) .*written out.*image.shape")
    caught("3.1", median_blur_3x3, r"equal the 3x3 median: the size is 5")


def native_box_blur(images, k):
    pad = k // 2
    x = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    window = tf.ones([k, k, images.shape[-1], 1], images.dtype) / (k * k)
    return tf.nn.depthwise_conv2d(x, window, [1, 1, 1, 1], padding="VALID")


def zero_padded_box_blur(images, k):
    window = tf.ones([k, k, images.shape[-1], 1], images.dtype) / (k * k)
    return tf.nn.depthwise_conv2d(images, window, [1, 1, 1, 1], padding="SAME")


def symmetric_box_blur(images, k):
    pad = k // 2
    x = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="SYMMETRIC")
    window = tf.ones([k, k, images.shape[-1], 1], images.dtype) / (k * k)
    return tf.nn.depthwise_conv2d(x, window, [1, 1, 1, 1], padding="VALID")


def box_sum(images, k):
    return native_box_blur(images, k) * (k * k)


def three_channel_box_blur(images, k):
    pad = k // 2
    x = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]], mode="REFLECT")
    window = tf.ones([k, k, 3, 1], images.dtype) / (k * k)
    return tf.nn.depthwise_conv2d(x, window, [1, 1, 1, 1], padding="VALID")


def test_a_native_box_blur(accepted, caught):
    accepted("3.2", native_box_blur)
    caught("3.2", zero_padded_box_blur, r"at the borders only.*REFLECT")
    caught("3.2", symmetric_box_blur, r"at the borders only.*not 'SYMMETRIC'")
    caught("3.2", box_sum, r"9 times too large: divide by k \* k")
    caught("3.2", three_channel_box_blur, r"shape \(4, 24, 40, 1\).*channels read from")


def blur_pair(image, ksize):
    blurred = tf.numpy_function(lambda x, k: cv2_blur(x, k), [image, ksize], tf.float32)
    return tf.ensure_shape(blurred, image.shape)


def blur_pair_no_shape(image, ksize):
    return tf.numpy_function(lambda x, k: cv2_blur(x, k), [image, ksize], tf.float32)


def blur_pair_fixed_size(image, ksize):
    return blur_pair(image, tf.constant(5, tf.int64))


def blur_pair_shape_written_out(image, ksize):
    blurred = tf.numpy_function(lambda x, k: cv2_blur(x, k), [image, ksize], tf.float32)
    return tf.ensure_shape(blurred, (32, 32, 3))


def blur_pair_tensors_to_opencv(image, ksize):
    blurred = tf.py_function(
        lambda x, k: cv2.GaussianBlur(x, (k, k), 0), [image, ksize], tf.float32
    )
    return tf.ensure_shape(blurred, image.shape)


def test_a_kernel_size_per_image(accepted, caught):
    accepted("3.3", blur_pair)
    caught("3.3", blur_pair_no_shape, r"element shape \(32, 32, 3\), got <unknown>.*ensure_shape")
    caught("3.3", blur_pair_fixed_size, r"every image got ksize 5")
    caught("3.3", blur_pair_shape_written_out, r"24x40x3 images to iterate.*image.shape")
    result = caught("3.3", blur_pair_tensors_to_opencv, r"the answer raised")
    assert len(result.failures) == 3


def blur_xy(batch, kx, ky, sigma_x=0.0, sigma_y=0.0):
    wx = tf.constant(gaussian_kernel(kx, sigma_x), batch.dtype)
    wy = tf.constant(gaussian_kernel(ky, sigma_y), batch.dtype)
    height, width = batch.shape[1], batch.shape[2]
    x = tf.pad(batch, [[0, 0], [0, 0], [kx // 2, kx // 2], [0, 0]], mode="REFLECT")
    x = sum(wx[j] * x[:, :, j : j + width] for j in range(kx))
    x = tf.pad(x, [[0, 0], [ky // 2, ky // 2], [0, 0], [0, 0]], mode="REFLECT")
    return sum(wy[j] * x[:, j : j + height] for j in range(ky))


def blur_yx(batch, kx, ky, sigma_x=0.0, sigma_y=0.0):
    return blur_xy(batch, ky, kx, sigma_y, sigma_x)


def blur_square_only(batch, kx, ky, sigma_x=0.0, sigma_y=0.0):
    wx = tf.constant(gaussian_kernel(kx, sigma_x), batch.dtype)
    wy = tf.constant(gaussian_kernel(ky, sigma_y), batch.dtype)
    size = batch.shape[1]
    x = tf.pad(batch, [[0, 0], [0, 0], [kx // 2, kx // 2], [0, 0]], mode="REFLECT")
    x = sum(wx[j] * x[:, :, j : j + size] for j in range(kx))
    x = tf.pad(x, [[0, 0], [ky // 2, ky // 2], [0, 0], [0, 0]], mode="REFLECT")
    return sum(wy[j] * x[:, j : j + size] for j in range(ky))


def test_different_sizes_along_x_and_y(accepted, caught):
    accepted("3.4", blur_xy)
    caught("3.4", blur_yx, r"kx = 3 along the width.*got them swapped")
    caught(
        "3.4",
        blur_square_only,
        r"got \(4, 24, 24, 3\) \(is each pass.s slice as long as its own axis",
    )


def device_seen_by_python():
    seen = {}

    def record(x):
        seen["device"] = x.device
        return x

    tf.py_function(record, [tf.constant([1.0])], tf.float32)
    return seen["device"]


def test_the_gpu_picture(accepted, caught):
    accepted("3.5", {"device": device_seen_by_python(), "ratio": 1.7})
    here = "CPU" if "CPU" in device_seen_by_python() else "GPU"
    elsewhere = {"CPU": "GPU", "GPU": "CPU"}[here]
    wrong = {"device": f"/device:{elsewhere}:0", "ratio": 1.7}
    caught("3.5", wrong, rf"expected a {here} device, got '/device:{elsewhere}:0'")
    caught("3.5", {"device": device_seen_by_python(), "ratio": "2x"}, r"to be a number, got str")
    caught("3.5", {"device": device_seen_by_python(), "ratio": float("nan")}, r"finite")
