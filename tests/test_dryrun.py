"""helpers.dryrun: the device dry run of workers' GPU code path, and its audit of every worker.

(a) the machinery: a device-correct toy worker passes; each device rule broken by a toy worker
    fails with the worker's name, the rank and the op; a torch.cuda call it cannot answer is a
    stop ("checked up to"), not a pass.
(b) the audit: every worker of tests/dryrun_audit.py (what the GPU-designed notebooks hand to
    `launch`) has the verdict src/helpers/dryrun_verdicts.json records; a changed verdict, in
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


@pytest.mark.parametrize(
    "worker",
    [
        toy.right_worker,
        toy.object_collective_worker,
        toy.gloo_group_worker,
        toy.funcol_gloo_group_worker,
    ],
)
def test_a_device_correct_worker_passes(worker) -> None:
    verdict = dry_run(worker, 2)
    assert verdict.text == "device-checked", f"expected device-checked, found {verdict}"


@pytest.mark.parametrize(
    ("worker", "op", "words"),
    [
        (toy.cpu_tensor_to_all_reduce_worker, "c10d.allreduce_", "a cpu tensor (4,) handed"),
        (toy.cpu_module_worker, "aten.addmm", "tensors on cpu (4,) and cuda:<rank>"),
        (toy.cuda0_worker, "aten.ones", "a tensor on cuda:0 on rank 1"),
        (toy.ddp_cpu_module_worker, "c10d.", "a cpu tensor"),
        (toy.cpu_comm_hook_worker, "c10d.allreduce_", "a cpu tensor (36,) handed"),
        (toy.caught_breach_worker, "c10d.allreduce_", "a cpu tensor (4,) handed"),
        (toy.funcol_cpu_worker, "_c10d_functional.all_reduce", "a cpu tensor (4,) handed"),
    ],
)
def test_each_broken_rule_fails_naming_worker_rank_and_op(worker, op: str, words: str) -> None:
    verdict = dry_run(worker, 2)
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


def test_the_checks_see_what_ddps_reducer_sends_from_cpp() -> None:
    verdict = dry_run(toy.reducer_seen_worker, 2)
    assert verdict.text == "device-checked", f"expected the Reducer's all-reduce seen: {verdict}"


def test_an_unanswered_cuda_call_is_a_stop_not_a_pass() -> None:
    verdict = dry_run(toy.cuda_api_worker, 2)
    assert verdict.kind == "checked up to", f"expected a stop, found {verdict}"
    assert verdict.what.startswith("cuda_api_worker (AttributeError"), (
        f"the stop should name the function and the error, found {verdict.what!r}"
    )


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
