"""helpers.ddp_compile: DDPOptimizer's subgraph counts for two bucket caps, the profiler's
all-reduce events and their placement with and without no_sync, and the Chrome trace file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import ddp_compile
from helpers.launch import launch


def test_interval_union_and_overlap() -> None:
    assert ddp_compile.interval_union([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert ddp_compile.overlap_us([(0, 10)], [(2, 3), (5, 7), (9, 12)]) == 4
    assert ddp_compile.overlap_us([(0, 1)], [(2, 3)]) == 0
    assert ddp_compile.overlap_us([], [(0, 1)]) == 0
    compute = "autograd::engine::evaluate_function: AddmmBackward0"
    store = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    assert ddp_compile.is_gradient_compute(compute) and not ddp_compile.is_gradient_compute(store)


def test_model_is_six_mib_and_not_skipped_by_dynamo() -> None:
    import torch._dynamo.trace_rules as trace_rules

    model = ddp_compile.make_model()
    assert abs(ddp_compile.param_mib(model) - 6.012) < 1e-3
    assert not trace_rules.check(ddp_compile.Net.forward)
    assert trace_rules.check(torch.nn.Sequential.forward)


@pytest.fixture(scope="module")
def compiled() -> list[list[dict]]:
    settings = [
        {"bucket_cap_mb": 1},
        {"bucket_cap_mb": None},
        {"bucket_cap_mb": 1, "model": "sequential"},
    ]
    return launch(ddp_compile.compile_worker, 2, args=(settings,), timeout_s=300)


def test_subgraphs_follow_bucket_cap(compiled) -> None:
    for rank, per_rank in enumerate(compiled):
        got = [(r["subgraphs"], len(r["graphs"]), r["ddp_buckets"]) for r in per_rank[:2]]
        assert got == [(6, 6, 6), (2, 2, 2)], f"rank {rank}: (subgraphs, graphs, DDP buckets) {got}"
        sizes = [r["split"]["bucket_bytes"] for r in per_rank[:2]]
        assert sizes[0] == [2**20 + 2048] * 6, f"rank {rank}: cap 1 MiB bucket bytes {sizes[0]}"
        assert sizes[1][-1] == 2**20 + 2048, f"rank {rank}: default cap, first bucket {sizes[1]}"
        diffs = [r["grad_max_diff"] for r in per_rank]
        assert max(diffs) <= 1e-6, f"rank {rank}: compiled vs eager gradients differ by {diffs}"


def test_an_nn_sequential_under_ddp_compiles_nothing(compiled) -> None:
    for rank, per_rank in enumerate(compiled):
        seq = per_rank[2]
        assert seq["graphs"] == [] and seq["ddp_optimizer_calls"] == 0, f"rank {rank}: {seq}"


def test_only_two_optimize_ddp_modes_are_acted_on() -> None:
    # the same on 2.13.0, 2.14.1 and 2.15.0: any other mode behaves as "no_optimization"
    assert ddp_compile.optimize_ddp_mode_readers() == {
        "torch/_dynamo/convert_frame.py": ["ddp_optimizer"],
        "torch/nn/parallel/distributed.py": ["python_reducer"],
    }
    assert ddp_compile.optimize_ddp_mode_calls() == {
        "torch/_dynamo/convert_frame.py": 1,
        "torch/nn/parallel/distributed.py": 1,
    }


def test_first_bucket_cap_below_one_mib_is_refused() -> None:
    from torch._dynamo.backends.distributed import DDPOptimizer

    with pytest.raises(AssertionError, match="First bucket should be smaller"):
        DDPOptimizer(bucket_bytes_cap=2**19, backend_compile_fn=lambda gm, inputs: gm)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    trace_dir = tmp_path_factory.mktemp("ddp-trace")
    return trace_dir, launch(ddp_compile.profile_worker, 2, args=(str(trace_dir),), timeout_s=300)


def test_allreduces_only_in_synced_backwards(profiled) -> None:
    _, results = profiled
    for rank, result in enumerate(results):
        assert result["warmup_buckets"] == [1, 3], f"rank {rank}: {result['warmup_buckets']}"
        assert result["comm_hook"] is None, f"rank {rank}: profiled DDP has {result['comm_hook']}"
        stats = ddp_compile.analyze_profile(result)
        for phase, n in (("sync", 24), ("no_sync", 6)):
            s = stats[phase]
            assert s["backward_calls"] == 8, f"rank {rank} {phase}: {s}"
            assert s["allreduces"] == n == s["in_synced_backward"], f"rank {rank} {phase}: {s}"
            assert s["in_skipped_backward"] == 0, f"rank {rank} {phase}: {s}"
            assert 0.0 <= s["overlap_fraction"] <= 1.0, f"rank {rank} {phase}: {s}"
            # 3 buckets: two launched on backward's thread before its last computation begins
            early = [2] * (8 if phase == "sync" else 2)
            assert s["launched_early"] == early, f"rank {rank} {phase}: {s['launched_early']}"


def test_timeline_rows(profiled) -> None:
    _, results = profiled
    for phase in ("sync", "no_sync"):
        bars = ddp_compile.timeline(results[0], phase)
        assert sorted(bars) == ["all-reduce", "backward", "forward"]
        assert len(bars["forward"]) == 4, f"{phase}: {len(bars['forward'])} forwards in one step"
        assert all(w >= 0 for spans in bars.values() for _, w in spans)


def test_trace_files_are_chrome_json(profiled) -> None:
    trace_dir, _ = profiled
    for rank in range(2):
        path = trace_dir / f"rank{rank}.json"
        with open(path) as f:
            assert isinstance(json.load(f)["traceEvents"], list)
        names = ddp_compile.trace_names(path)
        assert names["gloo:all_reduce"] == 30, f"rank {rank}: {names['gloo:all_reduce']}"
        assert names["c10d::allreduce_"] == 30, f"rank {rank}: {names['c10d::allreduce_']}"
        labels = sum(v for k, v in names.items() if k.startswith("backward:"))
        assert labels == 16, f"rank {rank}: {labels} labelled backward spans"
