"""``companion.bench._headline``: the headline measures of chapters 7 and 9."""

import pytest


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


def test_training_benchmarks_check_their_seed_with_a_maximum():
    from companion.bench import adamw_step_time, training_loop_vs_fit

    for run in (training_loop_vs_fit, adamw_step_time):
        with pytest.raises(
            ValueError, match=r"^seed: expected an int >= 0 and <= 4294967295, got int 4294967296$"
        ):
            run(seed=2**32)
