"""Sharded data parallelism: ZeRO stages 1 and 2 from scratch, FSDP2, and their memory.

Used by: notebook 13. Workers run under `helpers.launch` (gloo on CPU; NCCL with one GPU per
rank when launch picks it, as designed and not yet run: tensors go to `current_device()`). Every
rank trains the same small MLP on its own batches with AdamW; the workers return plain Python data
(final parameters, byte counts, collective counts), never tensors.

What "from scratch" means here: every parameter is flattened, padded to a multiple of the world
size N and cut into N equal shards; rank r owns shard r. `ZeroAdamW` keeps AdamW's state only for
the shards a rank owns (ZeRO stage 1); with `stage=2` a post-accumulate-grad hook reduce-scatters
each gradient as soon as backward produces it and drops the full gradient (ZeRO stage 2). After
the step every rank all-gathers the updated shards, so every rank holds the full parameters again.
Memory is counted two ways: the bytes of the tensors a rank holds (for FSDP2, the elements its
DTensors' local pieces show) and the bytes of the storage behind them (distinct storages, so a view
of a padded buffer counts the whole buffer once), next to the ZeRO paper's formulas.
"""

from .lesson import (
    HIDDEN,
    IN_FEATURES,
    LR,
    OUT_FEATURES,
    ZeroAdamW,
    _bytes,
    _counts,
    _flat_params,
    _full,
    _local,
    _state_bytes,
    _storage_bytes,
    _train,
    batch,
    fsdp_padded_numel,
    make_model,
    memory_formula,
    padded_numel,
    sharding_worker,
)

__all__ = [
    "make_model",
    "batch",
    "padded_numel",
    "fsdp_padded_numel",
    "ZeroAdamW",
    "memory_formula",
    "sharding_worker",
    "LR",
]
