"""Tensor and sequence parallelism: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 15.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from .lesson import (
    SEQ,
    MLPBlock,
    _dtensor_run,
    _run,
    dropout_masks,
    layer_input,
    make_layer,
    parallel_mlp_block,
    shard_layer,
)


def max_diff(a: dict[str, list[float]], b: dict[str, list[float]]) -> float:
    """Max |a[k][i] - b[k][i]| over the keys of `b` (flat gradient lists of equal length)."""
    return max(max((abs(x - y) for x, y in zip(a[k], b[k], strict=True)), default=0.0) for k in b)


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
