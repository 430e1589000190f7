"""One set of argument checks for the whole companion: same rules, same message form everywhere."""

import math

import numpy as np
import pytest

from companion._checks import (
    check_bool,
    check_callable,
    check_calls,
    check_choice,
    check_device,
    check_fraction,
    check_instance,
    check_int,
    check_odd_int,
    check_path,
    check_real,
    check_seed,
    check_sequence,
    check_str,
)
from companion.data import class_name, make_shapes
from companion.gradients import clipped_identity, gradient_error
from companion.layers import AdditiveGaussianNoise, CustomDense, ResidualBlock
from companion.notebook import setup
from companion.ops import logsumexp, swish
from companion.pyfunc import GaussianBlur, gaussian_kernel


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_check_int_accepts_python_and_numpy_integers(value):
    assert check_int(value, "n", minimum=1) == 3 and type(check_int(value, "n")) is int


@pytest.mark.parametrize("value", [2.0, 2.7, True, np.bool_(True), "2", None, np.float64(2.0)])
def test_check_int_rejects_non_integers_with_the_common_message(value):
    with pytest.raises(TypeError, match=rf"^n: expected an int >= 1, got {type(value).__name__} "):
        check_int(value, "n", minimum=1)


def test_check_int_range_message_names_argument_bounds_and_value():
    with pytest.raises(ValueError, match=r"^label: expected an int >= 0 and <= 5, got int 6$"):
        check_int(6, "label", minimum=0, maximum=5)
    assert check_int(None, "seed", allow_none=True) is None


@pytest.mark.parametrize("value", [math.nan, np.float32("nan"), math.inf, -1.0])
def test_check_real_rejects_nan_inf_and_out_of_range(value):
    with pytest.raises(ValueError, match=r"^stddev: expected a finite number >= 0, got "):
        check_real(value, "stddev", minimum=0)


def test_check_real_accepts_numpy_scalars_and_rejects_bools():
    assert check_real(np.float32(0.5), "x") == 0.5 and check_real(np.int64(2), "x", above=0) == 2.0
    with pytest.raises(TypeError, match=r"^x: expected a finite number, got bool True$"):
        check_real(True, "x")
    with pytest.raises(ValueError, match=r"^x: expected a finite number > 0, got float 0.0$"):
        check_real(0.0, "x", above=0)
    assert check_bool(np.bool_(False), "flag") is False


def test_ranges_print_ints_as_ints():
    with pytest.raises(
        ValueError, match=r"^n: expected an int >= 1 and <= 1000000000000, got int 10000000000000$"
    ):
        check_int(10**13, "n", minimum=1, maximum=10**12)


@pytest.mark.parametrize("dtype, largest", [("float16", "65504"), ("float32", "3.40282e\\+38")])
def test_check_real_against_a_dtype_refuses_what_the_dtype_cannot_hold(dtype, largest):
    assert check_real(100.0, "stddev", minimum=0, dtype="float64") == 100.0
    with pytest.raises(
        ValueError,
        match=rf"^stddev: expected a finite number >= 0 and <= {largest}, got float 1e\+300$",
    ):
        check_real(1e300, "stddev", minimum=0, dtype=dtype)


def test_check_seed_has_a_maximum():
    assert check_seed(2**32 - 1) == 2**32 - 1 and check_seed(None, allow_none=True) is None
    with pytest.raises(
        ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295, got int 4294967296$"
    ):
        check_seed(2**32)


def test_check_fraction_bounds():
    assert check_fraction(1, "f") == 1.0
    with pytest.raises(
        ValueError, match=r"^f: expected a finite number >= 0 and < 1, got float 1.0$"
    ):
        check_fraction(1.0, "f", below_one=True)
    with pytest.raises(ValueError, match=r"^f: expected a finite number > 0"):
        check_fraction(0, "f", above_zero=True)


@pytest.mark.parametrize("value", ["abc", {"a": 1}, {1, 2}, 3, None])
def test_check_sequence_refuses_strings_mappings_sets_and_scalars(value):
    with pytest.raises(TypeError, match=r"^names: expected a list of names, got "):
        check_sequence(value, "names", "a list of names")


def test_check_sequence_checks_each_item_under_its_index():
    assert check_sequence([1, 2], "sizes", "ints", item=lambda v, n: check_int(v, n)) == (1, 2)
    with pytest.raises(TypeError, match=r"^sizes\[1\]: expected an int, got NoneType None$"):
        check_sequence([1, None], "sizes", "ints", item=lambda v, n: check_int(v, n))
    with pytest.raises(ValueError, match=r"^sizes: expected ints, got list \[\]$"):
        check_sequence([], "sizes", "ints")


def test_check_choice_instance_callable_str_and_path():
    assert check_choice("mlp", "model", ("mlp", "cnn")) == "mlp"
    with pytest.raises(ValueError, match=r"^model: expected one of 'mlp', 'cnn', got str 'rnn'$"):
        check_choice("rnn", "model", ("mlp", "cnn"))
    with pytest.raises(TypeError, match=r"^model: expected one of 'mlp', 'cnn', got int 1$"):
        check_choice(1, "model", ("mlp", "cnn"))
    with pytest.raises(TypeError, match=r"^x: expected a list, got tuple \(\)$"):
        check_instance((), "x", list, "a list")
    with pytest.raises(TypeError, match=r"^fn: expected a callable, got int 3$"):
        check_callable(3, "fn")
    with pytest.raises(ValueError, match=r"^name: expected a non-empty str, got an empty str$"):
        check_str("", "name")
    with pytest.raises(ValueError, match=r"^cache_dir: expected a non-empty path"):
        check_path("", "cache_dir")
    assert str(check_path("a/b", "p")) == "a/b"


