"""Worked solutions to notebook 06's exercises (DDP internals)."""

# 06.1 A smaller cap, fewer buckets? (make_wide_mlp, 1,597,480 B; bucket_cap_mb=2 and 0.5)
# _BucketCapacityConfig.create: bucket_cap_mb is given, so is_using_default is False and the
# first bucket's cap equals the others': 2 MiB = 2,097,152 B once the buckets are rebuilt (C
# true; step 0 has no size limit, below). The rebuilt buckets walk the gradients from the last
# layer: 40 + 20480 + 2048 + 1048576 + 2048 + 524288 = 1,597,480 B never reaches 2 MiB, so the
# whole model is one bucket from step 1 on (A true). Passing bucket_cap_mb explicitly (2 here,
# 25 in section 4 alike) is what leaves one bucket: the 1 MiB first bucket that splits the
# default run in two is only for bucket_cap_mb None and no bucket_cap_mb_list.
# The rebuild does not depend on the cap: should_rebuild_buckets is
# (static_graph_ || !find_unused_parameters_) && !has_rebuilt_bucket_, so after step 0 the bucket
# is rebuilt in gradient order (4.bias first, not 0.weight: B false; section 4's explicit
# bucket_cap_mb=25 run shows it too). The first iteration has no size limit (Case 2 of
# compute_bucket_size_limits: sys.maxsize without find_unused_parameters), whatever the cap, so
# step 0 is one bucket with 0.5 too (D false).
# With 0.5 MiB = 524,288 B: 40 + 20480 + 2048 = 22568, + 1048576 = 1,071,144 >= 524,288 closes
# [4.bias, 4.weight, 2.bias, 2.weight]; 2048 + 524288 = 526,336 >= 524,288 closes
# [0.bias, 0.weight]: 1,071,144 and 526,336 B, the default's two buckets (E true).
ANSWER_06_1 = {"A", "C", "E"}

# 06.2 A sum loss on the ranks, a mean loss as reference (4 ranks, 3 samples each).
# With reduction="sum", rank r's gradient is g_r = the sum of its 3 samples' gradients. DDP
# divides each rank's gradient by world_size = 4 and sums them (the all-reduce):
# (g_0 + g_1 + g_2 + g_3) / 4 = G / 4, G the sum over all 12 samples. The reference's mean loss
# divides by every element of the output, 12 samples x 4 outputs = 48: its gradient is G / 48.
# Factor: 48 / 4 = 12.
ANSWER_06_2 = 12.0

# 06.3 An unused head: which argument sets let both steps run?
# Without help, DDP waits in every backward for a gradient of every parameter; head_b's never
# comes, its bucket is never reduced, and the next iteration raises "Expected to have finished
# reduction in the prior iteration before starting a new one". find_unused_parameters=True (B)
# makes DDP traverse the graph after forward and mark the parameters it did not reach as ready;
# static_graph=True (C) records the unused ones in the first iteration and marks them ready
# from then on. gradient_as_bucket_view (D) and bucket_cap_mb (E) change only the buckets.
ANSWER_06_3 = {"B", "C"}


# 06.4 DDP's bucket assignment.
# Walk the parameters in the order given (gradient order). Each dtype (and device) fills a bucket
# of its own; a bucket closes once its bytes reach its cap, the parameter that reaches it inside,
# so a parameter bigger than the cap closes the bucket it lands in. Each dtype starts with
# limits[0] and takes the next cap after every bucket it closes, keeping the last one. The
# buckets still open at the end are kept; the list is ordered by each bucket's first position.
# Section 4's case: sizes 40, 20480, 2048, 1048576, 2048, 524288 with caps [1 MiB, 25 MiB]:
# 40 + 20480 + 2048 + 1048576 = 1071144 >= 1 MiB closes [0, 1, 2, 3]; [4, 5] stays open.
def assign_buckets(params, limits):
    """Positions of `params` (in gradient order) per bucket, as DDP's Reducer assigns them."""
    done = []  # (positions) of every bucket, closed or still open at the end
    open_buckets = {}  # (dtype, device) -> [positions, bytes]
    next_cap = {}  # (dtype, device) -> index into limits
    for i, p in enumerate(params):
        key = (p.dtype, p.device)
        bucket = open_buckets.setdefault(key, [[], 0])
        bucket[0].append(i)
        bucket[1] += p.numel() * p.element_size()
        k = next_cap.setdefault(key, 0)
        if bucket[1] >= limits[k]:
            done.append(bucket[0])
            del open_buckets[key]
            next_cap[key] = min(k + 1, len(limits) - 1)
    done += [positions for positions, _ in open_buckets.values()]
    return sorted(done, key=lambda b: b[0])


