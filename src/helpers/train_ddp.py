"""Train a small CNN on the shipped 8x8 digits with DDP: the script a reader copies and adapts.

Used by: notebook 09 (training with torchrun), tests/test_train_ddp.py, the README and
slurm/train_ddp.sbatch. CPU processes with gloo, or one GPU per process with NCCL (LOCAL_RANK
picks the GPU); the same code, no edits. One file: copy it, keep `helpers.syncbn` or drop
`--syncBN` on CPU.

    torchrun --standalone --nproc-per-node=2 -m helpers.train_ddp --epochs 5     # one machine
    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST_OF_NODE_0:29500 --rdzv-id=job42 -m helpers.train_ddp   # on each node
    python -m helpers.train_ddp --epochs 5                                           # 1 process

What it does, in the order a reader meets it in `main`:
- process group from the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
  MASTER_PORT); without torchrun it runs as a single process. Under torchrun's shared agent
  store (TORCHELASTIC_USE_AGENT_STORE=True) each worker group is built on a key prefix of its
  own, so a restarted group never reads the keys the dead group left in that store (see
  `_group_store`);
- data from data/digits.npz (numpy only, nothing downloads), split across ranks by
  DistributedSampler, reshuffled every epoch by `set_epoch`; `--augment` shifts each image by
  up to one pixel, in the DataLoader's workers when `--workers` > 0;
- `--syncBN`: nn.SyncBatchNorm on GPUs, helpers.syncbn's CPU version otherwise;
  `--weights`: start from a checkpoint (layers whose shapes differ are skipped);
  `--freeze-layers`: train only the classifier head (the frozen BatchNorm layers stay in eval
  mode, so their running statistics do not change either);
- SGD with momentum; the learning rate follows a cosine from --lr (first epoch) to
  --lr * --lrf (last epoch); `--scale-lr` multiplies --lr by the world size (no warm-up);
- rank 0 alone prints: a progress bar per epoch, one line per epoch (loss, accuracy, lr) and
  a final summary; the exit code is 0 only when every epoch ran;
- after every epoch rank 0 writes `<out-dir>/last.pt` atomically (temp file + os.replace):
  model, optimizer, scheduler, epochs done, every rank's RNG states and a per-epoch history;
- `--resume`, or a restart by torchrun's `--max-restarts`, continues after the last completed
  epoch: no epoch lost, none repeated (the history records which attempt ran each epoch). A
  restart is seen from the largest TORCHELASTIC_RESTART_COUNT over the ranks; one for a
  membership change alone (every group healthy, a node joining) leaves it 0 everywhere and
  does what the launch did, since torchrun starts every group with the launch's arguments:
  it starts over, or loads the `--resume` file, which must exist at launch (a missing file
  is an error), so a job launched fresh starts over. The
  resume is exact: the RNG states are restored and never reseeded, and the DataLoader's
  worker seeds come from (seed, rank, epoch), so the resumed run computes what the
  uninterrupted one computed, bit for bit on CPU (tests/test_train_ddp.py checks it with
  dropout, augmentation and two DataLoader workers);
- every checkpoint is read with `torch.load(weights_only=True)`; a truncated, foreign or
  malicious file raises CheckpointError with a one-line reason. Only rank 0 reads the file;
  its bytes are broadcast, so nodes need no shared file system to resume.

Test hook: TRAIN_DDP_KILL_AT="RANK:EPOCH" makes that global rank SIGKILL itself halfway through
that (1-based) epoch, on torchrun's first attempt only (TORCHELASTIC_RESTART_COUNT=0).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import pickle
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_DATA",
    "CheckpointError",
    "Digits",
    "DigitsNet",
    "RankInfo",
    "build_parser",
    "lr_factor",
    "load_checkpoint",
    "load_digits",
    "main",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = "helpers.train_ddp/1"
# every collective (and the group's start) fails after this instead of gloo's default 30 min:
# a rank stuck after a restart ends the run with an error that names the collective
COLLECTIVE_TIMEOUT = timedelta(seconds=120)
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data" / "digits.npz"
KILL_ENV = "TRAIN_DDP_KILL_AT"
STORE_PREFIX = "helpers.train_ddp"  # our keys in torchrun's shared store start with this


class CheckpointError(RuntimeError):
    """A checkpoint could not be used: missing, truncated, foreign or unsafe. Says which.

    `reason` is the one-line verdict; `detail` (may be empty) what the loader said, which
    varies between torch releases.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason} ({detail})" if detail else reason)
        self.reason = reason
        self.detail = detail


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m helpers.train_ddp` (also what `--help` prints)."""
    p = argparse.ArgumentParser(
        prog="python -m helpers.train_ddp",
        description="Train a small CNN on the 8x8 UCI digits with DistributedDataParallel. "
        "Start it with torchrun (one process per CPU share or GPU), or plainly for one process.",
        epilog="One machine: torchrun --standalone --nproc-per-node=2 -m helpers.train_ddp. "
        "Several: torchrun --nnodes=N --nproc-per-node=G --rdzv-backend=c10d "
        "--rdzv-endpoint=NODE0:29500 --rdzv-id=JOB -m helpers.train_ddp on every node. "
        "torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every "
        "process; the script reads them (there is no --local_rank option: LOCAL_RANK replaced it).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data", type=Path, default=None, help="digits .npz file (None: data/digits.npz)"
    )
    p.add_argument("--num-classes", type=int, default=10, help="outputs of the classifier head")
    p.add_argument("--epochs", type=int, default=5, help="total number of epochs")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per process")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of the first epoch (SGD)")
    p.add_argument(
        "--lrf",
        type=float,
        default=0.1,
        help="the last epoch's lr is lr * lrf; in between a cosine (a 1-epoch run uses lr)",
    )
    p.add_argument(
        "--scale-lr",
        action="store_true",
        help="multiply --lr by the world size (Goyal et al. 2017's linear scaling rule, without "
        "their warm-up); a resume under another world size rescales the saved optimizer's lr",
    )
    p.add_argument(
        "--syncBN",
        action="store_true",
        help="synchronise BatchNorm statistics across processes "
        "(nn.SyncBatchNorm on GPUs, helpers.syncbn on CPU)",
    )
    p.add_argument("--weights", type=str, default="", help="initial weights (checkpoint file)")
    p.add_argument(
        "--freeze-layers",
        action="store_true",
        help="train only the classifier head; frozen BatchNorm layers keep their statistics",
    )
    p.add_argument("--dropout", type=float, default=0.0, help="dropout before the head")
    p.add_argument("--augment", action="store_true", help="random shifts of up to one pixel")
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: one GPU per process (LOCAL_RANK) when GPUs are visible, else CPU",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="number of processes. Under torchrun it is WORLD_SIZE (= --nnodes x "
        "--nproc-per-node); a different value here is an error. None: take WORLD_SIZE",
    )
    p.add_argument(
        "--dist-url",
        default="env://",
        help="how the processes meet. env:// reads MASTER_ADDR and MASTER_PORT (torchrun "
        "sets them to the address of a TCPStore its agent hosts, or of a free port on the "
        "first node); tcp://HOST:PORT or file:///PATH instead "
        "(RANK still comes from the environment, the world size from --world-size or "
        "WORLD_SIZE). Under torchrun, tcp:// at an address other than MASTER_ADDR:MASTER_PORT "
        "needs torch 2.14 or later: torch 2.13 makes every process a client there, and "
        "nobody hosts the store",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for weights, data order, dropout")
    p.add_argument(
        "--out-dir",
        type=Path,
        default=Path("runs/digits"),
        help="where last.pt goes (a run without --resume starts over and replaces it)",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="auto",
        default="",
        metavar="PATH",
        help="continue from a checkpoint (no PATH: <out-dir>/last.pt; a missing file is an "
        "error); a torchrun restart that some node counted (TORCHELASTIC_RESTART_COUNT > 0) "
        "resumes from <out-dir>/last.pt automatically, one for a membership change alone "
        "(the count stays 0) does what the launch did: starts over, or loads the --resume "
        "file, which must exist at launch",
    )
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    return p


def lr_factor(epoch: int, epochs: int, lrf: float) -> float:
    """The lr of 0-based `epoch` as a fraction of --lr: a cosine from 1 (first) to lrf (last)."""
    if epochs <= 1:
        return 1.0
    return lrf + (1 - lrf) * (1 + math.cos(math.pi * epoch / (epochs - 1))) / 2


# ----------------------------------------------------------------------------------------------
# data and model
# ----------------------------------------------------------------------------------------------


def load_digits(path: str | Path = DEFAULT_DATA) -> dict[str, torch.Tensor]:
    """The shipped digits as float images in [0, 1] (N, 1, 8, 8) and int64 labels (N,)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no digits data at {path} (see data/README.md)")
    with np.load(path) as d:  # plain arrays, no pickle (np.load's allow_pickle is False)
        out = {}
        for split in ("train", "test"):
            x = torch.from_numpy(d[f"x_{split}"].astype(np.float32) / 16.0).unsqueeze(1)
            out[f"x_{split}"] = x  # (N, 1, 8, 8)
            out[f"y_{split}"] = torch.from_numpy(d[f"y_{split}"].astype(np.int64))  # (N,)
    return out


class Digits(Dataset):
    """Images and labels; with `augment`, each image shifted by up to one pixel at random.

    The shift draws from torch's global RNG of the process that calls __getitem__: a
    DataLoader worker (seeded by the DataLoader from its generator) or the training process.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, augment: bool = False) -> None:
        self.x, self.y, self.augment = x, y, augment

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]  # (1, 8, 8)
        if self.augment:
            dy, dx = torch.randint(0, 3, (2,)).tolist()
            x = F.pad(x, (1, 1, 1, 1))[:, dy : dy + 8, dx : dx + 8]  # (1, 8, 8)
        return x, self.y[i]


def _conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


class DigitsNet(nn.Module):
    """Three conv-BN-ReLU blocks, dropout and a linear head: about 24k parameters."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.0) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(1, 16),  # (B, 16, 8, 8)
            _conv_bn(16, 32),  # (B, 32, 8, 8)
            nn.MaxPool2d(2),  # (B, 32, 4, 4)
            _conv_bn(32, 64),  # (B, 64, 4, 4)
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),  # (B, 64)
        )
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(64, num_classes)  # (B, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.features(x)))


# ----------------------------------------------------------------------------------------------
# checkpoints: atomic writes, weights-only reads, clear errors
# ----------------------------------------------------------------------------------------------


def save_checkpoint(obj: dict, path: str | Path) -> None:
    """Write `obj` with torch.save to a temp file beside `path`, fsync, then os.replace it.

    A reader (or a restart after a crash) sees the old file or the new one, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def load_checkpoint(
    source: str | Path | bytes, *, name: str | None = None, require_format: bool = True
) -> dict:
    """Read a checkpoint with `torch.load(weights_only=True)`; raise CheckpointError if unusable.

    `source` is a path or the file's bytes (`name` then says what to call it in errors). With
    `require_format`, the file must be one this script wrote (CHECKPOINT_FORMAT).
    """
    if isinstance(source, bytes):
        label, stream = name or "checkpoint", io.BytesIO(source)
    else:
        label = name or str(source)
        if not Path(source).is_file():
            raise CheckpointError(f"{label}: no such checkpoint file")
        stream = io.BytesIO(Path(source).read_bytes())
    try:
        obj = torch.load(stream, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        msg = str(err)
        if "Weights only load failed" in msg:
            found = re.search(r"unsupported (GLOBAL [\w.]+|global: [^\n]*|operand \d+)", msg, re.I)
            why = f"found {found.group(0)}" if found else "it holds objects beyond tensors"
            raise CheckpointError(
                f"{label}: refused to load: it is not plain weights ({why}). Unpickling it "
                "could run arbitrary code, so it is not loaded (do not switch weights_only off "
                "for a file you did not write yourself)"
            ) from None
        raise CheckpointError(
            f"{label}: not a PyTorch checkpoint, or a corrupt one", _short(msg)
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError, IndexError) as err:
        raise CheckpointError(
            f"{label}: not a complete PyTorch checkpoint; truncated or corrupt?",
            f"{type(err).__name__}: {_short(str(err))}",
        ) from None
    if require_format:
        if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
            what = f"a dict with keys {sorted(obj)[:6]}" if isinstance(obj, dict) else type(obj)
            raise CheckpointError(
                f"{label}: not a checkpoint written by helpers.train_ddp "
                f"(expected format {CHECKPOINT_FORMAT!r}, found {what})"
            )
        missing = {"model", "optimizer", "scheduler", "epoch", "history"} - set(obj)
        if missing:
            raise CheckpointError(f"{label}: checkpoint lacks {sorted(missing)}")
    return obj


def _short(msg: str, limit: int = 160) -> str:
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


def _rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors and plain types (so weights_only can read them)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        "numpy": {
            "kind": str(np_kind),
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": random.getstate(),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
         n["cached_gaussian"])
    )  # fmt: skip
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


# ----------------------------------------------------------------------------------------------
# distributed plumbing
# ----------------------------------------------------------------------------------------------


@dataclass
class RankInfo:
    """Who this process is in the job, and what it computes on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    distributed: bool
    attempt: int  # TORCHELASTIC_RESTART_COUNT, the largest over all ranks: 0 on the first run


def _world_size(args: argparse.Namespace) -> tuple[bool, int]:
    """(distributed?, world size) from torchrun's environment and --world-size; clear errors."""
    env_ws = os.environ.get("WORLD_SIZE")
    if env_ws is not None and args.world_size is not None and int(env_ws) != args.world_size:
        raise SystemExit(
            f"error: --world-size {args.world_size} conflicts with WORLD_SIZE={env_ws} set by "
            "the launcher (torchrun: --nnodes x --nproc-per-node); drop --world-size or make "
            "them agree"
        )
    world_size = int(env_ws) if env_ws is not None else (args.world_size or 1)
    if "RANK" not in os.environ:
        if world_size != 1 or args.dist_url != "env://":
            raise SystemExit(
                f"error: --world-size {world_size} / --dist-url {args.dist_url} need RANK in "
                "the environment: start the processes with torchrun (it sets RANK, "
                "WORLD_SIZE, LOCAL_RANK), e.g. torchrun --nproc-per-node=N -m helpers.train_ddp"
            )
        return False, 1
    return True, world_size


def _group_store(rank: int, world_size: int, timeout_s: float = 120.0) -> dist.Store:
    """A key space that only this worker group uses, in torchrun's shared agent store.

    torchrun (c10d and static rendezvous) gives the workers the TCPStore its agent hosts
    (TORCHELASTIC_USE_AGENT_STORE=True), and that store outlives a failed worker group.
    `env://` would build every group on the same keys, so a restarted group reads the
    addresses the dead group left there. Still so on torch 2.14.1 and 2.15.0: their
    `_create_c10d_store` also checks that the address is the agent's MASTER_ADDR:MASTER_PORT
    (`helpers.torchrun.agent_store_rule`), and env:// passes exactly that address.
    TORCHELASTIC_RESTART_COUNT cannot name the group: on two nodes the agents count restarts
    differently (measured: the agent whose worker died counts one, the other restarts because
    a node is waiting and counts none). So rank 0 draws a new number from a counter in the
    store and hands it to each rank in a key that names a nonce the rank has
    just made up, which no earlier group can have written.
    """
    client = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
        is_master=False, timeout=timedelta(seconds=timeout_s),
    )  # fmt: skip
    base = dist.PrefixStore(STORE_PREFIX, client)
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        group = base.add("groups", 1)  # atomic: a number no other group gets
        waiting, answered = set(range(1, world_size)), {}
        while waiting:
            for r in sorted(waiting):
                if base.check([f"ack/{group}/{r}"]):  # rank r of *this* group has it
                    waiting.discard(r)
                elif base.check([f"hello/{r}"]):  # rank r's nonce, fresh or stale
                    nonce = base.get(f"hello/{r}").decode()
                    if answered.get(r) != nonce:
                        base.set(f"welcome/{r}/{nonce}", str(group))
                        answered[r] = nonce
            if waiting and time.monotonic() > deadline:
                raise SystemExit(_no_answer(rank, f"ranks {sorted(waiting)}", timeout_s))
            time.sleep(0.005)
    else:
        nonce = os.urandom(8).hex()
        base.set(f"hello/{rank}", nonce)
        try:
            base.wait([f"welcome/{rank}/{nonce}"], timedelta(seconds=timeout_s))
        except dist.DistStoreError:
            raise SystemExit(_no_answer(rank, "rank 0", timeout_s)) from None
        group = int(base.get(f"welcome/{rank}/{nonce}"))
        base.set(f"ack/{group}/{rank}", "1")
    return dist.PrefixStore(f"{STORE_PREFIX}/group_{group}", client)


def _no_answer(rank: int, who: str, timeout_s: float) -> str:
    return (
        f"error: rank {rank}: {who} of this worker group did not show up in torchrun's shared "
        f"store within {timeout_s:g} s. Cause: a process died before joining, or the "
        "processes were started by launchers that do not share one rendezvous (--rdzv-id, "
        "--rdzv-endpoint, --nnodes must match on every node). Fix: check the other "
        "processes' logs; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 with --rdzv-backend=c10d "
        "avoids the shared store altogether"
    )


def _init_distributed(args: argparse.Namespace) -> RankInfo:
    """Process group from torchrun's environment: gloo on CPU, NCCL with one GPU per process."""
    env = os.environ
    distributed, world_size = _world_size(args)
    rank = int(env.get("RANK", 0))
    local_rank = int(env.get("LOCAL_RANK", 0))
    attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", 0))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise SystemExit("error: --device cuda, but no CUDA device is visible")
        if local_rank >= gpus:
            raise SystemExit(
                f"error: LOCAL_RANK={local_rank} but only {gpus} GPU(s) are visible: "
                "start at most one process per GPU (--nproc-per-node)"
            )
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if distributed:
        device_id = device if use_cuda else None
        if args.dist_url == "env://" and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            store = _group_store(rank, world_size)
            dist.init_process_group(
                backend, store=store, rank=rank, world_size=world_size, device_id=device_id,
                timeout=COLLECTIVE_TIMEOUT,
            )  # fmt: skip
        else:
            dist.init_process_group(
                backend, init_method=args.dist_url, rank=rank, world_size=world_size,
                device_id=device_id, timeout=COLLECTIVE_TIMEOUT,
            )  # fmt: skip
        # every rank must agree whether this is a restart (it decides whether to resume), but
        # on several nodes the agents count restarts differently: take the largest count
        counts = torch.tensor([attempt], dtype=torch.int64, device=device)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        attempt = int(counts.item())
    return RankInfo(rank, world_size, local_rank, device, backend, distributed, attempt)


