"""Worked solutions to notebook 14's exercises (DDP under torch.compile, the profiler)."""


# 14.1 DDPOptimizer's split. `compile_fn` walks the graph from its last node; before each node
# it opens a new bucket if the current one is full: the first (the one backward fills first)
# at first_bucket_cap, the others at bucket_cap, "full" meaning size >= cap. Every layer's
# output feeds the next, so a full bucket always closes (`bucket_has_external_output`).
# Net at bucket_cap_mb=3 (1 MiB + 2 KiB per layer, first cap 1 MiB):
#   layer 5 -> 1.00 MiB: full; layers 4, 3, 2 -> 3.01 MiB: full; layers 1, 0 -> 2.00 MiB.
#   In forward order: [[0, 1], [2, 3, 4], [5]] (section 3's 2.0, 3.01 and 1.0 MiB).
def ddp_optimizer_buckets(layer_bytes, bucket_cap, first_bucket_cap):
    """DDPOptimizer's buckets for a chain of layers: lists of layer indices, forward order."""
    buckets = [[]]  # buckets[0] is the one being filled
    size = 0
    for i in reversed(range(len(layer_bytes))):
        cap = first_bucket_cap if len(buckets) == 1 else bucket_cap
        if size >= cap:
            buckets.insert(0, [])
            size = 0
        buckets[0].insert(0, i)
        size += layer_bytes[i]
    return buckets


# 14.2 Net at bucket_cap_mb=1.5. DDPOptimizer gets DDP's bucket_bytes_cap (1.5 MiB) and no
# first-bucket cap, so its constructor fills in dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB:
#   [5] (1 MiB: full), [4, 3] (2 MiB >= 1.5), [2, 1], [0]: 4 subgraphs.
# DDP with an explicit cap uses 1.5 MiB for its first bucket too (section 1):
#   [5, 4], [3, 2], [1, 0]: 3 buckets.
SPLIT_VS_DDP = (4, 3)

# 14.3 gloo:all_reduce events in one rank's trace if `profile_worker` ran 3 steps per phase,
# 5 micro-batches per step, bucket_cap_mb=1.
# DDP's buckets at an explicit 1 MiB cap: 6 (each 1 MiB weight fills one; section 3 says 6).
# Phase "sync": 3 steps x 5 backwards, all synced = 15. Phase "no_sync": only the last of the 5
# micro-batches syncs: 3 x 1 = 3. 6 buckets x 18 synced backwards = 108. The two warm-up
# iterations run in their own `profile(...)` blocks, before the one whose trace is written, and
# c10d::allreduce_ is the same all-reduce once more.
PROFILE_ALLREDUCES = 108

# 14.4 Which CANDIDATES' frames does Dynamo skip as a first frame? trace_rules.check(fn) is True
# when the file of the code that runs lies under a directory of a module on MOD_SKIPLIST:
# torch/nn (ReLU.forward, DDP's _run_ddp_forward), torch/distributed (all_reduce's wrapper in
# c10d_logger.py), torch/autograd (record_function, which torch.profiler re-exports). SGD.step
# runs torch/optim/optimizer.py's wrapper: torch.optim is on no list, so it is traced, as is
# src/helpers. The two that go against their module: SGD.zero_grad is decorated with
# torch._disable_dynamo, so the code that runs is `inner` in torch/_compile.py (torch._compile is
# on MOD_SKIPLIST): skipped; DDP.no_sync is a contextlib.contextmanager, so the code that runs is
# contextlib's `helper`, in the standard library, on no list: traced. Reason "wrapper": neither
# `__module__` ("module") nor MOD_INLINELIST ("inline", asked only for inlined calls: DDP's
# _run_ddp_forward, in no_sync's module, is skipped) nor a per-function entry ("table") decides.
# (Called from a compiled frame, dist.all_reduce is not skipped either: Dynamo rewrites it to a
# functional collective before any skip rule is asked.)
SKIPPED = {
    "ReLU.forward",
    "DistributedDataParallel._run_ddp_forward",
    "dist.all_reduce",
    "record_function.__enter__",
    "SGD.zero_grad",
}

