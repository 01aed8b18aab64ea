"""DDP, read by running it: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.ddp`, which re-exports both) still loads the harness.
tests/test_code_map.py checks the order and these rules.

Used by: notebooks 06, 07 and 08.
"""

import contextlib
import copy
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.launch import current_device

# -- 06 · 1. A model's state is parameters and buffers: DDP broadcasts both at ... ----------------


# models and plumbing


def make_bn_net(seed: int = 0) -> nn.Sequential:
    """Linear(4, 8) -> BatchNorm1d(8) -> ReLU -> Linear(8, 2): parameters *and* buffers."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _diverged_bn_net(rank: int) -> nn.Sequential:
    """A BN net whose parameters and buffers differ on every rank."""
    model = make_bn_net(seed=rank)
    model[1].running_mean.fill_(rank + 1.0)
    model[1].num_batches_tracked.fill_(10 * rank)
    return model


def wrap_ddp(model: nn.Module, **kwargs: Any) -> DDP:
    """Move `model` to this rank's device and wrap it (device_ids only on CUDA)."""
    device = current_device()
    model.to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=device_ids, **kwargs)


def _rounded(x: float | torch.Tensor, nd: int = 4) -> float:
    """`x` as a Python float rounded to `nd` digits: stable text for stored outputs."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
    return round(float(x), nd)


# 06: state at construction, buffers during training


def _state_probe(model: nn.Sequential) -> dict[str, float]:
    return {
        "0.weight[0,0]": _rounded(model[0].weight[0, 0]),
        "1.running_mean[0]": _rounded(model[1].running_mean[0]),
        "1.num_batches_tracked": int(model[1].num_batches_tracked),
    }


def init_broadcast_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Parameters and buffers per rank before and after `DDP(...)`, for several options.

    For each constructor option it also returns the warnings the constructor raised
    (category and first words), caught here so they never reach a notebook's stderr.
    """
    model = _diverged_bn_net(rank)
    out: dict[str, Any] = {"before": _state_probe(model)}
    wrap_ddp(model)
    out["after"] = _state_probe(model)
    out["options"] = {}
    for label, kwargs in [
        ("default", {}),
        ("forward_sync_buffers=False", {"forward_sync_buffers": False}),
        ("broadcast_buffers=True", {"broadcast_buffers": True}),
        ("broadcast_buffers=False", {"broadcast_buffers": False}),
    ]:
        model = _diverged_bn_net(rank)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ddp = wrap_ddp(model, **kwargs)
        out["options"][label] = {
            **_state_probe(model),
            "forward_sync_buffers": ddp.forward_sync_buffers,
            "warnings": [
                f"{w.category.__name__}: {' '.join(str(w.message).split()[:6])}" for w in caught
            ],
        }
    return out


# -- 06 · 2. Buffers during training: `forward_sync_buffers` (the old ... -------------------------


