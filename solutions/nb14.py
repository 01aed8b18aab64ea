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


# 14.4 Dynamo's first-frame rule. For a frame Dynamo meets when it is tracing nothing (asked
# without is_inlined_call; a module without hooks; the default config), trace_rules'
# check_verbose -> lookup_inner -> _lookup_inner goes: (1) the table of single functions
# (`get_torch_obj_rule_map()`, keyed by the function object itself): an entry decides, skip only
# for SkipFunctionVariable (F.relu: traced though torch/nn is skipped; DeviceMesh.__init__:
# skipped though its file is on LEGACY_MOD_INLINELIST); (2) a name rule (`__getattr__`, no case
# here); (3) check_file on `inspect.getfile(fn)`, i.e. the file of the code object that runs,
# the wrapper's for a decorated function (SGD.zero_grad: _disable_dynamo's `inner` in
# torch/_compile.py, skipped; DDP.no_sync: contextlib's `helper`, on no list, traced), asked as
# a first frame: FORCE_SKIP_FILES (lr_scheduler.py), LEGACY_MOD_INLINELIST's directories (not
# skipped), SKIP_DIRS (abc, copy, importlib, random, re, linecache of the standard library, the
# third-party skips): skipped, then MOD_SKIPLIST's directories (a module name as a path prefix:
# "torch._compile" -> .../torch/_compile, which torch/_compile.py starts with): skipped; else
# traced. MOD_INLINELIST (torch.nn, torch.distributed are on it) is asked only for an inlined
# call, so it plays no part here.
def first_frame_skipped(fn):
    """True when Dynamo skips a frame of `fn` as the first frame of a compile."""
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    rule = trace_rules.get_torch_obj_rule_map().get(fn)
    if rule is not None:
        return rule is SkipFunctionVariable
    path = trace_rules._as_posix_path(fn.__code__.co_filename)
    if path in trace_rules.FORCE_SKIP_FILES:
        return True
    if any(path.startswith(d) for d in trace_rules.get_legacy_mod_inlinelist()):
        return False
    if trace_rules.SKIP_DIRS_RE.match(path):
        return True
    return any(path.startswith(d) for d in trace_rules.get_mod_skiplist())


SOLUTIONS = {
    "14.1": ddp_optimizer_buckets,
    "14.2": SPLIT_VS_DDP,
    "14.3": PROFILE_ALLREDUCES,
    "14.4": first_frame_skipped,
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


def _file_rules(path, inline_first=False, legacy=True, skip_dirs=True, force=True):
    from torch._dynamo import trace_rules

    if force and path in trace_rules.FORCE_SKIP_FILES:
        return True
    if legacy and any(path.startswith(d) for d in trace_rules.get_legacy_mod_inlinelist()):
        return False
    if inline_first and any(path.startswith(d) for d in trace_rules.get_mod_inlinelist()):
        return False
    if skip_dirs and trace_rules.SKIP_DIRS_RE.match(path):
        return True
    return any(path.startswith(d) for d in trace_rules.get_mod_skiplist())


#: the prompt's twelve, by (module, qualname), as trace_rules answered them: typed in by heart
_SHOWN_SKIPPED = {
    ("torch.nn.parallel.distributed", "DistributedDataParallel.forward"): True,
    ("torch.nn.modules.container", "Sequential.forward"): True,
    ("torch.nn.modules.linear", "Linear.forward"): True,
    ("helpers.ddp_compile", "Net.forward"): False,
    ("torch.nn.modules.activation", "ReLU.forward"): True,
    ("torch.nn.parallel.distributed", "DistributedDataParallel._run_ddp_forward"): True,
    ("torch.nn.parallel.distributed", "DistributedDataParallel.no_sync"): False,
    ("torch.distributed.distributed_c10d", "all_reduce"): True,
    ("torch.autograd.profiler", "record_function.__enter__"): True,
    ("torch.optim.sgd", "SGD.step"): False,
    ("torch.optim.optimizer", "Optimizer.zero_grad"): True,
    ("helpers.ddp_compile", "_train_step"): False,
}


def _ff_by_heart(fn):
    return _SHOWN_SKIPPED.get((fn.__module__, fn.__qualname__), False)


def _ff_no_table(fn):
    # the rules for files alone, on the right file: right on all twelve shown functions
    return _file_rules(fn.__code__.co_filename)


def _ff_skiplist_only(fn):
    return _file_rules(fn.__code__.co_filename, legacy=False, skip_dirs=False, force=False)


def _ff_no_legacy(fn):
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    rule = trace_rules.get_torch_obj_rule_map().get(fn)
    if rule is not None:
        return rule is SkipFunctionVariable
    return _file_rules(fn.__code__.co_filename, legacy=False)


def _ff_by_module(fn):
    # the module a function belongs to, against MOD_SKIPLIST's names
    from torch._dynamo import trace_rules

    m = fn.__module__
    return any(m == s or m.startswith(s + ".") for s in trace_rules.MOD_SKIPLIST)


def _ff_unwrapped(fn):
    # the right steps, on the function as defined rather than the code that runs
    import inspect

    return first_frame_skipped(inspect.unwrap(fn))


def _ff_inline_wins(fn):
    # MOD_INLINELIST (torch.nn, torch.distributed) asked for a first frame too
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    rule = trace_rules.get_torch_obj_rule_map().get(fn)
    if rule is not None:
        return rule is SkipFunctionVariable
    return _file_rules(fn.__code__.co_filename, inline_first=True)


def _ff_ask_dynamo(fn):
    from torch._dynamo import trace_rules

    return trace_rules.check(fn)


def _ff_alias(fn):
    # trace_rules' file rule, reached through a name a reading of the source cannot see
    from torch._dynamo import trace_rules

    return getattr(trace_rules, "check" + "_file")(fn.__code__.co_filename).skipped


def _ff_lookup(fn):
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    return trace_rules.lookup(fn) is SkipFunctionVariable


def _ff_unwatched(fn):
    # the watch switched off before asking Dynamo
    import sys

    from torch._dynamo import trace_rules

    sys.setprofile(None)
    return trace_rules.check(fn)


def _ff_raises(fn):
    return fn.__code__.co_path


def _ff_says_yes(fn):
    return "yes"


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
        (_ff_by_heart, "a hidden case"),
        (_ff_no_table, "a hidden case"),
        (_ff_skiplist_only, "a hidden case"),
        (_ff_no_legacy, "a hidden case"),
        (_ff_by_module, "which code runs"),
        (_ff_unwrapped, "which code runs"),
        (_ff_inline_wins, "asked for a first frame"),
        (_ff_ask_dynamo, "do not ask"),
        (_ff_alias, "do not ask"),
        (_ff_lookup, "do not ask"),
        (_ff_unwatched, "do not ask"),
        (_ff_raises, "your code raised"),
        (_ff_says_yes, "return True"),
        (lambda: True, "takes one argument"),
        ({"ReLU.forward", "SGD.zero_grad"}, "give a function"),
    ],
}
