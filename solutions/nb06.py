"""Worked solutions to notebook 06's exercises (DDP internals)."""

# 06.1 Buckets with bucket_cap_mb=0.015.
# _BucketCapacityConfig.create: bucket_cap_mb is given, so is_using_default is False and the
# first bucket's cap equals the others': int(0.015 * 2**20) = 15728 bytes for every bucket.
# Gradient order (section 4): 4.bias, 4.weight, 2.bias, 2.weight, 0.bias, 0.weight, with bytes
#   40, 20480, 2048, 1048576, 2048, 524288.
# A bucket closes once its size reaches the cap:
#   4.bias 40 -> + 4.weight = 20520 >= 15728: close [4.bias, 4.weight]
#   2.bias 2048 -> + 2.weight = 1050624: close [2.bias, 2.weight]
#   0.bias 2048 -> + 0.weight = 526336: close [0.bias, 0.weight]
ANSWER_06_1 = [["4.bias", "4.weight"], ["2.bias", "2.weight"], ["0.bias", "0.weight"]]

# 06.2 Sum instead of mean.
# With reduction="sum", rank r's gradient is g_r = sum of its 4 samples' gradients, and the
# reference on all 8 samples is g_all = g_0 + g_1 (the gradient of a sum is the sum).
# DDP all-reduces (sums) and divides by world_size = 2: (g_0 + g_1) / 2 = g_all / 2.
ANSWER_06_2 = 0.5

# 06.3 An unused head.
# Without it, DDP waits in every backward for a gradient of every parameter; head_b's never
# comes, its bucket is never reduced, and the next iteration raises "Expected to have finished
# reduction in the prior iteration before starting a new one". find_unused_parameters=True makes
# DDP traverse the graph after forward and mark the parameters it did not reach as ready.
# (static_graph=True also works when the same parameters are unused in every iteration.)
ANSWER_06_3 = {"find_unused_parameters": True}

SOLUTIONS = {"06.1": ANSWER_06_1, "06.2": ANSWER_06_2, "06.3": ANSWER_06_3}

# typical wrong answers (the hint must contain the words given)
WRONG = {
    "06.1": [
        # the default buckets (1 MiB first bucket), as section 4 measured them
        ([["4.bias", "4.weight", "2.bias", "2.weight"], ["0.bias", "0.weight"]], "default"),
        # definition order instead of gradient order
        ([["0.weight"], ["0.bias", "2.weight"], ["2.bias", "4.weight"], ["4.bias"]], "gradient"),
        # closing a bucket before the parameter that would overflow it
        ([["4.bias"], ["4.weight"], ["2.bias"], ["2.weight"], ["0.bias"], ["0.weight"]], "after"),
        ([["4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"]], "step 0"),
    ],
    "06.2": [
        (1.0, "divides the sum"),
        (2.0, "upside down"),
        (4.0, "also a SUM"),
    ],
    "06.3": [
        ({"find_unused_params": True}, "not an argument"),
        ({}, "second iteration"),
    ],
}
