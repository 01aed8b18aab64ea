"""Tests of helpers.train_ddp (the torchrun training script) and helpers.torchrun (its launcher).

Each torchrun run costs several seconds (torch is imported by torchrun and by every worker), so
the runs are few and each checks several things. Rendezvous and sockets stay on loopback.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import train_ddp
from helpers.processes import free_port, wait_gone
from helpers.torchrun import (
    TorchrunTimeout,
    agent_store_rule,
    run_torchrun,
    start_torchrun,
    torchrun_command,
)
from helpers.train_ddp import CheckpointError, load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo"}
MIN_ACCURACY = 0.85  # after 3 epochs on 2 ranks with dropout and augmentation
# the reference run and the killed runs: randomness everywhere a resume could lose it
RANDOM = ["--dropout", "0.2", "--augment", "--workers", "2"]


def _train(out_dir: Path, *extra: str, env: dict | None = None, **kwargs):
    """Run the training script under torchrun (through helpers.torchrun) on this machine.

    A run takes 5-25 s here; one that hangs is stopped after 180 s and its whole log (agent and
    every worker) is printed, so the failure report shows where each process was."""
    args = ["-m", "helpers.train_ddp", "--out-dir", str(out_dir), "--device", "cpu", *extra]
    try:
        return run_torchrun(args, timeout_s=180, env={**LOOPBACK, **(env or {})}, **kwargs)
    except TorchrunTimeout as err:
        print(err.result.log)  # pytest shows captured stdout with the failure
        raise


def _history(out_dir: Path) -> list[dict]:
    return load_checkpoint(out_dir / "last.pt")["history"]


# --------------------------------------------------------------------------------------------
# the data and the command line (in-process, cheap)
# --------------------------------------------------------------------------------------------


def test_shipped_digits_load_with_numpy_only() -> None:
    with np.load(ROOT / "data" / "digits.npz") as d:  # allow_pickle=False: arrays only
        shapes = {k: d[k].shape for k in d.files}
        y = np.concatenate([d["y_train"], d["y_test"]])
        assert d["x_train"].dtype == np.uint8 and d["x_train"].max() <= 16
    assert shapes["x_train"][1:] == (8, 8) and shapes["x_test"][1:] == (8, 8)
    assert shapes["x_train"][0] + shapes["x_test"][0] == 1797  # the UCI test set in sklearn
    assert sorted(set(y.tolist())) == list(range(10))
    data = train_ddp.load_digits()
    assert data["x_train"].shape == (1438, 1, 8, 8) and float(data["x_train"].max()) <= 1.0


def test_help_lists_the_classic_options() -> None:
    text = train_ddp.build_parser().format_help()
    options = "--epochs --batch-size --lr --lrf --syncBN --weights --freeze-layers --device"
    options += " --num-classes --world-size --dist-url --scale-lr --dropout --augment"
    for opt in (options + " --seed --out-dir --resume --data").split():
        assert opt in text, f"{opt} missing from --help"
    for env in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "env://"):
        assert env in text, f"--help does not say how {env} maps onto the options"
    with pytest.raises(SystemExit) as info:
        train_ddp.build_parser().parse_args(["--help"])
    assert info.value.code == 0


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--world-size", "4"], {"RANK": "0", "WORLD_SIZE": "2"}, "conflicts with WORLD_SIZE=2"),
        (["--world-size", "2"], {}, "need RANK in the environment"),
        (["--dist-url", "tcp://127.0.0.1:1"], {}, "need RANK in the environment"),
        (["--num-classes", "5"], {}, "labels go up to 9"),
    ],
)
def test_conflicting_options_are_clear_errors(argv, env, message, monkeypatch, tmp_path) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=message):
        train_ddp.main([*argv, "--out-dir", str(tmp_path), "--epochs", "1"])


def test_lr_schedule_ends_at_lr_times_lrf() -> None:
    lrs = [0.05 * train_ddp.lr_factor(e, 5, 0.1) for e in range(5)]
    assert lrs[0] == 0.05 and lrs[-1] == 0.05 * 0.1, lrs  # first lr, last lr*lrf, exactly
    assert lrs == sorted(lrs, reverse=True) and train_ddp.lr_factor(0, 1, 0.1) == 1.0


def test_scaled_lr_rescales_a_checkpoint_saved_under_another_world_size() -> None:
    """--scale-lr: a run saved with base lr 0.05 (1 process) resumed by 2 processes (0.1)."""
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: train_ddp.lr_factor(e, 3, 0.1))
    opt.step()
    sched.step()
    run = types.SimpleNamespace(optimizer=opt, scheduler=sched, base_lr=0.1)
    info = types.SimpleNamespace(rank=1)  # not rank 0: logs nothing
    before = opt.param_groups[0]["lr"]
    train_ddp._rescale_lr(run, info)
    assert opt.param_groups[0]["lr"] == pytest.approx(2 * before)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.1)  # the last epoch: lr * lrf


# --------------------------------------------------------------------------------------------
# checkpoints: round trip, truncated, foreign, malicious
# --------------------------------------------------------------------------------------------


def _checkpoint() -> dict:
    model = train_ddp.DigitsNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3, eta_min=0.01)
    return {
        "format": train_ddp.CHECKPOINT_FORMAT,
        "epoch": 1,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": [train_ddp._rng_state()],
        "history": [{"epoch": 1, "loss": 0.5, "accuracy": 0.9, "lr": 0.1, "attempt": 0}],
        "args": {"epochs": 3, "out_dir": "runs/x", "syncBN": False, "weights": ""},
    }


def test_checkpoint_round_trip_is_weights_only_and_atomic(tmp_path: Path) -> None:
    path = tmp_path / "ck" / "last.pt"
    save_checkpoint(_checkpoint(), path)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]  # no temp file left
    ck = load_checkpoint(path)  # weights_only=True inside: RNG states are tensors/plain types
    before = torch.get_rng_state()
    train_ddp._set_rng_state(ck["rng"][0])
    assert ck["history"][0]["epoch"] == 1 and isinstance(ck["rng"][0]["torch"], torch.Tensor)
    torch.set_rng_state(before)


def test_truncated_checkpoint_is_rejected_clearly(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(_checkpoint(), path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as info:
        load_checkpoint(path)
    assert info.value.__suppress_context__  # one clear line, not the zip reader's stack
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        load_checkpoint(tmp_path / "missing.pt")


def test_foreign_checkpoint_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"weight": torch.ones(2)}, path)
    with pytest.raises(CheckpointError, match="not a checkpoint written by helpers.train_ddp"):
        load_checkpoint(path)
    assert load_checkpoint(path, require_format=False)["weight"].shape == (2,)
    path.write_text("hello, I am a text file\n")
    with pytest.raises(CheckpointError, match="not a (complete )?PyTorch checkpoint"):
        load_checkpoint(path)


class _Evil:
    """Unpickling this runs code: it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_malicious_pickle_is_refused_without_running_it(tmp_path: Path, writer: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "last.pt"
    payload = {"format": train_ddp.CHECKPOINT_FORMAT, "model": _Evil(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:  # the legacy (non-zip) format torch.load also reads
        path.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(CheckpointError, match="refused to load") as info:
        load_checkpoint(path)
    assert "system" in str(info.value)  # names the global it refused
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_cli_reports_a_bad_checkpoint_in_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "last.pt").write_bytes(b"PK\x03\x04" + b"\0" * 64)  # a zip header, no zip
    code = train_ddp.main(["--resume", "--out-dir", str(tmp_path), "--epochs", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_single_process_resume_and_restart_order(tmp_path: Path, monkeypatch, capsys) -> None:
    """Without torchrun: --resume continues; a restart prefers out-dir's last.pt to --resume."""
    out = ["--out-dir", str(tmp_path), "--batch-size", "128", "--epochs", "2"]
    monkeypatch.setattr(train_ddp, "DigitsNet", lambda *a: torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, 10)))  # fmt: skip  # a fast model: order only
    assert train_ddp.main(["--epochs", "1", *out[:-2]]) == 0 and "RANK" not in os.environ
    one = tmp_path / "one.pt"  # an older checkpoint: after epoch 1 only
    one.write_bytes((tmp_path / "last.pt").read_bytes())
    assert train_ddp.main([*out, "--resume"]) == 0
    assert "resume: " in capsys.readouterr().out
    assert [h["epoch"] for h in _history(tmp_path)] == [1, 2]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # as torchrun sets it on a restart
    assert train_ddp.main([*out, "--resume", str(one)]) == 0
    assert "restart: " in capsys.readouterr().out  # from last.pt (2 epochs), not one.pt
    assert [(h["epoch"], h["attempt"]) for h in _history(tmp_path)] == [(1, 0), (2, 0)]


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_resume_is_exact_with_dropout_augmentation_and_workers(tmp_path, monkeypatch) -> None:
    """One process, 2 DataLoader workers: resuming after epoch 1 repeats epoch 2 bit for bit."""
    saved = []
    real_save = train_ddp.save_checkpoint

    def save_and_keep(obj: dict, path) -> None:  # also keep each epoch's checkpoint
        real_save(obj, path)
        real_save(obj, Path(path).with_name(f"epoch{obj['epoch']}.pt"))
        saved.append(obj["epoch"])

    monkeypatch.setattr(train_ddp, "save_checkpoint", save_and_keep)
    common = ["--epochs", "2", "--batch-size", "256", "--device", "cpu", *RANDOM]
    assert train_ddp.main([*common, "--out-dir", str(tmp_path / "a")]) == 0
    assert saved == [1, 2]
    first = tmp_path / "a" / "epoch1.pt"
    assert train_ddp.main([*common, "--out-dir", str(tmp_path / "b"), "--resume", str(first)]) == 0
    whole, resumed = _history(tmp_path / "a"), _history(tmp_path / "b")
    assert [h["loss"] for h in resumed] == [h["loss"] for h in whole], (whole, resumed)
    assert [h["accuracy"] for h in resumed] == [h["accuracy"] for h in whole]
    # the randomness is real: another seed gives other losses
    assert (
        train_ddp.main([*common, "--epochs", "1", "--seed", "1", "--out-dir", str(tmp_path)]) == 0
    )
    assert _history(tmp_path)[0]["loss"] != whole[0]["loss"]


def test_agent_store_rule_matches_the_installed_source() -> None:
    """The live probe of `_create_c10d_store` agrees with what the installed source says:
    2.13 decides on TORCHELASTIC_USE_AGENT_STORE alone (a client at every address); 2.14.1 and
    2.15.0 also check the address (`_agent_store_serves`), so rank 0 hosts at any other."""
    import importlib

    rdzv = importlib.import_module("torch.distributed.rendezvous")
    checks_address = hasattr(rdzv, "_agent_store_serves")
    branch = "_agent_store_serves(hostname, port)" if checks_address else (
        "_torchelastic_use_agent_store()"
    )  # fmt: skip
    assert f"if {branch}:" in __import__("inspect").getsource(rdzv._create_c10d_store)
    found = agent_store_rule()
    expected = {"agent address": "client", "other address": "hosts" if checks_address else "client"}
    assert found == expected, (torch.__version__, found)


def test_each_worker_group_gets_a_fresh_key_space(monkeypatch) -> None:
    """Two groups of 2 ranks in one agent store (a restart): each gets its own key prefix,
    whatever the first group left behind; a rank whose rank 0 never comes fails in seconds."""
    server = torch.distributed.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))

    def group() -> list[str]:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            stores = list(pool.map(lambda r: train_ddp._group_store(r, 2, timeout_s=30), [0, 1]))
        for rank, store in enumerate(stores):
            store.set(f"rank_{rank}", "address")  # what gloo writes; read back by prefix
        return [s.get("rank_0").decode() + s.get("rank_1").decode() for s in stores]

    assert group() == ["addressaddress"] * 2
    prefixes = {
        k for k in ("group_1", "group_2") if server.check([f"helpers.train_ddp/{k}/rank_0"])
    }
    assert prefixes == {"group_1"}, prefixes
    group()  # the restarted group: the first group's hello keys are still there
    assert server.check(["helpers.train_ddp/group_2/rank_0"]), "second group: no fresh prefix"
    start = time.monotonic()
    with pytest.raises(SystemExit, match="rank 0 of this worker group did not show up") as info:
        train_ddp._group_store(1, 2, timeout_s=1)  # nobody plays rank 0
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in str(info.value)
    # bounded, not fast: the 1 s wait plus a TCPStore connect, with room for a loaded machine
    elapsed = time.monotonic() - start
    assert elapsed < 60, (
        f"_group_store(timeout_s=1): expected to give up within 60 s, took {elapsed:.1f} s"
    )


