"""Judges for notebook 04's exercises (process groups and collectives).

Each judge computes the right answer from the installed torch where it can: torchrun's rank
assignment runs the installed agent's `_assign_worker_ranks` on an in-memory store, the reader's
sampler indices are compared with the installed `DistributedSampler` (shown and hidden cases),
and the reader's all-reduce runs through `launch_source` on 2 ranks, then on 3 (a hidden case),
against what the installed `dist.all_reduce` leaves on the same inputs (one cached launch, as
04.1's `reduce_scatter_single`).
Worked solutions: solutions/nb04.py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from helpers.exercises import (
    N_,
    Hint,
    called_names,
    collective_guard,
    exercise,
    launch_source,
    tr,
)

# 04.1: reduce_scatter on 3 ranks, rank r holds torch.arange(3.) * (r + 1)
RS_WORLD = 3


def _rs_inputs(world_size: int = RS_WORLD) -> list[torch.Tensor]:
    return [torch.arange(float(world_size)) * (r + 1) for r in range(world_size)]


def _rs_worker(rank: int, world_size: int) -> list[float]:
    """04.1's setup on one rank: reduce-scatter torch.arange(N) * (rank + 1) into 1 element."""
    import torch.distributed as dist

    t = torch.arange(float(world_size)) * (rank + 1)
    out = torch.empty(1)
    dist.reduce_scatter_single(out, t)
    return out.tolist()


@functools.cache
def _rs_truth() -> tuple[tuple[float, ...], ...]:
    """What each of 3 ranks holds after the installed reduce_scatter_single (one launch, cached)."""
    found = launch_source(_rs_worker, world_size=RS_WORLD, timeout_s=60)
    return tuple(tuple(float(v) for v in f) for f in found)


def _number(value: Any) -> float:
    """An int, a float, a NumPy number or a 1-element tensor as a float; a string, a bool or
    anything else raises Hint (float() would take "6" and True)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    raise Hint(
        tr(
            "each rank's out holds numbers (floats or ints), found {value!r}, a {type}",
            value=value,
            type=type(value).__name__,
        )
    )


def _flat(answer: Any) -> list[float]:
    """[[0.0], [6.0], ...] or [0, 6, ...] (lists, tuples, tensors or NumPy arrays, at either
    level) -> [0.0, 6.0, ...]; anything else raises Hint."""
    if isinstance(answer, (torch.Tensor, np.ndarray)):
        answer = answer.tolist()
    if not isinstance(answer, (list, tuple)):
        raise Hint(
            tr(
                "give a list with one entry per rank (3 ranks), found {type_answer___name}",
                type_answer___name=type(answer).__name__,
            )
        )
    out = []
    for a in answer:
        if isinstance(a, (torch.Tensor, np.ndarray)):
            a = a.tolist()
        if isinstance(a, (list, tuple)) and len(a) == 1:
            a = a[0]
        if isinstance(a, (list, tuple)):
            raise Hint(tr("each rank keeps one element (its output has 1 element)"))
        out.append(_number(a))
    return out


@exercise(
    "04.1",
    "What reduce_scatter leaves on each rank",
    look=N_("section 4's table of what each collective leaves on each rank"),
    reveal=N_(
        "`dist.reduce_scatter_single(out, t)` on 3 ranks, which the judge runs through "
        "`launch_source`"
    ),
)
def reduce_scatter_per_rank(answer: Any) -> str:
    inputs = _rs_inputs()
    total = torch.stack(inputs).sum(0)  # the SUM over ranks, element by element
    truth = [v for held in _rs_truth() for v in held]  # rank i keeps element i
    if isinstance(answer, (torch.Tensor, np.ndarray)):
        answer = answer.tolist()
    if isinstance(answer, (list, tuple)) and len(answer) == RS_WORLD:
        rows = [list(a) if isinstance(a, (list, tuple)) else None for a in answer]
        if all(r is not None and len(r) == RS_WORLD for r in rows):
            if [[_number(x) for x in r] for r in rows] == [truth] * RS_WORLD:
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
    import os
    from unittest import mock

    with mock.patch.dict(os.environ):
        os.environ.pop("TORCH_ELASTIC_WORKER_IDENTICAL", None)  # the slow path, the default
        return _assign_all(node_sizes)


def _assign_all(node_sizes: list[int]) -> list[list[tuple[int, int]]]:
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


@exercise(
    "04.2",
    "torchrun's RANK when nodes differ",
    look=N_("section 1's excerpt of the agent's rank assignment (`base_global_rank`)"),
    reveal=N_(
        "`torchrun_ranks([4, 2, 4])`, the judge's run of the installed agent's rank assignment "
        "on an in-memory store"
    ),
)
def torchrun_rank(answer: Any) -> str:
    group_rank, local_rank = ASK
    truth = torchrun_ranks()[group_rank][local_rank]
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair (RANK, WORLD_SIZE), for example (3, 8)"))
    if any(isinstance(a, bool) or not isinstance(a, int) for a in answer):
        raise Hint(
            tr("RANK and WORLD_SIZE are whole numbers (ints), found {answer!r}", answer=answer)
        )
    rank, world = answer
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


# 04.3: DistributedSampler's indices, unshuffled, written by the reader
SAMPLES, REPLICAS = 10, 4  # the prompt's case
#: (n, world_size, drop_last) of the hidden cases: uneven splits, world size 3, drop_last,
#: n < world_size (padding longer than the data), an even split
HIDDEN_04_3 = [
    (10, 3, False),
    (10, 3, True),
    (7, 4, True),
    (2, 5, False),
    (3, 4, True),
    (8, 4, False),
]


def sampler_shards_no_shuffle(
    n: int = SAMPLES, world_size: int = REPLICAS, drop_last: bool = False
) -> list[list[int]]:
    """Each rank's indices from the installed DistributedSampler (shuffle=False)."""
    from torch.utils.data import DistributedSampler

    return [
        list(
            DistributedSampler(
                range(n), num_replicas=world_size, rank=r, shuffle=False, drop_last=drop_last
            )
        )
        for r in range(world_size)
    ]


