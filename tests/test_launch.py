"""The launcher: results, capture, and every failure mode (clear error, no process left)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import launch_workers as w
import pytest
import torch

from helpers.launch import LaunchTimeout, WorkerError, choose_backend, launch
from helpers.processes import alive, is_loopback, wait_gone

HERE = Path(__file__).resolve().parent


def _worker_children(pid: int) -> list[int]:
    """Live launcher workers whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == pid and b"_worker_main" in cmd and alive(int(entry)):
            found.append(int(entry))
    return found


def _assert_no_process_left(err: Exception | None = None) -> None:
    assert _worker_children(os.getpid()) == [], "a launcher worker outlived the call"
    for pid in getattr(err, "pids", []):
        assert not alive(pid), f"worker pid {pid} still alive"


def test_results_in_rank_order_with_outputs_captured() -> None:
    res = launch(w.sum_worker, 4, args=(3,))
    assert [r["rank"] for r in res] == [0, 1, 2, 3]
    assert [r["env_rank"] for r in res] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 10.0 for r in res)
    assert res.backend == "gloo" == res[0]["backend"]
    assert all(r["device"] == "cpu" for r in res)
    # stdout and stderr of each rank, in that rank's order, and nothing from set-up (gloo chatter)
    assert res.outputs == [f"rank {r} says hello\nrank {r} second line\n" for r in range(4)]
    _assert_no_process_left()


def test_world_size_one() -> None:
    res = launch(w.sum_worker, 1, args=(2,))
    assert res[0]["sum"] == 1.0 and res.world_size == 1


def test_results_larger_than_a_pipe_buffer_come_back() -> None:
    n = 2_000_000  # ~16 MB of int64 per rank, far beyond a 64 KB pipe buffer
    res = launch(w.big_worker, 2, args=(n,))
    assert len(res[1]["list"]) == n and res[1]["list"][-1] == n - 1
    # a tensor survives its worker (a multiprocessing queue would hand back dead shared memory)
    assert torch.equal(res[0]["tensor"], torch.arange(n))


def test_notebook_function_is_refused_before_anything_starts() -> None:
    fn = types.FunctionType(w.sum_worker.__code__, {}, "defined_in_notebook")
    fn.__module__ = "__main__"
    with pytest.raises(
        ValueError, match=r"defined in the notebook \(module __main__.*Put it in a module"
    ):
        launch(fn, 2)
    with pytest.raises(ValueError, match="lambdas and nested functions"):
        launch(lambda rank, ws: rank, 2)
    _assert_no_process_left()


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True])
def test_bad_world_size(bad: object) -> None:
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        launch(w.sum_worker, bad)  # type: ignore[arg-type]


def test_bad_fn_and_backend() -> None:
    with pytest.raises(TypeError, match="needs a callable"):
        launch(42, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown backend"):
        launch(w.sum_worker, 2, backend="carrier-pigeon")
    too_many = torch.cuda.device_count() + 1
    with pytest.raises(RuntimeError, match="nccl"):
        launch(w.sum_worker, too_many, backend="nccl")


def test_auto_backend_choice() -> None:
    gpus = torch.cuda.device_count()
    expected = "nccl" if gpus >= 2 and torch.distributed.is_nccl_available() else "gloo"
    assert choose_backend(2) == expected
    assert choose_backend(gpus + 1) == "gloo"


def test_a_rank_that_raises_is_named_with_its_traceback() -> None:
    timeout = 30
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(w.raise_worker, 3, args=(1,), timeout_s=timeout)
    elapsed = time.monotonic() - start
    err = info.value
    assert err.rank == 1
    text = str(err)
    assert text.startswith("rank 1 failed")
    assert "rank 1 raised ValueError: boom on rank 1" in text
    assert "--- traceback of rank 1 ---" in text and "raise_worker" in text
    # the raise ends the launch before its deadline (a timeout would be a LaunchTimeout); no
    # fixed wall-clock bound: three torch imports on a loaded machine take what they take
    assert elapsed < timeout, (
        f"expected the error before the {timeout} s timeout, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


@pytest.mark.parametrize(
    ("how", "reason"), [("exit", "exit code 3"), ("abort", "killed by SIGABRT")]
)
def test_a_rank_that_dies_is_named(how: str, reason: str) -> None:
    with pytest.raises(WorkerError) as info:
        launch(w.exit_worker, 2, args=(0, how), timeout_s=30)
    assert info.value.rank == 0
    assert f"rank 0 died without a result ({reason}" in str(info.value)
    _assert_no_process_left(info.value)


def test_a_hanging_rank_times_out_naming_the_ranks() -> None:
    # long enough for the workers to import torch and reach hang_worker on a loaded 2-core
    # machine (8 s was not, at load 15): only then do their stack dumps name it
    timeout = 15
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(w.hang_worker, 2, args=(1,), timeout_s=timeout)
    elapsed = time.monotonic() - start
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.ranks == [0, 1]  # rank 0 waits in the barrier for rank 1
    text = str(err)
    assert text.startswith("ranks [0, 1] did not finish within the timeout")
    # where each rank was stuck, from the workers' own stack dumps
    assert "--- rank 1 ---" in text and "in hang_worker" in text
    assert "in barrier" in text.split("--- rank 1 ---")[0]
    # not before the deadline (the claim); after it, launch only sleeps 0.5 s for the stack
    # dumps and kills each worker with a wait of at most 5 s, so that is the bound, plus 5 s of
    # polling slack, independent of how long the workers took to start
    bound = timeout + 0.5 + 5 * 2 + 5
    assert timeout <= elapsed < bound, (
        f"expected {timeout} s <= elapsed < {bound} s, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


def test_nothing_listens_on_a_non_loopback_address() -> None:
    res = launch(w.sockets_worker, 2)
    assert any(res), "gloo should listen somewhere (on loopback)"
    for rank, addresses in enumerate(res):
        for addr in addresses:
            assert is_loopback(addr), f"rank {rank} listens on {addr}"


_SCRIPT = textwrap.dedent(
    """
    import signal, sys
    # A Jupyter kernel turns SIGINT into KeyboardInterrupt; a process started in the
    # background by a non-interactive shell (as CI may be) inherits SIGINT *ignored*.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {here!r})
    import launch_workers as w
    from helpers.launch import launch
    print("starting", flush=True)
    launch(w.hang_worker, 2, args=(-1,), timeout_s=120)
    """
)


def _start_parent() -> tuple[subprocess.Popen, list[int]]:
    parent = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT.format(here=str(HERE))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.2)
        workers = _worker_children(parent.pid)
    assert len(workers) == 2, "workers did not start"
    time.sleep(2)  # let them get into the process group
    return parent, workers


def test_interrupt_stops_every_worker() -> None:
    """JupyterLab's Interrupt sends SIGINT to the kernel: the launch stops all workers."""
    parent, workers = _start_parent()
    parent.send_signal(signal.SIGINT)
    _, err = parent.communicate(timeout=30)
    assert "KeyboardInterrupt" in err
    assert wait_gone(workers, 5) == [], "workers outlived an interrupted launch"


def test_killed_parent_takes_its_workers_along() -> None:
    """A kernel killed outright (SIGKILL) cannot clean up: the workers die with it anyway."""
    parent, workers = _start_parent()
    parent.kill()
    parent.communicate(timeout=30)
    # A worker still importing torch when the parent dies only checks getppid() once the
    # import is done (helpers.launch._die_with_parent): seconds on a loaded 2-core machine.
    assert wait_gone(workers, 30) == [], "workers outlived a SIGKILLed parent"
