import dataclasses
import inspect
import json
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from companion.bench import (
    PER_EXAMPLE_METHODS,
    ROW_KEYS,
    SIZES,
    STEP_MODES,
    Entry,
    Row,
    blur_in_model,
    blur_op,
    blur_pipeline,
    compiled_blur_vs_opencv,
    default_sizes,
    per_example_vs_batched,
    rows_table,
    rows_to_entries,
    training_step_modes,
)
from companion.notebook import run_python
from companion.pyfunc import native_blur, py_function_blur


def test_the_harness_is_importable_from_bench_as_the_chapters_import_it():
    import companion.bench
    import companion.timing

    for name in ("Timing", "time_call", "compare", "fetch", "default_device"):
        assert getattr(companion.bench, name) is getattr(companion.timing, name), name


@pytest.mark.parametrize(
    "experiment",
    [
        blur_op,
        blur_in_model,
        blur_pipeline,
        training_step_modes,
        per_example_vs_batched,
        compiled_blur_vs_opencv,
    ],
)
def test_every_experiment_documents_each_of_its_arguments_once(experiment):
    args = experiment.__doc__.split("Args:")[1].split("Returns:")[0]
    documented = re.findall(r"^ {8}(\w+): ", args, re.M)
    assert sorted(documented) == sorted(inspect.signature(experiment).parameters)
    assert "{{" not in experiment.__doc__


@pytest.mark.slow  # runs every benchmark at its quick sizes (about 30 s)
def test_main_prints_progress_a_table_and_writes_one_entry_per_measure(tmp_path, capsys):
    from companion.bench import default_blur_methods, main
    from companion.pyfunc import numpy_function_blur

    output = tmp_path / "bench.json"
    # one line adds a method
    methods = {
        **default_blur_methods(),
        "numpy_function": numpy_function_blur,
    }
    entries = main(
        [
            "--output",
            str(output),
            "--repeats",
            "1",
            "--examples",
            "128",
            "--epochs",
            "2",
            "--quick",
            "--device",
            "/CPU:0",
        ],
        blur_methods=methods,
    )
    printed = capsys.readouterr().out
    assert (
        "device: /CPU:0" in printed
        and "[1/8] blur as an op" in printed
        and "[8/8] companion AdamW" in printed
    )
    assert "blur op, batch 2, 32x32: py_function" in printed  # progress, row by row
    assert (
        "repeat 1/1, custom loop (chapter 7):" in printed
        and "repeat 1/1, model.fit (mlp):" in printed
    )
    assert "custom training loop / model.fit" in printed and f"written to {output}" in printed
    written = json.loads(output.read_text())
    assert written == entries and len(written) == (1 + 1 + 2) * 2 + 4 + 2 + 2 + 2
    for entry in written:
        assert {
            "name",
            "ratio",
            "custom_median",
            "reference_median",
            "unit",
            "device",
            "versions",
            "settings",
        } <= set(entry)
        assert (
            entry["custom_median"] > 0
            and entry["reference_median"] > 0
            and entry["device"] == "CPU"
        )
        assert entry["ratio"] == pytest.approx(entry["custom_median"] / entry["reference_median"])
        assert entry["versions"]["tensorflow"] == tf.__version__
        assert entry["name"] in printed  # the table
    names = [entry["name"] for entry in written]
    assert names[:2] == [
        "py_function / native: blur op (batch 2, 32x32)",
        "numpy_function / native: blur op (batch 2, 32x32)",
    ]
    assert "XLA / tf.function: cnn training step (batch 2, 16x16)" in names
    assert "vectorized_map / batched op: standardize per image (batch 4, 8x8)" in names
    assert "C++ op / OpenCV: compiled blur (batch 2, 32x32)" in names
    *loops, adamw = written[-3:]
    assert [loop["settings"]["model"] for loop in loops] == ["chapter 7", "mlp"]
    assert all(
        loop["unit"] == "examples/s" and loop["settings"]["jit_compile"] is False for loop in loops
    )
    assert adamw["unit"] == "ms/step"
    assert (
        "repeat 1/1, companion AdamW:" in printed
        and "companion AdamW / keras AdamW step time" in printed
    )