def _all_reduce_sum(values: list[float], info: RankInfo) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    if info.distributed:
        dist.all_reduce(t)
    return t.tolist()


def _read_on_rank0(path: Path, info: RankInfo) -> bytes | None:
    """Rank 0 reads the file, every rank gets its bytes (None: missing). No shared FS needed."""
    data = None
    if info.rank == 0 and path.is_file():
        data = path.read_bytes()
    if not info.distributed:
        return data
    size = torch.tensor([-1 if data is None else len(data)], dtype=torch.int64, device=info.device)
    dist.broadcast(size, 0)
    n = int(size.item())
    if n < 0:
        return None
    buf = torch.empty(n, dtype=torch.uint8, device=info.device)
    if info.rank == 0:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    dist.broadcast(buf, 0)
    return data if info.rank == 0 else buf.cpu().numpy().tobytes()


def _gather_rng_states(info: RankInfo) -> list[dict[str, Any]]:
    state = _rng_state()
    if not info.distributed:
        return [state]
    states: list[Any] = [None] * info.world_size
    dist.all_gather_object(states, state)
    return states


def _sync_buffers(model: nn.Module, info: RankInfo) -> None:
    """Give every rank rank 0's BatchNorm running stats (each rank updated its own in train)."""
    if info.distributed:
        for buf in model.buffers():
            dist.broadcast(buf, 0)


