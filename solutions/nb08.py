"""Worked solutions to notebook 08's exercises (gradient accumulation with `no_sync`)."""

# 08.1 All-reduces per optimizer step, K = 8 micro-batches on 2 ranks.
# `accumulation_step` (section 3) runs micro-batches 0..K-2 inside `ddp.no_sync()`: the forward
# reads `require_backward_grad_sync` (section 1), finds it False and does not arm the Reducer,
# so those backwards only add into .grad. The last micro-batch runs outside: its backward
# all-reduces every bucket once, and each bucket already holds all K micro-batches' gradients.
# Four nn.Linear(2048, 2048, bias=False): 4 weights of 2048 x 2048 x 4 bytes = 16 MiB each.
# From the second step on DDP's buckets close once they reach the cap, 1 MiB for the first and
# 25 MiB after: [16] (>= 1), [16, 16] (32 >= 25), [16] (the rest): 3 buckets.
# With no_sync: 3 buckets x 1 synced backward = 3. Syncing every micro-batch: 8 x 3 = 24.
ALLREDUCES = (3, 24)

# 08.2 What each micro-batch's loss is divided by (K = 4 micro-batches, 2 ranks), under DDP and
# with a hand-written loop that all-reduces .grad with a plain SUM and divides nothing after.
# Rank r's .grad after K backwards is the SUM of its K micro-batch gradients. DDP's all-reduce
# then AVERAGES over ranks (it divides by the world size itself). The gradient of the mean loss
# over the whole batch of world_size x K micro-batches is
#     (1 / world_size) * sum over ranks of (1 / K) * sum over micro-batches of grad,
# so under DDP the only factor the loop must supply is 1 / K: divide by K = 4. A SUM leaves both
# factors to the loss: K x world size = 4 x 2 = 8.
DIVISOR = (4, 8)

# 08.3 The largest K whose linearly scaled lr stays at or below 1.0.
# accumulation_plan: effective batch = world_size x micro_batch x K = 8 x 32 x K = 256 K,
# scaled lr = 0.1 x 256 K / 256 = 0.1 K. 0.1 K <= 1.0 < 0.1 (K + 1) gives K = 10
# (19 optimizer steps per epoch of 50 000 samples).
LARGEST_K = 10

# 08.4 The smallest power-of-two loss scale that keeps a gradient of 1e-8 non-zero in fp16.
# fp16's smallest subnormal is 2**-24 ~ 5.96e-8; round-to-nearest sends anything below half of
# it (2**-25 ~ 2.98e-8) to 0. 1e-8 x 2 = 2e-8 < 2.98e-8 -> 0; 1e-8 x 4 = 4e-8 > 2.98e-8 -> it
# rounds up to 5.96e-8. Check: torch.tensor(1e-8 * 4).half() > 0 and torch.tensor(2e-8).half()
# == 0. (GradScaler starts at 2**16 and backs off after overflows: far from this edge.)
SMALLEST_SCALE = 4

SOLUTIONS = {
    "08.1": ALLREDUCES,
    "08.2": DIVISOR,
    "08.3": LARGEST_K,
    "08.4": SMALLEST_SCALE,
}

WRONG = {
    "08.1": [
        ((1, 8), "one-bucket"),  # section 3's MLP numbers
        ((4, 32), "number of buckets"),  # one bucket per weight
        ((24, 24), "no_sync"),
        ((21, 24), "inside no_sync"),
        ((0, 24), "last micro-batch"),
        ((3, 3), "every micro-batch"),
        (9, "pair"),
    ],
    "08.2": [
        ((8, 8), "world size"),
        ((1, 8), "sum"),
        ((2, 8), "mean over ranks"),
        ((4, 4), "SUMS"),
        ((4, 6), "how many"),
    ],
    "08.3": [(11, "too large"), (9, "still keeps"), (2.5, "whole number")],
    "08.4": [
        (65536, "init_scale"),
        (2, "rounds to 0"),
        (3, "powers of two"),
        (8, "smaller"),
        (8192, "subnormals"),
    ],
}


# 08.5 The accumulation loop (section 3's `accumulation_step`, written for uneven micro-batches).
# DDP's forward reads `require_backward_grad_sync` (section 1): the first K - 1 micro-batches run
# forward AND backward inside no_sync, the last outside, so exactly one backward all-reduces.
# .grad adds the K backwards: weighting each micro-batch's mean loss by len(x) / N makes the sum
# the mean loss over all N rows (loss / K is the same only when every micro-batch has N / K rows).
def my_accumulate(ddp, micro_batches):
    """Forward and backward every (x, y) of `micro_batches` through `ddp` with F.mse_loss so
    that .grad ends as the gradient of the mean loss over all rows, syncing only the last."""
    import contextlib

    import torch.nn.functional as F

    n = sum(len(x) for x, _ in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = F.mse_loss(ddp(x), y) * (len(x) / n)
            loss.backward()


def _divide_by_4(ddp, micro_batches):
    import contextlib

    import torch.nn.functional as F

    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == 3 else ddp.no_sync():
            (F.mse_loss(ddp(x), y) / 4).backward()  # the shown K = 4, by heart


def _divide_by_k(ddp, micro_batches):
    import contextlib

    import torch.nn.functional as F

    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == k - 1 else ddp.no_sync():
            (F.mse_loss(ddp(x), y) / k).backward()  # right only for equal micro-batches


def _sync_every(ddp, micro_batches):
    import torch.nn.functional as F

    k = len(micro_batches)
    for x, y in micro_batches:
        (F.mse_loss(ddp(x), y) / k).backward()


def _backward_only_inside(ddp, micro_batches):
    import torch.nn.functional as F

    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = F.mse_loss(ddp(x), y) / k  # the forward ran outside: this backward syncs
        if i < k - 1:
            with ddp.no_sync():
                loss.backward()
        else:
            loss.backward()


def _one_backward(ddp, micro_batches):
    import contextlib

    import torch.nn.functional as F

    n = sum(len(x) for x, _ in micro_batches)
    losses = []
    for i, (x, y) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            losses.append(F.mse_loss(ddp(x), y) * (len(x) / n))
    sum(losses).backward()  # every micro-batch's graph held at once: no memory saved


def _no_accumulation(ddp, micro_batches):
    import torch
    import torch.nn.functional as F

    for x, _ in micro_batches[:-1]:
        with ddp.no_sync():
            ddp(x[:0])  # empty forwards, for show
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    F.mse_loss(ddp(x), y).backward()  # the whole batch at once: no accumulation at all


SOLUTIONS["08.5"] = my_accumulate
WRONG["08.5"] = [
    (_divide_by_4, "a hidden case"),
    (_divide_by_k, "a hidden case (micro-batch sizes [3, 1, 2])"),
    (_sync_every, "every backward all-reduces"),
    (_backward_only_inside, "forward that decides"),
    (lambda ddp, micro: None, "run each micro-batch once"),
    (_one_backward, "not interleaved"),
    (_no_accumulation, "each whole and in order"),
]