def test_training_loop_vs_fit_rejects_bad_settings():
    from companion.bench import training_loop_vs_fit

    with pytest.raises(ValueError, match="^epochs: expected an int >= 1"):
        training_loop_vs_fit(epochs=0)
    with pytest.raises(ValueError, match="^examples: expected an int >= 64"):
        training_loop_vs_fit(examples=10)
    with pytest.raises(ValueError, match="^examples: expected an int >= 128"):
        training_loop_vs_fit(model="mlp", examples=64)
    with pytest.raises(
        ValueError, match=r"^model: expected one of 'chapter 7', 'mlp', got str 'resnet'$"
    ):
        training_loop_vs_fit(model="resnet")


def test_training_loop_vs_fit_compiles_both_sides_alike_and_records_it(capsys):
    from companion.bench import training_loop_vs_fit

    entry = training_loop_vs_fit(model="mlp", examples=256, epochs=1, repeats=1)
    assert (
        entry["name"] == "custom training loop / model.fit (mlp model)"
        and entry["unit"] == "examples/s"
    )
    assert entry["settings"] == {
        "model": "mlp",
        "examples": 256,
        "batch_size": 128,
        "epochs": 1,
        "repeats": 1,
        "jit_compile": False,
    }
    assert entry["ratio"] == pytest.approx(entry["custom_median"] / entry["reference_median"])
    assert "repeat 1/1, custom loop (mlp):" in capsys.readouterr().out


def test_adamw_step_time_rejects_bad_settings():
    from companion.bench import adamw_step_time

    with pytest.raises(ValueError, match="^steps: expected an int >= 1"):
        adamw_step_time(steps=0)
    with pytest.raises(TypeError, match="^batch_size: expected an int >= 1"):
        adamw_step_time(batch_size=2.0)


def test_default_sizes_scale_with_the_device():
    assert default_sizes("/CPU:0") == SIZES["CPU"] and default_sizes("/CPU:0") is not SIZES["CPU"]
    assert max(SIZES["GPU"]["image_sizes"]) > max(SIZES["CPU"]["image_sizes"])
    assert SIZES["GPU"]["batch_size"] > SIZES["CPU"]["batch_size"]
    with pytest.raises(ValueError, match="^device: expected a device string such as"):
        default_sizes("no such device")
    with pytest.raises(TypeError, match="^device: expected a device string"):
        default_sizes(0)
    if not tf.config.list_physical_devices("GPU"):
        with pytest.raises(
            ValueError,
            match=r"^device: expected one of the devices TensorFlow has, .*got str '/GPU:0'$",
        ):
            blur_op(device="/GPU:0", image_sizes=[8], batch_size=1, repeats=1)


def check_rows(rows, name, reference, methods, sizes):
    assert [row["name"] for row in rows] == [name] * len(sizes)
    for row, size in zip(rows, sizes):
        keys = "name device sizes medians spreads reference ratio round_ratios"
        assert set(row) == set(keys.split())
        assert list(row["round_ratios"]) == list(methods)
        rounds = row["round_ratios"][reference]
        assert rounds and all(ratio == 1.0 for ratio in rounds)
        assert all(len(r) == len(rounds) and min(r) > 0 for r in row["round_ratios"].values())
        assert row["device"] == "/CPU:0" and row["reference"] == reference and row["sizes"] == size
        assert list(row["medians"]) == list(methods) == list(row["ratio"]) == list(row["spreads"])
        assert all(median > 0 for median in row["medians"].values())
        assert row["ratio"][reference] == 1.0
        for method, median in row["medians"].items():
            assert row["ratio"][method] == pytest.approx(median / row["medians"][reference])


def test_blur_op_rows_per_image_size_with_any_methods():
    rows = blur_op(image_sizes=[8, 12], batch_size=2, device="/CPU:0", repeats=2)
    check_rows(
        rows,
        "blur op",
        "native",
        ["py_function", "native"],
        [{"batch_size": 2, "image_size": 8}, {"batch_size": 2, "image_size": 12}],
    )
    calls = []
    methods = {"native": native_blur, "identity": lambda x: calls.append(x.shape) or tf.identity(x)}
    rows = blur_op(
        methods, image_sizes=[8], batch_size=3, device="/CPU:0", repeats=1, reference="identity"
    )
    check_rows(rows, "blur op", "identity", methods, [{"batch_size": 3, "image_size": 8}])
    assert calls == [(3, 8, 8, 3)]  # traced once as a tf.function, then run as a graph


def test_blur_in_model_rows():
    rows = blur_in_model(image_sizes=[8], batch_size=2, device="/CPU:0", repeats=1)
    check_rows(
        rows,
        "blur in model",
        "native",
        ["py_function", "native"],
        [{"batch_size": 2, "image_size": 8}],
    )


