import numpy as np
import pytest

from companion.data import MIN_IMAGE_SIZE, NUM_CLASSES, SHAPE_NAMES, class_name, make_shapes


def test_shapes_dtypes_and_ranges():
    (images, meta), labels = make_shapes(50, image_size=24, meta_dim=5, seed=3)
    assert images.shape == (50, 24, 24, 3) and images.dtype == np.float32
    assert meta.shape == (50, 5) and meta.dtype == np.float32
    assert labels.shape == (50,) and labels.dtype == np.int32
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert images.max() > 0.5, "a shape should be drawn brighter than the dark background"
    assert labels.min() >= 0 and labels.max() < NUM_CLASSES


def test_same_seed_same_data_other_seed_other_data():
    (a_img, a_meta), a_lab = make_shapes(20, seed=5)
    (b_img, b_meta), b_lab = make_shapes(20, seed=5)
    (c_img, _), _ = make_shapes(20, seed=6)
    np.testing.assert_array_equal(a_img, b_img)
    np.testing.assert_array_equal(a_meta, b_meta)
    np.testing.assert_array_equal(a_lab, b_lab)
    assert not np.array_equal(a_img, c_img)


def test_every_class_occurs():
    _, labels = make_shapes(300, seed=0)
    assert set(np.unique(labels)) == set(range(NUM_CLASSES))


def test_label_needs_both_image_and_metadata():
    (images, meta), labels = make_shapes(200, meta_dim=4, seed=1)
    np.testing.assert_array_equal(labels % 2, (meta.sum(axis=1) > 0).astype(np.int32))
    # The shape part is in the picture: a circle covers less of its bounding box than a square.
    filled = (images.max(axis=-1) > 0.3).mean(axis=(1, 2))
    squares, triangles = filled[labels // 2 == 1], filled[labels // 2 == 2]
    assert squares.mean() > triangles.mean()


def test_meta_dim_zero_is_refused_the_label_needs_metadata():
    # With no metadata the label could not depend on it (and no model of chapter 6 takes it).
    with pytest.raises(
        ValueError, match=r"^meta_dim: expected an int >= 1 and <= 10000, got int 0$"
    ):
        make_shapes(4, meta_dim=0)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"n": 10**12}, "n"),
        ({"image_size": 10**12}, "image_size"),
        ({"meta_dim": 10**12}, "meta_dim"),
        ({"seed": 2**32}, "seed"),
        ({"n": 10**6, "image_size": 4096}, "n"),
    ],
)
def test_huge_arguments_are_refused_before_allocating(kwargs, argument):
    with pytest.raises(ValueError, match=rf"^{argument}: expected an int >= \d+ and <= \d+"):
        make_shapes(**{"n": 2, **kwargs})


def test_largest_seed_is_taken():
    (images, _), _ = make_shapes(2, image_size=16, meta_dim=1, seed=2**32 - 1)
    assert images.shape == (2, 16, 16, 3)


def test_class_names():
    assert [class_name(i) for i in range(NUM_CLASSES)][:2] == [
        f"{SHAPE_NAMES[0]}/-",
        f"{SHAPE_NAMES[0]}/+",
    ]
    with pytest.raises(ValueError, match="label"):
        class_name(NUM_CLASSES)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"n": 0}, "n"),
        ({"n": -3}, "n"),
        ({"n": 4, "image_size": MIN_IMAGE_SIZE - 1}, "image_size"),
        ({"n": 4, "meta_dim": -1}, "meta_dim"),
        ({"n": 4, "seed": -1}, "seed"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        make_shapes(**kwargs)


def test_non_integer_arguments_raise_type_error():
    with pytest.raises(TypeError, match="^n:"):
        make_shapes(2.5)
