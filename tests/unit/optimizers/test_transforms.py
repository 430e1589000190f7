"""companion.optimizers._transforms: each gradient transform, applied once through an SGD step."""

import keras
import numpy as np
import pytest
from helpers.optimizer_helpers import F32_MAX, apply_once

from companion.optimizers import (
    ClipGlobalNorm,
    GaussianNoise,
    TaskWeights,
    TopK,
)


def test_clip_global_norm_scales_to_the_norm_and_leaves_small_gradients():
    applied, _ = apply_once(ClipGlobalNorm(1.0), [[3.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(np.concatenate(applied), [0.6, 0.0, 0.0, 0.8], rtol=1e-6)
    transform = ClipGlobalNorm(10.0)
    applied, _ = apply_once(transform, [[3.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(np.concatenate(applied), [3.0, 0.0, 0.0, 4.0])
    assert float(transform.norm) == pytest.approx(5.0)


def test_gaussian_noise_is_seeded_and_its_stddev_decays():
    zeros = np.zeros(20_000, "float32")
    first, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros])
    again, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros])
    other, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=4), [zeros])
    assert np.array_equal(first[0], again[0]) and not np.array_equal(first[0], other[0])
    assert np.std(first[0]) == pytest.approx(0.1, rel=0.03)
    sgd = keras.optimizers.SGD(1.0)
    sgd.iterations.assign(99)
    late, _ = apply_once(GaussianNoise(0.1, decay=0.55, seed=3), [zeros], optimizer=sgd)
    assert np.std(late[0]) == pytest.approx(0.1 / 100**0.275, rel=0.03)


def test_top_k_keeps_the_largest_fraction_and_reports_it():
    gradient = np.arange(1, 101, dtype="float32") * np.where(np.arange(100) % 2, -1, 1)
    transform = TopK(0.1)
    applied, _ = apply_once(transform, [gradient, [0.5, -2.0]])
    kept = np.flatnonzero(applied[0])
    assert set(kept) == set(range(90, 100)) and np.array_equal(applied[0][kept], gradient[kept])
    assert np.array_equal(applied[1], [0.0, -2.0])  # ceil(0.1 * 2) = 1 entry kept
    assert float(transform.kept) == pytest.approx(11 / 102)


def test_task_weights_scale_each_heads_gradients_only():
    variables = [keras.Variable([0.0], name=name) for name in ("trunk", "head_a", "head_b")]
    applied, _ = apply_once(
        TaskWeights({"head_a": 2.0, "head_b": 0.0}), [[1.0], [1.0], [1.0]], variables
    )
    assert np.concatenate(applied).tolist() == [1.0, 2.0, 0.0]
    with pytest.raises(
        ValueError, match="^weights: expected keys found in variable paths, got 'head_c'"
    ):
        apply_once(TaskWeights({"head_c": 1.0}), [[1.0]])


def test_clip_global_norm_just_below_float32_max_lets_gradients_through():
    applied, _ = apply_once(
        ClipGlobalNorm(3e38), [[3.0, 4.0]]
    )  # 1 / 3e38 is below float32's normal range
    np.testing.assert_array_equal(applied[0], [3.0, 4.0])
    applied, _ = apply_once(
        ClipGlobalNorm(F32_MAX), [[3e38, 3e38]]
    )  # the norm overflows, the clip does not
    assert np.all(
        np.isnan(applied[0])
    )  # a non-finite norm is reported as NaN (tf.clip_by_global_norm's rule)
    applied, _ = apply_once(ClipGlobalNorm(1.0), [np.zeros(2)])
    np.testing.assert_array_equal(applied[0], [0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"^clip_norm: expected a finite number >= 1\.17549e-38 and <= 3\.40282e"
    ):
        ClipGlobalNorm(1e300)


def test_gaussian_noise_stddev_is_capped_where_the_noise_stays_finite():
    with pytest.raises(
        ValueError, match=r"^stddev: expected a finite number >= 0 and <= 4\.25353e\+37, got"
    ):
        GaussianNoise(1e300)
    with pytest.raises(ValueError, match=r"^stddev: expected"):
        GaussianNoise(F32_MAX / 7)
    with pytest.raises(ValueError, match=r"^decay: expected"):
        GaussianNoise(0.1, decay=1e300)
    with pytest.raises(ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295"):
        GaussianNoise(0.1, seed=10**12)
    applied, _ = apply_once(GaussianNoise(F32_MAX / 8, seed=1), [np.zeros(100_000)])
    assert np.all(np.isfinite(applied[0]))


def test_task_weights_refuse_an_empty_key_that_would_match_every_variable():
    with pytest.raises(ValueError, match=r"^weights: expected .*non-empty str"):
        TaskWeights({"": 0.0})
    with pytest.raises(
        ValueError, match=r"^weights\['head'\]: expected a finite number >= 0 and <= 3\.40282e"
    ):
        TaskWeights({"head": 1e300})


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: TopK(0.0), ValueError, r"^fraction: expected a finite number > 0"),
        (lambda: TopK(1.5), ValueError, r"^fraction: expected a finite number > 0 and <= 1"),
        (
            lambda: ClipGlobalNorm(0),
            ValueError,
            r"^clip_norm: expected a finite number >= 1\.17549e-38",
        ),
        (lambda: GaussianNoise(-1.0), ValueError, r"^stddev: expected a finite number >= 0"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument_transforms(make, error, match):
    with pytest.raises(error, match=match):
        make()