def _rank_batch(rank: int, n: int, features: int, seed: int, offset: float = 0.0) -> torch.Tensor:
    """A batch only this rank sees: (n, features), reproducible from (seed, rank)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(n, features, generator=g) + offset * rank


def buffer_sync_worker(rank: int, world_size: int, schedule: list[str]) -> dict[str, Any]:
    """BatchNorm running_mean[0] per forward: as the module sees it, and after the forward.

    `schedule` lists forwards: "train", "eval", "train+no_grad", "eval+no_grad". Each rank feeds
    its own batch (shifted by 3*rank so the ranks' statistics differ). Runs with the default
    (forward_sync_buffers=True) and with forward_sync_buffers=False. Also checks that rank 0's
    final running stats equal a plain BatchNorm fed rank 0's batches only.
    """
    out: dict[str, Any] = {}
    for label, kwargs in [("sync", {}), ("no sync", {"forward_sync_buffers": False})]:
        model = make_bn_net(seed=0)
        ddp = wrap_ddp(model, **kwargs)
        reference = copy.deepcopy(model)  # rank 0's state, never wrapped
        seen: list[float] = []
        model.register_forward_pre_hook(
            lambda m, args, seen=seen: seen.append(_rounded(m[1].running_mean[0]))
        )
        after, batches = [], []
        for step, mode in enumerate(schedule):
            x = _rank_batch(rank, 8, 4, seed=step, offset=3.0).to(current_device())  # (8, 4)
            model.train(mode.startswith("train"))
            if "no_grad" in mode:
                with torch.no_grad():
                    ddp(x)
            else:
                ddp(x).sum().backward()
            after.append(_rounded(model[1].running_mean[0]))
            batches.append(_rank_batch(0, 8, 4, seed=step, offset=3.0).to(current_device()))
        with torch.no_grad():  # a plain model fed rank 0's batches in the same modes
            for mode, x in zip(schedule, batches, strict=True):
                reference.train(mode.startswith("train"))
                reference(x)
        out[label] = {
            "seen": seen,
            "after": after,
            "matches_rank0_only_bn": bool(
                torch.allclose(reference[1].running_mean, model[1].running_mean)
            ),
        }
    return out


# -- 06 · 4. Gradient synchronisation: autograd hooks, the Reducer's buckets, a counting ... ------


class CommCounter:
    """State of `count_allreduce_hook`: one record per bucket all-reduce, tagged with `step`."""

    def __init__(self, module: nn.Module) -> None:
        self.names = {id(p): n for n, p in module.named_parameters()}
        self.step = 0
        self.calls: list[dict[str, Any]] = []
        self.events: list[str] = []  # all-reduces interleaved with other marks, in order

    def count(self, step: int | None = None) -> int:
        """All-reduces so far, or in `step` only."""
        return sum(1 for c in self.calls if step is None or c["step"] == step)


def count_allreduce_hook(
    state: CommCounter, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: record the bucket, then call `default_hooks.allreduce_hook`.

    That hook's docstring promises the same result as registering no hook at all.
    """
    buffer = bucket.buffer()  # flat gradients of this bucket's parameters
    state.calls.append(
        {
            "step": state.step,
            "bucket": bucket.index(),
            "numel": buffer.numel(),
            "dtype": str(buffer.dtype).replace("torch.", ""),
            "params": [state.names.get(id(p), "?") for p in bucket.parameters()],
            "is_last": bucket.is_last(),
        }
    )
    state.events.append(f"all-reduce bucket {bucket.index()}")
    return default_hooks.allreduce_hook(None, bucket)  # divide by world size, all-reduce sum


def attach_counter(ddp: DDP) -> CommCounter:
    """Register `count_allreduce_hook` on `ddp` and return its state."""
    state = CommCounter(ddp.module)
    ddp.register_comm_hook(state, count_allreduce_hook)
    return state


def make_wide_mlp(seed: int = 0) -> nn.Sequential:
    """Linear(256, 512) -> ReLU -> Linear(512, 512) -> ReLU -> Linear(512, 10): about 1.5 MiB.

    Big enough that DDP's default buckets (first bucket 1 MiB, then 25 MiB) split it in two once
    the Reducer rebuilds them after the first iteration (notebook 06 measures it).
    """
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


# 06: buckets and the equivalence check


def bucket_worker(rank: int, world_size: int, steps: int = 3) -> dict[str, Any]:
    """Which parameters land in which bucket, step by step, for two bucket configurations.

    Events interleave "grad ready <name>" (a post-accumulate-grad hook per parameter) with
    "all-reduce bucket <i>" (the comm hook), so the overlap of backward and communication shows.
    """
    out: dict[str, Any] = {}
    for label, kwargs in [("default", {}), ("bucket_cap_mb=25", {"bucket_cap_mb": 25})]:
        model = make_wide_mlp(seed=0)
        ddp = wrap_ddp(model, **kwargs)
        counter = attach_counter(ddp)
        for name, p in model.named_parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, name=name, events=counter.events: events.append(f"grad ready {name}")
            )
        per_step = []
        for step in range(steps):
            counter.step = step
            counter.events.clear()
            x = _rank_batch(rank, 4, 256, seed=step).to(current_device())  # (4, 256)
            ddp(x).square().mean().backward()
            per_step.append(
                {
                    "buckets": [
                        {k: c[k] for k in ("bucket", "numel", "params")}
                        for c in counter.calls
                        if c["step"] == step
                    ],
                    "events": list(counter.events),
                }
            )
        log = ddp._get_ddp_logging_data()
        out[label] = {
            "steps": per_step,
            "bucket_cap_bytes": log["bucket_cap_bytes"],
            "first_bucket_bytes_cap": ddp._bucket_config.first_bucket_bytes_cap,
            "param_bytes": {n: p.numel() * p.element_size() for n, p in model.named_parameters()},
            "log": {
                k: log.get(k)
                for k in (
                    "bucket_sizes",
                    "rebuilt_bucket_sizes",
                    "rebuilt_per_bucket_param_indices",
                    "prev_iteration_grad_ready_order_indices",
                )
            },
        }
    return out


