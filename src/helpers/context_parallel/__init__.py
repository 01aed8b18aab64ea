"""Context parallelism: ring attention from scratch, the all-gather variant, torch's API on CPU.

Used by: notebook 17. Workers run under `helpers.launch` with gloo on CPU and return plain Python
data (nested lists, floats, strings), never tensors. Tensors are (B, H, S, D): batch, heads,
sequence, head dimension; the sequence dimension S (dim 2) is what is sharded.

What "from scratch" means here: each rank keeps its own queries and its own block of keys and
values. `ring_attention` computes attention block by block: its queries against the key/value
block it holds, merged into a running output with a running log-sum-exp (the online softmax), then
passes the key/value block to the next rank and receives the previous rank's (`RingShift`, on
`isend`/`irecv`), N - 1 times. Backward is autograd through the same blockwise arithmetic;
`RingShift`'s backward passes the gradient of the received block back the other way round the
ring, so the gradients of k and v arrive at the rank that owns them. A causal mask is decided
from global token positions, so the same code serves the contiguous split (rank r holds tokens
[r S/N, (r+1) S/N)) and the zig-zag split (2N chunks; rank r holds chunks r and 2N-1-r).
"""

from .harness import (
    _RANK_COLOURS,
    _tokens,
    pitfall_worker,
    ring_attention_step_text,
    ring_attention_step_viewer,
    ring_attention_svg,
    work_grid,
    work_grid_svg,
)
from .lesson import (
    LAYOUTS,
    SHAPE,
    TOLERANCE,
    RingShift,
    _gather,
    _GatherSeq,
    _shift,
    allgather_attention,
    allgather_worker,
    block_attention,
    block_skipped,
    check_one_process,
    chunks_of,
    library_worker,
    loss_weight,
    make_qkv,
    merge_partial,
    merge_sequence,
    one_process_errors,
    reference,
    ring_attention,
    ring_attention_plan,
    ring_owner,
    ring_worker,
    ring_worker_with,
    rotater_worker,
    split_sequence,
    strides_worker,
    work_formula,
)

__all__ = [
    "LAYOUTS",
    "make_qkv",
    "chunks_of",
    "split_sequence",
    "merge_sequence",
    "block_attention",
    "merge_partial",
    "RingShift",
    "ring_attention",
    "reference",
    "ring_worker",
    "ring_worker_with",
    "one_process_errors",
    "check_one_process",
    "allgather_attention",
    "allgather_worker",
    "strides_worker",
    "pitfall_worker",
    "library_worker",
    "rotater_worker",
    "work_formula",
    "work_grid",
    "work_grid_svg",
    "ring_owner",
    "block_skipped",
    "ring_attention_plan",
    "ring_attention_svg",
    "ring_attention_step_text",
    "ring_attention_step_viewer",
]
