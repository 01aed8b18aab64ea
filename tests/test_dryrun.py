"""helpers.dryrun: the device dry run of workers' GPU code path, and its audit of every worker.

(a) the machinery: a device-correct toy worker passes, with its device ops counted; a worker
    that breaks no rule but runs nothing on the device is "no device op", not device-checked;
    each device rule broken by a toy worker fails with the worker's name, the rank and the op;
    a torch.cuda call it cannot answer, a CUDA-only kernel and the first call of a compiled
    function are stops ("checked up to"), not passes, even when the worker catches them; what
    only the dry run's stand-ins or the CPU build refuse is a stop, not a failure; a bare
    index is a CUDA device (rank 1's `.to(0)` fails); the worker's own error (a failed assert)
    fails it, not a stop.
(b) the audit: every entry of tests/dryrun_audit.py (what the GPU-designed notebooks and 15
    hand to `launch`, each at one world size; tests/test_dryrun_coverage.py names the launches
    it does not run) has the verdict src/helpers/dryrun_verdicts.json records; a changed verdict, in
    either direction, fails until the table is updated (`python tests/dryrun_audit.py`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import dryrun_audit
import dryrun_workers as toy
import pytest
import torch

from helpers.dryrun import dry_run

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src" / "helpers" / "dryrun_verdicts.json"

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the dry run is for CPU machines (tools/gpu_check.py: GPUs)"
)


NO_DEVICE_OP = "no device op: nothing ran on the device"


def test_a_device_correct_worker_passes_with_its_device_ops_counted() -> None:
    verdict = dry_run(toy.right_worker, 2)
    assert verdict.text == "device-checked", f"expected device-checked, found {verdict}"
    counts = re.findall(r"rank (\d): (\d+) ops on the device, (\d+) collectives", verdict.detail)
    assert [r for r, _, _ in counts] == ["0", "1"], f"expected both ranks' counts: {verdict}"
    assert all(int(ops) > 0 and int(colls) > 0 for _, ops, colls in counts), (
        f"expected device ops and device collectives on every rank, found {counts}"
    )


# no rule broken, but nothing of the worker's own ran on the device (an object collective's
# pickles, or CPU tensors on a gloo group, are not the worker's device ops)
@pytest.mark.parametrize("worker", [toy.all_cpu_worker, toy.gloo_group_worker])
def test_a_worker_with_nothing_on_the_device_is_not_device_checked(worker) -> None:
    verdict = dry_run(worker, 2)
    assert verdict.text == NO_DEVICE_OP, f"expected {NO_DEVICE_OP!r}, found {verdict}"
    assert "rank 1: 0 ops on the device, 0 collectives" in verdict.detail, (
        f"expected the zero counts in the detail, found {verdict.detail!r}"
    )


# (worker, op, words, world size): one rank where the rule does not need a peer
@pytest.mark.parametrize(
    ("worker", "op", "words", "n"),
    [
        (toy.cpu_tensor_to_all_reduce_worker, "c10d.allreduce_", "a cpu tensor (4,) handed", 2),
        (toy.cpu_module_worker, "aten.addmm", "tensors on cpu (4,) and cuda:<rank>", 2),
        (toy.cuda0_worker, "aten.ones", "a tensor on cuda:0 on rank 1", 2),
        # a bare index is cuda:<index>, as on a CUDA build: rank 1's `.to(0)` is on cuda:0
        (toy.int_to0_worker, "aten._to_copy", "a tensor on cuda:0 on rank 1", 2),
        (toy.ddp_module_to0_worker, "aten._to_copy", "a tensor on cuda:0 on rank 1", 2),
        (toy.ddp_cpu_module_worker, "c10d.", "a cpu tensor", 2),
        (toy.cpu_comm_hook_worker, "c10d.allreduce_", "a cpu tensor (36,) handed", 2),
        (toy.caught_breach_worker, "c10d.allreduce_", "a cpu tensor (4,) handed", 2),
        (toy.funcol_cpu_worker, "_c10d_functional.all_reduce", "a cpu tensor (4,) handed", 2),
        (toy.cpu_scalar_index_worker, "aten.index_select", "a 0-dim cpu tensor and cuda:", 2),
        (toy.cpu_values_worker, "aten.index_put_", "tensors on cpu (2,) and cuda:<rank>", 2),
        # DTensor dispatches with the mode off the stack: its locals are checked on entry
        (toy.dtensor_cpu_mesh_worker, "aten.mm", "a DTensor whose local tensor is on cpu", 2),
        (toy.dtensor_alltoall_cpu_worker, "_dtensor.shard_dim_alltoall", "a cpu tensor (2, 4)", 1),
        (toy.numpy_on_device_worker, "Tensor.numpy", "a tensor on cuda:0 to numpy", 1),
        # a group made without backend="gloo" is NCCL's under launch: no exemption
        (toy.plain_group_cpu_worker, "c10d.allreduce_", "a cpu tensor (4,) handed", 1),
        (toy.plain_group_funcol_cpu_worker, "_c10d_functional.all_reduce", "a cpu tensor (4,)", 1),
    ],
)
def test_each_broken_rule_fails_naming_worker_rank_and_op(worker, op, words, n) -> None:
    verdict = dry_run(worker, n)
    assert verdict.kind == "fails", f"{worker.__name__}: expected a failure, found {verdict}"
    assert verdict.what.startswith(op) and words in verdict.what, (
        f"{worker.__name__}: expected op {op} and {words!r}, found {verdict.what!r}"
    )
    assert f"dryrun_workers.{worker.__name__}" in verdict.detail, (
        f"the detail should name the worker, found {verdict.detail!r}"
    )
    # the line that broke the rule: the worker's own, or its comm hook's (called from backward)
    assert re.search(r"rank \d, tests/dryrun_workers.py:\d+ in \w+", verdict.detail), (
        f"the detail should give the rank and the worker's line, found {verdict.detail!r}"
    )


def test_what_the_dry_run_answers_is_no_stop() -> None:
    # Tensor.cuda(torch.device / str), torch.cuda.manual_seed, get_rng_state: answered
    verdict = dry_run(toy.answered_cuda_worker, 1)
    assert verdict.text == "device-checked", f"expected device-checked, found {verdict}"


def test_the_checks_see_what_ddps_reducer_sends_from_cpp() -> None:
    verdict = dry_run(toy.reducer_seen_worker, 2)
    assert verdict.text == "device-checked", f"expected the Reducer's all-reduce seen: {verdict}"


def test_an_unanswered_cuda_call_is_a_stop_not_a_pass() -> None:
    # caught by the worker, and followed by a caught CUDA-only kernel: the first stop is kept
    verdict = dry_run(toy.cuda_api_worker, 2)
    assert verdict.kind == "checked up to", f"expected a stop, found {verdict}"
    assert verdict.what.startswith("cuda_api_worker (AttributeError"), (
        f"the stop should name the function and the error, found {verdict.what!r}"
    )


def test_a_caught_kernel_stop_is_still_a_stop() -> None:
    # a CUDA-only kernel (no CPU twin) whose NotImplementedError the worker catches
    verdict = dry_run(toy.caught_kernel_worker, 1)
    expected = (
        "checked up to caught_kernel_worker (NotImplementedError: Could not run "
        "'aten::batch_norm_stats' with arguments from the 'CPU' backend)"
    )
    assert verdict.text == expected, f"expected {expected!r}, found {verdict}"


# right on a GPU, refused here by the dry run's stand-ins or the CPU build: stops, not "fails"
@pytest.mark.parametrize(
    ("worker", "why"),
    [
        (toy.event_timing_worker, "torch.cuda.Event.elapsed_time: CUDA timing not answered"),
        (toy.cuda_generator_worker, "RuntimeError: Cannot get CUDA generator without ATen_cuda"),
        (toy.stand_in_attribute_worker, "AttributeError: '_Stream' object has no attribute"),
    ],
)
def test_what_only_the_dry_run_refuses_is_a_stop_not_a_failure(worker, why) -> None:
    verdict = dry_run(worker, 1)
    assert verdict.kind == "checked up to", f"{worker.__name__}: expected a stop, found {verdict}"
    assert verdict.what.startswith(f"{worker.__name__} (") and why in verdict.what, (
        f"{worker.__name__}: expected the function and {why!r}, found {verdict.what!r}"
    )


def test_the_workers_own_error_fails_it_with_its_line() -> None:
    # not a stop: the GPU path raises it too
    verdict = dry_run(toy.assert_worker, 1)
    expected = "fails: AssertionError: a value check failed"
    assert verdict.text == expected, f"expected {expected!r}, found {verdict}"
    assert re.search(r"\[rank 0, tests/dryrun_workers.py:\d+ in assert_worker\]", verdict.detail), (
        f"the detail should give the rank and the worker's line, found {verdict.detail!r}"
    )


def test_a_compiled_call_is_a_stop_not_silent_eager() -> None:
    # Dynamo skips every frame while a dispatch mode is on the stack: the compiled function
    # would run eagerly, unchecked as compiled code, so the first frame it is asked for stops
    verdict = dry_run(toy.compiled_worker, 2)
    expected = (
        "checked up to compiled_worker "
        "(torch.compile: Dynamo does not compile under the dry run's dispatch mode)"
    )
    assert verdict.text == expected, f"expected {expected!r}, found {verdict}"
    assert "_double" in verdict.detail, f"the detail should name the frame: {verdict.detail!r}"


def _table() -> dict[str, str]:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def test_the_table_lists_every_audited_worker() -> None:
    expected = list(dryrun_audit.audit()) + list(dryrun_audit.GLOO_ONLY)
    assert sorted(_table()) == sorted(expected), (
        f"{TABLE.name}: expected the workers {sorted(expected)}, found {sorted(_table())}"
    )


@pytest.mark.parametrize("name", list(dryrun_audit.GLOO_ONLY))
def test_gloo_only_workers_are_launched_with_gloo(name: str) -> None:
    notebook, call = dryrun_audit.GLOO_ONLY[name]
    text = "".join(
        "".join(c["source"])
        for c in json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    )
    calls = re.findall(rf"launch\(\s*{re.escape(call)},[^\n]*(?:\n[^\n]*\))?", text)
    assert calls and all('backend="gloo"' in c for c in calls), (
        f'{notebook}: expected every launch({call}, ...) with backend="gloo", found {calls}'
    )
    assert _table()[name] == dryrun_audit.CPU_ONLY, f"{name}: found {_table()[name]!r}"


@pytest.mark.parametrize("name", list(dryrun_audit.audit()))
def test_audited_worker_has_its_recorded_verdict(name: str) -> None:
    fn, world_size, args = dryrun_audit.audit()[name]
    verdict = dry_run(fn, world_size, args, timeout_s=240)
    recorded = _table().get(name)
    assert verdict.text == recorded, (
        f"{name}: the dry run's verdict changed: expected (the table) {recorded!r}, found "
        f"{verdict.text!r}; fix the worker or update {TABLE.name}.\n{verdict.detail[-2000:]}"
    )
