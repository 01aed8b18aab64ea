"""All-reduce from scratch: naive, master, ring and pipelined ring on point-to-point messages.

Used by: notebook 05 (all-reduce from scratch), tests/test_allreduce.py, benchmarks/allreduce.py.
Runs inside a process group started by `helpers.launch.launch`: gloo on CPU, or NCCL with one
GPU per rank (tensors live on `helpers.launch.current_device()`; the tests and notebook 05 run
gloo only, the NCCL path is untested here). The pure parts (ring and pipeline simulations,
byte formulas, alpha-beta model, step text) need no process group.

    naive_allreduce(t)           every rank sends its whole tensor to every other rank, then sums
    master_allreduce(t)          everyone sends to rank 0, which sums and sends the result back
    ring_allreduce(t)            N chunks; reduce-scatter for N-1 steps, then all-gather for N-1
    pipelined_ring_allreduce(t)  the same ring, each chunk moving in `segments` pieces, each
                                 piece forwarded as soon as it has arrived (and been added)

All reduce in place, with `op` SUM or AVG, for every world size N >= 1, every number of
elements (also not a multiple of N, also zero), any shape, contiguous or not (tests/
test_allreduce.py checks N = 1..5 against `dist.all_reduce`). AVG of an integer tensor is
refused with a TypeError: the mean of integers is not an integer, and silently rounding (as a
floor or a truncation) would hide that; reduce with SUM and divide as you mean to.

Before any data moves, every call checks that all ranks agree on shape, dtype, op (and segment
count) with one `dist.all_gather` of a small int64 header; the error names each rank and what
it passed. Without the check, ranks that disagree post messages of different sizes, and on gloo
the receiving process aborts (SIGABRT; `unchecked_mismatch_worker`, tested).

Every point-to-point message is posted by one function, `p2p_post` (one
`dist.batch_isend_irecv` call, not waited for); `p2p_round` posts a round and waits for it,
and `count_p2p()` counts what passes through `p2p_post`: bytes and messages sent and received,
and steps (rounds of the ring schedule). It wraps our chokepoint rather than patching
`torch.distributed.isend`: `dist.P2POp` accepts only the genuine `dist.isend`/`dist.irecv`
(`torch.distributed.distributed_c10d._check_op`: `op not in [isend, irecv]`; tested), so a
patched function would break `batch_isend_irecv`. Under NCCL that call groups a rank's send
and receive (its `_coalescing_manager` branch), the pattern NCCL's user guide gives for a
send and receive that must progress together ("Point-to-point communication", docs.nvidia.com).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import html
import statistics
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from helpers.launch import current_device
from helpers.pictures import ring_svg

__all__ = [
    "ALGORITHMS",
    "naive_allreduce",
    "master_allreduce",
    "ring_allreduce",
    "pipelined_ring_allreduce",
    "resolve_algorithm",
    "p2p_post",
    "p2p_round",
    "P2PCount",
    "count_p2p",
    "check_agreement",
    "chunk_bounds",
    "ring_schedule",
    "expected_p2p",
    "alpha_beta_time",
    "RingStep",
    "RingSimulation",
    "simulate_ring",
    "PipelinedRingEvent",
    "simulate_pipelined_ring",
    "pipeline_timeline_text",
    "ring_step_html",
    "ring_step_text",
    "ring_step_viewer",
    "profile_ring",
    "algorithms_vs_library_worker",
    "summarize_vs_library",
    "library_facts_worker",
    "timing_worker",
    "profile_worker",
    "busbw_gbps",
    "unchecked_mismatch_worker",
]

_Number = int | float


# --------------------------------------------------------------------------- byte accounting


@dataclass
class P2PCount:
    """What one rank sent and received through `p2p_round` while a `count_p2p()` was open."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    steps: int = 0  # rounds: post sends and receives, then wait for all of them

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict (what a worker returns to the parent)."""
        return dict(self.__dict__)


_ACTIVE: list[P2PCount] = []  # open counters (nested counters all see every message)


@contextlib.contextmanager
def count_p2p() -> Iterator[P2PCount]:
    """Count the bytes, messages and steps that `p2p_round` moves on this rank inside the block."""
    counter = P2PCount()
    _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        _ACTIVE.remove(counter)


def p2p_post(
    sends: Sequence[tuple[torch.Tensor, int]],
    recvs: Sequence[tuple[torch.Tensor, int]],
    group: dist.ProcessGroup | None = None,
    tag: int = 0,
) -> list[Any]:
    """Post each send (tensor, peer) and receive (tensor, peer) without waiting; return the works.

    Peers are ranks inside `group`. Every point-to-point message of this module is posted here,
    which is what `count_p2p` observes (bytes and messages; steps are counted by the callers).
    The sends and receives go out in one `dist.batch_isend_irecv` call, which a backend that
    supports coalescing (NCCL) issues as one group; gloo gets one isend/irecv per op.
    """
    for counter in _ACTIVE:
        counter.messages_sent += len(sends)
        counter.messages_received += len(recvs)
        counter.bytes_sent += sum(t.numel() * t.element_size() for t, _ in sends)
        counter.bytes_received += sum(t.numel() * t.element_size() for t, _ in recvs)
    # empty messages are counted but not posted: both ends know the size, nothing to carry
    ops = [
        dist.P2POp(dist.isend, t, group=group, tag=tag, group_peer=p) for t, p in sends if t.numel()
    ]
    ops += [
        dist.P2POp(dist.irecv, t, group=group, tag=tag, group_peer=p) for t, p in recvs if t.numel()
    ]
    return [w for w in dist.batch_isend_irecv(ops) if w is not None] if ops else []


def _count_step() -> None:
    for counter in _ACTIVE:
        counter.steps += 1


def p2p_round(
    sends: Sequence[tuple[torch.Tensor, int]],
    recvs: Sequence[tuple[torch.Tensor, int]],
    group: dist.ProcessGroup | None = None,
) -> None:
    """One step: post the sends and receives with `p2p_post`, then wait for all of them.

    An empty round does nothing and is not a step.
    """
    if not sends and not recvs:
        return
    _count_step()
    for work in p2p_post(sends, recvs, group):
        work.wait()


# --------------------------------------------------------------------------- argument checks


def _op_name(op: Any) -> str:
    name = op.upper() if isinstance(op, str) else getattr(op, "name", str(op)).upper()
    if name not in ("SUM", "AVG"):
        raise ValueError(f"op must be ReduceOp.SUM or ReduceOp.AVG (or 'sum'/'avg'), got {op!r}")
    return name


_HEADER_DIMS = 12  # dims carried by the agreement header; more are summarized by numel
_DTYPE_NAMES = sorted({str(v) for v in vars(torch).values() if isinstance(v, torch.dtype)})
_OPS = ("SUM", "AVG")


def check_agreement(
    tensor: torch.Tensor,
    op: Any = "sum",
    group: dist.ProcessGroup | None = None,
    segments: int = 0,
) -> None:
    """Raise ValueError on every rank unless all ranks pass the same shape, dtype and op.

    One `dist.all_gather` of a small int64 header (ndim, numel, dtype, op, segments, dims) runs
    first, so a disagreement is reported before any tensor data moves, naming every rank and
    what it passed. `segments` is the pipelined ring's segment count (0: not pipelined).
    """
    dims = list(tensor.shape)[:_HEADER_DIMS]
    header = [tensor.dim(), tensor.numel(), _DTYPE_NAMES.index(str(tensor.dtype))]
    header += [_OPS.index(_op_name(op)), segments] + dims + [-1] * (_HEADER_DIMS - len(dims))
    mine = torch.tensor(header, dtype=torch.int64, device=current_device())  # (5 + 12,)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    rows = [h.tolist() for h in everyone]
    if any(row != rows[0] for row in rows):
        described = "; ".join(f"rank {r}: {_describe(row)}" for r, row in enumerate(rows))
        raise ValueError(
            "all-reduce inputs disagree across ranks (every rank must pass the same shape, "
            f"dtype and op; nothing was sent): {described}"
        )


def _describe(header: list[int]) -> str:
    ndim, numel, dtype, op, segments = header[:5]
    dims = [str(d) for d in header[5 : 5 + min(ndim, _HEADER_DIMS)]]
    if ndim > _HEADER_DIMS:
        dims.append(f"... ({numel} elements)")
    shape = "(" + ", ".join(dims) + ("," if ndim == 1 else "") + ")"
    text = f"shape {shape} {_DTYPE_NAMES[dtype].removeprefix('torch.')} {_OPS[op]}"
    return text + (f" in {segments} segments" if segments else "")


def _prepare(
    tensor: torch.Tensor,
    op: Any,
    group: dist.ProcessGroup | None,
    check: bool,
    segments: int = 0,
):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if not dist.is_initialized():
        raise RuntimeError("no process group: call this inside helpers.launch.launch(...)")
    name = _op_name(op)
    if check:
        check_agreement(tensor, name, group, segments)
    if name == "AVG" and not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(
            f"AVG of a {tensor.dtype} tensor is refused: the mean of integers is not an "
            "integer. Use ReduceOp.SUM and divide (floor or true division) as you intend."
        )
    # (numel,) view of the data, or a contiguous copy that is written back at the end
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    return name, flat, dist.get_rank(group), dist.get_world_size(group)


def _finish(tensor: torch.Tensor, flat: torch.Tensor, name: str, world_size: int) -> torch.Tensor:
    if name == "AVG":
        flat.div_(world_size)
    if not tensor.is_contiguous():  # flat was a contiguous copy: write the result back
        tensor.copy_(flat.view(tensor.shape))
    return tensor


# --------------------------------------------------------------------------- the algorithms


def naive_allreduce(
    tensor: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: dist.ProcessGroup | None = None,
    check: bool = True,
) -> torch.Tensor:
    """All-reduce in place: every rank sends its whole tensor to every other rank, then sums.

    One step; each rank sends and receives (N-1) * nbytes. Sums in rank order on every rank,
    so all ranks end with bit-identical results.
    """
    name, flat, rank, world_size = _prepare(tensor, op, group, check)
    if world_size > 1 and flat.numel() > 0:
        peers = [r for r in range(world_size) if r != rank]
        inbox = {r: torch.empty_like(flat) for r in peers}  # (numel,) each
        p2p_round([(flat, r) for r in peers], [(inbox[r], r) for r in peers], group)
        inbox[rank] = flat.clone()
        flat.copy_(inbox[0])
        for r in range(1, world_size):  # rank order: the same float rounding everywhere
            flat.add_(inbox[r])
    return _finish(tensor, flat, name, world_size)


def master_allreduce(
    tensor: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: dist.ProcessGroup | None = None,
    check: bool = True,
) -> torch.Tensor:
    """All-reduce in place through rank 0: gather to rank 0, sum there, send the result back.

    Two steps; rank 0 receives (N-1) * nbytes and sends (N-1) * nbytes, every other rank sends
    and receives nbytes once: the master's link carries N-1 times what a worker's does.
    """
    name, flat, rank, world_size = _prepare(tensor, op, group, check)
    if world_size > 1 and flat.numel() > 0:
        if rank == 0:
            inbox = [torch.empty_like(flat) for _ in range(1, world_size)]  # (numel,) each
            p2p_round([], [(buf, r) for r, buf in enumerate(inbox, start=1)], group)
            for buf in inbox:
                flat.add_(buf)
            p2p_round([(flat, r) for r in range(1, world_size)], [], group)
        else:
            p2p_round([(flat, 0)], [], group)
            p2p_round([], [(flat, 0)], group)
    return _finish(tensor, flat, name, world_size)


def chunk_bounds(numel: int, world_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each of the `world_size` ring chunks, as `torch.tensor_split` cuts them.

    The first `numel % world_size` chunks hold one element more; chunks may be empty.
    """
    base, extra = divmod(numel, world_size)
    bounds, start = [], 0
    for i in range(world_size):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(rank: int, world_size: int, step: int) -> tuple[str, int, int]:
    """(phase, chunk this rank sends to rank+1, chunk it receives from rank-1) at `step`.

    Steps 0..N-2 are the reduce-scatter (the received chunk is added to ours), steps
    N-1..2N-3 the all-gather (the received chunk, now complete, replaces ours). After the
    reduce-scatter rank r holds the complete chunk (r+1) % N.
    """
    n = world_size
    if not 0 <= step < 2 * (n - 1):
        raise ValueError(f"step must be in [0, {2 * (n - 1)}) for world_size {n}, got {step}")
    if step < n - 1:
        return "reduce-scatter", (rank - step) % n, (rank - step - 1) % n
    s = step - (n - 1)
    return "all-gather", (rank + 1 - s) % n, (rank - s) % n


