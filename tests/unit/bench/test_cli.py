"""``companion.bench._cli``: ``python -m companion.bench`` (``make bench``) and its flags."""

import json

import pytest
import tensorflow as tf

from companion.notebook import run_python
from companion.pyfunc import py_function_blur


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
