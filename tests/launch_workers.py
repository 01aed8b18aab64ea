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


def hang_worker(rank: int, world_size: int, bad_rank: int) -> int:
    if rank == bad_rank or bad_rank < 0:
        while True:  # a rank stuck in Python code
            time.sleep(0.1)
    dist.barrier()  # the others wait for it
    return rank


def _socket_inodes() -> set[str]:
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _listening(inodes: set[str]) -> list[str]:
    """Local addresses (hex, as /proc shows them) of this process's listening TCP sockets."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # 0A = LISTEN
                    found.append(local)
    return found


def sockets_worker(rank: int, world_size: int) -> list[str]:
    t = torch.ones(4)
    dist.all_reduce(t)  # make sure every transport is connected
    return _listening(_socket_inodes())