def test_blur_pipeline_rows():
    rows = blur_pipeline(
        image_size=8,
        examples=6,
        batch_size=3,
        device="/CPU:0",
        repeats=1,
        methods={"py_function": py_function_blur, "native": native_blur, "none": tf.identity},
    )
    settings = {"batch_size": 3, "image_size": 8, "examples": 6}
    check_rows(
        rows[:1], "tf.data pipeline", "native", ["py_function", "native", "none"], [settings]
    )
    check_rows(
        rows[1:],
        "pipeline + training step",
        "native",
        ["py_function", "native", "none"],
        [settings],
    )


def test_training_step_modes_rows():
    rows = training_step_modes(
        models=["mlp", "cnn"], image_size=8, batch_size=2, device="/CPU:0", repeats=1
    )
    assert [row["name"] for row in rows] == ["mlp training step", "cnn training step"]
    for row in rows:
        check_rows(
            [row], row["name"], "tf.function", STEP_MODES, [{"batch_size": 2, "image_size": 8}]
        )


def test_per_example_vs_batched_rows_and_the_three_methods_agree():
    rows = per_example_vs_batched(batch_sizes=[2, 4], image_size=8, device="/CPU:0", repeats=1)
    check_rows(
        rows,
        "standardize per image",
        "batched op",
        PER_EXAMPLE_METHODS,
        [{"batch_size": 2, "image_size": 8}, {"batch_size": 4, "image_size": 8}],
    )
    images = np.random.default_rng(1).random((5, 8, 8, 3), dtype=np.float32)
    expected = np.stack([(x - x.mean()) / (x.std() + 1e-6) for x in images.astype(np.float64)])
    for method in PER_EXAMPLE_METHODS.values():
        np.testing.assert_allclose(
            tf.function(method)(tf.constant(images)).numpy(), expected, atol=1e-5
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


@pytest.mark.parametrize(
    "run, error, match",
    [
        (
            lambda: blur_op(image_sizes=[4], device="/CPU:0"),
            ValueError,
            r"^image_sizes\[0\]: expected an int >= 8 and <= 4096, got int 4$",
        ),
        (
            lambda: blur_op(image_sizes=64, device="/CPU:0"),
            TypeError,
            "^image_sizes: expected a non-empty list",
        ),
        (
            lambda: blur_op(batch_size=0, device="/CPU:0"),
            ValueError,
            "^batch_size: expected an int >= 1",
        ),
        (
            lambda: blur_op(reference="opencv", device="/CPU:0"),
            ValueError,
            r"^reference: expected one of 'py_function', 'native', got str 'opencv'$",
        ),
        (
            lambda: blur_in_model({"x": "not callable"}, device="/CPU:0"),
            TypeError,
            r"^methods\['x'\]: expected a callable, got str 'not callable'$",
        ),
        (
            lambda: blur_pipeline(examples=2, batch_size=4, device="/CPU:0"),
            ValueError,
            "^examples: expected an int >= 4",
        ),
        (
            lambda: training_step_modes(models=["rnn"], device="/CPU:0"),
            ValueError,
            r"^models\[0\]: expected one of 'mlp', 'cnn', got str 'rnn'$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes="8", device="/CPU:0"),
            TypeError,
            "^batch_sizes: expected a non-empty list",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[8], image_size=2.0, device="/CPU:0"),
            TypeError,
            "^image_size: expected an int >= 8",
        ),
    ],
)
def test_experiments_reject_bad_input(run, error, match):
    with pytest.raises(error, match=match):
        run()


def test_compiled_blur_vs_opencv_rows_divide_by_opencv():
    rows = compiled_blur_vs_opencv(image_sizes=[16, 24], batch_size=2, repeats=1)
    assert [row["sizes"] for row in rows] == [
        {"batch_size": 2, "image_size": 16},
        {"batch_size": 2, "image_size": 24},
    ]
    for row in rows:
        assert (
            row["name"] == "compiled blur"
            and row["reference"] == "OpenCV"
            and row["device"] == "/CPU:0"
        )
        assert list(row["medians"]) == ["C++ op", "OpenCV"] and all(
            m > 0 for m in row["medians"].values()
        )
        assert row["ratio"]["OpenCV"] == 1.0
        assert row["ratio"]["C++ op"] == pytest.approx(
            row["medians"]["C++ op"] / row["medians"]["OpenCV"]
        )
    with pytest.raises(
        ValueError, match=r"^image_sizes\[0\]: expected an int >= 8 and <= 4096, got int 4$"
    ):
        compiled_blur_vs_opencv(image_sizes=[4])


