import numpy as np
import pytest

from companion.notebook import (
    PAGE_WIDTH,
    format_table,
    gpu_available,
    in_colab,
    print_wrapped,
    setup,
    show_error,
    show_json,
    show_table,
)


def tiny_fit_weights(seed):
    import keras

    setup(seed, verbose=False)
    x = np.random.normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    return model.get_weights()


def test_setup_makes_two_tiny_fits_identical():
    first, second = tiny_fit_weights(7), tiny_fit_weights(7)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_different_seeds_give_different_fits():
    first, second = tiny_fit_weights(1), tiny_fit_weights(2)
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


def test_setup_reports_runtime(capsys):
    info = setup(3)
    printed = capsys.readouterr().out
    assert info["tensorflow"] in printed and info["keras"] in printed
    assert info["device"] == ("GPU" if gpu_available() else "CPU")
    assert info["colab"] is in_colab() is False
    assert info["seed"] == 3


@pytest.mark.parametrize(
    "seed, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)]
)
def test_setup_rejects_bad_seed(seed, error):
    with pytest.raises(error, match="seed"):
        setup(seed)


def test_setup_refuses_a_seed_above_32_bits_with_its_own_message():
    assert setup(2**32 - 1, verbose=False)["seed"] == 2**32 - 1
    with pytest.raises(
        ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295, got int 1000000000000$"
    ):
        setup(10**12)


@pytest.mark.parametrize("verbose", ["no", 0, None])
def test_setup_verbose_is_a_bool(verbose, capsys):
    with pytest.raises(
        TypeError, match=rf"^verbose: expected a bool, got {type(verbose).__name__} "
    ):
        setup(0, verbose=verbose)
    assert capsys.readouterr().out == ""  # refused before anything was printed


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


# --- GPU runtime: memory growth, checked without a GPU -----------------------------------------


class _FakeGPU:
    def __init__(self, name):
        self.name, self.device_type = name, "GPU"


def test_setup_turns_on_memory_growth_for_every_gpu(monkeypatch):
    import tensorflow as tf

    gpus = [_FakeGPU("/physical_device:GPU:0"), _FakeGPU("/physical_device:GPU:1")]
    calls = []
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: gpus if kind == "GPU" else real_list(kind),
    )
    monkeypatch.setattr(
        tf.config.experimental,
        "set_memory_growth",
        lambda device, enable: calls.append((device.name, enable)),
    )
    info = setup(0, verbose=False)
    assert calls == [(g.name, True) for g in gpus]
    assert info["gpu_memory_growth"] == [g.name for g in gpus] and info["device"] == "GPU"


def test_memory_growth_skips_a_gpu_that_is_already_initialised(monkeypatch):
    import tensorflow as tf

    from companion.notebook import enable_gpu_memory_growth

    def refuse(device, enable):
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: [_FakeGPU("/physical_device:GPU:0")]
    )
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", refuse)
    assert enable_gpu_memory_growth() == []


# --- messages and fresh processes ---------------------------------------------------------------


def test_strip_ansi_and_describe_error_remove_keras_colour_codes():
    import keras

    from companion.notebook import describe_error, strip_ansi

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
    from companion.notebook import describe_error

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
    from companion.notebook import describe_error, strip_ansi

    assert strip_ansi("") == ""
    with pytest.raises(TypeError, match=r"^text: expected a str, got NoneType None$"):
        strip_ansi(None)
    with pytest.raises(TypeError, match=r"^text: expected a str, got bytes b'\\x1b\[1m'$"):
        strip_ansi(b"\x1b[1m")
    with pytest.raises(TypeError, match=r"^error: expected an exception, got str 'boom'$"):
        describe_error("boom")


def test_run_python_uses_a_fresh_interpreter_without_this_process_state(tmp_path):
    from companion.notebook import run_python

    sys_modules_marker = "companion.notebook" in __import__("sys").modules
    result = run_python("import sys; print('companion.notebook' in sys.modules, sys.executable)")
    assert sys_modules_marker and result.returncode == 0
    printed, executable = result.stdout.split()
    assert printed == "False" and executable == __import__("sys").executable
    failing = run_python("raise SystemExit('boom')")
    assert failing.returncode == 1 and "boom" in failing.stderr
    assert (
        run_python("import os; print(os.environ['EXTRA'])", env={"EXTRA": "yes"}).stdout == "yes\n"
    )
    with pytest.raises(
        TypeError, match=r"^code: expected Python source as a str, got list \['print\(1\)'\]$"
    ):
        run_python(["print(1)"])


