"""companion.cluster: workers on 127.0.0.1, what they leave, and nothing left behind."""

import json
import re
import time

import keras
import numpy as np
import pytest
from helpers.small_models import dense

from companion.cluster import (
    WorkerError,
    WorkerResult,
    run_workers,
    variables_digest,
    worker_source,
)

REPORT = """
import json, os, sys
config = json.loads(os.environ["TF_CONFIG"])
print(config["task"]["index"], len(config["cluster"]["worker"]), os.environ["GREETING"])
print("to stderr", file=sys.stderr)
"""


def test_each_worker_gets_its_own_task_of_one_cluster():
    results = run_workers(REPORT, 3, env={"GREETING": "hello"}, timeout=60)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.stdout.split() for r in results] == [[str(i), "3", "hello"] for i in range(3)]
    assert all(r.returncode == 0 and r.stderr.strip() == "to stderr" for r in results)


def alive(pid):
    """Whether ``pid`` runs: gone, or a zombie (killed, waiting for its reaper), is not."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def survivors(pids, grace=5.0):
    """The pids still running after ``grace`` seconds (SIGKILL reaches a grandchild, which
    nobody waits for, a moment later; a survivor would sleep for two minutes)."""
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


# Worker 0 starts a grandchild and waits; worker 1 fails once both have written their pids.
FAILING = """
import json, os, subprocess, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
folder = os.environ["FOLDER"]
if index == 0:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(f"{folder}/pids", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(120)
while not os.path.exists(f"{folder}/pids"):
    time.sleep(0.05)
print("worker 1 gives up", file=sys.stderr)
sys.exit(3)
"""


def test_one_failed_worker_stops_the_job_and_leaves_no_process(tmp_path):
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"^worker 1 of 2 exited with status 3") as caught:
        run_workers(FAILING, env={"FOLDER": str(tmp_path)}, timeout=60)
    assert time.monotonic() - start < 30  # not the 120 s worker 0 would sleep
    assert "worker 1 gives up" in str(caught.value)
    assert [r.returncode for r in caught.value.results] == [-9, 3]
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert survivors(pids) == [], "a worker or its child survived"


def test_the_timeout_kills_every_worker(tmp_path):
    source = (
        "import os, time\n"
        "open(os.path.join(os.environ['FOLDER'], str(os.getpid())), 'w').close()\n"
        "time.sleep(120)\n"
    )
    with pytest.raises(WorkerError, match=r"^timeout: workers \[0, 1\] still running after 3 s"):
        run_workers(source, env={"FOLDER": str(tmp_path)}, timeout=3)
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2 and survivors(pids) == []


def index_and_greeting(greeting):  # a helper: its definition travels with the entry point
    import json
    import os

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    return f"{index} {greeting}"


def report():
    print(index_and_greeting("hello"))


def test_functions_run_in_the_workers_by_their_source():
    results = run_workers([index_and_greeting, report], 2, timeout=60)
    assert [r.stdout.split() for r in results] == [["0", "hello"], ["1", "hello"]]
    assert worker_source(report).endswith("report()\n")
    assert worker_source(["x = 1", "print(x)"]) == "x = 1\n\n\nprint(x)\n"  # no call added


def test_functions_a_worker_cannot_run_are_refused():
    greeting = "hello"

    def closure():
        print(greeting)

    with pytest.raises(ValueError, match=r"^source: closure uses variables of an enclosing"):
        run_workers(closure)
    with pytest.raises(TypeError, match=r"^source\[1\]: expected Python source \(a str\) or"):
        run_workers([report, lambda: None])
    with pytest.raises(TypeError, match=r"^source: expected Python source \(a str\) or a def"):
        run_workers(print)
    with pytest.raises(ValueError, match=r"^source: expected Python source, a function or a"):
        run_workers([])


def test_the_error_quotes_a_long_exception_whole():
    source = "raise ValueError('first line\\n' + '\\n'.join(map(str, range(30))))"
    with pytest.raises(WorkerError) as caught:
        run_workers(source, 1, timeout=60)
    assert "\nValueError: first line\n0\n1\n" in str(caught.value)
    assert str(caught.value).endswith("\n29")


def test_digest_is_the_same_for_the_same_bits_only():
    model = dense(3, 2, seed=0)
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    assert variables_digest(model) == variables_digest(copy)
    assert variables_digest(model) == variables_digest(model.get_weights())
    kernel = model.get_weights()[0]
    kernel[0, 0] = np.nextafter(kernel[0, 0], np.float32(1))  # one ulp
    copy.set_weights([kernel, model.get_weights()[1]])
    assert variables_digest(model) != variables_digest(copy)
    with pytest.raises(TypeError, match=r"^variables: expected a Keras model"):
        variables_digest("weights")


MULTI_WORKER = """
import numpy as np, tensorflow as tf, keras
from companion.cluster import variables_digest
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(8)

@tf.function
def step(batch):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=8)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    strategy.run(replica, args=batch)

