"""SyncBatchNorm on CPU: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.syncbn`, which re-exports both) still loads the harness.
tests/test_code_map.py checks the order and these rules.

Used by: notebook 07.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

# -- 07 · 5. `nn.SyncBatchNorm` cannot train on CPU in this torch ---------------------------------


def make_global_batch(scenario: dict, step: int) -> tuple[Tensor, Tensor]:
    """(x, upstream grad) of the GLOBAL batch at `step`, identical on every rank (seeded).

    x is (sum(batch_sizes), C, *spatial) with a different mean and scale per channel.
    """
    g = torch.Generator().manual_seed(1000 * scenario["seed"] + step)
    shape = [sum(scenario["batch_sizes"]), *scenario["feature_shape"]]
    c = shape[1]
    view = [1, c] + [1] * (len(shape) - 2)
    loc = torch.randn(c, generator=g).view(view) * 2.0
    scale = torch.rand(c, generator=g).view(view) * 2.0 + 0.5
    x = torch.randn(shape, generator=g) * scale + loc
    grad = torch.randn(shape, generator=g)
    return x, grad


def _initial_params(scenario: dict) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(1000 * scenario["seed"] + 999)
    c = scenario["feature_shape"][0]
    return torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g) * 0.1


def _run(module: nn.Module, scenario: dict, rows: slice, device: torch.device) -> dict:
    """Train `module` for the scenario's steps on rows `rows` of each global batch."""
    module.to(device)
    if scenario["affine"]:
        w, b = _initial_params(scenario)
        with torch.no_grad():
            module.weight.copy_(w)
            module.bias.copy_(b)
    out: dict[str, list] = {"outputs": [], "input_grads": [], "weight_grads": [], "bias_grads": []}
    module.train()
    for step in range(scenario["steps"]):
        x, grad = make_global_batch(scenario, step)
        x = x[rows].to(device).requires_grad_()
        y = module(x)
        (y * grad[rows].to(device)).sum().backward()
        out["outputs"].append(y.detach().cpu().tolist())
        out["input_grads"].append(x.grad.cpu().tolist())
        if scenario["affine"]:
            out["weight_grads"].append(module.weight.grad.cpu().tolist())
            out["bias_grads"].append(module.bias.grad.cpu().tolist())
            module.weight.grad = None
            module.bias.grad = None
    out["running_mean"] = module.running_mean.cpu().tolist()
    out["running_var"] = module.running_var.cpu().tolist()
    out["num_batches_tracked"] = int(module.num_batches_tracked)
    module.eval()
    x, _ = make_global_batch(scenario, scenario["steps"])
    with torch.no_grad():
        out["eval_outputs"] = module(x[rows].to(device)).cpu().tolist()
    return out


def syncbn_scenarios_worker(rank: int, world_size: int, scenarios: Sequence[dict]) -> list[dict]:
    """Run every scenario with CPUSyncBatchNorm on this rank's slice of the global batch.

    Every rank builds the same global batch (seeded) and keeps rows
    [sum(batch_sizes[:rank]), sum(batch_sizes[:rank + 1])). Returns per scenario a dict of
    plain lists: outputs, input_grads, weight_grads, bias_grads (per step), running stats,
    num_batches_tracked and eval_outputs. Uses `helpers.launch.current_device()` (CUDA under
    NCCL).
    """
    from helpers.launch import current_device

    device = current_device()
    results = []
    for scenario in scenarios:
        sizes = scenario["batch_sizes"]
        if len(sizes) != world_size:
            raise ValueError(f"scenario has {len(sizes)} batch sizes for {world_size} ranks")
        start = sum(sizes[:rank])
        c = scenario["feature_shape"][0]
        module = CPUSyncBatchNorm(c, momentum=scenario["momentum"], affine=scenario["affine"])
        try:
            results.append(_run(module, scenario, slice(start, start + sizes[rank]), device))
        except ValueError as err:  # raised on every rank alike (after the all-reduce)
            results.append({"error": str(err)})
    return results


