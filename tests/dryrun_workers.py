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
    # allowed next to device tensors: a 0-dim CPU tensor in an op without CUDA's device check
    # (mul: `device_check: NoCheck`, TensorIterator), CPU indices, a 0-dim CPU index_put_ value
    x = x * torch.tensor(2.0)
    rows = torch.tensor([0, 3])
    x[rows] = torch.tensor(1.0)
    assert x[rows].sum().item() == 16.0, "x[rows] should be the 2 rows of 8 ones just written"
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


def cuda_api_worker(rank: int, world_size: int) -> int:
    """A torch.cuda call the dry run cannot answer, caught, then a CUDA-only kernel caught:
    a stop at the first (not a failure, not a pass)."""
    try:
        peak = torch.cuda.max_memory_allocated()
    except AttributeError:
        peak = 0
    caught_kernel_worker(rank, world_size)
    return peak


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


def caught_breach_worker(rank: int, world_size: int) -> str:
    """A CPU tensor to all_reduce, its error caught and kept as a result: still a breach."""
    try:
        dist.all_reduce(torch.ones(4))
    except RuntimeError as err:
        return str(err)
    return "no error"


def gloo_group_worker(rank: int, world_size: int) -> float:
    """CPU tensors to a collective and to a functional collective on a group made with
    backend="gloo": right under NCCL too."""
    import torch.distributed._functional_collectives as funcol

    gloo = dist.new_group(backend="gloo")
    t = torch.full((4,), float(rank))
    dist.all_reduce(t, group=gloo)
    assert t.tolist() == [world_size * (world_size - 1) / 2] * 4, f"found {t.tolist()}"
    out = funcol.all_reduce(torch.full((2,), float(rank)), "sum", gloo)
    assert out.tolist() == [world_size * (world_size - 1) / 2] * 2, f"found {out.tolist()}"
    # object collectives stage on the group's device: the CPU on gloo, CUDA on the default group
    staged = [dist.distributed_c10d._get_object_coll_device(g) for g in (gloo, None)]
    assert staged == ["cpu", "cuda"], f"expected object collectives on cpu, cuda: {staged}"
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, rank, group=gloo)
    assert gathered == list(range(world_size)), f"found {gathered}"
    return t.sum().item()


def plain_group_cpu_worker(rank: int, world_size: int) -> None:
    """A CPU tensor to all_reduce on `dist.new_group()`: the default backend, NCCL under launch."""
    dist.all_reduce(torch.ones(4), group=dist.new_group())


def plain_group_funcol_cpu_worker(rank: int, world_size: int) -> None:
    """A CPU tensor to a functional collective on `dist.new_group()` (NCCL under launch)."""
    import torch.distributed._functional_collectives as funcol

    funcol.all_reduce(torch.ones(4), "sum", dist.new_group())


def funcol_cpu_worker(rank: int, world_size: int) -> None:
    """A functional collective (what DTensor and torch.compile issue) on a CPU tensor."""
    import torch.distributed._functional_collectives as funcol

    funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD)


def all_cpu_worker(rank: int, world_size: int) -> list:
    """A CPU module, a CPU input, backward and an object collective (all_gather_object: under
    NCCL its pickles travel as CUDA tensors of the rank): nothing of its own on the device."""
    torch.manual_seed(0)
    layer = nn.Linear(8, 4)
    layer(torch.randn(2, 8)).sum().backward()
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, {"rank": rank})
    assert gathered == [{"rank": r} for r in range(world_size)], f"found {gathered}"
    return gathered


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def compiled_worker(rank: int, world_size: int) -> float:
    """A compiled function on device tensors: Dynamo would run it eagerly under the dry run."""
    double = torch.compile(_double, backend="eager")
    return double(torch.ones(4, device=current_device())).sum().item()


def cpu_scalar_index_worker(rank: int, world_size: int) -> None:
    """index_select with a 0-dim CPU index: CUDA's wrapper checks every tensor's device."""
    torch.ones(4, 2, device=current_device()).index_select(0, torch.tensor(1))


def cpu_values_worker(rank: int, world_size: int) -> None:
    """index_put_ with CPU indices (allowed) and sized CPU values (not allowed)."""
    x = torch.zeros(4, device=current_device())
    x[torch.tensor([0, 2])] = torch.tensor([1.0, 2.0])