# --- issue 16: every argument checked, with the shared checks, before any timing work ----------


def recording_blur(calls):
    """A blur for ``methods`` that records each call (a benchmark that ran would call it)."""
    return lambda images: calls.append(images.shape) or tf.identity(images)


@pytest.mark.parametrize(
    "run",
    [
        lambda m: blur_op(m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=2**32),
        lambda m: blur_in_model(
            m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=10**12
        ),
        lambda m: blur_pipeline(
            m, image_size=8, examples=2, batch_size=1, device="/CPU:0", repeats=1, seed=-1
        ),
        lambda m: blur_op(m, image_sizes=[8], batch_size=1, device="/CPU:0", repeats=1, seed=1.0),
    ],
)
def test_seeds_have_a_maximum_and_are_checked_before_the_benchmark_runs(run):
    calls = []
    with pytest.raises(
        (TypeError, ValueError), match=r"^seed: expected an int >= 0 and <= 4294967295, got "
    ):
        run({"native": recording_blur(calls)})
    assert calls == []


def test_training_benchmarks_check_their_seed_with_a_maximum():
    from companion.bench import adamw_step_time, training_loop_vs_fit

    for run in (training_loop_vs_fit, adamw_step_time):
        with pytest.raises(
            ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295, got int 4294967296$"
        ):
            run(seed=2**32)


@pytest.mark.parametrize(
    "argument, value",
    [
        ("repeats", 0),
        ("repeats", 10**12),
        ("progress", "yes"),
        ("progress", 1),
        ("batch_size", 0),
        ("image_sizes", [8, 5]),
    ],
)
def test_blur_experiments_check_every_argument_before_any_work(argument, value):
    calls = []
    settings = {
        "image_sizes": [8],
        "batch_size": 1,
        "device": "/CPU:0",
        "repeats": 1,
        argument: value,
    }
    for experiment in (blur_op, blur_in_model):
        with pytest.raises((TypeError, ValueError), match=rf"^{argument}(\[1\])?: expected "):
            experiment({"native": recording_blur(calls)}, **settings)
    assert calls == []


@pytest.mark.parametrize(
    "run, error, match",
    [
        (
            lambda: training_step_modes(models="mlp", device="/CPU:0"),
            TypeError,
            "^models: expected a non-empty list or tuple of 'mlp' and 'cnn', got str 'mlp'$",
        ),
        (
            lambda: training_step_modes(models=[], device="/CPU:0"),
            ValueError,
            r"^models: expected a non-empty list or tuple of 'mlp' and 'cnn', got list \[\]$",
        ),
        (
            lambda: blur_op(image_sizes=[], device="/CPU:0"),
            ValueError,
            r"^image_sizes: expected a non-empty list .*got list \[\]$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=(), device="/CPU:0"),
            ValueError,
            r"^batch_sizes: expected a non-empty list .*got tuple \(\)$",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[2, "4"], device="/CPU:0"),
            TypeError,
            r"^batch_sizes\[1\]: expected an int >= 1 and <= \d+, got str '4'$",
        ),
        (
            lambda: blur_op(image_sizes=[8.0], device="/CPU:0"),
            TypeError,
            r"^image_sizes\[0\]: expected an int >= 8",
        ),
    ],
)
def test_a_wrong_type_is_a_type_error_and_a_wrong_value_a_value_error(run, error, match):
    with pytest.raises(error, match=match):
        run()


