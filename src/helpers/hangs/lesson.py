"""The hung jobs notebook 19 makes on purpose, one worker each (`launch(fn, ...)` runs them).

Every worker builds its own gloo group with a short timeout (`dist.new_group(timeout=...)`), so
a hang ends in seconds, and returns what it saw as plain data: which call raised and the
exception's text. The notebook shows each worker before it launches it.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json, _WorkerServer


def outcome(call: str, fn) -> dict:
    """Run `fn()`; say which `call` it was and what it raised (None when it returned)."""
    try:
        fn()
        return {"call": call, "error": None}
    except Exception as err:  # the diagnosis is the message: hand it back as text
        return {"call": call, "error": f"{type(err).__name__}: {err}"}


def extra_collective_worker(rank: int, world_size: int, timeout_s: float) -> dict:
    """Rank 0 calls one all_reduce more than the others; then every rank calls a barrier, the
    others 1.5 s later than rank 0 (so rank 0's timeout fires first). Returns the call that
    raised, its message and this rank's Flight Recorder dump."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(2)
    dist.all_reduce(x, group=group)  # every rank: collective 1
    if rank == 0:
        seen = outcome("all_reduce", lambda: dist.all_reduce(x, group=group))
    else:
        time.sleep(1.5)  # some work of its own first
        seen = {"error": None}
    if seen["error"] is None:
        seen = outcome("barrier", lambda: dist.barrier(group=group))
    seen["dump"] = json.loads(_dump_fr_trace_json(includeCollectives=True))
    return seen


def wait_timeout_worker(rank: int, world_size: int, group_s: float, wait_s: float) -> dict:
    """Rank 1 is late; rank 0 waits for its all_reduce with a timeout shorter than the group's."""
    group = dist.new_group(timeout=timedelta(seconds=group_s))
    x = torch.ones(2)
    if rank == 1:
        time.sleep(group_s + 1)  # late for everything rank 0 waits on
        return {"call": "sleep", "error": None, "waited_s": None}
    work = dist.all_reduce(x, group=group, async_op=True)
    start = time.monotonic()
    seen = outcome("work.wait", lambda: work.wait(timeout=timedelta(seconds=wait_s)))
    seen["waited_s"] = time.monotonic() - start
    return seen


def dead_peer_worker(rank: int, world_size: int, timeout_s: float) -> None:
    """Rank 1 exits after one all_reduce; rank 0 calls a second one (and raises)."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(2)
    dist.all_reduce(x, group=group)
    if rank == 1:
        os._exit(3)  # a crash: no exception, no cleanup, the sockets close
    time.sleep(0.3)  # rank 1 is gone by now
    dist.all_reduce(x, group=group)


def fingerprint_worker(rank: int, world_size: int, mismatch: str) -> dict:
    """One collective that differs on rank 1 (its shape or its op), under DETAIL debugging."""
    dist.set_debug_level(dist.DebugLevel.DETAIL)  # what TORCH_DISTRIBUTED_DEBUG=DETAIL sets
    group = dist.new_group(timeout=timedelta(seconds=5))
    x = torch.ones(3 if rank == 1 and mismatch == "shape" else 2)
    start = time.monotonic()
    if rank == 1 and mismatch == "op":
        seen = outcome("broadcast", lambda: dist.broadcast(x, src=0, group=group))
    else:
        seen = outcome("all_reduce", lambda: dist.all_reduce(x, group=group))
    seen["took_s"] = time.monotonic() - start
    seen["backend"] = type(group._get_backend(torch.device("cpu"))).__name__
    return seen


def late_rank_worker(rank: int, world_size: int, late: list, timeout_s: float, all_: bool) -> dict:
    """The ranks in `late` sleep past the timeout; the others enter a monitored_barrier."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s + 10))
    if rank in late:
        time.sleep(timeout_s + 2)
        return {"call": "sleep", "error": None}
    return outcome(
        "monitored_barrier",
        lambda: dist.monitored_barrier(
            group=group, timeout=timedelta(seconds=timeout_s), wait_all_ranks=all_
        ),
    )


def served_worker(rank: int, world_size: int, folder: str, timeout_s: float) -> dict:
    """extra_collective_worker's hang, with torch's per-rank debug worker server on loopback."""
    import torch.distributed.debug  # noqa: F401  (registers the profiler's handler too)

    from helpers.processes import listening_sockets

    server = _WorkerServer("127.0.0.1", 0)  # 127.0.0.1 only, a port the OS picks
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(2)
    dist.all_reduce(x, group=group)
    hung = "all_reduce" if rank == 0 else "barrier"
    url_file = os.path.join(folder, f"rank{rank}.url")
    with open(url_file + ".tmp", "w") as f:  # where the parent finds this rank's server
        f.write(f"http://127.0.0.1:{server.port}")
    os.replace(url_file + ".tmp", url_file)
    if rank == 0:
        seen = outcome("all_reduce", lambda: dist.all_reduce(x, group=group))
    else:
        seen = outcome("barrier", lambda: dist.barrier(group=group))
    seen.update(hung=hung, listening=listening_sockets(server.port))
    server.shutdown()
    return seen


def rendezvous_worker(rank: int, world_size: int, port: int, missing: int, timeout_s: float):
    """Every rank but `missing` builds a gloo group through the TCPStore at `port`."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    if rank == missing:
        time.sleep(timeout_s + 2)  # never arrives at the rendezvous
        return {"call": "sleep", "error": None}
    job = dist.PrefixStore("job", store)  # the group's keys start with job/
    timeout = timedelta(seconds=timeout_s)
    return outcome(
        "ProcessGroupGloo", lambda: dist.ProcessGroupGloo(job, rank, world_size, timeout)
    )
