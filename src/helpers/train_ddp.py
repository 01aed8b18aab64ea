"""Train a small CNN on the shipped 8x8 digits with DDP: the script a reader copies and adapts.

Used by: notebook 09 (training with torchrun), tests/test_train_ddp.py, the README and
slurm/train_ddp.sbatch. CPU processes with gloo, or one GPU per process with NCCL (LOCAL_RANK
picks the GPU); the same code, no edits.

    torchrun --standalone --nproc-per-node=2 -m helpers.train_ddp --epochs 5     # one machine
    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST_OF_NODE_0:29500 --rdzv-id=job42 -m helpers.train_ddp   # on each node
    python -m helpers.train_ddp --epochs 5                                           # 1 process

What it does, in the order a reader meets it in `main`:
- process group from the environment torchrun sets (`init_method="env://"`: RANK, WORLD_SIZE,
  LOCAL_RANK, MASTER_ADDR, MASTER_PORT); without torchrun it runs as a single process;
- data from data/digits.npz (numpy only, nothing downloads), split across ranks by
  DistributedSampler, reshuffled every epoch by `set_epoch`;
- `--syncBN`: nn.SyncBatchNorm on GPUs, helpers.syncbn's CPU version otherwise;
  `--weights`: start from a checkpoint (layers whose shapes differ are skipped);
  `--freeze-layers`: train only the classifier head;
- SGD with momentum, cosine decay of the learning rate from --lr to --lr * --lrf per epoch;
- rank 0 alone prints: a progress bar per epoch, one line per epoch (loss, accuracy, lr) and
  a final summary; the exit code is 0 only when every epoch ran;
- after every epoch rank 0 writes `<out-dir>/last.pt` atomically (temp file + os.replace):
  model, optimizer, scheduler, epochs done, every rank's RNG states and a per-epoch history;
- `--resume`, or a restart by torchrun's `--max-restarts`, continues after the last completed
  epoch: no epoch lost, none repeated (the history records which attempt ran each epoch);
- every checkpoint is read with `torch.load(weights_only=True)`; a truncated, foreign or
  malicious file raises CheckpointError with a one-line reason. Only rank 0 reads the file;
  its bytes are broadcast, so nodes need no shared file system to resume.

Test hook: TRAIN_DDP_KILL_AT="RANK:EPOCH" makes that global rank SIGKILL itself halfway through
that (1-based) epoch, on torchrun's first attempt only (TORCHELASTIC_RESTART_COUNT=0).
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_DATA",
    "CheckpointError",
    "DigitsNet",
    "build_parser",
    "load_checkpoint",
    "load_digits",
    "main",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = "helpers.train_ddp/1"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data" / "digits.npz"
KILL_ENV = "TRAIN_DDP_KILL_AT"


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
        "--rdzv-endpoint=NODE0:29500 --rdzv-id=JOB -m helpers.train_ddp on every node.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data", type=Path, default=None, help="digits .npz file (None: data/digits.npz)"
    )
    p.add_argument("--epochs", type=int, default=5, help="total number of epochs")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per process")
    p.add_argument("--lr", type=float, default=0.05, help="initial learning rate (SGD)")
    p.add_argument("--lrf", type=float, default=0.1, help="final lr = lr * lrf (cosine decay)")
    p.add_argument(
        "--syncBN",
        action="store_true",
        help="synchronise BatchNorm statistics across processes "
        "(nn.SyncBatchNorm on GPUs, helpers.syncbn on CPU)",
    )
    p.add_argument("--weights", type=str, default="", help="initial weights (checkpoint file)")
    p.add_argument("--freeze-layers", action="store_true", help="train only the classifier head")
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto: one GPU per process (LOCAL_RANK) when GPUs are visible, else CPU",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data order")
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
        help="continue from a checkpoint (no PATH: <out-dir>/last.pt); "
        "a torchrun restart resumes from <out-dir>/last.pt automatically",
    )
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    return p


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


def _conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()
    )


class DigitsNet(nn.Module):
    """Three conv-BN-ReLU blocks and a linear head: about 24k parameters, 97 % on digits."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(1, 16),  # (B, 16, 8, 8)
            _conv_bn(16, 32),  # (B, 32, 8, 8)
            nn.MaxPool2d(2),  # (B, 32, 4, 4)
            _conv_bn(32, 64),  # (B, 64, 4, 4)
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),  # (B, 64)
        )
        self.classifier = nn.Linear(64, num_classes)  # (B, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


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
class _Ctx:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    distributed: bool
    attempt: int  # torchrun's TORCHELASTIC_RESTART_COUNT: 0 first, 1 after one restart...