for batch in strategy.experimental_distribute_dataset(data):
    step(batch)
print(strategy.num_replicas_in_sync, variables_digest(model))
"""


@pytest.mark.slow
def test_two_workers_of_multi_worker_mirrored_strategy_end_with_the_same_weights():
    results = run_workers(MULTI_WORKER, 2, timeout=240)
    lines = [r.stdout.split() for r in results]
    assert lines[0][0] == lines[1][0] == "2"  # one replica per worker, two in sync
    assert lines[0][1] == lines[1][1], json.dumps([r.stderr[-500:] for r in results])


RESUMABLE = """
import os, signal
import numpy as np, tensorflow as tf, keras
from companion.cluster import variables_digest
from companion.training import fit

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(0.01)
x = np.random.default_rng(0).normal(size=(256, 3)).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(16)
kill_at, read = int(os.environ.get("KILL_AT", "0")), [0]

def read_batch(x):  # worker 1 dies (SIGKILL: no handler runs) at its KILL_AT-th batch
    read[0] += 1
    if strategy.cluster_resolver.task_id == 1 and read[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return x

data = data.map(lambda x, y: (tf.ensure_shape(tf.py_function(read_batch, [x], tf.float32),
                                              x.shape), y))
fit(model, data, optimizer=optimizer, loss=keras.losses.MeanSquaredError(), epochs=3,
    strategy=strategy, checkpoint_dir=os.environ["CHECKPOINTS"], checkpoint_every=4)
print("digest", variables_digest(model))
"""


@pytest.mark.slow
def test_a_worker_killed_mid_epoch_and_the_job_restarted_ends_where_an_unbroken_job_does(
    tmp_path,
):
    def job(folder, kill_at=0):
        settings = {"CHECKPOINTS": str(tmp_path / folder), "KILL_AT": str(kill_at)}
        return run_workers(RESUMABLE, 2, env=settings, timeout=240)

    def digests(results):
        return {line for r in results for line in r.stdout.splitlines() if "digest" in line}

    unbroken = digests(job("unbroken"))
    assert len(unbroken) == 1  # both workers hold the same weights
    with pytest.raises(WorkerError, match=r"^worker 1 of 2 exited with status -9") as killed:
        job("broken", kill_at=28)  # in epoch 2 of 3 (16 batches each)
    assert [r.returncode for r in killed.value.results] == [-9, -9]  # worker 0 killed by us
    resumed = job("broken")
    match = re.search(r"Resumed from ckpt-\d+ \(epoch 2, after step (\d+)\)", resumed[0].stdout)
    assert match and int(match.group(1)) % 4 == 0, resumed[0].stdout[:300]
    assert "Epoch 1/3" not in resumed[0].stdout
    assert digests(resumed) == unbroken


@pytest.mark.parametrize(
    "env, match",
    [
        ("A=1", r"^env: expected a mapping of str to str or None, got str 'A=1'$"),
        ({"A": 1}, r"^env\['A'\]: expected a str value, got int 1$"),
        ({1: "x"}, r"^env\[1\]: expected a str name, got int 1$"),
    ],
)
def test_env_is_checked_as_run_python_checks_it(env, match):
    with pytest.raises(TypeError, match=match):
        run_workers("pass", env=env)


def test_the_records_a_job_leaves_check_their_fields():
    result = WorkerResult(1, -9, "", "killed")
    assert WorkerError("worker 1 of 2 timed out", [result]).results == [result]
    with pytest.raises(TypeError, match=r"^returncode: expected an int"):
        WorkerResult(0, None, "", "")
    with pytest.raises(ValueError, match=r"^index: expected an int"):
        WorkerResult(-1, 0, "", "")
    with pytest.raises(TypeError, match=r"^results\[0\]: expected a WorkerResult, got str 'x'$"):
        WorkerError("failed", ["x"])
