"""helpers.dimensions: one launch measures one step of every strategy (data, ZeRO-2, FSDP2,
tensor, sequence, pipeline, context, expert) with its notebook's helper, and every measured cell
equals the formula; the counting mode sees every c10d operator."""

from __future__ import annotations

import pytest

from helpers import dimensions as dm
from helpers import expert_parallel as ep
from helpers.launch import launch


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"N{n}")
def measured(request: pytest.FixtureRequest) -> tuple[int, list[dict]]:
    n = request.param
    return n, list(launch(dm.dimensions_worker, n, args=([{}],), timeout_s=300))


def test_every_row_matches_its_formula(measured) -> None:
    n, per_rank = measured
    rows = dm.dimension_table(per_rank)
    assert [r["strategy"] for r in rows] == list(dm.STRATEGIES)
    bad = [(r["strategy"], r["message"], r["formula"], r["sent_per_rank"], r["sent_formula"])
           for r in rows if not r["matches"]]  # fmt: skip
    assert not bad, f"N={n}: expected every row to match its formula, found {bad}"
    text = dm.table_text(rows)
    assert all(s in text for s in dm.STRATEGIES), text


def test_collectives_per_strategy(measured) -> None:
    n, per_rank = measured
    rows = {r["strategy"]: r for r in dm.dimension_table(per_rank)}
    assert rows["data"]["collectives"] == {"all_reduce": 1}  # one bucket
    assert rows["zero"]["collectives"] == {"all_gather": 6, "reduce_scatter": 6}  # per parameter
    assert rows["fsdp"]["collectives"] == {"all_gather": 6, "reduce_scatter": 3}  # per Linear
    assert rows["tensor"]["collectives"] == {"all_reduce": 4}
    assert rows["sequence"]["collectives"] == {"all_gather": 6, "reduce_scatter": 4}
    assert rows["context"]["collectives"] == {"recv": 2 * (n - 1), "send": 2 * (n - 1)}
    assert rows["expert"]["collectives"] == {"all_to_all": 5}  # counts, 2 forward, 2 backward


def test_ring_allreduce_sends_what_the_formula_says(measured) -> None:
    n, per_rank = measured
    psi = per_rank[0]["data"]["psi"]
    for rank, r in enumerate(per_rank):
        assert r["data"]["ring_sent"] == r["data"]["ring_expected"], (rank, r["data"])
        assert abs(r["data"]["ring_sent"] - 2 * (n - 1) / n * 4 * psi) <= 2 * (n - 1) * 4


def test_counting_mode_agrees_with_the_expert_log(measured) -> None:
    _, per_rank = measured
    for r in per_rank:
        assert r["expert"]["ops"]["all_to_all"]["bytes"] == r["expert"]["logged"], r["expert"]
        runs = r["expert_runs"]
        assert len(runs) == 1 and runs[0]["send_splits"] == r["expert"]["send_splits"]
    assert max(ep.max_errors([r["expert_runs"][0] for r in per_rank]).values()) <= 2e-5


def test_step_ops_takes_the_first_of_each_kind() -> None:
    ops = [
        {"op": "broadcast", "bytes": 9},
        {"op": "all_gather", "bytes": 1},
        {"op": "reduce_scatter", "bytes": 2},
        {"op": "all_gather", "bytes": 3},
        {"op": "all_gather", "bytes": 4},
    ]
    counts = {"forward": {"all_gather": 1}, "backward": {"all_gather": 1, "reduce_scatter": 1}}
    assert dm.step_ops(ops, counts) == ops[1:4]


def test_each_part_is_timed(measured) -> None:
    _, per_rank = measured
    parts = set(per_rank[0]["seconds"])
    assert parts == {*dm.STRATEGIES, "expert_runs"}, parts
    assert all(t > 0 for t in per_rank[0]["seconds"].values()), per_rank[0]["seconds"]
