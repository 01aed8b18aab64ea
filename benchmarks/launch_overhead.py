"""helpers.launch against torchrun for the same no-op job (init, barrier, teardown).

Alternates the two launchers, REPS times per world size, and prints one JSON object per world
size: medians in seconds and the ratio launch/torchrun (below 1.0: the launcher is faster).

    .venv/bin/python benchmarks/launch_overhead.py [--reps 5] [--world-sizes 2 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch.distributed as dist

from helpers.processes import LOOPBACK_IFNAME


def noop_worker(rank: int, world_size: int) -> int:
    """What both launchers run: the process group is up; do one barrier (in teardown)."""
    return rank


def _torchrun_worker() -> None:
    # the same job under torchrun: env:// rendezvous, a barrier, teardown
    dist.init_process_group("gloo")
    noop_worker(dist.get_rank(), dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()


def _time_launch(world_size: int) -> float:
    from launch_overhead import noop_worker as worker  # importable by name, unlike __main__

    from helpers.launch import launch

    start = time.perf_counter()
    launch(worker, world_size, timeout_s=120)
    return time.perf_counter() - start


def _time_torchrun(world_size: int) -> float:
    # the same pin as helpers.launch: gloo on loopback, not where the host name resolves
    env = dict(os.environ, GLOO_SOCKET_IFNAME=LOOPBACK_IFNAME, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={world_size}", __file__, "--torchrun-worker",
    ]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--torchrun-worker", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.torchrun_worker:
        _torchrun_worker()
        return
    for world_size in opts.world_sizes:
        launch_s, torchrun_s = [], []
        for _ in range(opts.reps):  # alternate, so drift in machine load hits both alike
            launch_s.append(_time_launch(world_size))
            torchrun_s.append(_time_torchrun(world_size))
        row = {
            "job": "noop",
            "world_size": world_size,
            "reps": opts.reps,
            "launch_s": round(statistics.median(launch_s), 3),
            "torchrun_s": round(statistics.median(torchrun_s), 3),
        }
        row["ratio"] = round(row["launch_s"] / row["torchrun_s"], 3)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