_RECV_BUFFERS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _recv_buffer(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A (numel,) receive buffer kept between calls (per dtype and device), so that repeated
    calls reuse one allocation instead of asking the allocator for a new multi-MiB buffer."""
    buf = _RECV_BUFFERS.get((dtype, device))
    if buf is None or buf.numel() < numel:
        buf = _RECV_BUFFERS[(dtype, device)] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel]


def ring_allreduce(
    tensor: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: dist.ProcessGroup | None = None,
    check: bool = True,
) -> torch.Tensor:
    """All-reduce in place on a ring: reduce-scatter (N-1 steps), then all-gather (N-1 steps).

    The tensor is cut into N chunks (`chunk_bounds`); at each step every rank sends one chunk
    to its right neighbour and receives one from its left. Each rank sends about
    2(N-1)/N * nbytes, whatever N: exactly the sum of the chunks `ring_schedule` names.
    """
    name, flat, rank, world_size = _prepare(tensor, op, group, check)
    if world_size > 1 and flat.numel() > 0:
        chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), world_size)]
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        inbox = _recv_buffer(chunks[0].numel(), flat.dtype, flat.device)  # (largest chunk,)
        for step in range(2 * (world_size - 1)):
            phase, send_i, recv_i = ring_schedule(rank, world_size, step)
            if phase == "reduce-scatter":
                buf = inbox[: chunks[recv_i].numel()]
                p2p_round([(chunks[send_i], right)], [(buf, left)], group)
                chunks[recv_i].add_(buf)
            else:  # the received chunk is final: receive straight into place
                p2p_round([(chunks[send_i], right)], [(chunks[recv_i], left)], group)
    return _finish(tensor, flat, name, world_size)


_PROFILES: list[dict[str, float]] = []  # open `profile_ring()` blocks


@contextlib.contextmanager
def profile_ring() -> Iterator[dict[str, float]]:
    """Seconds `pipelined_ring_allreduce` spends on this rank waiting (for receives, and for
    its sends at the end), adding, and posting later steps' messages, summed over the calls
    made inside the block (for benchmarks)."""
    totals = {"wait_s": 0.0, "add_s": 0.0, "post_s": 0.0}
    _PROFILES.append(totals)
    try:
        yield totals
    finally:
        _PROFILES.remove(totals)


def _timed(key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), its time added to `key` of every open `profile_ring()` block."""
    if not _PROFILES:
        return fn(*args)
    t0 = time.perf_counter()
    out = fn(*args)
    for totals in _PROFILES:
        totals[key] += time.perf_counter() - t0
    return out


def _wait_all(works: Sequence[Any]) -> None:
    for work in works:
        work.wait()


def pipelined_ring_allreduce(
    tensor: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: dist.ProcessGroup | None = None,
    segments: int = 4,
    check: bool = True,
    receive_ahead: bool | None = None,
) -> torch.Tensor:
    """The ring all-reduce with each chunk cut into `segments` segments that move independently.

    Same schedule, results, errors and bytes as `ring_allreduce`, in 2(N-1)*segments messages
    each way. Segment k of the chunk a rank receives at step s is the segment k it sends at step
    s+1, so it is forwarded as soon as it has arrived (and, in the reduce-scatter, been added):
    the next segment's transfer runs while this one is added. Messages are posted in the same
    order on every rank. `receive_ahead` (default: on gloo only) posts each step's receives one
    step early, on their own; otherwise each receive is posted in one `p2p_post` with its
    matching send, as `p2p_round` does (under NCCL, `batch_isend_irecv` groups the two).
    """
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ValueError(f"segments must be an int >= 1, got {segments!r}")
    name, flat, rank, world_size = _prepare(tensor, op, group, check, segments)
    if world_size > 1 and flat.numel() > 0:
        chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), world_size)]
        pieces = [[c[a:b] for a, b in chunk_bounds(c.numel(), segments)] for c in chunks]
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        biggest = chunks[0].numel()
        buffer = _recv_buffer(2 * biggest, flat.dtype, flat.device)  # (2 * largest chunk,)
        inboxes = [  # two receive areas: step s+1 arrives while step s is still being added
            [buffer[i * biggest :][a:b] for a, b in chunk_bounds(biggest, segments)]
            for i in (0, 1)
        ]
        n_steps = 2 * (world_size - 1)
        ahead = dist.get_backend(group) == "gloo" if receive_ahead is None else receive_ahead

        def post(step: int, k: int, send: bool, recv: bool) -> list[Any]:  # segment k of `step`
            phase, send_i, recv_i = ring_schedule(rank, world_size, step)
            own = pieces[recv_i][k]
            into = inboxes[step % 2][k][: own.numel()] if phase == "reduce-scatter" else own
            sends, recvs = [(pieces[send_i][k], right)] * send, [(into, left)] * recv
            return _timed("post_s", p2p_post, sends, recvs, group, step * segments + k)

        sent: list[Any] = []
        receiving = {}  # (step, segment) -> its posted works, the receive last (p2p_post)
        if ahead:  # the receives of steps 0 and 1 (n_steps >= 2)
            receiving = {(s, k): post(s, k, False, True) for s in (0, 1) for k in range(segments)}
        for k in range(segments):  # step 0: every segment is ready to leave
            if ahead:
                sent += post(0, k, True, False)
            else:
                receiving[0, k] = post(0, k, True, True)
        for step in range(n_steps):
            _count_step()
            phase, _, recv_i = ring_schedule(rank, world_size, step)
            for k in range(segments):
                if ahead and 0 < step < n_steps - 1:  # this area was added at step - 1
                    receiving[step + 1, k] = post(step + 1, k, False, True)
                works, own = receiving.pop((step, k)), pieces[recv_i][k]
                if own.numel():  # an empty receive is not posted
                    _timed("wait_s", works.pop().wait)
                sent += works
                if phase == "reduce-scatter":
                    _timed("add_s", own.add_, inboxes[step % 2][k][: own.numel()])
                if step + 1 < n_steps:  # forward it at once: step s+1 sends segment k
                    works = post(step + 1, k, True, not ahead)
                    if ahead:
                        sent += works
                    else:
                        receiving[step + 1, k] = works
        _timed("wait_s", _wait_all, sent)
    return _finish(tensor, flat, name, world_size)


