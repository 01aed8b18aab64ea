"""Worker functions for tests/test_launch.py.

They live in a module (not in the test file's closures) because launched workers import them by
name; the launcher hands its import path to the workers, so tests/ is importable there too.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from helpers.launch import current_device
from helpers.processes import listening_sockets


def sum_worker(rank: int, world_size: int, n: int) -> dict:
    t = torch.full((n,), float(rank + 1), device=current_device())
    dist.all_reduce(t)
    print(f"rank {rank} says hello")
    print(f"rank {rank} second line", file=sys.stderr)
    return {
        "rank": rank,
        "env_rank": int(os.environ["RANK"]),
        "world": dist.get_world_size(),
        "sum": t[0].item(),
        "backend": dist.get_backend(),
        "device": str(current_device()),
        "sockets": listening_sockets(),  # after the all_reduce: every transport is connected
    }


def big_worker(rank: int, world_size: int, n: int) -> object:
    return {"list": list(range(n)), "tensor": torch.arange(n)}


def raise_worker(rank: int, world_size: int, bad_rank: int) -> int:
    if rank == bad_rank:
        raise ValueError(f"boom on rank {rank}")
    dist.barrier()
    return rank


def exit_worker(rank: int, world_size: int, bad_rank: int, how: str) -> int:
    if rank == bad_rank:
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGABRT)
    dist.barrier()
    return rank


def hang_worker(rank: int, world_size: int, bad_rank: int, marker_dir: str = "") -> int:
    """`bad_rank` (every rank if < 0) spins in Python, the others wait in a barrier; each rank
    first touches `marker_dir`/rank<r> (if given): the test knows where it is, not guesses."""
    stuck = rank == bad_rank or bad_rank < 0
    if marker_dir:
        with open(os.path.join(marker_dir, f"rank{rank}"), "w") as f:
            f.write("spinning" if stuck else "barrier")
    if stuck:
        while True:  # a rank stuck in Python code
            time.sleep(0.1)
    dist.barrier()  # the others wait for it
    return rank


def sockets_worker(rank: int, world_size: int) -> list[str]:
    t = torch.ones(4)
    dist.all_reduce(t)  # make sure every transport is connected
    return listening_sockets()


def funcol_backward_worker(rank: int, world_size: int, ops: list[str]) -> dict[str, bool]:
    """Per reduce op whose forward runs: does funcol.all_reduce's output have a backward? In a
    one-rank gloo group (this rank's own subgroup). For tests/test_syncbn.py."""
    import torch.distributed._functional_collectives as funcol

    groups = [dist.new_group([r]) for r in range(world_size)]  # every rank creates each group
    out = {}
    for op in ops:
        x = torch.ones(3, requires_grad=True)
        try:
            y = funcol.all_reduce(x, op, groups[rank])
        except (
            RuntimeError,
            AssertionError,
        ):  # no forward by that name (premul_sum takes a factor)
            continue
        try:
            y.sum().backward()
            out[op] = True
        except RuntimeError as err:
            assert "backward only supports" in str(err), str(err)
            out[op] = False
    return out


def apply_worker(rank: int, world_size: int, fn, *args) -> object:
    """A module's worker that runs the version of an algorithm it is given (a notebook's)."""
    return fn(rank, world_size, *args)
