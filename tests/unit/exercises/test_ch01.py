"""Chapter 1's exercise checks: a correct answer passes, each likely mistake is named."""

import keras
import tensorflow as tf

from companion.introspection import traced_ops


def test_ops_of_a_convolution(accepted, caught):
    conv_ops = traced_ops(keras.layers.Conv2D(4, 3), tf.TensorSpec([None, 8, 8, 3]))
    accepted("1.1", conv_ops)
    accepted("1.1", {"Conv2D", "BiasAdd"})
    caught("1.1", ["ReadVariableOp", "Conv2D"], r"'BiasAdd'.*use_bias=True by default")
    caught("1.1", ["Conv2D", "BiasAdd", "Relu"], r"no activation op.*default activation is None")
    caught("1.1", ["MatMul", "BiasAdd"], r"'Conv2D'.*not a MatMul")


def called_dense(*shapes):
    layer = keras.layers.Dense(3, name="fresh")
    for shape in shapes:
        layer(tf.zeros(shape))
    return layer


class RaisesOnCall(keras.layers.Dense):
    def call(self, inputs):
        raise RuntimeError("call is not written yet")


def test_a_second_call(accepted, caught):
    accepted("1.2", called_dense([2, 5], [7, 5]))
    caught("1.2", keras.layers.Dense(3), r"built layer.*pass fresh from above")
    broken = RaisesOnCall(3)
    broken.build((None, 5))
    caught("1.2", broken, r"^the answer raised RuntimeError")
    caught("1.2", called_dense([5, 7]), r"got \[\(7, 3\), \(3,\)\].*the batch is axis 0")


def test_retracing(accepted, caught):
    accepted("1.3", {"python_floats": 3, "tensors": 1})
    caught("1.3", {"python_floats": 3, "tensors": 0}, r"graph_step had already traced")
    caught("1.3", {"python_floats": 3, "tensors": 4}, r"running total")
    caught("1.3", {"python_floats": 1, "tensors": 1}, r"each new value retraces")
    caught("1.3", {"floats": 3, "tensors": 1}, r"needs keys 'python_floats' and 'tensors'")


def _mlp():
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def test_one_trace_for_every_batch_size(accepted, caught):
    mlp = _mlp()
    accepted("1.4", tf.function(mlp, input_signature=[tf.TensorSpec([None, 64], tf.float32)]))
    caught("1.4", tf.function(mlp, reduce_retracing=True), r"got 2 \(an exact trace first")
    caught("1.4", tf.function(mlp), r"got 3 \(one per batch size.*None as the batch axis")
    fixed = tf.function(mlp, input_signature=[tf.TensorSpec([32, 64], tf.float32)])
    caught("1.4", fixed, r"batch of 3 rows.*batch axis of the input_signature fixed")
    wrong_width = tf.function(
        keras.Sequential([keras.Input((64,)), keras.layers.Dense(4)]),
        input_signature=[tf.TensorSpec([None, 64], tf.float32)],
    )
    caught("1.4", wrong_width, r"shape \(3, 10\).*got \(3, 4\)")
