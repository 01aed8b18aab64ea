"""Pipeline parallelism from scratch and with `torch.distributed.pipelining`, on CPU with gloo.

Used by: notebook 16 (pipeline parallelism), tests/test_pipeline_parallel.py and the judges in
helpers.exercises.nb16. Workers run under `helpers.launch.launch` with gloo (N = 2 and 4 ranks);
they return plain data (lists, dicts, floats) and the parent prints.

- The model is a stack of identical blocks (Linear + Tanh); a stage is a contiguous run of
  blocks, so every stage's gradients can be compared with one process training the whole stack.
- From scratch (`scratch_worker`): GPipe and 1F1B over `dist.isend`/`dist.irecv`, one stage per
  rank. Every wait has a timeout (`op_timeout_s`) and a failed wait raises `PipelineTimeout`
  naming this rank and its peer: a mismatched send/recv ends in seconds, not after the process
  group's default timeout of 30 minutes.
- With PyTorch's API (`library_worker`): `PipelineStage` and the schedule classes; the executed
  order of compute actions is recorded by wrapping the stage's `*_one_chunk` methods.
- Schedules as data: `library_order` builds a schedule object with a stand-in stage (no process
  group) and reads its `pipeline_order`; `simulate` replays any per-rank order against the
  dependencies of the pipeline with fixed costs and returns the timeline and the idle fraction;
  `timeline_svg` draws it as deterministic SVG text, and `timeline_step_viewer` steps through it
  one time slot at a time (`helpers.viewers.TimelineViewer`, in JupyterLab and in the book).
- Activations held: each stage counts the bytes autograd saves inside its blocks (a
  `saved_tensors_hooks` pack hook; the count drops when the graph is freed), so the peak, over
  one micro-batch's bytes, is the number of micro-batches whose activations the stage holds.
"""

from .harness import (
    _COLOURS,
    _KIND_NAMES,
    _LEFT,
    _ROW_H,
    _TOP,
    _row,
    check_held_and_order,
    check_one_process,
    measured_idle,
    mismatch_worker,
    peak_in_flight,
    plan_kinds,
    reference,
    slot_actions,
    slot_count,
    slot_text,
    timeline_step_viewer,
    timeline_svg,
    torch_order,
)
from .lesson import (
    BATCH,
    SCHEDULES,
    SEED,
    WIDTH,
    Action,
    Block,
    PipelineTimeout,
    SavedBytes,
    _as_action,
    _Box,
    _check_order,
    _grads,
    _plain_order,
    _prepare_stage,
    _record,
    _Sleep,
    _stage_indices,
    _stand_in_stage,
    _unit_bytes,
    _wait,
    bubble_formula,
    deadlock_worker,
    executed_compute,
    library_order,
    library_plan,
    library_step,
    library_worker,
    loss_fn,
    make_batch,
    make_model,
    scratch_order,
    scratch_step,
    scratch_worker,
    simulate,
    split_microbatches,
)

__all__ = [
    "WIDTH",
    "BATCH",
    "PipelineTimeout",
    "make_model",
    "make_batch",
    "split_microbatches",
    "reference",
    "scratch_order",
    "library_order",
    "library_plan",
    "plan_kinds",
    "executed_compute",
    "peak_in_flight",
    "measured_idle",
    "simulate",
    "bubble_formula",
    "timeline_svg",
    "slot_count",
    "slot_actions",
    "slot_text",
    "timeline_step_viewer",
    "scratch_worker",
    "check_one_process",
    "check_held_and_order",
    "deadlock_worker",
    "library_worker",
    "mismatch_worker",
    "SCHEDULES",
]
