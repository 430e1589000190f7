"""``companion.notebook``'s text display: tables, wrapped text, JSON, errors shown short."""

import numpy as np
import pytest

from companion.notebook import (
    PAGE_WIDTH,
    describe_error,
    format_table,
    print_wrapped,
    show_error,
    show_json,
    show_table,
    strip_ansi,
)


def test_format_table_aligns_columns_and_rounds_floats():
    table = format_table([("a", 1.23456789), ("longer", 2)], ["name", "value"])
    assert table.splitlines() == ["name    value", "------  -----", "a       1.235", "longer  2"]


def test_format_table_rejects_ragged_rows():
    with pytest.raises(
        ValueError,
        match=r"^rows\[1\]: expected a list or tuple of 2 values \(one per header\), "
        r"got tuple \(3,\)$",
    ):
        format_table([(1, 2), (3,)], ["a", "b"])


def test_format_table_takes_no_rows_and_array_rows():
    assert format_table([], ["a", "b"]).splitlines() == ["a  b", "-  -"]
    assert format_table(np.array([[1, 2]]), ["a", "b"]).splitlines()[2] == "1  2"


@pytest.mark.parametrize(
    "rows, headers, error, match",
    [
        (None, ["a"], TypeError, r"^rows: expected a list or tuple of rows, got NoneType None$"),
        ({"x": 1}, ["a"], TypeError, r"^rows: expected a list or tuple of rows, got dict "),
        (
            (row for row in [("x",)]),
            ["a"],
            TypeError,
            r"^rows: expected a list or tuple of rows, got generator ",
        ),
        (
            [None],
            ["a"],
            TypeError,
            r"^rows\[0\]: expected a list or tuple of 1 values \(one per header\), got NoneType",
        ),
        (
            ["ab"],
            ["a", "b"],
            TypeError,
            r"^rows\[0\]: expected a list or tuple of 2 values .*got str 'ab'$",
        ),
        (
            [("x", 1)],
            None,
            TypeError,
            r"^headers: expected a non-empty list or tuple of str, got NoneType None$",
        ),
        (
            [("x", 1)],
            "ab",
            TypeError,
            r"^headers: expected a non-empty list or tuple of str, got str 'ab'$",
        ),
        (
            [],
            [],
            ValueError,
            r"^headers: expected a non-empty list or tuple of str, got list \[\]$",
        ),
        ([("x", 1)], ["a", 2], TypeError, r"^headers\[1\]: expected a str, got int 2$"),
    ],
)
def test_format_table_rejects_what_is_not_a_table(rows, headers, error, match):
    with pytest.raises(error, match=match):
        format_table(rows, headers)


def test_strip_ansi_and_describe_error_remove_keras_colour_codes():
    import keras

    layer = keras.layers.Dense(2, name="d")
    layer.build((None, 3))
    try:
        layer(np.ones((1, 4), "float32"))
    except ValueError as error:
        text = describe_error(error)
    assert text.startswith("ValueError: ") and "\x1b" not in text and "incompatible" in text
    assert strip_ansi("\x1b[1m\x1b[31mred bold\x1b[0m") == "red bold"
    assert describe_error(RuntimeError("a\n\n b\nc"), lines=2) == "RuntimeError: a\n    b"
    with pytest.raises(ValueError, match="^lines: expected an int >= 1"):
        describe_error(KeyError("x"), lines=0)


def test_describe_error_with_a_width_wraps_the_message_under_the_type():
    error = RuntimeError("\x1b[1mfirst\x1b[0m " + "word " * 30 + "\n\nsecond line")
    text = describe_error(error, lines=2, width=40)
    lines = text.splitlines()
    assert lines[0] == "RuntimeError:" and lines[1] == "    first word word word word word word"
    assert all(len(line) <= 40 and line.startswith("    ") for line in lines[1:])
    assert lines[-1] == "    second line" and "\x1b" not in text
    assert " ".join(line.strip() for line in lines[1:-1]) == "first " + " ".join(["word"] * 30)
    with pytest.raises(ValueError, match="^width: expected an int >= 20"):
        describe_error(error, width=19)


def test_strip_ansi_and_describe_error_reject_what_is_not_text_or_an_error():
    assert strip_ansi("") == ""
    with pytest.raises(TypeError, match=r"^text: expected a str, got NoneType None$"):
        strip_ansi(None)
    with pytest.raises(TypeError, match=r"^text: expected a str, got bytes b'\\x1b\[1m'$"):
        strip_ansi(b"\x1b[1m")
    with pytest.raises(TypeError, match=r"^error: expected an exception, got str 'boom'$"):
        describe_error("boom")


def test_show_error_prints_the_type_and_first_line_and_keeps_the_error(capsys):
    with show_error(ValueError) as caught:
        raise ValueError("\x1b[1mbad\x1b[0m units\n\nmore detail")
    assert capsys.readouterr().out == "ValueError: bad units\n"
    assert isinstance(caught.error, ValueError) and caught.shown == "ValueError: bad units"


def test_show_error_shows_what_match_finds_wrapped_to_the_page(capsys):
    message = "Exception encountered: expected axis -1 of input shape " + "to have 3 " * 20
    with show_error(ValueError, TypeError, match=r"expected axis -1.*"):
        raise TypeError(message)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TypeError: expected axis -1 of input shape")
    assert len(lines) > 1 and all(len(line) <= PAGE_WIDTH for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])


def test_show_error_fails_when_nothing_is_raised_or_match_is_missing():
    with pytest.raises(AssertionError, match="expected ValueError, but the block raised nothing"):
        with show_error(ValueError):
            pass
    with pytest.raises(AssertionError, match="'axis' is not in the ValueError's message"):
        with show_error(ValueError, match="axis"):
            raise ValueError("another message")


def test_show_error_lets_other_errors_through():
    with pytest.raises(KeyError):
        with show_error(ValueError):
            raise KeyError("units")


def test_show_error_checks_its_arguments_before_the_block_runs():
    with pytest.raises(TypeError, match=r"^expected: expected exception types, got str 'x'"):
        show_error("x")
    with pytest.raises(ValueError, match="^width: "):
        show_error(ValueError, width=5)


def test_show_table_prints_format_table(capsys):
    show_table([("kernel", (3, 2))], ["name", "shape"])
    assert capsys.readouterr().out == format_table([("kernel", (3, 2))], ["name", "shape"]) + "\n"


def test_print_wrapped_keeps_every_line_in_the_column_and_blank_lines(capsys):
    print_wrapped("word " * 40 + "\n\n\x1b[1mlast\x1b[0m", width=30, indent=2)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 30 for line in lines) and "" in lines and lines[-1] == "  last"
    assert lines[0].startswith("  word") and lines[1].startswith("      word")


def test_show_json_prints_the_chosen_keys_in_order_and_refuses_missing_ones(capsys):
    show_json({"units": 4, "name": "dense", "activation": "relu"}, keys=["name", "units"])
    assert capsys.readouterr().out == '{\n  "name": "dense",\n  "units": 4\n}\n'
    with pytest.raises(ValueError, match=r"^keys: expected keys of data, got \['scale'\]"):
        show_json({"units": 4}, keys=["scale"])
    with pytest.raises(TypeError, match="not JSON serializable"):
        show_json({"activation": object()})