def test_nothing_in_the_project_loads_with_weights_only_false() -> None:
    pattern = re.compile(r"\.load\([^)]*weights_only\s*=\s*False", re.S)
    hits = [
        str(p.relative_to(ROOT))
        for folder in ("src", "tests", "notebooks", "benchmarks", "data")
        if (ROOT / folder).is_dir()
        for p in (ROOT / folder).rglob("*")
        if p.suffix in (".py", ".ipynb") and pattern.search(p.read_text(errors="replace"))
    ]
    assert hits == []


# --------------------------------------------------------------------------------------------
# real torchrun runs
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """2 CPU ranks, 3 epochs, dropout + augmentation + 2 loader workers: the reference run."""
    out = tmp_path_factory.mktemp("run2")
    result = _train(out, "--epochs", "3", *RANDOM, nproc_per_node=2)
    assert result.returncode == 0, result.tail()
    (out / "log.txt").write_text(result.log)
    return out


def test_two_ranks_train_to_accuracy(trained: Path) -> None:
    history = _history(trained)
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert {h["world_size"] for h in history} == {2}
    assert history[-1]["accuracy"] >= MIN_ACCURACY, history
    lrs = [h["lr"] for h in history]
    assert lrs[0] == 0.05 and lrs[-1] == 0.05 * 0.1, lrs  # --lr first, --lr * --lrf last
    log = (trained / "log.txt").read_text()
    # rank 0 alone logs: one header, one bar and one line per epoch, one summary
    assert len(re.findall(r"(?m)^train_ddp: 2 process", log)) == 1
    assert len(re.findall(r"(?m)^epoch \d/3 \[#+\] 23/23$", log)) == 3
    assert len(re.findall(r"(?m)^epoch \d/3  loss ", log)) == 3
    assert len(re.findall(r"(?m)^done: 3 epochs, final accuracy", log)) == 1


