"""``count_traces`` and ``explain_retrace``: how often a ``tf.function`` traced, and why.

Backends: TensorFlow only (on JAX use ``jax_explain_cache_misses``; on PyTorch use
``TORCH_LOGS=recompiles``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np

from companion._backend import require_tensorflow
from companion._checks import (
    check_callable,
    check_instance,
    check_int,
    describe,
    shorten,
)

#: What JAX and PyTorch users read instead of ``tf.function``'s traces.
RETRACING_INSTEAD = {
    "jax": 'jax.config.update("jax_explain_cache_misses", True): jax.jit logs why it retraces',
    "torch": "TORCH_LOGS=recompiles: torch.compile logs the guard that failed at each recompile",
}


def _describe_value(value: Any) -> str:
    """``float32[None, 3]`` for a tensor or variable, the short repr for a Python value."""
    import tensorflow as tf

    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, np.ndarray):
        shape = ", ".join(
            "None" if d is None else str(d) for d in tf.TensorShape(value.shape).as_list() or []
        )
        return f"{tf.as_dtype(value.dtype).name}[{shape}]"
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype}{list(value.shape)}"
    return shorten(repr(value), 40)


class TraceCounter:
    """``tf.function(fn)`` that records every trace: how many, and with which arguments.

    A ``tf.function`` runs the Python body only while tracing. Each trace appends one line to
    ``signatures``: the arguments as the trace saw them, ``float32[None, 3]`` for a tensor
    (``None`` where the shape is left open) and the value for a Python argument, which is
    part of the trace's key (a new value, a new trace). Build one with ``count_traces``.

    Attributes:
        function: The underlying ``tf.function`` (``experimental_get_tracing_count()`` agrees
            with ``traces``).
        signatures: One line per trace, e.g. ``"x=float32[2, 3], scale=2.0"``.

    Taught in chapter 11, "Python side effects run only while tracing".
    """

    def __init__(self, fn: Callable[..., Any], **tf_function_kwargs: Any) -> None:
        require_tensorflow("companion.diagnostics.count_traces", RETRACING_INSTEAD)
        import tensorflow as tf

        check_callable(fn, "fn")
        self.signatures: list[str] = []
        self._arguments: list[dict[str, tuple]] = []  # per trace: {argument path: leaf key}
        try:
            self._parameters: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self._parameters = None

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.signatures.append(self._describe_call(args, kwargs))
            self._arguments.append(self._leaf_keys(args, kwargs))
            return fn(*args, **kwargs)

        self.function = tf.function(recorded, **tf_function_kwargs)
        functools.update_wrapper(self, fn)

    def _describe_call(self, args: tuple, kwargs: dict[str, Any]) -> str:
        describe_leaves = functools.partial(keras.tree.map_structure, _describe_value)
        try:
            bound = self._parameters.bind(*args, **kwargs).arguments if self._parameters else None
        except TypeError:
            bound = None
        if bound is None:
            items = [str(describe_leaves(a)) for a in args] + [
                f"{k}={describe_leaves(v)}" for k, v in kwargs.items()
            ]
        else:
            items = [
                f"{name}={describe_leaves(value)}".replace("'", "") for name, value in bound.items()
            ]
        return ", ".join(items)

    def _leaf_keys(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, tuple]:
        """``{"x": ("tensor", "float32", "[2, 3]"), "cfg['a']": ("value", "2.0")}``."""
        try:
            bound = self._parameters.bind(*args, **kwargs).arguments if self._parameters else None
        except TypeError:
            bound = None
        named = bound if bound is not None else {f"args[{i}]": a for i, a in enumerate(args)}
        return dict(_leaf_paths(dict(named) | ({} if bound is not None else kwargs)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    @property
    def traces(self) -> int:
        """How many times the function was traced.

        Taught in chapter 11, "Python side effects run only while tracing".
        """
        return len(self.signatures)

    def __repr__(self) -> str:
        return f"<TraceCounter {getattr(self, '__name__', 'fn')}: {self.traces} trace(s)>"


def count_traces(fn: Callable[..., Any] | None = None, /, **tf_function_kwargs: Any) -> Any:
    """Wrap ``fn`` in ``tf.function`` (with ``tf_function_kwargs``) and count its traces.

    Use it like ``tf.function``: ``count_traces(fn)``, ``@count_traces`` or
    ``@count_traces(reduce_retracing=True)``.

    Args:
        fn: The Python function; omitted when used as ``@count_traces(...)`` with arguments.
        **tf_function_kwargs: Passed to ``tf.function`` (``input_signature``,
            ``reduce_retracing``, ``jit_compile``, ...).

    Returns:
        A ``TraceCounter`` (or, without ``fn``, a decorator that makes one).

    Raises:
        TypeError: If ``fn`` is not callable.
        companion.backends.TensorFlowRequired: Under another backend (retracing is
            ``tf.function``'s).

    Example:
        >>> import tensorflow as tf
        >>> @count_traces
        ... def scale(x, factor):
        ...     return x * factor
        >>> for factor in (1.0, 2.0, 2.0):
        ...     _ = scale(tf.ones(3), factor)  # a Python float: a trace per new value
        >>> scale.traces, scale.signatures[-1]
        (2, 'x=float32[3], factor=2.0')

    Taught in chapter 11, "Python side effects run only while tracing".
    """
    require_tensorflow("companion.diagnostics.count_traces", RETRACING_INSTEAD)
    if fn is None:
        return lambda function: TraceCounter(function, **tf_function_kwargs)
    return TraceCounter(fn, **tf_function_kwargs)


def _leaf_paths(value: Any, path: str = "") -> Iterator[tuple[str, tuple]]:
    """(path, key) for each leaf of a call's arguments: ``("tensor", dtype, shape)`` for a
    tensor or variable, ``("value", repr)`` for a Python value (what a trace is keyed by)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, f"{path}[{key!r}]" if path else str(key))
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        for index, item in enumerate(value):
            yield from _leaf_paths(item, f"{path}[{index}]")
    else:
        described = _describe_value(value)
        if (
            hasattr(value, "dtype")
            and hasattr(value, "shape")
            and not isinstance(value, np.ndarray)
        ):
            dtype, shape = described.split("[", 1)  # "float32[None, 3]"
            yield path, ("tensor", dtype, "[" + shape)
        else:
            yield path, ("value", described)


