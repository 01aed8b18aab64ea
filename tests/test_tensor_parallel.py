"""helpers.tensor_parallel: Megatron's f and g, sequence parallelism and the DTensor block match
one process; activation memory matches Korthikanti et al.; uneven sizes fail clearly."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import tensor_parallel as tp
from helpers.launch import launch


def test_reference_attention_is_scaled_dot_product_attention() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(tp.SEQ, tp.BATCH, tp.HIDDEN, generator=g) for _ in range(3))
    keep = torch.ones(tp.BATCH, tp.HEADS, tp.SEQ, tp.SEQ, dtype=torch.bool)
    out = tp._attention(q, k, v, keep, tp.HEADS)
    d = tp.HIDDEN // tp.HEADS
    heads = [t.view(tp.SEQ, tp.BATCH, tp.HEADS, d).permute(1, 2, 0, 3) for t in (q, k, v)]
    sdpa = F.scaled_dot_product_attention(*heads, dropout_p=0.0)
    want = (sdpa * (1 / (1 - tp.DROPOUT))).permute(2, 0, 1, 3).reshape(out.shape)
    torch.testing.assert_close(out, want)  # _drop rescales kept values by 1 / (1 - p)


def test_check_divisible_names_the_size() -> None:
    with pytest.raises(ValueError, match="hidden size 30 is not divisible by the world size 4"):
        tp.check_divisible(30, 4, "hidden size")
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        tp.check_divisible(30, 0, "hidden size")
    assert tp.check_divisible(32, 4, "hidden size") == 8


def test_shard_layer_refuses_uneven_hidden_and_heads() -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="hidden size 30 is not divisible by the world size 4"):
        tp.shard_layer(tp.Layer(hidden=30, heads=4, ffn=120), 0, 4)
    with pytest.raises(ValueError, match="number of heads 4 is not divisible by the world size 3"):
        tp.shard_layer(tp.make_layer(), 0, 3)
    with pytest.raises(ValueError, match="MLP hidden size 66 is not divisible"):
        tp.shard_layer(tp.Layer(hidden=16, heads=4, ffn=66), 0, 4)


def test_local_tensor_refuses_uneven_before_starting() -> None:
    with pytest.raises(ValueError, match="MLP hidden size 64 is not divisible by the world size 3"):
        tp.local_tensor_mlp(3)
    assert not torch.distributed.is_initialized()


def test_shards_cover_the_layer() -> None:
    layer, n = tp.make_layer(), 4
    shards = [tp.shard_layer(layer, r, n) for r in range(n)]
    fc1 = torch.cat([s["fc1.weight"] for s in shards])
    torch.testing.assert_close(fc1, layer.fc1.weight, rtol=0, atol=0)
    fc2 = torch.cat([s["fc2.weight"] for s in shards], dim=1)
    torch.testing.assert_close(fc2, layer.fc2.weight, rtol=0, atol=0)
    q = torch.cat([s["qkv.weight"].chunk(3)[0] for s in shards])
    torch.testing.assert_close(q, layer.q.weight, rtol=0, atol=0)


def test_ring_bytes() -> None:
    assert tp.ring_bytes("all_reduce", 1024, 4) == 1536
    assert tp.ring_bytes("all_gather", 1024, 4) == tp.ring_bytes("reduce_scatter", 1024, 4) == 768
    with pytest.raises(ValueError, match="unknown collective"):
        tp.ring_bytes("broadcast", 1024, 4)


def test_one_process_memory_is_the_paper_formula() -> None:
    layer = tp.make_layer(dtype=torch.bfloat16)
    x = tp.layer_input(dtype=torch.bfloat16).requires_grad_()
    masks = tp.dropout_masks()
    _, measured = tp.activation_bytes(
        lambda: tp.reference_layer(layer, x, masks), layer.parameters()
    )
    s, b, h, a = tp.SEQ, tp.BATCH, tp.HIDDEN, tp.HEADS
    assert measured["activations"] == s * b * h * 34 + 5 * a * s * s * b
    assert measured["activations"] == tp.korthikanti_bytes(s, b, h, a)
    # two LayerNorms keep a mean and an rstd per token, in bfloat16 like their input (CPU, 2.13)
    assert measured["stats"] == 2 * 2 * s * b * 2


@pytest.mark.parametrize("mode", ["tp", "sp"])
def test_layer_matches_one_process(mode: str) -> None:
    per_rank = launch(tp.layer_worker, 2, args=(mode,), timeout_s=120)
    errors = tp.max_errors(per_rank, mode)
    assert max(errors.values()) < 1e-4, errors
    kinds = [(c["phase"], c["kind"]) for c in per_rank[0][mode]["comm"]]
    if mode == "tp":
        assert kinds == [("forward", "all_reduce")] * 2 + [("backward", "all_reduce")] * 2
    else:
        assert kinds.count(("forward", "all_gather")) == kinds.count(("forward", "reduce_scatter"))
        assert len(kinds) == 10, kinds


def test_without_f_the_input_gradient_is_wrong() -> None:
    per_rank = launch(tp.layer_worker, 2, args=("no_f",), timeout_s=120)
    errors = tp.max_errors(per_rank, "no_f")
    assert errors["loss"] < 1e-4 and errors["out"] < 1e-4, errors
    assert errors["x_grad"] > 0.1, errors
    assert errors["fc2.weight"] < 1e-4, errors


def test_local_tensor_mlp_matches_one_process() -> None:
    reference = tp.mlp_block_reference()
    result = tp.local_tensor_mlp(4)
    assert not torch.distributed.is_initialized()
    assert result["fc1_grad_shards"] == {r: (tp.FFN // 4, tp.HIDDEN) for r in range(4)}
    for k, want in reference["grads"].items():
        torch.testing.assert_close(torch.tensor(result["grads"][k]), torch.tensor(want))
    assert all(math.isclose(x, reference["loss"], rel_tol=1e-6) for x in result["loss"])


def test_dtensor_sequence_parallel_keeps_the_gathered_input() -> None:
    # what notebook 15 says of the DTensor block against GatherColumnLinear (section 7)
    per_rank = launch(tp.dtensor_worker, 2, timeout_s=120)
    full = tp.SEQ * tp.BATCH * tp.HIDDEN
    for res in per_rank:
        assert ("(Replicate(),)", full) in res["sp"]["saved"], res["sp"]["saved"]
