"""The workers the GPU-designed notebooks (and 15) hand to `launch`: each entry at one world
size and one argument set; a worker may have several entries.

tests/test_dryrun.py runs each through `helpers.dryrun.dry_run` and compares the verdict with
src/helpers/dryrun_verdicts.json. Each entry: name -> (worker, world size, args). The world
size and arguments are not always the notebook's: 05's `algorithms_vs_library_worker` runs at
2 ranks without the extra cases and at 3 ranks with them (the notebook also launches it at 4);
07's `checks_worker` runs as section 5 launches it (2 ranks with `_syncbn_2()`: that launch's
arguments, passed there through `jobs_worker`) and as section 6 does (4 ranks, `scenarios_4`).
What the audit did not run is not device-checked (tests/test_dryrun_coverage.py names the
launches it does not run).
A harness that runs several workers in one launch (`helpers.ddp.jobs_worker`) is audited
through the workers it runs.
15's composite worker is audited whole (it stops at its first breach) and through the two
functions it calls that hold the second and third device faults found by reading it (CPU
tensors to collectives, the DTensor plan's CPU LayerNorm), called with the arguments the worker
passes. Not audited: 09's `helpers.train_ddp` (a torchrun script that picks its device from
`--device` and LOCAL_RANK and makes its own process group: not a `launch` worker) and the
exercises' reader-written workers. 06's exercise worker `unused_loop_worker`
(`helpers.ddp`, which 06.3's prompt imports; its checker runs it on gloo ranks under each
candidate's DDP arguments) is audited with `{"find_unused_parameters": True}`, a right answer to
the exercise.
`python tests/dryrun_audit.py` prints every verdict as the table's JSON.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import helpers.allreduce as ar
import helpers.collectives as coll
import helpers.ddp as ddp
import helpers.ddp_compile as ddp_compile
import helpers.sharded as sharded
import helpers.syncbn as syncbn
import helpers.tensor_parallel as tp


def tp_scratch_mlp_counts_worker(rank: int, world_size: int) -> Any:
    """15: `_scratch_mlp_counts` as tensor_parallel_worker calls it (tensor parallel)."""
    return tp._scratch_mlp_counts(tp.make_layer(), rank, world_size, False)


def tp_dtensor_run_worker(rank: int, world_size: int) -> Any:
    """15: `_dtensor_run` as tensor_parallel_worker calls it (tensor parallel)."""
    return tp._dtensor_run(rank, world_size, False)


def _cases_05() -> list:
    numels = [0, 1, 1001, 1200]
    dtype_ops = [("float32", "SUM"), ("float32", "AVG"), ("float64", "SUM"), ("int64", "SUM")]
    names = ["naive", "master", "ring", "pipelined:1", "pipelined:3", "pipelined:3:paired"]
    return [(a, n, d, o) for a in names for n in numels for d, o in dtype_ops]


def _syncbn_2() -> tuple:
    scenarios = [
        syncbn.make_scenario([4, 4], (3, 4, 4), seed=0),
        syncbn.make_scenario([3, 7], (3, 4, 4), seed=1, steps=3),
        syncbn.make_scenario([2, 9], (5,), seed=2, momentum=None),
        syncbn.make_scenario([0, 5], (2, 2, 3, 2), seed=3),
    ]
    return (scenarios, 7, syncbn.make_scenario([6], (3, 4, 4), seed=20), True)


def _syncbn_4() -> tuple:
    """07's 4-rank launch: `scenarios_4` of the notebook's cell, the other arguments default."""
    scenarios_4 = [
        syncbn.make_scenario([2, 3, 5, 1], (3, 4, 4), seed=10),
        syncbn.make_scenario([4, 4, 4, 4], (2, 7), seed=11, momentum=None),
    ]
    return (scenarios_4,)


REBUILD_OPTIONS = [{}, {"static_graph": True}, {"find_unused_parameters": True},
                   {"find_unused_parameters": True, "static_graph": True}]  # fmt: skip
SETTINGS_14 = [
    {"bucket_cap_mb": 1},
    {"bucket_cap_mb": None},
    {"bucket_cap_mb": 3},
    {"bucket_cap_mb": 1, "optimize_ddp": False},
    {"bucket_cap_mb": None, "optimize_ddp": "python_reducer", "compiled_autograd": True},
    {"bucket_cap_mb": 1, "optimize_ddp": "python_reducer_without_compiled_forward"},
    {"bucket_cap_mb": 1, "model": "sequential"},
]


# Launched with backend="gloo" on every machine (the notebook's cell says so): CPU only by
# design, never on NCCL; tests/test_dryrun.py checks the notebook's call instead.
GLOO_ONLY = {
    "05 unchecked_mismatch_worker": ("05_allreduce_from_scratch", "ar.unchecked_mismatch_worker"),
    "05 timing_worker": ("05_allreduce_from_scratch", "ar.timing_worker"),
    "05 profile_worker": ("05_allreduce_from_scratch", "ar.profile_worker"),
    "05 library_facts_worker": ("05_allreduce_from_scratch", "ar.library_facts_worker"),
    "14 profile_worker": ("14_ddp_under_compile_and_profiler", "ddp_compile.profile_worker"),
}
CPU_ONLY = "CPU only: the notebook launches it with backend='gloo'"


def audit() -> dict[str, tuple]:
    """name -> (worker, world_size, args), in the order of the verdict table (15's first)."""
    return {
        "15 tensor_parallel_worker": (tp.tensor_parallel_worker, 2, ()),
        "15 _scratch_mlp_counts": (tp_scratch_mlp_counts_worker, 2, ()),
        "15 _dtensor_run": (tp_dtensor_run_worker, 2, ()),
        "04 identity_worker": (coll.identity_worker, 4, ()),
        "04 collectives_worker": (coll.collectives_worker, 4, ()),
        "05 algorithms_vs_library_worker": (
            ar.algorithms_vs_library_worker,
            2,
            (_cases_05(), 0, False),
        ),
        "05 algorithms_vs_library_worker (3 ranks, extras)": (
            ar.algorithms_vs_library_worker,
            3,
            (_cases_05(), 0, True),
        ),
        "06 init_broadcast_worker": (ddp.init_broadcast_worker, 2, ()),
        "06 buffer_sync_worker": (ddp.buffer_sync_worker, 2, (ddp.BUFFER_SCHEDULE,)),
        "06 bucket_worker": (ddp.bucket_worker, 2, (3,)),
        "06 rebuild_worker": (ddp.rebuild_worker, 2, (REBUILD_OPTIONS, 4)),
        "06 equivalence_worker": (ddp.equivalence_worker, 2, ()),
        "06 unused_loop_worker (exercise)": (
            ddp.unused_loop_worker,
            2,
            ({"find_unused_parameters": True},),
        ),
        "07 checks_worker": (syncbn.checks_worker, 2, _syncbn_2()),
        "07 checks_worker (4 ranks)": (syncbn.checks_worker, 4, _syncbn_4()),
        "07 syncbn_cost_worker": (syncbn.syncbn_cost_worker, 2, (20,)),
        "07 native_syncbn_ddp_worker": (
            syncbn.native_syncbn_ddp_worker,
            2,
            (syncbn.make_scenario([3, 5], (3, 4, 4), seed=30),),
        ),
        "08 no_sync_worker": (ddp.no_sync_worker, 2, ()),
        "08 accumulation_worker": (ddp.accumulation_worker, 2, (4,)),
        "08 pitfall_worker": (ddp.pitfall_worker, 2, ()),
        "08 unused_params_worker": (ddp.unused_params_worker, 2, ()),
        "08 amp_worker": (ddp.amp_worker, 2, ()),
        "13 sharding_worker": (sharded.sharding_worker, 2, (["ddp", "zero1", "zero2", "fsdp2"], 3)),
        "14 compile_worker": (ddp_compile.compile_worker, 2, (SETTINGS_14,)),
    }


if __name__ == "__main__":  # pragma: no cover - writes the table's candidate to stdout
    import dryrun_audit  # by name, not __main__: the workers import the adapters by name

    from helpers.dryrun import dry_run

    only = sys.argv[1:]
    table = {}
    for name, (fn, n, args) in dryrun_audit.audit().items():
        if only and not any(o in name for o in only):
            continue
        start = time.time()
        verdict = dry_run(fn, n, args, timeout_s=240)
        table[name] = verdict.text
        print(f"{name}: {verdict.text} ({time.time() - start:.1f} s)", file=sys.stderr)
        print(f"    {verdict.detail[-700:]}", file=sys.stderr)
    print(json.dumps(table, indent=2))