SOLUTIONS = {
    "14.1": ddp_optimizer_buckets,
    "14.2": SPLIT_VS_DDP,
    "14.3": PROFILE_ALLREDUCES,
    "14.4": (SKIPPED, "wrapper"),
}


# typical wrong answers (the hint must contain the words given)


def _by_heart(layer_bytes, bucket_cap, first_bucket_cap):
    # the prompt's case, Net at 3 MiB, typed in
    return [[0, 1], [2, 3, 4], [5]]


def _strict(layer_bytes, bucket_cap, first_bucket_cap):
    # right on every Net case; wrong when a bucket holds exactly its cap
    buckets, size = [[]], 0
    for i in reversed(range(len(layer_bytes))):
        cap = first_bucket_cap if len(buckets) == 1 else bucket_cap
        if size > cap:
            buckets.insert(0, [])
            size = 0
        buckets[0].insert(0, i)
        size += layer_bytes[i]
    return buckets


def _one_cap(layer_bytes, bucket_cap, first_bucket_cap):
    return ddp_optimizer_buckets(layer_bytes, bucket_cap, bucket_cap)


def _backward_order(layer_bytes, bucket_cap, first_bucket_cap):
    return ddp_optimizer_buckets(layer_bytes, bucket_cap, first_bucket_cap)[::-1]


def _forward_walk(layer_bytes, bucket_cap, first_bucket_cap):
    n = len(layer_bytes)
    rev = ddp_optimizer_buckets(layer_bytes[::-1], bucket_cap, first_bucket_cap)
    return [sorted(n - 1 - i for i in g) for g in rev[::-1]]


def _library(layer_bytes, bucket_cap, first_bucket_cap):
    from torch._dynamo.backends.distributed import DDPOptimizer

    return DDPOptimizer(bucket_bytes_cap=bucket_cap, backend_compile_fn=None).buckets


def _alias(layer_bytes, bucket_cap, first_bucket_cap):
    # DDP's own bucketing, reached through a name the check cannot read
    import torch
    import torch.distributed as dist

    assign = getattr(dist, "_compute_bucket_" + "assignment_by_size")
    n = len(layer_bytes)
    tensors = [torch.empty(b // 4) for b in layer_bytes][::-1]
    idx, _ = assign(tensors, [first_bucket_cap, bucket_cap])
    return sorted(sorted(n - 1 - i for i in g) for g in idx)


WRONG = {
    "14.1": [
        (_by_heart, "a hidden case"),
        (_strict, "a hidden case"),
        (_one_cap, "first_bucket_cap"),
        (_backward_order, "forward order"),
        (_forward_walk, "starts at the last layer"),
        (_library, "do not run"),
        (_alias, "do not run"),
        ([[0, 1], [2, 3, 4], [5]], "give a function"),
    ],
    "14.2": [((4, 4), "differ"), ((3, 3), "differ"), ((3, 2), "fill in"), ((6, 3), "walk")],
    "14.3": [
        (180, "no_sync"),
        (216, "recorded twice"),
        (115, "warm-up"),
        (18, "per bucket"),
        (54, "section 5's 3 buckets"),
    ],
    "14.4": [
        (({"ReLU.forward", "dist.all_reduce"}, "wrapper"), "2 elsewhere"),
        (({"ReLU.forward"}, "wrapper"), "1 in torch.nn"),
        ((SKIPPED - {"dist.all_reduce"}, "wrapper"), "not the only one"),
        ((SKIPPED - {"SGD.zero_grad"}, "wrapper"), "not the only one"),
        ((SKIPPED | {"ddp_compile._train_step"}, "wrapper"), "src/helpers"),
        ((SKIPPED | {"SGD.step"}, "wrapper"), "not every file"),
        ((SKIPPED | {"DistributedDataParallel.no_sync"}, "wrapper"), "the code that runs"),
        ((SKIPPED, "module"), "other than the module"),
        ((SKIPPED, "inline"), "first frame"),
        ((SKIPPED, "table"), "rules for files"),
        ((SKIPPED, "because"), "not a reason key"),
        (({"Module.forward"}, "wrapper"), "not among the candidates"),
        (SKIPPED, "give a pair"),
    ],
}
