"""Judges for notebook 04's exercises (process groups and collectives).

Each judge computes the right answer from the installed torch where it can: torchrun's rank
assignment runs the installed agent's `_assign_worker_ranks` on an in-memory store, the sampler
shards come from the installed `DistributedSampler`, and the reader's all-reduce runs on 2 ranks
through `launch_source`. Worked solutions: solutions/nb04.py.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import SimpleNamespace
from typing import Any

import torch

from helpers.exercises import Hint, exercise, launch_source, tr

# 04.1: reduce_scatter on 3 ranks, rank r holds torch.arange(3.) * (r + 1)
RS_WORLD = 3


def _rs_inputs(world_size: int = RS_WORLD) -> list[torch.Tensor]:
    return [torch.arange(float(world_size)) * (r + 1) for r in range(world_size)]


def _flat(answer: Any) -> list[float]:
    """[[0.0], [6.0], ...] or [0, 6, ...] -> [0.0, 6.0, ...]; anything else raises Hint."""
    if not isinstance(answer, (list, tuple)):
        raise Hint(
            tr(
                "give a list with one entry per rank (3 ranks), found {type_answer___name}",
                type_answer___name=type(answer).__name__,
            )
        )
    out = []
    for a in answer:
        if isinstance(a, (list, tuple)) and len(a) == 1:
            a = a[0]
        if isinstance(a, (list, tuple)):
            raise Hint(tr("each rank keeps one element (its output has 1 element)"))
        out.append(float(a))
    return out


@exercise("04.1", "What reduce_scatter leaves on each rank")
def reduce_scatter_per_rank(answer: Any) -> str:
    inputs = _rs_inputs()
    total = torch.stack(inputs).sum(0)  # the SUM over ranks, element by element
    truth = total.tolist()  # rank i keeps element i (one element per rank)
    if isinstance(answer, (list, tuple)) and len(answer) == RS_WORLD:
        rows = [list(a) if isinstance(a, (list, tuple)) else None for a in answer]
        if all(r is not None and len(r) == RS_WORLD for r in rows):
            if [[float(x) for x in r] for r in rows] == [truth] * RS_WORLD:
                raise Hint(
                    tr(
                        "every rank holding the whole sum is all_reduce; reduce_scatter leaves "
                        "rank i only chunk i of the sum (here one element)"
                    )
                )
            raise Hint(
                tr("each rank keeps one element (its output has 1 element), not a list of 3")
            )
    found = _flat(answer)
    if len(found) != RS_WORLD:
        raise Hint(
            tr(
                "give one value per rank: {rs_world} entries, found {len_found}",
                rs_world=RS_WORLD,
                len_found=len(found),
            )
        )
    own = [float(inputs[i][i]) for i in range(RS_WORLD)]
    if found == own:
        raise Hint(
            tr(
                "you kept each rank's own element i: reduce_scatter first SUMS the inputs of "
                "all ranks, then rank i keeps element i of that sum"
            )
        )
    if found == [float(inputs[0][i]) for i in range(RS_WORLD)]:
        raise Hint(tr("that is rank 0's input scattered (a scatter); reduce_scatter sums first"))
    if all(x == float(total.sum()) for x in found):
        raise Hint(
            tr(
                "you added the whole sum together; the sum is element-wise over ranks, and "
                "rank i keeps element i of it"
            )
        )
    if found != truth:
        raise Hint(
            tr(
                "write the three inputs as rows, add them column by column, then rank i "
                "keeps column i (section 4's table shows the same rule on 4 ranks)"
            )
        )
    return tr(
        "the inputs {inputs} add up to {truth}; rank i keeps element i, so the ranks hold {held}",
        inputs=[t.tolist() for t in inputs],
        truth=truth,
        held=", ".join(f"rank {i}: [{v}]" for i, v in enumerate(truth)),
    )


# 04.2: torchrun's RANK on nodes with different numbers of workers
NODE_SIZES = [4, 2, 4]  # LOCAL_WORLD_SIZE of the nodes with GROUP_RANK 0, 1, 2
ASK = (2, 1)  # GROUP_RANK 2, LOCAL_RANK 1


def torchrun_ranks(node_sizes: list[int] = NODE_SIZES) -> list[list[tuple[int, int]]]:
    """Per node, (RANK, WORLD_SIZE) of each local rank, from the installed elastic agent.

    Runs `SimpleElasticAgent._assign_worker_ranks` (its slow path, the default) on a HashStore:
    every other node's role info is written first, node 0 (which assigns) runs, then the rest.
    """
    import torch.distributed as dist
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, _RoleInstanceInfo

    store = dist.HashStore()
    n = len(node_sizes)
    for g in range(1, n):
        info = _RoleInstanceInfo("default", g, node_sizes[g])
        store.set(f"torchelastic/role_info/{g}", info.serialize())
    out = []
    for g in range(n):  # node 0 first: it computes everyone's base and writes it to the store
        spec = SimpleNamespace(role="default", local_world_size=node_sizes[g])
        workers = SimpleElasticAgent._assign_worker_ranks(None, store, g, n, spec)
        out.append([(w.global_rank, w.world_size) for w in workers])
    return out


@exercise("04.2", "torchrun's RANK when nodes differ")
def torchrun_rank(answer: Any) -> str:
    group_rank, local_rank = ASK
    truth = torchrun_ranks()[group_rank][local_rank]
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair (RANK, WORLD_SIZE), for example (3, 8)"))
    rank, world = (int(a) for a in answer)
    if world != truth[1]:
        if world == NODE_SIZES[group_rank]:
            raise Hint(
                tr("that WORLD_SIZE is the node's LOCAL_WORLD_SIZE; WORLD_SIZE counts all nodes")
            )
        raise Hint(tr("WORLD_SIZE is the number of workers on all nodes together"))
    if rank == group_rank * NODE_SIZES[group_rank] + local_rank:
        raise Hint(
            tr(
                "GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK holds only with the same number "
                "of workers on every node; the agent adds up the local world sizes of the "
                "nodes before"
            )
        )
    if rank == local_rank:
        raise Hint(tr("that is the LOCAL_RANK; RANK numbers the workers of all nodes"))
    if rank == truth[0] - 1 or rank == sum(NODE_SIZES[:group_rank]):
        raise Hint(tr("the node's base is right; add the LOCAL_RANK (local ranks count from 0)"))
    if rank != truth[0]:
        raise Hint(
            tr("read `base_global_rank` in the excerpt of section 1: which nodes add to it?")
        )
    return tr(
        (
            "the nodes before GROUP_RANK {group_rank} hold {sum_node_sizes_group_rank} "
            "workers (the base), plus LOCAL_RANK {local_rank}: RANK {truth_0} of "
            "WORLD_SIZE {truth_1} (the installed agent's `_assign_worker_ranks` gives "
            "the same)"
        ),
        group_rank=group_rank,
        sum_node_sizes_group_rank=sum(NODE_SIZES[:group_rank]),
        local_rank=local_rank,
        truth_0=truth[0],
        truth_1=truth[1],
    )


# 04.3: DistributedSampler shards without shuffling
SAMPLES, REPLICAS = 10, 4


def sampler_shards_no_shuffle(n: int = SAMPLES, world_size: int = REPLICAS) -> list[list[int]]:
    from torch.utils.data import DistributedSampler

    return [
        list(DistributedSampler(range(n), num_replicas=world_size, rank=r, shuffle=False))
        for r in range(world_size)
    ]


@exercise("04.3", "DistributedSampler's shards, unshuffled")
def sampler_shards(answer: Any) -> str:
    truth = sampler_shards_no_shuffle()
    try:
        found = [[int(i) for i in shard] for shard in answer]
    except TypeError:
        raise Hint(tr("give a list of 4 lists of indices, one per rank")) from None
    if len(found) != REPLICAS:
        raise Hint(
            tr(
                "one list per rank: {replicas} lists, found {len_found}",
                replicas=REPLICAS,
                len_found=len(found),
            )
        )
    if found == truth:
        return tr(
            (
                "the 10 indices are padded to 12 by repeating the first two ({truth_2_1}, "
                "{truth_3_1}), then rank r takes every 4th starting at r: {truth}"
            ),
            truth_2_1=truth[2][-1],
            truth_3_1=truth[3][-1],
            truth=truth,
        )
    size = -(-SAMPLES // REPLICAS)
    if found == [list(range(r * size, min((r + 1) * size, SAMPLES))) for r in range(REPLICAS)]:
        raise Hint(
            tr(
                "the sampler does not cut contiguous chunks: rank r takes "
                "indices[r::num_replicas] (read DistributedSampler.__iter__)"
            )
        )
    if found == [list(range(r, SAMPLES, REPLICAS)) for r in range(REPLICAS)]:
        raise Hint(
            tr(
                "ranks 2 and 3 must hold as many indices as ranks 0 and 1: without drop_last "
                "the sampler pads the list by repeating its first indices"
            )
        )
    if found == [list(range(r, SAMPLES - SAMPLES % REPLICAS, REPLICAS)) for r in range(REPLICAS)]:
        raise Hint(tr("that is drop_last=True; the default pads instead of dropping"))
    if all(len(s) == size for s in found):
        raise Hint(tr("the sizes are right; which indices pad the list, and who gets them?"))
    raise Hint(
        tr(
            ("every rank gets ceil(10 / 4) = {size} indices; read DistributedSampler.__iter__"),
            size=size,
        )
    )


# 04.4: all_reduce written as reduce + broadcast, on 2 ranks


def _calls(fn: Any) -> set[str]:
    """Names of the functions `fn` calls (attribute calls by their last name)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def _as_list(value: Any) -> Any:
    """A rank's result as a list of floats (a tensor or a list both work), else as it is."""
    try:
        return torch.as_tensor(value, dtype=torch.float64).tolist()
    except (TypeError, ValueError, RuntimeError):
        return value