def convert_sync_batchnorm(
    module: nn.Module, process_group: Any = None, sync_cls: type | None = None
) -> nn.Module:
    """Replace every BatchNorm*d in `module` (recursively) by `sync_cls` (CPUSyncBatchNorm).

    As `nn.SyncBatchNorm.convert_sync_batchnorm` does in torch 2.13, the new layers reuse the
    old Parameter objects (so values and `requires_grad` are kept, and an optimizer built before
    still points at them) and the old buffers (running stats, num_batches_tracked), and copy the
    training flag. Two differences: layers that already synchronise (this class or
    nn.SyncBatchNorm) are kept with their process group (torch's converter rebuilds them), and
    the new layers are `sync_cls` (torch's builds `nn.SyncBatchNorm` even when called on a
    subclass). Returns the converted module (a new object when `module` itself is a BatchNorm).
    """
    sync_cls = sync_cls or CPUSyncBatchNorm
    out = module
    if isinstance(module, _BatchNorm) and not isinstance(
        module, (CPUSyncBatchNorm, nn.SyncBatchNorm)
    ):
        ref = module.weight if module.weight is not None else module.running_mean
        factory = {"device": ref.device, "dtype": ref.dtype} if ref is not None else {}
        out = sync_cls(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            process_group,
            bias=module.bias is not None,
            **factory,
        )
        if module.affine:
            with torch.no_grad():
                out.weight = module.weight
                out.bias = module.bias
        out.running_mean = module.running_mean
        out.running_var = module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
    for name, child in module.named_children():
        out.add_module(name, convert_sync_batchnorm(child, process_group, sync_cls))
    return out


def make_scenario(
    batch_sizes: Sequence[int],
    feature_shape: Sequence[int] = (3, 4, 4),
    seed: int = 0,
    momentum: float | None = 0.1,
    steps: int = 2,
    affine: bool = True,
) -> dict:
    """A plain-data description of one check: per-rank batch sizes, (C, *spatial), seed..."""
    return {
        "batch_sizes": list(batch_sizes),
        "feature_shape": list(feature_shape),
        "seed": seed,
        "momentum": momentum,
        "steps": steps,
        "affine": affine,
    }


def _small_net(channels: int = 3) -> nn.Module:
    """Conv -> BatchNorm2d -> ReLU -> pool -> Linear: a BN between two trained layers."""
    torch.manual_seed(0)  # same initial weights in every process
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 2),
    )


def _net_step(model: nn.Module, x: Tensor, scale: float) -> dict:
    """One SGD step on loss = scale * sum(model(x)^2); returns parameters and BN buffers."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    (scale * model(x).pow(2).sum()).backward()
    opt.step()
    inner = getattr(model, "module", model)
    return {
        "params": [p.detach().cpu().flatten().tolist() for p in inner.parameters()],
        "running_mean": inner[1].running_mean.cpu().tolist(),
        "running_var": inner[1].running_var.cpu().tolist(),
    }


def ddp_step_worker(rank: int, world_size: int, batch_sizes: Sequence[int], seed: int) -> dict:
    """One DDP step of a small conv net whose BatchNorm was converted to CPUSyncBatchNorm.

    DDP averages gradients over ranks, so the result equals one single-process step on the
    concatenated batch with the summed loss divided by world_size (`ddp_reference_step`).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.launch import current_device

    device = current_device()
    scenario = make_scenario(batch_sizes, (3, 5, 5), seed=seed)
    x, _ = make_global_batch(scenario, 0)
    start = sum(batch_sizes[:rank])
    model = convert_sync_batchnorm(_small_net()).to(device)
    kwargs = {"device_ids": [device.index]} if device.type == "cuda" else {}
    ddp = DDP(model, **kwargs)
    out = _net_step(ddp, x[start : start + batch_sizes[rank]].to(device), 1.0)
    out["bn_class"] = type(model[1]).__name__
    return out


