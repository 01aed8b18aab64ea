"""All-reduce from scratch: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.allreduce`, which re-exports both) still loads the
harness. tests/test_code_map.py checks the order and these rules.

Used by: notebook 05.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from helpers.launch import current_device

# the open counters (`helpers.allreduce.harness.count_p2p` opens a `P2PCount`); nested counters
# all see every message
_ACTIVE: list[Any] = []
_HEADER_DIMS = 12  # dims carried by the agreement header; more are summarized by numel
_DTYPE_NAMES = sorted({str(v) for v in vars(torch).values() if isinstance(v, torch.dtype)})
_OPS = ("SUM", "AVG")
_RECV_BUFFERS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
_PROFILES: list[dict[str, float]] = []  # open `harness.profile_ring()` blocks


# -- 05 · 2. Three algorithms on send and recv ----------------------------------------------------


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


def p2p_post(
    sends: Sequence[tuple[torch.Tensor, int]],
    recvs: Sequence[tuple[torch.Tensor, int]],
    group: dist.ProcessGroup | None = None,
    tag: int = 0,
) -> list[Any]:
    """Post each send (tensor, peer) and receive (tensor, peer) without waiting; return the works.

    Peers are ranks inside `group`. Every point-to-point message of this module is posted here,
    which is what `harness.count_p2p` observes (bytes and messages; the callers count the steps).
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


def _op_name(op: Any) -> str:
    name = op.upper() if isinstance(op, str) else getattr(op, "name", str(op)).upper()
    if name not in ("SUM", "AVG"):
        raise ValueError(f"op must be ReduceOp.SUM or ReduceOp.AVG (or 'sum'/'avg'), got {op!r}")
    return name


def _describe(header: list[int]) -> str:
    ndim, numel, dtype, op, segments = header[:5]
    dims = [str(d) for d in header[5 : 5 + min(ndim, _HEADER_DIMS)]]
    if ndim > _HEADER_DIMS:
        dims.append(f"... ({numel} elements)")
    shape = "(" + ", ".join(dims) + ("," if ndim == 1 else "") + ")"
    text = f"shape {shape} {_DTYPE_NAMES[dtype].removeprefix('torch.')} {_OPS[op]}"
    return text + (f" in {segments} segments" if segments else "")


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


def unchecked_mismatch_worker(rank: int, world_size: int) -> list[float]:
    """Rank r passes 5 + r elements to `ring_allreduce` with the agreement check turned off:
    what the check protects against (on gloo the process receiving too much data aborts)."""
    x = torch.ones(5 + rank, device=current_device())
    ring_allreduce(x, check=False)
    return x.tolist()


# -- 05 · 4. The pipelined ring -------------------------------------------------------------------


def _timed(key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), its time added to `key` of every open `harness.profile_ring()` block."""
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
            [buffer[i * biggest :][a:b] for a, b in chunk_bounds(biggest, segments)] for i in (0, 1)
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


# -- 05 · 6. Time: the alpha-beta model -----------------------------------------------------------


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


# -- 05 · 8. Then vs now --------------------------------------------------------------------------


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