@exercise("04.4", "all_reduce from reduce and broadcast")
def all_reduce_from_reduce_broadcast(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give the worker function itself, `my_all_reduce`, not its result"))
    calls = _calls(answer)
    if "all_reduce" in calls:
        raise Hint(tr("do not call dist.all_reduce: build it from dist.reduce and dist.broadcast"))
    missing = {"reduce", "broadcast"} - calls
    if missing:
        raise Hint(
            tr(
                "the worker must call dist.reduce and dist.broadcast; missing: {missing}",
                missing=missing,
            )
        )
    world_size = 2
    found = [_as_list(f) for f in launch_source(answer, world_size=world_size, timeout_s=60)]
    # rank r starts from [r + 1, 10 * (r + 1)] (the starter's docstring says so)
    truth = [
        float(sum(r + 1 for r in range(world_size))),
        float(sum(10 * (r + 1) for r in range(world_size))),
    ]
    if found == [truth] * world_size:
        return tr(
            (
                "both ranks return {truth}: reduce leaves the sum on dst 0 only, broadcast "
                "from 0 then copies it to every rank, which is what all_reduce leaves"
            ),
            truth=truth,
        )
    if found and found[0] == truth:
        raise Hint(
            tr(
                (
                    "rank 0 is right but the ranks return {found}: after reduce only dst holds "
                    "the sum; broadcast it from that rank"
                ),
                found=found,
            )
        )
    raise Hint(
        tr(
            ("expected {truth} on both ranks, found {found}: reduce with SUM to dst=0 first"),
            truth=truth,
            found=found,
        )
    )
