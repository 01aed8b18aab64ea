"""ZeRO and FSDP2, counted: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

Every definition notebook 13 runs from this topic is shown or called by one that is, so there is
no harness; the package
(`helpers.sharded`) re-exports this file. tests/test_code_map.py checks the order and these rules.

Used by: notebook 13.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from helpers.launch import current_device

LR = 1e-2
IN_FEATURES, HIDDEN, OUT_FEATURES = 10, 30, 6  # odd sizes: shards need padding at N = 4


# -- 13 · 1. What DDP repeats on every rank -------------------------------------------------------


def make_model(seed: int = 0) -> nn.Sequential:
    """The same three-layer MLP on every rank (seeded), 10 -> 30 -> 30 -> 6."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, OUT_FEATURES),
    )


def memory_formula(
    numel: int, padded: int, world_size: int, scheme: str, fsdp_padded: int | None = None
) -> dict[str, float]:
    """Bytes per rank for fp32 training with AdamW, after the ZeRO paper's accounting.

    The paper (Rajbhandari et al., 2020, section 3.1) counts mixed-precision Adam: fp16
    parameters and gradients (2 + 2 bytes) and "an fp32 copy of the parameters, momentum and
    variance" (K = 12). Here everything is fp32: parameters 4, gradients 4; DDP's AdamW keeps 8
    (exp_avg, exp_avg_sq); ZeroAdamW keeps 12 per owned element, because it gives AdamW an fp32
    copy of each shard to update (its own choice in fp32 training, not a master copy of fp16
    weights). `padded`: ZeRO's flat padding (`padded_numel` per parameter). FSDP2's parameters
    and gradients are stored padded per dim 0 (`fsdp_padded`, summed `fsdp_padded_numel`; default
    `numel`), the same on every rank; its AdamW moments are not padded and differ between ranks,
    so its optimizer entry is their mean over the ranks, 8 * numel / N.
    """
    n, p, q = world_size, padded, numel if fsdp_padded is None else fsdp_padded
    return {
        "ddp": {"params": 4 * numel, "grads": 4 * numel, "optimizer": 8 * numel},
        "zero1": {"params": 4 * numel, "grads": 4 * numel, "optimizer": 12 * p / n},
        "zero2": {"params": 4 * numel, "grads": 4 * p / n, "optimizer": 12 * p / n},
        "fsdp2": {"params": 4 * q / n, "grads": 4 * q / n, "optimizer": 8 * numel / n},
    }[scheme]


# -- 13 · 3. ZeRO stages 1 and 2 from scratch -----------------------------------------------------


def padded_numel(numel: int, world_size: int) -> int:
    """`numel` rounded up to a multiple of `world_size`: N equal shards."""
    return math.ceil(numel / world_size) * world_size


class ZeroAdamW:
    """AdamW over sharded state: ZeRO stage 1 (optimizer state) or 2 (and gradients).

    Rank r keeps, for every parameter p, an fp32 copy of its shard of p (`self.shards`, what the
    optimizer updates) and AdamW's exp_avg and exp_avg_sq for that shard only.
    """

    def __init__(self, model: nn.Module, stage: int, lr: float = LR) -> None:
        assert stage in (1, 2), f"ZeRO stage must be 1 or 2, got {stage}"
        self.stage, self.rank, self.world_size = stage, dist.get_rank(), dist.get_world_size()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.shards = [nn.Parameter(self._my_slice(p.detach())) for p in self.params]
        self.optimizer = torch.optim.AdamW(self.shards, lr=lr)
        if stage == 2:  # reduce each gradient the moment backward has accumulated it
            for p, shard in zip(self.params, self.shards, strict=True):
                p.register_post_accumulate_grad_hook(lambda p, shard=shard: self._reduce(p, shard))

    def _my_slice(self, t: torch.Tensor) -> torch.Tensor:
        flat = torch.zeros(padded_numel(t.numel(), self.world_size), device=t.device)
        flat[: t.numel()] = t.reshape(-1)
        return flat.chunk(self.world_size)[self.rank].clone()  # (padded / N,)

    def _reduce(self, p: torch.Tensor, shard: nn.Parameter) -> None:
        """Full gradient of p -> this rank's shard of the averaged gradient."""
        flat = torch.zeros(padded_numel(p.numel(), self.world_size), device=p.device)
        flat[: p.numel()] = p.grad.reshape(-1)
        out = torch.empty_like(shard)
        dist.reduce_scatter_single(out, flat, op=dist.ReduceOp.SUM)
        out /= self.world_size
        # several backward passes before a step accumulate into the shard's gradient
        shard.grad = out if shard.grad is None else shard.grad + out
        if self.stage == 2:
            p.grad = None  # stage 2 keeps only the shard

    def step(self) -> None:
        if self.stage == 1:  # stage 1 reduces after backward, from full gradients
            for p, shard in zip(self.params, self.shards, strict=True):
                self._reduce(p, shard)
        self.optimizer.step()
        for p, shard in zip(self.params, self.shards, strict=True):
            full = torch.empty(padded_numel(p.numel(), self.world_size), device=p.device)
            dist.all_gather_single(full, shard.detach())  # every rank's updated shard
            p.data.copy_(full[: p.numel()].view_as(p))

    def zero_grad(self) -> None:
        for t in (*self.params, *self.shards):
            t.grad = None


