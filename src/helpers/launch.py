"""Run a function on N ranks inside a real process group, safely, from a notebook.

Used by: 04 (collectives), 05 (all-reduce), 06-08 (DDP, SyncBN, no_sync) and their tests.
CPU with gloo everywhere; NCCL with one GPU per rank when enough GPUs are visible.

    results = launch(fn, world_size=4, args=(x,))   # fn(rank, world_size, *args) on each rank
    results[rank]         # what rank returned (plain Python data is best)
    results.backend       # "gloo" or "nccl": what backend="auto" chose
    results.outputs[r]    # what rank r printed while fn ran (stdout and stderr, fd level)

Why it is built this way (each point is a pitfall measured on the pinned stack):
- Workers are fresh Python processes (like `spawn`, never `fork`: the multiprocessing docs
  call forking a multithreaded process, which torch's is, problematic); they
  import `fn` by reference, so a function defined in a notebook (`__main__`) cannot work and is
  refused before anything starts. Unlike multiprocessing's spawn they do not re-import the
  parent's `__main__`, which fails in some kernels and scripts.
- Rendezvous is a `file://` store in a fresh temporary folder (a TCPStore would listen on every
  interface), and GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME pin the backends to the loopback
  interface: without the pin gloo listens where the host name resolves (loopback if it fails).
  tests/test_collectives.py checks gloo on a host whose name resolves off loopback. A file
  store needs no agreed port, so concurrent launches cannot collide on one.
- Results travel as pickle files renamed into place, never through a pipe: no deadlock for large
  results, and tensors survive their worker (a queue would hand back shared memory that dies).
- Each worker writes its stdout/stderr (file descriptors 1 and 2, so C++ output too) to a file
  per rank; the parent hands it back in rank order. Output from start-up and teardown (before
  `fn` starts, after it returns) is kept apart and only shown when something fails.
- Faults end within `timeout_s` plus a few seconds with an error naming the rank, and no worker
  outlives the call: workers run in their own process groups and are killed on any failure,
  timeout or KeyboardInterrupt (JupyterLab's "Interrupt"), and die with the parent if the
  kernel itself is killed (PR_SET_PDEATHSIG).
- Teardown is a barrier then `destroy_process_group`: without the barrier, rank 0 sometimes
  aborted at exit ("terminate called without an active exception"; 2 of 12 four-rank runs
  measured on torch 2.13 CPU, 0 of 16 with it).
"""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from helpers.processes import LOOPBACK_IFNAME, child_env, set_pdeathsig

__all__ = [
    "launch",
    "LaunchResult",
    "LaunchError",
    "WorkerError",
    "LaunchTimeout",
    "choose_backend",
    "current_device",
    "show_outputs",
]

_POLL_S = 0.02
_GRACE_S = 1.0  # after a first failure: time for the other ranks' errors to arrive
_TEARDOWN_S = 15.0  # after every rank returned: time for barrier + destroy_process_group
_TAIL_CHARS = 4000  # how much of a failed rank's captured output goes into the error
# Errors a rank gets only because a peer went away: reported after the peer's own failure.
_KNOCK_ON = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "ECONNRESET")

_device: torch.device | None = None  # set inside a worker


