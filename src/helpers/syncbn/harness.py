"""SyncBatchNorm on CPU: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 07.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .lesson import (
    CPUSyncBatchNorm,
    _bn_class,
    _net_step,
    _run,
    _small_net,
    make_global_batch,
    make_scenario,
)

REDUCE_OPS = ("sum", "avg", "premul_sum", "max", "min", "product")


def all_reduce_backward_ops(ops: Sequence[str] = REDUCE_OPS) -> dict[str, str | None]:
    """Per reduce op of a functional `all_reduce`: the op its registered backward all-reduces
    the gradient with, or None where the backward refuses that op.

    Probed in this process without a process group: the backward is called with a made-up
    group name, and a dispatch mode records the `_c10d_functional.all_reduce` it issues (and
    stops it there, before the group is looked up). `global_batch_stats` relies on "sum".
    Read in each release: 2.13.0 only "sum"; 2.14.1 also "avg"; 2.15.0 also "premul_sum",
    "max" and "min" (those two all-reduce with "sum", then split among the extremum holders).
    """
    import types

    from torch.distributed import _functional_collectives as funcol
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Issued(Exception):
        pass

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if func is torch.ops._c10d_functional.all_reduce.default:
                raise _Issued(args[1])
            return func(*args, **(kwargs or {}))

    found: dict[str, str | None] = {}
    for op in ops:
        ctx = types.SimpleNamespace(reduce_op=op, group_name="no group: a probe")
        try:
            with _Record():
                funcol.all_reduce_backward(ctx, torch.ones(2))
            found[op] = "no all_reduce"  # not expected on any release read
        except _Issued as issued:
            found[op] = str(issued.args[0])
        except RuntimeError as err:
            if "backward only supports" not in str(err):
                raise
            found[op] = None
    return found


SyncBatchNorm = CPUSyncBatchNorm


def ddp_reference_step(batch_sizes: Sequence[int], seed: int) -> dict:
    """What `ddp_step_worker` must give: one plain step with BatchNorm2d on the whole batch."""
    scenario = make_scenario(batch_sizes, (3, 5, 5), seed=seed)
    x, _ = make_global_batch(scenario, 0)
    return _net_step(_small_net(), x, 1.0 / len(batch_sizes))


def reference_run(scenario: dict) -> dict:
    """The same steps with nn.BatchNorm*d on the whole (concatenated) batch, one process."""
    c = scenario["feature_shape"][0]
    module = _bn_class(len(scenario["feature_shape"]) + 1)(
        c, momentum=scenario["momentum"], affine=scenario["affine"]
    )
    return _run(module, scenario, slice(None), torch.device("cpu"))


def compare_with_reference(per_rank: Sequence[dict], reference: dict) -> dict[str, float]:
    """Largest absolute difference, per quantity, between the ranks and the reference.

    Outputs and input grads are concatenated over ranks; weight and bias grads are summed
    over ranks (each rank holds its own share); running stats must agree on every rank.
    """
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    err: dict[str, float] = {}

    def worst(a: Tensor, b: Tensor) -> float:
        if a.shape != b.shape:
            raise ValueError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
        return float((a - b).abs().max()) if a.numel() else 0.0

    steps = len(reference["outputs"])
    for key in ("outputs", "input_grads"):
        err[key] = max(
            worst(
                torch.cat(
                    [t(r[key][s]).reshape(-1, *t(reference[key][s]).shape[1:]) for r in per_rank]
                ),
                t(reference[key][s]),
            )
            for s in range(steps)
        )
    for key in ("weight_grads", "bias_grads"):
        if reference[key]:
            err[key] = max(
                worst(sum(t(r[key][s]) for r in per_rank), t(reference[key][s]))
                for s in range(steps)
            )
    for key in ("running_mean", "running_var"):
        err[key] = max(worst(t(r[key]), t(reference[key])) for r in per_rank)
    err["num_batches_tracked"] = float(
        max(abs(r["num_batches_tracked"] - reference["num_batches_tracked"]) for r in per_rank)
    )
    ref_eval = t(reference["eval_outputs"])
    err["eval_outputs"] = worst(
        torch.cat([t(r["eval_outputs"]).reshape(-1, *ref_eval.shape[1:]) for r in per_rank]),
        ref_eval,
    )
    return err
