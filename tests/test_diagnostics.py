import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from companion.diagnostics import (
    RoundtripReport,
    check_roundtrip,
    check_variable_batch,
    count_traces,
    explain_retrace,
    first_nonfinite,
    first_nonfinite_gradient,
    gradient_norms,
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


# ---------------------------------------------------------------- non-finite values


class Log(keras.layers.Layer):
    def call(self, inputs):
        return keras.ops.log(inputs)


def _negative_dense(name):
    layer = keras.layers.Dense(3, name=name, kernel_initializer=keras.initializers.Constant(-1.0))
    return layer


def test_first_nonfinite_names_the_layer_in_a_sequential_model_like_a_manual_walk():
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(3, activation="relu", name="ok"),
            _negative_dense("negative"),
            Log(name="log"),
            keras.layers.Dense(2, name="after"),
        ]
    )
    x = np.abs(X) + 0.1
    manual, h = None, x
    for layer in model.layers:  # the inline version: feed the batch through layer by layer
        h = layer(h)
        if manual is None and not np.isfinite(np.asarray(h)).all():
            manual = layer.name
    assert first_nonfinite(model, x) == manual == "log"


def test_first_nonfinite_in_functional_branches_and_nested_layers():
    inputs = keras.Input((3,))
    left = keras.layers.Dense(4, name="left")(inputs)
    block = ResidualBlock(4, name="block")
    right = block(inputs)
    model = keras.Model(inputs, keras.layers.Add(name="add")([left, right]))
    assert first_nonfinite(model, X) is None
    block.hidden.kernel.assign(np.full(block.hidden.kernel.shape, np.nan, "float32"))
    assert first_nonfinite(model, X) == "block/hidden"


class SubclassedWithRawOp(keras.Model):
    def __init__(self, raw_log=False, **kwargs):
        super().__init__(**kwargs)
        self.raw_log = raw_log
        self.first = keras.layers.Dense(
            3, name="first", kernel_initializer=keras.initializers.Constant(-1.0)
        )
        self.log = Log(name="log")
        self.second = keras.layers.Dense(2, name="second")

    def call(self, inputs):
        h = self.first(inputs)
        h = keras.ops.log(h) if self.raw_log else self.log(h)
        return self.second(h)


def test_first_nonfinite_in_a_subclassed_model():
    x = np.abs(X) + 0.1
    assert first_nonfinite(SubclassedWithRawOp(name="sub"), x) == "log"
    assert (
        first_nonfinite(SubclassedWithRawOp(raw_log=True, name="sub"), x)
        == "sub.call, before 'second'"
    )


def test_first_nonfinite_restores_the_layers_even_after_an_error():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")])
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        first_nonfinite(model, np.ones((2, 5), "float32"))  # wrong width: the call raises
    assert all("call" not in vars(layer) for layer in model.layers)
    assert first_nonfinite(model, X) is None


def test_first_nonfinite_bad_input():
    with pytest.raises(TypeError, match="model: expected a Keras layer or model, got str 'm'"):
        first_nonfinite("m", X)
    with pytest.raises(ValueError, match="inputs: expected finite values, got NaN or Inf"):
        first_nonfinite(keras.layers.Dense(2), np.array([[np.nan, 1.0, 2.0]], "float32"))


