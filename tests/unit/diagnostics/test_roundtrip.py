"""companion/diagnostics/_roundtrip.py and _configs.py: check_roundtrip names what breaks."""

import warnings

import keras
import numpy as np
import pytest

from companion.diagnostics import (
    RoundtripReport,
    check_roundtrip,
)
from companion.layers import CustomDense, ResidualBlock

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


# ---------------------------------------------------------------- layers with classic bugs


class Scale(keras.layers.Layer):
    """y = x @ k * factor; registered below under several names, with get_config variants."""

    def __init__(self, units=2, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.factor = units, factor

    def build(self, input_shape):
        self.k = self.add_weight(shape=(input_shape[-1], self.units), initializer="ones", name="k")

    def call(self, inputs):
        return keras.ops.matmul(inputs, self.k) * self.factor

    def get_config(self):
        return super().get_config() | {"units": self.units, "factor": self.factor}


Registered = keras.saving.register_keras_serializable(package="test_diag")(
    type("Registered", (Scale,), {})
)


@keras.saving.register_keras_serializable(package="test_diag")
class ForgetsFactor(Scale):
    def get_config(self):
        config = super().get_config()
        del config["factor"]
        return config


@keras.saving.register_keras_serializable(package="test_diag")
class StoresFunction(Scale):
    def __init__(self, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.activation = keras.activations.get(activation)

    def get_config(self):
        return super().get_config() | {"activation": self.activation}  # the function, not its name


@keras.saving.register_keras_serializable(package="test_diag")
class Wrapper(keras.layers.Layer):
    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def call(self, inputs):
        return self.inner(inputs)

    def get_config(self):
        return super().get_config() | {"inner": keras.layers.serialize(self.inner)}


@keras.saving.register_keras_serializable(package="test_diag")
class FixedWrapper(Wrapper):
    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["inner"] = keras.layers.deserialize(config["inner"])
        return cls(**config)


def test_a_correct_registered_layer_passes():
    report = check_roundtrip(Registered(3, factor=2.0), X, fresh_process=False)
    assert isinstance(report, RoundtripReport)
    assert report.ok and report.problems == []
    assert "ok" in str(report) and "Registered" in str(report)


def test_companion_layers_in_a_model_pass():
    model = keras.Sequential(
        [keras.Input((3,)), CustomDense(5, activation="relu"), ResidualBlock(4)]
    )
    report = check_roundtrip(model, X, fresh_process=False)
    assert report.ok, str(report)


def test_omitted_constructor_argument_is_flagged():
    report = check_roundtrip(ForgetsFactor(2, factor=3.0), X, fresh_process=False)
    assert not report.ok
    assert any(
        "'factor'" in p and "get_config" in p and "default 1.0" in p for p in report.problems
    )
    # and the consequence: the reloaded layer computes with factor 1.0
    assert any("outputs on sample_input differ" in p for p in report.problems)


def test_unregistered_class_is_flagged():
    report = check_roundtrip(Scale(2), X, fresh_process=False)
    assert not report.ok
    assert report.problems[0].startswith("class 'Scale' is not registered")
    assert any(
        p.startswith("load_model failed: TypeError") and "Scale" in p for p in report.problems
    )


def test_config_that_is_not_json_is_flagged():
    report = check_roundtrip(StoresFunction(units=2), X, fresh_process=False)
    assert report.problems == [
        "StoresFunction.get_config() is not JSON: config['activation'] holds the function relu; "
        "store a name or keras.saving.serialize_keras_object(...) of it instead"
    ]
    # printed: the verdict, then the problem as a bullet wrapped within the book's column
    lines = str(report).splitlines()
    assert lines[0].endswith("saved and loaded in this process: 1 problem(s)")
    assert len(lines) > 2 and max(map(len, lines)) <= 84
    assert " ".join(line.strip() for line in lines[1:]) == f"- {report.problems[0]}"


def test_nested_object_without_from_config_is_flagged_and_the_fix_passes():
    broken = check_roundtrip(Wrapper(keras.layers.Dense(2)), X, fresh_process=False)
    assert any(
        "config['inner'] (a serialized Dense)" in p and "from_config" in p for p in broken.problems
    )
    fixed = check_roundtrip(FixedWrapper(keras.layers.Dense(2)), X, fresh_process=False)
    assert fixed.ok, str(fixed)


@keras.saving.register_keras_serializable(package="test_diag")
class AutoConfigScale(keras.layers.Layer):
    """No get_config override: Keras 3 records the constructor's arguments."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor


def test_an_attribute_changed_after_construction_shows_as_different_outputs():
    layer = AutoConfigScale(2.0)
    assert check_roundtrip(layer, X, fresh_process=False).ok
    layer.factor = 5.0  # the automatic config still holds the constructor's 2.0
    report = check_roundtrip(layer, X, fresh_process=False)
    assert len(report.problems) == 1 and report.problems[0].startswith(
        "outputs on sample_input differ after loading"
    )


@keras.saving.register_keras_serializable(package="test_diag")
class ScaledModel(keras.Model):
    """A subclassed model without get_config: Keras records none of its constructor arguments."""

    def __init__(self, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
        self.dense = keras.layers.Dense(2)

    def call(self, inputs):
        return self.dense(inputs) * self.scale


def test_a_subclassed_model_without_get_config_is_flagged_even_without_a_sample_input():
    model = ScaledModel(10.0)
    model(X)
    report = check_roundtrip(model, fresh_process=False)  # it reloads silently with scale=1.0
    assert report.problems == [
        "ScaledModel is a subclassed Model without its own get_config: Keras records no "
        "constructor arguments of a model (scale), so loading builds it with their defaults; "
        "write get_config"
    ]
    with_sample = check_roundtrip(model, X, fresh_process=False)
    assert any(
        p.startswith("outputs on sample_input differ after loading") for p in with_sample.problems
    )


def test_a_functional_model_of_a_model_subclass_is_not_flagged_for_its_arguments():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    assert check_roundtrip(model, X, fresh_process=False).ok


def test_lambda_layer_is_refused_in_safe_mode():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda t: t * 2)])
    report = check_roundtrip(model, X, fresh_process=False)
    assert len(report.problems) == 1 and report.problems[0].startswith("load_model failed")
    assert "Lambda" in report.problems[0]


def test_a_built_optimizer_loses_its_slots():
    # That each companion optimizer round-trips is test_conformance's (in a fresh process).
    optimizer = keras.optimizers.Adam(0.01)
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer.apply([np.ones(3, "float32")], [variable])
    report = check_roundtrip(optimizer, fresh_process=False)
    assert any(p.startswith("weights: 4 before saving, 2 after loading") for p in report.problems)


def test_fresh_process_loads_an_importable_registered_model():
    model = keras.Sequential(
        [keras.Input((3,)), CustomDense(5, activation="relu"), Registered(2, factor=0.5)]
    )
    report = check_roundtrip(model, X)  # the child imports companion.layers and this test module
    assert report.fresh_process and report.ok, str(report)


def test_fresh_process_names_a_class_defined_in_main():
    in_main = type("InMain", (Scale,), {"__module__": "__main__"})
    keras.saving.register_keras_serializable(package="test_diag")(in_main)
    report = check_roundtrip(in_main(2), X)
    assert "class 'test_diag>InMain' is defined in __main__" in report.problems[0]
    assert report.problems[1].startswith(
        "load_model failed: TypeError: Could not locate class 'InMain'"
    )
    in_process = check_roundtrip(in_main(2), X, fresh_process=False)
    assert in_process.ok  # this process has the class: only a fresh one shows the problem


@keras.saving.register_keras_serializable(package="test_diag")
class BrokenConfig(keras.layers.Identity):
    def get_config(self):
        raise RuntimeError("get_config is broken")


@keras.saving.register_keras_serializable(package="test_diag")
class SelfContainingConfig(keras.layers.Identity):
    def get_config(self):
        config = super().get_config()
        config["itself"] = config
        return config


@keras.saving.register_keras_serializable(package="test_diag")
class ArrayInConfig(keras.layers.Layer):
    def __init__(self, scale=(1.0, 2.0, 3.0), **kwargs):
        super().__init__(**kwargs)
        self.scale = np.asarray(scale, "float32")

    def call(self, inputs):
        return inputs * self.scale

    def get_config(self):
        return super().get_config() | {"scale": self.scale}  # an array, not a list


def _lambda_in_config_layer():
    """A layer whose config serializes a lambda, defined with no source file (a notebook cell)."""
    source = (
        "@keras.saving.register_keras_serializable(package='test_diag')\n"
        "class LambdaInConfig(keras.layers.Layer):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.fn = lambda t: t * 2\n"
        "    def call(self, inputs):\n"
        "        return self.fn(inputs)\n"
        "    def get_config(self):\n"
        "        fn = keras.saving.serialize_keras_object(self.fn)\n"
        "        return super().get_config() | {'fn': fn}\n"
    )
    namespace = {"keras": keras, "__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace["LambdaInConfig"]()


def test_a_get_config_raising_any_error_is_reported_not_raised():
    report = check_roundtrip(BrokenConfig(), X, fresh_process=False)
    assert report.problems == [
        "BrokenConfig.get_config() raised RuntimeError: get_config is broken"
    ]


def test_a_lambda_in_a_config_is_reported_not_raised():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras warns that a lambda is unsafe to serialize
        report = check_roundtrip(_lambda_in_config_layer(), X, fresh_process=False)
    assert report.problems and report.problems[0].startswith(
        "LambdaInConfig.get_config() raised OSError"
    )


def test_a_config_that_contains_itself_is_reported_not_raised():
    report = check_roundtrip(SelfContainingConfig(), X, fresh_process=False)
    assert report.problems == [
        "SelfContainingConfig.get_config() is not JSON: config['itself'] refers back to "
        "config (a cycle)"
    ]


def test_an_array_in_a_config_is_named_once_without_a_numpy_marker():
    report = check_roundtrip(ArrayInConfig(), X, fresh_process=False)
    assert report.problems[0] == (
        "ArrayInConfig.get_config() is not JSON: config['scale'] holds a ndarray object; "
        "store a list (array.tolist()) instead"
    )
    assert not any("__numpy__" in p for p in report.problems)


def test_nan_in_a_valid_sample_input_is_no_problem():
    sample = X.copy()
    sample[0, 0] = np.nan  # NaN in, NaN out in the same places: the reloaded layer agrees
    assert check_roundtrip(keras.layers.Dense(2), sample, fresh_process=False).ok
    changed = AutoConfigScale(2.0)
    changed.factor = 5.0
    problems = check_roundtrip(changed, sample, fresh_process=False).problems
    assert len(problems) == 1 and problems[0].startswith(
        "outputs on sample_input differ after loading"
    )


def _named_inputs_model():
    inputs = keras.Input((3,), name="a")
    return keras.Model({"a": inputs}, keras.layers.Dense(2)(inputs))


@pytest.mark.parametrize(
    "obj, sample_input",
    [
        (_named_inputs_model(), {"b": X}),  # a dict with the wrong key
        (keras.layers.Dense(2), {"x": X}),  # a dict for a layer of one input
        (_named_inputs_model(), np.ones((2, 4), "float32")),  # the wrong width
        (keras.layers.Dense(2), "abc"),
    ],
)
def test_a_sample_input_the_object_cannot_take_is_named(obj, sample_input):
    with pytest.raises(
        ValueError, match=r"^sample_input: expected an input .* accepts, got .*; the call raised"
    ):
        check_roundtrip(obj, sample_input, fresh_process=False)


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((3,), {}, TypeError, "obj: expected a Keras layer, model or optimizer, got int 3"),
        (
            (CustomDense(2),),
            {"timeout": 1e300},
            ValueError,
            "timeout: expected a finite number > 0 and <=",
        ),
        (
            (CustomDense(2),),
            {"fresh_process": "yes"},
            TypeError,
            "fresh_process: expected a bool, got str 'yes'",
        ),
        (
            (keras.optimizers.SGD(), X),
            {},
            ValueError,
            "sample_input: expected None for an optimizer",
        ),
        (
            (CustomDense(2),),
            {"atol": -1.0},
            ValueError,
            "atol: expected a finite number >= 0, got float -1.0",
        ),
    ],
)
def test_check_roundtrip_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_roundtrip(*args, **kwargs)