@contextlib.contextmanager
def _no_sampler() -> Any:
    """While the reader's function runs, constructing or iterating any DistributedSampler (by
    whatever name, or through a helper that builds one) raises Hint."""
    from torch.utils.data.distributed import DistributedSampler

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Hint(tr("do not call DistributedSampler: compute its indices yourself"))

    saved = DistributedSampler.__init__, DistributedSampler.__iter__
    DistributedSampler.__init__, DistributedSampler.__iter__ = refuse, refuse
    try:
        yield
    finally:
        DistributedSampler.__init__, DistributedSampler.__iter__ = saved


def _shards(fn: Any, n: int, world_size: int, drop_last: bool) -> list[list[int]]:
    out = []
    for r in range(world_size):
        with _no_sampler():
            got = fn(n, world_size, r, drop_last)
            try:
                out.append([int(i) for i in got])
            except TypeError:
                raise Hint(
                    tr(
                        "sampler_indices must return a list of ints, found {type}",
                        type=type(got).__name__,
                    )
                ) from None
    return out


@exercise(
    "04.3",
    "DistributedSampler's shards, unshuffled",
    look=N_(
        "the sampler's __init__ (num_samples, total_size for drop_last and without) and, in "
        "__iter__, its padding and its slice"
    ),
    reveal=N_("`show_source(DistributedSampler.__iter__)` and `DistributedSampler.__init__`"),
)
def sampler_shards(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give the function itself, `sampler_indices`, not its result"))
    params = list(inspect.signature(answer).parameters)
    if len(params) != 4:
        raise Hint(
            tr(
                "the function takes (n, world_size, rank, drop_last); yours takes {params}",
                params=params,
            )
        )
    if "DistributedSampler" in _calls(answer):
        raise Hint(tr("do not call DistributedSampler: compute its indices yourself"))
    truth = sampler_shards_no_shuffle()
    found = _shards(answer, SAMPLES, REPLICAS, False)
    if found != truth:
        size = -(-SAMPLES // REPLICAS)
        if found == [list(range(r * size, min((r + 1) * size, SAMPLES))) for r in range(REPLICAS)]:
            raise Hint(
                tr(
                    "the sampler does not cut contiguous chunks: rank r takes every "
                    "num_replicas-th index starting at r"
                )
            )
        if found == [list(range(r, SAMPLES, REPLICAS)) for r in range(REPLICAS)]:
            raise Hint(
                tr(
                    "ranks 2 and 3 must hold as many indices as ranks 0 and 1: without "
                    "drop_last the sampler pads the list by repeating its first indices"
                )
            )
        if all(len(s) == size for s in found):
            raise Hint(tr("the sizes are right; which indices pad the list, and who gets them?"))
        raise Hint(
            tr(
                "on (n=10, world_size=4, drop_last=False) every rank gets ceil(10 / 4) = {size} "
                "indices; yours got {sizes}",
                size=size,
                sizes=[len(s) for s in found],
            )
        )
    for n, world, drop_last in HIDDEN_04_3:
        want = sampler_shards_no_shuffle(n, world, drop_last)
        got = _shards(answer, n, world, drop_last)
        if got != want:
            bad = [r for r in range(world) if got[r] != want[r]]
            if [len(g) for g in got] != [len(w) for w in want]:
                what = tr(
                    "ranks got {got} indices each, the sampler gives {want}",
                    got=[len(g) for g in got],
                    want=len(want[0]),
                )
            else:
                what = tr("the sizes are right, the indices of rank(s) {bad} differ", bad=bad)
            raise Hint(
                tr(
                    "the prompt's case passes, but a hidden case (n={n}, world_size={world}, "
                    "drop_last={drop_last}) fails: {what}",
                    n=n,
                    world=world,
                    drop_last=drop_last,
                    what=what,
                )
            )
    return tr(
        (
            "your indices match DistributedSampler on (10, 4) and on {k} hidden cases: without "
            "drop_last the list is padded to ceil(n / world_size) * world_size by repeating it "
            "from the start (more than once when world_size > 2n, e.g. n=2 on 5 ranks), with "
            "drop_last it is cut to "
            "floor(n / world_size) * world_size; then rank r takes indices[r::world_size]"
        ),
        k=len(HIDDEN_04_3),
    )


# 04.4: all_reduce written as reduce + broadcast, on 2 ranks


_calls = called_names


def _as_list(value: Any) -> Any:
    """A rank's result as a list of floats (a tensor or a list both work), else as it is."""
    try:
        return torch.as_tensor(value, dtype=torch.float64).tolist()
    except (TypeError, ValueError, RuntimeError):
        return value


_RULE_04 = "04.4 rule:"
#: the collectives and p2p calls a worker may not use for 04.4 (reduce and broadcast only)
_REFUSED_04 = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)


class OwnTensor:
    """What the judge passes to every rank: all ranks' inputs, pickled once, but each worker
    unpickles only ITS tensor (the rank comes from the RANK variable the launcher sets before
    it unpickles the arguments), so rank r's function never sees another rank's input.
    Unpickling also installs `_watch_04_4` in that worker."""

    def __init__(self, rows: list[Any], root: int) -> None:
        self.rows, self.root = rows, root

    def __reduce__(self) -> tuple:
        return (_own_tensor, (self.rows, self.root))


def _own_tensor(rows: list[Any], root: int) -> Any:
    import os

    import torch

    rank = int(os.environ["RANK"])
    _watch_04_4(root)
    return torch.tensor(rows[rank], dtype=torch.float64)


def _watch_04_4(root: int) -> None:
    """In a worker: dist.reduce must go to `root` and dist.broadcast come from it; every other
    collective or p2p call raises (by any name: the functions themselves are replaced), and so
    does every other collective op the dispatcher runs (`_push_dispatch_watch_04`)."""
    import inspect

    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    def watched(name: str, peer: str, original: Any) -> Any:
        sig = inspect.signature(original)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs).arguments
            got = bound.get(peer, bound.get("group_" + peer))
            if got != root:
                raise RuntimeError(f"{_RULE_04} {name} {peer} {got}")
            return original(*args, **kwargs)

        return call

    for name, peer in (("reduce", "dst"), ("broadcast", "src")):
        wrapped = watched(name, peer, getattr(c10d, name))
        setattr(dist, name, wrapped)
        setattr(c10d, name, wrapped)

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{_RULE_04} collective {name} -")

        return call

    for name in _REFUSED_04:
        if hasattr(c10d, name):
            setattr(dist, name, refuse(name))
            setattr(c10d, name, refuse(name))
    _push_dispatch_watch_04(root)


