"""The metrics of ``companion.training``: each one with the output it reads and its log name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import keras

from companion._checks import check_instance, check_sequence, describe


class MetricEntry(NamedTuple):
    """One metric and where it reads (unpacks as ``key, metric, name``)."""

    #: The output key it reads (``y[key]``, ``predictions[key]``), or None for the whole output.
    key: Any
    metric: keras.metrics.Metric
    #: Its name in the history: the metric's name, ``key_name`` for a key.
    name: str


def _check_metric(metric: Any, name: str) -> keras.metrics.Metric:
    return check_instance(metric, name, keras.metrics.Metric, "a keras.metrics.Metric")


def _keyed(key: Any, value: Any) -> list[keras.metrics.Metric]:
    """The metrics of one output key of a mapping: one metric, or a list or tuple of them."""
    name = f"metrics[{key!r}]"
    if isinstance(value, (list, tuple)):
        return check_sequence(value, name, "metrics", item=_check_metric, min_length=0)
    return [_check_metric(value, name)]


def metric_entries(metrics: Any) -> list[MetricEntry]:
    """Flatten ``metrics`` (a sequence, or a mapping from output key to metrics) into entries.

    Each entry's log name must be its own and not ``"loss"``: the history has one list per name.
    """
    what = "a list of keras.metrics.Metric or a mapping from output key to metrics"
    if isinstance(metrics, Mapping):
        pairs = [(key, m) for key, value in metrics.items() for m in _keyed(key, value)]
    else:
        pairs = [
            (None, m)
            for m in check_sequence(metrics, "metrics", what, item=_check_metric, min_length=0)
        ]
    entries = [
        MetricEntry(key, m, m.name if key is None else f"{key}_{m.name}") for key, m in pairs
    ]
    names = [entry.name for entry in entries]
    for name in names:
        if name == "loss" or names.count(name) > 1:
            raise ValueError(
                f"metrics: expected metrics with distinct names other than 'loss', got "
                f"{describe(metrics)}, whose names clash on {name!r}"
            )
    return entries


def check_metric_keys(entries: list[MetricEntry], structure: Any, what: str) -> None:
    """Each output key of ``entries`` must be a key of ``structure`` (outputs or targets)."""
    for entry in entries:
        key = entry.key
        if key is not None and not (isinstance(structure, Mapping) and key in structure):
            keys = sorted(structure) if isinstance(structure, Mapping) else "none: a single tensor"
            raise ValueError(f"metrics: expected keys of {what} ({keys}), got {key!r}")


def update_metrics(entries: list[MetricEntry], y: Any, predictions: Any) -> None:
    """Update each metric with the targets and outputs it reads (checked while tracing)."""
    check_metric_keys(entries, predictions, "the model's outputs")
    check_metric_keys(entries, y, "the targets")
    for entry in entries:
        key = entry.key
        entry.metric.update_state(
            y if key is None else y[key], predictions if key is None else predictions[key]
        )
