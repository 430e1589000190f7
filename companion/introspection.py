"""Look inside TensorFlow objects: which ops a function lowers to, which weights a layer
owns, how a functional model wires its layers. Chapter 1 uses all three.

Backends: TensorFlow, JAX, PyTorch, except ``traced_ops`` (TensorFlow only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from companion._backend import require_tensorflow
from companion._checks import check_callable, check_instance, check_sequence, check_str, describe

#: How JAX and PyTorch show the ops a function is made of.
TRACE_INSTEAD = {
    "jax": "jax.make_jaxpr(fn)(*args): the jaxpr's equations, one primitive each",
    "torch": "torch.fx.symbolic_trace(fn).graph, or torch.export.export(module, args).graph",
}

#: Graph bookkeeping that every traced function has; hidden by default.
PLUMBING_OPS = frozenset({"Placeholder", "NoOp", "Identity"})


def traced_ops(
    fn: Callable[..., Any], *args: Any, ignore: Iterable[str] = PLUMBING_OPS
) -> list[str]:
    """Trace ``fn(*args)`` into a graph and return the op type names, in graph order.

    ``fn`` may be a Python function, a ``tf.function`` or a Keras layer/model (an unbuilt
    layer is built during the trace). Nothing is executed: only the graph is inspected.

    Args:
        fn: The callable to trace.
        *args: Example inputs (tensors, arrays or ``tf.TensorSpec``) that fix dtypes and shapes.
        ignore: Op types to leave out, a list, tuple or set of names; pass ``()`` to see every op.

    Returns:
        Op type names such as ``["ReadVariableOp", "MatMul", "BiasAdd"]``, one per op.

    Raises:
        TypeError: If ``fn`` is not callable, or ``ignore`` is not a collection of names (a
            single str is refused: it would be read one letter at a time).
        companion.backends.TensorFlowRequired: Under another backend (naming its way to see a
            trace).

    Example:
        >>> import tensorflow as tf
        >>> spec = tf.TensorSpec([None], tf.float32)
        >>> traced_ops(lambda x: tf.nn.relu(x * 2.0), spec)
        ['Const', 'Mul', 'Relu']

    Taught in chapter 1, "Ops: the atoms".
    """
    require_tensorflow("companion.introspection.traced_ops", TRACE_INSTEAD)
    import tensorflow as tf

    check_callable(fn, "fn", "a callable (function, tf.function or layer)")
    skipped = _op_names(ignore, "ignore")
    graph_fn = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    graph = graph_fn.get_concrete_function(*args).graph
    return [op.type for op in graph.get_operations() if op.type not in skipped]


def _op_names(value: Any, name: str) -> frozenset[str]:
    """``value`` as a set of op type names: a list, tuple or set of non-empty str."""
    what = "a list, tuple or set of op type names (str)"
    items = (
        value
        if isinstance(value, (set, frozenset))
        else check_sequence(value, name, what, min_length=0)
    )
    return frozenset(
        check_str(item, f"{name}[{index}]", "an op type name (a non-empty str)")
        for index, item in enumerate(items)
    )


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

    Taught in chapter 1, "When are the weights created?".
    """
    import keras

    check_instance(layer, "layer", keras.layers.Layer, "a keras.layers.Layer")
    return [(w.path, tuple(w.shape), str(w.dtype), bool(w.trainable)) for w in layer.weights]


def _inbound_layer_names(node_args: Any) -> list[str]:
    """Names of the layers whose outputs appear in a serialized node's arguments."""
    if isinstance(node_args, dict):
        history = (
            node_args.get("config", {}).get("keras_history") if "class_name" in node_args else None
        )
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

    Taught in chapter 1, "Models: a graph of layers".
    """
    import keras

    if isinstance(model, keras.Sequential):
        names = [layer.name for layer in model.layers]
        return list(zip(names, names[1:]))
    config = _graph_config(model)
    edges = []
    for layer_config in config["layers"]:
        for node in layer_config.get("inbound_nodes", []):
            for source in _inbound_layer_names(node):
                edges.append((source, layer_config["name"]))
    return edges


def _graph_config(model: Any) -> dict[str, Any]:
    """The config of a functional model, which lists its layers and their inbound nodes."""
    import keras

    try:
        config = model.get_config() if isinstance(model, keras.Model) else {}
    except NotImplementedError:  # a subclassed model with arguments Keras cannot record
        config = {}
    if "layers" not in config:
        raise TypeError(
            f"model: expected a Functional or Sequential keras.Model, got {describe(model)}"
            " (a subclassed model keeps its wiring in Python code in `call`)"
        )
    return config


def _layered_layout(names: list[str], edges: list[tuple[str, str]]) -> tuple[dict, dict]:
    """Columns by longest path from an input; rows ordered so that edges cross no box.

    An edge that skips columns gets a waypoint in every column it passes (the layered
    layout of Sugiyama et al.), so it is routed through a free row instead of through
    another layer's box. Rows in a column are ordered by the mean row of their
    predecessors, which keeps branches apart until they merge.

    Returns:
        ``(position, waypoints)``: ``{name: (column, row)}`` and ``{edge: [(column, row), ...]}``.
    """
    depth = _depths(names, edges)
    row = _rows(*_columns(names, edges, depth))
    position = {name: (depth[name], -row[name]) for name in names}
    waypoints = {
        edge: [
            (column, -row[(edge, column)]) for column in range(depth[edge[0]] + 1, depth[edge[1]])
        ]
        for edge in edges
    }
    return position, waypoints


def _depths(names: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Each layer's column: the length of the longest path to it from an input."""
    depth = dict.fromkeys(names, 0)
    for _ in names:  # longest-path relaxation; the graph is acyclic and small
        for source, target in edges:
            depth[target] = max(depth[target], depth[source] + 1)
    return depth


