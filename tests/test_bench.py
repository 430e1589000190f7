import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import time

import numpy as np
import pytest
import tensorflow as tf

from companion.bench import Timing, fetch, time_call


def test_a_known_sleep_is_measured_within_tolerance():
    timing = time_call(time.sleep, 0.02, repeats=5, warmup=0)
    assert 0.02 <= timing.median < 0.05 and timing.best <= timing.median
    assert isinstance(timing, Timing) and timing.repeats == 5 and timing.number == 1
    assert timing.median_ms == pytest.approx(timing.median * 1e3)


def test_number_divides_the_repeat_time_and_warmup_is_not_timed():
    calls = []

    def slow_first_call():
        calls.append(None)
        time.sleep(0.2 if len(calls) == 1 else 0.002)

    timing = time_call(slow_first_call, repeats=3, number=4, warmup=1)
    assert len(calls) == 1 + 3 * 4
    assert 0.002 <= timing.median < 0.02  # the 0.2 s first call was the warm-up


def test_results_are_fetched_to_the_host():
    fetched = fetch({"a": tf.constant([1.0, 2.0]), "b": [tf.constant(3), "text"]})
    assert isinstance(fetched["a"], np.ndarray) and fetched["b"][0] == 3 and fetched["b"][1] == "text"


def test_device_argument_places_the_ops():
    placed = []
    time_call(lambda: placed.append(tf.ones(2).device), repeats=1, warmup=0, device="/CPU:0")
    assert placed and placed[0].endswith("CPU:0")
    assert time_call(lambda: None, repeats=2, device="/CPU:0").device == "/CPU:0"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"repeats": 0}, ValueError, "^repeats: expected an int >= 1"),
        ({"number": 1.5}, TypeError, "^number: expected an int >= 1"),
        ({"warmup": -1}, ValueError, "^warmup: expected an int >= 0"),
        ({"device": "/TPU:7"}, ValueError, "^device: expected one of the devices"),
        ({"device": 0}, TypeError, "^device: expected a device string"),
    ],
)
def test_bad_input_is_rejected_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        time_call(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="^fn: expected a callable"):
        time_call("not callable")


def test_main_prints_the_training_loop_ratio_and_writes_json(tmp_path, capsys):
    import json

    from companion.bench import main

    output = tmp_path / "bench.json"
    entries = main(["--output", str(output), "--repeats", "1", "--examples", "128", "--epochs", "2"])
    printed = capsys.readouterr().out
    assert "repeat 1/1, custom loop:" in printed and "repeat 1/1, model.fit:" in printed
    assert "custom training loop / model.fit" in printed and f"written to {output}" in printed
    written = json.loads(output.read_text())
    assert written == entries and len(written) == 2
    entry = written[0]
    assert {"name", "ratio", "custom_median", "reference_median", "unit", "device", "versions"} <= set(entry)
    assert entry["unit"] == "examples/s" and entry["custom_median"] > 0 and entry["reference_median"] > 0
    assert entry["ratio"] == pytest.approx(entry["custom_median"] / entry["reference_median"])
    assert entry["versions"]["tensorflow"] == tf.__version__
    adamw = written[1]
    assert "repeat 1/1, companion AdamW:" in printed and "repeat 1/1, keras AdamW:" in printed
    assert "companion AdamW / keras AdamW step time" in printed and adamw["unit"] == "ms/step"
    assert adamw["custom_median"] > 0 and adamw["reference_median"] > 0
    assert adamw["ratio"] == pytest.approx(adamw["custom_median"] / adamw["reference_median"])


def test_training_loop_vs_fit_rejects_bad_settings():
    from companion.bench import training_loop_vs_fit

    with pytest.raises(ValueError, match="^epochs: expected an int >= 2"):
        training_loop_vs_fit(epochs=1)
    with pytest.raises(ValueError, match="^examples: expected an int >= 64"):
        training_loop_vs_fit(examples=10)


def test_adamw_step_time_rejects_bad_settings():
    from companion.bench import adamw_step_time

    with pytest.raises(ValueError, match="^steps: expected an int >= 1"):
        adamw_step_time(steps=0)
    with pytest.raises(TypeError, match="^batch_size: expected an int >= 1"):
        adamw_step_time(batch_size=2.0)