def rebuild_worker(
    rank: int, world_size: int, options: list[dict], steps: int = 4
) -> list[dict[str, Any]]:
    """When the Reducer rebuilds its buckets (`Reducer::should_rebuild_buckets`, reducer.hpp):
    `make_wide_mlp` under each option dict, `steps` steps with `count_allreduce_hook`; per option
    the bucket bytes at construction (logging data `bucket_sizes`) and, per step, the bytes of
    each bucket the hook was handed, in order. Options may set only the two flags the rule
    reads: the worker measures that rule, not what other arguments do (06's exercise 1)."""
    flags = {"find_unused_parameters", "static_graph"}  # the DDP arguments the rule reads
    if any(set(kwargs) - flags for kwargs in options):
        raise ValueError(f"rebuild_worker: options may set only {sorted(flags)}, found {options}")
    out = []
    for kwargs in options:
        ddp = wrap_ddp(make_wide_mlp(seed=0), **kwargs)
        initial = [int(s) for s in ddp._get_ddp_logging_data()["bucket_sizes"].split(", ")]
        counter = attach_counter(ddp)
        for step in range(steps):
            counter.step = step
            x = _rank_batch(rank, 4, 256, seed=step).to(current_device())  # (4, 256)
            ddp(x).square().mean().backward()
        per_step = [
            [c["numel"] * 4 for c in counter.calls if c["step"] == step] for step in range(steps)
        ]  # float32: 4 bytes per element
        out.append({"initial": initial, "per_step": per_step})
    return out


def make_mlp(seed: int = 0) -> nn.Sequential:
    """The DDP notebooks' model: Linear(8, 16) -> ReLU -> Linear(16, 4), seeded, no buffers.

    Without buffers (no BatchNorm) one DDP step matches one step on the concatenated batch up to
    float rounding. (Not `compile_tools`' width/depth-configurable MLP.)
    """
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _flat_params(module: nn.Module) -> torch.Tensor:
    """All parameters of `module` as one flat CPU float tensor."""
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in module.parameters()])


def _flat_grads(module: nn.Module) -> torch.Tensor:
    """All `.grad`s of `module` as one flat CPU float tensor (every parameter must have one)."""
    return torch.cat([p.grad.reshape(-1).float().cpu() for p in module.parameters()])


def _one_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def equivalence_worker(
    rank: int, world_size: int, per_rank: int = 4, lr: float = 0.1
) -> dict[str, Any]:
    """One DDP step on `world_size` ranks vs one plain step on the concatenated batch.

    Every rank builds the same global batch, takes its slice, and also runs the single-process
    reference on the whole batch. Done for an MLP (equal up to float rounding) and for the BN net
    in train mode (not equal: each rank normalises with its own batch statistics).
    """
    device = current_device()
    out: dict[str, Any] = {}
    for label, maker, features, outs in [("mlp", make_mlp, 8, 4), ("bn_net", make_bn_net, 4, 2)]:
        model = maker(seed=0)
        reference = copy.deepcopy(model).to(device)
        ddp = wrap_ddp(model)
        g = torch.Generator().manual_seed(123)
        x = torch.randn(per_rank * world_size, features, generator=g).to(device)  # global batch
        y = torch.randn(per_rank * world_size, outs, generator=g).to(device)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        _one_step(ddp, x[mine], y[mine], lr)
        _one_step(reference, x, y, lr)
        out[label] = {
            "max_param_diff": float((_flat_params(model) - _flat_params(reference)).abs().max()),
            "max_grad_diff": float((_flat_grads(model) - _flat_grads(reference)).abs().max()),
            "param_sum": _rounded(_flat_params(model).sum(), 6),
        }
    return out


def jobs_worker(
    rank: int, world_size: int, jobs: list[tuple[Callable[..., Any], tuple]]
) -> dict[str, Any]:
    """Run several workers in one launch: {worker's name: its result}.

    `jobs` lists (worker function, extra args); the functions travel to the ranks pickled by
    reference, so they must be module-level (like every worker here). One process-group
    start-up pays for all of them.
    """
    return {fn.__name__: fn(rank, world_size, *args) for fn, args in jobs}


# -- 08 · 2. Local gradients inside, averaged after the next synced step --------------------------


