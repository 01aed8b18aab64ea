"""helpers.sharded: ZeRO stages 1 and 2 from scratch and FSDP2 match DDP, with the memory each
rank holds equal to the ZeRO paper's accounting and the collectives each phase issues."""

from __future__ import annotations

import pytest
import torch

from helpers import sharded
from helpers.launch import launch

SCHEMES = ["ddp", "zero1", "zero2", "fsdp2"]


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"N{n}")
def results(request: pytest.FixtureRequest) -> tuple[int, list[list[dict]]]:
    n = request.param
    return n, launch(sharded.sharding_worker, n, args=(SCHEMES, 3), timeout_s=240)


def test_every_scheme_matches_ddp_on_every_rank(results) -> None:
    n, per_rank = results
    reference = torch.tensor(per_rank[0][0]["params"])  # DDP on rank 0
    for rank in range(n):
        for r in per_rank[rank]:
            torch.testing.assert_close(
                torch.tensor(r["params"]),
                reference,
                rtol=1e-5,
                atol=1e-6,
                msg=lambda m, r=r, rank=rank: f"{r['scheme']} on rank {rank}: {m}",
            )


def test_memory_follows_the_formulas(results) -> None:
    n, per_rank = results
    for rank in range(n):
        for r in per_rank[rank]:
            if r["scheme"] == "fsdp2":
                continue  # uneven dim-0 shards: checked summed over ranks below
            expected = sharded.memory_formula(r["numel"], r["padded"], n, r["scheme"])
            measured = {
                "params": r["param_bytes"],
                "grads": r["grad_bytes"],
                "optimizer": r["optimizer_bytes"],
            }
            assert measured == expected, f"{r['scheme']} rank {rank}: {measured} != {expected}"


def test_fsdp2_holds_each_element_once_across_ranks(results) -> None:
    n, per_rank = results
    fsdp = [next(r for r in rank_results if r["scheme"] == "fsdp2") for rank_results in per_rank]
    numel = fsdp[0]["numel"]
    assert sum(r["param_bytes"] for r in fsdp) == 4 * numel
    assert sum(r["grad_bytes"] for r in fsdp) == 4 * numel
    assert sum(r["optimizer_bytes"] for r in fsdp) == 8 * numel
    d = fsdp[0]["dtensor"]
    assert d["type"] == "DTensor" and d["placements"] == "(Shard(dim=0),)", d
    assert d["local_shape"] == (-(-30 // n), 10), d  # ceil(30 / N) rows on rank 0


def test_storage_behind_the_tensors(results) -> None:
    """DDP and ZeRO: storage = the tensors' bytes; FSDP2: params and grads padded, equal on every
    rank; its AdamW moments unpadded (they sum to 8 B per element over the ranks)."""
    n, per_rank = results
    for rank in range(n):
        for r in per_rank[rank]:
            storage = [
                r["param_storage_bytes"],
                r["grad_storage_bytes"],
                r["optimizer_storage_bytes"],
            ]
            if r["scheme"] != "fsdp2":
                assert storage == [r["param_bytes"], r["grad_bytes"], r["optimizer_bytes"]], r
                continue
            formula = sharded.memory_formula(r["numel"], r["padded"], n, "fsdp2", r["fsdp_padded"])
            assert storage[:2] == [formula["params"], formula["grads"]], (rank, r)
            assert r["optimizer_storage_bytes"] == r["optimizer_bytes"], r
            d = r["dtensor"]
            assert d["local_storage_numel"] == -(-30 // n) * 10, d  # padded on every rank
    fsdp = [next(r for r in rank_results if r["scheme"] == "fsdp2") for rank_results in per_rank]
    assert sum(r["optimizer_storage_bytes"] for r in fsdp) == 8 * fsdp[0]["numel"]
    assert fsdp[0]["fsdp_padded"] == sum(
        sharded.fsdp_padded_numel(p.shape, n) for p in sharded.make_model().parameters()
    )


def test_fsdp_padding_rule() -> None:
    assert sharded.fsdp_padded_numel((30, 10), 4) == 320  # 8, 8, 8, 6 rows: each stored as 8
    assert sharded.fsdp_padded_numel((6, 30), 4) == 240  # 2, 2, 2, 0 rows
    assert sharded.fsdp_padded_numel((30,), 2) == 30


def test_collectives_per_phase(results) -> None:
    _, per_rank = results
    by_scheme = {r["scheme"]: r["collectives"] for r in per_rank[0]}
    layers = 3  # three Linear layers, six parameters
    assert by_scheme["ddp"] == {"forward": {}, "backward": {"all_reduce": 1}, "step": {}}
    assert by_scheme["zero1"] == {
        "forward": {},
        "backward": {},
        "step": {"reduce_scatter": 6, "all_gather": 6},
    }
    assert by_scheme["zero2"] == {
        "forward": {},
        "backward": {"reduce_scatter": 6},
        "step": {"all_gather": 6},
    }
    assert by_scheme["fsdp2"] == {
        "forward": {"all_gather": layers},
        "backward": {"all_gather": layers, "reduce_scatter": layers},
        "step": {},
    }


def test_padded_numel() -> None:
    assert [sharded.padded_numel(k, 4) for k in (0, 1, 4, 30, 300)] == [0, 4, 4, 32, 300]


def test_zero_rejects_an_unknown_stage() -> None:
    with pytest.raises(AssertionError, match="stage must be 1 or 2, got 3"):
        sharded.ZeroAdamW.__init__(object.__new__(sharded.ZeroAdamW), torch.nn.Linear(1, 1), 3)