def test_weights_freeze_and_cpu_syncbn(trained: Path, tmp_path: Path) -> None:
    pytest.importorskip("helpers.syncbn")
    start = load_checkpoint(trained / "last.pt")["model"]
    result = _train(
        tmp_path,
        "--epochs", "1", "--weights", str(trained / "last.pt"), "--freeze-layers", "--syncBN",
        "--scale-lr", nproc_per_node=2,
    )  # fmt: skip
    assert result.returncode == 0, result.tail()
    assert "weights: loaded 20/20 tensors" in result.log
    assert "syncBN True" in result.log
    ck = load_checkpoint(tmp_path / "last.pt")
    frozen = [k for k in start if k.startswith("features.")]
    assert any(k.endswith("running_mean") for k in frozen)  # BatchNorm statistics included
    changed = [k for k in frozen if not torch.equal(ck["model"][k], start[k])]
    assert changed == [], f"frozen tensors changed: {changed}"
    assert not torch.equal(ck["model"]["classifier.weight"], start["classifier.weight"])
    assert ck["history"][-1]["accuracy"] >= MIN_ACCURACY
    assert ck["history"][0]["lr"] == 0.05 * 2  # --scale-lr on 2 processes


def _killed_run(out: Path, **launch):
    """3 epochs; global rank 1 SIGKILLs itself halfway through epoch 2; one restart allowed."""
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ  # plain torchrun
    return _train(
        out, "--epochs", "3", *RANDOM, max_restarts=1, env={train_ddp.KILL_ENV: "1:2"}, **launch
    )