#: 04.4: the dispatcher's collective ops a worker may run: reduce and broadcast (their root is
#: checked), and the barrier the launcher's teardown runs after the worker returns
_ALLOWED_OPS_04 = {"c10d.reduce_": "dst", "c10d.broadcast_": "src", "c10d.barrier": None}


def _push_dispatch_watch_04(root: int) -> None:
    """In a worker: every collective op the dispatcher runs, whatever Python called it, raises
    but reduce and broadcast, and those too when their root is not `root` (`collective_guard`)."""

    def decide(name: str, func: Any, args: tuple, kwargs: dict) -> str | None:
        if name not in _ALLOWED_OPS_04:
            return f"{_RULE_04} collective {name} -"
        peer = _ALLOWED_OPS_04[name]
        if peer is None:
            return None
        names = [a.name for a in func._schema.arguments]
        got = kwargs.get("root_rank", dict(zip(names, args, strict=False)).get("root_rank"))
        return None if got == root else f"{_RULE_04} {func._opname.rstrip('_')} {peer} {got}"

    collective_guard(decide)


#: 04.4's cases: (what, root, per-rank inputs): the prompt's on 2 ranks with root 1, then a
#: hidden one on 3 ranks with root 2 and a 2 x 3 tensor per rank (one launch each)
CASES_04_4 = [
    (N_("2 ranks, root 1, inputs [[1, 10], [2, 20]]"), 1, [[1.0, 10.0], [2.0, 20.0]]),
    (
        N_("3 ranks, root 2, a 2 x 3 tensor per rank"),
        2,
        [[[float(r + i * 3 + j) for j in range(3)] for i in range(2)] for r in range(3)],
    ),
]


