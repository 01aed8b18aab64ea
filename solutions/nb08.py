"""Worked solutions to notebook 08's exercises (gradient accumulation with `no_sync`)."""

# 08.1 All-reduces per optimizer step, K = 8 micro-batches on 2 ranks.
# `accumulation_step` (section 3) runs micro-batches 0..K-2 inside `ddp.no_sync()`: the forward
# reads `require_backward_grad_sync` (section 1), finds it False and does not arm the Reducer,
# so those backwards only add into .grad. The last micro-batch runs outside: its backward
# all-reduces every bucket once, and each bucket already holds all K micro-batches' gradients.
# The MLP has 212 parameters (848 bytes), far below the 1 MiB first bucket: one bucket.
# With no_sync: 1 bucket x 1 synced backward = 1. Syncing every micro-batch: 8 x 1 = 8.
ALLREDUCES = (1, 8)

# 08.2 What each micro-batch's loss is divided by (K = 4 micro-batches, 2 ranks).
# Rank r's .grad after K backwards is the SUM of its K micro-batch gradients. DDP's all-reduce
# then AVERAGES over ranks (it divides by the world size itself). The gradient of the mean loss
# over the whole batch of world_size x K micro-batches is
#     (1 / world_size) * sum over ranks of (1 / K) * sum over micro-batches of grad,
# so the only factor the training loop must supply is 1 / K: divide by K = 4.
DIVISOR = 4

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
        ((8, 8), "no_sync"),
        ((7, 8), "inside no_sync"),
        ((0, 8), "last micro-batch"),
        ((1, 1), "every micro-batch"),
        (9, "pair"),
    ],
    "08.2": [(8, "world size"), (1, "sum"), (2, "mean over ranks")],
    "08.3": [(11, "above 1.0"), (9, "still keeps"), (2.5, "whole number")],
    "08.4": [
        (65536, "init_scale"),
        (2, "rounds to 0"),
        (3, "powers of two"),
        (8, "smaller"),
        (8192, "subnormals"),
    ],
}