def _seed(*parts: int) -> int:
    """One 63-bit seed from several integers (seed, rank, epoch): distinct for each tuple."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> 1)


# ----------------------------------------------------------------------------------------------
# logging (rank 0 only)
# ----------------------------------------------------------------------------------------------


class _Progress:
    """A text progress bar: redrawn in place on a terminal, drawn once left to right in a log."""

    def __init__(self, total: int, prefix: str, enabled: bool, width: int = 30) -> None:
        self.total, self.prefix, self.enabled, self.width = total, prefix, enabled, width
        self.tty = enabled and sys.stdout.isatty()
        self.drawn = 0
        if enabled and not self.tty:
            sys.stdout.write(f"{prefix} [")
            sys.stdout.flush()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        filled = self.width * done // self.total
        if self.tty:
            bar = "#" * filled + "." * (self.width - filled)
            sys.stdout.write(f"\r{self.prefix} [{bar}] {done}/{self.total}")
        elif filled > self.drawn:
            sys.stdout.write("#" * (filled - self.drawn))
            self.drawn = filled
        sys.stdout.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stdout.write("\n" if self.tty else f"] {self.total}/{self.total}\n")
            sys.stdout.flush()


def _log(info: RankInfo, msg: str) -> None:
    if info.rank == 0:
        print(msg, flush=True)


# ----------------------------------------------------------------------------------------------
# training: build, resume, one epoch, save
# ----------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """Everything the epochs share (built once by `_build`)."""

    model: nn.Module  # the plain model (checkpoints, evaluation)
    ddp: nn.Module  # what trains: DDP(model), or the model itself in one process
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loader: DataLoader
    sampler: DistributedSampler
    loader_rng: torch.Generator  # seeds the DataLoader's workers, reset every epoch
    data: dict[str, torch.Tensor]
    base_lr: float
    sync_bn: bool


def _kill_step(info: RankInfo, epoch: int, steps: int) -> int | None:
    """Test hook: the step at which this rank SIGKILLs itself in `epoch`, or None."""
    spec = os.environ.get(KILL_ENV, "")
    if not spec or info.attempt != 0:
        return None
    rank, at = (int(v) for v in spec.split(":"))
    return steps // 2 if (rank == info.rank and at == epoch) else None


def _load_weights(model: nn.Module, path: str, info: RankInfo) -> str:
    """Copy matching tensors from a checkpoint or a bare state_dict into `model`."""
    data = _read_on_rank0(Path(path), info)
    if data is None:
        raise CheckpointError(f"--weights {path}: no such file")
    obj = load_checkpoint(data, name=f"--weights {path}", require_format=False)
    state = obj.get("model", obj) if isinstance(obj, dict) else obj
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"--weights {path}: holds neither a state_dict nor a checkpoint")
    own = model.state_dict()
    state = {k.removeprefix("module."): v for k, v in state.items()}
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    if not usable:
        raise CheckpointError(f"--weights {path}: no tensor matches this model")
    model.load_state_dict(usable, strict=False)
    return f"{len(usable)}/{len(own)} tensors"


def _build(args: argparse.Namespace, info: RankInfo) -> _Run:
    """Model (same initial weights on every rank), optimizer, lr schedule, data loader."""
    data = load_digits(args.data or DEFAULT_DATA)
    top = int(data["y_train"].max())
    if args.num_classes <= top:
        raise SystemExit(f"error: --num-classes {args.num_classes}, but labels go up to {top}")
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's)
    model = DigitsNet(args.num_classes, args.dropout)
    if args.weights:
        _log(
            info, f"weights: loaded {_load_weights(model, args.weights, info)} from {args.weights}"
        )
    if args.freeze_layers:
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("classifier."))
    sync_bn = args.syncBN and info.distributed  # one process: plain BatchNorm is the same
    if sync_bn and info.device.type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    elif sync_bn:
        from helpers.syncbn import convert_sync_batchnorm  # the CPU version (notebook 07)

        model = convert_sync_batchnorm(model)
    model.to(info.device)
    base_lr = args.lr * (info.world_size if args.scale_lr else 1)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=base_lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: lr_factor(epoch, args.epochs, args.lrf)
    )
    ddp = model
    if info.distributed:
        ddp = DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)
    train_set = Digits(data["x_train"], data["y_train"], augment=args.augment)
    sampler = DistributedSampler(
        train_set, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=args.seed
    )
    loader_rng = torch.Generator()
    loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
        generator=loader_rng,
    )  # fmt: skip
    return _Run(
        model, ddp, optimizer, scheduler, loader, sampler, loader_rng, data, base_lr, sync_bn
    )


def _resume(args: argparse.Namespace, info: RankInfo, run: _Run) -> tuple[int, list[dict]]:
    """Load a checkpoint if there is one to continue from; return (epochs done, history).

    A restart that some node counted (TORCHELASTIC_RESTART_COUNT > 0 on some rank) reads
    out-dir's last.pt first, so it does not go back to an older --resume file; a restart for a
    membership change alone is not counted and loads the --resume file (or starts over) as the
    launch did. The RNG states are restored last and nothing reseeds after them.
    """
    candidates = []
    if info.attempt > 0:
        candidates.append(("restart", args.out_dir / "last.pt"))
    if args.resume:
        path = args.out_dir / "last.pt" if args.resume == "auto" else Path(args.resume)
        candidates.append(("resume", path))
    for why, path in candidates:
        raw = _read_on_rank0(path, info)  # collective: every rank walks the same list
        if raw is None:
            continue
        ckpt = load_checkpoint(raw, name=str(path))
        run.model.load_state_dict(ckpt["model"])
        run.optimizer.load_state_dict(ckpt["optimizer"])
        run.scheduler.load_state_dict(ckpt["scheduler"])
        _rescale_lr(run, info)
        rng = ckpt.get("rng") or []
        if len(rng) == info.world_size:
            _set_rng_state(rng[info.rank])
        else:  # another world size: per-rank streams cannot carry over
            torch.manual_seed(_seed(args.seed, info.rank, int(ckpt["epoch"])))
            _log(info, f"{why}: {len(rng)} saved RNG states for {info.world_size} ranks: reseeded")
        _log(info, f"{why}: {path} holds {ckpt['epoch']} epoch(s); continuing")
        return int(ckpt["epoch"]), list(ckpt["history"])
    if args.resume:
        raise CheckpointError(f"--resume {candidates[-1][1]}: no such checkpoint file")
    if info.attempt > 0:
        _log(info, f"restart {info.attempt}: no checkpoint yet, starting from epoch 1")
    torch.manual_seed(_seed(args.seed, info.rank))  # per-rank dropout (and augmentation)
    return 0, []


def _rescale_lr(run: _Run, info: RankInfo) -> None:
    """After loading: make the saved schedule start from this run's base lr (--scale-lr)."""
    saved = run.scheduler.base_lrs[0]
    if saved == run.base_lr:
        return
    for group in run.optimizer.param_groups:
        group["lr"] *= run.base_lr / saved
        group["initial_lr"] = run.base_lr
    run.scheduler.base_lrs = [run.base_lr] * len(run.optimizer.param_groups)
    _log(info, f"lr: base lr {saved:g} in the checkpoint, {run.base_lr:g} now (--scale-lr)")


