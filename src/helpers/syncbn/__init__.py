"""SyncBatchNorm that trains on CPU: batch statistics over the global batch via one all-reduce.

Used by: notebook 07 (BatchNorm and SyncBatchNorm), the DDP training script (helpers.train_ddp),
benchmarks/syncbn_cost.py and tests/test_syncbn.py.

`nn.SyncBatchNorm` cannot train on CPU in torch 2.13.0, 2.14.1 or 2.15.0 (measured on each: its
forward refuses CPU tensors with "SyncBatchNorm expected input tensor to be on GPU or XPU or
privateuseone", and `aten::batch_norm_stats` has no CPU kernel; tests/test_syncbn.py checks both
on the installed torch).
`CPUSyncBatchNorm` (exported as `SyncBatchNorm`) computes the same thing, BatchNorm over the
global batch, in plain tensor ops and one all-reduce, so it trains under gloo on CPU; nothing in
it is CPU-specific, but the collection tests it on CPU only (`native_syncbn_ddp_worker` compares
it with `nn.SyncBatchNorm` where two GPUs are available):

    per channel c, on every rank:  [sum x, sum x^2, count]        # (3, C)
    one all-reduce (SUM) over the process group       # the forward's only collective
    mean = S / n,  var = SS / n - mean^2  (biased, used to normalise)
    running_var uses the unbiased var * n / (n - 1), n = the GLOBAL count

The all-reduce is `torch.distributed._functional_collectives.all_reduce`, which is
differentiable (its backward is another SUM all-reduce), so autograd produces the exact
gradient of the global-batch BatchNorm: no hand-written backward. Ranks may hold different
batch sizes (even zero), because the counts are reduced with the sums. Weight and bias
gradients stay local per rank (summing them over ranks, as DDP's all-reduce does up to its
averaging, gives the single-process gradient).

Without an initialised process group, with world size 1, or in eval mode, the module runs
`_BatchNorm.forward`, the code of `nn.BatchNorm*d` (the tests compare the first two bitwise).
Deliberate differences from `nn.SyncBatchNorm`: a global count of one value per channel raises
BatchNorm's error (the native module only checks the local count, and only for world size 1),
and the converter keeps layers that already synchronise (see `convert_sync_batchnorm`).

Numerics: the sums are accumulated in float64 on CPU and in float32 elsewhere (float64 input
stays float64). `E[x^2] - E[x]^2` cancels when |mean| >> std; float64 pushes that far out
(notebook 07 shows float32 power sums failing on a channel where float64 ones hold).
nn.SyncBatchNorm instead all-gathers each rank's (mean, invstd, count) and merges them in
`torch.batch_norm_gather_stats_with_counts`, which receives per-rank means and inverse standard
deviations with their counts, not power sums (its CUDA kernel, batch_norm_reduce_statistics_kernel,
is in aten/src/ATen/native/cuda/Normalization.cuh, which the wheel ships under torch/include/;
notebook 07 shows its merge loop from there).
"""

from .harness import (
    REDUCE_OPS,
    SyncBatchNorm,
    all_reduce_backward_ops,
    compare_with_reference,
    ddp_reference_step,
    reference_run,
)
from .lesson import (
    CPUSyncBatchNorm,
    _bn_class,
    _bn_net,
    _initial_params,
    _net_step,
    _run,
    _small_net,
    _stats_dtype,
    _sync_group,
    checks_worker,
    convert_sync_batchnorm,
    count_collectives,
    ddp_step_worker,
    global_batch_stats,
    make_global_batch,
    make_scenario,
    native_cpu_probe,
    native_syncbn_ddp_worker,
    single_rank_groups_worker,
    sync_batchnorm_class,
    syncbn_cost_worker,
    syncbn_scenarios_worker,
)

__all__ = [
    "CPUSyncBatchNorm",
    "SyncBatchNorm",
    "convert_sync_batchnorm",
    "sync_batchnorm_class",
    "global_batch_stats",
    "all_reduce_backward_ops",
    "make_scenario",
    "make_global_batch",
    "syncbn_scenarios_worker",
    "checks_worker",
    "native_cpu_probe",
    "single_rank_groups_worker",
    "ddp_step_worker",
    "ddp_reference_step",
    "reference_run",
    "compare_with_reference",
    "native_syncbn_ddp_worker",
    "count_collectives",
    "syncbn_cost_worker",
]