def native_cpu_probe(rank: int, world_size: int) -> dict:
    """What nn.SyncBatchNorm does on CPU inside a process group: train, DDP, eval; and gloo.

    Returns the error type and message (None: no error) of a training forward and of wrapping
    in DDP, whether eval mode gives the same output as BatchNorm2d (no sync in eval), and what
    gloo does with `dist.all_gather_single` into a flat (W * n,) output (and the values it
    gathered there, `gloo_gather_flat_values`: rank r sends r + 1), into the (1, W * n) output
    that nn.SyncBatchNorm's non-gloo branch allocates, and into a (W, n) one. The DDP wrap and
    the gathers run on a gloo group of their own, so the probe asks gloo on CPU tensors even
    where `launch` picked NCCL for the default group (two GPUs).
    """
    import warnings

    from torch.nn.parallel import DistributedDataParallel as DDP

    out: dict[str, Any] = {}
    x = torch.randn(4, 3, 2, 2)
    native = nn.SyncBatchNorm(3)
    gloo = dist.new_group(backend="gloo")  # every rank creates it
    mine = torch.full((3,), float(rank + 1))  # (n,), n = 3
    flat = torch.full((world_size * 3,), -7.0)  # (W n,): -7 marks a slot nobody wrote
    calls = [
        ("train_forward", lambda: native(x)),
        ("ddp_wrap", lambda: DDP(native, process_group=gloo)),
        ("gloo_gather_flat", lambda: dist.all_gather_single(flat, mine, group=gloo)),
        (
            "gloo_gather_1xN",
            lambda: dist.all_gather_single(torch.empty(1, world_size * 3), mine, group=gloo),
        ),
        (
            "gloo_gather_Wxn",
            lambda: dist.all_gather_single(torch.empty(world_size, 3), mine, group=gloo),
        ),
    ]
    for key, call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
            out[key] = None
        except Exception as err:  # noqa: BLE001 - the message is the result
            out[key] = f"{type(err).__name__}: {err}"
    out["gloo_gather_flat_values"] = flat.tolist()
    bn = nn.BatchNorm2d(3).eval()
    out["eval_equal"] = bool(torch.equal(native.eval()(x), bn(x)))
    return out


def single_rank_groups_worker(rank: int, world_size: int, scenario: dict) -> dict:
    """Run `scenario` (one batch size) on every rank inside a process group of just this rank:
    a group of world size 1 must make CPUSyncBatchNorm plain BatchNorm."""
    from helpers.launch import current_device

    groups = [dist.new_group([r]) for r in range(world_size)]  # every rank creates every group
    c = scenario["feature_shape"][0]
    module = CPUSyncBatchNorm(c, momentum=scenario["momentum"], process_group=groups[rank])
    return _run(module, scenario, slice(None), current_device())


def checks_worker(
    rank: int,
    world_size: int,
    scenarios: Sequence[dict],
    ddp_seed: int | None = None,
    single_rank_scenario: dict | None = None,
    probe_native: bool = False,
) -> dict:
    """Many checks for the price of one launch: `syncbn_scenarios_worker` for every scenario, then
    optionally `ddp_step_worker` (first scenario's batch sizes), `single_rank_groups_worker`
    and `native_cpu_probe`. Returns a dict with keys scenarios, ddp, single_rank, native."""
    out: dict[str, Any] = {"scenarios": syncbn_scenarios_worker(rank, world_size, scenarios)}
    if ddp_seed is not None:
        out["ddp"] = ddp_step_worker(rank, world_size, scenarios[0]["batch_sizes"], ddp_seed)
    if single_rank_scenario is not None:
        out["single_rank"] = single_rank_groups_worker(rank, world_size, single_rank_scenario)
    if probe_native:
        out["native"] = native_cpu_probe(rank, world_size)
    return out


# -- 07 · 6. The same computation for CPU: `helpers.syncbn` ---------------------------------------


def global_batch_stats(x: Tensor, group: Any) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, biased var, count) per channel over every rank's `x`, with ONE all-reduce.

    `x` is (N, C, *); the result tensors are (C,) in the accumulation dtype and differentiable
    with respect to `x` on every rank.
    """
    from torch.distributed import _functional_collectives as funcol

    dims = [0, *range(2, x.dim())]  # every dim but the channel dim
    acc = _stats_dtype(x)
    xa = x.to(acc)  # (N, C, *)
    n_local = x.numel() // x.size(1) if x.size(1) else 0
    local = torch.stack(
        [
            xa.sum(dims),  # (C,)
            (xa * xa).sum(dims),  # (C,)
            torch.full((x.size(1),), float(n_local), dtype=acc, device=x.device),
        ]
    )  # (3, C)
    total = funcol.all_reduce(local, "sum", group)  # (3, C), differentiable
    s, ss, n = total[0], total[1], total[2]
    mean = s / n
    var = (ss / n - mean * mean).clamp_min(0.0)  # biased; clamp guards rounding below zero
    return mean, var, n


def _sync_group(process_group: Any) -> Any | None:
    """The group to synchronise over, or None when there is nothing to synchronise with."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    group = process_group if process_group is not None else dist.group.WORLD
    return group if dist.get_world_size(group) > 1 else None


