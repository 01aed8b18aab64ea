"""Judges for notebook 08 (gradient accumulation with `no_sync`, mixed precision).

Each judge computes the right answer from the installed torch and `helpers.ddp` (bucket
assignment, a one-process simulation of the ranks, `accumulation_plan`, fp16 rounding) and
raises `Hint` naming the usual mistake. No judge launches processes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import distributed as ddp_module

from helpers.ddp import accumulation_plan, make_mlp
from helpers.exercises import Hint, exercise, tr

K_ALLREDUCES = 8  # 08.1: micro-batches per optimizer step
K_DIVISOR, WORLD_DIVISOR = 4, 2  # 08.2: micro-batches, ranks
PLAN = {"n_samples": 50_000, "world_size": 8, "micro_batch": 32, "base_lr": 0.1, "base_batch": 256}
TINY_GRAD = 1e-8  # 08.4


def _int(answer: Any, what: str) -> int:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or answer != int(answer):
        raise Hint(tr("give {what} as a whole number, not {answer!r}", what=what, answer=answer))
    return int(answer)


def buckets_of_mlp() -> int:
    """How many buckets DDP makes for `make_mlp()` with its default bucket caps."""
    params = list(make_mlp().parameters())
    caps = [dist._DEFAULT_FIRST_BUCKET_BYTES, ddp_module._DEFAULT_BUCKET_CAP_MB * (1 << 20)]
    indices, _ = dist._compute_bucket_assignment_by_size(params, caps)
    return len(indices)


@exercise("08.1", "All-reduces per optimizer step, with and without no_sync")
def allreduces_per_step(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(
            tr("give a pair: (all-reduces with no_sync, all-reduces syncing every micro-batch)")
        )
    with_no_sync, every = (_int(a, tr("each count")) for a in answer)
    b, k = buckets_of_mlp(), K_ALLREDUCES
    if every != k * b:
        raise Hint(
            tr(
                (
                    "without no_sync every micro-batch's backward all-reduces each bucket: {k} "
                    "micro-batches x {b} bucket(s) (section 3's table, 'sync every micro-batch')"
                ),
                k=k,
                b=b,
            )
        )
    if with_no_sync == k * b:
        raise Hint(
            tr(
                "with no_sync the first K-1 micro-batches run inside `no_sync()`: their "
                "backward does not communicate at all"
            )
        )
    if with_no_sync == (k - 1) * b:
        raise Hint(
            tr(
                "you counted the micro-batches inside no_sync; they make no all-reduce. "
                "Count the ones outside it"
            )
        )
    if with_no_sync == 0:
        raise Hint(
            tr(
                "the last micro-batch runs outside no_sync, so its backward all-reduces the "
                "whole accumulated .grad, once per bucket"
            )
        )
    if with_no_sync != b:
        raise Hint(
            tr("one synced backward all-reduces each of the model's {b} bucket(s) once", b=b)
        )
    return tr(
        (
            "({b}, {k_b}): only the last backward syncs, one all-reduce per bucket ({b} "
            "for this {sum_p_numel_for_p_in_make_mlp}-parameter MLP), carrying the "
            "accumulated gradient of all {k} micro-batches; syncing every micro-batch "
            "costs {k}x."
        ),
        b=b,
        k_b=k * b,
        sum_p_numel_for_p_in_make_mlp=sum(p.numel() for p in make_mlp().parameters()),
        k=k,
    )


def accumulation_ratio(k: int = K_DIVISOR, world_size: int = WORLD_DIVISOR) -> float:
    """(mean over ranks of the summed micro-batch grads) / (large-batch grad), one process.

    Simulates what DDP does: each rank sums K backward passes into .grad, the all-reduce
    averages over ranks. The ratio is what the loss must be divided by.
    """
    g = torch.Generator().manual_seed(0)
    micro = 2
    x = torch.randn(world_size * k * micro, 8, generator=g, dtype=torch.float64)
    y = torch.randn(world_size * k * micro, 4, generator=g, dtype=torch.float64)
    model = make_mlp().double()

    def grad(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        F.mse_loss(model(xb), yb).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    large = grad(x, y)
    chunks = list(zip(x.split(micro), y.split(micro), strict=True))
    per_rank = [sum(grad(*chunks[i * world_size + r]) for i in range(k)) for r in range(world_size)]
    averaged = sum(per_rank) / world_size  # what DDP's all-reduce (a mean) hands back
    return float((averaged @ large) / (large @ large))


@exercise("08.2", "Why accumulation_step divides the loss by K")
def loss_divisor(answer: Any) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Hint(
            tr(
                "give the number each micro-batch's loss is divided by, not {answer!r}",
                answer=answer,
            )
        )
    truth = accumulation_ratio()
    k, n = K_DIVISOR, WORLD_DIVISOR
    if abs(answer - truth) < 1e-6:
        return tr(
            (
                "{round_truth}: .grad adds the {k} backward passes, so without the division "
                "it holds {k}x the mean-loss gradient; DDP's all-reduce already averages "
                "over the {n} ranks, so K is the only factor left."
            ),
            round_truth=round(truth),
            k=k,
            n=n,
        )
    if abs(answer - 1 / truth) < 1e-6:
        raise Hint(
            tr(
                (
                    "{answer} is the multiplier (the loss is multiplied by 1/{round_truth}); "
                    "give the divisor, the number the loss is divided by"
                ),
                answer=answer,
                round_truth=round(truth),
            )
        )
    if abs(answer - k * n) < 1e-6:
        raise Hint(
            tr(
                (
                    "you divided by K x world size = {k_n}: DDP's all-reduce already divides by "
                    "the world size (it averages), so dividing again shrinks the step"
                ),
                k_n=k * n,
            )
        )
    if abs(answer - 1) < 1e-6:
        raise Hint(
            tr(
                "without a division .grad is the sum of the K micro-batch gradients: K times "
                "the gradient of the mean loss over the large batch"
            )
        )
    if abs(answer - n) < 1e-6:
        raise Hint(
            tr(
                "the world size is handled by DDP's all-reduce (a mean over ranks); the "
                "division in `accumulation_step` is about the micro-batches that add up in "
                ".grad"
            )
        )
    raise Hint(tr("read `accumulation_step` in section 3: what does .grad hold after K backwards?"))


@exercise("08.3", "The largest K a linearly scaled lr allows")
def largest_k(answer: Any) -> str:
    k = _int(answer, "K")
    if k < 1:
        raise Hint(tr("K counts micro-batches per optimizer step: at least 1"))

    def lr(kk: int) -> float:
        return accumulation_plan(PLAN["n_samples"], PLAN["world_size"], PLAN["micro_batch"], kk,
                                 PLAN["base_lr"], PLAN["base_batch"])["scaled_lr"]  # fmt: skip

    if lr(k) > 1.0:
        raise Hint(
            tr(
                (
                    "at K = {k} the scaled lr is {lr_k:.3g}, above 1.0: the effective batch "
                    "world_size x micro_batch x K grows the lr linearly"
                ),
                k=k,
                lr_k=lr(k),
            )
        )
    if lr(k + 1) <= 1.0:
        raise Hint(
            tr(
                "K = {k_1} still keeps the scaled lr at or below 1.0 ({lr_k_1:.3g})",
                k_1=k + 1,
                lr_k_1=lr(k + 1),
            )
        )
    plan = accumulation_plan(PLAN["n_samples"], PLAN["world_size"], PLAN["micro_batch"], k,
                             PLAN["base_lr"], PLAN["base_batch"])  # fmt: skip
    return tr(
        (
            "K = {k}: effective batch {plan_effective_batch}, lr {plan_scaled_lr:.3g}, "
            "and only {plan_steps_per_epoch} optimizer steps per epoch."
        ),
        k=k,
        plan_effective_batch=plan["effective_batch"],
        plan_scaled_lr=plan["scaled_lr"],
        plan_steps_per_epoch=plan["steps_per_epoch"],
    )


def smallest_fp16_scale(grad: float = TINY_GRAD) -> int:
    """The smallest power of two s for which `grad * s` does not underflow to 0 in fp16."""
    s = 1
    while torch.tensor(grad * s).half() == 0:
        s *= 2
    return s


@exercise("08.4", "The smallest loss scale that keeps a 1e-8 gradient in fp16")
def smallest_scale(answer: Any) -> str:
    s = _int(answer, tr("the scale"))
    truth = smallest_fp16_scale()
    tiny = torch.finfo(torch.float16).smallest_normal * 2.0**-10  # fp16's smallest subnormal
    if s < 1 or s & (s - 1):
        raise Hint(
            tr(
                "GradScaler's scales are powers of two (init_scale 2**16, then x2 or x0.5 by "
                "default)"
            )
        )
    if s == 65536:
        raise Hint(
            tr(
                "65536 = 2**16 is GradScaler's default init_scale: it works, but it is not "
                "the smallest power of two that does"
            )
        )
    if s < truth:
        raise Hint(
            tr(
                (
                    "{tiny_grad:g} x {s} = {tiny_grad_s:.3g} still rounds to 0 in fp16: the "
                    "smallest fp16 subnormal is {tiny:.3g} = 2**-24, and values below half of it "
                    "round to zero"
                ),
                tiny_grad=TINY_GRAD,
                s=s,
                tiny_grad_s=TINY_GRAD * s,
                tiny=tiny,
            )
        )
    normal = torch.finfo(torch.float16).smallest_normal  # = finfo.tiny, 2**-14
    if TINY_GRAD * s >= normal > TINY_GRAD * s / 2:
        raise Hint(
            tr(
                (
                    "{s} is the smallest scale that lifts {tiny_grad:g} to fp16's smallest normal "
                    "value ({normal:.3g}, finfo.tiny); below it fp16 has subnormals down to "
                    "{tiny:.3g} = 2**-24, so a much smaller power of two already keeps it above 0"
                ),
                s=s,
                tiny_grad=TINY_GRAD,
                normal=normal,
                tiny=tiny,
            )
        )
    if s > truth:
        raise Hint(
            tr(
                "a smaller power of two already keeps {tiny_grad:g} x s above 0 in fp16",
                tiny_grad=TINY_GRAD,
            )
        )
    return tr(
        (
            "{truth}: {tiny_grad:g} x {truth} = {tiny_grad_truth:.3g} rounds to fp16's "
            "smallest subnormal {tiny:.3g} (2**-24), not to 0; GradScaler starts far "
            "higher (2**16) and halves the scale after each overflow."
        ),
        truth=truth,
        tiny_grad=TINY_GRAD,
        tiny_grad_truth=TINY_GRAD * truth,
        tiny=tiny,
    )
