"""Tests of helpers.allreduce: the ring simulation, the cost formulas, and the three algorithms
against `dist.all_reduce` on real gloo process groups (one launch per world size)."""

from __future__ import annotations

import functools
import html
import random

import pytest
import torch

from helpers.allreduce import (
    ALGORITHMS,
    alpha_beta_time,
    busbw_gbps,
    chunk_bounds,
    compare_worker,
    expected_p2p,
    ring_schedule,
    ring_step_text,
    ring_step_viewer,
    simulate_ring,
    summarize_compare,
    timing_worker,
)
from helpers.launch import launch

DTYPE_OPS = [("float32", "SUM"), ("float32", "AVG"), ("float64", "SUM"), ("int64", "SUM")]
ELEMENT_SIZE = {"float32": 4, "float64": 8, "int64": 8}


def _numels(world_size: int) -> list[int]:
    # empty, smaller than N, not a multiple of N, a multiple of N, a larger odd size
    return sorted({0, 1, world_size + 1, 4 * world_size, 1001})


def _cases(world_size: int) -> list[tuple[str, int, str, str]]:
    return [
        (algorithm, numel, dtype, op)
        for algorithm in ALGORITHMS
        for numel in _numels(world_size)
        for dtype, op in DTYPE_OPS
    ]


@functools.cache
def _run(world_size: int) -> list[dict]:
    """One launch per world size runs every case and the failure modes (launches are slow)."""
    return launch(compare_worker, world_size, (_cases(world_size), 0, True), timeout_s=300)


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize("world_size", range(1, 7))
@pytest.mark.parametrize("numel", [0, 1, 5, 6, 7, 12, 13])
def test_chunk_bounds_match_tensor_split(world_size: int, numel: int) -> None:
    expected = [len(c) for c in torch.tensor_split(torch.arange(numel), world_size)]
    bounds = chunk_bounds(numel, world_size)
    assert [b - a for a, b in bounds] == expected
    assert bounds[0][0] == 0 and bounds[-1][1] == numel


@pytest.mark.parametrize("world_size", range(2, 7))
def test_ring_schedule_visits_every_chunk(world_size: int) -> None:
    n = world_size
    for rank in range(n):
        plan = [ring_schedule(rank, n, s) for s in range(2 * (n - 1))]
        assert [p[0] for p in plan] == ["reduce-scatter"] * (n - 1) + ["all-gather"] * (n - 1)
        # what rank sends at a step is what its right neighbour receives
        right = [ring_schedule((rank + 1) % n, n, s) for s in range(2 * (n - 1))]
        assert [p[1] for p in plan] == [q[2] for q in right]
        # reduce-scatter sends every chunk but (rank+1); all-gather every chunk but (rank+2)
        assert sorted(p[1] for p in plan[: n - 1]) == sorted(set(range(n)) - {(rank + 1) % n})
        assert sorted(p[1] for p in plan[n - 1 :]) == sorted(set(range(n)) - {(rank + 2) % n})
    with pytest.raises(ValueError, match="step must be in"):
        ring_schedule(0, n, 2 * (n - 1))


@pytest.mark.parametrize("world_size", range(1, 7))
@pytest.mark.parametrize("length", [0, 1, 5, 7, 12])
def test_simulation_equals_plain_sum(world_size: int, length: int) -> None:
    rng = random.Random(world_size * 100 + length)
    inputs = [[rng.randint(-50, 50) for _ in range(length)] for _ in range(world_size)]
    total = [sum(col) for col in zip(*inputs, strict=True)] if length else []
    sim = simulate_ring(inputs)
    n = world_size
    assert len(sim.steps) == 2 * (n - 1) + 1
    everyone = frozenset(range(n))
    for rank in range(n):
        assert sim.result(rank) == total
        assert all(owners == everyone for owners in sim.steps[-1].owners[rank])
    # after the reduce-scatter, rank r holds the complete chunk (r + 1) % N
    middle = sim.steps[n - 1]
    for rank in range(n):
        c = (rank + 1) % n
        a, b = sim.bounds[c]
        assert middle.owners[rank][c] == everyone
        assert list(middle.values[rank][c]) == total[a:b]
    for st in sim.steps[1:]:
        assert [(src, dst) for src, dst, _ in st.transfers] == [(r, (r + 1) % n) for r in range(n)]


