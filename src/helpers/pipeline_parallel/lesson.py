"""Pipeline parallelism: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.pipeline_parallel`, which re-exports both) still loads
the harness. tests/test_code_map.py checks the order and these rules.

Used by: notebook 16.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

WIDTH = 8  # features of every block
BATCH = 16  # samples per step (split into m micro-batches)
SEED = 0
#: The library's schedules this notebook runs, by name, with the stage layout they need:
#: "loop" puts stage s on rank s % p, "v" puts stages r and 2p-1-r on rank r.
SCHEDULES = {
    "ScheduleGPipe": "single",
    "Schedule1F1B": "single",
    "ScheduleInterleaved1F1B": "loop",
    "ScheduleLoopedBFS": "loop",
    "ScheduleInterleavedZeroBubble": "loop",
    "ScheduleZBVZeroBubble": "v",
}
#: An action is a tuple (stage, kind, micro-batch) with kind "F" (forward), "B" (full backward),
#: "I" (backward for the input only) or "W" (backward for the weights only).
Action = tuple[int, str, int]


# -- 16 · 1. A model cut into stages, a batch cut into micro-batches ------------------------------


class _Sleep(torch.autograd.Function):
    """Identity that sleeps `delay` seconds in forward and 2 x `delay` in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, delay: float) -> torch.Tensor:
        ctx.delay = delay
        time.sleep(delay)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(2 * ctx.delay)
        return grad, None


class Block(nn.Module):
    """Linear(WIDTH, WIDTH) + Tanh; with `delay_s` > 0 it also sleeps (a stand-in for compute)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)
        self.delay_s = 0.0
        self.meter: SavedBytes | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.meter is None:
            return self._forward(x)
        with torch.autograd.graph.saved_tensors_hooks(self.meter.pack, self.meter.unpack):
            return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)  # (rows, WIDTH); requires grad on every stage, so backward sleeps too
        if self.delay_s > 0:
            h = _Sleep.apply(h, self.delay_s)
        return torch.tanh(h)


def split_microbatches(x: torch.Tensor, m: int) -> list[torch.Tensor]:
    """`x` cut along dim 0 into `m` equal micro-batches; a clear error if `m` does not divide it."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"the number of micro-batches must be an int >= 1, got {m!r}")
    if x.shape[0] % m:
        raise ValueError(
            f"{m} micro-batches do not divide a batch of {x.shape[0]} samples: the micro-batches "
            "would differ in size and their averaged loss would not be the batch's mean"
        )
    return list(x.chunk(m))


# -- 16 · 2. Point-to-point, and why 1F1B needs `isend`/`irecv` -----------------------------------


