"""Toy workers for tests/test_dryrun.py: one right, and one for each device rule it breaks.

They live in a module because launched workers import them by name.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from helpers.launch import current_device


def right_worker(rank: int, world_size: int) -> float:
    """Module and data on the rank's device, DDP, backward, a value read: all device-correct."""
    device = current_device()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 4).to(device), device_ids=[device.index])
    x = torch.randn(16, 8, device=device)
    model(x).sum().backward()
    total = torch.tensor([float(rank)], device=device)
    dist.all_reduce(total)
    assert total.item() == world_size * (world_size - 1) / 2, "all_reduce should sum the ranks"
    return total.cpu().item()


def cpu_tensor_to_all_reduce_worker(rank: int, world_size: int) -> None:
    """all_reduce on a CPU tensor: NCCL refuses it."""
    t = torch.ones(4)
    dist.all_reduce(t)


def cpu_module_worker(rank: int, world_size: int) -> None:
    """A module left on the CPU, its input on the device."""
    layer = nn.Linear(8, 4)
    layer(torch.randn(2, 8, device=current_device()))


def cuda0_worker(rank: int, world_size: int) -> None:
    """Every rank on cuda:0: wrong on rank 1."""
    t = torch.ones(4, device="cuda:0")
    dist.all_reduce(t)


def ddp_cpu_module_worker(rank: int, world_size: int) -> None:
    """DDP over a module never moved to the device."""
    model = DistributedDataParallel(nn.Linear(8, 4))
    model(torch.randn(2, 8, device=current_device())).sum().backward()


def cuda_api_worker(rank: int, world_size: int) -> None:
    """A torch.cuda call the dry run cannot answer: a stop, not a failure."""
    torch.cuda.max_memory_allocated()


def reducer_seen_worker(rank: int, world_size: int) -> list[str]:
    """DDP's Reducer all-reduces in backward from C++: the dry run's checks must see it."""
    import helpers.dryrun

    device = current_device()
    model = DistributedDataParallel(nn.Linear(8, 4).to(device), device_ids=[device.index])
    loss = model(torch.randn(4, 8, device=device)).sum()
    seen = helpers.dryrun._active.collectives
    seen.clear()
    loss.backward()
    assert "c10d.allreduce_.default" in seen, f"expected the Reducer's all-reduce, found {seen}"
    return seen


def cpu_comm_hook_worker(rank: int, world_size: int) -> None:
    """A DDP comm hook that all-reduces a CPU copy of the bucket, from inside backward."""
    device = current_device()
    model = DistributedDataParallel(nn.Linear(8, 4).to(device), device_ids=[device.index])

    def hook(state, bucket):  # noqa: ANN001, ANN202 - DDP checks real annotations, not strings
        return dist.all_reduce(bucket.buffer().cpu(), async_op=True).get_future()

    model.register_comm_hook(None, hook)
    model(torch.randn(4, 8, device=device)).sum().backward()


def object_collective_worker(rank: int, world_size: int) -> list:
    """all_gather_object: under NCCL its pickles travel as CUDA tensors of the rank."""
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank})
    assert gathered == [{"rank": r} for r in range(world_size)], f"found {gathered}"
    return gathered
