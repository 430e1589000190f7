"""``companion._subprocess``: the environment and the time limit of every child process."""

import os

import pytest

from companion import cluster, notebook
from companion._subprocess import CHILD_DEFAULTS, MAX_TIMEOUT, child_environment
from companion.cluster import run_workers
from companion.notebook import run_python


def test_child_environment_adds_the_defaults_and_lets_env_win():
    before = dict(os.environ)
    child = child_environment({"PYTHON_COLORS": "1", "EXTRA": "yes"})
    assert os.environ == before
    assert child["EXTRA"] == "yes" and child["PYTHON_COLORS"] == "1"
    assert child_environment()["TF_CPP_MIN_LOG_LEVEL"] == CHILD_DEFAULTS["TF_CPP_MIN_LOG_LEVEL"]
    with pytest.raises(TypeError, match=r"^env\['A'\]: expected a str value, got int 1$"):
        child_environment({"A": 1})


def test_notebook_and_cluster_show_the_one_environment_and_the_one_limit():
    assert notebook.child_environment is cluster.child_environment is child_environment
    assert notebook.CHILD_DEFAULTS is CHILD_DEFAULTS
    assert notebook.MAX_TIMEOUT is cluster.MAX_TIMEOUT is MAX_TIMEOUT
    assert MAX_TIMEOUT == 24 * 3600  # a day


def one_python(timeout):
    return run_python("print('done')", timeout=timeout).stdout


def one_worker(timeout):
    return run_workers("print('done')", 1, timeout=timeout)[0].stdout


@pytest.mark.parametrize("run", [one_python, one_worker])
def test_run_python_and_run_workers_take_up_to_the_same_limit(run):
    assert run(MAX_TIMEOUT) == "done\n"
    with pytest.raises(
        ValueError, match=r"^timeout: expected a finite number > 0 and <= 86400, got float 86400.5$"
    ):
        run(MAX_TIMEOUT + 0.5)
