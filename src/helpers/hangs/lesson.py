"""Hung jobs made on purpose: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.hangs`, which re-exports both) still loads the harness.
tests/test_code_map.py checks the order and these rules.

Used by: notebook 19.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json, _WorkerServer

# -- 19 · 1. Timeouts: where they fire and what they say ------------------------------------------


def outcome(call: str, fn) -> dict:
    """Run `fn()`; say which `call` it was and what it raised (None when it returned)."""
    try:
        fn()
        return {"call": call, "error": None}
    except Exception as err:  # the diagnosis is the message: hand it back as text
        return {"call": call, "error": f"{type(err).__name__}: {err}"}


def extra_collective_worker(rank: int, world_size: int, timeout_s: float) -> dict:
    """Rank 0 calls one all_reduce more than the others; then every rank calls a barrier, the
    others 1.5 s later than rank 0 (so rank 0's timeout fires first). Rank 0 stays alive 2 s
    after its error. Returns the call that raised, its message and this rank's Flight Recorder
    dump."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(2)
    dist.all_reduce(x, group=group)  # every rank: collective 1
    if rank == 0:
        seen = outcome("all_reduce", lambda: dist.all_reduce(x, group=group))
        time.sleep(2.0)  # alive past the others' own timeout: whatever they see, it is no exit
    else:
        time.sleep(1.5)  # some work of its own first
        seen = {"error": None}
    if seen["error"] is None:
        start = time.monotonic()
        seen = outcome("barrier", lambda: dist.barrier(group=group))
        seen["barrier_s"] = time.monotonic() - start  # how long this rank's barrier lasted
    seen["dump"] = json.loads(_dump_fr_trace_json(includeCollectives=True))
    return seen


def wait_timeout_worker(rank: int, world_size: int, group_s: float, wait_s: float) -> dict:
    """Rank 1 is late for everything. Rank 0 waits for an all_reduce with a timeout shorter than
    the group's, then for an isend (on a group of its own) with the same, then for the isend and
    the all_reduce again with none; each wait's outcome says how long after the all_reduce's
    start it ended, and `completed` what is_completed() said after the first two waits."""
    group = dist.new_group(timeout=timedelta(seconds=group_s))
    p2p = dist.new_group(timeout=timedelta(seconds=group_s))  # what the isend's timeout breaks
    x = torch.ones(2)
    if rank == 1:
        time.sleep(group_s + 1)  # late for everything rank 0 waits on
        return {"waits": [], "completed": {}}
    start, waits = time.monotonic(), []

    def timed(call: str, fn) -> None:
        waits.append(outcome(call, fn) | {"at_s": time.monotonic() - start})

    work = dist.all_reduce(x, group=group, async_op=True)
    timed("all_reduce's work.wait(timeout)", lambda: work.wait(timeout=timedelta(seconds=wait_s)))
    send = dist.isend(x, dst=1, group=p2p)
    timed("isend's work.wait(timeout)", lambda: send.wait(timeout=timedelta(seconds=wait_s)))
    completed = {"all_reduce": work.is_completed(), "isend": send.is_completed()}  # ~2 s in
    timed("isend's work.wait()", lambda: send.wait())
    timed("all_reduce's work.wait()", lambda: work.wait())
    return {"waits": waits, "completed": completed}


def dead_peer_worker(rank: int, world_size: int, timeout_s: float) -> None:
    """Rank 1 exits after one all_reduce; rank 0 calls a second one (and raises)."""
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(2)
    dist.all_reduce(x, group=group)
    if rank == 1:
        os._exit(3)  # a crash: no exception, no cleanup, the sockets close
    time.sleep(0.3)  # rank 1 is gone by now
    dist.all_reduce(x, group=group)


def torchrun_job(mode: str, timeout_s: float = 3.0) -> None:
    """A torchrun worker: one all_reduce; then rank 1 dies ("dead") or lives on calling no
    collective ("hung"), while rank 0 works for 1 s and calls a second all_reduce."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))  # env:// from torchrun
    x = torch.ones(2)
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        if mode == "dead":
            os._exit(3)  # a crash, as in dead_peer_worker
        time.sleep(timeout_s + 30)  # alive, in no collective: hung
    time.sleep(1.0)  # work of its own (rank 1, when dead, has exited by now)
    dist.all_reduce(x)


# -- 19 · 2. Mismatches found, not guessed: fingerprints and a monitored barrier ------------------


def fingerprint_worker(
    rank: int, world_size: int, mismatch: str, odd: tuple = (1,), timeout_s: float = 5.0
) -> dict:
    """One all_reduce under DETAIL debugging, which the ranks in `odd` get wrong: a longer
    tensor ("shape"), a broadcast instead ("op"), or they never call it ("skip")."""
    dist.set_debug_level(dist.DebugLevel.DETAIL)  # what TORCH_DISTRIBUTED_DEBUG=DETAIL sets
    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    x = torch.ones(3 if rank in odd and mismatch == "shape" else 2)
    start = time.monotonic()
    if rank in odd and mismatch == "skip":
        time.sleep(timeout_s + 2)  # never calls the all_reduce
        seen = {"call": "sleep", "error": None}
    elif rank in odd and mismatch == "op":
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


# -- 19 · 3. The Flight Recorder: every rank's last collectives -----------------------------------


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
    does, without its verbose flag) on one dump per rank. With `ranks`, each dump's pg_config is
    replaced by one group per group name its entries carry (`process_group[0]`, what the analyzer
    looks up), with these members. Returns plain data: the collectives it matched and its log."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    args = JobConfig().parse_args(args=[])
    args.allow_incomplete_ranks = True
    details = {}
    for rank, dump in enumerate(dumps):
        dump = json.loads(json.dumps(dump))  # a copy: the caller's dumps stay as recorded
        if ranks is not None:
            groups = {e["process_group"][0] for e in dump.get("entries", [])}
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


# -- 19 · 4. Where is every rank right now? -------------------------------------------------------


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


def fetch(url: str, handler: str, timeout_s: float = 3.0) -> str:
    """POST to a worker server's handler, as the debug server's frontend does."""
    request = urllib.request.Request(f"{url}/handler/{handler}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read().decode()


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


# -- 19 · 5. The store: who never arrived ---------------------------------------------------------


def rendezvous_worker(rank: int, world_size: int, port: int, missing: list, timeout_s: float):
    """Every rank not in `missing` builds a gloo group through the TCPStore at `port`."""
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    if rank in missing:
        time.sleep(timeout_s + 2)  # never arrives at the rendezvous
        return {"call": "sleep", "error": None}
    job = dist.PrefixStore("job", store)  # the group's keys start with job/
    timeout = timedelta(seconds=timeout_s)
    return outcome(
        "ProcessGroupGloo", lambda: dist.ProcessGroupGloo(job, rank, world_size, timeout)
    )


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
