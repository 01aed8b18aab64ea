"""All-reduce from scratch: naive, master, ring and pipelined ring on point-to-point messages.

Used by: notebook 05 (all-reduce from scratch), tests/test_allreduce.py, benchmarks/allreduce.py.
Runs inside a process group started by `helpers.launch.launch`: gloo on CPU, or NCCL with one
GPU per rank (tensors live on `helpers.launch.current_device()`; the tests and notebook 05 run
gloo only, the NCCL path is untested here). The pure parts (the ring and pipelined-ring simulations,
byte formulas, alpha-beta model, step text) need no process group.

    naive_allreduce(t)           every rank sends its whole tensor to every other rank, then sums
    master_allreduce(t)          everyone sends to rank 0, which sums and sends the result back
    ring_allreduce(t)            N chunks; reduce-scatter for N-1 steps, then all-gather for N-1
    pipelined_ring_allreduce(t)  the same ring, each chunk moving in `segments` pieces, each
                                 piece forwarded as soon as it has arrived (and been added)

All reduce in place, with `op` SUM or AVG, for every world size N >= 1, every number of
elements (also not a multiple of N, also zero), any shape, contiguous or not (tests/
test_allreduce.py checks N = 1..5 against `dist.all_reduce`). AVG of an integer tensor is
refused with a TypeError: the mean of integers is not an integer, and silently rounding (as a
floor or a truncation) would hide that; reduce with SUM and divide as you mean to.

Before any data moves, every call checks that all ranks agree on shape, dtype, op (and segment
count) with one `dist.all_gather` of a small int64 header; the error names each rank and what
it passed. Without the check, ranks that disagree post messages of different sizes, and on gloo
the receiving process aborts (SIGABRT; `unchecked_mismatch_worker`, tested).

Every point-to-point message is posted by one function, `p2p_post` (one
`dist.batch_isend_irecv` call, not waited for); `p2p_round` posts a round and waits for it,
and `count_p2p()` counts what passes through `p2p_post`: bytes and messages sent and received,
and steps (rounds of the ring schedule). It wraps our chokepoint rather than patching
`torch.distributed.isend`: `dist.P2POp` accepts only the genuine `dist.isend`/`dist.irecv`
(`torch.distributed.distributed_c10d._check_op`: `op not in [isend, irecv]`; tested), so a
patched function would break `batch_isend_irecv`. Under NCCL that call groups a rank's send
and receive (its `_coalescing_manager` branch), the pattern NCCL's user guide gives for a
send and receive that must progress together ("Point-to-point communication", docs.nvidia.com).
"""

from .harness import (
    P2PCount,
    PipelinedRingEvent,
    RingSimulation,
    RingStep,
    _digest,
    _extras,
    _fmt_number,
    _freeze,
    _make_input,
    _Number,
    _owners_label,
    _reference,
    _sync,
    _timed_fn,
    _values_label,
    algorithms_vs_library_worker,
    busbw_gbps,
    count_p2p,
    expected_p2p,
    pipelined_ring_text,
    profile_ring,
    profile_worker,
    resolve_algorithm,
    ring_step_html,
    ring_step_text,
    ring_step_viewer,
    simulate_pipelined_ring,
    simulate_ring,
    summarize_vs_library,
    timing_worker,
)
from .lesson import (
    _ACTIVE,
    _DTYPE_NAMES,
    _HEADER_DIMS,
    _OPS,
    _PROFILES,
    _RECV_BUFFERS,
    ALGORITHMS,
    _count_step,
    _describe,
    _finish,
    _op_name,
    _prepare,
    _recv_buffer,
    _timed,
    _wait_all,
    alpha_beta_time,
    check_agreement,
    chunk_bounds,
    library_facts_worker,
    master_allreduce,
    naive_allreduce,
    p2p_post,
    p2p_round,
    pipelined_ring_allreduce,
    ring_allreduce,
    ring_schedule,
    unchecked_mismatch_worker,
)

__all__ = [
    "ALGORITHMS",
    "naive_allreduce",
    "master_allreduce",
    "ring_allreduce",
    "pipelined_ring_allreduce",
    "resolve_algorithm",
    "p2p_post",
    "p2p_round",
    "P2PCount",
    "count_p2p",
    "check_agreement",
    "chunk_bounds",
    "ring_schedule",
    "expected_p2p",
    "alpha_beta_time",
    "RingStep",
    "RingSimulation",
    "simulate_ring",
    "PipelinedRingEvent",
    "simulate_pipelined_ring",
    "pipelined_ring_text",
    "ring_step_html",
    "ring_step_text",
    "ring_step_viewer",
    "profile_ring",
    "algorithms_vs_library_worker",
    "summarize_vs_library",
    "library_facts_worker",
    "timing_worker",
    "profile_worker",
    "busbw_gbps",
    "unchecked_mismatch_worker",
]
