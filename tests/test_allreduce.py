"""Tests of helpers.allreduce: the ring and pipelined-ring simulations, the cost formulas, and the
algorithms (naive, master, ring, pipelined ring) against `dist.all_reduce` on real gloo process
groups (one launch per world size)."""

from __future__ import annotations

import ast
import functools
import json
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from helpers import allreduce
from helpers.allreduce import (
    ALGORITHMS,
    algorithms_vs_library_worker,
    alpha_beta_time,
    busbw_gbps,
    chunk_bounds,
    expected_p2p,
    library_facts_worker,
    pipelined_ring_allreduce,
    pipelined_ring_text,
    profile_worker,
    resolve_algorithm,
    ring_schedule,
    ring_step_text,
    ring_step_viewer,
    simulate_pipelined_ring,
    simulate_ring,
    summarize_vs_library,
    timing_worker,
    unchecked_mismatch_worker,
)
from helpers.launch import LaunchTimeout, WorkerError, launch
from helpers.pictures import ring_svg
from helpers.viewers import STATE_MIME, WIDGET_VIEW_MIME, esm

DTYPE_OPS = [("float32", "SUM"), ("float32", "AVG"), ("float64", "SUM"), ("int64", "SUM")]
ELEMENT_SIZE = {"float32": 4, "float64": 8, "int64": 8}
# the default segment count (4), one segment (the plain ring's schedule), an odd count, and
# receives posted with their sends (what NCCL gets) instead of a step ahead (gloo's default)
NAMES = ["naive", "master", "ring", "pipelined", "pipelined:1", "pipelined:3", "pipelined:3:paired"]


def _numels(world_size: int) -> list[int]:
    # empty, smaller than N (and than N x segments), not a multiple of N, a multiple of N, odd
    return sorted({0, 1, world_size + 1, 4 * world_size, 1001})


def _cases(world_size: int) -> list[tuple[str, int, str, str]]:
    return [
        (algorithm, numel, dtype, op)
        for algorithm in NAMES
        for numel in _numels(world_size)
        for dtype, op in DTYPE_OPS
    ]


@functools.cache
def _run(world_size: int) -> list[dict]:
    """One launch per world size runs every case and the failure modes (launches are slow)."""
    cases = _cases(world_size)
    return launch(algorithms_vs_library_worker, world_size, (cases, 0, True), timeout_s=300)


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
    viewer = ring_step_viewer(sim)  # every step's picture and text travel with the widget
    assert [s["text"] for s in viewer.steps] == [ring_step_text(sim, s) for s in range(5)]
    assert [s["svg"] for s in viewer.steps] == [ring_svg(sim.steps, s) for s in range(5)]
    assert [s["step"] for s in viewer.steps] == list(range(5)) and viewer.step == 0
    data, _ = viewer._repr_mimebundle_()
    assert data["text/plain"] == first  # the text twin: step 0
    model_id = data[WIDGET_VIEW_MIME]["model_id"]
    embedded = data[STATE_MIME]["state"][model_id]["state"]
    assert embedded["steps"] == viewer.steps and viewer._esm == esm("ring")
    assert json.loads(json.dumps(data[STATE_MIME])) == data[STATE_MIME]  # plain JSON


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
    summary = summarize_vs_library(results)
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
            else:  # the ring, pipelined or not: the same bytes
                b = [len(c) * size for c in torch.tensor_split(torch.arange(numel), n)]
                sent = 2 * nbytes - b[(rank + 1) % n] - b[(rank + 2) % n] if moved else 0
                received = 2 * nbytes - b[rank] - b[(rank + 1) % n] if moved else 0
                steps = 2 * (n - 1) if moved else 0
            got = (case["bytes_sent"], case["bytes_received"], case["steps"])
            assert got == (sent, received, steps), (rank, case)
            if case["algorithm"].startswith("pipelined") and moved:
                # one message per segment and step each way (empty segments counted, not sent)
                parts = case["algorithm"].split(":")
                messages = 2 * (n - 1) * int(parts[1] if len(parts) > 1 else 4)
                assert case["messages_sent"] == case["messages_received"] == messages, case
            assert expected_p2p(case["algorithm"], numel, size, n, rank) == {
                "bytes_sent": sent,
                "bytes_received": received,
                "steps": steps,
            }
            if case["algorithm"] == "ring" and moved and numel % n == 0:
                assert sent == 2 * (n - 1) * nbytes // n


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_pipelined_equals_ring_bit_for_bit(world_size: int) -> None:
    """Same inputs, same additions in the same order: the same bytes on every rank."""
    for rank_result in _run(world_size):
        digests: dict[tuple, dict[str, str]] = {}
        for c in rank_result["cases"]:
            key = (c["numel"], c["dtype"], c["op"])
            digests.setdefault(key, {})[c["algorithm"]] = c["digest"]
        for key, by_name in digests.items():
            ring = by_name["ring"]
            assert all(by_name[k] == ring for k in NAMES if k.startswith("pipelined")), (
                key,
                by_name,
            )


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
        segments = rank_result["segments_mismatch"]
        if world_size == 1:
            assert segments is None
        else:
            assert "rank 0: shape (5,) float32 SUM in 2 segments" in segments
            assert f"rank {world_size - 1}: shape (5,) float32 SUM in 3 segments" in segments


