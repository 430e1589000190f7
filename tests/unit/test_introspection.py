import keras
import pytest
import tensorflow as tf

from companion.introspection import PLUMBING_OPS, layer_edges, traced_ops, weights_table


def test_traced_ops_of_dense_layer_include_matmul_and_biasadd():
    ops = traced_ops(keras.layers.Dense(3, activation="relu"), tf.TensorSpec([None, 4], tf.float32))
    assert {"MatMul", "BiasAdd", "Relu"} <= set(ops)
    assert ops.index("MatMul") < ops.index("BiasAdd") < ops.index("Relu")


def test_traced_ops_of_plain_function_and_tf_function():
    def scaled_relu(x):
        return tf.nn.relu(x * 2.0)

    spec = tf.TensorSpec([None], tf.float32)
    assert traced_ops(scaled_relu, spec) == ["Const", "Mul", "Relu"]
    assert traced_ops(tf.function(scaled_relu), spec) == ["Const", "Mul", "Relu"]


def test_traced_ops_hides_plumbing_unless_asked():
    everything = traced_ops(tf.math.sin, tf.TensorSpec([2], tf.float32), ignore=())
    assert "Placeholder" in everything and "Sin" in everything
    assert not PLUMBING_OPS & set(traced_ops(tf.math.sin, tf.TensorSpec([2], tf.float32)))


def test_traced_ops_rejects_non_callable():
    with pytest.raises(TypeError, match="^fn: expected a callable"):
        traced_ops(3, tf.constant(1.0))


def test_weights_table_empty_before_build_then_lists_kernel_and_bias():
    dense = keras.layers.Dense(3, name="probe")
    assert weights_table(dense) == []
    dense(tf.zeros([2, 5]))
    assert weights_table(dense) == [
        ("probe/kernel", (5, 3), "float32", True),
        ("probe/bias", (3,), "float32", True),
    ]


def test_weights_table_marks_non_trainable_weights():
    norm = keras.layers.BatchNormalization(name="bn")
    norm.build((None, 4))
    trainable = {path: flag for path, _, _, flag in weights_table(norm)}
    assert trainable == {
        "bn/gamma": True,
        "bn/beta": True,
        "bn/moving_mean": False,
        "bn/moving_variance": False,
    }


def test_weights_table_rejects_non_layers():
    with pytest.raises(TypeError, match="^layer: expected a keras.layers.Layer"):
        weights_table(tf.Variable(1.0))


def test_layer_edges_functional_and_sequential():
    a = keras.Input((4,), name="a")
    b = keras.Input((2,), name="b")
    joined = keras.layers.Concatenate(name="join")([keras.layers.Dense(3, name="da")(a), b])
    model = keras.Model([a, b], keras.layers.Dense(1, name="out")(joined))
    assert sorted(layer_edges(model)) == sorted(
        [("a", "da"), ("da", "join"), ("b", "join"), ("join", "out")]
    )

    seq = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(2, name="h"), keras.layers.Dense(1, name="o")]
    )
    assert layer_edges(seq) == [("h", "o")]


def test_layer_edges_rejects_subclassed_models():
    class Tiny(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    with pytest.raises(TypeError, match="subclassed"):
        layer_edges(Tiny())


def _two_branch_model():
    image, meta = keras.Input((8, 8, 3), name="image"), keras.Input((4,), name="meta")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(
        keras.layers.Conv2D(2, 3, name="conv")(image)
    )
    m = keras.layers.Dense(2, name="meta_dense")(meta)
    out = keras.layers.Dense(3, name="logits")(keras.layers.Concatenate(name="concat")([x, m]))
    return keras.Model([image, meta], out)


def _segment_hits_box(p, q, box, samples=200):
    (x0, y0), (x1, y1) = box
    for t in [i / samples for i in range(1, samples)]:
        x, y = p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])
        if x0 < x < x1 and y0 < y < y1:
            return True
    return False


def test_layer_graph_edges_never_cross_another_layers_box_and_end_at_box_edges():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from companion.introspection import plot_layer_graph

    model = _two_branch_model()  # meta_dense -> concat skips the column of pool
    ax = plot_layer_graph(model)
    to_data = ax.transData.inverted()
    boxes = {
        t.get_text().split("\n")[0]: to_data.transform(t.get_bbox_patch().get_window_extent())
        for t in ax.texts
        if not isinstance(t, matplotlib.text.Annotation)
    }
    arrows = [a for a in ax.texts if isinstance(a, matplotlib.text.Annotation)]
    assert len(arrows) == len(layer_edges(model))
    segments = [list(line.get_xydata()) for line in ax.lines]
    segments += [[a.xyann, a.xy] for a in arrows]
    for points in segments:
        for p, q in zip(points, points[1:]):
            touching = [name for name, box in boxes.items() if _segment_hits_box(p, q, box)]
            assert not touching, f"segment {p} -> {q} crosses the box of {touching}"
    for arrow in arrows:  # each arrowhead ends on the left edge of a box, not inside it
        assert any(
            abs(arrow.xy[0] - box[0][0]) < 1e-6 and box[0][1] <= arrow.xy[1] <= box[1][1]
            for box in boxes.values()
        )
    plt.close(ax.figure)


@pytest.mark.parametrize("ignore", ["Const", ["Const", 3], {"Const": 1}, None])
def test_traced_ops_refuses_an_ignore_that_is_not_a_collection_of_names(ignore):
    with pytest.raises(TypeError, match=r"^ignore(\[1\])?: expected"):
        traced_ops(tf.math.sin, tf.TensorSpec([2], tf.float32), ignore=ignore)


def test_traced_ops_takes_a_set_of_names():
    assert traced_ops(
        tf.math.sin, tf.TensorSpec([2], tf.float32), ignore={"Placeholder", "Identity"}
    ) == ["Sin"]


def test_layer_edges_names_a_subclassed_model_whose_config_cannot_be_made():
    class NeedsArgument(keras.Model):  # get_config raises NotImplementedError (a required argument)
        def __init__(self, units):
            super().__init__()
            self.dense = keras.layers.Dense(units)

        def call(self, x):
            return self.dense(x)

    with pytest.raises(
        TypeError,
        match="^model: expected a Functional or Sequential keras.Model, got NeedsArgument",
    ):
        layer_edges(NeedsArgument(2))


def test_plot_layer_graph_of_an_empty_sequential_is_an_empty_plot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from companion.introspection import plot_layer_graph

    ax = plot_layer_graph(keras.Sequential(name="empty"))
    assert ax.get_title() == "empty: 0 layers, 0 connections" and not ax.texts
    plt.close(ax.figure)


def test_plot_layer_graph_refuses_an_ax_that_is_not_axes():
    from companion.introspection import plot_layer_graph

    with pytest.raises(TypeError, match="^ax: expected a matplotlib Axes or None, got str 'left'"):
        plot_layer_graph(_two_branch_model(), ax="left")