def test_run_python_returns_tracebacks_without_colour_codes_from_a_kernel():
    """An IPython kernel sets FORCE_COLOR=1; on Python 3.13 a child's traceback was coloured."""
    from companion.notebook import run_python

    failing = run_python(
        "raise ValueError('plain')", env={"FORCE_COLOR": "1", "TERM": "xterm-color"}
    )
    assert failing.returncode == 1
    assert failing.stderr.rstrip().endswith("ValueError: plain")
    assert "\x1b" not in failing.stderr


def test_child_environment_adds_the_defaults_and_lets_env_win():
    import os

    from companion.notebook import CHILD_DEFAULTS, child_environment

    before = dict(os.environ)
    child = child_environment({"PYTHON_COLORS": "1", "EXTRA": "yes"})
    assert os.environ == before
    assert child["EXTRA"] == "yes" and child["PYTHON_COLORS"] == "1"
    assert child_environment()["TF_CPP_MIN_LOG_LEVEL"] == CHILD_DEFAULTS["TF_CPP_MIN_LOG_LEVEL"]
    with pytest.raises(TypeError, match=r"^env\['A'\]: expected a str value, got int 1$"):
        child_environment({"A": 1})


@pytest.mark.parametrize(
    "timeout, error",
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (0, ValueError),
        (-1, ValueError),
        (10**12, ValueError),
        (None, TypeError),
        ("10", TypeError),
    ],
)
def test_run_python_timeout_is_a_positive_finite_number_of_seconds(timeout, error):
    from companion.notebook import run_python

    with pytest.raises(error, match=r"^timeout: expected a finite number > 0 and <= 604800, got "):
        run_python("print(1)", timeout=timeout)


@pytest.mark.parametrize(
    "env, error, match",
    [
        ("A=1", TypeError, r"^env: expected a mapping of str to str or None, got str 'A=1'$"),
        ([("A", "1")], TypeError, r"^env: expected a mapping of str to str or None, got list "),
        ({"A": 1}, TypeError, r"^env\['A'\]: expected a str value, got int 1$"),
        ({"A": None}, TypeError, r"^env\['A'\]: expected a str value, got NoneType None$"),
        ({1: "x"}, TypeError, r"^env\[1\]: expected a str name, got int 1$"),
    ],
)
def test_run_python_env_is_a_mapping_of_str_to_str(env, error, match):
    from companion.notebook import run_python

    with pytest.raises(error, match=match):
        run_python("print(1)", env=env)


def test_split_cpu_gives_mirrored_strategy_two_replicas_in_a_fresh_process():
    from companion.notebook import run_python

    result = run_python(
        "import tensorflow as tf\n"
        "from companion.notebook import split_cpu\n"
        "names = split_cpu(2)\n"
        "assert split_cpu(2) == names  # a second call with the same number is harmless\n"
        "strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])\n"
        "print(len(names), strategy.num_replicas_in_sync)\n"
        "try:\n"
        "    split_cpu(3)\n"
        "except RuntimeError as error:\n"
        "    print(str(error).split(';')[0])\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    first, second = result.stdout.splitlines()[-2:]
    assert first == "2 2"
    assert second == "devices: TensorFlow already runs with 2 CPU device(s) and cannot switch to 3"


def test_split_cpu_rejects_bad_counts():
    from companion.notebook import split_cpu

    with pytest.raises(ValueError, match="^devices: expected an int >= 1"):
        split_cpu(0)
    with pytest.raises(TypeError, match="^devices: expected an int >= 1"):
        split_cpu(2.0)


def test_split_cpu_refuses_a_huge_count_before_asking_tensorflow():
    from companion.notebook import split_cpu

    with pytest.raises(
        ValueError, match=r"^devices: expected an int >= 1 and <= 256, got int 1000000000000$"
    ):
        split_cpu(10**12)


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