def _assert_resumed_exactly(out: Path, reference: Path) -> None:
    history = _history(out)
    assert [h["epoch"] for h in history] == [1, 2, 3]  # none lost, none repeated
    assert [h["attempt"] for h in history] == [0, 1, 1]
    want = _history(reference)  # the uninterrupted run: the same numbers, bit for bit
    assert [h["loss"] for h in history] == [h["loss"] for h in want], (history, want)
    assert [h["accuracy"] for h in history] == [h["accuracy"] for h in want]


@pytest.mark.parametrize("rdzv_backend", ["static", "c10d"])
def test_killed_worker_restarts_and_every_epoch_runs_once(
    trained: Path, tmp_path: Path, rdzv_backend: str
) -> None:
    result = _killed_run(tmp_path, nproc_per_node=2, rdzv_backend=rdzv_backend)
    assert result.returncode == 0, result.tail()
    assert "rank 1 kills itself" in result.log and "holds 1 epoch(s)" in result.log
    _assert_resumed_exactly(tmp_path, trained)


def test_two_nodes_restart_after_a_killed_worker(trained: Path, tmp_path: Path) -> None:
    """Two torchruns (nodes) of one process each, c10d: a worker dies, both restart, resume."""
    endpoint = f"127.0.0.1:{free_port()}"
    args = ["-m", "helpers.train_ddp", "--epochs", "3", "--device", "cpu", *RANDOM,
            "--out-dir", str(tmp_path)]  # fmt: skip
    nodes = [
        start_torchrun(
            args,
            nnodes=2,
            nproc_per_node=1,
            node_rank=rank,
            rdzv_endpoint=endpoint,
            rdzv_id="two-nodes",
            max_restarts=1,
            log_path=tmp_path / f"node{rank}.log",
            env={**LOOPBACK, train_ddp.KILL_ENV: "1:2"},
        )  # fmt: skip
        for rank in (0, 1)
    ]
    results = [node.wait(timeout_s=300) for node in nodes]
    assert [r.returncode for r in results] == [0, 0], [r.tail() for r in results]
    # one node hosts global rank 0 in each attempt, and only it logs
    assert sum(r.log.count("train_ddp: 2 process(es)") for r in results) == 2  # attempts 0, 1
    assert sum("holds 1 epoch(s)" in r.log for r in results) == 1
    _assert_resumed_exactly(tmp_path, trained)


