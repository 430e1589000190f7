"""``companion._clipping.clip_by_global_norm`` on the running backend: rule, dtypes, edge cases."""

import keras
import numpy as np
import pytest
from keras import ops

from companion._clipping import clip_by_global_norm


def numpy(values):
    return [None if v is None else ops.convert_to_numpy(v) for v in values]


def test_gradients_above_the_norm_are_scaled_to_it_and_none_is_kept():
    clipped = numpy(clip_by_global_norm([ops.array([3.0, 0.0]), None, ops.array([4.0])], 1.0))
    np.testing.assert_allclose(clipped[0], [0.6, 0.0], rtol=1e-6)  # float32 rounding
    np.testing.assert_allclose(clipped[2], [0.8], rtol=1e-6)
    assert clipped[1] is None


def test_gradients_below_the_norm_pass_unchanged():
    clipped = numpy(clip_by_global_norm([ops.array([0.3, 0.4])], 1.0))
    np.testing.assert_array_equal(clipped[0], np.array([0.3, 0.4], "float32"))


def test_the_loss_scale_divides_the_norm():
    # Gradients of 1024 * loss with norm 5 * 1024: the loss's own gradient has norm 5.
    clipped = numpy(clip_by_global_norm([ops.array([3072.0, 4096.0])], 1.0, loss_scale=1024.0))
    np.testing.assert_allclose(clipped[0], [614.4, 819.2], rtol=1e-6)


def test_each_gradient_keeps_its_dtype():
    gradients = [ops.array([3.0, 4.0], "float32"), ops.array([0.0, 5.0], "float16")]
    clipped = clip_by_global_norm(gradients, 1.0)
    dtypes = [keras.backend.standardize_dtype(g.dtype) for g in clipped]
    assert dtypes == ["float32", "float16"]
    np.testing.assert_allclose(ops.convert_to_numpy(clipped[1]), [0.0, 0.7071], rtol=1e-3)


def test_float64_gradients_are_clipped_in_float64():
    if keras.backend.backend() == "jax":
        import jax

        if not jax.config.jax_enable_x64:
            pytest.skip("JAX without jax_enable_x64 makes no float64 arrays (float32 instead)")
    tiny = 1e-30  # its square underflows in float32: a float32 norm would be 0 and divide by 0
    clip = float(np.float32(1e-31))  # clip norms are float32 numbers
    clipped = clip_by_global_norm([ops.array([tiny, 0.0], "float64")], clip)
    assert keras.backend.standardize_dtype(clipped[0].dtype) == "float64"
    np.testing.assert_allclose(ops.convert_to_numpy(clipped[0]), [clip, 0.0], rtol=1e-12)


def test_a_huge_clip_norm_does_not_zero_the_gradients():
    # 1 / 1e38 is flushed to zero in float32: the clipper divides the norm instead.
    clipped = numpy(clip_by_global_norm([ops.array([3.0, 4.0])], 1e38))
    np.testing.assert_array_equal(clipped[0], [3.0, 4.0])


def test_a_nonfinite_gradient_makes_every_gradient_nan():
    clipped = numpy(clip_by_global_norm([ops.array([np.inf, 1.0]), ops.array([2.0])], 1.0))
    assert all(np.isnan(c).all() for c in clipped)


@pytest.mark.parametrize("bad", [[], "gradients", [ops.array([1, 2])]])
def test_bad_gradients_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="^gradients"):
        clip_by_global_norm(bad, 1.0)
