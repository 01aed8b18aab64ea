"""Tests of helpers.ddp: the sampler facts (pure) and every worker on real gloo groups.

Launches are batched (`jobs_worker` with the worker functions): each process-group start-up
costs seconds on a small box.
"""

import sys

import pytest
import torch

from helpers.ddp import (
    CommCounter,
    TwoHeadNet,
    accumulation_epochs,
    accumulation_plan,
    accumulation_worker,
    amp_worker,
    bucket_worker,
    buffer_sync_facts,
    buffer_sync_worker,
    equivalence_worker,
    first_iteration_bucket_limits,
    first_iteration_one_bucket,
    init_broadcast_worker,
    initial_buckets_worker,
    jobs_worker,
    make_bn_net,
    make_wide_mlp,
    max_stable_lr,
    no_sync_worker,
    pitfall_worker,
    rebuild_worker,
    sampler_shards,
    unused_params_worker,
)
from helpers.launch import launch

# --------------------------------------------------------------------------------------------
# DistributedSampler (no process group)


@pytest.mark.parametrize("n,world_size", [(10, 4), (12, 4), (7, 2), (5, 3)])
def test_sampler_shards_cover_with_padding(n: int, world_size: int) -> None:
    shards = sampler_shards(n, world_size)
    per_rank = -(-n // world_size)  # ceil
    assert [len(s) for s in shards] == [per_rank] * world_size
    flat = sum(shards, [])
    assert sorted(set(flat)) == list(range(n))  # every sample is seen
    assert len(flat) - n == per_rank * world_size - n  # padding = duplicates only


def test_sampler_padding_repeats_the_first_indices() -> None:
    shards = sampler_shards(10, 4, shuffle=False)
    assert shards == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]


def test_sampler_drop_last_is_disjoint() -> None:
    shards = sampler_shards(10, 4, drop_last=True)
    flat = sum(shards, [])
    assert [len(s) for s in shards] == [2] * 4
    assert len(set(flat)) == 8


def test_sampler_set_epoch_reshuffles_and_stays_disjoint() -> None:
    e0, e1 = sampler_shards(12, 4, epoch=0), sampler_shards(12, 4, epoch=1)
    assert e0 != e1
    assert sorted(sum(e1, [])) == list(range(12))
    assert sampler_shards(12, 4, epoch=None) == e0  # never calling set_epoch = epoch 0 forever


def test_sampler_different_seeds_overlap() -> None:
    shards = sampler_shards(12, 4, seed=[0, 1, 2, 3])
    flat = sum(shards, [])
    assert len(set(flat)) < 12  # some samples twice, some never


# --------------------------------------------------------------------------------------------
# models and the hook state (no process group)


def test_models_have_the_advertised_state() -> None:
    bn = make_bn_net()
    assert [n for n, _ in bn.named_buffers()] == [
        "1.running_mean",
        "1.running_var",
        "1.num_batches_tracked",
    ]
    wide = make_wide_mlp()
    nbytes = sum(p.numel() * p.element_size() for p in wide.parameters())
    assert 2**20 < nbytes < 2 * 2**20  # more than the 1 MiB first bucket
    assert make_wide_mlp(seed=0)[0].weight.equal(wide[0].weight)  # seeded


def test_comm_counter_counts_per_step() -> None:
    counter = CommCounter(torch.nn.Linear(2, 2))
    counter.calls += [{"step": 0}, {"step": 1}, {"step": 1}]
    assert (counter.count(), counter.count(0), counter.count(1)) == (3, 1, 2)
    assert sorted(counter.names.values()) == ["bias", "weight"]


# --------------------------------------------------------------------------------------------
# first-iteration bucketing (the shared fact of 06, 13 and 14; no process group)

MIB = 2**20
#: options -> the limits the installed source computes (same on 2.13.0, 2.14.1, 2.15.0)
FIRST_ITERATION = [
    ({}, [sys.maxsize]),
    ({"static_graph": True}, [sys.maxsize]),
    ({"find_unused_parameters": True}, [MIB, 25 * MIB]),
    ({"find_unused_parameters": True, "static_graph": True}, [sys.maxsize]),
    ({"find_unused_parameters": True, "bucket_cap_mb": 25}, [25 * MIB]),
    # a given bucket_cap_mb drops the 1 MiB first limit, also when it is small (the docstring)
    ({"find_unused_parameters": True, "bucket_cap_mb": 4}, [4 * MIB]),
    ({"bucket_cap_mb_list": [1, 4]}, [MIB, 4 * MIB]),
]
FIRST_ITERATION_OPTIONS = [options for options, _ in FIRST_ITERATION]


