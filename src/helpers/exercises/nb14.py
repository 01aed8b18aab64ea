"""Judges for notebook 14 (DDP under torch.compile, and the profiler's view).

The truths come from the installed torch: DDPOptimizer's own bucketing run on an FX trace of
`ddp_compile.Net` (no process group needed: `compile_fn` cuts the buckets before it splits the
graph), `DDPOptimizer.__init__`'s check, DDP's bucket assignment and Dynamo's skip rule
(`trace_rules.check`). No judge launches processes or compiles.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import ddp_compile
from helpers.exercises import Hint, as_int, choice_set, exercise, tr

CAP_MB = 2  # 14.1
PROFILE_CAP_MB, PROFILE_STEPS, PROFILE_ACCUM = 2, 3, 4  # 14.3


@functools.cache  # one FX trace and bucketing per cap (about a second on 2 cores)
def ddp_optimizer_split(cap_mb: float = CAP_MB) -> tuple[float, ...]:
    """DDPOptimizer's bucket sizes in MiB (forward order) for `Net` at `bucket_cap_mb=cap_mb`."""
    import torch.fx
    from torch._dynamo.backends.distributed import DDPOptimizer  # slow imports: only here

    gm = torch.fx.symbolic_trace(ddp_compile.make_model())
    opt = DDPOptimizer(bucket_bytes_cap=int(cap_mb * 2**20), backend_compile_fn=lambda g, i: g)
    try:  # the buckets are cut first; splitting a plain FX graph (no Dynamo metadata) then fails
        opt.compile_fn(gm, [ddp_compile.batch(0, 0)])
    except AttributeError:
        pass
    return tuple(round(b.size / 2**20, 2) for b in opt.buckets)


def _mib_list(answer: Any) -> list[float]:
    if isinstance(answer, (list, tuple)) and all(
        isinstance(a, (int, float)) and not isinstance(a, bool) for a in answer
    ):
        return [float(a) for a in answer]
    raise Hint(tr("give a list of subgraph sizes in MiB, e.g. [1.0, 2.0]"))


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 0.02 for x, y in zip(a, b, strict=True))


@exercise("14.1", "DDPOptimizer's subgraphs at bucket_cap_mb=2")
def subgraphs(answer: Any) -> str:
    sizes = _mib_list(answer)
    truth = list(ddp_optimizer_split())
    if _same(sizes, truth) or _same(sizes[::-1], truth):
        return tr(
            (
                "{truth} MiB (forward order), {len_truth} subgraphs: walking backward from "
                "the last layer, the first bucket closes at DDPOptimizer's 1 MiB "
                "first-bucket cap, the next ones once they reach {cap_mb} MiB, and the rest "
                "goes into the last."
            ),
            truth=truth,
            len_truth=len(truth),
            cap_mb=CAP_MB,
        )
    if sizes and abs(sum(sizes) - sum(truth)) > 0.05:
        raise Hint(
            tr(
                (
                    "the subgraphs hold all parameters between them: about {sum_truth:.2f} MiB "
                    "(six 1 MiB weights and their biases)"
                ),
                sum_truth=sum(truth),
            )
        )
    if _same(sorted(sizes), sorted([CAP_MB] * 3)):
        raise Hint(
            tr(
                "DDPOptimizer's first bucket is 1 MiB whatever the cap: the caller passes no "
                "first_bucket_cap and `DDPOptimizer.__init__` fills in 1 MiB (section 3), "
                "unlike DDP given an explicit cap"
            )
        )
    if all(abs(s - 1.0) < 0.05 for s in sizes):
        raise Hint(
            tr("a bucket after the first closes only once it holds {cap_mb} MiB", cap_mb=CAP_MB)
        )
    raise Hint(tr("walk the layers from the last one, as `compile_fn` does (section 3's excerpt)"))


def smallest_compilable_cap_mb() -> float:
    """The smallest bucket cap (MiB) that DDPOptimizer accepts: its default first-bucket cap."""
    from torch._dynamo.backends.distributed import DDPOptimizer

    cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    DDPOptimizer(bucket_bytes_cap=cap, backend_compile_fn=lambda g, i: g)  # accepted
    try:
        DDPOptimizer(bucket_bytes_cap=cap - 1, backend_compile_fn=lambda g, i: g)
    except AssertionError:
        return cap / 2**20
    raise AssertionError("DDPOptimizer accepted a cap below its first-bucket cap")


@exercise("14.2", "The smallest bucket_cap_mb DDPOptimizer accepts")
def smallest_cap(answer: Any) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Hint(tr("give a number of MiB"))
    truth = smallest_compilable_cap_mb()
    if math.isclose(answer, truth):
        return tr(
            (
                "{truth:g} MiB: `DDPOptimizer.__init__` sets first_bucket_cap to "
                "dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) and raises 'First bucket should be "
                "smaller/equal to other buckets' when bucket_bytes_cap is below it. "
                "Uncompiled DDP takes any cap."
            ),
            truth=truth,
        )
    if answer < truth:
        raise Hint(
            tr(
                (
                    "at {answer:g} MiB `DDPOptimizer.__init__` raises 'First bucket should be "
                    "smaller/equal to other buckets': its first-bucket cap is larger"
                ),
                answer=answer,
            )
        )
    if answer == 25:
        raise Hint(tr("25 MiB is DDP's default cap; smaller caps compile too"))
    raise Hint(
        tr(
            "{answer:g} MiB compiles, but so does a smaller cap: find where the check is",
            answer=answer,
        )
    )