class CPUSyncBatchNorm(_BatchNorm):
    """`nn.SyncBatchNorm` semantics on any device: global-batch statistics via one all-reduce.

    Same constructor as `nn.SyncBatchNorm`. Accepts (N, C), (N, C, L), (N, C, H, W) and
    (N, C, D, H, W) inputs.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any | None = None,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features,
            eps,
            momentum,
            affine,
            track_running_stats,
            device=device,
            dtype=dtype,
            bias=bias,
        )
        self.process_group = process_group

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: Tensor) -> Tensor:
        """BatchNorm over the global batch in training; plain BatchNorm otherwise."""
        self._check_input_dim(input)
        group = _sync_group(self.process_group) if self.training else None
        if group is None:  # eval, no process group or world size 1: exactly BatchNorm
            return super().forward(input)
        if self.eps <= 0.0:  # F.batch_norm's training check, same message
            raise ValueError(f"batch_norm eps must be positive during training, but got {self.eps}")

        mean, var, n = global_batch_stats(input, group)  # (C,) each
        n_total = n[0].item() if n.numel() else 0.0
        if n_total <= 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, got global input "
                f"size {int(n_total)}"
            )
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, like BatchNorm
                factor = 1.0 / float(self.num_batches_tracked.item())
            else:
                factor = self.momentum
            with torch.no_grad():
                unbiased = var * (n_total / (n_total - 1))
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor)

        shape = [1, -1] + [1] * (input.dim() - 2)  # broadcast (C,) over (N, C, *)
        invstd = torch.rsqrt(var + self.eps)
        y = (input - mean.to(input.dtype).view(shape)) * invstd.to(input.dtype).view(shape)
        if self.weight is not None:
            y = y * self.weight.view(shape)
        if self.bias is not None:
            y = y + self.bias.view(shape)
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group: Any = None) -> nn.Module:
        """Same as the module-level `convert_sync_batchnorm`, producing this class."""
        return convert_sync_batchnorm(module, process_group, sync_cls=cls)


def _stats_dtype(x: Tensor) -> torch.dtype:
    """Accumulation dtype: float64 on CPU, float32 on accelerators (float64 stays float64)."""
    if x.device.type == "cpu":
        return torch.float64
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# -- 07 · 7. What synchronising costs -------------------------------------------------------------


def sync_batchnorm_class(device: torch.device | str) -> type:
    """`nn.SyncBatchNorm` for CUDA devices (its fused kernels), `CPUSyncBatchNorm` otherwise."""
    return nn.SyncBatchNorm if torch.device(device).type == "cuda" else CPUSyncBatchNorm


def count_collectives(step: Any) -> dict[str, int]:
    """Run `step()` and count the collective ops it dispatches (forward, backward, DDP's own).

    Counts every op of the `c10d` and `_c10d_functional` namespaces except the bookkeeping
    ones (`wait_tensor`, `_wrap_tensor_autograd`), by op name.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: dict[str, int] = {}

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)  # e.g. "_c10d_functional.all_reduce.default"
            namespace = name.split(".")[0]
            if namespace in ("c10d", "_c10d_functional") and not any(
                skip in name for skip in ("wait_tensor", "_wrap_tensor_autograd")
            ):
                counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with _Count():
        step()
    return counts


def _bn_net(channels: int, layers: int) -> nn.Module:
    """`layers` blocks of Conv(3x3) -> BatchNorm2d -> ReLU, then pool and a Linear."""
    torch.manual_seed(0)  # same initial weights in every process
    blocks: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1)]
    for i in range(layers):
        if i:
            blocks.append(nn.Conv2d(channels, channels, 3, padding=1))
        blocks += [nn.BatchNorm2d(channels), nn.ReLU()]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 2))