def _train_one_epoch(args: argparse.Namespace, info: RankInfo, run: _Run, epoch: int) -> float:
    """One pass over this rank's shard; returns the mean loss over every rank's samples."""
    run.sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    run.loader_rng.manual_seed(_seed(args.seed, info.rank, epoch))  # the workers' seeds
    run.ddp.train()
    if args.freeze_layers:
        run.model.features.eval()  # frozen means frozen: BatchNorm statistics too
    steps = len(run.loader)
    kill_at = _kill_step(info, epoch + 1, steps)
    bar = _Progress(steps, f"epoch {epoch + 1}/{args.epochs}", info.rank == 0)
    loss_sum = torch.zeros((), dtype=torch.float64, device=info.device)
    seen = 0
    for step, (x, y) in enumerate(run.loader):
        if step == kill_at:
            print(f"{KILL_ENV}: rank {info.rank} kills itself", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = x.to(info.device, non_blocking=True), y.to(info.device, non_blocking=True)
        loss = F.cross_entropy(run.ddp(x), y)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        loss_sum += loss.detach() * len(y)
        seen += len(y)
        bar.update(step + 1)
    bar.close()
    total_loss, total_seen = _all_reduce_sum([loss_sum.item(), seen], info)
    return total_loss / total_seen


def _save(args: argparse.Namespace, info: RankInfo, run: _Run, history: list[dict]) -> None:
    """Rank 0 writes out-dir/last.pt (every rank's RNG state is gathered to it first)."""
    rng_states = _gather_rng_states(info)
    if info.rank != 0:
        return
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "epoch": history[-1]["epoch"],
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "rng": rng_states,
            "history": history,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        },
        args.out_dir / "last.pt",
    )