def fsdp_padded_numel(shape: tuple[int, ...] | torch.Size, world_size: int) -> int:
    """Elements of a parameter after FSDP2's padding: dim 0 rounded up to a multiple of N.

    FSDP2 cuts dim 0 into chunks of ceil(rows / N) (`_chunk_with_empty`) and stores every rank's
    chunk in a buffer of the first chunk's size (`FSDPParam._init_sharded_param`).
    """
    rows = math.ceil(shape[0] / world_size) * world_size
    return rows * math.prod(shape[1:])


def sharding_worker(rank: int, world_size: int, schemes: list[str], steps: int = 3) -> list[dict]:
    """Train the same model under each scheme ("ddp", "zero1", "zero2", "fsdp2") in turn."""
    shapes = [p.shape for p in make_model().parameters()]
    numel = sum(math.prod(s) for s in shapes)
    padded = sum(padded_numel(math.prod(s), world_size) for s in shapes)
    fsdp_padded = sum(fsdp_padded_numel(s, world_size) for s in shapes)
    results = []
    for scheme in schemes:
        r = _train(scheme, rank, steps)
        r |= {"numel": numel, "padded": padded, "fsdp_padded": fsdp_padded}
        results.append(r)
    return results


def batch(rank: int, step: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch at `step`: inputs (size, 10) and regression targets (size, 6)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, IN_FEATURES, generator=g), torch.randn(size, OUT_FEATURES, generator=g)


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # a DTensor's shard on this rank


def _storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages behind `tensors`: a view counts its whole buffer, once."""
    storages = {}
    for t in tensors:
        if t is not None:
            st = t.untyped_storage()
            storages[st.data_ptr(), st.nbytes()] = st.nbytes()
    return sum(storages.values())


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """exp_avg and exp_avg_sq (AdamW's per-element state); the scalar step counter is left out."""
    return _bytes(_local(v) for s in optimizer.state.values() for k, v in s.items() if k != "step")


def _counts(comm: Any) -> dict[str, int]:
    """Collectives seen by a CommDebugMode, by short name: {"all_gather": 3, ...}."""
    names = {
        "allreduce_": "all_reduce",
        "_allgather_base_": "all_gather",
        "_reduce_scatter_base_": "reduce_scatter",
    }
    return {names.get(str(k).split(".")[-1], str(k)): v for k, v in comm.get_comm_counts().items()}


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def _flat_params(model: nn.Module) -> list[float]:
    return torch.cat([_full(p).detach().reshape(-1).cpu() for p in model.parameters()]).tolist()


def _train(scheme: str, rank: int, steps: int) -> dict[str, Any]:
    """Train `steps` steps under `scheme`; bytes measured after the first backward and step."""
    from torch.distributed.tensor.debug import CommDebugMode

    device = current_device()  # cuda:<rank> when launch chose NCCL, else the CPU
    model = make_model().to(device)
    if scheme == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    elif scheme == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)  # each Linear's parameters become DTensors sharded on dim 0
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    else:
        optimizer = ZeroAdamW(model, stage=int(scheme[-1]))
    out: dict[str, Any] = {"scheme": scheme}
    for step in range(steps):
        x, y = (t.to(device) for t in batch(rank, step))
        counts = {}
        with CommDebugMode() as comm:
            loss = nn.functional.mse_loss(model(x), y)
        counts["forward"] = _counts(comm)
        with CommDebugMode() as comm:
            loss.backward()
        counts["backward"] = _counts(comm)
        if step == 0:
            params = list(model.parameters())
            grads = [_local(p.grad) if p.grad is not None else None for p in params]
            if isinstance(optimizer, ZeroAdamW):
                grads += [s.grad for s in optimizer.shards]
            out["param_bytes"] = _bytes(_local(p) for p in params)
            out["grad_bytes"] = _bytes(grads)
            out["param_storage_bytes"] = _storage_bytes(_local(p) for p in params)
            out["grad_storage_bytes"] = _storage_bytes(grads)
        with CommDebugMode() as comm:
            optimizer.step()
        counts["step"] = _counts(comm)
        if step == 0:  # gradients again: ZeRO-1's step() added the shard gradients
            in_step = [_local(p.grad) if p.grad is not None else None for p in params]
            if isinstance(optimizer, ZeroAdamW):
                in_step += [s.grad for s in optimizer.shards]
            out["grad_bytes_in_step"] = _bytes(in_step)
            out["collectives"] = counts
            inner = optimizer.optimizer if isinstance(optimizer, ZeroAdamW) else optimizer
            extra = _bytes(optimizer.shards) if isinstance(optimizer, ZeroAdamW) else 0
            out["moment_bytes"] = _state_bytes(inner)  # AdamW's exp_avg and exp_avg_sq only
            out["optimizer_bytes"] = out["moment_bytes"] + extra
            state = [_local(v) for s in inner.state.values() for k, v in s.items() if k != "step"]
            shards = optimizer.shards if isinstance(optimizer, ZeroAdamW) else []
            out["optimizer_storage_bytes"] = _storage_bytes([*state, *shards])
            if scheme == "fsdp2":
                w = model[0].weight
                out["dtensor"] = {
                    "type": type(w).__name__,
                    "placements": str(w.placements),
                    "full_shape": tuple(w.shape),
                    "local_shape": tuple(w.to_local().shape),
                    "local_storage_numel": w.to_local().untyped_storage().nbytes() // 4,
                }
        optimizer.zero_grad()
    out["params"] = _flat_params(model)
    return out