def dtensor_cpu_mesh_worker(rank: int, world_size: int) -> list:
    """A DTensor on a CPU mesh (the default group: NCCL under `launch`) with a plain CPU local:
    `torch.mm` on Shard(0) makes DTensor all-gather CPU tensors inside its own dispatch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (world_size,))
    a = DTensor.from_local(torch.arange(8.0).reshape(2, 4), mesh, [Shard(0)])  # (4, 4) whole
    return torch.mm(a, a).to_local().tolist()


def dtensor_alltoall_cpu_worker(rank: int, world_size: int) -> list:
    """DTensor's own collective (`_dtensor.shard_dim_alltoall`) on a CPU tensor."""
    import torch.distributed.tensor._collective_utils  # noqa: F401 - registers the op

    group = dist.group.WORLD.group_name
    return torch.ops._dtensor.shard_dim_alltoall(torch.ones(2, 4), 0, 1, group).tolist()


def numpy_on_device_worker(rank: int, world_size: int) -> list:
    """`.numpy()` of a device tensor: CUDA refuses it (a TypeError there)."""
    return torch.ones(3, device=current_device()).numpy().tolist()


def assert_worker(rank: int, world_size: int) -> None:
    """The worker's own error (a failed value check): it fails, not a stop."""
    x = torch.ones(2, device=current_device())
    assert x.sum().item() == 3.0, "a value check failed"


def caught_kernel_worker(rank: int, world_size: int) -> str:
    """A CUDA-only kernel (no CPU twin) caught, with a fallback: unchecked from there."""
    x = torch.randn(4, 3, device=current_device())
    try:
        mean, _ = torch.batch_norm_stats(x, 1e-5)
    except NotImplementedError:
        mean = x.mean(0)
    return str(mean.shape)


def answered_cuda_worker(rank: int, world_size: int) -> list:
    """What the dry run answers as CUDA would: `Tensor.cuda` with an index, a torch.device or
    a string, the CUDA RNG's seeding and state (torch.cuda.random), `set_device` with an
    index-less "cuda", and a bare index as a device (the rank's own)."""
    device = current_device()
    moved = [torch.ones(2).cuda(d) for d in (None, rank, device, f"cuda:{rank}", "cuda")]
    assert all(t.device == device for t in moved), f"found {[t.device for t in moved]}"
    torch.cuda.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    state = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(state)
    assert torch.cuda.initial_seed() == 0, f"found {torch.cuda.initial_seed()}"
    # an index-less "cuda" device is the current one: set_device keeps it, as on CUDA
    torch.cuda.set_device(torch.device("cuda"))
    # a bare index is cuda:<index>: the rank's own here
    own = [torch.ones(2, device="cuda"), torch.ones(2, device=rank), torch.ones(2).to(rank)]
    own += [torch.ones(2).to(torch.device(rank)), nn.Linear(2, 2).to(rank).weight]
    assert all(t.device == device for t in own), f"found {[t.device for t in own]}"
    return [str(t.device) for t in moved + own]


def int_to0_worker(rank: int, world_size: int) -> list:
    """`.to(0)`: cuda:0 on a CUDA build, whatever the rank (two ranks on one GPU)."""
    t = torch.ones(4).to(0)
    dist.all_reduce(t)
    return t.tolist()


def ddp_module_to0_worker(rank: int, world_size: int) -> None:
    """`nn.Module.to(0)` and `device=0`: every rank's model on cuda:0."""
    model = DistributedDataParallel(nn.Linear(4, 2).to(0))
    model(torch.randn(3, 4, device=0)).sum().backward()


def event_timing_worker(rank: int, world_size: int) -> float:
    """CUDA's timing idiom, right on a GPU: the dry run's events do not time (a stop)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.ones(4, device=current_device()).mul_(2)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def cuda_generator_worker(rank: int, world_size: int) -> float:
    """A CUDA generator, right on a GPU: the CPU build refuses it in C++ (a stop)."""
    gen = torch.Generator(device=current_device())
    gen.manual_seed(rank)
    return torch.randn(3, generator=gen, device=current_device()).sum().item()


def stand_in_attribute_worker(rank: int, world_size: int) -> int:
    """A CUDA stream's attribute the dry run's stand-in lacks (`cuda_stream`): a stop."""
    return torch.cuda.current_stream().cuda_stream