ALGORITHMS = {
    "naive": naive_allreduce,
    "master": master_allreduce,
    "ring": ring_allreduce,
    "pipelined": pipelined_ring_allreduce,
}


def resolve_algorithm(name: str) -> Callable[..., torch.Tensor]:
    """An `ALGORITHMS` name, "pipelined:K" for the pipelined ring with K segments, or
    "pipelined:K:paired" for it with each receive posted together with its send."""
    base, _, rest = name.partition(":")
    segments, _, variant = rest.partition(":")
    if base not in ALGORITHMS or (rest and base != "pipelined") or variant not in ("", "paired"):
        raise ValueError(f"unknown algorithm {name!r}: use one of {sorted(ALGORITHMS)}")
    if not rest:
        return ALGORITHMS[base]
    kwargs: dict[str, Any] = {"segments": int(segments)}
    if variant:
        kwargs["receive_ahead"] = False
    return functools.partial(pipelined_ring_allreduce, **kwargs)


# --------------------------------------------------------------------------- cost model


def expected_p2p(
    algorithm: str, numel: int, element_size: int, world_size: int, rank: int
) -> dict[str, int]:
    """The exact bytes sent/received and steps of `algorithm` on `rank` (what count_p2p sees)."""
    nbytes, n = numel * element_size, world_size
    if n == 1 or numel == 0:
        return {"bytes_sent": 0, "bytes_received": 0, "steps": 0}
    if algorithm == "naive":
        return {"bytes_sent": (n - 1) * nbytes, "bytes_received": (n - 1) * nbytes, "steps": 1}
    if algorithm == "master":
        per = (n - 1) * nbytes if rank == 0 else nbytes
        return {"bytes_sent": per, "bytes_received": per, "steps": 2}
    if algorithm == "ring" or algorithm.partition(":")[0] == "pipelined":
        sizes = [(b - a) * element_size for a, b in chunk_bounds(numel, n)]
        sent = sum(sizes[ring_schedule(rank, n, s)[1]] for s in range(2 * (n - 1)))
        received = sum(sizes[ring_schedule(rank, n, s)[2]] for s in range(2 * (n - 1)))
        return {"bytes_sent": sent, "bytes_received": received, "steps": 2 * (n - 1)}
    raise ValueError(f"unknown algorithm {algorithm!r}: use one of {sorted(ALGORITHMS)}")


