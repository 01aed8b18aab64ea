"""All-reduce from scratch: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 05.
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

from .lesson import (
    _ACTIVE,
    _PROFILES,
    ALGORITHMS,
    chunk_bounds,
    pipelined_ring_allreduce,
    ring_schedule,
)


@dataclass
class P2PCount:
    """What one rank posted and received through `p2p_post` while a `count_p2p()` was open."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    steps: int = 0  # rounds: post sends and receives, then wait for all of them

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict (what a worker returns to the parent)."""
        return dict(self.__dict__)


_Number = int | float


@contextlib.contextmanager
def count_p2p() -> Iterator[P2PCount]:
    """Count the bytes and messages this rank posts with `p2p_post` inside the block, and the
    steps (the rounds of `p2p_round` and of the pipelined ring)."""
    counter = P2PCount()
    _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        _ACTIVE.remove(counter)


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
    Its DOM hooks for browser tests: `helpers.viewers.RingViewer.hooks`.
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


def pipelined_ring_text(events: Sequence[PipelinedRingEvent], unit: float = 1.0) -> str:
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