class LaunchError(RuntimeError):
    """Base class: something went wrong on one or more ranks. `pids` lists the workers."""

    def __init__(self, message: str, pids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.pids = list(pids)


class WorkerError(LaunchError):
    """A rank raised (or died). `rank` is the first to fail; `ranks` every failed rank."""

    def __init__(self, message: str, rank: int, ranks: Sequence[int], pids: Sequence[int]):
        super().__init__(message, pids)
        self.rank = rank
        self.ranks = list(ranks)


class LaunchTimeout(LaunchError, TimeoutError):
    """Some ranks did not return within the timeout. `ranks` lists them."""

    def __init__(self, message: str, ranks: Sequence[int], pids: Sequence[int]):
        super().__init__(message, pids)
        self.ranks = list(ranks)


class LaunchResult(list):
    """Per-rank return values in rank order, plus what the launch chose and captured."""

    def __init__(self, values: Sequence[Any], backend: str, outputs: Sequence[str]):
        super().__init__(values)
        self.backend = backend
        self.world_size = len(values)
        self.outputs = list(outputs)


def choose_backend(world_size: int, backend: str = "auto") -> str:
    """Resolve `backend` for `world_size` ranks on this machine, or raise saying why not.

    "auto" is NCCL with one GPU per rank when NCCL is built in and at least `world_size` GPUs
    are visible, gloo on CPU otherwise.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        if dist.is_nccl_available() and gpus >= world_size:
            return "nccl"
        return "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("backend='nccl' asked for, but this torch build has no NCCL")
        if gpus < world_size:
            raise RuntimeError(
                f"backend='nccl' needs one GPU per rank: world_size={world_size} "
                f"but {gpus} CUDA device(s) are visible"
            )
        return "nccl"
    if backend == "gloo":
        return "gloo"
    if backend == "mpi":
        if not dist.is_mpi_available():
            raise RuntimeError("backend='mpi' asked for, but this torch build has no MPI")
        raise RuntimeError("backend='mpi' needs mpirun to start the ranks, not this launcher")
    raise ValueError(f"unknown backend {backend!r}: use 'auto', 'gloo' or 'nccl'")


def current_device() -> torch.device:
    """The device this rank should use: `cuda:<rank>` under NCCL, else CPU."""
    return _device if _device is not None else torch.device("cpu")


def show_outputs(result: LaunchResult) -> None:
    """Print what each rank printed, in rank order, each line prefixed with its rank."""
    for rank, text in enumerate(result.outputs):
        for line in text.splitlines():
            print(f"[rank {rank}] {line}")


def _check_fn(fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"launch() needs a callable fn(rank, world_size, ...), got {fn!r}")
    target = fn.func if isinstance(fn, functools.partial) else fn
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", "")
    name = getattr(target, "__name__", repr(target))
    if module == "__main__":
        raise ValueError(
            f"launch() cannot run {name!r}: it is defined in the notebook (module __main__: "
            "a notebook's cells or the script being run), and workers are new processes that "
            "import functions by reference, which __main__ does not allow. Put it in a module "
            "(for example src/helpers/<topic>.py) and import it from there."
        )
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(
            f"launch() cannot run {qualname!r}: lambdas and nested functions cannot be "
            "imported by a spawned worker; define it at the top level of a module."
        )


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies (a killed kernel)."""
    if set_pdeathsig(signal.SIGKILL) and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect


def _redirect(path: Path) -> None:
    """Point fds 1 and 2 (and sys.stdout/err) at `path`, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _write_result(workdir: Path, rank: int, payload: tuple) -> None:
    tmp = workdir / f"result{rank}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, workdir / f"result{rank}.pkl")  # atomic: the parent never reads half


def _worker_main(rank: int, workdir: str) -> None:
    """Entry point of a worker process: set up the process group, run fn, report, tear down.

    Started by `launch` as `python -c ...` with stdout/stderr already going to the rank's
    set-up log; reads what to run from `workdir/payload.pkl`.
    """
    global _device
    work = Path(workdir)
    with open(work / "payload.pkl", "rb") as f:
        world_size, backend, deadline, parent_pid, payload = pickle.load(f)
    _die_with_parent(parent_pid)
    setup_log = work / f"rank{rank}.setup.log"
    fn_log = work / f"rank{rank}.log"
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
    faulthandler.enable(file=sys.stderr)  # a C++ abort still shows the Python stack
    # At the deadline, dump every thread's stack: the parent quotes it in LaunchTimeout.
    faulthandler.dump_traceback_later(max(deadline - time.time(), 0.1), file=sys.stderr)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        GLOO_SOCKET_IFNAME=LOOPBACK_IFNAME,
        NCCL_SOCKET_IFNAME=LOOPBACK_IFNAME,
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        fn, args = pickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(rank)
            _device = torch.device("cuda", rank)
        else:
            _device = torch.device("cpu")
        dist.init_process_group(
            backend,
            init_method=(work / "store").as_uri(),
            rank=rank,
            world_size=world_size,
            # longer than the launch deadline, so the parent's clearer timeout comes first
            timeout=timedelta(seconds=max(deadline - time.time(), 1.0) + 30),
        )
        _redirect(fn_log)
        value = fn(rank, world_size, *args)
        _redirect(setup_log)
        _write_result(work, rank, ("ok", value))
    except BaseException as err:  # noqa: BLE001 - everything is reported to the parent
        tb = traceback.format_exc()
        try:
            _write_result(work, rank, ("error", f"{type(err).__name__}: {err}", tb))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)  # peers may be blocked in a collective: do not wait for them
    dist.barrier()  # every rank is done with collectives before any tears down
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.flush()
    sys.stderr.flush()


# The death signal comes first, before `helpers.launch` imports torch (a second or more of CPU):
# a parent killed while its workers still import torch takes them along at once, not after the
# import (helpers.processes imports no torch). _worker_main sets it again, harmlessly.
_BOOT = (
    "import os, signal; from helpers.processes import set_pdeathsig; "
    "set_pdeathsig(signal.SIGKILL) and os.getppid() != {parent} and os._exit(1); "
    "from helpers.launch import _worker_main; _worker_main({rank}, {workdir!r})"
)


def _start(rank: int, workdir: Path) -> subprocess.Popen:
    env = child_env()  # the worker imports fn by reference: it needs our import path
    env["PYTHONUNBUFFERED"] = "1"
    boot = _BOOT.format(parent=os.getpid(), rank=rank, workdir=str(workdir))
    with open(workdir / f"rank{rank}.setup.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", boot],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=os.getcwd(),
            start_new_session=True,  # own process group: a kill reaches its children too
        )


def _kill(procs: Sequence[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and anything it started
        except (ProcessLookupError, PermissionError):
            pass
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL_CHARS else "...\n" + text[-_TAIL_CHARS:]


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _log_launch(fn: Callable[..., Any], world_size: int, asked: str, chosen: str) -> None:
    """Append one JSON line per launch to the file named by PSR_LAUNCH_LOG, if set: the worker,
    the world size, the backend asked for and the one chosen. `make test-gpu` (tools/gpu_check.py)
    sets it per notebook, so its report says which launches took NCCL and which ran on gloo."""
    path = os.environ.get("PSR_LAUNCH_LOG")
    if not path:
        return
    row = {"fn": getattr(fn, "__qualname__", repr(fn)), "world_size": world_size}
    row.update(asked=asked, chosen=chosen)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    backend: str = "auto",
    timeout_s: float = 60.0,
) -> LaunchResult:
    """Run `fn(rank, world_size, *args)` on `world_size` ranks; return their values in order.

    `fn` must be importable (defined at the top level of a module, not in a notebook). The whole
    launch, start-up included, must finish within `timeout_s` seconds. Raises WorkerError if a
    rank raises or dies (naming it, with its traceback), LaunchTimeout naming the ranks that did
    not finish (with where each was stuck), and leaves no worker process behind in any case.
    """
    _check_fn(fn)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    chosen = choose_backend(world_size, backend)
    _log_launch(fn, world_size, backend, chosen)
    try:
        payload = pickle.dumps((fn, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:
        raise TypeError(f"launch() cannot send fn/args to the workers: {err}") from err

    workdir = Path(tempfile.mkdtemp(prefix="launch-"))
    deadline = time.time() + timeout_s
    with open(workdir / "payload.pkl", "wb") as f:
        pickle.dump((world_size, chosen, deadline, os.getpid(), payload), f)
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            procs.append(_start(rank, workdir))
        values = _collect(procs, workdir, deadline)
        # every rank returned: give teardown (barrier + destroy) a moment, then make sure
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline + _TEARDOWN_S - time.time()))
            except subprocess.TimeoutExpired:
                pass
        outputs = [_read(workdir / f"rank{r}.log") for r in range(world_size)]
        return LaunchResult(values, chosen, outputs)
    finally:
        _kill(procs)  # no-op when all exited; otherwise nothing outlives the call
        shutil.rmtree(workdir, ignore_errors=True)


def _collect(procs: list[subprocess.Popen], workdir: Path, deadline: float) -> list[Any]:
    """Wait for every rank's result; raise on the first failure or at the deadline."""
    world_size = len(procs)
    results: dict[int, tuple] = {}
    failed: list[int] = []  # in the order the parent saw them fail
    first_failure_at: float | None = None
    pids = [p.pid for p in procs]
    while True:
        for rank, p in enumerate(procs):
            if rank in results:
                continue
            path = workdir / f"result{rank}.pkl"
            if path.exists():
                with open(path, "rb") as f:
                    results[rank] = pickle.load(f)
            elif p.poll() is not None:
                time.sleep(_POLL_S)  # it may have exited right after the rename
                if path.exists():
                    continue
                results[rank] = ("died", _exit_reason(p.returncode))
            else:
                continue
            if results[rank][0] != "ok":
                failed.append(rank)
                first_failure_at = first_failure_at or time.time()
        if len(results) == world_size and not failed:
            return [results[r][1] for r in range(world_size)]
        if failed and (len(results) == world_size or time.time() > first_failure_at + _GRACE_S):
            _kill(procs)
            raise _worker_error(failed, results, workdir, pids)
        if time.time() > deadline:
            time.sleep(0.5)  # the workers' faulthandler dumps their stacks at the deadline
            _kill(procs)
            raise _timeout_error(results, workdir, deadline, pids, world_size)
        time.sleep(_POLL_S)


def _worker_error(
    failed: list[int], results: dict[int, tuple], workdir: Path, pids: list[int]
) -> WorkerError:
    # Put the cause first: a rank that lost its peer is a consequence, whoever was seen first.
    def knock_on(rank: int) -> bool:
        kind, *info = results[rank]
        return kind == "error" and any(marker in info[0] for marker in _KNOCK_ON)

    failed = sorted(failed, key=knock_on)  # stable: otherwise in the order they were seen
    first = failed[0]
    parts = []
    for rank in failed:
        kind, *info = results[rank]
        if kind == "error":
            summary, tb = info
            parts.append(f"rank {rank} raised {summary}\n--- traceback of rank {rank} ---\n{tb}")
        else:
            log = _read(workdir / f"rank{rank}.setup.log") + _read(workdir / f"rank{rank}.log")
            parts.append(
                f"rank {rank} died without a result ({info[0]})\n"
                f"--- output of rank {rank} ---\n{_tail(log)}"
            )
    others = f" (then also ranks {failed[1:]})" if len(failed) > 1 else ""
    head = f"rank {first} failed{others}; all workers were stopped.\n"
    return WorkerError(head + "\n".join(parts), first, failed, pids)


def _timeout_error(
    results: dict[int, tuple], workdir: Path, deadline: float, pids: list[int], world_size: int
) -> LaunchTimeout:
    stuck = [r for r in range(world_size) if r not in results]
    done = [r for r in range(world_size) if r in results]
    parts = [
        f"ranks {stuck} did not finish within the timeout"
        + (f" (ranks {done} did)" if done else "")
        + "; all workers were stopped. Where each unfinished rank was:"
    ]
    for rank in stuck:
        log = _read(workdir / f"rank{rank}.setup.log") + _read(workdir / f"rank{rank}.log")
        marker = log.rfind("Thread 0x")
        parts.append(f"--- rank {rank} ---\n{_tail(log[marker:] if marker >= 0 else log)}")
    return LaunchTimeout("\n".join(parts), stuck, pids)