# --------------------------------------------------------------------------------------------
# helpers.torchrun: no worker outlives its caller
# --------------------------------------------------------------------------------------------

SLEEPER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    Path(sys.argv[1], "worker%s.pid" % os.environ["LOCAL_RANK"]).write_text(str(os.getpid()))
    time.sleep(300)
    """
)


def _worker_pids(folder: Path, n: int = 2, timeout_s: float = 120) -> list[int]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        files = sorted(folder.glob("worker*.pid"))
        if len(files) == n and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.1)
    raise AssertionError(f"workers did not start: {list(folder.iterdir())}")


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_plain_torchrun_leaves_workers_behind_when_killed(tmp_path: Path) -> None:
    """The problem helpers.torchrun solves (if this starts failing, torchrun changed)."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
           str(script), str(tmp_path)]  # fmt: skip
    env = {**os.environ, **LOOPBACK, "OMP_NUM_THREADS": "1"}
    torchrun = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = _worker_pids(tmp_path)
    try:
        torchrun.kill()
        torchrun.wait()
        survivors = wait_gone(pids, timeout_s=3)
        assert survivors == pids  # orphans, in sessions of their own
    finally:
        _kill_all(pids)


def test_killing_the_caller_kills_torchrun_and_every_worker(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    parent_code = textwrap.dedent(
        f"""
        import time
        from helpers.torchrun import start_torchrun
        p = start_torchrun([{str(script)!r}, {str(tmp_path)!r}], nproc_per_node=2,
                           log_path={str(tmp_path / "torchrun.log")!r})
        print(p.pid, flush=True)
        time.sleep(300)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
        env={**os.environ, **LOOPBACK},
    )  # fmt: skip
    torchrun_pid = int(parent.stdout.readline())
    pids = _worker_pids(tmp_path)
    try:
        parent.kill()  # SIGKILL: no handler, no atexit, nothing runs in the caller
        parent.wait()
        assert wait_gone([torchrun_pid, *pids]) == []
    finally:
        _kill_all(pids)
        parent.stdout.close()


HANGER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path

    def spin_in_python():
        while True:
            time.sleep(0.05)

    rank, folder = int(os.environ["RANK"]), Path(sys.argv[1])
    if rank == 1:  # never joins: no torch import (it costs seconds of CPU), straight to the loop
        Path(folder, "worker1.pid").write_text(str(os.getpid()))
        spin_in_python()
    import torch.distributed as dist

    for new_session in (False, True):  # grandchildren: in this worker's group, in a new session
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                                 start_new_session=new_session)
        Path(folder, "child%d.pid" % new_session).write_text(str(child.pid))
    Path(folder, "worker0.pid").write_text(str(os.getpid()))
    dist.init_process_group("gloo")  # waits, inside C++ (the store), for rank 1
    """
)


def test_a_timeout_dumps_every_stack_and_leaves_no_process(tmp_path: Path) -> None:
    """A hung run (rank 1 spins in Python, rank 0 waits for it in init_process_group): the
    TorchrunTimeout holds each worker's and the agent's Python stack, and no process of the tree
    (torchrun, its workers, their children in either process group) is left."""
    script = tmp_path / "hanger.py"
    script.write_text(HANGER)
    proc = start_torchrun([str(script), str(tmp_path)], nproc_per_node=2, env=LOOPBACK)
    pids = _worker_pids(tmp_path, timeout_s=300)  # both a few bytecodes from their wait
    children = [int((tmp_path / f"child{i}.pid").read_text()) for i in (0, 1)]
    try:
        # the few bytecodes from the pid file into the loop / the store wait take far less than 5 s
        with pytest.raises(TorchrunTimeout, match="workers were stopped") as info:
            proc.wait(timeout_s=5)
        text = str(info.value)
        rank0, rank1 = (f"--- rank {r} (local rank {r}, pid {pids[r]}) ---" for r in (0, 1))
        agent = f"--- torchrun's agent (pid {proc.pid}) ---"
        assert rank0 in text and rank1 in text and agent in text, (
            f"expected a stack section per worker and one for the agent, found:\n{text}"
        )
        part0 = text.split(rank0)[1].split(rank1)[0]
        part1 = text.split(rank1)[1].split(agent)[0]
        part_agent = text.split(agent)[1]
        assert "in init_process_group" in part0 and "in spin_in_python" in part1, (
            f"expected rank 0 in init_process_group, rank 1 in spin_in_python, found:\n{text}"
        )
        assert "torch/distributed/elastic" in part_agent, f"agent: expected its stack:\n{text}"
        assert info.value.result.returncode != 0
        assert not proc.log_path.exists()  # its temporary log was read, then removed
        assert wait_gone([proc.pid, *pids, *children], timeout_s=1) == [], (
            "expected torchrun, both workers and both grandchildren gone after the timeout"
        )
    finally:
        _kill_all([*pids, *children])


def test_command_keeps_rendezvous_on_loopback() -> None:
    cmd = torchrun_command(["-m", "helpers.train_ddp"], nproc_per_node=2)
    assert any(re.fullmatch(r"--rdzv-endpoint=127\.0\.0\.1:\d+", a) for a in cmd)
    assert "--local-addr=127.0.0.1" in cmd and "--no-python" in cmd
    assert cmd.count("--exec-with-pdeathsig") == 2  # torchrun and each worker are wrapped
    static = torchrun_command(["x.py"], rdzv_backend="static", rdzv_endpoint="127.0.0.1:1234")
    assert "--master-addr=127.0.0.1" in static and "--master-port=1234" in static, static
    assert not any(a.startswith("--rdzv-backend") for a in static), static
    with pytest.raises(TypeError, match="bogus"):
        torchrun_command(["x.py"], bogus=1)  # one definition of the options: TorchrunLaunch