def ddp_buckets(cap_mb: float = PROFILE_CAP_MB) -> int:
    """DDP's buckets for `Net` at an explicit cap (first bucket too), in backward order."""
    params = list(ddp_compile.make_model().parameters())[::-1]
    indices, _ = dist._compute_bucket_assignment_by_size(params, [int(cap_mb * 2**20)] * 2)
    return len(indices)


def profiled_allreduces(steps: int = PROFILE_STEPS, accum: int = PROFILE_ACCUM) -> int:
    """gloo:all_reduce events in one rank's trace: buckets x synced backwards, both phases."""
    synced = steps * accum + steps * 1  # phase "sync": every backward; "no_sync": the last
    return ddp_buckets() * synced


@exercise("14.3", "All-reduces in a longer profile")
def profile_count(answer: Any) -> str:
    if as_int(answer) is None:
        raise Hint(tr("give a whole number of gloo:all_reduce events"))
    answer = as_int(answer)
    b, s, k = ddp_buckets(), PROFILE_STEPS, PROFILE_ACCUM
    truth = profiled_allreduces()
    if answer == truth:
        return tr(
            (
                "{truth} = {b} buckets x ({s} x {k} synced backwards + {s} x 1): no_sync "
                "skips {k_1} of every {k} backwards; the warm-up runs before the profiler "
                "starts."
            ),
            truth=truth,
            b=b,
            s=s,
            k=k,
            k_1=k - 1,
        )
    if answer == b * 2 * s * k:
        raise Hint(tr("in the no_sync phase only the last micro-batch of each step all-reduces"))
    if answer == 2 * truth:
        raise Hint(
            tr(
                "c10d::allreduce_ and gloo:all_reduce are the same all-reduce recorded "
                "twice, and each rank writes its own trace: count one name in one file"
            )
        )
    if answer > truth and answer - truth <= 4:
        raise Hint(tr("the warm-up iterations run before `profile(...)` starts (`profile_worker`)"))
    if answer * b == truth:
        raise Hint(
            tr(
                (
                    "one all-reduce per bucket per synced backward: DDP makes {b} buckets at "
                    "bucket_cap_mb={profile_cap_mb} (section 5)"
                ),
                b=b,
                profile_cap_mb=PROFILE_CAP_MB,
            )
        )
    raise Hint(tr("section 5's 30 was 3 buckets x (8 + 2) for 2 steps; redo it for 3 steps"))


CANDIDATES = {
    "DistributedDataParallel.forward": DDP.forward,
    "Sequential.forward": torch.nn.Sequential.forward,
    "Linear.forward": torch.nn.Linear.forward,
    "ModuleList.__iter__": torch.nn.ModuleList.__iter__,
    "Net.forward": ddp_compile.Net.forward,
    "ddp_compile.batch": ddp_compile.batch,
}


def skipped_frames() -> set[str]:
    """The CANDIDATES whose frames Dynamo skips, asked with its own rule."""
    from torch._dynamo import trace_rules

    return {name for name, fn in CANDIDATES.items() if trace_rules.check(fn)}


@exercise("14.4", "Which frames Dynamo skips")
def skipped(answer: Any) -> str:
    given = choice_set(answer, sorted(CANDIDATES), tr("names from CANDIDATES"), "{'Net.forward'}")
    truth = skipped_frames()
    if given & {"Net.forward", "ddp_compile.batch"} - truth:
        raise Hint(
            tr(
                "code in src/helpers is not under torch/nn: Dynamo compiles those frames "
                "(that is why the notebook's model is a class of its own)"
            )
        )
    if truth - given:
        raise Hint(
            tr(
                (
                    "{sorted_truth_given} also live in torch/nn (MOD_SKIPLIST): "
                    "`trace_rules.check` answers True for them"
                ),
                sorted_truth_given=sorted(truth - given),
            )
        )
    from torch._dynamo import trace_rules

    inlined = sorted(n for n in truth if not trace_rules.check(CANDIDATES[n], is_inlined_call=True))
    return tr(
        (
            "{sorted_truth}: every frame whose code is in torch/nn; Dynamo starts "
            "compiling only in the frames they call that are not skipped, like "
            "Net.forward. Called from a compiled frame, {they_if_inlined_sorted_truth_e} "
            "are inlined, not skipped: `trace_rules.check(fn, is_inlined_call=True)` is "
            "False for them (MOD_INLINELIST)."
        ),
        sorted_truth=sorted(truth),
        they_if_inlined_sorted_truth_e=tr("they") if inlined == sorted(truth) else inlined,
    )