def _init_distributed(device_arg: str) -> _Ctx:
    """Process group from torchrun's env (env://): gloo on CPU, NCCL with one GPU per process."""
    env = os.environ
    distributed = "RANK" in env and "WORLD_SIZE" in env
    rank = int(env.get("RANK", 0))
    world_size = int(env.get("WORLD_SIZE", 1))
    local_rank = int(env.get("LOCAL_RANK", 0))
    use_cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
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
        dist.init_process_group(
            backend, init_method="env://", device_id=device if use_cuda else None
        )
    attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", 0))
    return _Ctx(rank, world_size, local_rank, device, backend, distributed, attempt)


def _all_reduce_sum(values: list[float], ctx: _Ctx) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    if ctx.distributed:
        dist.all_reduce(t)
    return t.tolist()


def _read_on_rank0(path: Path, ctx: _Ctx) -> bytes | None:
    """Rank 0 reads the file, every rank gets its bytes (None: missing). No shared FS needed."""
    data = None
    if ctx.rank == 0 and path.is_file():
        data = path.read_bytes()
    if not ctx.distributed:
        return data
    size = torch.tensor([-1 if data is None else len(data)], dtype=torch.int64, device=ctx.device)
    dist.broadcast(size, 0)
    n = int(size.item())
    if n < 0:
        return None
    buf = torch.empty(n, dtype=torch.uint8, device=ctx.device)
    if ctx.rank == 0:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    dist.broadcast(buf, 0)
    return data if ctx.rank == 0 else buf.cpu().numpy().tobytes()


def _gather_rng_states(ctx: _Ctx) -> list[dict[str, Any]]:
    state = _rng_state()
    if not ctx.distributed:
        return [state]
    states: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(states, state)
    return states


def _sync_buffers(model: nn.Module, ctx: _Ctx) -> None:
    """Give every rank rank 0's BatchNorm running stats (each rank updated its own in train)."""
    if ctx.distributed:
        for buf in model.buffers():
            dist.broadcast(buf, 0)


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


def _log(ctx: _Ctx, msg: str) -> None:
    if ctx.rank == 0:
        print(msg, flush=True)


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------


def _kill_step(ctx: _Ctx, epoch: int, steps: int) -> int | None:
    """Test hook: the step at which this rank SIGKILLs itself in `epoch`, or None."""
    spec = os.environ.get(KILL_ENV, "")
    if not spec or ctx.attempt != 0:
        return None
    rank, at = (int(v) for v in spec.split(":"))
    return steps // 2 if (rank == ctx.rank and at == epoch) else None


def _load_weights(model: nn.Module, path: str, ctx: _Ctx) -> str:
    """Copy matching tensors from a checkpoint or a bare state_dict into `model`."""
    data = _read_on_rank0(Path(path), ctx)
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


