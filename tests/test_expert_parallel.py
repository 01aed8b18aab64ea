"""helpers.expert_parallel: the mixture of experts over all_to_all_single equals the one-process
layer (output and every gradient), with uneven and zero split sizes, an expert that gets no
token, a capacity that drops the same assignments, the bytes sent equal to the routing formula,
and clear errors for a bad configuration."""

from __future__ import annotations

import pytest
import torch

from helpers import expert_parallel as ep
from helpers.launch import WorkerError, launch

RUNS = [
    {},  # top-2, no capacity
    {"capacity_factor": 1.0, "skew": 2.0},  # expert 0 preferred: the capacity drops tokens
    {"k": 1},
    {"skew": -30.0},  # expert 0 gets no token at all: rank 0 (N = 4) receives zero rows
]
TOL = 2e-5  # float32; the one-process layer sums in another order


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"N{n}")
def results(request: pytest.FixtureRequest) -> tuple[int, list[list[dict]]]:
    n = request.param
    per_rank = launch(ep.expert_parallel_worker, n, args=(RUNS,), timeout_s=240)
    return n, [[per_rank[rank][i] for rank in range(n)] for i in range(len(RUNS))]


def test_output_and_every_gradient_equal_the_reference(results) -> None:
    n, runs = results
    for run, per_rank in zip(RUNS, runs, strict=True):
        errors = ep.max_errors(per_rank)
        assert set(errors) == {"y", "x_grad", "router_w", "router_b", "w1", "b1", "w2", "b2"}
        bad = {k: v for k, v in errors.items() if v > TOL}
        assert not bad, f"N={n} {run}: expected every error <= {TOL}, found {bad}"


def test_splits_are_uneven_and_bytes_follow_the_formula(results) -> None:
    n, runs = results
    default = runs[0]
    splits = [r["send_splits"] for r in default]
    assert any(len(set(s)) > 1 for s in splits), f"expected uneven send splits, found {splits}"
    for run, per_rank in zip(RUNS, runs, strict=True):
        formula = ep.exchange_bytes_formula(per_rank)
        for rank, r in enumerate(per_rank):
            sent = sum(e["bytes_sent"] for e in r["exchanges"])
            assert sent == formula[rank]["step"], f"N={n} {run} rank {rank}: {sent} != {formula}"
            kinds = [e["what"] for e in r["exchanges"]]
            assert kinds == ["counts", "dispatch", "combine", "combine (backward)",
                             "dispatch (backward)"], kinds  # fmt: skip
        # what one rank sends is what the others receive
        received = [sum(e["bytes_received"] for e in r["exchanges"]) for r in per_rank]
        assert sum(received) == sum(f["step"] for f in formula), (received, formula)


def test_an_expert_with_no_token(results) -> None:
    n, runs = results
    per_rank = runs[3]
    assert sum(r["per_expert"][0] for r in per_rank) == 0, [r["per_expert"] for r in per_rank]
    if n == 4:  # rank 0 owns expert 0 only: it receives nothing and sends nothing back
        assert per_rank[0]["recv_splits"] == [0] * n, per_rank[0]["recv_splits"]
    assert max(ep.max_errors(per_rank).values()) <= TOL
    ref = ep.reference_run(n, skew=-30.0)
    assert float(ref["grads"]["w1"][0].abs().max()) == 0.0  # the reference agrees: no gradient


def test_capacity_drops_the_same_assignments_as_the_reference(results) -> None:
    n, runs = results
    per_rank = runs[1]
    ref = ep.reference_run(n, capacity_factor=1.0, skew=2.0)
    dropped = sum(r["dropped"] for r in per_rank)
    assert dropped == ref["dropped"] > 0, f"expected {ref['dropped']} > 0 dropped, found {dropped}"
    kept = [sum(r["kept_per_expert"][e] for r in per_rank) for e in range(ep.EXPERTS)]
    assert kept == ref["kept"], (kept, ref["kept"])
    c = ep.capacity(ep.TOKENS, ep.TOP_K, ep.EXPERTS, 1.0)
    assert all(max(r["kept_per_expert"]) <= c for r in per_rank), c
    assert ep.reference_run(n, capacity_factor=100.0, skew=2.0)["dropped"] == 0


def test_load_imbalance() -> None:
    assert ep.load_imbalance([6, 6, 6, 6]) == 1.0
    assert ep.load_imbalance([24, 0, 0, 0]) == 4.0
    balanced = ep.reference_run(2)["per_expert"]
    skewed = ep.reference_run(2, skew=2.0)["per_expert"]
    assert ep.load_imbalance(skewed) > ep.load_imbalance(balanced), (skewed, balanced)


def test_route_priority_is_slot_major() -> None:
    p = ep.make_params(experts=2, hidden=2)
    p.router_w = torch.zeros(2, 2)
    p.router_b = torch.tensor([1.0, 0.0])  # every token: expert 0 first, expert 1 second
    r = ep.route(torch.zeros(3, 2), p, k=2, capacity_factor=2 / 3)  # C = ceil(2/3*3*2/2) = 2
    assert ep.capacity(3, 2, 2, 2 / 3) == 2
    assert r["keep"].tolist() == [[True, True], [True, True], [False, False]], r["keep"]


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="3 experts cannot be split evenly over 2 ranks"):
        ep.check_config(3, 2, 1, None)
    with pytest.raises(ValueError, match="1 <= k <= experts"):
        ep.check_config(4, 2, 5, None)
    with pytest.raises(ValueError, match="capacity_factor must be positive"):
        ep.check_config(4, 2, 2, 0.0)
    with pytest.raises(WorkerError, match="6 experts cannot be split evenly over 4 ranks"):
        launch(ep.expert_parallel_worker, 4, args=([{"experts": 6}],), timeout_s=120)


def test_the_functional_collective_gives_the_same_gradients() -> None:
    runs = [{"exchange": "functional"}, {"exchange": "function"}]
    per_rank = launch(ep.expert_parallel_worker, 2, args=(runs,), timeout_s=240)
    functional, function = ([r[i] for r in per_rank] for i in range(2))
    assert max(ep.max_errors(functional).values()) <= TOL
    for a, b in zip(functional, function, strict=True):
        assert a["grads"] == b["grads"] and a["x_grad"] == b["x_grad"], "function != functional"
    # the functional op differentiates itself: only the forward exchanges pass through our log
    assert [e["what"] for e in functional[0]["exchanges"]] == ["counts", "dispatch", "combine"]
    with pytest.raises(ValueError, match="exchange must be one of"):
        ep.moe_expert_parallel(torch.zeros(1, ep.HIDDEN), ep.make_params(), exchange="nccl")
