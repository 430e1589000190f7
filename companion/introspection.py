"""Look inside TensorFlow objects: which ops a function lowers to, which weights a layer
owns, how a functional model wires its layers. Chapter 1 uses all three."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: Graph bookkeeping that every traced function has; hidden by default.
PLUMBING_OPS = frozenset({"Placeholder", "NoOp", "Identity"})


def traced_ops(fn: Callable[..., Any], *args: Any, ignore: Iterable[str] = PLUMBING_OPS) -> list[str]:
    """Trace ``fn(*args)`` into a graph and return the op type names, in graph order.

    ``fn`` may be a Python function, a ``tf.function`` or a Keras layer/model (an unbuilt
    layer is built during the trace). Nothing is executed: only the graph is inspected.

    Args:
        fn: The callable to trace.
        *args: Example inputs (tensors, arrays or ``tf.TensorSpec``) that fix dtypes and shapes.
        ignore: Op types to leave out; pass ``()`` to see every op.

    Returns:
        Op type names such as ``["ReadVariableOp", "MatMul", "BiasAdd"]``, one per op.

    Raises:
        TypeError: If ``fn`` is not callable.

    Example:
        >>> import tensorflow as tf
        >>> traced_ops(lambda x: tf.nn.relu(x * 2.0), tf.TensorSpec([None], tf.float32))
        ['Const', 'Mul', 'Relu']
    """
    import tensorflow as tf

    if not callable(fn):
        raise TypeError(f"fn: expected a callable (function, tf.function or layer), got {type(fn).__name__}")
    graph_fn = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    graph = graph_fn.get_concrete_function(*args).graph
    skipped = frozenset(ignore)
    return [op.type for op in graph.get_operations() if op.type not in skipped]


def weights_table(layer: Any) -> list[tuple[str, tuple[int | None, ...], str, bool]]:
    """List a layer's (or model's) weights as ``(path, shape, dtype, trainable)`` rows.

    An unbuilt layer has no weights yet, so the table is empty: Keras creates weights in
    ``build``, on the first call.

    Args:
        layer: A ``keras.layers.Layer`` (models are layers too).

    Returns:
        One row per weight, in creation order, e.g. ``("dense/kernel", (4, 3), "float32", True)``.

    Raises:
        TypeError: If ``layer`` is not a Keras layer.

    Example:
        >>> import keras
        >>> dense = keras.layers.Dense(3, name="dense")
        >>> weights_table(dense)
        []
        >>> dense.build((None, 4))
        >>> [row[:2] for row in weights_table(dense)]
        [('dense/kernel', (4, 3)), ('dense/bias', (3,))]
    """
    import keras

    if not isinstance(layer, keras.layers.Layer):
        raise TypeError(f"layer: expected a keras.layers.Layer, got {type(layer).__name__}")
    return [(w.path, tuple(w.shape), str(w.dtype), bool(w.trainable)) for w in layer.weights]


def _inbound_layer_names(node_args: Any) -> list[str]:
    """Names of the layers whose outputs appear in a serialized node's arguments."""
    if isinstance(node_args, dict):
        history = node_args.get("config", {}).get("keras_history") if "class_name" in node_args else None
        if history:
            return [history[0]]
        return [name for value in node_args.values() for name in _inbound_layer_names(value)]
    if isinstance(node_args, (list, tuple)):
        return [name for value in node_args for name in _inbound_layer_names(value)]
    return []


def layer_edges(model: Any) -> list[tuple[str, str]]:
    """Return the ``(from_layer, to_layer)`` connections of a functional or Sequential model.

    Read from the model's serialized config, so it shows exactly what ``model.save``
    would store.

    Args:
        model: A built ``keras.Model`` made with the Functional or Sequential API.

    Returns:
        Edges between layer names, in the order the layers run.

    Raises:
        TypeError: If ``model`` is a subclassed model (its wiring lives in Python code
            in ``call``, not in a graph of layers) or not a Keras model.

    Example:
        >>> import keras
        >>> inputs = keras.Input((4,), name="x")
        >>> model = keras.Model(inputs, keras.layers.Dense(2, name="out")(inputs))
        >>> layer_edges(model)
        [('x', 'out')]
    """
    import keras

    if isinstance(model, keras.Sequential):
        names = [layer.name for layer in model.layers]
        return list(zip(names, names[1:]))
    if not isinstance(model, keras.Model) or "layers" not in model.get_config():
        raise TypeError(
            f"model: expected a Functional or Sequential keras.Model, got {type(model).__name__}"
            " (a subclassed model keeps its wiring in Python code in `call`)"
        )
    edges = []
    for layer_config in model.get_config()["layers"]:
        for node in layer_config.get("inbound_nodes", []):
            for source in _inbound_layer_names(node):
                edges.append((source, layer_config["name"]))
    return edges


def plot_layer_graph(model: Any, ax: Any = None) -> Any:
    """Draw a functional or Sequential model as boxes (layers) and arrows (tensors).

    Layers are placed left to right by their depth (the longest path from an input).

    Args:
        model: A model accepted by :func:`layer_edges`.
        ax: A matplotlib Axes to draw on; a new figure is made when None.

    Returns:
        The matplotlib Axes.

    Raises:
        TypeError: As :func:`layer_edges`.
    """
    import matplotlib.pyplot as plt

    edges = layer_edges(model)
    names = list(dict.fromkeys([name for edge in edges for name in edge] + [l.name for l in model.layers]))
    depth = dict.fromkeys(names, 0)
    for _ in names:  # longest-path relaxation; the graph is acyclic and small
        for source, target in edges:
            depth[target] = max(depth[target], depth[source] + 1)
    rows: dict[int, list[str]] = {}
    for name in names:
        rows.setdefault(depth[name], []).append(name)
    position = {
        name: (level, -(index - (len(row) - 1) / 2))
        for level, row in rows.items()
        for index, name in enumerate(row)
    }
    if ax is None:
        _, ax = plt.subplots(figsize=(2.0 * len(rows) + 1, 1.0 * max(map(len, rows.values())) + 1))
    for source, target in edges:
        ax.annotate("", xy=position[target], xytext=position[source],
                    arrowprops=dict(arrowstyle="->", color="0.4", shrinkA=30, shrinkB=30))
    kinds = {layer.name: type(layer).__name__ for layer in model.layers}
    for name, (x, y) in position.items():
        label = f"{name}\n({kinds.get(name, 'Input')})"
        ax.text(x, y, label, ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle="round", facecolor="#e8f0fe", edgecolor="#4a6fa5"))
    ax.set_xlim(-0.6, len(rows) - 0.4)
    spread = max(map(len, rows.values()))
    ax.set_ylim(-spread / 2 - 0.2, spread / 2 + 0.2)
    ax.set_axis_off()
    ax.set_title(f"{model.name}: {len(names)} layers, {len(edges)} connections")
    return ax
