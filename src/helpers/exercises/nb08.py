"""Judges for notebook 08 (gradient accumulation with `no_sync`, mixed precision).

Each judge computes the right answer from the installed torch and `helpers.ddp` (bucket
assignment, a one-process simulation of the ranks, `accumulation_plan`, fp16 rounding) and
raises `Hint` naming the usual mistake. No judge launches processes.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import distributed as ddp_module

from helpers.ddp import accumulation_plan, make_mlp
from helpers.exercises import N_, Hint, as_int, called_names, exercise, tr

K_ALLREDUCES = 8  # 08.1: micro-batches per optimizer step
K_DIVISOR, WORLD_DIVISOR = 4, 2  # 08.2: micro-batches, ranks
PLAN = {"n_samples": 50_000, "world_size": 8, "micro_batch": 32, "base_lr": 0.1, "base_batch": 256}
TINY_GRAD = 1e-8  # 08.4


def _int(answer: Any, what: str) -> int:
    """A whole number (7, 7.0, numpy.int64(7)), not a bool: else a Hint."""
    value = as_int(answer)
    if value is None:
        raise Hint(tr("give {what} as a whole number, not {answer!r}", what=what, answer=answer))
    return value


BIG_LAYERS, BIG_WIDTH = 4, 2048  # 08.1: four nn.Linear(2048, 2048, bias=False), 16 MiB each


def big_model() -> torch.nn.Module:
    """08.1's model: equal weights, so the bucket count does not depend on their order."""
    layers = [torch.nn.Linear(BIG_WIDTH, BIG_WIDTH, bias=False) for _ in range(BIG_LAYERS)]
    return torch.nn.Sequential(*layers)


def buckets_of(model: torch.nn.Module) -> int:
    """How many buckets DDP's rebuilt assignment (from the second step on) makes for `model`
    with its default bucket caps (the first step runs with one bucket)."""
    params = list(model.parameters())
    caps = [dist._DEFAULT_FIRST_BUCKET_BYTES, ddp_module._DEFAULT_BUCKET_CAP_MB * (1 << 20)]
    indices, _ = dist._compute_bucket_assignment_by_size(params, caps)
    return len(indices)


