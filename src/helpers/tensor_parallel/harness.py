"""Tensor and sequence parallelism: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 15.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .lesson import (
    SEQ,
    Layer,
    MLPBlock,
    _attention,
    _drop,
    _dtensor_run,
    _run,
    dropout_masks,
    layer_input,
    make_layer,
    parallel_mlp_block,
    shard_layer,
)


def reference_layer(layer: Layer, x: torch.Tensor, masks: dict[str, torch.Tensor]):
    """The layer in one process: the result every parallel version must reproduce."""
    h = layer.ln1(x)
    attn = _attention(layer.q(h), layer.k(h), layer.v(h), masks["attn"], layer.heads)
    x = x + _drop(layer.o(attn), masks["attn_out"])
    h = F.gelu(layer.fc1(layer.ln2(x)))
    return x + _drop(layer.fc2(h), masks["mlp_out"])


# parameters whose gradient is a partial sum on each rank under sequence parallelism: they act on
# a sequence chunk only (LayerNorms, the row-parallel biases); Megatron all-reduces them
SEQUENCE_PARTIAL = ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "o.bias", "fc2.bias")


def max_errors(per_rank: list[dict], name: str) -> dict[str, float]:
    """Max |parallel - one process| over ranks, for the loss, output, input and every gradient.

    `per_rank` is a launch of `tensor_parallel_worker`; `name` is "tp", "no_f" or "sp". Under
    "sp" the output and input gradient are the ranks' chunks concatenated, and the gradients in
    SEQUENCE_PARTIAL are summed over ranks before the comparison.
    """
    n = len(per_rank)
    layer, x, masks = make_layer(), layer_input().requires_grad_(), dropout_masks()
    out = reference_layer(layer, x, masks)
    loss = (out.double() ** 2).sum()
    loss.backward()
    runs = [r[name] for r in per_rank]
    errors = {"loss": max(abs(r["loss"] - float(loss.detach())) for r in runs)}
    for key, ref in (("out", out.detach()), ("x_grad", x.grad)):
        if name == "sp":
            got = torch.cat([torch.tensor(r[key]) for r in runs])
            errors[key] = float((got - ref.reshape(-1)).abs().max())
        else:
            errors[key] = max(float((torch.tensor(r[key]) - ref.reshape(-1)).abs().max())
                              for r in runs)  # fmt: skip
    grads = [_grad_shards(layer, rank, n) for rank in range(n)]
    for k in grads[0]:
        if name == "sp" and k in SEQUENCE_PARTIAL:
            got = sum(torch.tensor(r["grads"][k]) for r in runs)
            errors[k] = float((got - grads[0][k].reshape(-1)).abs().max())
        else:
            errors[k] = max(float((torch.tensor(r["grads"][k]) - g[k].reshape(-1)).abs().max())
                            for r, g in zip(runs, grads, strict=True))  # fmt: skip
    return errors


def max_diff(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    """Max |a[k][i] - b[k][i]| over the keys of `b` (flat gradient lists of equal length)."""
    return max(max((abs(x - y) for x, y in zip(a[k], b[k], strict=True)), default=0.0) for k in b)


def _grad_shards(layer: Layer, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """The one-process gradients cut the way `shard_layer` cuts the parameters."""
    grads = Layer()
    with torch.no_grad():
        for p, g in zip(grads.parameters(), layer.parameters(), strict=True):
            p.copy_(g.grad)
    return {k: v.detach() for k, v in shard_layer(grads, rank, world_size).items()}


def layer_worker(rank: int, world_size: int, mode: str) -> dict[str, Any]:
    """One from-scratch run of the layer ("tp", "no_f" or "sp"), as {mode: results}."""
    kw = {"tp": {}, "no_f": {"use_f": False}, "sp": {"sequence": True}}[mode]
    layer, x, masks = make_layer(), layer_input(), dropout_masks()
    return {mode: _run(shard_layer(layer, rank, world_size), x, masks, rank, world_size, **kw)}


def mlp_block_reference(seed: int = 0) -> dict[str, Any]:
    """One process: MLPBlock's loss, input gradient and parameter gradients (flat lists)."""
    block, x = MLPBlock(make_layer(seed)), layer_input().requires_grad_()
    out = block(x)
    loss = (out**2).sum()
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "out": out.detach().reshape(-1).tolist(),
        "x_grad": x.grad.reshape(-1).tolist(),
        "grads": {k: p.grad.reshape(-1).tolist() for k, p in block.named_parameters()},
    }


def dtensor_worker(rank: int, world_size: int) -> dict[str, Any]:
    """The DTensor MLP block alone, {"tp": ..., "sp": ...} (section 7 of notebook 15, for tests)."""
    return {name: _dtensor_run(rank, world_size, sq) for name, sq in (("tp", False), ("sp", True))}


def local_tensor_grad_placements(world_size: int = 2) -> dict[str, str]:
    """Gradient placements of the sequence-parallel MLP block, as `world_size` local ranks.

    Every rank gets the same sequence chunk (the placements do not depend on the values).
    Initialises the "fake" process group in this process and destroys it before returning.
    """
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("local_tensor_grad_placements needs a process without a process group")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        x = layer_input()[: SEQ // world_size].clone().requires_grad_()
        with LocalTensorMode(world_size):
            block = parallel_mlp_block(mesh, sequence=True)
            (block(x) ** 2).sum().backward()
            return {
                k: str(p.grad.placements) if isinstance(p.grad, DTensor) else "tensor"
                for k, p in block.named_parameters()
            }
    finally:
        dist.destroy_process_group()
