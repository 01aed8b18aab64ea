"""DDP, read by running it: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it,
except `unused_loop_worker`, whose loop 06's exercise 3 has the reader read (the reader's own
`show_source` call, in no stored cell: its judge runs it). It imports from the lesson, never the
reverse.

Used by: notebooks 04, 06, 07, 08, 13 and 14.
"""

import sys
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from .lesson import (
    TwoHeadNet,
    buffer_sync_worker,
    init_broadcast_worker,
    jobs_worker,
    make_wide_mlp,
    wrap_ddp,
)

# ---------------------------------------------------------------------------------------------
# first-iteration bucketing (one fact for notebooks 06, 13 and 14)


def first_iteration_bucket_limits(
    *,
    find_unused_parameters: bool = False,
    static_graph: bool = False,
    bucket_cap_mb: int | None = None,
    bucket_cap_mb_list: list[int] | None = None,
) -> list[int]:
    """Byte limits of DDP's initial bucket assignment for these constructor options.

    Computed by the installed `torch.nn.parallel.distributed._BucketCapacityConfig` (`create`,
    then `compute_bucket_size_limits`), exactly as `DDP._ddp_init_helper` calls it. On 2.13.0,
    2.14.1 and 2.15.0 the result is `[sys.maxsize]` (no size limit: one bucket per dtype and
    device, which the assignment never mixes, and one per sparse-gradient parameter) unless
    `bucket_cap_mb_list` is given (its limits), or `find_unused_parameters=True` with
    `static_graph=False`: `[1 MiB, 25 MiB]` without `bucket_cap_mb`, `[bucket_cap_mb]` with it.
    The Reducer rebuilds the buckets once, in gradient-ready order (first bucket 1 MiB, or
    `bucket_cap_mb` when given; then `bucket_cap_mb`, default 25 MiB): after the first
    iteration, one iteration later with `static_graph=True`, and never with
    `find_unused_parameters=True` without `static_graph` (`Reducer::should_rebuild_buckets`;
    measured by `rebuild_worker`). Raises AssertionError naming what is missing if the
    installed DDP no longer has this class.
    """
    import torch.nn.parallel.distributed as ddp_module

    config_cls = getattr(ddp_module, "_BucketCapacityConfig", None)
    assert config_cls is not None and hasattr(config_cls, "compute_bucket_size_limits"), (
        "torch.nn.parallel.distributed: expected _BucketCapacityConfig.compute_bucket_size_limits"
        f" (2.13.0 to 2.15.0), found {config_cls!r}"
    )
    config = config_cls.create(
        bucket_cap_mb=bucket_cap_mb,
        bucket_cap_mb_list=bucket_cap_mb_list,
        use_python_reducer=False,
    )
    limits, _for_rebuilding = config.compute_bucket_size_limits(
        static_graph=static_graph, find_unused_parameters=find_unused_parameters
    )
    return list(limits)


def first_iteration_one_bucket(**options: Any) -> bool:
    """Whether DDP's first iteration has no bucket size limit for these options.

    True when `first_iteration_bucket_limits(**options)` is `[sys.maxsize]`: the first backward
    then all-reduces the gradients of each dtype and device in one bucket however large the
    model, so one bucket for a dense model of one dtype on one device (the notebooks' models).
    """
    return first_iteration_bucket_limits(**options) == [sys.maxsize]


def initial_buckets_worker(rank: int, world_size: int, options: list[dict]) -> list[int]:
    """Buckets the Reducer starts with (before any backward), per DDP option dict.

    The measured side of `first_iteration_bucket_limits`: `make_wide_mlp` (about 1.5 MiB) is
    wrapped with each option and the logging data's `bucket_sizes` counted.
    """
    counts = []
    for kwargs in options:
        ddp = wrap_ddp(make_wide_mlp(seed=0), **kwargs)
        counts.append(len(ddp._get_ddp_logging_data()["bucket_sizes"].split(", ")))
    return counts


# ---------------------------------------------------------------------------------------------
# DistributedSampler (pure)


def sampler_shards(
    n: int,
    world_size: int,
    epoch: int | None = 0,
    seed: int | list[int] = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> list[list[int]]:
    """The indices each rank's DistributedSampler yields, in rank order.

    `seed` may be a list (one per rank) to show what goes wrong when ranks disagree;
    `epoch=None` leaves `set_epoch` uncalled.
    """
    seeds = seed if isinstance(seed, list) else [seed] * world_size
    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            range(n),
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seeds[rank],
            drop_last=drop_last,
        )
        if epoch is not None:
            sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