def test_simulation_rejects_unequal_lengths() -> None:
    with pytest.raises(ValueError, match=r"rank 0: 3, rank 1: 2"):
        simulate_ring([[1, 2, 3], [1, 2]])


def test_ring_step_text_and_viewer() -> None:
    sim = simulate_ring([[10**r] * 4 for r in range(3)])  # chunks of 2, 1, 1 elements
    first, middle, last = (ring_step_text(sim, s) for s in (0, 2, 4))
    assert first.startswith("step 0 of 4: the inputs, cut into 3 chunks")
    assert "reduce-scatter 2 of 2" in middle and "r0 -c2-> r1" in middle
    assert "rank 0  0           0+1+2*" in middle  # rank 0 owns chunk 1 complete
    assert "all-gather 2 of 2" in last
    assert last.count("[111, 111]") == 3 and last.count("0+1+2*") == 9
    with pytest.raises(ValueError, match="step must be in"):
        ring_step_text(sim, 5)
    viewer = ring_step_viewer(sim)
    slider, view = viewer.children
    assert (slider.min, slider.max) == (0, 4) and first in view.value
    slider.value = 4
    assert view.value == "<pre>" + html.escape(last) + "</pre>"


@pytest.mark.parametrize("world_size", range(1, 7))
@pytest.mark.parametrize("numel", [0, 1, 5, 12, 1001])
def test_ring_bytes_formula(world_size: int, numel: int) -> None:
    n, size = world_size, 4
    nbytes = numel * size
    b = [len(c) * size for c in torch.tensor_split(torch.arange(numel), n)]
    sent = [expected_p2p("ring", numel, size, n, r)["bytes_sent"] for r in range(n)]
    received = [expected_p2p("ring", numel, size, n, r)["bytes_received"] for r in range(n)]
    if n == 1 or numel == 0:
        assert sent == received == [0] * n
        return
    # each rank sends every chunk but (r+1) and then every chunk but (r+2)
    assert sent == [2 * nbytes - b[(r + 1) % n] - b[(r + 2) % n] for r in range(n)]
    assert received == [2 * nbytes - b[r] - b[(r + 1) % n] for r in range(n)]
    assert sum(sent) == sum(received) == 2 * (n - 1) * nbytes
    if numel % n == 0:
        assert sent == received == [2 * (n - 1) * nbytes // n] * n
    assert expected_p2p("ring", numel, size, n, 0)["steps"] == 2 * (n - 1)


def test_naive_and_master_formulas() -> None:
    assert expected_p2p("naive", 10, 4, 4, 2) == {
        "bytes_sent": 120,
        "bytes_received": 120,
        "steps": 1,
    }
    assert expected_p2p("master", 10, 4, 4, 0)["bytes_received"] == 120
    assert expected_p2p("master", 10, 4, 4, 3)["bytes_sent"] == 40
    with pytest.raises(ValueError, match="unknown algorithm"):
        expected_p2p("tree", 10, 4, 4, 0)


def test_alpha_beta_model() -> None:
    alpha, beta = 50e-6, 1e-9  # 50 us per message, 1 GB/s
    small, large = 1_000, 100_000_000
    for n in (4, 8, 16):
        assert alpha_beta_time("ring", large, n, alpha, beta) < alpha_beta_time(
            "naive", large, n, alpha, beta
        )
        assert alpha_beta_time("ring", small, n, alpha, beta) > alpha_beta_time(
            "naive", small, n, alpha, beta
        )
        assert alpha_beta_time("master", large, n, alpha, beta) > alpha_beta_time(
            "naive", large, n, alpha, beta
        )
    # the ring's bandwidth term tends to 2 n beta however large N grows
    ring_bw = [alpha_beta_time("ring", large, n, 0.0, beta) for n in (2, 8, 1024)]
    assert ring_bw[0] == pytest.approx(large * beta) and ring_bw[-1] < 2 * large * beta
    assert busbw_gbps(1e9, 1.0, 4) == pytest.approx(1.5)


# --------------------------------------------------------------------------- real process groups


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_algorithms_equal_dist_all_reduce(world_size: int) -> None:
    results = _run(world_size)
    assert results.backend == "gloo"
    summary = summarize_compare(results)
    assert summary == {
        "world_size": world_size,
        "cases": len(_cases(world_size)),
        "all_close": True,
        "ints_exact": True,
        "ranks_identical": True,
        "max_abs_diff_below_1e-5": True,
    }
    for rank_result in results:
        for case in rank_result["cases"]:
            if case["dtype"] == "float64":
                assert case["max_abs_diff"] < 1e-12, case
            if world_size <= 2 and case["dtype"] != "int64":
                assert case["equal"], case  # one addition: no rounding order to differ


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_exact_bytes_and_steps(world_size: int) -> None:
    n = world_size
    for rank, rank_result in enumerate(_run(world_size)):
        for case in rank_result["cases"]:
            numel, size = case["numel"], ELEMENT_SIZE[case["dtype"]]
            nbytes = numel * size
            moved = n > 1 and numel > 0
            if case["algorithm"] == "naive":
                sent = received = (n - 1) * nbytes
                steps = 1 if moved else 0
            elif case["algorithm"] == "master":
                sent = received = (n - 1) * nbytes if rank == 0 else nbytes * moved
                steps = 2 if moved else 0
            else:
                b = [len(c) * size for c in torch.tensor_split(torch.arange(numel), n)]
                sent = 2 * nbytes - b[(rank + 1) % n] - b[(rank + 2) % n] if moved else 0
                received = 2 * nbytes - b[rank] - b[(rank + 1) % n] if moved else 0
                steps = 2 * (n - 1) if moved else 0
            got = (case["bytes_sent"], case["bytes_received"], case["steps"])
            assert got == (sent, received, steps), (rank, case)
            assert expected_p2p(case["algorithm"], numel, size, n, rank) == {
                "bytes_sent": sent,
                "bytes_received": received,
                "steps": steps,
            }
            if case["algorithm"] == "ring" and moved and numel % n == 0:
                assert sent == 2 * (n - 1) * nbytes // n


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_failure_modes_and_layouts(world_size: int) -> None:
    for rank_result in _run(world_size):
        assert all(rank_result["layouts"].values()), rank_result["layouts"]
        for name in ALGORITHMS:
            assert "AVG of a torch.int64 tensor is refused" in rank_result["int_avg"][name]
            message = rank_result["mismatch"][name]
            if world_size == 1:
                assert message is None
                continue
            # every rank raises, naming each rank and shape, before any data moved
            assert "nothing was sent" in message
            for r in range(world_size - 1):
                assert f"rank {r}: shape (5,) float32 SUM" in message
            assert f"rank {world_size - 1}: shape (6,) float32 SUM" in message


def test_timing_worker_runs() -> None:
    results = launch(
        timing_worker, 2, ([4096, 65536], ("builtin", "ring", "naive"), 3), timeout_s=300
    )
    assert results[0]["medians"] == results[1]["medians"]
    medians = results[0]["medians"]
    assert set(medians) == {"builtin", "ring", "naive"}
    assert all(len(v) == 2 and min(v) > 0 for v in medians.values())
    assert all(len(s) == 3 for v in results[0]["samples"].values() for s in v)


def test_refuses_without_process_group() -> None:
    with pytest.raises(RuntimeError, match="no process group"):
        ALGORITHMS["ring"](torch.ones(3))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        ALGORITHMS["naive"]([1.0, 2.0])