@pytest.mark.parametrize(
    "run, match",
    [
        (
            lambda: blur_op(image_sizes=[10**5], device="/CPU:0"),
            r"^image_sizes\[0\]: expected an int >= 8 and <= 4096",
        ),
        # 1 GiB of 4096x4096 float32 RGB images
        (
            lambda: blur_op(image_sizes=[4096], batch_size=64, device="/CPU:0"),
            r"^batch_size: expected an int >= 1 and <= 5, got int 64$",
        ),
        (
            lambda: blur_pipeline(image_size=8, examples=10**9, batch_size=1, device="/CPU:0"),
            r"^examples: expected an int >= 1 and <= ",
        ),
        (
            lambda: per_example_vs_batched(batch_sizes=[10**9], image_size=8, device="/CPU:0"),
            r"^batch_sizes\[0\]: expected an int >= 1 and <= ",
        ),
        (
            lambda: training_step_modes(image_size=10**4, device="/CPU:0"),
            r"^image_size: expected an int >= 8 and <= 4096",
        ),
        (
            lambda: __import__("companion.bench").bench.training_loop_vs_fit(epochs=10**6),
            r"^epochs: expected an int >= 1 and <= 100, got ",
        ),
        (
            lambda: __import__("companion.bench").bench.training_loop_vs_fit(examples=10**9),
            r"^examples: expected an int >= 64 and <= 65536",
        ),
        (
            lambda: __import__("companion.bench").bench.adamw_step_time(steps=10**9),
            r"^steps: expected an int >= 1 and <= 10000, got ",
        ),
        (
            lambda: __import__("companion.bench").bench.adamw_step_time(batch_size=10**9),
            r"^batch_size: expected an int >= 1 and <= ",
        ),
    ],
)
def test_huge_counts_and_sizes_are_refused_before_running(run, match):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        run()
    assert time.perf_counter() - started < 5


def test_checks_print_what_arrived_not_only_its_type():
    with pytest.raises(
        TypeError,
        match=r"^device: expected a device string such as '/CPU:0', got list \['/CPU:0'\]$",
    ):
        default_sizes(["/CPU:0"])
    with pytest.raises(
        ValueError, match=r"^device: expected a device string such as '/GPU:0', got str 'no such'$"
    ):
        default_sizes("no such")


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


QUICK = ["--quick", "--repeats", "1", "--device", "/CPU:0"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            QUICK + ["--examples", "10"],
            "argument --examples: expected an int >= 128 and <= 65536, got int 10",
        ),
        (
            QUICK + ["--repeats", "0"],
            "argument --repeats: expected an int >= 1 and <= 1000, got int 0",
        ),
        (
            QUICK + ["--epochs", "many"],
            "argument --epochs: expected an int >= 1 and <= 100, got str 'many'",
        ),
        (
            QUICK + ["--device", "/TPU:7"],
            "argument --device: expected one of the devices TensorFlow has",
        ),
        (QUICK + ["--output", ""], "argument --output: expected a non-empty path"),
    ],
)
def test_main_refuses_bad_flags_like_a_command_line_before_running_anything(argv, message, capsys):
    from companion.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    assert (
        exit_info.value.code == 2
        and out == ""
        and message in err
        and err.startswith("usage: python -m companion.bench")
    )


@pytest.mark.parametrize(
    "argv, status, shown",
    [(["--help"], 0, "usage: python -m companion.bench"), (["--repeats", "0"], 2, "--repeats")],
)
def test_help_and_bad_flags_answer_before_tensorflow_is_imported(argv, status, shown):
    # `python -m companion.bench --help` answers at once: TensorFlow takes seconds to import.
    result = run_python(
        "import runpy, sys\n"
        f"sys.argv[1:] = {argv!r}\n"
        "try:\n"
        "    runpy.run_module('companion.bench', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    print('exit', done.code, 'tensorflow imported:', 'tensorflow' in sys.modules)\n"
    )
    assert result.stdout.splitlines()[-1] == f"exit {status} tensorflow imported: False", (
        result.stdout + result.stderr
    )
    assert shown in result.stdout + result.stderr


@pytest.mark.parametrize(
    "argv, blur_methods, error, match",
    [
        (
            "--quick",
            None,
            TypeError,
            r"^argv: expected a list or tuple of str \(command-line arguments\) or None, "
            r"got str '--quick'$",
        ),
        (["--quick", 1], None, TypeError, r"^argv\[1\]: expected a str, got int 1$"),
        (
            QUICK,
            {"py_function": py_function_blur},
            ValueError,
            r"^blur_methods: expected .* that includes 'native' .*got dict ",
        ),
        (
            QUICK,
            {"native": "native_blur"},
            TypeError,
            r"^blur_methods\['native'\]: expected a callable, got str 'native_blur'$",
        ),
    ],
)
def test_main_refuses_bad_arguments_before_running_anything(
    argv, blur_methods, error, match, capsys
):
    from companion.bench import main

    with pytest.raises(error, match=match):
        main(argv, blur_methods=blur_methods)
    assert capsys.readouterr().out == ""