def _columns(
    names: list[str], edges: list[tuple[str, str]], depth: dict[str, int]
) -> tuple[dict[int, list], dict]:
    """``(columns, predecessors)``: the items of each column, a layer name or ``(edge, column)``
    for a waypoint of an edge passing through, and the items each item is drawn from."""
    columns: dict[int, list] = {}
    for name in names:
        columns.setdefault(depth[name], []).append(name)
    predecessors: dict = {
        name: [source for source, target in edges if target == name] for name in names
    }
    for edge in edges:
        previous = edge[0]
        for column in range(depth[edge[0]] + 1, depth[edge[1]]):
            waypoint = (edge, column)
            columns[column].append(waypoint)
            predecessors[waypoint] = [previous]
            previous = waypoint
        if previous != edge[0]:
            predecessors[edge[1]] = [previous if p == edge[0] else p for p in predecessors[edge[1]]]
    return columns, predecessors


def _rows(columns: dict[int, list], predecessors: dict) -> dict:
    """Each item's row, centred on 0: column by column, ordered by the mean row of the item's
    predecessors (ties keep their order)."""
    row: dict = {}
    for column in sorted(columns):
        items = columns[column]
        if column > 0:
            order = {item: index for index, item in enumerate(items)}
            items.sort(key=lambda item: (_mean_row(predecessors[item], row), order[item]))
        for index, item in enumerate(items):
            row[item] = index - (len(items) - 1) / 2
    return row


def _mean_row(items: list, row: dict) -> float:
    """The mean row of ``items`` (0 for none)."""
    return sum(row[item] for item in items) / len(items) if items else 0


def plot_layer_graph(model: Any, ax: Any = None) -> Any:
    """Draw a functional or Sequential model as boxes (layers) and arrows (tensors).

    Layers are placed left to right by their depth (the longest path from an input). An
    arrow that skips columns is routed through a free row of each column it crosses, and
    every arrow starts and ends at the edge of a box, so its head is always visible.

    A model without layers (an empty ``keras.Sequential()``) gives an empty plot with its title.

    Args:
        model: A model accepted by :func:`layer_edges`.
        ax: A matplotlib Axes to draw on; a new figure is made when None.

    Returns:
        The matplotlib Axes.

    Raises:
        TypeError: As :func:`layer_edges`, or if ``ax`` is not a matplotlib Axes.

    Taught in chapter 1, "Models: a graph of layers".
    """
    import matplotlib.axes

    edges = layer_edges(model)
    if ax is not None:
        check_instance(ax, "ax", matplotlib.axes.Axes, "a matplotlib Axes or None")
    names = list(
        dict.fromkeys(
            [name for edge in edges for name in edge] + [layer.name for layer in model.layers]
        )
    )
    position, waypoints = _layered_layout(names, edges)
    ax = _axes_for(ax, position, waypoints)
    kinds = {layer.name: type(layer).__name__ for layer in model.layers}
    extent = _draw_boxes(ax, position, kinds)
    for source, target in edges:
        _draw_arrow(ax, extent, position, (source, target), waypoints[(source, target)])
    ax.set_axis_off()
    ax.set_title(f"{model.name}: {len(names)} layers, {len(edges)} connections")
    return ax


def _axes_for(ax: Any, position: dict, waypoints: dict) -> Any:
    """``ax`` (a new figure sized to the layout when None), its limits set around the layout."""
    import matplotlib.pyplot as plt

    n_columns = 1 + max((column for column, _ in position.values()), default=0)
    all_rows = [r for _, r in position.values()] + [
        r for points in waypoints.values() for _, r in points
    ] or [0.0]
    spread = max(all_rows) - min(all_rows)
    if ax is None:
        _, ax = plt.subplots(figsize=(2.3 * n_columns + 0.5, 1.1 * spread + 1.6))
    ax.set_xlim(-0.6, n_columns - 0.4)
    ax.set_ylim(min(all_rows) - 0.6, max(all_rows) + 0.6)
    return ax


def _draw_boxes(ax: Any, position: dict, kinds: dict[str, str]) -> dict:
    """A box per layer (its name and class: ``kinds``, ``Input`` if absent) at its position;
    returns each box's extent in data coordinates, ``((left, bottom), (right, top))``."""
    boxes = {
        name: ax.text(
            x,
            y,
            f"{name}\n({kinds.get(name, 'Input')})",
            ha="center",
            va="center",
            fontsize=9,
            zorder=3,
            bbox=dict(boxstyle="round", facecolor="#e8f0fe", edgecolor="#4a6fa5"),
        )
        for name, (x, y) in position.items()
    }
    ax.figure.canvas.draw()  # lays out the boxes, so that arrows can end at their edges
    to_data = ax.transData.inverted()
    return {
        name: to_data.transform(text.get_bbox_patch().get_window_extent())
        for name, text in boxes.items()
    }


def _draw_arrow(
    ax: Any, extent: dict, position: dict, edge: tuple[str, str], waypoints: list
) -> None:
    """The arrow of ``edge``: from the right side of the source's box through its
    ``waypoints`` to the left side of the target's box, where its head is."""
    source, target = edge
    (_, _), (source_right, _) = extent[source]
    (target_left, _), (_, _) = extent[target]
    points = [(source_right, position[source][1]), *waypoints]
    xs, ys = zip(*points)
    ax.plot(xs, ys, color="0.35", linewidth=1.2, zorder=1)
    ax.annotate(
        "",
        xy=(target_left, position[target][1]),
        xytext=points[-1],
        zorder=2,
        arrowprops=dict(
            arrowstyle="-|>",
            mutation_scale=14,
            color="0.35",
            linewidth=1.2,
            shrinkA=0,
            shrinkB=1,
        ),
    )