def test_check_calls_names_the_argument_it_checks():
    assert check_calls({"a": abs}, "methods") == {"a": abs}
    with pytest.raises(TypeError, match=r"^methods\['x'\]: expected a callable, got str 'f'$"):
        check_calls({"x": "f"}, "methods")
    with pytest.raises(TypeError, match=r"^methods\[1\]: expected a str name, got int 1$"):
        check_calls({1: abs}, "methods")
    with pytest.raises(ValueError, match=r"^methods: expected a non-empty mapping of names to "):
        check_calls({}, "methods")


def test_check_device_accepts_the_devices_tensorflow_has():
    assert check_device("cpu:0") == "cpu:0" and check_device("/CPU:0") == "/CPU:0"


@pytest.mark.parametrize(
    "value, error, match",
    [
        (["/CPU:0"], TypeError, r"such as '/CPU:0', got list \['/CPU:0'\]$"),
        ("no such", ValueError, r"such as '/GPU:0', got str 'no such'$"),
        ("/CPU:99", ValueError, r"one of the devices TensorFlow has, .*got str '/CPU:99'$"),
    ],
)
def test_a_device_check_prints_what_arrived_not_only_its_type(value, error, match):
    with pytest.raises(error, match=r"^device: expected (a device string )?" + match):
        check_device(value)


@pytest.mark.parametrize("value", [1, 3, np.int64(9), 31])
def test_check_odd_int_accepts_odd_ints_up_to_the_maximum(value):
    assert check_odd_int(value, "ksize", maximum=31) == value
    assert type(check_odd_int(value, "ksize", maximum=31)) is int


@pytest.mark.parametrize(
    "value, error", [(0, ValueError), (4, ValueError), (33, ValueError), (3.0, TypeError)]
)
def test_check_odd_int_states_the_whole_rule(value, error):
    rule = r"^ksize: expected an odd int >= 1 and <= 31, got "
    with pytest.raises(error, match=rule + type(value).__name__):
        check_odd_int(value, "ksize", maximum=31)


# --- the public functions agree (each case below disagreed across modules before) ----------------


def test_numpy_integers_are_accepted_everywhere_an_int_is():
    n = np.int64(4)
    assert make_shapes(n, image_size=np.int64(16), meta_dim=np.int64(2))[1].shape == (4,)
    assert (
        CustomDense(n).units == 4 and ResidualBlock(n, hidden_units=np.int32(2)).hidden_units == 2
    )
    assert gaussian_kernel(np.int64(5)).shape == (5,) and GaussianBlur(np.int64(3)).ksize == 3
    assert AdditiveGaussianNoise(0.1, seed=np.int64(1)).seed == 1
    assert setup(np.int64(3), verbose=False)["seed"] == 3
    assert class_name(np.int64(5)) == "triangle/+"
    assert logsumexp(np.ones((2, 3), "float32"), axis=np.int64(1)).shape == (2,)


@pytest.mark.parametrize("label", [2.7, 2.0, True, "1"])
def test_class_name_rejects_non_integer_labels(label):
    with pytest.raises(TypeError, match=r"^label: expected an int >= 0 and <= 5"):
        class_name(label)


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: AdditiveGaussianNoise(math.nan), "stddev"),
        (lambda: AdditiveGaussianNoise(math.inf), "stddev"),
        (lambda: swish(np.ones(2, "float32"), math.inf), "beta"),
        (lambda: clipped_identity(np.ones(2, "float32"), clip_min=math.nan), "clip_min"),
        (lambda: gaussian_kernel(5, sigma=math.nan), "sigma"),
        (lambda: gradient_error(np.sin, np.ones(2), delta=math.nan), "delta"),
    ],
)
def test_nan_and_inf_parameters_are_rejected_naming_the_argument(make, argument):
    with pytest.raises(ValueError, match=rf"^{argument}: expected a finite number"):
        make()


def test_a_positive_range_against_a_dtype_prints_only_its_bounds():
    with pytest.raises(
        ValueError, match=r"^x: expected a finite number > 0 and <= 3.40282e\+38, got float -1.0$"
    ):
        check_real(-1.0, "x", above=0, dtype="float32")


def test_describe_survives_a_repr_that_fails():
    from companion._checks import describe

    class ReadsItsValue:  # a keras.Variable's repr in a tf.function on older Keras 3
        shape, dtype = (2,), "float32"

        def __repr__(self):
            raise RuntimeError("no value in graph mode")

    assert describe(ReadsItsValue()) == "ReadsItsValue of shape (2,) and dtype float32"


def test_describe_gives_a_long_array_or_tensor_by_shape_and_dtype():
    import keras
    import tensorflow as tf

    from companion._checks import describe

    assert describe(np.array([1.0, 2.0])) == "ndarray array([1., 2.])"
    assert describe(tf.zeros((32, 32, 3))) == "EagerTensor of shape (32, 32, 3) and dtype float32"
    assert describe(np.zeros((40, 3), "int32")) == "ndarray of shape (40, 3) and dtype int32"
    layer = keras.layers.Dense(2, name="head")
    assert describe(layer) == f"Dense {layer!r}"