@pytest.mark.parametrize("options,limits", FIRST_ITERATION)
def test_first_iteration_bucket_limits(options: dict, limits: list[int]) -> None:
    assert first_iteration_bucket_limits(**options) == limits
    assert first_iteration_one_bucket(**options) == (limits == [sys.maxsize])


def test_first_iteration_one_bucket_matches_the_reducer(ddp06: list[dict]) -> None:
    """The computed rule against the Reducer's initial buckets for a 1.5 MiB model.

    A first limit at least the model's size also gives one bucket (25 MiB here): the
    one-bucket rule is the one that holds whatever the size.
    """
    counts = ddp06[0]["initial_buckets_worker"]
    size = sum(p.numel() * p.element_size() for p in make_wide_mlp().parameters())
    assert MIB < size < 2 * MIB, size
    expected = [
        1 if first_iteration_one_bucket(**o) or first_iteration_bucket_limits(**o)[0] >= size else 2
        for o in FIRST_ITERATION_OPTIONS
    ]
    assert counts == expected, f"initial buckets: expected {expected}, found {counts}"


# --------------------------------------------------------------------------------------------
# workers on 2 ranks: notebook 06's and 08's in one launch (each launch starts two fresh
# interpreters that import torch; every worker builds its own models, so they share nothing but
# the process group)

JOBS_06 = [
    (init_broadcast_worker, ()),
    (initial_buckets_worker, (FIRST_ITERATION_OPTIONS,)),
    (buffer_sync_worker, (["train", "train", "eval", "train+no_grad", "train"],)),
    (bucket_worker, (2,)),
    (equivalence_worker, ()),
]
JOBS_08 = [
    (no_sync_worker, ()),
    (accumulation_worker, (3,)),
    (pitfall_worker, ()),
    (unused_params_worker, ()),
    (amp_worker, ()),
]


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    return launch(jobs_worker, 2, (JOBS_06 + JOBS_08,), timeout_s=300)


@pytest.fixture(scope="module")
def ddp06(two_ranks: list[dict]) -> list[dict]:
    return two_ranks


def test_construction_broadcasts_params_and_buffers(ddp06: list[dict]) -> None:
    r0, r1 = (r["init_broadcast_worker"] for r in ddp06)
    assert r0["before"] != r1["before"]
    assert r0["after"] == r1["after"] == r0["before"]
    opts = r1["options"]
    assert opts["forward_sync_buffers=False"]["1.running_mean[0]"] == 1.0  # init sync kept
    assert opts["broadcast_buffers=False"]["1.running_mean[0]"] == 2.0  # legacy: skipped
    assert opts["broadcast_buffers=False"]["0.weight[0,0]"] == r0["before"]["0.weight[0,0]"]
    for label in ("broadcast_buffers=True", "broadcast_buffers=False"):
        assert opts[label]["warnings"][0].startswith("FutureWarning: `broadcast_buffers`")
    assert opts["default"]["warnings"] == [] and opts["default"]["forward_sync_buffers"]


def test_buffers_broadcast_at_each_grad_forward(ddp06: list[dict]) -> None:
    r0, r1 = (r["buffer_sync_worker"] for r in ddp06)
    s0, s1 = r0["sync"], r1["sync"]
    for i in (1, 2, 3):  # the forward before ran with grad: rank 0's buffers arrive
        assert s1["seen"][i] == s0["after"][i - 1]
    assert s1["after"][2] == s1["seen"][2]  # eval: no update
    assert s1["seen"][4] == s1["after"][3] != s0["after"][3]  # after a no_grad forward: no sync
    assert r0["sync"]["matches_rank0_only_bn"]
    n0, n1 = r0["no sync"], r1["no sync"]
    assert all(a != b for a, b in zip(n0["after"], n1["after"], strict=True))


