"""Worked solutions to notebook 14's exercises (DDP under torch.compile, the profiler)."""

# 14.1 DDPOptimizer's subgraphs for Net at bucket_cap_mb=2.
# Each layer holds 1 MiB of weight + 2 KiB of bias. `compile_fn` walks the graph from the last
# node, filling buckets[0]; before each node it opens a new bucket if the current one is full:
# the first (the one backward fills first) at first_bucket_cap = 1 MiB (the caller passes none,
# so `__init__` uses dist._DEFAULT_FIRST_BUCKET_BYTES), the others at 2 MiB.
#   layer 6 -> 1.00 MiB: first bucket full;  layers 5, 4 -> 2.00 MiB: full;
#   layers 3, 2 -> 2.00 MiB: full;  layer 1 -> 1.00 MiB (what is left).
# In forward order: [1.0, 2.0, 2.0, 1.0], four subgraphs (section 3 shows 1, default and 3 MiB).
SPLIT = [1.0, 2.0, 2.0, 1.0]

# 14.2 The smallest bucket_cap_mb that compiles with DDPOptimizer.
# `DDPOptimizer.__init__` (section 3): first_bucket_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
# (1 MiB) when the caller passes none, then raises "First bucket should be smaller/equal to
# other buckets..." if bucket_bytes_cap < first_bucket_cap. So 1 MiB is the smallest cap.
SMALLEST_CAP_MB = 1

# 14.3 gloo:all_reduce events in one rank's trace if `profile_worker` ran 3 steps per phase,
# 4 micro-batches per step, bucket_cap_mb=2.
# DDP's buckets at an explicit 2 MiB cap: 3 (two layers per bucket; section 5 says 3).
# Phase "sync": 3 steps x 4 backwards, all synced = 12. Phase "no_sync": only the last of the 4
# micro-batches syncs: 3 x 1 = 3. 3 buckets x 15 synced backwards = 45. The two warm-up
# iterations run before `profile(...)`, and c10d::allreduce_ is the same all-reduce once more.
PROFILE_ALLREDUCES = 45

# 14.4 Which CANDIDATES' frames does Dynamo skip? trace_rules.check(fn) is True for code under
# torch/nn (MOD_SKIPLIST): DDP.forward, Sequential.forward, Linear.forward,
# ModuleList.__iter__. Net.forward and ddp_compile.batch live in src/helpers: not skipped.
SKIPPED = {
    "DistributedDataParallel.forward",
    "Sequential.forward",
    "Linear.forward",
    "ModuleList.__iter__",
}

SOLUTIONS = {
    "14.1": SPLIT,
    "14.2": SMALLEST_CAP_MB,
    "14.3": PROFILE_ALLREDUCES,
    "14.4": SKIPPED,
}

WRONG = {
    "14.1": [
        ([2.0, 2.0, 2.0], "first bucket is 1 MiB"),
        ([1.0] * 6, "closes only once"),
        ([1.0, 2.0, 2.0], "all parameters"),
        (4, "list of subgraph sizes"),
    ],
    "14.2": [(0.5, "First bucket should be"), (25, "default"), (2, "smaller cap")],
    "14.3": [(72, "no_sync"), (90, "recorded twice"), (49, "warm-up"), (15, "per bucket")],
    "14.4": [
        ({"DistributedDataParallel.forward", "Sequential.forward"}, "MOD_SKIPLIST"),
        (SKIPPED | {"Net.forward"}, "src/helpers"),
        ({"Module.forward"}, "not among the candidates"),
    ],
}
