"""CPUSyncBatchNorm against nn.BatchNorm on the concatenated batch (helpers.syncbn).

Two launches in all (2 ranks for the checks and the cost worker, 4 ranks), each running several
scenarios, because starting ranks dominates the cost.
"""

from __future__ import annotations

import inspect

import launch_workers as w
import pytest
import torch
from torch import nn

from helpers import syncbn
from helpers.ddp import jobs_worker
from helpers.launch import launch
from helpers.syncbn import (
    CPUSyncBatchNorm,
    SyncBatchNorm,
    compare_with_reference,
    convert_sync_batchnorm,
    make_scenario,
    reference_run,
    sync_batchnorm_class,
)

# Measured errors are a few 1e-7 (outputs, input grads) and 1e-6 (weight grads, summed over
# ranks); these bounds leave an order of magnitude of room and still catch any wrong formula.
TOL = {
    "outputs": 5e-6,
    "input_grads": 5e-6,
    "weight_grads": 5e-5,
    "bias_grads": 5e-5,
    "running_mean": 1e-6,
    "running_var": 1e-6,
    "num_batches_tracked": 0.0,
    "eval_outputs": 5e-6,
}

SCENARIOS_2 = [
    make_scenario([4, 4], (3, 4, 4), seed=0),  # even, (N, C, H, W)
    make_scenario([3, 7], (3, 4, 4), seed=1, steps=3),  # uneven
    make_scenario([2, 9], (5,), seed=2, momentum=None, steps=3),  # (N, C), cumulative average
    make_scenario([5, 1], (2, 6), seed=3, affine=False),  # (N, C, L), no affine
    make_scenario([0, 3], (2, 2, 3, 2), seed=4),  # (N, C, D, H, W), an empty rank
    make_scenario([1, 0], (4,), seed=5),  # one value per channel in the whole batch
]
SINGLE = make_scenario([6], (3, 4, 4), seed=20, steps=2)  # each rank in a group of its own
SCENARIOS_4 = [
    make_scenario([2, 3, 5, 1], (3, 4, 4), seed=10, steps=2),
    make_scenario([4, 4, 4, 4], (2, 7), seed=11, momentum=None),
]


@pytest.fixture(scope="module")
def two_rank_launch():
    """The cost worker, then every 2-rank check, in one launch (each launch starts fresh
    interpreters that import torch); the checks go last: their native-SyncBN probe raises
    inside the group on purpose."""
    jobs = [
        (syncbn.syncbn_cost_worker, (2,)),
        (syncbn.checks_worker, (SCENARIOS_2, 7, SINGLE, True)),
        (w.funcol_backward_worker, (list(syncbn.REDUCE_OPS),)),
    ]
    result = launch(jobs_worker, 2, (jobs,), timeout_s=300)
    assert result.outputs == ["", ""], result.outputs  # workers stay quiet
    return result


@pytest.fixture(scope="module")
def two_ranks(two_rank_launch):
    return [r["checks_worker"] for r in two_rank_launch]


@pytest.fixture(scope="module")
def cost(two_rank_launch):
    return [r["syncbn_cost_worker"] for r in two_rank_launch]


@pytest.fixture(scope="module")
def four_ranks():
    return launch(syncbn.checks_worker, 4, (SCENARIOS_4,))


def _check(per_rank, scenario):
    err = compare_with_reference(per_rank, reference_run(scenario))
    bad = {k: v for k, v in err.items() if v > TOL[k]}
    assert not bad, f"{scenario}: {bad} (all errors: {err})"
    return err


@pytest.mark.parametrize("index", range(len(SCENARIOS_2) - 1))
def test_two_ranks_match_batchnorm_on_concatenated_batch(two_ranks, index):
    _check([r["scenarios"][index] for r in two_ranks], SCENARIOS_2[index])


def test_two_ranks_actually_synchronise(two_ranks):
    # Local BatchNorm on rank 0's slice alone gives other outputs: the match above is not free.
    scenario = SCENARIOS_2[1]
    x, _ = syncbn.make_global_batch(scenario, 0)
    w, b = syncbn._initial_params(scenario)
    local = nn.functional.batch_norm(x[:3], None, None, w, b, training=True)  # rank 0 alone
    synced = torch.tensor(two_ranks[0]["scenarios"][1]["outputs"][0])
    gap = (local - synced).abs().max()
    assert gap > 1e-2, f"rank 0's local BatchNorm vs synchronised: expected a gap > 1e-2, got {gap}"