def test_timing_worker_runs() -> None:
    names = ("builtin", "ring", "naive", "pipelined:2")
    results = launch(timing_worker, 2, ([4096, 65536], names, 3), timeout_s=300)
    assert results[0]["medians"] == results[1]["medians"]
    medians = results[0]["medians"]
    assert set(medians) == set(names)
    assert all(len(v) == 2 and min(v) > 0 for v in medians.values())
    assert all(len(s) == 3 for v in results[0]["samples"].values() for s in v)


def test_profile_worker_runs() -> None:
    results = launch(profile_worker, 2, (1 << 16, ("pipelined:1", "pipelined:4"), 2), timeout_s=300)
    for per_rank in results:
        assert set(per_rank) == {"pipelined:1", "pipelined:4"}
        for secs in per_rank.values():
            assert set(secs) == {"wait_s", "add_s", "post_s", "total_s"}
            # medians per part: each part (not their sum) fits inside the median call
            assert secs["total_s"] >= max(secs["wait_s"], secs["add_s"], secs["post_s"])
            assert secs["total_s"] > 0 and min(secs.values()) >= 0


def test_unchecked_mismatch_aborts_gloo() -> None:
    """What check_agreement prevents: gloo aborts the process that receives too many bytes."""
    with pytest.raises(WorkerError, match="SIGABRT"):
        launch(unchecked_mismatch_worker, 2, (), timeout_s=120)


def test_library_facts_on_gloo() -> None:
    facts = launch(library_facts_worker, 2, (), timeout_s=120)
    for rank_facts in facts:
        assert rank_facts["backend"] == "gloo"
        assert rank_facts["avg_float32"] == [1.5, 1.5, 1.5]  # (1 + 2) / 2
        assert "can't be cast" in rank_facts["avg_int64_error"]
        assert rank_facts["reduce_scatter"] == [2.0, 2.0]


def test_p2pop_accepts_only_the_genuine_isend() -> None:
    """Why count_p2p wraps p2p_post instead of patching dist.isend."""

    def patched_isend(*args, **kwargs):
        return dist.isend(*args, **kwargs)

    with pytest.raises(ValueError, match="Invalid ``op``"):
        dist.P2POp(patched_isend, torch.ones(1), 0)


def test_refuses_without_process_group() -> None:
    for fn in ALGORITHMS.values():
        with pytest.raises(RuntimeError, match="no process group"):
            fn(torch.ones(3))
        with pytest.raises(TypeError, match="expected a torch.Tensor"):
            fn([1.0, 2.0])


@pytest.mark.parametrize("segments", [0, -1, 1.5, True, "4"])
def test_pipelined_rejects_bad_segments(segments) -> None:
    with pytest.raises(ValueError, match="segments must be an int >= 1"):
        pipelined_ring_allreduce(torch.ones(3), segments=segments)