def _all_reduce_worker(rank: int, world_size: int, cases: list[list[Any]]) -> list[Any]:
    """04.4's truth on one rank: the installed dist.all_reduce (SUM) of each case's inputs, on a
    group of that case's ranks (0 .. len(inputs) - 1); None where this rank is not in it."""
    import torch.distributed as dist

    out = []
    for inputs in cases:
        group = dist.new_group(list(range(len(inputs))))  # every rank takes part in new_group
        if rank >= len(inputs):
            out.append(None)
            continue
        t = torch.tensor(inputs[rank], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        out.append(t.tolist())
    return out


@functools.cache
def _all_reduce_truth() -> tuple[list[Any], ...]:
    """Per case of CASES_04_4, what each of its ranks holds after the installed dist.all_reduce:
    one launch (cached) on as many ranks as the largest case, a smaller case on a subgroup."""
    cases = [inputs for _what, _root, inputs in CASES_04_4]
    world = max(len(inputs) for inputs in cases)
    try:
        found = launch_source(_all_reduce_worker, world_size=world, args=(cases,), timeout_s=60)
    except Exception as e:  # noqa: BLE001  the judge's own launch: not the reader's try
        raise Hint(
            tr(
                "the check's own all_reduce did not run ({error}): run the cell again",
                error=type(e).__name__,
            ),
            counts=False,
        ) from None
    return tuple([found[r][k] for r in range(len(inputs))] for k, inputs in enumerate(cases))


def _launch_hint_04(error: Exception, root: int) -> Hint:
    from helpers.launch import LaunchTimeout

    if isinstance(error, LaunchTimeout):
        return Hint(
            tr(
                "the ranks did not finish: a collective waits until every rank of the group "
                "calls it, so every rank must call both reduce and broadcast"
            )
        )
    line = next((ln for ln in str(error).splitlines() if _RULE_04 in ln), None)
    if line is None:
        lines = [ln for ln in str(error).strip().splitlines() if ln.strip()]
        return Hint(
            tr(
                "your code raised {error}: {message}",
                error=type(error).__name__,
                message=lines[0] if lines else "",
            )
        )
    name, what, value = line.split(_RULE_04, 1)[1].split()[:3]
    if name == "collective":
        if "." in what:  # an op the dispatch watch saw, not a function of dist
            return Hint(
                tr(
                    "your worker ran the collective op {op} without calling dist's functions "
                    "(a process group's own method, torch.ops.c10d or the functional "
                    "collectives); use only dist.reduce and dist.broadcast",
                    op=what,
                )
            )
        if what == "all_reduce":
            return Hint(
                tr("do not call dist.all_reduce: build it from dist.reduce and dist.broadcast")
            )
        return Hint(
            tr(
                "your worker called dist.{name}; use only dist.reduce and dist.broadcast",
                name=what,
            )
        )
    return Hint(
        tr(
            "your worker's {name} uses {peer}={value}, but the root is rank {root}: the sum "
            "goes to the root, and the root sends it out",
            name=name,
            peer=what,
            value=value,
            root=root,
        )
    )


@exercise(
    "04.4",
    "all_reduce from reduce and broadcast",
    look=N_(
        "section 4's check that all_reduce = reduce + broadcast: which rank holds what after "
        "each of the two"
    ),
    reveal=N_(
        "`my_all_reduce` in `solutions/nb04.py`: the sum to the root, then the root's copy "
        "out to every rank"
    ),
)
def all_reduce_from_reduce_broadcast(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give the worker function itself, `my_all_reduce`, not its result"))
    params = list(inspect.signature(answer).parameters)
    if len(params) != 4:
        raise Hint(
            tr(
                "the worker takes (rank, world_size, t, root); yours takes {params}",
                params=params,
            )
        )
    for k, (what, root, inputs) in enumerate(CASES_04_4):
        world_size = len(inputs)
        try:
            returned = launch_source(
                answer, world_size=world_size, args=(OwnTensor(inputs, root), root), timeout_s=60
            )
        except Hint:
            raise
        except Exception as e:  # noqa: BLE001  the reader's bug: a hint, not a traceback
            hint = _launch_hint_04(e, root)
            if k == 0:
                raise hint from None
            raise Hint(
                tr("a hidden case ({case}): {problem}", case=tr(what), problem=str(hint))
            ) from None
        found = [_as_list(f) for f in returned]
        held = _all_reduce_truth()[k]  # what dist.all_reduce leaves on each of these ranks
        truth = held[root]
        if found == held:
            continue
        if found[root] == truth and k > 0:
            problem = tr(
                "the root is right but other ranks are not: after reduce only the root is "
                "sure to hold the sum (the others' tensors are undefined); broadcast it from "
                "that rank"
            )
        elif found[root] == truth:
            problem = tr(
                (
                    "the root is right but the ranks return {found}: after reduce only the "
                    "root is sure to hold the sum (the others' tensors are undefined); "
                    "broadcast it from that rank"
                ),
                found=found,
            )
        elif all(f == found[0] for f in found):
            problem = tr(
                "every rank holds the same tensor {found0}, but not the sum: the broadcast "
                "copied the root's tensor before it held the sum; reduce with SUM to the "
                "root first",
                found0=found[0],
            )
        else:
            problem = tr(
                "the ranks return {found}, not the element-wise sum: reduce with SUM to the "
                "root, then broadcast from it; does your worker use its t and its root, and "
                "keep t's shape?",
                found=found,
            )
        if k == 0:
            raise Hint(problem)
        raise Hint(tr("a hidden case ({case}): {problem}", case=tr(what), problem=problem))
    return tr(
        "every rank returns what the installed dist.all_reduce (SUM) leaves with the same "
        "inputs on a group of as many ranks (for 2, a subgroup of one 3-rank launch; the check "
        "ran it too): on 2 ranks with root 1 and on 3 ranks with root 2 (a 2 x 3 tensor). "
        "reduce leaves the sum on the root only, and broadcast from the root then copies it to "
        "every rank"
    )
