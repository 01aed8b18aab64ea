"""Judges for notebook 06's exercises (DDP internals).

The right answers come from the installed torch: DDP's own `_BucketCapacityConfig` and the C++
bucket assignment `dist._compute_bucket_assignment_by_size` for the buckets, a numerical
gradient comparison for the loss reduction, and a real 2-rank DDP loop (`unused_loop_worker`,
through `helpers.launch.launch`) for the unused-parameter fix. Worked solutions: solutions/nb06.py.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.ddp import TwoHeadNet, make_mlp, make_wide_mlp, wrap_ddp
from helpers.exercises import Hint, exercise, tr

# 06.1: the rebuilt buckets of make_wide_mlp with an explicit bucket_cap_mb
CAP_MB = 0.015


def rebuilt_buckets(bucket_cap_mb: float | None = CAP_MB) -> list[list[str]]:
    """Parameter names per bucket after DDP's rebuild, in gradient order (last layer first).

    Caps from DDP's `_BucketCapacityConfig.create`; assignment by the C++ function the Reducer
    uses, on the parameters in the order their gradients arrive (reverse definition order for
    this MLP, as section 4 measured).
    """
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    cfg = _BucketCapacityConfig.create(bucket_cap_mb, None, use_python_reducer=False)
    limits = [cfg.first_bucket_bytes_cap, cfg.bucket_bytes_cap]
    named = list(make_wide_mlp(seed=0).named_parameters())
    names = [n for n, _ in named]
    order = list(reversed(range(len(named))))  # gradient order, as definition indices
    assign, _ = dist._compute_bucket_assignment_by_size(
        [named[i][1] for i in order], limits, [False] * len(order), order
    )
    return [[names[i] for i in bucket] for bucket in assign]


@exercise("06.1", "Buckets with bucket_cap_mb=0.015")
def buckets(answer: Any) -> str:
    truth = rebuilt_buckets()
    try:
        found = [[str(n) for n in b] for b in answer]
    except TypeError:
        raise Hint(
            tr("give a list of buckets, each a list of parameter names like '4.bias'")
        ) from None
    names = {n for n, _ in make_wide_mlp(seed=0).named_parameters()}
    unknown = sorted({n for b in found for n in b} - names)
    if unknown:
        raise Hint(
            tr(
                "not parameter names of make_wide_mlp: {unknown}; they look like '0.weight'",
                unknown=unknown,
            )
        )
    if [set(b) for b in found] == [set(b) for b in truth]:
        pb = {n: p.numel() * p.element_size() for n, p in make_wide_mlp(seed=0).named_parameters()}
        sizes = [sum(pb[n] for n in b) for b in truth]
        return tr(
            (
                "an explicit bucket_cap_mb={cap_mb} makes every cap int({cap_mb} * 2**20) = "
                "{int_cap_mb_2_20} B, the first bucket's too; walking the gradients from the "
                "last layer, each bucket closes once it reaches the cap: {truth}, {sizes} B"
            ),
            cap_mb=CAP_MB,
            int_cap_mb_2_20=int(CAP_MB * 2**20),
            truth=truth,
            sizes=sizes,
        )
    if len(found) == 1:
        raise Hint(tr("one bucket with everything is step 0; the question is about the rebuild"))
    if found and "0.weight" in found[0]:
        raise Hint(
            tr(
                "the rebuilt buckets follow gradient order: backward produces the last "
                "layer's gradients first, so bucket 0 starts with '4.bias'"
            )
        )
    if [set(b) for b in found] == [set(b) for b in rebuilt_buckets(None)]:
        raise Hint(
            tr(
                "those are the default buckets (1 MiB first bucket); with bucket_cap_mb "
                "given explicitly, read _BucketCapacityConfig.create: what is "
                "first_bucket_bytes_cap?"
            )
        )
    if all(len(b) == 1 for b in found):
        raise Hint(
            tr(
                "a bucket closes after the parameter that makes it reach the cap, not before "
                "it: a parameter bigger than the cap still shares its bucket with the ones "
                "before it"
            )
        )
    raise Hint(
        tr(
            (
                "cap = int({cap_mb} * 2**20) bytes for every bucket; add the parameters' "
                "bytes in gradient order (section 4 prints param_bytes) and close a bucket "
                "once it reaches the cap"
            ),
            cap_mb=CAP_MB,
        )
    )


# 06.2: sum instead of mean, as DDP sees it
RANKS, PER_RANK = 2, 4


def _grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    F.mse_loss(model(x), y, reduction="sum").backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def sum_loss_factor() -> float:
    """DDP's gradient / the single-process gradient, both with reduction='sum'.

    DDP's default all-reduce sums the ranks' gradients and divides by the world size (section 4;
    `allreduce_hook`'s `_allreduce_fut` does `div_(size)` first), so DDP's gradient is the mean
    of the per-rank gradients, computed here on a shared model.
    """
    src = inspect.getsource(dist.algorithms.ddp_comm_hooks.default_hooks._allreduce_fut)
    if "div_(" not in src:
        raise RuntimeError("_allreduce_fut no longer divides by the world size: update 06.2")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(RANKS * PER_RANK, 8, generator=g)
    y = torch.randn(RANKS * PER_RANK, 4, generator=g)
    model = make_mlp(seed=0)
    per_rank = [
        _grads(model, x[r * PER_RANK : (r + 1) * PER_RANK], y[r * PER_RANK : (r + 1) * PER_RANK])
        for r in range(RANKS)
    ]
    ddp_grad = torch.stack(per_rank).sum(0) / RANKS
    reference = _grads(model, x, y)
    ratio = (ddp_grad @ reference) / (reference @ reference)  # least-squares factor
    if not torch.allclose(ddp_grad, ratio * reference, atol=1e-5):
        raise RuntimeError("DDP's gradient is not a multiple of the reference: update 06.2")
    return float(ratio)


@exercise("06.2", "Sum instead of mean")
def sum_instead_of_mean(answer: Any) -> str:
    try:
        found = float(answer)
    except (TypeError, ValueError):
        raise Hint(
            tr("give one number: DDP's gradient divided by the reference gradient")
        ) from None
    truth = sum_loss_factor()
    if math.isclose(found, truth, rel_tol=1e-3):
        return tr(
            (
                "each rank's gradient is the sum over its 4 samples; DDP adds the 2 and "
                "divides by world_size = 2, so it holds half the sum over all 8: factor "
                "{truth:g}. With a mean loss the same division makes DDP match exactly "
                "(section 5)"
            ),
            truth=truth,
        )
    if math.isclose(found, 1.0):
        raise Hint(
            tr(
                "DDP does not just add the ranks' gradients: the default all-reduce divides "
                "the sum by world_size (section 4)"
            )
        )
    if math.isclose(found, RANKS):
        raise Hint(
            tr("upside down: which one is larger, the sum over 8 samples or DDP's gradient?")
        )
    if math.isclose(found, PER_RANK) or math.isclose(found, 1 / PER_RANK):
        raise Hint(
            tr(
                "the reference here is also a SUM (over all 8 samples), not a mean; compare "
                "sums with sums and count only DDP's division"
            )
        )
    raise Hint(
        tr("write DDP's gradient as (g_rank0 + g_rank1) / world_size and compare with g_all")
    )


# 06.3: an unused parameter, and the DDP argument that lets the loop run


def unused_loop_worker(rank: int, world_size: int, ddp_kwargs: dict) -> dict:
    """Two training steps of TwoHeadNet through head_a only (head_b never used), under DDP."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))  # (3, 4)
    model = TwoHeadNet(seed=0)
    ddp = wrap_ddp(model, **ddp_kwargs)
    try:
        for _ in range(2):
            ddp(x, "a").sum().backward()
    except RuntimeError as err:
        return {"error": str(err).split(". ")[0] + "."}
    return {"error": None, "head_b grad": model.head_b.weight.grad is not None}


@exercise("06.3", "An unused head")
def unused_parameters(answer: Any) -> str:
    if not isinstance(answer, dict):
        raise Hint(tr("give a dict of keyword arguments for DDP, e.g. {{'bucket_cap_mb': 25}}"))
    allowed = set(inspect.signature(DDP.__init__).parameters) - {"self", "module"}
    unknown = sorted(set(answer) - allowed)
    if unknown:
        raise Hint(
            tr(
                "{unknown} is not an argument of DistributedDataParallel: read its docstring",
                unknown=unknown,
            )
        )
    from helpers.launch import launch

    result = list(launch(unused_loop_worker, world_size=2, args=(answer,)))
    errors = [r["error"] for r in result if r["error"]]
    if errors:
        raise Hint(
            tr(
                (
                    "with {answer} the second iteration still raised: {errors_0} head_b never "
                    "gets a gradient, so its bucket never fills; read find_unused_parameters in "
                    "DDP's docstring"
                ),
                answer=answer,
                errors_0=errors[0],
            )
        )
    how = (
        tr(
            "find_unused_parameters=True makes DDP walk the autograd graph after each forward "
            "and mark head_b ready, so its bucket is all-reduced without it"
        )
        if answer.get("find_unused_parameters")
        else tr("{answer} lets DDP learn the unused parameters", answer=answer)
    )
    grads = [r["head_b grad"] for r in result]
    after = tr("head_b's grad stays None") if not any(grads) else tr("head_b got a gradient")
    return tr("both steps ran on 2 ranks: {how}; {after}", how=how, after=after)