@exercise(
    "08.1",
    "All-reduces per optimizer step, with and without no_sync",
    look=N_(
        "notebook 06: how the caps (1 MiB first, 25 MiB after) split the parameters (a bucket "
        "closes once it reaches its cap), and section 3's all-reduce counts"
    ),
    reveal=N_(
        "`dist._compute_bucket_assignment_by_size(params, caps)` for the four weights with "
        "caps [1 MiB, 25 MiB] (b buckets), then (b, K x b)"
    ),
)
def allreduces_per_step(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(
            tr("give a pair: (all-reduces with no_sync, all-reduces syncing every micro-batch)")
        )
    with_no_sync, every = (_int(a, tr("each count")) for a in answer)
    b, k = buckets_of(big_model()), K_ALLREDUCES
    if (with_no_sync, every) == (1, k):
        raise Hint(
            tr(
                "that counts one all-reduce per synced backward, as for section 3's one-bucket "
                "MLP; this model's 64 MiB of weights do not fit one bucket: how many does "
                "DDP make with a 1 MiB first bucket and 25 MiB after it?"
            )
        )
    if every != k * b and every % k == 0 and with_no_sync == every // k:
        raise Hint(
            tr(
                "the pattern is right (one synced backward against {k}), but not the number "
                "of buckets: a bucket closes once its size reaches the cap, 1 MiB for the "
                "first, 25 MiB for the others",
                k=k,
            )
        )
    if every != k * b:
        raise Hint(
            tr(
                (
                    "without no_sync every micro-batch's backward all-reduces each bucket: {k} "
                    "micro-batches x the number of buckets (section 3's counts, 'sync every "
                    "micro-batch')"
                ),
                k=k,
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
        raise Hint(tr("one synced backward all-reduces each of the model's buckets once"))
    return tr(
        (
            "({b}, {k_b}): the four 16 MiB weights make {b} buckets (the first closes at "
            "1 MiB, the others at 25 MiB); only the last backward syncs, one all-reduce per "
            "bucket, carrying the accumulated gradient of all {k} micro-batches; syncing "
            "every micro-batch costs {k}x. (In the first step the no_sync variant all-reduces "
            "one bucket once; the other rebuilds its buckets after its first micro-batch: "
            "1 + {k_1} x {b} = {first}.)"
        ),
        b=b,
        k_b=k * b,
        k=k,
        k_1=k - 1,
        first=1 + (k - 1) * b,
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


def _number(answer: Any) -> float:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Hint(
            tr(
                "give the number each micro-batch's loss is divided by, not {answer!r}",
                answer=answer,
            )
        )
    return float(answer)


@exercise(
    "08.2",
    "Why accumulation_step divides the loss by K",
    look=N_("`accumulation_step` in section 3, and section 2's averaged gradient"),
    reveal=N_(
        "`accumulation_ratio(4, 2)` in helpers/exercises/nb08.py (a one-process replay of the "
        "ranks): the averaged accumulated gradient over the large-batch one"
    ),
)
def loss_divisor(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(
            tr("give a pair: (the divisor under DDP, the divisor with a summing all-reduce)")
        )
    ddp, summed = (_number(a) for a in answer)
    truth = accumulation_ratio()
    k, n = K_DIVISOR, WORLD_DIVISOR
    truth_sum = truth * n  # a SUM over ranks instead of DDP's mean: n times more
    if abs(ddp - 1 / truth) < 1e-6:
        raise Hint(
            tr(
                (
                    "{answer} is the multiplier (the loss is multiplied by 1/{round_truth}); "
                    "give the divisor, the number the loss is divided by"
                ),
                answer=ddp,
                round_truth=round(truth),
            )
        )
    if abs(ddp - k * n) < 1e-6:
        raise Hint(
            tr(
                (
                    "under DDP you divided by K x world size = {k_n}: DDP's all-reduce already "
                    "divides by the world size (it averages), so dividing again shrinks the step"
                ),
                k_n=k * n,
            )
        )
    if abs(ddp - 1) < 1e-6:
        raise Hint(
            tr(
                "without a division .grad is the sum of the K micro-batch gradients: K times "
                "the gradient of the mean loss over the large batch"
            )
        )
    if abs(ddp - n) < 1e-6:
        raise Hint(
            tr(
                "the world size is handled by DDP's all-reduce (a mean over ranks); the "
                "division in `accumulation_step` is about the micro-batches that add up in "
                ".grad"
            )
        )
    if abs(ddp - truth) > 1e-6:
        raise Hint(
            tr("under DDP: what does .grad hold after K backwards, and what does DDP divide by?")
        )
    if abs(summed - truth) < 1e-6:
        raise Hint(
            tr(
                "a plain all-reduce SUMS the ranks' .grad: nothing divides by the world size "
                "then, so the loss must"
            )
        )
    if abs(summed - truth_sum) > 1e-6:
        raise Hint(
            tr(
                "with a summing all-reduce the gradient is the total over every rank and every "
                "micro-batch: how many micro-batch gradients is that?"
            )
        )
    return tr(
        (
            "({round_truth}, {round_sum}): .grad adds the {k} backward passes, so without the "
            "division it holds {k}x the mean-loss gradient; DDP's all-reduce already averages "
            "over the {n} ranks, so K is the only factor left. A summing all-reduce leaves "
            "both factors to the loss: K x world size."
        ),
        round_truth=round(truth),
        round_sum=round(truth_sum),
        k=k,
        n=n,
    )


@exercise(
    "08.3",
    "The largest K a linearly scaled lr allows",
    look=N_("section 4: the effective batch and the linear scaling rule"),
    reveal=N_("`accumulation_plan(50_000, 8, 32, k, 0.1, 256)['scaled_lr']` for k = 10 and 11"),
)
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
                    "K = {k} is too large: the effective batch world_size x micro_batch x K "
                    "scales the lr linearly from 0.1 at 256, and that lr passes 1.0"
                ),
                k=k,
            )
        )
    if lr(k + 1) <= 1.0:
        raise Hint(
            tr(
                "a larger K still keeps the scaled lr at or below 1.0: how does the lr grow "
                "with the effective batch?"
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


@exercise(
    "08.4",
    "The smallest loss scale that keeps a 1e-8 gradient in fp16",
    look=N_("section 7 (GradScaler), and `torch.finfo(torch.float16)`: fp16's smallest values"),
    reveal=N_("`torch.tensor(1e-8 * s).half()` for s = 2 and s = 4"),
)
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
                    "smallest fp16 subnormal is {tiny:.3g} = 2**-24, and values below 2**-25 (the "
                    "midpoint) round to zero"
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


# 08.5: the accumulation loop, in one process, with a DDP stand-in that records every forward
#: (micro-batch sizes) of the shown case and the hidden ones
SHOWN_SIZES = (2, 2, 2, 2)
HIDDEN_SIZES = [(3, 1, 2), (5,), (1, 1, 1, 1, 1, 1)]


class RecordingDDP(torch.nn.Module):
    """What the accumulation loop sees of DDP, in one process: call it, and `no_sync()`.

    Like DDP's forward (section 1), each call under grad mode reads `require_backward_grad_sync`
    and records it: True means the following backward would all-reduce every bucket. It also
    records what each forward was given and when a backward reaches each forward's output.
    """

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module
        self.require_backward_grad_sync = True
        self.synced_forwards: list[bool] = []
        self.inputs: list[torch.Tensor] = []  # what each forward was given
        self.events: list[tuple[str, int]] = []  # ("forward", i) and ("backward", i) in order

    @contextlib.contextmanager
    def no_sync(self):
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.module(x)
        if not torch.is_grad_enabled():  # like DDP: a forward under no_grad arms nothing
            return out
        i = len(self.synced_forwards)
        self.synced_forwards.append(self.require_backward_grad_sync)
        self.inputs.append(x.detach().clone())
        self.events.append(("forward", i))
        if out.requires_grad:  # fires when a backward reaches this forward's output
            out.register_hook(lambda g, i=i: self.events.append(("backward", i)))
        return out


def _accumulation_case(
    fn: Any, sizes: tuple[int, ...], seed: int
) -> tuple[RecordingDDP, list, bool]:
    """(the stand-in after `fn` ran, the micro-batches, whether .grad equals the large-batch
    gradient) for `fn`."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64)
    y = torch.randn(n, 4, generator=g, dtype=torch.float64)
    reference = make_mlp().double()
    F.mse_loss(reference(x), y).backward()  # the gradient of one step on the whole batch
    ddp = RecordingDDP(make_mlp().double())
    micro = list(zip(x.split(list(sizes)), y.split(list(sizes)), strict=True))
    fn(ddp, micro)
    got = [p.grad for p in ddp.module.parameters()]
    same = all(
        gr is not None
        and float((gr.double() - p.grad).norm()) <= 1e-6 * float(p.grad.norm()) + 1e-12
        for gr, p in zip(got, reference.parameters(), strict=True)
    )  # 1e-6 of the norm: a float32 weight is right; a wrong weighting is off by far more
    return ddp, micro, same


_called_names = called_names


@exercise(
    "08.5",
    "Write the accumulation loop",
    look=N_("section 3's `accumulation_step` and section 1: what the forward reads"),
    reveal=N_(
        "`contextlib.nullcontext()` for the last micro-batch and the no_sync context for the "
        "others, around forward and backward; each loss weighted by len(x) / N (N rows in all)"
    ),
)
def accumulation_loop(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give the function itself, `my_accumulate`, not its result"))
    if "accumulation_step" in _called_names(answer):
        raise Hint(tr("write the loop yourself rather than calling section 3's helper"))
    cases = [(SHOWN_SIZES, False)] + [(sizes, True) for sizes in HIDDEN_SIZES]
    for seed, (sizes, hidden) in enumerate(cases):
        ddp, micro, same = _accumulation_case(answer, sizes, seed)
        synced = ddp.synced_forwards
        where = (
            tr("a hidden case (micro-batch sizes {sizes}): ", sizes=list(sizes)) if hidden else ""
        )
        k = len(sizes)
        if len(synced) != k:
            raise Hint(
                where
                + tr(
                    "{found} forwards for {k} micro-batches: run each micro-batch once",
                    found=len(synced),
                    k=k,
                )
            )
        if not all(
            got.shape == mx.shape and torch.equal(got, mx)
            for got, (mx, _) in zip(ddp.inputs, micro, strict=True)
        ):
            raise Hint(
                where
                + tr(
                    "the forwards were not given the micro-batches, each whole and in order: "
                    "accumulation sends every (x, y) through ddp as it is, one after another"
                )
            )
        if synced[-1] is not True:
            raise Hint(
                where
                + tr(
                    "the last micro-batch's forward ran inside no_sync, so no backward "
                    "all-reduced: the ranks would step with different gradients"
                )
            )
        if k > 1 and all(synced):
            raise Hint(
                where
                + tr(
                    "all {k} forwards ran outside no_sync, so every backward all-reduces: the "
                    "first K - 1 micro-batches belong inside it, and it is the forward that "
                    "decides (a backward inside no_sync after a forward outside still syncs)",
                    k=k,
                )
            )
        if any(synced[:-1]):
            raise Hint(
                where
                + tr(
                    "{count} of the first {k_1} forwards ran outside no_sync, so their backwards "
                    "all-reduce too: the forward, not the backward, decides",
                    count=sum(synced[:-1]),
                    k_1=k - 1,
                )
            )
        expected = [(e, i) for i in range(k) for e in ("forward", "backward")]
        if ddp.events != expected:
            raise Hint(
                where
                + tr(
                    "the backward did not reach each forward's output before the next forward "
                    "ran (not interleaved): one backward of all the losses at the end keeps "
                    "every micro-batch's graph in memory at once, which accumulation exists to "
                    "avoid; backward each micro-batch's loss before the next forward"
                )
            )
        if not same:
            raise Hint(
                where
                + tr(
                    "the accumulated .grad is not the gradient of the mean loss over all the "
                    "rows: think about what each micro-batch's loss must be weighted by, and "
                    "whether the micro-batches all have the same size"
                )
            )
    return tr(
        "only the last forward runs outside no_sync (one synced backward), and the weighted "
        "losses add up in .grad to the large-batch gradient: for equal micro-batches that is "
        "loss / K, for uneven ones loss x len(x) / N; checked on sizes {shown} and {hidden}",
        shown=list(SHOWN_SIZES),
        hidden=[list(h) for h in HIDDEN_SIZES],
    )