def syncbn_cost_worker(
    rank: int,
    world_size: int,
    steps: int = 20,
    batch: int = 8,
    size: int = 16,
    channels: int = 16,
    layers: int = 4,
) -> dict:
    """Step times of the same DDP model with plain BatchNorm2d and with synchronised BN.

    Synchronised BN is `sync_batchnorm_class(device)`: nn.SyncBatchNorm on CUDA, CPUSyncBatchNorm
    otherwise. The two models alternate step by step (which goes first alternates too), so both
    see the same machine load. Returns per model the step times in seconds (after 2 warm-up
    steps), the collectives of one extra, untimed step, and the first BN layer's running mean
    after the last step (plain BN: rank 0's buffers as broadcast by DDP at that step's forward,
    then updated from this rank's batch; synchronised: the global batch's). For plain BN it also
    returns that running mean after one more forward in eval mode (`plain_after_eval_forward`):
    DDP broadcasts rank 0's buffers before it and eval mode leaves them unchanged.
    """
    import time

    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.launch import current_device

    device = current_device()
    sync_cls = sync_batchnorm_class(device)
    models = {
        "plain": _bn_net(channels, layers),
        "sync": sync_cls.convert_sync_batchnorm(_bn_net(channels, layers)),
    }
    kwargs = {"device_ids": [device.index]} if device.type == "cuda" else {}
    ddps = {k: DDP(m.to(device), **kwargs) for k, m in models.items()}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in ddps.items()}
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    x = torch.randn(batch, 3, size, size, generator=g).to(device)  # (B, 3, H, W)

    def step(name: str) -> None:
        opts[name].zero_grad()
        ddps[name](x).square().mean().backward()
        opts[name].step()

    def timed(name: str) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        step(name)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for _ in range(2):  # warm-up: allocator, first-call paths, DDP's first-iteration work
        step("plain"), step("sync")
    times: dict[str, list[float]] = {"plain": [], "sync": []}
    for i in range(steps):
        order = ("plain", "sync") if i % 2 == 0 else ("sync", "plain")
        for name in order:
            times[name].append(timed(name))
    out: dict[str, Any] = {"times": times, "sync_class": sync_cls.__name__, "layers": layers}
    out["collectives"] = {k: count_collectives(lambda k=k: step(k)) for k in ddps}
    out["running_mean"] = {
        k: next(b for n, b in m.named_buffers() if n.endswith("running_mean")).cpu().tolist()
        for k, m in models.items()
    }
    ddps["plain"].eval()
    with torch.no_grad():
        ddps["plain"](x)  # the previous forward had grads: DDP broadcasts buffers first
    out["plain_after_eval_forward"] = (
        next(b for n, b in models["plain"].named_buffers() if n.endswith("running_mean"))
        .cpu()
        .tolist()
    )
    return out


# -- 07 · 8. The real `nn.SyncBatchNorm` under DDP, on GPUs ---------------------------------------


def _bn_class(dim: int) -> type:
    return {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[dim]


def native_syncbn_ddp_worker(rank: int, world_size: int, scenario: dict) -> dict:
    """GPU only (NCCL): the real nn.SyncBatchNorm under DDP next to CPUSyncBatchNorm.

    Both see this rank's slice of the same global batch; returns the largest absolute
    differences (outputs, input grads, running stats) on this rank, plus the device type.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.launch import current_device

    device = current_device()
    if device.type != "cuda":
        raise RuntimeError("native_syncbn_ddp_worker needs one GPU per rank (NCCL)")
    sizes = scenario["batch_sizes"]
    start = sum(sizes[:rank])
    rows = slice(start, start + sizes[rank])
    c = scenario["feature_shape"][0]
    bn = _bn_class(len(scenario["feature_shape"]) + 1)(c, momentum=scenario["momentum"])
    native = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(bn).to(device), device_ids=[device.index])
    ours = convert_sync_batchnorm(_bn_class(len(scenario["feature_shape"]) + 1)(c)).to(device)
    ours.momentum = scenario["momentum"]
    diffs = {"outputs": 0.0, "input_grads": 0.0, "weight_grads": 0.0}
    for step in range(scenario["steps"]):
        x, grad = make_global_batch(scenario, step)
        xs = [x[rows].to(device).requires_grad_() for _ in range(2)]
        ys = [native(xs[0]), ours(xs[1])]
        for yi in ys:
            (yi * grad[rows].to(device)).sum().backward()
        diffs["outputs"] = max(diffs["outputs"], float((ys[0] - ys[1]).abs().max()))
        diffs["input_grads"] = max(
            diffs["input_grads"], float((xs[0].grad - xs[1].grad).abs().max())
        )
        # DDP averages weight grads over ranks; ours holds the local share: compare the means
        w_ours = ours.weight.grad.clone()
        dist.all_reduce(w_ours)
        w_ours /= world_size
        diffs["weight_grads"] = max(
            diffs["weight_grads"], float((native.module.weight.grad - w_ours).abs().max())
        )
        native.zero_grad()
        ours.zero_grad()
    diffs["running_mean"] = float((native.module.running_mean - ours.running_mean).abs().max())
    diffs["running_var"] = float((native.module.running_var - ours.running_var).abs().max())
    diffs["device_type"] = device.type
    return diffs