def _norm_model():
    """Forward pass finite at x = 0, gradient not: d sqrt(s)/ds is infinite at s = 0."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    h = keras.layers.Dense(3, name="dense", kernel_initializer="ones")(inputs)
    norm = keras.layers.Lambda(
        lambda t: keras.ops.sqrt(keras.ops.sum(t * t, axis=-1, keepdims=True)), name="norm"
    )(h)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(norm))


def test_first_nonfinite_gradient_names_the_variable_and_matches_the_tape():
    model, x, y = _norm_model(), np.zeros((2, 3), "float32"), np.ones((2, 1), "float32")
    loss = keras.losses.MeanSquaredError()
    assert first_nonfinite(model, x) is None  # the forward pass is finite
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=True))
    reference = {
        v.path: np.isfinite(g.numpy()).all()
        for v, g in zip(model.trainable_variables, tape.gradient(value, model.trainable_variables))
    }
    found = first_nonfinite_gradient(model, x, y, loss=loss)
    assert found == "dense/bias" and not reference[found]
    assert reference["head/kernel"] and reference["head/bias"]
    assert first_nonfinite_gradient(model, np.ones((2, 3), "float32"), y, loss=loss) is None


def test_gradient_norms_equal_the_tape_in_backprop_order():
    model, x, y = _norm_model(), np.ones((2, 3), "float32"), np.zeros((2, 1), "float32")
    loss = keras.losses.MeanSquaredError()
    norms = gradient_norms(model, x, y, loss=loss)
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=True))
    gradients = tape.gradient(value, model.trainable_variables)
    expected = {
        v.path: float(np.linalg.norm(g.numpy().astype(np.float64)))
        for v, g in zip(model.trainable_variables, gradients)
    }
    assert (
        list(norms)
        == list(expected)[::-1]
        == ["head/bias", "head/kernel", "dense/bias", "dense/kernel"]
    )
    for path, norm in norms.items():
        assert norm == pytest.approx(expected[path], rel=1e-6)


def test_gradient_helpers_bad_input():
    with pytest.raises(TypeError, match="loss: expected a callable"):
        gradient_norms(keras.layers.Dense(1), X, X, loss="mse")
    with pytest.raises(TypeError, match="model: expected a Keras layer or model"):
        first_nonfinite_gradient(None, X, X, loss=keras.losses.MeanSquaredError())


# ---------------------------------------------------------------- tracing


def test_count_traces_counts_a_retrace_per_python_value():
    scale = count_traces(lambda x, factor: x * factor)
    for factor in (1.0, 2.0, 2.0, 3.0):
        scale(tf.ones((2, 3)), factor)
    assert scale.traces == scale.function.experimental_get_tracing_count() == 3
    assert scale.signatures == [f"x=float32[2, 3], factor={f}" for f in (1.0, 2.0, 3.0)]
    for factor in (1.0, 2.0, 3.0):
        scale(tf.ones((2, 3)), tf.constant(factor))
    assert scale.traces == 4 and scale.signatures[-1] == "x=float32[2, 3], factor=float32[]"


def test_input_signature_and_reduce_retracing_fix_shape_retracing():
    shapes = [(2, 3), (4, 3), (5, 3), (7, 3)]

    @count_traces
    def plain(x):
        return tf.reduce_sum(x)

    @count_traces(reduce_retracing=True)
    def relaxed(x):
        return tf.reduce_sum(x)

    @count_traces(input_signature=[tf.TensorSpec((None, 3), tf.float32)])
    def signed(x):
        return tf.reduce_sum(x)

    for shape in shapes:
        for fn in (plain, relaxed, signed):
            assert float(fn(tf.ones(shape))) == shape[0] * shape[1]
    assert (plain.traces, relaxed.traces, signed.traces) == (4, 2, 1)
    assert relaxed.signatures == ["x=float32[2, 3]", "x=float32[None, 3]"]
    assert signed.signatures == ["x=float32[None, 3]"]
    assert relaxed.traces == relaxed.function.experimental_get_tracing_count()


def test_explain_retrace_names_a_new_shape_dtype_and_python_value():
    scale = count_traces(lambda x, factor: x * factor)
    calls = [
        (tf.ones((2, 3)), 1.0),
        (tf.ones((4, 3)), 1.0),  # a new shape
        (tf.ones((2, 3), tf.float64), 1.0),  # a new dtype
        (tf.ones((2, 3)), 2.5),  # a new Python float
        (tf.ones((2, 3)), 2.5),  # the same call: no trace
        (tf.ones((2, 3)), tf.constant(2.5)),  # a tensor where a Python value was
    ]
    for x, factor in calls:
        scale(x, factor)
    assert scale.traces == 5
    assert [explain_retrace(scale, i) for i in range(1, 5)] == [
        "trace 2 of 5, against trace 1: x: shape [2, 3] -> [4, 3]",
        "trace 3 of 5, against trace 1: x: dtype float32 -> float64",
        "trace 4 of 5, against trace 1: factor: Python value 1.0 -> 2.5",
        "trace 5 of 5, against trace 4: factor: Python value 2.5 -> tensor float32[]",
    ]
    assert explain_retrace(scale) == explain_retrace(scale, 4) == explain_retrace(scale, -1)


def test_explain_retrace_names_nested_arguments_and_several_changes():
    @count_traces
    def step(batch, training):
        return tf.reduce_sum(batch["image"]) * (2.0 if training else 1.0)

    step({"image": tf.ones((2, 3))}, True)
    step({"image": tf.ones((2, 4), tf.float16), "label": tf.ones(2)}, False)
    assert explain_retrace(step) == (
        "trace 2 of 2, against trace 1: batch['image']: dtype float32 -> float16, "
        "shape [2, 3] -> [2, 4]; training: Python value True -> False; "
        "batch['label'] is new"
    )


def test_explain_retrace_with_reduce_retracing_names_the_relaxed_shape():
    relaxed = count_traces(tf.reduce_sum, reduce_retracing=True)
    for rows in (2, 3, 4):
        relaxed(tf.ones((rows, 3)))
    assert relaxed.traces == 2
    assert explain_retrace(relaxed).endswith("shape [2, 3] -> [None, 3]")


def test_explain_retrace_bad_input():
    scale = count_traces(lambda x: x * 2.0)
    scale(tf.ones(3))
    with pytest.raises(ValueError, match="trace: expected the index of a retrace .* got int 0"):
        explain_retrace(scale, 0)
    with pytest.raises(ValueError, match="trace: expected the index of a retrace"):
        explain_retrace(scale)  # one trace: -1 is the first
    scale(tf.ones(4))
    with pytest.raises(ValueError, match="trace: expected an int >= -2 and <= 1, got int 2"):
        explain_retrace(scale, 2)
    with pytest.raises(TypeError, match="trace: expected an int"):
        explain_retrace(scale, 1.0)
    with pytest.raises(TypeError, match="counter: expected a TraceCounter"):
        explain_retrace(scale.function)


def test_count_traces_bad_input():
    with pytest.raises(TypeError, match="fn: expected a callable, got int 3"):
        count_traces(3)


# ---------------------------------------------------------------- shapes


class StaticBatchFlatten(keras.layers.Layer):
    def call(self, inputs):
        return tf.reshape(inputs, (inputs.shape[0], -1))  # the static batch size: None when traced


class DynamicBatchFlatten(keras.layers.Layer):
    def call(self, inputs):
        return keras.ops.reshape(inputs, (-1, int(np.prod(inputs.shape[1:]))))


def test_check_variable_batch_flags_static_batch_size_and_passes_the_fix():
    sample = np.arange(24, dtype="float32").reshape(4, 2, 3)
    np.testing.assert_array_equal(StaticBatchFlatten()(sample), sample.reshape(4, 6))  # eager: fine
    problems = check_variable_batch(StaticBatchFlatten(), sample)
    assert len(problems) == 1 and problems[0].startswith("tracing with batch size None failed")
    assert check_variable_batch(DynamicBatchFlatten(), sample) == []


def test_check_variable_batch_bad_input():
    with pytest.raises(
        ValueError,
        match=r"sample_input: expected arrays with a batch of at least 2, "
        r"got ndarray of shape \(1, 3\)",
    ):
        check_variable_batch(keras.layers.Dense(2), np.ones((1, 3), "float32"))
    with pytest.raises(TypeError, match="layer: expected a callable"):
        check_variable_batch(None, X)


def test_check_variable_batch_names_a_sample_the_layer_cannot_take():
    dense = keras.layers.Dense(2)
    dense.build((None, 3))
    with pytest.raises(
        ValueError,
        match=r"^sample_input: expected an input .* accepts, got ndarray of shape \(4, 5\)",
    ):
        # before: reported as a tracing problem
        check_variable_batch(dense, np.ones((4, 5), "float32"))
    with pytest.raises(
        ValueError,
        match=r"^sample_input: expected an array, or a list, tuple or dict of arrays "
        r"of numbers, got dict {}",
    ):
        check_variable_batch(dense, {})


def test_gradient_helpers_refuse_targets_they_cannot_blame_on_a_layer():
    dense, loss = keras.layers.Dense(2), keras.losses.MeanSquaredError()
    with pytest.raises(ValueError, match="^targets: expected finite values, got NaN or Inf"):
        first_nonfinite_gradient(dense, X, np.full((4, 2), np.nan, "float32"), loss=loss)
    with pytest.raises(
        ValueError,
        match=r"^targets: expected arrays with the batch size of the model's output \(4\)",
    ):
        gradient_norms(dense, X, np.zeros((3, 2), "float32"), loss=loss)


def test_tensors_and_keras_variables_pass_the_input_checks():
    dense, loss = keras.layers.Dense(2), keras.losses.MeanSquaredError()
    assert check_roundtrip(dense, keras.Variable(X), fresh_process=False).ok
    assert first_nonfinite(dense, tf.constant(X)) is None
    assert first_nonfinite_gradient(dense, keras.Variable(X), tf.zeros((4, 2)), loss=loss) is None
    assert check_variable_batch(dense, tf.constant(X)) == []
