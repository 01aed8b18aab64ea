"""DistributedDataParallel under the microscope: models, workers and a counting comm hook.

Used by: 06 (DDP internals: broadcast at construction, buffers, sampler, buckets, equivalence),
08 (gradient accumulation with `no_sync`, how large K may be, unused parameters under
`no_sync`, mixed precision in a DDP step), 04 (`buffer_sync_facts`), 07 (its broadcast, buffer and
jobs workers), 13 and 14 (the first iteration's bucket limits); 06's exercise 3 reads
`unused_loop_worker`.
Workers run under `helpers.launch.launch` (gloo on CPU; NCCL with one GPU per rank when enough
GPUs are visible, through `current_device()`); they return plain Python data, never tensors.
The DistributedSampler helpers are pure: the sampler needs no process group when `num_replicas`
and `rank` are given. So are `accumulation_plan`, `accumulation_epochs` and `max_stable_lr`
(one process, float64). `jobs_worker` runs several workers, passed as functions, in one launch.

`first_iteration_bucket_limits` / `first_iteration_one_bucket` hold one fact that notebooks 06,
13 and 14 assert alike: the byte limits DDP buckets its parameters with *before* the first
iteration, computed by the installed `_BucketCapacityConfig` (no process group needed).
"""

from .harness import (
    BUFFER_SCHEDULE,
    _synced,
    buffer_sync_facts,
    buffer_sync_rule,
    first_iteration_bucket_limits,
    first_iteration_one_bucket,
    initial_buckets_worker,
    max_stable_lr,
    sampler_shards,
    unused_loop_worker,
)
from .lesson import (
    CommCounter,
    TwoHeadNet,
    _diverged_bn_net,
    _flat_grads,
    _flat_params,
    _head_b_grad,
    _one_step,
    _rank_batch,
    _rounded,
    _state_probe,
    _used_map,
    accumulation_epochs,
    accumulation_plan,
    accumulation_step,
    accumulation_worker,
    amp_worker,
    attach_counter,
    bucket_worker,
    buffer_sync_worker,
    count_allreduce_hook,
    equivalence_worker,
    init_broadcast_worker,
    jobs_worker,
    make_bn_net,
    make_mlp,
    make_wide_mlp,
    no_sync_worker,
    pitfall_worker,
    rebuild_worker,
    scaled_step,
    unused_params_worker,
    wrap_ddp,
)

__all__ = [
    "first_iteration_bucket_limits",
    "first_iteration_one_bucket",
    "initial_buckets_worker",
    "rebuild_worker",
    "make_bn_net",
    "make_mlp",
    "make_wide_mlp",
    "wrap_ddp",
    "CommCounter",
    "count_allreduce_hook",
    "attach_counter",
    "sampler_shards",
    "init_broadcast_worker",
    "buffer_sync_worker",
    "BUFFER_SCHEDULE",
    "buffer_sync_rule",
    "buffer_sync_facts",
    "bucket_worker",
    "equivalence_worker",
    "no_sync_worker",
    "accumulation_worker",
    "pitfall_worker",
    "accumulation_step",
    "accumulation_plan",
    "accumulation_epochs",
    "max_stable_lr",
    "TwoHeadNet",
    "unused_params_worker",
    "scaled_step",
    "amp_worker",
    "jobs_worker",
    "unused_loop_worker",
]
