"""Worked solutions to notebook 07's exercises (BatchNorm and SyncBatchNorm)."""

# 07.1 Running statistics after two steps.
# Batch [1, 2, 3, 6]: mean 3; squared deviations 4, 1, 0, 9 (sum 14), so the biased variance is
# 14 / 4 = 3.5 and the UNBIASED one, which running_var is updated with, 14 / 3 = 4.6667.
# running = (1 - momentum) * running + momentum * batch_stat, momentum 0.1, start (0, 1):
#   step 1: mean 0.9 * 0 + 0.1 * 3 = 0.3          var 0.9 * 1 + 0.1 * 4.6667 = 1.36667
#   step 2: mean 0.9 * 0.3 + 0.1 * 3 = 0.57       var 0.9 * 1.36667 + 0.1 * 4.6667 = 1.69667
ANSWER_07_1 = (0.57, 1.69667)

# 07.2 Global mean and variance from per-rank statistics.
# rank 0: n = 2, mean 1, biased var 0.25;  rank 1: n = 6, mean 3, biased var 1.
# mean = (2 * 1 + 6 * 3) / 8 = 20 / 8 = 2.5 (weighted by counts, not (1 + 3) / 2 = 2).
# E[x^2] per rank = var + mean^2: rank 0 0.25 + 1 = 1.25, rank 1 1 + 9 = 10.
# E[x^2] global = (2 * 1.25 + 6 * 10) / 8 = 7.8125, var = 7.8125 - 2.5^2 = 1.5625.
# (The count-weighted mean of the variances, 0.8125, misses the spread of the rank means.)
ANSWER_07_2 = (2.5, 1.5625)

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
        ((2.0, 0.625), "counts"),  # mean of means
        ((2.5, 0.8125), "spread of the rank means"),  # count-weighted mean of the variances
        ((2.5, 1.785714), "unbiased"),
        ((1.5625, 2.5), "swapped"),  # the order torch.var_mean returns
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


SOLUTIONS["07.4"] = my_global_stats
WRONG["07.4"] = [(_gathers, "no other collective"), (_by_heart, "a hidden case")]
