"""What runs around notebook 19's hung jobs: message cleaning, torch's Flight Recorder analyzer
called on the dumps, watchers that read a hung job's debug servers and store from the parent,
and the exercise's hung job. Imports from `.lesson`, never the reverse.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json

from .lesson import outcome

_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\] ")  # gloo's "[/path/file.cc:78] "
_PEER = re.compile(r"\[(127\.0\.0\.1|::1)\]:\d+")


def error_text(message: str | None) -> str | None:
    """An exception's text without the C++ file location and the peer's port (they vary)."""
    if message is None:
        return None
    return _PEER.sub(r"[\1]:<port>", _LOCATION.sub("", message)).strip()


def fr_entries(dump: dict) -> list[tuple[int, str]]:
    """(collective_seq_id, profiling_name) of each Flight Recorder entry, oldest first."""
    return [(e["collective_seq_id"], e["profiling_name"]) for e in dump.get("entries", [])]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _fr_log() -> Iterator[list[str]]:
    """The analyzer's log lines ("Flight Recorder" logger), kept here instead of on stderr."""
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

    logger = FlightRecorderLogger().logger
    saved, capture = logger.handlers[:], _Capture()
    logger.handlers = [capture]
    try:
        yield capture.lines
    finally:
        logger.handlers = saved


def analyze_dumps(dumps: list[dict], ranks: list[int] | None = None) -> dict:
    """Run torch's analyzer (`build_db`, as the debug server's FlightRecorderHandler._build_db
    does, without its verbose flag) on one dump per rank; `ranks` fills in each group's members
    where a dump records none. Returns plain data: the collectives it matched and its log."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    args = JobConfig().parse_args(args=[])
    args.allow_incomplete_ranks = True
    details = {}
    for rank, dump in enumerate(dumps):
        dump = json.loads(json.dumps(dump))  # a copy: the caller's dumps stay as recorded
        if ranks is not None:
            groups = {str(e["pg_id"]) for e in dump.get("entries", [])}
            dump["pg_config"] = {g: {"name": g, "desc": "", "ranks": str(ranks)} for g in groups}
        details[f"rank{rank}.json"] = {"rank": rank, "host_name": f"rank{rank}", **dump}
    with _fr_log() as log:
        db = build_db(details, args, dumps[0]["version"])
    collectives = [
        {
            "seq": c.collective_seq_id,
            "name": c.collective_name,
            "pass_check": c.pass_check,
            "others": {r: m.collective_name for r, m in (c.mismatch_collectives or {}).items()},
        }
        for c in db.collectives
    ]
    return {"collectives": collectives, "log": log}


def fetch(url: str, handler: str, timeout_s: float = 3.0) -> str:
    """POST to a worker server's handler, as the debug server's frontend does."""
    request = urllib.request.Request(f"{url}/handler/{handler}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read().decode()


def innermost_call(stacks: str) -> str:
    """The innermost function of the main thread in a Python stack dump (faulthandler's format,
    most recent call first): the thread whose outermost frame is a `<module>`."""
    for thread in stacks.strip().split("\n\n"):
        frames = re.findall(r'File "[^"]+", line \d+ in (\S+)', thread)
        if frames and frames[-1] == "<module>":
            return frames[0]
    return "<no main thread>"


@contextlib.contextmanager
def watch_ranks(world_size: int, handlers: tuple, wait_s: float = 20.0) -> Iterator[dict]:
    """Yield {"folder": ..., "seen": {}}; a thread waits for each rank's `rank<r>.url` in
    folder, gives the ranks 1 s to block, then fetches every handler of every rank into seen
    (a rank that does not answer gets its error's name). The folder is removed afterwards."""
    folder = tempfile.mkdtemp(prefix="hangs-")
    state: dict = {"folder": folder, "seen": {}}

    def watch() -> None:
        deadline, urls = time.monotonic() + wait_s, {}
        while len(urls) < world_size and time.monotonic() < deadline:
            for r in range(world_size):
                path = os.path.join(folder, f"rank{r}.url")
                if r not in urls and os.path.exists(path):
                    urls[r] = open(path).read()
            time.sleep(0.05)
        time.sleep(1.0)  # every rank is inside its blocking call by now
        for r, url in sorted(urls.items()):
            for h in handlers:
                try:
                    state["seen"][(r, h)] = fetch(url, h)
                except OSError as err:
                    state["seen"][(r, h)] = type(err).__name__

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        thread.join(wait_s + 10)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def hosted_store(poll_s: float = 0.1) -> Iterator[dict]:
    """A TCPStore server in this process (port from the OS) for the cell's job, and a second
    client polling its keys while the job runs: yields {"port", "listening", "keys"}, where
    keys is the largest key list the second client saw. The server closes afterwards."""
    from helpers.processes import listening_sockets

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    state = {"port": server.port, "listening": listening_sockets(server.port), "keys": []}
    done = threading.Event()

    def poll() -> None:
        client = dist.TCPStore(
            "127.0.0.1", state["port"], is_master=False, timeout=timedelta(seconds=5)
        )
        while not done.is_set():
            keys = sorted(client.list_keys())
            if len(keys) > len(state["keys"]):
                state["keys"] = keys
            time.sleep(poll_s)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        done.set()
        thread.join(10)
        del server  # the last reference: its listening socket closes


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the cell's launches (workers inherit them), then restore."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: Exercise 19.1's job: 3 ranks, a 3 s group timeout; at sequence number 3 the odd rank calls
#: broadcast where the others call all_reduce (the judge's truth; tests/test_hangs.py checks
#: it against the analyzer's reading of a real run).
MYSTERY = {"world_size": 3, "timeout_s": 3.0, "rank": 1, "seq": 3, "op": "broadcast"}


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