def test_global_count_of_one_raises_on_every_rank(two_ranks):
    for r in two_ranks:
        assert r["scenarios"][-1] == {
            "error": "Expected more than 1 value per channel when training, got global input size 1"
        }


def test_ddp_step_equals_single_process_step(two_ranks):
    ref = syncbn.ddp_reference_step(SCENARIOS_2[0]["batch_sizes"], 7)
    for r in two_ranks:
        ddp = r["ddp"]
        assert ddp["bn_class"] == "CPUSyncBatchNorm"
        for got, want in zip(ddp["params"], ref["params"], strict=True):
            torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-6, rtol=0)
        for key in ("running_mean", "running_var"):
            torch.testing.assert_close(
                torch.tensor(ddp[key]), torch.tensor(ref[key]), atol=1e-6, rtol=0
            )


@pytest.mark.parametrize("index", range(len(SCENARIOS_4)))
def test_four_ranks_match_batchnorm_on_concatenated_batch(four_ranks, index):
    _check([r["scenarios"][index] for r in four_ranks], SCENARIOS_4[index])


def test_group_of_world_size_one_is_exactly_batchnorm(two_ranks):
    for r in two_ranks:
        err = compare_with_reference([r["single_rank"]], reference_run(SINGLE))
        assert all(v == 0.0 for v in err.values()), err  # same code path: bitwise equal


def test_native_syncbatchnorm_cannot_train_on_cpu(two_ranks):
    for r in two_ranks:
        native = r["native"]
        assert native["train_forward"] == (
            "ValueError: SyncBatchNorm expected input tensor to be on GPU or XPU or privateuseone"
        )
        assert "SyncBatchNorm layers only work with GPU modules" in native["ddp_wrap"]
        assert native["eval_equal"]
        # the native module's gloo branch gathers into a list: gloo takes a flat output tensor
        # but not the (1, W * n) one the non-gloo branch allocates (notebook 07 section 4)
        assert native["gloo_gather_flat"] is None, native
        assert native["gloo_gather_1xN"].startswith(
            "RuntimeError: ProcessGroupGloo::allgather: invalid output tensor list"
        ), native
    with pytest.raises(
        NotImplementedError, match="aten::batch_norm_stats' with arguments from the 'CPU' backend"
    ):
        torch.batch_norm_stats(torch.randn(4, 3), 1e-5)


def test_without_process_group_is_exactly_batchnorm():
    torch.manual_seed(0)
    for shape, bn_cls in [
        ((8, 3), nn.BatchNorm1d),
        ((8, 3, 5), nn.BatchNorm1d),
        ((4, 3, 5, 5), nn.BatchNorm2d),
        ((2, 3, 2, 4, 4), nn.BatchNorm3d),
    ]:
        ours, ref = CPUSyncBatchNorm(3, momentum=None), bn_cls(3, momentum=None)
        for _ in range(2):
            x = torch.randn(shape) * 3 + 1
            assert torch.equal(ours(x), ref(x))
        assert torch.equal(ours.running_var, ref.running_var)
        ours.eval(), ref.eval()
        assert torch.equal(ours(x), ref(x))


def test_input_checks():
    assert SyncBatchNorm is CPUSyncBatchNorm
    with pytest.raises(ValueError, match="expected at least 2D input"):
        CPUSyncBatchNorm(3)(torch.randn(3))


def test_constructor_matches_nn_syncbatchnorm():
    group = object()
    m = CPUSyncBatchNorm(4, 1e-3, None, False, False, group, dtype=torch.float64)
    assert (m.num_features, m.eps, m.momentum, m.affine, m.track_running_stats) == (
        4,
        1e-3,
        None,
        False,
        False,
    )
    assert m.process_group is group and m.weight is None and m.running_mean is None
    m = CPUSyncBatchNorm(4, dtype=torch.float64, bias=False)
    assert m.weight.dtype == torch.float64 and m.bias is None


def _net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4, momentum=None, affine=False)),
        nn.ModuleDict({"deep": nn.Sequential(nn.BatchNorm3d(2, eps=1e-3))}),
        CPUSyncBatchNorm(5),
    )


