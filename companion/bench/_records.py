"""The records of ``companion.bench`` and the two ways to read them.

``Row`` is one experiment at one size (chapter 12's experiments return lists of them), ``Entry``
one measure of ``make bench``; both read as mappings of their fields. ``rows_table`` prints rows
as a text table, ``rows_to_entries`` turns them into ``make bench`` entries.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from companion._checks import check_instance, check_sequence, describe
from companion.notebook import format_table
from companion.timing import Timing, default_device


class _Record(Mapping[str, Any]):
    """A dataclass that also reads as a mapping of its fields: ``row["ratio"]``, ``dict(row)``."""

    def __getitem__(self, key: str) -> Any:
        if key not in _field_names(type(self)):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_field_names(type(self)))

    def __len__(self) -> int:
        return len(_field_names(type(self)))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(cls))


@dataclasses.dataclass(frozen=True, eq=False)
class Row(_Record):
    """One experiment at one size, as the experiments of chapter 12 return it.

    It reads as a mapping too (``row["ratio"]["py_function"]``, ``dict(row)``) and equals a
    dict with the same items.

    Attributes:
        name: The experiment, e.g. ``"blur op"``.
        device: The device string it ran on.
        sizes: Its sizes, e.g. ``{"batch_size": 16, "image_size": 64}``.
        medians: Seconds per call of each method (the figures compared).
        spreads: Each method's interquartile range over its median (0.1 = 10 %).
        reference: The method every ratio divides by.
        ratio: Each method's median divided by the reference's (the reference's is 1.0).
        round_ratios: Each method's ratio in every round: its seconds per call in that round
            divided by the reference's in the same round (the rounds ran side by side, so
            their range is the noise of ``ratio``).

    Taught in chapter 12, "The blur as an op".
    """

    name: str
    device: str
    sizes: dict[str, Any]
    medians: dict[str, float]
    spreads: dict[str, float]
    reference: str
    ratio: dict[str, float]
    round_ratios: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    @classmethod
    def measured(
        cls,
        name: str,
        device: str,
        sizes: Mapping[str, Any],
        timings: Mapping[str, Timing],
        reference: str,
    ) -> Row:
        """The row of ``timings`` (method -> ``Timing``) against the method ``reference``.

        Taught in chapter 12, "The blur as an op".
        """
        medians = {method: timing.median for method, timing in timings.items()}
        return cls(
            name=name,
            device=device,
            sizes=dict(sizes),
            medians=medians,
            spreads={method: timing.spread for method, timing in timings.items()},
            reference=reference,
            ratio={method: median / medians[reference] for method, median in medians.items()},
            round_ratios={
                method: tuple(
                    t / r for t, r in zip(timing.times, timings[reference].times, strict=True)
                )
                for method, timing in timings.items()
            },
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Entry(_Record):
    """One measure as ``make bench`` prints it and writes it to its JSON file (``dict(entry)``).

    Like ``Row``, it reads as a mapping too (``entry["ratio"]``).

    Attributes:
        name: What was measured, e.g. ``"py_function / native: blur op (batch 16, 64x64)"``.
        ratio: ``custom_median / reference_median``.
        custom_median: The median of the measured side, in ``unit``.
        reference_median: The median of the side it is divided by, in ``unit``.
        unit: The medians' unit, e.g. ``"ms"`` or ``"examples/s"``.
        device: The device type it ran on, ``"CPU"`` or ``"GPU"``.
        versions: The versions of TensorFlow, Keras and Python.
        settings: The sizes and counts it ran with.

    Taught in chapter 12, "make bench: the headline numbers in one command".
    """

    name: str
    ratio: float
    custom_median: float
    reference_median: float
    unit: str
    device: str
    versions: dict[str, str]
    settings: dict[str, Any]

    @classmethod
    def measured(
        cls,
        name: str,
        custom: float,
        reference: float,
        unit: str,
        settings: Mapping[str, Any],
        device: str | None = None,
    ) -> Entry:
        """The entry of two medians; ``device``: the device string they ran on (``None``:
        TensorFlow's default device).

        Taught in chapter 12, "make bench: the headline numbers in one command".
        """
        import keras
        import tensorflow as tf

        kind = tf.DeviceSpec.from_string(device or default_device()).device_type or "CPU"
        return cls(
            name=name,
            ratio=custom / reference,
            custom_median=custom,
            reference_median=reference,
            unit=unit,
            device=kind.upper(),
            versions={
                "tensorflow": tf.__version__,
                "keras": keras.__version__,
                "python": sys.version.split()[0],
            },
            settings=dict(settings),
        )


#: What every experiment row holds (``rows_table`` and ``rows_to_entries`` read them all;
#: ``round_ratios``, which they do not read, may be missing from a row made by hand).
ROW_KEYS = _field_names(Row)[:-1]


def describe_sizes(sizes: Mapping[str, Any]) -> str:
    """``{"batch_size": 16, "image_size": 64}`` -> ``"batch 16, 64x64"``."""
    words = {"batch_size": "batch {}", "image_size": "{0}x{0}", "examples": "{} examples"}
    return ", ".join(words.get(key, key + " {}").format(value) for key, value in sizes.items())


def _check_rows(rows: Any) -> tuple[Mapping[str, Any], ...]:
    return check_sequence(
        rows, "rows", "a list or tuple of experiment rows", min_length=0, item=_check_row
    )


def _check_row(row: Any, name: str) -> Mapping[str, Any]:
    what = f"an experiment row (a dict with {', '.join(ROW_KEYS)})"
    check_instance(row, name, Mapping, what)
    if not set(ROW_KEYS) <= set(row) or not all(
        isinstance(row[key], Mapping) for key in ("sizes", "medians", "spreads", "ratio")
    ):
        raise ValueError(f"{name}: expected {what}, got {describe(row)}")
    return row


def rows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Experiment rows as a text table: each row's name and sizes on a line of their own, then
    one line per method: median in ms, spread, ratio.

    Raises:
        TypeError, ValueError: If ``rows`` is not a list or tuple of experiment rows (none is fine).

    Taught in chapter 12, "The blur as an op".
    """
    rows = _check_rows(rows)
    table = format_table(
        [
            (
                method,
                f"{median * 1e3:.3g}",
                f"{row['spreads'][method]:.0%}",
                f"{row['ratio'][method]:.2f}",
            )
            for row in rows
            for method, median in row["medians"].items()
        ],
        ["method", "median ms", "spread", "ratio"],
    ).splitlines()
    lines = ["  " + line for line in table[:2]]
    methods = iter(table[2:])
    for row in rows:
        lines.append(f"{row['name']} ({describe_sizes(row['sizes'])})")
        lines += ["  " + next(methods) for _ in row["medians"]]
    return "\n".join(lines)


def rows_to_entries(rows: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """``make bench`` entries from experiment rows: one per method other than the row's reference.

    Raises:
        TypeError, ValueError: If ``rows`` is not a list or tuple of experiment rows (none is fine).

    Taught in chapter 12, "make bench: the headline numbers in one command".
    """
    return [
        Entry.measured(
            f"{method} / {row['reference']}: {row['name']} ({describe_sizes(row['sizes'])})",
            median * 1e3,
            row["medians"][row["reference"]] * 1e3,
            "ms",
            row["sizes"],
            device=row["device"],
        )
        for row in _check_rows(rows)
        for method, median in row["medians"].items()
        if method != row["reference"]
    ]