# 08: no_sync, accumulation, the pitfall, mixed precision


def no_sync_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Grads inside `no_sync` (local) and after the next synced backward (averaged).

    Also runs the same two micro-batches with both backwards synced (`grad_both_synced`), to
    compare the two orders of averaging and adding.
    """
    model = make_mlp(seed=0)
    local = copy.deepcopy(model).to(current_device())  # a plain copy: local gradients only
    ddp = wrap_ddp(model)
    counter = attach_counter(ddp)
    xa, xb = (_rank_batch(rank, 4, 8, seed=s, offset=1.0).to(current_device()) for s in (1, 2))
    out: dict[str, Any] = {"flag_before": ddp.require_backward_grad_sync}
    with ddp.no_sync():
        out["flag_inside"] = ddp.require_backward_grad_sync
        ddp(xa).square().mean().backward()  # micro-batch A: no communication
    out["flag_after"] = ddp.require_backward_grad_sync
    out["allreduces_inside"] = counter.count()
    local(xa).square().mean().backward()
    out["grad_inside"] = _flat_grads(model).tolist()
    out["local_grad_a"] = _flat_grads(local).tolist()
    ddp(xb).square().mean().backward()  # micro-batch B: synced, carries A's grads along
    local(xb).square().mean().backward()
    out["allreduces_after"] = counter.count()
    out["grad_after"] = _flat_grads(model).tolist()
    out["local_grad_a_plus_b"] = _flat_grads(local).tolist()
    both = wrap_ddp(make_mlp(seed=0))  # A synced, then B synced: two all-reduces
    for x in (xa, xb):
        both(x).square().mean().backward()
    out["grad_both_synced"] = _flat_grads(both.module).tolist()
    return out


# -- 08 · 3. K-step accumulation with `no_sync` == one large-batch step, with K times ... ---------


def accumulation_step(
    ddp: DDP, micro: list[tuple[torch.Tensor, torch.Tensor]], use_no_sync: bool, lr: float
) -> None:
    """One optimizer step over K micro-batches: loss / K each, the first K - 1 under no_sync."""
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    optimizer.zero_grad()
    k = len(micro)
    for i, (x, y) in enumerate(micro):
        last = i == k - 1
        # forward *and* backward inside no_sync: the forward decides whether backward syncs
        context = ddp.no_sync() if use_no_sync and not last else contextlib.nullcontext()
        with context:
            loss = F.mse_loss(ddp(x), y) / k  # mean over the K micro-batches
            loss.backward()  # grads add up in .grad; all-reduced only when not in no_sync
    optimizer.step()


def accumulation_worker(
    rank: int, world_size: int, k: int = 4, micro_batch: int = 2, lr: float = 0.1
) -> dict[str, Any]:
    """K micro-batches per rank, then one optimizer step; vs one step on the whole batch.

    Runs `accumulation_step` with `no_sync` on the first K-1 micro-batches and without it,
    counting all-reduces. The global batch is world_size * k * micro_batch rows; rank r's
    micro-batch i is chunk (i * world_size + r) of it, so the reference is simply the
    concatenated batch.
    """
    device = current_device()
    g = torch.Generator().manual_seed(7)
    n = world_size * k * micro_batch
    x, y = torch.randn(n, 8, generator=g).to(device), torch.randn(n, 4, generator=g).to(device)
    chunks = list(zip(x.split(micro_batch), y.split(micro_batch), strict=True))
    micro = [chunks[i * world_size + rank] for i in range(k)]
    reference = make_mlp(seed=0).to(device)
    _one_step(reference, x, y, lr)
    out: dict[str, Any] = {}
    for label, use_no_sync in [("no_sync", True), ("sync every micro-batch", False)]:
        model = make_mlp(seed=0)
        ddp = wrap_ddp(model)
        counter = attach_counter(ddp)
        accumulation_step(ddp, micro, use_no_sync, lr)
        out[label] = {
            "allreduces": counter.count(),
            "max_diff_vs_large_batch": float(
                (_flat_params(model) - _flat_params(reference)).abs().max()
            ),
        }
    return out


# -- 08 · 4. How large should K be? ---------------------------------------------------------------


# 08: how large K may be (pure, one process: K-step accumulation == one step on K times the batch)


def accumulation_plan(
    n_samples: int, world_size: int, micro_batch: int, k: int, base_lr: float, base_batch: int
) -> dict[str, float | int]:
    """Effective batch, optimizer steps per epoch and the linearly scaled lr for K micro-batches.

    Steps per epoch drop the last incomplete step; the lr follows the linear scaling rule
    (lr proportional to the batch, Goyal et al. 2017) from `base_lr` at `base_batch`.
    """
    effective = world_size * micro_batch * k
    return {
        "k": k,
        "effective_batch": effective,
        "steps_per_epoch": n_samples // effective,
        "scaled_lr": base_lr * effective / base_batch,
    }


def accumulation_epochs(
    ks: list[int], lr: float, scale_lr: bool, n: int = 512, batch: int = 8, epochs: int = 2
) -> dict[int, float]:
    """Least squares, one process: final loss after `epochs` with batches of `batch * k` rows.

    Every K runs the same number of samples (so K times fewer steps); with `scale_lr` the step
    size is `lr * k`. Float64, fixed data: the numbers are deterministic.
    """
    g = torch.Generator().manual_seed(0)
    scales = torch.linspace(0.2, 3.0, 16, dtype=torch.float64)  # feature scales: curvatures
    x = torch.randn(n, 16, generator=g, dtype=torch.float64) * scales  # (n, 16)
    y = x @ torch.randn(16, generator=g, dtype=torch.float64)  # (n,)
    out = {}
    for k in ks:
        w = torch.zeros(16, dtype=torch.float64)
        step = lr * k if scale_lr else lr
        for _ in range(epochs):
            for xb, yb in zip(x.split(batch * k), y.split(batch * k), strict=True):
                w -= step * 2 * xb.T @ (xb @ w - yb) / len(xb)  # gradient of the mean sq. error
        out[k] = float(((x @ w - y) ** 2).mean())
    return out


# -- 08 · 5. The pitfall: the forward decides -----------------------------------------------------


def pitfall_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Where the forward runs decides: forward outside `no_sync` + backward inside still syncs."""
    out: dict[str, Any] = {}
    x = _rank_batch(rank, 4, 8, seed=3, offset=1.0).to(current_device())
    for label in ("forward outside, backward inside", "forward inside, backward outside"):
        model = make_mlp(seed=0)
        ddp = wrap_ddp(model)
        counter = attach_counter(ddp)
        if label.startswith("forward outside"):
            loss = ddp(x).square().mean()
            with ddp.no_sync():
                loss.backward()
        else:
            with ddp.no_sync():
                loss = ddp(x).square().mean()
            loss.backward()
        out[label] = {"allreduces": counter.count(), "grad": _flat_grads(model).tolist()}
    return out