def test_convert_replaces_nested_batchnorm_and_keeps_state():
    net = _net()
    bn2d, bn3d = net[1], net[3]["deep"][0]
    bn2d.weight.requires_grad_(False)
    bn2d.running_mean.fill_(0.5)
    bn2d.num_batches_tracked.fill_(7)
    bn3d.eval()
    already = net[4]
    converted = convert_sync_batchnorm(net)
    assert converted is net  # containers are converted in place
    new2d, new1d, new3d = net[1], net[2][1], net[3]["deep"][0]
    assert all(type(m) is CPUSyncBatchNorm for m in (new2d, new1d, new3d))
    assert net[4] is already  # already synchronising: untouched
    assert new2d.weight is bn2d.weight and new2d.bias is bn2d.bias  # same Parameters
    assert not new2d.weight.requires_grad and new2d.bias.requires_grad
    assert new2d.running_mean is bn2d.running_mean and float(new2d.running_mean[0]) == 0.5
    assert int(new2d.num_batches_tracked) == 7
    assert new1d.momentum is None and not new1d.affine and new1d.weight is None
    assert new3d.eps == 1e-3 and not new3d.training and new2d.training
    assert not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, CPUSyncBatchNorm)
        for m in net.modules()
    )


def test_convert_top_level_batchnorm_and_process_group():
    group = object()
    bn = nn.BatchNorm1d(3, dtype=torch.float64)
    out = convert_sync_batchnorm(bn, process_group=group)
    assert out is not bn and isinstance(out, CPUSyncBatchNorm) and out.process_group is group
    assert out.weight is bn.weight and out.running_var.dtype == torch.float64
    assert isinstance(CPUSyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm2d(2)), SyncBatchNorm)
    native = nn.SyncBatchNorm(2)
    assert convert_sync_batchnorm(native) is native


def test_sync_batchnorm_class():
    assert sync_batchnorm_class("cpu") is CPUSyncBatchNorm
    assert sync_batchnorm_class(torch.device("cuda", 0)) is nn.SyncBatchNorm


def test_native_size_check_is_local_and_world_size_one_only():
    # the module docstring's claim: nn.SyncBatchNorm checks only the local count, for world
    # size 1; CPUSyncBatchNorm checks the global count (test_global_count_of_one_raises...)
    src = inspect.getsource(torch.nn.modules._functions.SyncBatchNorm.forward)
    assert "if size == 1 and world_size < 2:" in src, src[:400]


def test_eps_must_be_positive_in_synchronised_training(monkeypatch):
    # F.batch_norm's check, with its message, on the synchronised path that bypasses it
    message = "batch_norm eps must be positive during training, but got 0.0"
    with pytest.raises(ValueError, match=message):
        nn.functional.batch_norm(torch.randn(4, 3), None, None, training=True, eps=0.0)
    # patched where CPUSyncBatchNorm.forward looks it up: the lesson module that defines both
    monkeypatch.setattr(syncbn.lesson, "_sync_group", lambda group: object())  # as if synchronising
    with pytest.raises(ValueError, match=message):  # raised before any collective
        CPUSyncBatchNorm(3, eps=0.0)(torch.randn(4, 3))


def test_cost_worker_counts_two_collectives_per_layer(cost):
    for rank, r in enumerate(cost):
        assert r["sync_class"] == "CPUSyncBatchNorm", r["sync_class"]
        plain, sync = r["collectives"]["plain"], r["collectives"]["sync"]
        added = sum(sync.values()) - sum(plain.values())
        assert added == 2 * r["layers"], f"rank {rank}: {plain} vs {sync}"
        assert sync.get("_c10d_functional.all_reduce.default") == 2 * r["layers"], sync
        assert all(len(t) == 2 and min(t) > 0 for t in r["times"].values()), r["times"]
    assert cost[0]["running_mean"]["sync"] == cost[1]["running_mean"]["sync"]
    assert cost[0]["running_mean"]["plain"] != cost[1]["running_mean"]["plain"]
    # DDP broadcasts rank 0's buffers before the next forward; eval mode keeps them
    after_eval = [r["plain_after_eval_forward"] for r in cost]
    assert after_eval[0] == after_eval[1] == cost[0]["running_mean"]["plain"], after_eval


def test_count_collectives_sees_nothing_without_collectives():
    assert syncbn.count_collectives(lambda: torch.ones(3).sum()) == {}


def test_all_reduce_backward_ops_match_a_real_group(two_rank_launch):
    """The probe (no process group) agrees with real backwards in a one-rank gloo group (each
    rank's own subgroup, in the 2-rank launch): an op whose forward runs has a backward exactly
    where the probe names one, and "sum" always has (ours relies on it)."""
    real, other = (r["funcol_backward_worker"] for r in two_rank_launch)
    assert real == other, f"expected both ranks' groups to agree, found {real} and {other}"
    probed = syncbn.all_reduce_backward_ops()
    assert probed["sum"] == "sum", probed
    expected = {op: probed[op] is not None for op in real}
    assert real == expected, (torch.__version__, real, probed)
