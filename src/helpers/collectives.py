"""Workers for notebook 04 (process groups and collectives).

Used by: notebooks/04_process_groups_and_collectives.ipynb. Runs under helpers.launch: gloo on
CPU, NCCL with one GPU per rank when present (tensors live on `current_device()`).
Every worker returns plain Python data so the notebook can print and assert it in rank order.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from helpers.launch import current_device
from helpers.processes import listening_sockets

__all__ = ["identity_worker", "collectives_worker", "init_method_demo"]


def identity_worker(rank: int, world_size: int) -> dict:
    """Who am I? What the process group and the environment say about this rank."""
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")},
        "backend": dist.get_backend(),
        "device": current_device().type,
    }


def collectives_worker(rank: int, world_size: int) -> dict[str, list]:
    """Run each collective once on small tensors that make the result easy to read.

    Rank r starts from [r+1, r+1] (or [10*r + i] for the per-element cases), so every result can
    be predicted by hand: the notebook asserts each one.
    """
    dev = current_device()
    out: dict[str, list] = {}

    t = torch.tensor([float(rank + 1)] * 2, device=dev)  # rank 0 holds [1, 1]
    dist.broadcast(t, src=0)  # everyone ends with rank 0's tensor
    out["broadcast"] = t.tolist()

    t = torch.tensor([float(rank + 1)] * 2, device=dev)
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)  # only dst's result is defined
    out["reduce"] = t.tolist() if rank == 0 else None

    t = torch.tensor([float(rank + 1)] * 2, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)  # every rank ends with the sum
    out["all_reduce"] = t.tolist()

    t = torch.tensor([float(rank + 1)], device=dev)
    gathered = [torch.zeros(1, device=dev) for _ in range(world_size)]
    dist.all_gather(gathered, t)  # every rank ends with everyone's tensor, in rank order
    out["all_gather"] = [g.item() for g in gathered]

    # reduce_scatter: rank r contributes [10r + 0, 10r + 1, ...]; rank i ends with the sum of
    # element i over all ranks (the first half of a ring all-reduce, see notebook 05)
    t = torch.arange(world_size, dtype=torch.float32, device=dev) + 10 * rank
    mine = torch.zeros(1, device=dev)
    dist.reduce_scatter_tensor(mine, t)
    out["reduce_scatter"] = mine.tolist()

    dist.barrier()  # returns on every rank only once every rank has arrived
    out["barrier"] = [True]
    return out


def init_method_demo(init_method: str, env: dict[str, str] | None = None) -> dict:
    """Initialise a one-rank gloo group with `init_method` in this process, then tear it down.

    Returns what the group saw and which addresses the process listened on meanwhile.
    """
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=1)
        t = torch.ones(3)
        dist.all_reduce(t)
        info = {
            "initialized": dist.is_initialized(),
            "world_size": dist.get_world_size(),
            "sum": t.tolist(),
            "listening": listening_sockets(),
        }
        dist.destroy_process_group()
        return info
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