# -- 08 · 6. Unused parameters under `no_sync`: `find_unused_parameters=True` ---------------------


# 08: unused parameters under no_sync (find_unused_parameters=True)


class TwoHeadNet(nn.Module):
    """trunk Linear(4, 4) -> ReLU -> head_a or head_b (each Linear(4, 2)), chosen per call."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.trunk = nn.Linear(4, 4)
        self.head_a = nn.Linear(4, 2)
        self.head_b = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, head: str = "a") -> torch.Tensor:
        h = torch.relu(self.trunk(x))  # (B, 4)
        return self.head_a(h) if head == "a" else self.head_b(h)  # (B, 2)


def _used_map(ddp: DDP) -> dict[str, int]:
    """The Reducer's used-parameter map after a synced backward: {name: ranks that used it}."""
    names = [n for n, p in ddp.module.named_parameters() if p.requires_grad]
    return dict(zip(names, ddp.reducer._get_local_used_map().tolist(), strict=True))


def _head_b_grad(model: TwoHeadNet) -> float | None:
    grad = model.head_b.weight.grad
    return None if grad is None else _rounded(grad.sum(), 6)


def unused_params_worker(rank: int, world_size: int) -> dict[str, Any]:
    """How DDP learns which parameters were used when micro-batches run under `no_sync`.

    All runs use `find_unused_parameters=True` and a synced micro-batch through head_a on every
    rank. Before it, rank 0 alone runs `micro_before` micro-batches through head_b inside
    `no_sync` (the other ranks go through head_a). Returns per run the used-parameter map after
    the sync, head_b's weight-grad sum, and rank 0's local head_b grad sum (before the sync).
    A last run, without `find_unused_parameters`, returns the error of the second iteration.
    """
    device = current_device()
    x = _rank_batch(rank, 3, 4, seed=11, offset=1.0).to(device)  # (3, 4)
    out: dict[str, Any] = {}
    for label, micro_before in [
        ("no micro-batch before", 0),
        ("1 under no_sync", 1),
        ("2 under no_sync", 2),
    ]:
        model = TwoHeadNet(seed=0)
        ddp = wrap_ddp(model, find_unused_parameters=True)
        with ddp.no_sync():
            for _ in range(micro_before):
                ddp(x, "b" if rank == 0 else "a").sum().backward()
        local_b = _head_b_grad(model)
        ddp(x, "a").sum().backward()  # synced: head_b unused in this forward on every rank
        run = {"used_after_sync": _used_map(ddp), "head_b_grad": _head_b_grad(model)}
        run["local_head_b_grad_before_sync"] = local_b
        ddp(x, "a").sum().backward()  # one more synced step, head_b unused everywhere
        run["used_after_next_sync"] = _used_map(ddp)
        run["head_b_grad_after_next_sync"] = _head_b_grad(model)
        out[label] = run
    ddp = wrap_ddp(TwoHeadNet(seed=0))  # find_unused_parameters=False (the default)
    ddp(x, "a").sum().backward()
    try:
        ddp(x, "a").sum().backward()
        out["without find_unused_parameters"] = "no error"
    except RuntimeError as err:
        out["without find_unused_parameters"] = str(err).split(". ")[0] + "."
    return out