def test_buckets_rebuilt_after_first_step(ddp06: list[dict]) -> None:
    res = ddp06[0]["bucket_worker"]
    default, big = res["default"], res["bucket_cap_mb=25"]
    step0 = default["steps"][0]["buckets"]
    assert len(step0) == 1 and step0[0]["params"][0] == "0.weight"
    step1 = default["steps"][1]["buckets"]
    assert [b["params"] for b in step1] == [
        ["4.bias", "4.weight", "2.bias", "2.weight"],
        ["0.bias", "0.weight"],
    ]
    events = default["steps"][1]["events"]
    assert events.index("all-reduce bucket 0") < events.index("grad ready 0.weight")  # overlap
    assert [len(s["buckets"]) for s in big["steps"]] == [1, 1]
    assert default["first_bucket_bytes_cap"] == 2**20 < big["first_bucket_bytes_cap"]
    assert ddp06[1]["bucket_worker"]["default"]["steps"] == default["steps"]  # same on all ranks


def test_rebuild_worker_when_buckets_are_rebuilt() -> None:
    """The Reducer's rebuild rule, measured: after step 0 by default, one step later with
    static_graph, never with find_unused_parameters alone (reducer.hpp should_rebuild_buckets)."""
    options = [{}, {"static_graph": True}, {"find_unused_parameters": True}]
    res = launch(rebuild_worker, 2, args=(options, 3))
    default, static, unused = res[0]
    assert default["per_step"][0] != default["per_step"][1] == default["per_step"][2]
    assert static["per_step"][0] == static["per_step"][1] != static["per_step"][2]
    assert unused["per_step"][0] == unused["per_step"][1] == unused["per_step"][2]
    assert len(default["per_step"][0]) == 1 and len(default["per_step"][1]) > 1
    assert res[1] == res[0]  # every rank buckets alike


def test_buffer_sync_rule_shared_by_06_and_07() -> None:
    facts = buffer_sync_facts()
    assert facts["at_init"] == {
        "default": True,
        "forward_sync_buffers=False": True,
        "broadcast_buffers=True": True,
        "broadcast_buffers=False": False,
    }
    assert facts["at_forward"]["sync"] == [
        ("train", "train", True),
        ("train", "eval", True),  # eval mode syncs too
        ("eval", "train", None),  # eval changed nothing: the ranks agreed already
        ("train", "train+no_grad", True),
        ("train+no_grad", "train", False),  # the no_grad forward cleared the flag
    ]
    assert {s for _, _, s in facts["at_forward"]["no sync"]} == {False}


def test_ddp_step_equals_large_batch_step(ddp06: list[dict]) -> None:
    for r in ddp06:
        eq = r["equivalence_worker"]
        assert eq["mlp"]["max_param_diff"] < 1e-6
        assert eq["bn_net"]["max_param_diff"] > 1e-3  # BN statistics are per rank
    assert ddp06[0]["equivalence_worker"] == ddp06[1]["equivalence_worker"]


@pytest.fixture(scope="module")
def ddp08(two_ranks: list[dict]) -> list[dict]:
    return two_ranks


def test_no_sync_keeps_grads_local_then_averages(ddp08: list[dict]) -> None:
    r0, r1 = (r["no_sync_worker"] for r in ddp08)
    assert (r0["flag_before"], r0["flag_inside"], r0["flag_after"]) == (True, False, True)
    assert (r0["allreduces_inside"], r0["allreduces_after"]) == (0, 1)
    for r in (r0, r1):
        torch.testing.assert_close(r["grad_inside"], r["local_grad_a"])
    mean = (torch.tensor(r0["local_grad_a_plus_b"]) + torch.tensor(r1["local_grad_a_plus_b"])) / 2
    for r in (r0, r1):
        torch.testing.assert_close(torch.tensor(r["grad_after"]), mean)
        # syncing A as well averages A and B separately: the same mean (the all-reduce is linear)
        torch.testing.assert_close(torch.tensor(r["grad_both_synced"]), mean)


def test_accumulation_equals_large_batch(ddp08: list[dict]) -> None:
    for r in ddp08:
        acc = r["accumulation_worker"]
        assert acc["no_sync"]["allreduces"] == 1
        assert acc["sync every micro-batch"]["allreduces"] == 3
        for v in acc.values():
            assert v["max_diff_vs_large_batch"] < 1e-6


