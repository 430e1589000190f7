"""The ``tf.distribute`` row on PyTorch: chapter 8's regressor, a Keras model, trained by two
processes under ``torch.nn.parallel.DistributedDataParallel`` with the gloo backend on the CPU.

Keras has no PyTorch distribution, but a Keras model on PyTorch is a ``torch.nn.Module``, so
DDP wraps it: each process trains on its half of every batch, and ``backward()`` averages the
gradients of the two processes before Keras's optimizer applies them.
"""

from __future__ import annotations

import json

import numpy as np

from companion.backends._steps import step_data, step_model

#: The line before a worker's weights (JSON) in its output.
WEIGHTS_MARK = "== weights of this rank =="
#: What each worker runs: chapter 10's ``run_workers`` gives it ``TF_CONFIG``, whose first
#: address is the rendezvous of ``torch.distributed``.
WORKER_SOURCE = "from companion.backends._ddp import ddp_worker\nddp_worker()\n"


def ddp_worker(epochs: int = 2, batch_size: int = 16) -> None:
    """One rank: join the process group that ``TF_CONFIG`` describes, train ``step_model``
    wrapped in DDP on this rank's share of each batch for ``epochs`` epochs (batches in order,
    as ``fit(shuffle=False)``), and print its weights after ``WEIGHTS_MARK``.

    Taught in chapter 14, "Two processes on PyTorch".
    """
    import os

    import keras
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cluster = json.loads(os.environ["TF_CONFIG"])
    workers, rank = cluster["cluster"]["worker"], cluster["task"]["index"]
    dist.init_process_group(
        "gloo", init_method=f"tcp://{workers[0]}", rank=rank, world_size=len(workers)
    )
    try:
        model = step_model(custom_step=False)
        replica = DistributedDataParallel(model)  # a Keras model on PyTorch is an nn.Module
        x, y = (keras.ops.convert_to_tensor(a) for a in step_data())
        share = batch_size // len(workers)
        for _ in range(epochs):
            for start in range(rank * share, len(x), batch_size):
                model.zero_grad()
                error = replica(x[start : start + share]) - y[start : start + share]
                keras.ops.mean(error**2).backward()  # averages the gradients of the ranks
                variables = model.trainable_variables
                with torch.no_grad():
                    model.optimizer.apply([v.value.grad for v in variables], variables)
        weights = [w.tolist() for w in model.get_weights()]
        print(WEIGHTS_MARK + "\n" + json.dumps(weights), flush=True)
        # Rank 0 hosts the rendezvous store: a rank that tears the group down after rank 0
        # has exited can wait forever (pytorch/pytorch#75097), so both leave together.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def ddp_replicas(timeout: float = 300.0) -> list[np.ndarray]:
    """Train with DDP on two processes (``ddp_worker``, started by ``run_workers``) and return
    the weights, after checking that both ranks hold the same bits.

    Raises:
        AssertionError: If the two ranks end with different weights.
        WorkerError: If a worker fails.

    Taught in chapter 14, "Two processes on PyTorch".
    """
    from companion.cluster import run_workers

    env = {"KERAS_BACKEND": "torch", "KERAS_TORCH_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    results = run_workers(WORKER_SOURCE, 2, timeout=timeout, env=env)
    ranks = [json.loads(r.stdout.split(WEIGHTS_MARK + "\n")[-1]) for r in results]
    if ranks[0] != ranks[1]:  # JSON holds each float32 exactly: equal lists, equal bits
        raise AssertionError("the two ranks ended with different weights")
    return [np.array(w, "float32") for w in ranks[0]]
