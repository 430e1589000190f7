import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from companion.notebook import format_table, gpu_available, in_colab, setup


def tiny_fit_weights(seed):
    import keras

    setup(seed, verbose=False)
    x = np.random.normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dropout(0.2), keras.layers.Dense(1)])
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


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)])
def test_setup_rejects_bad_seed(seed, error):
    with pytest.raises(error, match="seed"):
        setup(seed)


def test_format_table_aligns_columns_and_rounds_floats():
    table = format_table([("a", 1.23456789), ("longer", 2)], ["name", "value"])
    assert table.splitlines() == ["name    value", "------  -----", "a       1.235", "longer  2"]


def test_format_table_rejects_ragged_rows():
    with pytest.raises(ValueError, match=r"rows\[1\]: expected 2 values"):
        format_table([(1, 2), (3,)], ["a", "b"])