def test_resolve_algorithm() -> None:
    assert resolve_algorithm("ring") is ALGORITHMS["ring"]
    assert resolve_algorithm("pipelined:3").keywords == {"segments": 3}
    paired = resolve_algorithm("pipelined:2:paired").keywords
    assert paired == {"segments": 2, "receive_ahead": False}
    for bad in ("tree", "ring:3", "pipelined:2:early"):
        with pytest.raises(ValueError, match="unknown algorithm"):
            resolve_algorithm(bad)
    assert expected_p2p("pipelined:3", 1001, 4, 3, 1) == expected_p2p("ring", 1001, 4, 3, 1)


@pytest.mark.parametrize("world_size", [2, 3, 4, 5])
def test_pipeline_model(world_size: int) -> None:
    n, send, add = world_size, 6.0, 3.0
    plain = simulate_pipelined_ring(n, 1, send, add)
    # one segment is the step-by-step ring: every reduce-scatter step is a send then an add
    assert max(e.end for e in plain) == (n - 1) * (send + add) + (n - 1) * send
    for k in (2, 3, 6):
        events = simulate_pipelined_ring(n, k, send, add)
        end = max(e.end for e in events)
        # the link never waits once adds are shorter than sends: only the transfers remain
        assert end == 2 * (n - 1) * send, (k, end)
        for e in events:  # every event names the chunk ring_schedule names
            _, send_i, recv_i = ring_schedule(e.rank, n, e.step)
            assert e.chunk == (send_i if e.kind == "send" else recv_i)
        kinds = [e.kind for e in events if e.rank == 0]
        assert kinds.count("send") == kinds.count("recv") == 2 * (n - 1) * k
        assert kinds.count("add") == (n - 1) * k
    # adds longer than sends: the adder is the bottleneck, segments still help
    slow = [max(e.end for e in simulate_pipelined_ring(n, k, 2.0, 4.0)) for k in (1, 2, 4)]
    assert slow == sorted(slow, reverse=True) and slow[0] > slow[-1]
    with pytest.raises(ValueError, match="need world_size >= 2"):
        simulate_pipelined_ring(1, 2)


def test_pipelined_ring_text() -> None:
    text = pipelined_ring_text(simulate_pipelined_ring(3, 1))
    lines = text.splitlines()
    assert len(lines) == 1 + 3 * 3 and lines[0].split() == ["0", "1", "2"]
    assert lines[1] == "r0 send  000000...222222...111111000000"
    assert lines[3] == "r0 add   ......222......111............"
    piped = pipelined_ring_text(simulate_pipelined_ring(3, 3)).splitlines()
    assert piped[1] == "r0 send  000000222222111111000000"  # the link never idles


# --------------------------------------------------------------------------- notebook 05's copy

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "05_allreduce_from_scratch.ipynb"
TRIES_CELL, COPY_CELL, CHECK_CELL = "a05r0001", "a05r0002", "17"  # what to try, the copy, sec. 2


def _cell(cell_id: str) -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c["source"] for c in cells if c["id"] == cell_id))


def _tries_text() -> str:
    return " ".join(_cell(TRIES_CELL).split())  # the markdown, its line breaks as spaces


def _run_copy(*edits: tuple[str, str]) -> dict:
    """Run the notebook's edit-and-rerun cell, with `edits` made to it, as IPython runs a cell
    (under __main__, its source in linecache), after what it uses from the cells before it."""
    import linecache

    code = _cell(COPY_CELL)
    for old, new in edits:
        assert code.count(old) == 1, f"expected {old!r} once in cell {COPY_CELL}, found:\n{code}"
        code = code.replace(old, new)
    inputs = {  # section 2's inputs, read from its check cell
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(_cell(CHECK_CELL)).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in INPUT_NAMES
    }
    assert sorted(inputs) == sorted(INPUT_NAMES), f"cell {CHECK_CELL}: found only {inputs}"
    cell = "<ipython-input-25-0a05e0d1c0de>"
    linecache.cache[cell] = (len(code), None, code.splitlines(keepends=True), cell)
    namespace = {"__name__": "__main__", "dist": dist, "ar": allreduce, "launch": launch, **inputs}
    exec(compile(code, cell, "exec"), namespace)
    return namespace