def _train(args: argparse.Namespace, info: RankInfo) -> int:
    t_start = time.perf_counter()
    run = _build(args, info)
    start_epoch, history = _resume(args, info, run)
    _log(
        info,
        f"train_ddp: {info.world_size} process(es), {info.backend} on {info.device.type}, "
        f"{len(run.loader.dataset)} train / {len(run.data['y_test'])} test digits, "
        f"{len(run.loader)} steps per epoch, global batch {args.batch_size * info.world_size}, "
        f"syncBN {run.sync_bn}, attempt {info.attempt}",
    )
    for epoch in range(start_epoch, args.epochs):
        t_epoch = time.perf_counter()
        lr = run.optimizer.param_groups[0]["lr"]
        loss = _train_one_epoch(args, info, run, epoch)
        run.scheduler.step()
        acc = _evaluate(run.model, run.data, info)
        epoch_record = {"epoch": epoch + 1, "loss": loss, "accuracy": acc, "lr": lr,
                        "attempt": info.attempt, "world_size": info.world_size}  # fmt: skip
        history.append(epoch_record)
        _save(args, info, run, history)
        _log(
            info,
            f"epoch {epoch + 1}/{args.epochs}  loss {loss:.4f}  accuracy {acc:.4f}  "
            f"lr {lr:.6f}  ({time.perf_counter() - t_epoch:.1f} s)",
        )
    if history:
        best = max(history, key=lambda h: h["accuracy"])
        _log(
            info,
            f"done: {len(history)} epochs, final accuracy {history[-1]['accuracy']:.4f}, "
            f"best {best['accuracy']:.4f} (epoch {best['epoch']}), "
            f"{time.perf_counter() - t_start:.1f} s, checkpoint {args.out_dir / 'last.pt'}",
        )
    else:
        _log(info, "done: no epoch to run (--epochs 0)")
    return 0


