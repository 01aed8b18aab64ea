"""Worked solutions to notebook 04's exercises (process groups and collectives)."""

import math

import numpy as np
import torch.distributed as dist

# 04.1 What reduce_scatter leaves on each rank.
# Rank r holds torch.arange(3.) * (r + 1) (the factor is r + 1, so rank 0 is not all zeros):
#   rank 0: [0, 1, 2]    rank 1: [0, 2, 4]    rank 2: [0, 3, 6]
# reduce_scatter SUMs element-wise over the ranks: [0, 6, 12], then rank i keeps element i
# (the output tensor has world_size times fewer elements than the input: one here).
ANSWER_04_1 = [[0.0], [6.0], [12.0]]

# 04.2 torchrun's RANK when nodes differ.
# Nodes with GROUP_RANK 0, 1, 2 run 4, 2 and 4 workers. `_assign_worker_ranks` gives each node
# a base = the sum of the local world sizes of the nodes before it: node 2's base is 4 + 2 = 6.
# LOCAL_RANK 1 there is RANK 6 + 1 = 7. WORLD_SIZE is every worker: 4 + 2 + 4 = 10.
# (GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = 2 * 4 + 1 = 9 would be wrong: node 1 has 2.)
ANSWER_04_2 = (7, 10)


# 04.3 DistributedSampler's shards, unshuffled.
# DistributedSampler.__init__: without drop_last, num_samples = ceil(n / world_size); with
# drop_last and an uneven n, num_samples = ceil((n - world_size) / world_size), i.e.
# floor(n / world_size); total_size = num_samples * world_size. __iter__ (shuffle=False):
# indices = [0..n-1], padded to total_size by repeating the list from the start (as many times
# as needed: n=2 on 5 ranks gives [0, 1, 0, 1, 0]) or cut to total_size; rank r takes
# indices[r:total_size:world_size]. For (10, 4): [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]].
def sampler_indices(n, world_size, rank, drop_last):
    """What DistributedSampler(range(n), world_size, rank, shuffle=False, drop_last) yields."""
    if drop_last and n % world_size:
        num_samples = math.ceil((n - world_size) / world_size)
    else:
        num_samples = math.ceil(n / world_size)
    total = num_samples * world_size
    indices = list(range(n))
    if not drop_last:
        pad = total - n
        if pad <= n:
            indices += indices[:pad]
        else:
            indices += (indices * math.ceil(pad / n))[:pad]
    else:
        indices = indices[:total]
    return indices[rank:total:world_size]


# 04.4 all_reduce from reduce and broadcast, with the root a parameter.
# reduce(SUM) leaves the sum on dst only; broadcast from that same rank copies it to every
# rank. Each rank gets only its own tensor t, so the sum can only come through the two calls.
def my_all_reduce(rank, world_size, t, root):
    """t is this rank's tensor; return, as a list, what all_reduce(SUM) leaves on every rank,
    using dist.reduce to `root` and dist.broadcast from it."""
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)  # noqa: F821  the sum lands on root only
    dist.broadcast(t, src=root)  # noqa: F821  root sends it to everyone
    return t.tolist()


SOLUTIONS = {
    "04.1": ANSWER_04_1,
    "04.2": ANSWER_04_2,
    "04.3": sampler_indices,
    "04.4": my_all_reduce,
}


# typical wrong answers (the hint must contain the words given)


def _uses_all_reduce(rank, world_size, t, root):
    getattr(dist, "all_" + "reduce")(t)  # noqa: F821  an alias: refused at run time
    return t.tolist()


def _root_zero(rank, world_size, t, root):
    # section 4's code copied: root 0 whatever the root is
    dist.reduce(t, dst=0)  # noqa: F821
    dist.broadcast(t, src=0)  # noqa: F821
    return t.tolist()


def _by_heart(rank, world_size, t, root):
    # the prompt's root typed in: right on the shown case, wrong on the hidden one
    dist.reduce(t, dst=1)  # noqa: F821
    dist.broadcast(t, src=1)  # noqa: F821
    return t.tolist()


def _process_group_method(rank, world_size, t, root):
    # the default group's own allreduce: no function of dist is called, the dispatcher sees it
    dist.distributed_c10d._get_default_group().allreduce([t]).wait()  # noqa: F821
    return t.tolist()


def _functional(rank, world_size, t, root):
    # the functional collectives' all_reduce: another module, the same dispatcher
    import torch.distributed._functional_collectives as funcol

    return funcol.all_reduce(t, "sum", dist.group.WORLD).tolist()  # noqa: F821


def _no_broadcast(rank, world_size, t, root):
    dist.reduce(t, dst=root)  # noqa: F821
    return t.tolist()


def _shown_by_heart(n, world_size, rank, drop_last):
    return [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]][rank]


def _pad_once(n, world_size, rank, drop_last):
    # pads with indices[:pad], which is too short when n < world_size
    total = (
        math.ceil(n / world_size) * world_size if not drop_last else n // world_size * world_size
    )
    indices = list(range(n))
    indices = (indices + indices[: total - n])[:total]
    return indices[rank:total:world_size]


def _contiguous(n, world_size, rank, drop_last):
    size = math.ceil(n / world_size)
    return list(range(rank * size, min((rank + 1) * size, n)))


def _no_pad(n, world_size, rank, drop_last):
    return list(range(rank, n, world_size))


def _calls_sampler(n, world_size, rank, drop_last):
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(n), world_size, rank, shuffle=False, drop_last=drop_last))


def _sampler_alias(n, world_size, rank, drop_last):
    from torch.utils.data import DistributedSampler as DS

    return list(DS(range(n), world_size, rank, shuffle=False, drop_last=drop_last))


WRONG = {
    "04.1": [
        ([[0.0, 6.0, 12.0]] * 3, "all_reduce"),
        ([0.0, 2.0, 6.0], "sums the inputs"),
        ([18.0, 18.0, 18.0], "element-wise"),
        (np.array([18.0, 18.0, 18.0]), "element-wise"),  # an array is read as a list
        (["0", "6", "12"], "numbers (floats or ints)"),  # float() would take the strings
    ],
    "04.2": [
        ((9, 10), "same number of workers"),
        ((7, 4), "LOCAL_WORLD_SIZE"),
        ((6, 10), "add the LOCAL_RANK"),
        ((7.9, 10.2), "whole numbers"),
    ],
    "04.3": [
        (_shown_by_heart, "a hidden case"),
        (_pad_once, "a hidden case (n=2, world_size=5"),
        (_contiguous, "contiguous"),
        (_no_pad, "pads"),
        (_calls_sampler, "do not call DistributedSampler"),
        (_sampler_alias, "do not call DistributedSampler"),
        ([[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]], "function itself"),
    ],
    "04.4": [
        # launches cost seconds: four entries here; _uses_all_reduce ("do not call
        # dist.all_reduce") and _no_broadcast ("broadcast it from that rank") were checked by hand
        (_root_zero, "the root is rank 1"),
        (_by_heart, "a hidden case"),
        (_process_group_method, "collective op c10d.allreduce_"),
        (_functional, "collective op _c10d_functional.all_reduce"),
    ],
}