def _train(args: argparse.Namespace, ctx: _Ctx) -> int:
    t_start = time.perf_counter()
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP broadcasts rank 0's)
    data = load_digits(args.data or DEFAULT_DATA)
    model = DigitsNet()
    if args.weights:
        _log(ctx, f"weights: loaded {_load_weights(model, args.weights, ctx)} from {args.weights}")
    if args.freeze_layers:
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("classifier."))
    sync_bn = args.syncBN and ctx.distributed  # one process: plain BatchNorm is the same
    if sync_bn:
        if ctx.device.type == "cuda":
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        else:
            from helpers.syncbn import convert_sync_batchnorm  # the CPU version

            model = convert_sync_batchnorm(model)
    model.to(ctx.device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs, eta_min=args.lr * args.lrf
    )

    # resume: torchrun restarted us after a failure (then our own last.pt comes first, so a
    # restart never goes back to an older --resume file), or an explicit --resume
    start_epoch, history = 0, []
    candidates = []
    if ctx.attempt > 0:
        candidates.append(("restart", args.out_dir / "last.pt"))
    if args.resume:
        path = args.out_dir / "last.pt" if args.resume == "auto" else Path(args.resume)
        candidates.append(("resume", path))
    for why, path in candidates:
        raw = _read_on_rank0(path, ctx)  # collective: every rank walks the same list
        if raw is None:
            continue
        ckpt = load_checkpoint(raw, name=str(path))
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        start_epoch, history = int(ckpt["epoch"]), list(ckpt["history"])
        rng = ckpt.get("rng") or []
        if len(rng) == ctx.world_size:
            _set_rng_state(rng[ctx.rank])
        _log(ctx, f"{why}: {path} holds {start_epoch} epoch(s); continuing")
        break
    else:
        if args.resume:
            raise CheckpointError(f"--resume {candidates[-1][1]}: no such checkpoint file")
        if ctx.attempt > 0:
            _log(ctx, f"restart {ctx.attempt}: no checkpoint yet, starting from epoch 1")

    if ctx.distributed:
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        ddp = DDP(model, device_ids=device_ids)
    else:
        ddp = model
    torch.manual_seed(args.seed + 1000 * ctx.rank + start_epoch)  # per-rank randomness

    train_set = TensorDataset(data["x_train"], data["y_train"])
    sampler = DistributedSampler(
        train_set, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers
    )
    steps = len(loader)
    _log(
        ctx,
        f"train_ddp: {ctx.world_size} process(es), {ctx.backend} on {ctx.device.type}, "
        f"{len(train_set)} train / {len(data['y_test'])} test digits, {steps} steps per epoch, "
        f"global batch {args.batch_size * ctx.world_size}, syncBN {sync_bn}, "
        f"attempt {ctx.attempt}",
    )

    for epoch in range(start_epoch, args.epochs):
        t_epoch = time.perf_counter()
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        ddp.train()
        kill_at = _kill_step(ctx, epoch + 1, steps)
        bar = _Progress(steps, f"epoch {epoch + 1}/{args.epochs}", ctx.rank == 0)
        loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        seen = 0
        for step, (x, y) in enumerate(loader):
            if step == kill_at:
                print(f"{KILL_ENV}: rank {ctx.rank} kills itself", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = x.to(ctx.device, non_blocking=True), y.to(ctx.device, non_blocking=True)
            loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(y)
            seen += len(y)
            bar.update(step + 1)
        bar.close()
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        total_loss, total_seen = _all_reduce_sum([loss_sum.item(), seen], ctx)
        acc = _evaluate(model, data, ctx)
        record_ = {
            "epoch": epoch + 1,
            "loss": total_loss / total_seen,
            "accuracy": acc,
            "lr": lr,
            "attempt": ctx.attempt,
            "world_size": ctx.world_size,
        }
        history.append(record_)
        rng_states = _gather_rng_states(ctx)
        if ctx.rank == 0:
            save_checkpoint(
                {
                    "format": CHECKPOINT_FORMAT,
                    "epoch": epoch + 1,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "rng": rng_states,
                    "history": history,
                    "args": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                },
                args.out_dir / "last.pt",
            )
        _log(
            ctx,
            f"epoch {epoch + 1}/{args.epochs}  loss {record_['loss']:.4f}  accuracy {acc:.4f}  "
            f"lr {lr:.6f}  ({time.perf_counter() - t_epoch:.1f} s)",
        )

    if history:
        best = max(history, key=lambda h: h["accuracy"])
        _log(
            ctx,
            f"done: {len(history)} epochs, final accuracy {history[-1]['accuracy']:.4f}, "
            f"best {best['accuracy']:.4f} (epoch {best['epoch']}), "
            f"{time.perf_counter() - t_start:.1f} s, checkpoint {args.out_dir / 'last.pt'}",
        )
    else:
        _log(ctx, "done: no epoch to run (--epochs 0)")
    return 0


@torch.no_grad()
def _evaluate(model: nn.Module, data: dict[str, torch.Tensor], ctx: _Ctx) -> float:
    """Test accuracy: each rank scores every world_size-th sample, the counts are summed."""
    _sync_buffers(model, ctx)
    model.eval()
    x = data["x_test"][ctx.rank :: ctx.world_size].to(ctx.device)  # (n_rank, 1, 8, 8)
    y = data["y_test"][ctx.rank :: ctx.world_size].to(ctx.device)
    correct = (model(x).argmax(1) == y).sum().item() if len(y) else 0
    total_correct, total = _all_reduce_sum([correct, len(y)], ctx)
    return total_correct / total


@record
def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, set up the process group, train, tear down; return the exit code."""
    args = build_parser().parse_args(argv)
    if args.epochs < 0 or args.batch_size < 1 or not 0 < args.lrf <= 1 or args.lr <= 0:
        raise SystemExit("error: need --epochs >= 0, --batch-size >= 1, --lr > 0, 0 < --lrf <= 1")
    ctx = _init_distributed(args.device)
    code = 1
    try:
        code = _train(args, ctx)
    except CheckpointError as err:  # the same bytes on every rank: every rank ends here
        if ctx.rank == 0:
            print(f"error: {err}", file=sys.stderr, flush=True)
        code = 2
    finally:
        if ctx.distributed and dist.is_initialized():
            if code == 0:
                dist.barrier()  # every rank is done with collectives before any tears down
            dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
