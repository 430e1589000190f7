"""Chapter 11's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf

from companion.diagnostics import count_traces

register = keras.saving.register_keras_serializable(package="test_ch11")


@register
class TemperatureScale(keras.layers.Layer):
    def __init__(self, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature

    def call(self, inputs):
        return inputs / self.temperature

    def get_config(self):
        return super().get_config() | {"temperature": self.temperature}


@register
class ForgetfulTemperatureScale(TemperatureScale):
    def get_config(self):
        return keras.layers.Layer.get_config(self)


@register
class MultipliesByTemperature(TemperatureScale):
    def call(self, inputs):
        return inputs * self.temperature


class UnregisteredTemperatureScale(TemperatureScale):  # not decorated: load_model cannot find it
    pass


def test_a_config_that_forgets(accepted, caught):
    accepted("11.1", TemperatureScale)
    caught("11.1", ForgetfulTemperatureScale, r"'temperature'.*add 'temperature'")
    caught("11.1", MultipliesByTemperature, r"x / 4, got")
    caught("11.1", UnregisteredTemperatureScale, r"not registered")


def fixed_step(step, batches):
    signature = [tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((), tf.int32)]
    counter = count_traces(step, input_signature=signature)
    for epoch in range(3):
        for batch in batches:
            counter(batch, tf.constant(epoch))
    return counter


def tensor_epoch_only(step, batches):
    counter = count_traces(step, reduce_retracing=True)
    for epoch in range(3):
        for batch in batches:
            counter(batch, tf.constant(epoch))
    return counter


def last_epoch_only(step, batches):
    counter = count_traces(step)
    for batch in batches * 3:
        counter(batch, tf.constant(2))
    return counter


def fixed_tf_function(step, batches):
    signature = [tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((), tf.int32)]
    function = tf.function(step, input_signature=signature)
    for epoch in range(3):
        for batch in batches:
            function(batch, tf.constant(epoch))
    return function


def signature_converts_python_epoch(step, batches):
    signature = [tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((), tf.int32)]
    function = tf.function(step, input_signature=signature)
    for epoch in range(3):
        for batch in batches:
            function(batch, epoch)  # the input_signature makes the int a tensor
    return function


def python_epoch_as_written(step, batches):
    function = tf.function(step)
    for epoch in range(3):
        for batch in batches:
            function(batch, epoch)
    return function


def returns_the_last_result(step, batches):
    function = tf.function(step)
    for epoch in range(3):
        for batch in batches:
            result = function(batch, tf.constant(epoch))
    return result


def test_count_the_traces(accepted, caught):
    accepted("11.2", {"predicted": 6, "fixed": fixed_tf_function})
    accepted("11.2", {"predicted": 6, "fixed": signature_converts_python_epoch})
    accepted("11.2", {"predicted": 6, "fixed": fixed_step})
    caught(
        "11.2",
        {"predicted": 6, "fixed": python_epoch_as_written},
        r"got 6 traces .*without an input_signature.*Python epoch",
    )
    caught("11.2", {"predicted": 6, "fixed": returns_the_last_result}, r"return its tf.function")
    caught("11.2", {"predicted": 3, "fixed": fixed_step}, r"predicted == 6.*new Python int")
    caught("11.2", {"predicted": 6, "fixed": tensor_epoch_only}, r"got 2 .*shape.*None")
    caught("11.2", {"predicted": 6, "fixed": last_epoch_only}, r"sum to 900.*tf.constant\(epoch")


class Standardize(keras.layers.Layer):
    def __init__(self, epsilon=0.0, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def call(self, inputs):
        mean = keras.ops.mean(inputs, axis=0)
        std = keras.ops.std(inputs, axis=0)
        return (inputs - mean) / (std + self.epsilon)


class StandardizeRows(Standardize):
    def call(self, inputs):
        mean = keras.ops.mean(inputs, axis=-1, keepdims=True)
        std = keras.ops.std(inputs, axis=-1, keepdims=True)
        return (inputs - mean) / (std + self.epsilon)


def fixed_standardize(layer, op="RealDiv"):
    return {"op": op, "layer": layer}


def test_standardize_without_nan(accepted, caught):
    accepted("11.3", fixed_standardize(Standardize(1e-6, name="standardize")))
    caught(
        "11.3",
        fixed_standardize(Standardize(name="standardize")),
        r"'standardize'.*0 / 0 is NaN",
    )
    caught("11.3", fixed_standardize(Standardize(1.0, name="standardize")), r"std 1.*small epsilon")
    caught(
        "11.3",
        fixed_standardize(StandardizeRows(1e-6, name="standardize")),
        r"mean 0 and std 1.*axis=0",
    )
    fixed = Standardize(1e-6, name="standardize")
    caught("11.3", fixed_standardize(fixed, "Sqrt"), r"got 'Sqrt'.*op that divides")
    caught("11.3", fixed_standardize(fixed, "truediv"), r"node's name.*'graph op'")
    caught("11.3", fixed_standardize(fixed, "standardize"), r"that is a layer")
    caught("11.3", {"op": "RealDiv", "layer": Standardize}, r"instance\), got type")


def fixed_normalize(normalize, calls):
    counter = count_traces(normalize)
    for batch, scale in calls:
        counter(tf.cast(batch, tf.float32), tf.constant(scale, tf.float32))
    return counter


def scale_left_python(normalize, calls):
    counter = count_traces(normalize)
    for batch, scale in calls:
        counter(tf.cast(batch, tf.float32), scale)
    return counter


def batch_left_float64(normalize, calls):
    counter = count_traces(normalize)
    for batch, scale in calls:
        counter(tf.constant(batch), tf.constant(scale, batch.dtype))
    return counter


def scale_lost(normalize, calls):
    counter = count_traces(normalize)
    for batch, _ in calls:
        counter(tf.cast(batch, tf.float32), tf.constant(1.0))
    return counter


def scale_as_int(normalize, calls):
    counter = count_traces(normalize)
    for batch, scale in calls:
        counter(tf.cast(batch, tf.float32), tf.constant(scale, tf.int32))
    return counter


def test_why_did_it_trace_again(accepted, caught):
    accepted("11.4", fixed_normalize)
    caught("11.4", scale_left_python, r"got 2 .*scale: Python value 1.0 -> 0.5")
    caught("11.4", batch_left_float64, r"got 2 .*dtype float32 -> float64")
    caught("11.4", scale_lost, r"sum\(output\*\*2\)")
    caught("11.4", scale_as_int, r"the answer raised")  # a broken answer: reported, not raised