# -- 08 · 7. Mixed precision in a DDP step: `torch.autocast` and `GradScaler` ---------------------


def amp_worker(rank: int, world_size: int) -> dict[str, Any]:
    """A DDP step under autocast: dtypes at each stage, and GradScaler agreeing across ranks.

    bf16 autocast: forward in bf16, parameters and gradients (and DDP's buckets) stay fp32.
    fp16 autocast + GradScaler (`scaled_step`): rank 1 overflows locally; the all-reduce
    spreads the inf to every rank before `scaler.step` looks, so every rank skips the step.
    """
    device = current_device()
    out: dict[str, Any] = {}
    x = _rank_batch(rank, 4, 8, seed=5, offset=1.0).to(device)
    y = torch.zeros(4, 4, device=device)
    # fp32 reference step and bf16 autocast step from the same start
    grads = {}
    for label, dtype in [("fp32", None), ("bf16", torch.bfloat16)]:
        model = make_mlp(seed=0)
        ddp = wrap_ddp(model)
        counter = attach_counter(ddp)
        amp = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with amp:
            pred = ddp(x)
            loss = F.mse_loss(pred.float(), y)
        loss.backward()
        grads[label] = _flat_grads(model)
        out[label] = {
            "activation_dtype": str(pred.dtype).replace("torch.", ""),
            "param_dtype": str(model[0].weight.dtype).replace("torch.", ""),
            "grad_dtype": str(model[0].weight.grad.dtype).replace("torch.", ""),
            "bucket_dtype": counter.calls[0]["dtype"],
            "grad": grads[label].tolist(),
        }
    rel = (grads["bf16"] - grads["fp32"]).norm() / grads["fp32"].norm()
    out["bf16_vs_fp32_rel_err"] = float(rel)
    # fp16 + GradScaler: one rank overflows
    model = make_mlp(seed=0)
    ddp = wrap_ddp(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type)
    before = _flat_params(model)
    x16 = x.clone()
    if rank == 1:
        x16[0, 0] = 1e6  # > fp16's max 65504: inf once autocast casts it (this rank only)
    out["scale_before"] = scaler.get_scale()
    loss = scaled_step(ddp, optimizer, scaler, x16, y)
    out["local_loss_finite"] = bool(torch.isfinite(loss))
    out["grads_finite_after_allreduce"] = bool(torch.isfinite(_flat_grads(model)).all())
    out["scale_after"] = scaler.get_scale()
    out["params_changed"] = bool((_flat_params(model) != before).any())
    return out


# 08: mixed precision


def scaled_step(
    ddp: DDP,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    x: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """One DDP training step with fp16 autocast and a GradScaler; returns the (unscaled) loss."""
    with torch.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(ddp(x).float(), y)  # forward: autocast picks fp16 for matmuls
    scaler.scale(loss).backward()  # fp32 grads of loss * scale; DDP all-reduces them here
    scaler.step(optimizer)  # unscale, check for inf/nan, skip optimizer.step() if any
    scaler.update()  # skipped: scale * backoff_factor; growth_interval clean steps: * growth_factor
    return loss
