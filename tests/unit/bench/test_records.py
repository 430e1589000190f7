"""``companion.bench._records``: rows and entries read as dicts, as a table and as ``make bench``
entries."""

import dataclasses
import json

import pytest

from companion.bench import (
    PER_EXAMPLE_METHODS,
    ROW_KEYS,
    Entry,
    Row,
    per_example_vs_batched,
    rows_table,
    rows_to_entries,
)


def test_rows_table_and_entries():
    rows = per_example_vs_batched(batch_sizes=[2], image_size=8, device="/CPU:0", repeats=1)
    lines = rows_table(rows).splitlines()
    assert lines[0].split() == ["method", "median", "ms", "spread", "ratio"]
    assert lines[2] == "standardize per image (batch 2, 8x8)"
    assert len(lines) == 2 + 1 + 3 and lines[-1].startswith("  batched op ")
    assert [line[2:16].strip() for line in lines[3:]] == list(PER_EXAMPLE_METHODS)
    assert lines[-1].endswith("1.00")  # the reference's ratio
    entries = rows_to_entries(rows)
    assert [entry["name"] for entry in entries] == [
        "Python loop / batched op: standardize per image (batch 2, 8x8)",
        "vectorized_map / batched op: standardize per image (batch 2, 8x8)",
    ]
    assert entries[0]["custom_median"] == pytest.approx(rows[0]["medians"]["Python loop"] * 1e3)
    assert entries[0]["unit"] == "ms" and entries[0]["device"] == "CPU"
    assert entries[0]["settings"] == {"batch_size": 2, "image_size": 8}


def test_rows_and_entries_are_records_that_read_as_dicts():
    row = per_example_vs_batched(batch_sizes=[2], image_size=8, device="/CPU:0", repeats=1)[0]
    assert isinstance(row, Row) and list(row) == [*ROW_KEYS, "round_ratios"] and len(row) == 8
    assert row["round_ratios"]["batched op"] == (1.0,)
    assert row["ratio"] is row.ratio and row == dict(row) and dict(row)["name"] == row.name
    with pytest.raises(KeyError):
        row["median"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.name = "other"
    entry = rows_to_entries([row])[0]
    assert isinstance(entry, Entry) and entry.ratio == entry["ratio"]
    assert json.loads(json.dumps(dict(entry))) == entry  # what make bench writes


def test_rows_table_and_entries_take_no_rows_and_refuse_what_are_not_rows():
    assert (
        rows_table([]).splitlines()[0].split()[:2] == ["method", "median"]
        and rows_to_entries([]) == []
    )
    for consume in (rows_table, rows_to_entries):
        with pytest.raises(
            TypeError,
            match=r"^rows: expected a list or tuple of experiment rows, got NoneType None$",
        ):
            consume(None)
        with pytest.raises(
            ValueError,
            match=r"^rows\[0\]: expected an experiment row \(a dict with "
            r".*got dict \{'name': 'x'\}$",
        ):
            consume([{"name": "x"}])
        with pytest.raises(
            TypeError,
            match=r"^rows\[0\]: expected an experiment row \(a dict with .*got str 'row'$",
        ):
            consume(["row"])