SOLUTIONS = {
    "06.1": ANSWER_06_1,
    "06.2": ANSWER_06_2,
    "06.3": ANSWER_06_3,
    "06.4": assign_buckets,
}


# typical wrong answers (the hint must contain the words given)


def _by_heart(params, limits):
    return [[0, 1, 2, 3], [4, 5]]  # section 4's case, typed in


def _one_cap(params, limits):
    # a plausible bug: the first cap for every bucket (section 4's case closes only one)
    done, bucket, size = [], [], 0
    for i, p in enumerate(params):
        bucket.append(i)
        size += p.numel() * p.element_size()
        if size >= limits[0]:
            done.append(bucket)
            bucket, size = [], 0
    return done + ([bucket] if bucket else [])


def _ignores_dtype(params, limits):
    # walks the caps right but puts every dtype in the same bucket
    done, bucket, size, k = [], [], 0, 0
    for i, p in enumerate(params):
        bucket.append(i)
        size += p.numel() * p.element_size()
        if size >= limits[k]:
            done.append(bucket)
            bucket, size, k = [], 0, min(k + 1, len(limits) - 1)
    return done + ([bucket] if bucket else [])


def _closes_before(params, limits):
    # closes a bucket before the parameter that would make it reach the cap
    done, bucket, size, k = [], [], 0, 0
    for i, p in enumerate(params):
        nbytes = p.numel() * p.element_size()
        if bucket and size + nbytes >= limits[k]:
            done.append(bucket)
            bucket, size, k = [], 0, min(k + 1, len(limits) - 1)
        bucket.append(i)
        size += nbytes
    return done + ([bucket] if bucket else [])


def _hidden_name(params, limits):
    # torch's assignment under a name the source does not spell: refused while it runs
    import torch.distributed as dist

    find = getattr(dist, "_compute_bucket_" + "assignment_by_size")
    return [list(b) for b in find(params, limits, [False] * len(params))[0]]


def _cycles_caps(params, limits):
    # a plausible bug: after the last cap, start the list again instead of keeping the last one
    done, open_buckets, next_cap = [], {}, {}
    for i, p in enumerate(params):
        key = (p.dtype, p.device)
        bucket = open_buckets.setdefault(key, [[], 0])
        bucket[0].append(i)
        bucket[1] += p.numel() * p.element_size()
        k = next_cap.setdefault(key, 0)
        if bucket[1] >= limits[k]:
            done.append(bucket[0])
            del open_buckets[key]
            next_cap[key] = (k + 1) % len(limits)
    done += [positions for positions, _ in open_buckets.values()]
    return sorted(done, key=lambda b: b[0])


def _calls_torch(params, limits):
    import torch.distributed as dist

    return dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))[0]


WRONG = {
    "06.1": [
        # the first hint names no statement, only whether a chosen one is false or a true one is
        # left out (the five questions come with the second step, whichever letters were chosen)
        # an explicit cap that (they think) turns the rebuild off: the single bucket stays
        ({"A", "B", "C"}, "at least one statement you chose is false"),
        # the explicit cap applied from the first iteration on
        ({"A", "C", "D", "E"}, "at least one statement you chose is false"),
        # every letter: still no letter named
        ({"A", "B", "C", "D", "E"}, "at least one statement you chose is false"),
        # the 1 MiB first bucket kept: 2 buckets with bucket_cap_mb=2
        ({"E"}, "a true statement is missing"),
        # the cap rule right, the 0.5 MiB buckets worked out wrong (more, smaller buckets)
        ({"A", "C"}, "a true statement is missing"),
        ({"a", "c"}, "is missing"),
        ("A", "a set of letters"),
        ({"F"}, "not among the candidates"),
    ],
    "06.2": [
        (48.0, "divides each rank's gradient"),
        (1 / 12, "upside down"),
        (3.0, "every element"),
        (0.25, "MEAN"),
        (0.5, "write DDP's gradient"),
    ],
    "06.3": [
        ({"A"}, "plain DDP waits"),
        ({"B"}, "is missing"),
        ({"B", "C", "E"}, "bucketed or stored"),
        ("B", "a set of letters"),
        ({"F"}, "not among the candidates"),
    ],
    "06.4": [
        (_by_heart, "a hidden case"),
        (_one_cap, "a hidden case"),
        (_ignores_dtype, "mixes dtypes"),
        (_closes_before, "below its cap"),
        (_calls_torch, "write the assignment yourself"),
        (_hidden_name, "write the assignment yourself"),
        (_cycles_caps, "a hidden case"),
        (lambda sizes: [], "takes (params, limits)"),
    ],
}