INPUT_NAMES = ("NUMELS", "DTYPE_OPS")
FORGET_ADD = ("chunks[recv_i].add_(buf)", "chunks[recv_i].copy_(buf)")
STOP_EARLY = ("range(2 * (world_size - 1))", "range(world_size - 1)")
REVERSE = ("right, left = (rank + 1)", "left, right = (rank + 1)")


@pytest.mark.parametrize(
    ("edit", "failed"),
    [
        (FORGET_ADD, ["all_close", "ints_exact", "max_abs_diff_below_1e-5"]),
        (STOP_EARLY, ["all_close", "ints_exact", "ranks_identical", "max_abs_diff_below_1e-5"]),
    ],
    ids=["forget the addition", "stop after the reduce-scatter"],
)
def test_a_broken_copy_fails_the_check_as_notebook_05_says(edit, failed: list[str]) -> None:
    message = f"N = 2: expected every check True, found False: {failed}"
    with pytest.raises(AssertionError) as err:
        _run_copy(edit)
    assert str(err.value) == message, f"expected {message!r}, found {str(err.value)!r}"
    text = _tries_text()
    assert f"`{edit[1]}`" in text and str(failed) in text, (
        f"cell {TRIES_CELL} should name the edit {edit[1]!r} and the checks {failed}: {text}"
    )
    if edit is FORGET_ADD:
        assert f"`{message}`" in text, f"cell {TRIES_CELL} should quote {message!r}: {text}"


def test_the_unbroken_copy_passes_and_a_reversed_ring_passes_only_at_two_ranks() -> None:
    namespace = _run_copy()  # as committed: it passes at N = 2, 3 and 4 (as nbval also checks)
    assert sorted(namespace["yours"]) == [2, 3, 4], f"found {sorted(namespace['yours'])}"
    _run_copy(REVERSE, ("for n in (2, 3, 4)", "for n in (2,)"))  # both neighbours: one rank
    assert "timeout_s=60" in _cell(COPY_CELL) and "after the launch's 60 s" in _tries_text()
    with pytest.raises(LaunchTimeout, match=r"ranks \[0, 1, 2\] did not finish within the timeout"):
        _run_copy(REVERSE, ("timeout_s=60", "timeout_s=20"))  # N = 3 waits; shorter here
    assert "swap `right` and `left`" in _tries_text(), f"cell {TRIES_CELL}: {_tries_text()}"


@pytest.mark.parametrize("numel", [1200, 1001], ids=["three equal chunks", "unequal chunks"])
def test_a_reversed_ring_at_three_ranks_fails_by_the_sizes_of_its_chunks(numel: int) -> None:
    """The tries' third edit with one size in `mine`: equal chunks finish with wrong results,
    unequal ones make gloo abort a rank; the 1-element case hangs (the test above) because two of
    its three chunks are empty and an empty chunk is never posted."""
    sizes = [b - a for a, b in allreduce.chunk_bounds(1, 3)]
    assert sizes == [1, 0, 0], f"1 element in 3 chunks: expected sizes [1, 0, 0], found {sizes}"
    edits = (
        REVERSE,
        ("for n in NUMELS", f"for n in [{numel}]"),
        ("for n in (2, 3, 4)", "for n in (3,)"),
    )
    text = _tries_text()
    assert f"`[{numel}]` for `NUMELS`" in text or f"with `[{numel}]`" in text, (
        f"cell {TRIES_CELL} should name the size {numel}: {text}"
    )
    if numel == 1200:
        failed = ["all_close", "ints_exact", "ranks_identical", "max_abs_diff_below_1e-5"]
        with pytest.raises(AssertionError) as err:
            _run_copy(*edits)
        message = f"N = 3: expected every check True, found False: {failed}"
        assert str(err.value) == message, f"expected {message!r}, found {str(err.value)!r}"
        assert f"`N = 3: ... {failed}`" in text, f"cell {TRIES_CELL} should quote {failed}: {text}"
    else:
        with pytest.raises(WorkerError, match="killed by SIGABRT"):
            _run_copy(*edits)
        assert "gloo kills it with SIGABRT" in text, f"cell {TRIES_CELL}: {text}"