def test_forward_decides_whether_backward_syncs(ddp08: list[dict]) -> None:
    r0, r1 = (r["pitfall_worker"] for r in ddp08)
    a, b = "forward outside, backward inside", "forward inside, backward outside"
    assert r0[a]["allreduces"] == 1 and r0[a]["grad"] == r1[a]["grad"]
    assert r0[b]["allreduces"] == 0 and r0[b]["grad"] != r1[b]["grad"]


def test_amp_step(ddp08: list[dict]) -> None:
    for r in ddp08:
        amp = r["amp_worker"]
        assert amp["bf16"]["activation_dtype"] == "bfloat16"
        assert amp["bf16"]["grad_dtype"] == amp["bf16"]["bucket_dtype"] == "float32"
        assert amp["bf16_vs_fp32_rel_err"] < 1e-2
        assert not amp["grads_finite_after_allreduce"] and not amp["params_changed"]
        assert amp["scale_after"] == amp["scale_before"] / 2
    assert ddp08[0]["amp_worker"]["local_loss_finite"]
    assert not ddp08[1]["amp_worker"]["local_loss_finite"]
    assert ddp08[0]["amp_worker"]["bf16"]["grad"] == ddp08[1]["amp_worker"]["bf16"]["grad"]


def test_equivalence_and_accumulation_on_4_ranks() -> None:
    jobs = [(equivalence_worker, ()), (accumulation_worker, (2,))]
    res = launch(jobs_worker, 4, (jobs,), timeout_s=240)
    for r in res:
        assert r["equivalence_worker"]["mlp"]["max_param_diff"] < 1e-6
        assert r["accumulation_worker"]["no_sync"]["allreduces"] == 1
        assert r["accumulation_worker"]["no_sync"]["max_diff_vs_large_batch"] < 1e-6


def test_unused_params_accumulate_under_no_sync(ddp08: list[dict]) -> None:
    r0, r1 = (r["unused_params_worker"] for r in ddp08)
    none, once, twice = (
        r0[k] for k in ("no micro-batch before", "1 under no_sync", "2 under no_sync")
    )
    assert none["used_after_sync"] == {
        "trunk.weight": 2,
        "trunk.bias": 2,
        "head_a.weight": 2,
        "head_a.bias": 2,
        "head_b.weight": 0,
        "head_b.bias": 0,
    }
    assert none["head_b_grad"] is None and r1["no micro-batch before"]["head_b_grad"] is None
    for run in (once, twice):  # rank 0's no_sync use counts once, however often it happened
        assert run["used_after_sync"]["head_b.weight"] == 1
        assert run["used_after_next_sync"]["head_b.weight"] == 0  # reset after each sync
        assert run["head_b_grad_after_next_sync"] == run["head_b_grad"]  # left untouched
    assert r1["1 under no_sync"]["local_head_b_grad_before_sync"] is None
    assert r1["1 under no_sync"]["head_b_grad"] == once["head_b_grad"]  # rank 1 got one too
    assert once["head_b_grad"] == pytest.approx(once["local_head_b_grad_before_sync"] / 2)
    assert r0["without find_unused_parameters"].startswith("Expected to have finished reduction")


def test_two_head_net_heads() -> None:
    net = TwoHeadNet()
    x = torch.randn(3, 4)
    assert net(x, "a").shape == net(x, "b").shape == (3, 2)
    assert not torch.equal(net(x, "a"), net(x, "b"))


def test_accumulation_plan_numbers() -> None:
    plan = accumulation_plan(50_000, 8, 32, 4, base_lr=0.1, base_batch=256)
    assert plan == {"k": 4, "effective_batch": 1024, "steps_per_epoch": 48, "scaled_lr": 0.4}


def test_larger_k_fewer_steps_then_unstable_lr() -> None:
    ks, lr = [1, 4, 16, 64], 0.005
    fixed = accumulation_epochs(ks, lr, scale_lr=False)
    scaled = accumulation_epochs(ks, lr, scale_lr=True)
    assert [fixed[k] for k in ks] == sorted(fixed.values())  # fewer steps: higher loss
    limit = max_stable_lr()
    assert 16 * lr < limit < 64 * lr
    assert all(abs(scaled[k] / scaled[1] - 1) < 0.1 for k in (4, 16))
    assert scaled[64] > 100 * scaled[1]  # step above 2 / lambda_max: diverges