def scratch_order(schedule: str, world_size: int, m: int, rank: int) -> list[Action]:
    """The from-scratch order of compute actions of `rank`: GPipe or 1F1B, one stage per rank."""
    if schedule == "gpipe":
        return [(rank, "F", i) for i in range(m)] + [(rank, "B", i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}: use 'gpipe' or '1f1b'")
    warmup = min(world_size - 1 - rank, m)  # forwards before the first backward
    order = [(rank, "F", i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward, one backward
        order += [(rank, "F", warmup + i), (rank, "B", i)]
    return order + [(rank, "B", i) for i in range(m - warmup, m)]  # cooldown


class PipelineTimeout(RuntimeError):
    """A point-to-point operation did not complete in time; the message names both ranks."""


def _wait(work: Any, what: str, rank: int, peer: int, timeout_s: float) -> None:
    """Wait for a p2p op; a timeout raises PipelineTimeout naming both ranks and gloo's message."""
    try:
        work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as err:
        if "Timed out" not in str(err):  # the peer went away: not a timeout of this rank's
            raise RuntimeError(f"rank {rank}: {what} with rank {peer} failed: {err}") from err
        raise PipelineTimeout(
            f"rank {rank}: {what} with rank {peer} did not complete within {timeout_s} s "
            f"(does rank {peer} post the matching operation?): {err}"
        ) from err


def make_model(n_blocks: int, seed: int = SEED) -> nn.Sequential:
    """The whole model: `n_blocks` Blocks, initialised from `seed` (the same on every rank)."""
    torch.manual_seed(seed)
    return nn.Sequential(*[Block() for _ in range(n_blocks)])


def make_batch(seed: int = SEED + 1) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's inputs and targets: two (BATCH, WIDTH) tensors."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of one micro-batch (the schedules average it over micro-batches)."""
    return ((output - target) ** 2).mean()


def _grads(blocks: nn.Module | Sequence[nn.Module], indices: Sequence[int]) -> dict[str, list]:
    out = {}
    for i, block in zip(indices, blocks, strict=True):
        for name, p in block.named_parameters():
            out[f"{i}.{name}"] = p.grad.flatten().tolist()
    return out


def _check_order(order: Sequence[Action], rank: int, m: int) -> None:
    """Refuse an order a step cannot run: each F and B of micro-batches 0..m-1 once, B after F."""
    text = " ".join(f"{kind}{i}" for _, kind, i in order)
    want = sorted((rank, kind, i) for kind in "FB" for i in range(m))
    if sorted(tuple(a) for a in order) != want:
        raise ValueError(
            f"rank {rank}: expected an order of F0..F{m - 1} and B0..B{m - 1} on stage {rank}, "
            f"each once, found {text}"
        )
    forwards_done: set[int] = set()
    for _, kind, i in order:
        if kind == "F":
            forwards_done.add(i)
        elif i not in forwards_done:
            raise ValueError(
                f"rank {rank}: B{i} before F{i} in {text}: expected each backward after its "
                "forward, whose activations it needs"
            )


def _prepare_stage(blocks: nn.Module, delay_s: float, meter: SavedBytes) -> None:
    meter.ignore(blocks.parameters())
    for b in blocks:
        b.delay_s, b.meter = delay_s, meter


def _unit_bytes(stage: nn.Module, mb_rows: int) -> int:
    """Bytes the stage's blocks save for backward for one micro-batch (measured once)."""
    meter = SavedBytes()
    _prepare_stage(stage, 0.0, meter)
    out = stage(torch.zeros(mb_rows, WIDTH, requires_grad=True))
    nbytes = meter.live
    del out
    return nbytes


def scratch_step(
    rank: int,
    world_size: int,
    schedule: str,
    m: int,
    delay_s: float = 0.0,
    blocking: bool = False,
    op_timeout_s: float = 60.0,
    order_fn: Callable[[str, int, int, int], list[Action]] = scratch_order,
) -> dict[str, Any]:
    """One training step of `schedule` ("gpipe" or "1f1b") on this rank's stage (block `rank`).

    Activations go forward with isend to rank+1, gradients backward to rank-1. With `blocking`,
    every send is waited for at once, as `dist.send` does: 1F1B with two or more micro-batches
    then deadlocks (the last two ranks each wait in a send), and the wait's timeout ends it with
    PipelineTimeout. The order comes from `order_fn` (a notebook's copy of `scratch_order`
    can be passed), refused with a ValueError unless it runs each F and B once, B after F.
    """
    model = make_model(world_size)
    stage = model[rank : rank + 1]
    x, y = make_batch()
    xs, ys = split_microbatches(x, m), split_microbatches(y, m)
    unit = _unit_bytes(stage, xs[0].shape[0])
    meter = SavedBytes()
    _prepare_stage(stage, delay_s, meter)
    first, last = rank == 0, rank == world_size - 1
    held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # mb -> (input, output)
    sends: list[tuple[Any, str, int]] = []
    peak_held, losses, events = 0, [], []

    def send(t: torch.Tensor, peer: int, what: str) -> None:
        work = dist.isend(t, peer)
        if blocking:
            _wait(work, what, rank, peer, op_timeout_s)
        else:
            sends.append((work, what, peer))

    def recv(peer: int, what: str) -> torch.Tensor:
        buf = torch.empty(xs[0].shape)
        _wait(dist.irecv(buf, peer), what, rank, peer, op_timeout_s)
        return buf

    order = order_fn(schedule, world_size, m, rank)
    _check_order(order, rank, m)
    for _, kind, i in order:
        if kind == "F":
            inp = xs[i] if first else recv(rank - 1, f"recv of activation {i}")
            inp = inp.detach().requires_grad_(not first)
            start = time.monotonic()
            out = stage(inp)
            if last:
                loss = loss_fn(out, ys[i]) / m  # the batch's mean = mean of equal micro-batches
                losses.append(loss.item())
                out = loss
            events.append((start, time.monotonic(), (rank, "F", i)))
            if not last:
                send(out.detach(), rank + 1, f"send of activation {i}")
            held[i] = (inp, out)
            peak_held = max(peak_held, len(held))
        else:
            inp, out = held.pop(i)
            grad = None if last else recv(rank + 1, f"recv of gradient {i}")
            start = time.monotonic()
            out.backward(grad)
            events.append((start, time.monotonic(), (rank, "B", i)))
            if not first:
                send(inp.grad, rank - 1, f"send of gradient {i}")
    for work, what, peer in sends:
        _wait(work, what, rank, peer, op_timeout_s)
    return {
        "schedule": schedule,
        "order": [a for _, _, a in events],
        "events": events,
        "peak_held": peak_held,
        "peak_saved_bytes": meter.peak,
        "unit_bytes": unit,
        "loss": sum(losses) if last else None,
        "grads": _grads(stage, [rank]),
    }


def scratch_worker(rank: int, world_size: int, runs: Sequence[dict[str, Any]]) -> list[dict]:
    """Worker: `scratch_step(**run)` for each run in turn; one result dict per run."""
    results = []
    for run in runs:
        dist.barrier()  # every run starts together: its timestamps share a start
        results.append(scratch_step(rank, world_size, **run))
    return results


def deadlock_worker(rank: int, world_size: int, run: dict[str, Any]) -> dict[str, Any]:
    """Worker: `scratch_step(**run)` where it is to deadlock; how this rank's wait ended.

    Returns {"error": None} when the step completes, else {"error": "timeout" or "failed",
    "message": ...}: the first rank to time out ends the deadlock, and a peer still waiting in
    its own send then times out as well or fails ("Connection closed by peer", gloo's words);
    which of the two varies from run to run. The message is cut before gloo's own text.
    """
    dist.barrier()
    try:
        scratch_step(rank, world_size, **run)
    except PipelineTimeout as err:
        return {"error": "timeout", "message": str(err).split(": [")[0]}
    except RuntimeError as err:  # _wait's "failed": the peer's end of the pair went away
        return {"error": "failed", "message": str(err).split(": [")[0]}
    return {"error": None}


# -- 16 · 3. GPipe and 1F1B from scratch, on 2 and 4 stages ---------------------------------------


class _Box:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


class SavedBytes:
    """Bytes autograd currently keeps for backward from inside the stages that share this meter."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.skip: set[int] = set()  # storages of parameters: weights are not activations

    def ignore(self, params: Any) -> None:
        """Do not count tensors that share storage with `params`."""
        self.skip |= {p.untyped_storage().data_ptr() for p in params}

    def _drop(self, nbytes: int) -> None:
        self.live -= nbytes

    def pack(self, t: torch.Tensor) -> Any:
        box = _Box(t)
        nbytes = t.numel() * t.element_size()
        # meta tensors (shape inference) hold no memory; parameters are not activations
        if t.device.type != "meta" and t.untyped_storage().data_ptr() not in self.skip:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(box, self._drop, nbytes)  # the graph freed what it saved
        return box

    @staticmethod
    def unpack(box: Any) -> torch.Tensor:
        return box.t


# -- 16 · 4. The schedules as data ----------------------------------------------------------------


def _stand_in_stage(stage_index: int, n_stages: int, world_size: int) -> Any:
    from unittest import mock

    from torch.distributed.pipelining import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, world_size, None
    stage.num_stages, stage.stage_index = n_stages, stage_index
    return stage


def _stage_indices(layout: str, rank: int, world_size: int, v: int) -> list[int]:
    if layout == "single":
        return [rank]
    if layout == "loop":
        return [rank + k * world_size for k in range(v)]
    return [rank, 2 * world_size - 1 - rank]  # "v"


def library_plan(name: str, world_size: int, m: int, v: int = 2) -> dict[int, list]:
    """torch's own `pipeline_order` of schedule `name` (its `_Action`s; None for an idle slot).

    Built with stand-in stages (no process group, nothing runs): `world_size` ranks, `m`
    micro-batches, `v` stages per rank for the looped layouts. Every kind of action is kept.
    """
    from torch.distributed.pipelining import schedules

    cls = getattr(schedules, name)
    layout = SCHEDULES[name]
    n_stages = world_size if layout == "single" else world_size * (2 if layout == "v" else v)
    stages = [
        _stand_in_stage(s, n_stages, world_size)
        for s in _stage_indices(layout, 0, world_size, v if layout == "loop" else 2)
    ]
    schedule = cls(stages[0] if layout == "single" else stages, m)
    return schedule.pipeline_order


def _as_action(a: Any) -> list[Action] | None:
    """torch's `_Action` as plain tuples; composite ones expanded; non-compute ones dropped."""
    if a is None:
        return None
    subs = getattr(a, "sub_actions", None)
    if subs:
        return [x for s in subs for x in (_as_action(s) or [])]
    kind = a.computation_type.value
    if kind not in ("F", "B", "I", "W"):
        return []
    return [(a.stage_index, kind, a.microbatch_index)]


def _plain_order(pipeline_order: dict[int, list[Any]]) -> dict[int, list[Action | None]]:
    out: dict[int, list[Action | None]] = {}
    for rank, actions in sorted(pipeline_order.items()):
        row: list[Action | None] = []
        for a in actions:
            converted = _as_action(a)
            row += [None] if converted is None else converted
        out[rank] = row
    return out


def library_order(name: str, world_size: int, m: int, v: int = 2) -> dict[int, list]:
    """`pipeline_order` of torch's schedule `name` for `world_size` ranks and `m` micro-batches.

    Built with stand-in stages (no process group, nothing runs; `library_plan`); compute actions
    only, as (stage, kind, micro-batch) tuples, None where the plan keeps an idle slot (the
    multi-stage plans: the single-stage ones lose theirs in torch's `_add_reduce_grad`).
    """
    return _plain_order(library_plan(name, world_size, m, v))


def executed_compute(order: Sequence[Action | None]) -> list[Action]:
    """The compute actions of a row in the order a rank runs them (empty slots dropped)."""
    return [a for a in order if a is not None]


def simulate(
    orders: dict[int, Sequence[Action | None]], costs: dict[str, float] | None = None
) -> dict[str, Any]:
    """Replay per-rank orders against the pipeline's dependencies; timeline and idle fraction.

    A forward of stage s needs stage s-1's forward of that micro-batch; a backward (B or I) of
    stage s needs stage s+1's backward and its own forward; W needs its own I. Each rank runs
    its actions in order, each as soon as its inputs are there. `costs` per kind default to
    F 1, B 2, I 1, W 1. Raises RuntimeError naming the ranks if the orders deadlock.
    """
    costs = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, **(costs or {})}
    rows = {r: executed_compute(o) for r, o in orders.items()}
    n_stages = 1 + max(a[0] for row in rows.values() for a in row)
    done: dict[tuple[int, str, int], float] = {}
    free = {r: 0.0 for r in rows}
    pos = {r: 0 for r in rows}
    intervals: dict[int, list[tuple[float, float, Action]]] = {r: [] for r in rows}

    def ready_at(a: Action) -> float | None:
        stage, kind, mb = a
        if kind == "F":
            deps = [(stage - 1, "F", mb)] if stage > 0 else []
        elif kind == "W":
            deps = [(stage, "I", mb)]
        else:
            deps = [(stage, "F", mb)]
            if stage < n_stages - 1:
                later = (stage + 1, "B", mb) if (stage + 1, "B", mb) in done else None
                deps.append(later or (stage + 1, "I", mb))
        if any(d not in done for d in deps):
            return None
        return max((done[d] for d in deps), default=0.0)

    remaining = sum(len(row) for row in rows.values())
    while remaining:
        progressed = False
        for r, row in rows.items():
            while pos[r] < len(row):
                a = row[pos[r]]
                t = ready_at(a)
                if t is None:
                    break
                start = max(free[r], t)
                end = start + costs[a[1]]
                done[a] = end
                free[r] = end
                intervals[r].append((start, end, a))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            waiting = {r: rows[r][pos[r]] for r in rows if pos[r] < len(rows[r])}
            raise RuntimeError(f"the orders deadlock: ranks {sorted(waiting)} wait at {waiting}")
    makespan = max(free.values())
    busy = {r: sum(e - s for s, e, _ in iv) for r, iv in intervals.items()}
    idle = {r: 1 - busy[r] / makespan for r in rows}
    return {
        "intervals": intervals,
        "makespan": makespan,
        "idle": idle,
        "idle_fraction": sum(idle.values()) / len(idle),
    }


# -- 16 · 5. Bubbles, counted and measured --------------------------------------------------------


def bubble_formula(world_size: int, m: int, v: int = 1) -> float:
    """Idle fraction of GPipe/1F1B (v = 1) and interleaved 1F1B: (p-1) / (v*m + p - 1)."""
    return (world_size - 1) / (v * m + world_size - 1)


# -- 16 · 6. With PyTorch's API -------------------------------------------------------------------


def _record(stage: Any, s: int, events: list) -> None:
    """Wrap the stage's compute methods so each call appends (start, end, action) to `events`."""

    def wrap(method_name: str, kind_of: Any) -> None:
        method = getattr(stage, method_name)

        def timed(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            result = method(chunk_id, *args, **kwargs)
            events.append((start, time.monotonic(), (s, kind_of(kwargs), chunk_id)))
            return result

        setattr(stage, method_name, timed)

    wrap("forward_one_chunk", lambda kw: "F")
    wrap("backward_one_chunk", lambda kw: "B" if kw.get("full_backward", True) else "I")
    wrap("backward_weight_one_chunk", lambda kw: "W")


def library_step(rank: int, world_size: int, name: str, m: int, delay_s: float = 0.0) -> dict:
    """Two steps of torch's schedule `name` with `PipelineStage`s; the second one measured.

    The model has 2 x `world_size` blocks, so every rank holds two blocks whatever the
    schedule: one stage of two blocks (GPipe, 1F1B) or two stages of one block (the others,
    v = 2). `delay_s` is each block's forward sleep. Returns the executed order of compute
    actions with their times, the schedule's own `pipeline_order` row for this rank, the peak
    activation bytes and one micro-batch's bytes through the rank's two blocks, the loss and
    the gradients.
    """
    from torch.distributed.pipelining import PipelineStage, schedules

    layout = SCHEDULES[name]
    n_blocks = 2 * world_size
    per_stage = 2 if layout == "single" else 1
    n_stages = n_blocks // per_stage
    indices = _stage_indices(layout, rank, world_size, 2)
    model = make_model(n_blocks)
    x, y = make_batch()
    split_microbatches(x, m)  # the same clear error as from scratch
    mine = [b for s in indices for b in range(s * per_stage, (s + 1) * per_stage)]
    unit = _unit_bytes(model[0:2], BATCH // m)  # two blocks, one micro-batch
    meter = SavedBytes()
    events: list[tuple[float, float, Action]] = []
    stages = []
    for s in indices:
        submod = model[s * per_stage : (s + 1) * per_stage]
        _prepare_stage(submod, delay_s, meter)
        stage = PipelineStage(submod, s, n_stages, torch.device("cpu"))
        _record(stage, s, events)
        stages.append(stage)
    cls = getattr(schedules, name)
    schedule = cls(stages[0] if layout == "single" else stages, m, loss_fn=loss_fn)
    holds_first, holds_last = 0 in indices, n_stages - 1 in indices
    inputs = (x,) if holds_first else ()
    target = y if holds_last else None
    schedule.step(*inputs, target=target)  # warm-up: the first step also sets the stages up
    model.zero_grad()
    events.clear()
    baseline = meter.live  # whatever set-up left alive is not this step's
    meter.peak = baseline
    dist.barrier()  # the measured step starts together on every rank
    losses: list[torch.Tensor] = []
    schedule.step(*inputs, target=target, losses=losses)
    return {
        "name": name,
        "order": [a for _, _, a in events],
        "events": events,
        "pipeline_order": _plain_order(schedule.pipeline_order)[rank],
        "peak_saved_bytes": meter.peak - baseline,
        "unit_bytes": unit,
        "loss": sum(t.item() for t in losses) / m if holds_last else None,
        "grads": _grads([model[b] for b in mine], mine),
    }


def library_worker(rank: int, world_size: int, runs: Sequence[dict[str, Any]]) -> list[dict]:
    """Worker: `library_step(**run)` for each run in turn; one result dict per run."""
    results = []
    for run in runs:
        dist.barrier()
        results.append(library_step(rank, world_size, **run))
    return results
