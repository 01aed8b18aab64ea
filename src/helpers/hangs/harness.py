"""Hung jobs made on purpose: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it: other
workers, probes, the counters' context managers, summaries, pictures and the step viewer's entry
point. It imports from the lesson, never the reverse.

Used by: notebook 19.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json

from .lesson import (
    outcome,
)

_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\] ")  # gloo's "[/path/file.cc:78] "
_PEER = re.compile(r"\[(127\.0\.0\.1|::1)\]:\d+")


def error_text(message: str | None) -> str | None:
    """An exception's text without the C++ file location and the peer's port (they vary)."""
    if message is None:
        return None
    return _PEER.sub(r"[\1]:<port>", _LOCATION.sub("", message)).strip()


_FAILURE = re.compile(r"^\s*rank\s*: (\d+) \(local_rank: \d+\)\n\s*exitcode\s*: (-?\d+)", re.M)


def torchrun_failures(log: str) -> dict:
    """torchrun's failure summary (the ChildFailedError block at the end of its log) as
    {"root": (rank, exitcode), "others": {rank: exitcode}}: the "Root Cause (first observed
    failure)" and the "Failures" listed above it."""
    if "Root Cause (first observed failure):" not in log:
        raise ValueError("no torchrun failure summary in the log (did the run fail?)")
    summary = log[log.rindex("Failures:") :]
    others, root = summary.split("Root Cause (first observed failure):")
    found = {"others": {int(r): int(c) for r, c in _FAILURE.findall(others)}}
    ((rank, code),) = _FAILURE.findall(root)
    found["root"] = (int(rank), int(code))
    return found


def fr_entries(dump: dict) -> list[tuple[int, str]]:
    """(collective_seq_id, profiling_name) of each Flight Recorder entry, oldest first."""
    return [(e["collective_seq_id"], e["profiling_name"]) for e in dump.get("entries", [])]


def innermost_call(stacks: str) -> str:
    """The innermost function of the main thread in a Python stack dump (faulthandler's format,
    most recent call first): the thread whose outermost frame is a `<module>`."""
    for thread in stacks.strip().split("\n\n"):
        frames = re.findall(r'File "[^"]+", line \d+ in (\S+)', thread)
        if frames and frames[-1] == "<module>":
            return frames[0]
    return "<no main thread>"


#: Exercise 19.1's job: 3 ranks, a 3 s group timeout; at sequence number 3 the odd rank, rank 0,
#: calls broadcast where the others call all_reduce (the judge's truth; tests/test_hangs.py
#: checks it against the dumps and the analyzer's reading of a real run, which takes rank 0's
#: entry as the expected one and so blames ranks 1 and 2).
MYSTERY = {"world_size": 3, "timeout_s": 3.0, "rank": 0, "seq": 3, "op": "broadcast"}


def mystery_worker(rank: int, world_size: int, timeout_s: float, odd: int) -> dict:
    """Exercise 19.1's hung job (read it after answering): returns each rank's dump."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(4)
    dist.all_reduce(x, group=group)
    dist.broadcast(x, src=0, group=group)
    if rank == odd:
        seen = outcome("broadcast", lambda: dist.broadcast(x, src=0, group=group))
    else:
        seen = outcome("all_reduce", lambda: dist.all_reduce(x, group=group))
    seen["dump"] = json.loads(_dump_fr_trace_json(includeCollectives=True))
    return seen


def mystery_dumps() -> list[dict]:
    """Run exercise 19.1's hung job (gloo, 3 ranks, a few seconds); one dump per rank."""
    from helpers.launch import launch

    args = (MYSTERY["timeout_s"], MYSTERY["rank"])
    results = launch(mystery_worker, MYSTERY["world_size"], args=args, backend="gloo", timeout_s=30)
    return [r["dump"] for r in results]