@torch.no_grad()
def _evaluate(model: nn.Module, data: dict[str, torch.Tensor], info: RankInfo) -> float:
    """Test accuracy: each rank scores every world_size-th sample, the counts are summed."""
    _sync_buffers(model, info)
    model.eval()
    x = data["x_test"][info.rank :: info.world_size].to(info.device)  # (n_rank, 1, 8, 8)
    y = data["y_test"][info.rank :: info.world_size].to(info.device)
    correct = (model(x).argmax(1) == y).sum().item() if len(y) else 0
    total_correct, total = _all_reduce_sum([correct, len(y)], info)
    return total_correct / total


@record
def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, set up the process group, train, tear down; return the exit code."""
    args = build_parser().parse_args(argv)
    if args.epochs < 0 or args.batch_size < 1 or not 0 < args.lrf <= 1 or args.lr <= 0:
        raise SystemExit("error: need --epochs >= 0, --batch-size >= 1, --lr > 0, 0 < --lrf <= 1")
    info = _init_distributed(args)
    code = 1
    try:
        code = _train(args, info)
    except CheckpointError as err:  # the same bytes on every rank: every rank ends here
        if info.rank == 0:
            print(f"error: {err}", file=sys.stderr, flush=True)
        code = 2
    finally:
        if info.distributed and dist.is_initialized():
            if code == 0:
                dist.barrier()  # every rank is done with collectives before any tears down
            dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
