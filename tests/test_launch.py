"""The launcher: results, capture, and every failure mode (clear error, no process left)."""

from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def four_ranks():
    """One 4-rank launch of sum_worker, read by two tests (each launch starts N interpreters
    that import torch: about 1.5 s of CPU each)."""
    return launch(w.sum_worker, 4, args=(3,))


def test_results_in_rank_order_with_outputs_captured(four_ranks) -> None:
    res = four_ranks
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


def test_each_launch_is_logged_where_psr_launch_log_says(monkeypatch, tmp_path: Path) -> None:
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv("PSR_LAUNCH_LOG", str(log))
    launch(w.sum_worker, 1, args=(2,))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    expected = [{"fn": "sum_worker", "world_size": 1, "asked": "auto", "chosen": "gloo"}]
    assert rows == expected, f"expected {expected}, found {rows}"


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
    timeout = 300  # only a bound: the raise ends the launch long before (3 starts at any load)
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
    # tighter wall-clock bound: three torch imports on a loaded machine take what they take
    assert elapsed < timeout, (
        f"expected the error before the {timeout} s timeout, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


@pytest.mark.parametrize(
    ("how", "reason"), [("exit", "exit code 3"), ("abort", "killed by SIGABRT")]
)
def test_a_rank_that_dies_is_named(how: str, reason: str) -> None:
    with pytest.raises(WorkerError) as info:
        launch(w.exit_worker, 2, args=(0, how), timeout_s=300)  # a bound: it dies long before
    assert info.value.rank == 0
    assert f"rank 0 died without a result ({reason}" in str(info.value)
    _assert_no_process_left(info.value)


def _hang_until_timeout(tmp_path: Path) -> tuple[LaunchTimeout, int, float]:
    """A launch whose rank 1 hangs, timed out only once both ranks sat where they hang (rank 1
    spinning, rank 0 in the barrier) well before the deadline: their markers say so. A machine
    too loaded for that within the timeout (torch imports; 8 s was not enough at load 15) gets
    a longer one, so the stack dumps always show the hang, never an import."""
    for timeout in (15, 60, 240):
        markers = tmp_path / f"timeout{timeout}"
        markers.mkdir()
        start, start_wall = time.monotonic(), time.time()
        with pytest.raises(LaunchTimeout) as info:
            launch(w.hang_worker, 2, args=(1, str(markers)), timeout_s=timeout)
        elapsed = time.monotonic() - start
        times = [m.stat().st_mtime for m in markers.iterdir()]
        if len(times) == 2 and max(times) < start_wall + timeout - 2:
            return info.value, timeout, elapsed
    raise AssertionError(f"the workers did not reach hang_worker within {timeout} s")


def test_a_hanging_rank_times_out_naming_the_ranks(tmp_path: Path) -> None:
    err, timeout, elapsed = _hang_until_timeout(tmp_path)
    assert isinstance(err, TimeoutError)
    assert err.ranks == [0, 1]  # rank 0 waits in the barrier for rank 1
    text = str(err)
    assert text.startswith("ranks [0, 1] did not finish within the timeout")
    # where each rank was stuck, from the workers' own stack dumps
    assert "--- rank 1 ---" in text and "in hang_worker" in text
    assert "in barrier" in text.split("--- rank 1 ---")[0]
    # not before the deadline (the claim), and bounded after it: launch sleeps 0.5 s for the
    # dumps and waits at most 5 s per killed worker; the bound leaves a loaded machine a minute
    # for that (bounded, not fast: a launch that waited for its hung workers never ends)
    bound = timeout + 60
    assert timeout <= elapsed < bound, (
        f"expected {timeout} s <= elapsed < {bound} s, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


def test_nothing_listens_on_a_non_loopback_address(four_ranks) -> None:
    assert any(r["sockets"] for r in four_ranks), "gloo should listen somewhere (on loopback)"
    for rank, r in enumerate(four_ranks):
        for addr in r["sockets"]:
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
    launch(w.hang_worker, 2, args=(-1, {markers!r}), timeout_s=600)
    """
)


def _start_parent(markers: Path) -> tuple[subprocess.Popen, list[int]]:
    """A parent whose two workers both spin in hang_worker (their markers say so: past the
    process group and the death signal, whatever the load), and the workers' pids."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT.format(here=str(HERE), markers=str(markers))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(markers.iterdir())) < 2:
        time.sleep(0.2)
    workers = _worker_children(parent.pid)
    assert len(workers) == 2 and len(list(markers.iterdir())) == 2, (
        f"expected 2 workers in hang_worker within 300 s, found pids {workers}"
    )
    return parent, workers


def test_interrupt_stops_every_worker(tmp_path: Path) -> None:
    """JupyterLab's Interrupt sends SIGINT to the kernel: the launch stops all workers."""
    parent, workers = _start_parent(tmp_path)
    parent.send_signal(signal.SIGINT)
    _, err = parent.communicate(timeout=120)  # a bound: it stops in well under a second
    assert "KeyboardInterrupt" in err
    assert wait_gone(workers, 5) == [], "workers outlived an interrupted launch"


def test_killed_parent_takes_its_workers_along(tmp_path: Path) -> None:
    """A kernel killed outright (SIGKILL) cannot clean up: the workers die with it anyway."""
    parent, workers = _start_parent(tmp_path)
    parent.kill()
    parent.communicate(timeout=120)
    # PR_SET_PDEATHSIG: the kernel SIGKILLs them as the parent dies (30 s: a bound, not a wait)
    assert wait_gone(workers, 30) == [], "workers outlived a SIGKILLed parent"
