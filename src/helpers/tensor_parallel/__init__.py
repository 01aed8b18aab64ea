"""Tensor and sequence parallelism: Megatron's f and g from scratch, then DTensor.

Used by: notebook 15, and `helpers.dimensions` (`layer_worker`, `make_layer`).
Workers run under `helpers.launch` with gloo on
the CPU (the notebook asks for gloo). `tensor_parallel_worker` and `dtensor_worker` make every
tensor and module on `helpers.launch.current_device()`, the launcher's device: device-checked on
CPU (the dry run, `helpers.dryrun`), not yet run on a GPU; `layer_worker` builds on the CPU. Every
rank builds the same seeded transformer layer (`make_layer`), keeps its shard of it, and returns
plain Python data (losses, gradients as lists, byte counts), never tensors.

Layout: activations are (s, b, h), sequence first, as in Megatron-LM, so that sequence
parallelism shards dim 0 and the all-gather / reduce-scatter work on contiguous chunks.

From scratch (Shoeybi et al. 2019, Korthikanti et al. 2022):
- `f` (`CopyToParallel`) is the identity forward and an all-reduce backward; `g`
  (`ReduceFromParallel`) the reverse. A column-parallel linear (output features split) after `f`
  and a row-parallel linear (input features split) before `g` make an MLP or an attention block
  (heads split) with one all-reduce forward and one backward.
- Sequence parallelism replaces `g` by a reduce-scatter along the sequence (backward: all-gather)
  and `f` by an all-gather (backward: reduce-scatter). The letters are Megatron-LM's; Korthikanti
  et al. call the tensor-parallel pair f and f-bar, and the sequence-parallel pair g (the
  all-gather) and g-bar (the reduce-scatter). `GatherColumnLinear` keeps only the
  sequence shard of its input for backward and all-gathers it again there, as the paper does.
Every collective goes through `_collective`, which records its kind, phase and message bytes in
`COMM_LOG`, so that the bytes per collective can be set against the formulas.
"""

from .harness import (
    dtensor_worker,
    layer_worker,
    local_tensor_grad_placements,
    max_diff,
    mlp_block_reference,
)
from .lesson import (
    _PHASE,
    BATCH,
    COMM_LOG,
    DROPOUT,
    FFN,
    HEADS,
    HIDDEN,
    SEQ,
    SEQUENCE_PARTIAL,
    CopyToParallel,
    GatherColumnLinear,
    Layer,
    MLPBlock,
    ReduceFromParallel,
    ReduceScatterToSequence,
    _attention,
    _collective,
    _drop,
    _dtensor_run,
    _grad_shards,
    _grads,
    _local_masks,
    _log_counts,
    _run,
    _scratch_mlp_counts,
    activation_bytes,
    attention_block,
    check_divisible,
    comm_counts,
    dropout_masks,
    korthikanti_bytes,
    layer_input,
    local_tensor_mlp,
    make_layer,
    max_errors,
    mlp_block,
    parallel_mlp_block,
    reference_layer,
    ring_bytes,
    shard_layer,
    tensor_parallel_worker,
    tp_layer,
)

__all__ = [
    "SEQ",
    "BATCH",
    "HIDDEN",
    "HEADS",
    "DROPOUT",
    "make_layer",
    "layer_input",
    "dropout_masks",
    "reference_layer",
    "check_divisible",
    "shard_layer",
    "CopyToParallel",
    "ReduceFromParallel",
    "ReduceScatterToSequence",
    "GatherColumnLinear",
    "tp_layer",
    "attention_block",
    "mlp_block",
    "COMM_LOG",
    "ring_bytes",
    "max_errors",
    "max_diff",
    "SEQUENCE_PARTIAL",
    "activation_bytes",
    "korthikanti_bytes",
    "tensor_parallel_worker",
    "layer_worker",
    "MLPBlock",
    "mlp_block_reference",
    "parallel_mlp_block",
    "comm_counts",
    "dtensor_worker",
    "local_tensor_mlp",
    "local_tensor_grad_placements",
]
