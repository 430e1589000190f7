"""Bad inputs for ``companion.introspection``: what is traced, listed or drawn must be what each
function can read (a callable, a layer, a functional or Sequential model)."""

import keras
import matplotlib
import tensorflow as tf
from helpers.badinput import Anything, Callable_, Case, Instance, Kind, Str

from companion.introspection import layer_edges, plot_layer_graph, traced_ops, weights_table

matplotlib.use("Agg")


class _Subclassed(keras.Model):
    """A subclassed model: its wiring is Python code, not a graph of layers."""

    def __init__(self, units):
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, inputs):
        return self.dense(inputs)


def _graph_model():
    inputs = keras.Input((3,), name="x")
    return keras.Model(inputs, keras.layers.Dense(2, name="out")(inputs))


OP_NAMES = Kind(
    "a list, tuple or set of op type names (non-empty str)",
    lambda v: isinstance(v, (list, tuple, set, frozenset)) and all(Str().accepts(e) for e in v),
    extra_bad=("Const", ["Const", 3], {"Const": 1}),
)
GRAPH_MODEL = Kind(
    "a Functional or Sequential keras.Model",
    lambda v: isinstance(v, keras.Model) and not isinstance(v, _Subclassed),
    extra_bad=(_Subclassed(2), keras.layers.Dense(2)),
)
AXES = Kind("a matplotlib Axes or None", lambda v: v is None or isinstance(v, matplotlib.axes.Axes))

CASES = [
    Case(
        "traced_ops",
        lambda fn, arg, ignore: traced_ops(fn, arg, ignore=ignore),
        {"fn": tf.math.sin, "arg": tf.TensorSpec([2], tf.float32), "ignore": ()},
        {"fn": Callable_(), "arg": Anything(), "ignore": OP_NAMES},
    ),
    Case(
        "weights_table",
        weights_table,
        {"layer": keras.layers.Dense(2)},
        {"layer": Instance(keras.layers.Layer, what="a keras.layers.Layer")},
    ),
    Case("layer_edges", layer_edges, {"model": _graph_model()}, {"model": GRAPH_MODEL}),
    Case(
        "plot_layer_graph",
        plot_layer_graph,
        lambda: {"model": _graph_model(), "ax": None},
        {"model": GRAPH_MODEL, "ax": AXES},
    ),
]