def alpha_beta_time(
    algorithm: str, nbytes: float, world_size: int, alpha: float, beta: float
) -> float:
    """Modelled seconds: alpha per message, beta per byte through the busiest rank's link.

    The alpha-beta (latency-bandwidth) model of Thakur, Rabenseifner and Gropp, "Optimization
    of collective communication operations in MPICH" (IJHPCA 2005), with one port per rank: it
    sends one message at a time and can receive one meanwhile, so a step costs its longer
    direction (naive's one step sends N-1 messages in turn; master's rank 0 receives N-1, then
    sends N-1; each ring step carries one message each way):
    naive (N-1)(alpha + n beta); master 2(N-1)(alpha + n beta) at rank 0;
    ring 2(N-1) alpha + 2(N-1)/N n beta.
    """
    n = world_size
    if n == 1:
        return 0.0
    if algorithm == "naive":
        return (n - 1) * (alpha + nbytes * beta)
    if algorithm == "master":
        return 2 * (n - 1) * (alpha + nbytes * beta)
    if algorithm == "ring":
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta
    raise ValueError(f"unknown algorithm {algorithm!r}: use one of {sorted(ALGORITHMS)}")


def busbw_gbps(nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth of an all-reduce, in GB/s (1e9 bytes): algbw * 2(N-1)/N, the definition in
    nccl-tests' doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests)."""
    algbw = nbytes / seconds / 1e9
    return algbw * 2 * (world_size - 1) / world_size


# --------------------------------------------------------------------------- ring simulation


@dataclass(frozen=True)
class RingStep:
    """The state of every rank after one step of the simulated ring (step 0: the inputs)."""

    step: int
    phase: str  # "start", "reduce-scatter" or "all-gather"
    transfers: tuple[tuple[int, int, int], ...]  # (from rank, to rank, chunk) this step
    owners: tuple[tuple[frozenset[int], ...], ...]  # [rank][chunk]: ranks summed in it
    values: tuple[tuple[tuple[_Number, ...], ...], ...]  # [rank][chunk]: the partial sums


@dataclass(frozen=True)
class RingSimulation:
    """A ring all-reduce computed in one process: every step of every rank, for teaching."""

    world_size: int
    bounds: tuple[tuple[int, int], ...]
    steps: tuple[RingStep, ...] = field(repr=False)

    def result(self, rank: int) -> list[_Number]:
        """Rank `rank`'s tensor after the last step, flattened."""
        return [v for chunk in self.steps[-1].values[rank] for v in chunk]


def simulate_ring(inputs: Sequence[Sequence[_Number]]) -> RingSimulation:
    """Run the ring all-reduce (SUM) on `inputs[rank]` lists in one process, step by step.

    Uses the same `chunk_bounds` and `ring_schedule` as `ring_allreduce`.
    """
    n = len(inputs)
    if n < 1:
        raise ValueError("simulate_ring needs at least one rank's input")
    lengths = [len(x) for x in inputs]
    if len(set(lengths)) != 1:
        described = ", ".join(f"rank {r}: {m}" for r, m in enumerate(lengths))
        raise ValueError(f"every rank needs the same number of elements, got {described}")
    bounds = tuple(chunk_bounds(lengths[0], n))
    values = [[tuple(x[a:b]) for a, b in bounds] for x in inputs]
    owners = [[frozenset([r]) for _ in bounds] for r in range(n)]
    steps = [RingStep(0, "start", (), _freeze(owners), _freeze(values))]
    for step in range(2 * (n - 1)):
        plan = [ring_schedule(r, n, step) for r in range(n)]
        sent = [(values[r][plan[r][1]], owners[r][plan[r][1]]) for r in range(n)]  # snapshot
        for r in range(n):
            phase, _, recv_i = plan[r]
            got_values, got_owners = sent[(r - 1) % n]
            if phase == "reduce-scatter":
                mine = values[r][recv_i]
                values[r][recv_i] = tuple(a + b for a, b in zip(mine, got_values, strict=True))
                owners[r][recv_i] = owners[r][recv_i] | got_owners
            else:
                values[r][recv_i], owners[r][recv_i] = got_values, got_owners
        transfers = tuple((r, (r + 1) % n, plan[r][1]) for r in range(n))
        steps.append(RingStep(step + 1, plan[0][0], transfers, _freeze(owners), _freeze(values)))
    return RingSimulation(n, bounds, tuple(steps))


def _freeze(rows: list[list[Any]]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(row) for row in rows)


def _fmt_number(v: _Number) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def ring_step_text(sim: RingSimulation, step: int) -> str:
    """A plain-text picture of `sim` after `step`: who sent what, who owns what, partial sums.

    Pure function of its arguments: the step viewer shows it, a cell can print it, a test can
    compare it.
    """
    last = len(sim.steps) - 1
    if not 0 <= step <= last:
        raise ValueError(f"step must be in [0, {last}], got {step}")
    st, n = sim.steps[step], sim.world_size
    if st.phase == "start":
        head = f"step 0 of {last}: the inputs, cut into {n} chunks"
        what = "(nothing sent yet)"
    else:
        k = st.step if st.phase == "reduce-scatter" else st.step - (n - 1)
        verb = "adds it to its own" if st.phase == "reduce-scatter" else "keeps it (complete)"
        head = f"step {st.step} of {last}: {st.phase} {k} of {n - 1}; each receiver {verb}"
        what = "   ".join(f"r{a} -c{c}-> r{b}" for a, b, c in st.transfers)
    width = max(
        [9]
        + [len(_owners_label(o, n)) for row in st.owners for o in row]
        + [len(_values_label(v)) for row in st.values for v in row]
    )
    cols = "".join(f"chunk {c}".ljust(width + 2) for c in range(n))
    lines = [head, "sends: " + what, "ranks summed in each chunk (* = all ranks)"]
    lines.append("        " + cols.rstrip())
    for r in range(n):
        cells = "".join(_owners_label(o, n).ljust(width + 2) for o in st.owners[r])
        lines.append(f"rank {r}  {cells}".rstrip())
    lines += ["partial sums in each chunk", "        " + cols.rstrip()]
    for r in range(n):
        cells = "".join(_values_label(v).ljust(width + 2) for v in st.values[r])
        lines.append(f"rank {r}  {cells}".rstrip())
    return "\n".join(lines)


def _owners_label(owners: frozenset[int], n: int) -> str:
    label = "+".join(str(r) for r in sorted(owners))
    return label + ("*" if len(owners) == n else "")


def _values_label(values: tuple[_Number, ...]) -> str:
    return "[" + ", ".join(_fmt_number(v) for v in values) + "]"


def ring_step_html(sim: RingSimulation, step: int) -> str:
    """What `ring_step_viewer` shows at `step`: the picture (`helpers.pictures.ring_svg`) next to
    the text (`ring_step_text`), in `<div class="ring-step" data-step="...">`."""
    return (
        f'<div class="ring-step" data-step="{step}" style="display:flex;gap:1em;'
        f'align-items:flex-start">{ring_svg(sim.steps, step)}'
        f'<pre class="ring-step-text">{html.escape(ring_step_text(sim, step))}</pre></div>'
    )


def ring_step_viewer(sim: RingSimulation) -> Any:
    """A slider over the steps of `sim` drawn in the browser (`helpers.viewers.RingViewer`): each
    step's picture (`helpers.pictures.ring_svg`) and text (`ring_step_text`), computed here once.

    It moves in JupyterLab and in the static book alike; its plain-text twin is step 0's text.
    DOM hooks for browser tests: `.ring-step-view`, the slider `.ring-step-slider` (an
    `input[type=range]`, readout `.ring-step-readout`); inside the view `svg.ring-svg[data-step]`,
    one `g.transfer[data-from][data-chunk][data-to]` per arrow and `pre.ring-step-text` change
    with the slider.
    """
    from helpers.viewers import RingViewer

    steps = [
        {"step": i, "svg": ring_svg(sim.steps, i), "text": ring_step_text(sim, i)}
        for i in range(len(sim.steps))
    ]
    return RingViewer(steps, text=steps[0]["text"])


@dataclass(frozen=True)
class PipelinedRingEvent:
    """One busy interval of one rank in `simulate_pipelined_ring` (times in model units)."""

    rank: int
    kind: str  # "send" (on the rank's link to its right), "recv" (from its left) or "add"
    step: int
    segment: int
    chunk: int
    start: float
    end: float


def simulate_pipelined_ring(
    world_size: int, segments: int, chunk_send: float = 6.0, chunk_add: float = 3.0
) -> list[PipelinedRingEvent]:
    """When each send, receive and add of the ring happens if chunks move in `segments` pieces.

    A model, not a measurement: each rank's link to its right carries one segment at a time
    (`chunk_send / segments` each, in (step, segment) order), its adder adds one at a time
    (`chunk_add / segments` each), and segment k of step s+1 can leave once segment k of step s
    has arrived and, in the reduce-scatter, been added: exactly the dependencies of
    `pipelined_ring_allreduce`. With `segments=1` it is `ring_allreduce`'s step-by-step
    schedule. Chunk numbers come from `ring_schedule`.
    """
    n, k_max = world_size, segments
    if n < 2 or k_max < 1:
        raise ValueError(f"need world_size >= 2 and segments >= 1, got {n} and {k_max}")
    t_send, t_add = chunk_send / k_max, chunk_add / k_max
    ready = [0.0] * k_max  # when segment k of the current step may leave
    link_free = adder_free = 0.0
    timing = []  # (step, segment, kind, start, end); every rank has the same times
    for step in range(2 * (n - 1)):
        phase = ring_schedule(0, n, step)[0]
        for k in range(k_max):
            start = max(ready[k], link_free)
            link_free = start + t_send  # the left neighbour's send arrives as ours leaves
            timing += [(step, k, "send", start, link_free), (step, k, "recv", start, link_free)]
            ready[k] = link_free
            if phase == "reduce-scatter":
                a0 = max(link_free, adder_free)
                adder_free = ready[k] = a0 + t_add
                timing.append((step, k, "add", a0, adder_free))
    events = []
    for rank in range(n):
        for step, k, kind, start, end in timing:
            _, send_i, recv_i = ring_schedule(rank, n, step)
            chunk = send_i if kind == "send" else recv_i
            events.append(PipelinedRingEvent(rank, kind, step, k, chunk, start, end))
    return events


def pipeline_timeline_text(events: Sequence[PipelinedRingEvent], unit: float = 1.0) -> str:
    """A text Gantt chart of `simulate_pipelined_ring` events: one row per rank and kind, one column
    per `unit` of time, the chunk number where busy and '.' where idle."""
    end = max(e.end for e in events)
    width = int(round(end / unit))
    ranks = sorted({e.rank for e in events})
    lines = ["         " + "".join(str(t // 10 % 10) if t % 10 == 0 else " " for t in range(width))]
    for rank in ranks:
        for kind in ("send", "recv", "add"):
            row = ["."] * width
            for e in events:
                if e.rank == rank and e.kind == kind:
                    for t in range(int(round(e.start / unit)), int(round(e.end / unit))):
                        row[t] = str(e.chunk)
            lines.append(f"r{rank} {kind:<4}  " + "".join(row))
    return "\n".join(lines)


# --------------------------------------------------------------------------- workers


def _make_input(numel: int, dtype: str, op: str, seed: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s input for a case: the same (numel, dtype, op) gives the same tensor to every
    algorithm, so their results can be compared bit for bit."""
    key = zlib.crc32(f"{numel}/{dtype}/{op}".encode())
    gen = torch.Generator().manual_seed((seed * 7919 + key) * 31 + rank)
    dt = getattr(torch, dtype)
    if dt.is_floating_point:
        x = torch.randn(numel, generator=gen, dtype=dt)
    else:
        x = torch.randint(-1000, 1000, (numel,), generator=gen, dtype=dt)
    return x.to(current_device())


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def _reference(x: torch.Tensor, op: str) -> torch.Tensor:
    """PyTorch's own all-reduce of a copy of `x` with the same op (gloo and NCCL both take AVG
    of floating tensors on 2.13; `library_facts_worker` checks it for gloo)."""
    ref = x.clone()
    dist.all_reduce(ref, op=getattr(dist.ReduceOp, op))
    return ref


def algorithms_vs_library_worker(
    rank: int,
    world_size: int,
    cases: Sequence[tuple[str | Callable[..., Any], int, str, str]],
    seed: int = 0,
    extras: bool = False,
) -> dict[str, Any]:
    """Run each (algorithm, numel, dtype, op) case and `dist.all_reduce` on the same input.

    An algorithm is a name as `resolve_algorithm` takes it ("ring", "pipelined:3", ...) or the
    function itself, called as `algorithm(x, op=op)` (a reader's copy typed in the notebook:
    `launch` writes it out for the workers); cases with the same (numel, dtype, op) get the
    same input. Returns {"cases": [dict per case: max_abs_diff, equal, close, digest, the P2P
    counts]}; with `extras`, also what a shape mismatch, a segment-count mismatch, an integer
    AVG, a 2-D and a non-contiguous input do.
    """
    out: dict[str, Any] = {"cases": [], "backend": dist.get_backend()}
    for algorithm, numel, dtype, op in cases:
        run = resolve_algorithm(algorithm) if isinstance(algorithm, str) else algorithm
        x = _make_input(numel, dtype, op, seed, rank)
        ref = _reference(x, op)
        with count_p2p() as counter:
            run(x, op=op)
        diff = (x.double() - ref.double()).abs().max().item() if numel else 0.0
        out["cases"].append(
            {
                "algorithm": getattr(algorithm, "__name__", str(algorithm)),
                "numel": numel,
                "dtype": dtype,
                "op": op,
                "max_abs_diff": diff,
                "equal": bool(torch.equal(x, ref)),
                "close": bool(torch.allclose(x, ref, rtol=1e-5, atol=1e-6)),
                "digest": _digest(x),
                **counter.as_dict(),
            }
        )
    if extras:
        out.update(_extras(rank, world_size))
    return out


def unchecked_mismatch_worker(rank: int, world_size: int) -> list[float]:
    """Rank r passes 5 + r elements to `ring_allreduce` with the agreement check turned off:
    what the check protects against (on gloo the process receiving too much data aborts)."""
    x = torch.ones(5 + rank, device=current_device())
    ring_allreduce(x, check=False)
    return x.tolist()


def _extras(rank: int, world_size: int) -> dict[str, Any]:
    """Failure modes and odd layouts, each followed by a working call (nothing hung)."""
    dev = current_device()
    res: dict[str, Any] = {"mismatch": {}, "int_avg": {}, "layouts": {}}
    for name, fn in ALGORITHMS.items():
        numel = 5 + (rank == world_size - 1)  # the last rank disagrees (when N > 1)
        try:
            fn(torch.ones(numel, device=dev))
            res["mismatch"][name] = None
        except ValueError as err:
            res["mismatch"][name] = str(err)
        try:
            fn(torch.ones(3, dtype=torch.int64, device=dev), op="avg")
            res["int_avg"][name] = None
        except TypeError as err:
            res["int_avg"][name] = str(err)
        base = torch.arange(24.0, device=dev).reshape(4, 6) * (rank + 1)
        for layout, x in (("2d", base.clone()), ("transposed", base.clone().t())):
            ref = _reference(x, "SUM")
            fn(x)
            res["layouts"][f"{name}/{layout}"] = bool(torch.equal(x, ref))
    try:  # the pipelined ring's segment count must agree too
        pipelined_ring_allreduce(torch.ones(5, device=dev), segments=2 + (rank == world_size - 1))
        res["segments_mismatch"] = None
    except ValueError as err:
        res["segments_mismatch"] = str(err)
    return res


def library_facts_worker(rank: int, world_size: int) -> dict[str, Any]:
    """What the library's own collectives do on this backend: AVG of a float and of an integer
    tensor, and a reduce-scatter (`reduce_scatter_single`) of ones. Plain data back."""
    dev = current_device()
    out: dict[str, Any] = {"backend": dist.get_backend()}
    x = torch.full((3,), float(rank + 1), device=dev)  # rank r holds r + 1
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    out["avg_float32"] = x.tolist()
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int64, device=dev), op=dist.ReduceOp.AVG)
        out["avg_int64_error"] = None
    except RuntimeError as err:
        out["avg_int64_error"] = str(err).splitlines()[0]
    part = torch.empty(2, device=dev)
    dist.reduce_scatter_single(part, torch.ones(2 * world_size, device=dev))
    out["reduce_scatter"] = part.tolist()
    return out


def summarize_vs_library(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fold a launch of `algorithms_vs_library_worker` (one dict per rank) into facts to print."""
    per_case = list(zip(*(r["cases"] for r in results), strict=True))
    return {
        "world_size": len(results),
        "cases": len(per_case),
        "all_close": all(x["close"] for case in per_case for x in case),
        "ints_exact": all(x["equal"] for case in per_case for x in case if x["dtype"] == "int64"),
        "ranks_identical": all(len({x["digest"] for x in case}) == 1 for case in per_case),
        "max_abs_diff_below_1e-5": max(
            (x["max_abs_diff"] for case in per_case for x in case), default=0.0
        )
        < 1e-5,
    }


def _sync() -> None:
    if current_device().type == "cuda":
        torch.cuda.synchronize()


def _timed_fn(name: str, check: bool) -> Callable[[torch.Tensor], Any]:
    """ "builtin" -> `dist.all_reduce`; an algorithm's name -> it, with or without the check."""
    if name == "builtin":
        return dist.all_reduce
    return functools.partial(resolve_algorithm(name), check=check)


def timing_worker(
    rank: int,
    world_size: int,
    sizes_bytes: Sequence[int],
    algorithms: Sequence[str] = ("builtin", "ring"),
    repeats: int | Sequence[int] = 10,
    warmup: int = 2,
    threads: int = 1,
    check: bool = True,
) -> dict[str, Any]:
    """Time float32 all-reduces of each size, alternating algorithms within each repetition.

    "builtin" is `dist.all_reduce` on the same process group. Each sample is the slowest rank's
    time of one call started after a barrier; returns per-algorithm lists of medians (seconds)
    and the raw samples, identical on every rank.
    """
    torch.set_num_threads(threads)
    reps = [repeats] * len(sizes_bytes) if isinstance(repeats, int) else list(repeats)
    fns = {name: _timed_fn(name, check) for name in algorithms}
    local: dict[str, list[list[float]]] = {name: [] for name in algorithms}
    for size, n_rep in zip(sizes_bytes, reps, strict=True):
        x = torch.empty(size // 4, dtype=torch.float32, device=current_device())
        samples: dict[str, list[float]] = {name: [] for name in algorithms}
        for i in range(warmup + n_rep):
            for name in algorithms if i % 2 == 0 else list(reversed(algorithms)):
                x.fill_(1.0)
                _sync()
                dist.barrier()
                t0 = time.perf_counter()
                fns[name](x)
                _sync()
                if i >= warmup:
                    samples[name].append(time.perf_counter() - t0)
        for name in algorithms:
            local[name].append(samples[name])
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, local)
    raw = {
        name: [
            [max(ranks) for ranks in zip(*(e[name][k] for e in everyone), strict=True)]
            for k in range(len(sizes_bytes))
        ]
        for name in algorithms
    }
    medians = {name: [statistics.median(s) for s in raw[name]] for name in algorithms}
    return {"sizes_bytes": list(sizes_bytes), "medians": medians, "samples": raw}


def profile_worker(
    rank: int,
    world_size: int,
    nbytes: int,
    algorithms: Sequence[str] = ("pipelined:1", "pipelined:4"),
    repeats: int = 5,
    threads: int = 1,
) -> dict[str, dict[str, float]]:
    """Per algorithm ("pipelined:K"), this rank's median seconds per call waiting, adding,
    posting (`profile_ring`) and in total, over `repeats` float32 calls of `nbytes` bytes."""
    torch.set_num_threads(threads)
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=current_device())
    out = {}
    for name in algorithms:
        fn = functools.partial(resolve_algorithm(name), check=False)
        x.fill_(1.0)
        fn(x)  # warm-up
        calls = []
        for _ in range(repeats):
            x.fill_(1.0)
            dist.barrier()
            with profile_ring() as totals:
                t0 = time.perf_counter()
                fn(x)
                totals["total_s"] = time.perf_counter() - t0
            calls.append(totals)
        out[name] = {k: statistics.median(c[k] for c in calls) for k in calls[0]}
    return out
