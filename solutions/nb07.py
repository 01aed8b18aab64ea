"""Worked solutions to notebook 07's exercises (BatchNorm and SyncBatchNorm)."""

# 07.1 Running statistics after two steps.
# Batch [1, 2, 3, 6]: mean 3; squared deviations 4, 1, 0, 9 (sum 14), so the biased variance is
# 14 / 4 = 3.5 and the UNBIASED one, which running_var is updated with, 14 / 3 = 4.6667.
# running = (1 - momentum) * running + momentum * batch_stat, momentum 0.1, start (0, 1):
#   step 1: mean 0.9 * 0 + 0.1 * 3 = 0.3          var 0.9 * 1 + 0.1 * 4.6667 = 1.36667
#   step 2: mean 0.9 * 0.3 + 0.1 * 3 = 0.57       var 0.9 * 1.36667 + 0.1 * 4.6667 = 1.69667
ANSWER_07_1 = (0.57, 1.69667)

# 07.2 What the merge kernel writes.
# rank 0: n = 2, mean 1, biased var 0.25;  rank 1: n = 6, mean 3, biased var 1.
# The loop (section 6's second excerpt) merges them one by one; in closed form:
#   avg = (2 * 1 + 6 * 3) / 8 = 2.5 (weighted by counts, not (1 + 3) / 2 = 2);
#   var_n = sum of count * (var + (mean - avg)^2) = 2 * (0.25 + 2.25) + 6 * (1 + 0.25) = 12.5.
# After the loop (Normalization.cuh, batch_norm_reduce_statistics_kernel): invstd uses the
# biased var_n / n = 1.5625; running_mean = 0.9 * 0 + 0.1 * 2.5 = 0.25; the running variance
# takes unbiasedVar = var_n / (n - 1) = 12.5 / 7 = 1.7857 (one n - 1 for all 8 values):
#   running_var = 0.9 * 1 + 0.1 * 1.7857 = 1.07857, what BatchNorm on the 8 values writes.
ANSWER_07_2 = (0.25, 1.07857)

# 07.3 What SyncBatchNorm's collectives carry, BatchNorm2d(64) on 4 ranks.
# forward: combined = torch.cat([mean, invstd, count]) with mean, invstd (C,) and count (1,):
#   2 * 64 + 1 = 129 numbers sent per rank; the all-gather leaves 4 * 129 = 516 on every rank.
# backward: combined = torch.cat([sum_dy, sum_dy_xmu]) is all-reduced: 2 * 64 = 128 numbers
#   (a sum in place, so no factor of the world size).
ANSWER_07_3 = (129, 516, 128)

SOLUTIONS = {"07.1": ANSWER_07_1, "07.2": ANSWER_07_2, "07.3": ANSWER_07_3}

# typical wrong answers (the hint must contain the words given)
WRONG = {
    "07.1": [
        ((0.57, 1.475), "unbiased"),  # biased variance 3.5 fed into running_var
        ((2.97, 4.63), "NEW batch statistic"),  # momentum taken as the weight of the old value
        ((0.3, 1.36667), "two updates"),  # one step
        ((0.57, 0.88667), "starts at 1"),  # running_var started at 0
        ((3.0, 4.66667), "batch statistics"),
    ],
    "07.2": [
        ((2.5, 1.5625), "merged batch's statistics"),  # the batch statistics, not running ones
        ((0.2, 1.07857), "mean of the rank means"),  # (1 + 3) / 2 into running_mean
        ((2.25, 1.70714), "NEW batch statistic"),  # momentum as the old value's weight
        ((0.25, 1.05625), "UNBIASED"),  # the biased 1.5625 into running_var
        ((0.25, 1.108333), "not once per rank"),  # var_n / (n - 2): a correction per rank
        ((0.25, 0.992857), "spread of the rank means"),  # 6.5 / 7: no (mean - avg)^2 terms
        ((1.07857, 0.25), "swapped"),
        ((0.3, 1.07857), "what mean"),
    ],
    "07.3": [
        ((128, 512, 128), "count"),
        ((129, 129, 128), "all W ranks"),
        ((129, 516, 512), "no factor W"),
        ((129, 387, 128), "receives from the others"),
        ((129, 500, 128), "how many ranks' vectors"),
        ((192, 768, 128), "ONE number per rank"),
        ((129.9, 516.7, 128.99), "whole number"),
    ],
}


# 07.4 One all-reduce for the global statistics (as helpers.syncbn.global_batch_stats does).
# Each rank is given only its own values. Checked on the shown 2 ranks ([1, 2, 6] and [4]:
# mean 3.25, var 3.6875) and a hidden case: 3 ranks holding 1, 4 and 2 values drawn afresh.
def my_global_stats(rank, world_size, values):
    """Return the global (mean, biased variance) of all ranks' values, with one all-reduce."""
    x = torch.tensor(values, dtype=torch.float64)  # noqa: F821 (launch_source's prelude)
    # sums add up across ranks, means do not: pack what adds up, including the count
    count = torch.tensor(float(x.numel()), dtype=x.dtype)  # noqa: F821
    local = torch.stack([x.sum(), (x * x).sum(), count])  # noqa: F821
    dist.all_reduce(local)  # noqa: F821  every rank now holds [S, SS, n] of all ranks
    s, ss, n = local.tolist()
    mean = s / n
    return mean, ss / n - mean * mean  # E[x^2] - mean^2: the biased variance


def _gathers(rank, world_size, values):
    everyone = [None] * world_size
    dist.all_gather_object(everyone, values)  # noqa: F821
    x = torch.tensor(sum(everyone, []))  # noqa: F821
    return x.mean().item(), x.var(correction=0).item()


def _by_heart(rank, world_size, values):
    t = torch.zeros(3)  # noqa: F821
    dist.all_reduce(t)  # noqa: F821  one all-reduce, but of nothing
    return 3.25, 3.6875  # the shown case's answer, typed in: the 3-rank hidden case fails


def _group_gathers(rank, world_size, values):
    # the default group's own allgather: no function of dist is called, the dispatcher sees it
    group = dist.distributed_c10d._get_default_group()  # noqa: F821
    x = torch.tensor([float(sum(values)), float(len(values))])  # noqa: F821
    out = [torch.zeros(2) for _ in range(world_size)]  # noqa: F821
    group.allgather([out], [x]).wait()
    s, n = torch.stack(out).sum(0).tolist()  # noqa: F821
    return s / n, 0.0


def _two_group_all_reduces(rank, world_size, values):
    # two all-reduces, the second through the process group's own method
    x = torch.tensor(values, dtype=torch.float64)  # noqa: F821
    sums = torch.stack([x.sum(), torch.tensor(float(x.numel()), dtype=x.dtype)])  # noqa: F821
    dist.all_reduce(sums)  # noqa: F821
    mean = (sums[0] / sums[1]).item()
    sq = ((x - mean) ** 2).sum().reshape(1)
    dist.distributed_c10d._get_default_group().allreduce([sq]).wait()  # noqa: F821
    return mean, (sq / sums[1]).item()


SOLUTIONS["07.4"] = my_global_stats
WRONG["07.4"] = [
    (_gathers, "no other collective"),
    (_by_heart, "a hidden case"),
    (_group_gathers, "no other collective"),
    (_two_group_all_reduces, "a second all-reduce"),
]