#: forwards of `buffer_sync_facts`: each mode follows a training forward with grad once
BUFFER_SCHEDULE = ["train", "train", "eval", "train", "train+no_grad", "train"]


def _synced(seen1: list, after0: list, after1: list, i: int) -> bool | None:
    """Did rank 1 start forward i with rank 0's buffers? None when the ranks already agreed."""
    if after0[i - 1] == after1[i - 1]:
        return None
    return seen1[i] == after0[i - 1]


def buffer_sync_rule(
    init_results: list[dict[str, Any]],
    forward_results: list[dict[str, Any]],
    schedule: list[str] | None = None,
) -> dict[str, Any]:
    """DDP's buffer sync as measured: the one fact notebooks 06 and 07 (and 08) state alike.

    Pure: takes rank 0's and rank 1's results of `init_broadcast_worker` and of
    `buffer_sync_worker(schedule)`. Returns `at_init` ({constructor option: rank 1 holds rank
    0's running_mean after construction}) and, for the default and for
    `forward_sync_buffers=False`, `at_forward`: one row per forward after the first,
    (previous forward's mode, this forward's mode, synced) where synced is True when rank 1
    started it with rank 0's buffers, False when with its own, None when they agreed anyway.
    On 2.13.0-2.15.0 (same buffer-sync code): every option but `broadcast_buffers=False` syncs at
    init; with the default, a forward syncs unless the one before ran under no_grad (measured;
    or `no_sync`: read in `_post_forward`), train or eval; `forward_sync_buffers=False` never does.
    """
    schedule = schedule or BUFFER_SCHEDULE
    i0, i1 = init_results[0], init_results[1]
    at_init = {
        label: i1["options"][label]["1.running_mean[0]"]
        == i0["options"][label]["1.running_mean[0]"]
        for label in i1["options"]
    }
    at_forward = {}
    for label in ("sync", "no sync"):
        r0, r1 = forward_results[0][label], forward_results[1][label]
        at_forward[label] = [
            (schedule[i - 1], schedule[i], _synced(r1["seen"], r0["after"], r1["after"], i))
            for i in range(1, len(schedule))
        ]
    return {"at_init": at_init, "at_forward": at_forward}


def buffer_sync_facts(timeout_s: float = 180) -> dict[str, Any]:
    """Launch 2 gloo ranks (on every machine), run both workers, return `buffer_sync_rule`."""
    from helpers.launch import launch

    jobs = [(init_broadcast_worker, ()), (buffer_sync_worker, (BUFFER_SCHEDULE,))]
    res = launch(jobs_worker, 2, (jobs,), backend="gloo", timeout_s=timeout_s)
    return buffer_sync_rule(
        [r["init_broadcast_worker"] for r in res], [r["buffer_sync_worker"] for r in res]
    )


def max_stable_lr(n: int = 512) -> float:
    """2 / (largest eigenvalue of the Hessian of `accumulation_epochs`' loss): full-batch GD
    on a quadratic diverges for any larger step."""
    g = torch.Generator().manual_seed(0)
    scales = torch.linspace(0.2, 3.0, 16, dtype=torch.float64)
    x = torch.randn(n, 16, generator=g, dtype=torch.float64) * scales
    hessian = 2 * x.T @ x / n  # (16, 16)
    return float(2 / torch.linalg.eigvalsh(hessian).max())


# ---------------------------------------------------------------------------------------------
# 06's exercise 3: the loop the reader reads (`show_source(unused_loop_worker)`); its judge
# (helpers.exercises.nb06) launches it, and the dry run audits it


def unused_loop_worker(rank: int, world_size: int, ddp_kwargs: dict) -> dict:
    """Two training steps of TwoHeadNet through head_a only (head_b never used), under DDP."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))  # (3, 4)
    model = TwoHeadNet(seed=0)
    ddp = wrap_ddp(model, **ddp_kwargs)
    try:
        for _ in range(2):
            ddp(x, "a").sum().backward()
    except RuntimeError as err:
        return {"error": str(err).split(". ")[0] + "."}
    return {"error": None, "head_b grad": model.head_b.weight.grad is not None}