def _leaf_text(key: tuple) -> str:
    return f"Python value {key[1]}" if key[0] == "value" else f"tensor {key[1]}{key[2]}"


def _leaf_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """One phrase per argument that differs between two traces' leaf keys."""
    changes = []
    for path in [*before, *(p for p in after if p not in before)]:
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None or new is None:
            changes.append(f"{path} {'is new' if old is None else 'is gone'}")
        elif old[0] == new[0] == "value":
            changes.append(f"{path}: Python value {old[1]} -> {new[1]}")
        elif old[0] == new[0] == "tensor":
            parts = [f"dtype {old[1]} -> {new[1]}"] if old[1] != new[1] else []
            parts += [f"shape {old[2]} -> {new[2]}"] if old[2] != new[2] else []
            changes.append(f"{path}: {', '.join(parts)}")
        else:
            changes.append(f"{path}: {_leaf_text(old)} -> {_leaf_text(new)}")
    return changes


def _distance(before: dict[str, tuple], after: dict[str, tuple]) -> int:
    """How many things differ: a dtype, a shape, a value count one each; a new kind two."""
    return sum(
        sum(a != b for a, b in zip(old, new)) if old and new and old[0] == new[0] else 2
        for path in {*before, *after}
        if (old := before.get(path)) != (new := after.get(path))
    )


def explain_retrace(counter: TraceCounter, trace: int = -1) -> str:
    """Say why ``counter`` traced again: which arguments differ from the closest earlier trace.

    A ``tf.function`` traces when a call matches none of its traces; the closest earlier trace
    (the fewest dtypes, shapes and values differing; the most recent among equals) shows what
    the call changed: a tensor's shape or dtype, or the value of a Python argument (every new
    value traces). Nested arguments are named by path (``batch['image']``, ``pair[1]``).

    Args:
        counter: A ``TraceCounter`` (from ``count_traces``) that has traced at least twice.
        trace: Which trace to explain, an index into ``counter.signatures`` other than the
            first (default: the last).

    Returns:
        ``"trace 2 of 2, against trace 1: factor: Python value 2.0 -> 3.0"``, changes
        separated by ``"; "``; ``counter.signatures`` holds each trace's arguments. If no
        argument differs, the sentence says so (the function retraced for another reason).

    Raises:
        TypeError: If ``counter`` is not a ``TraceCounter`` or ``trace`` not an int.
        ValueError: If ``trace`` is the first trace (there is nothing to compare it with) or
            out of range.

    Example:
        >>> import tensorflow as tf
        >>> @count_traces
        ... def scale(x, factor):
        ...     return x * factor
        >>> x = tf.ones(3)
        >>> _ = scale(x, 2.0), scale(x, 3.0), scale(tf.ones(4), 3.0)
        >>> print(explain_retrace(scale, 1))
        trace 2 of 3, against trace 1: factor: Python value 2.0 -> 3.0
        >>> print(explain_retrace(scale))  # trace 2 is closer than 1
        trace 3 of 3, against trace 2: x: shape [3] -> [4]

    Taught in chapter 11, "Retracing, measured".
    """
    check_instance(counter, "counter", TraceCounter, "a TraceCounter (from count_traces)")
    count = counter.traces
    trace = check_int(trace, "trace", minimum=-count, maximum=count - 1)
    index = trace % count
    if index == 0:
        raise ValueError(
            f"trace: expected the index of a retrace (not 0 or -{count}: the first of "
            f"{count} trace(s) has nothing to compare with), got {describe(trace)}"
        )
    after = counter._arguments[index]
    earlier = counter._arguments[:index]
    closest = min(range(index), key=lambda i: (_distance(earlier[i], after), -i))
    said = (
        "; ".join(_leaf_changes(earlier[closest], after))
        or "no argument differs (not retraced for an argument)"
    )
    return f"trace {index + 1} of {count}, against trace {closest + 1}: {said}"
