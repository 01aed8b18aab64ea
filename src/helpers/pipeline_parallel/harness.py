"""Pipeline parallelism: the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 16.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .lesson import (
    Action,
    _grads,
    _wait,
    executed_compute,
    library_order,
    library_plan,
    loss_fn,
    make_batch,
    make_model,
    scratch_order,
)


def reference(n_blocks: int) -> dict[str, Any]:
    """One process: the whole batch's loss and every parameter's gradient, as lists."""
    model = make_model(n_blocks)
    x, y = make_batch()
    loss = loss_fn(model(x), y)
    loss.backward()
    return {"loss": loss.item(), "grads": _grads(model, range(n_blocks))}


def plan_kinds(name: str, world_size: int, m: int, v: int = 2) -> dict[int, list[str]]:
    """Per rank, the kind of every action in torch's plan (`library_plan`), empty slots skipped."""
    plan = library_plan(name, world_size, m, v)
    return {r: [a.computation_type.value for a in row if a is not None] for r, row in plan.items()}


def peak_in_flight(order: Sequence[Action | None]) -> int:
    """Most micro-batches a rank has run forward but not yet backward (B or I), per its order."""
    live: set[tuple[int, int]] = set()
    peak = 0
    for a in executed_compute(order):
        stage, kind, mb = a
        if kind == "F":
            live.add((stage, mb))
            peak = max(peak, len(live))
        elif kind in ("B", "I"):
            live.discard((stage, mb))
    return peak


def measured_idle(events: dict[int, Sequence[tuple[float, float, Any]]]) -> dict[int, float]:
    """Per rank, the fraction of the step (first start to last end over all ranks) not computing."""
    start = min(s for ev in events.values() for s, _, _ in ev)
    end = max(e for ev in events.values() for _, e, _ in ev)
    return {r: 1 - sum(e - s for s, e, _ in ev) / (end - start) for r, ev in events.items()}


# ------------------------------------------------------------------------------------ picture

_COLOURS = {"F": "#7fb3e6", "B": "#f4a259", "I": "#f6c177", "W": "#9bd69b"}
_KIND_NAMES = {
    "F": "forward",
    "B": "full backward",
    "I": "backward for the input",
    "W": "backward for the weights",
}
_LEFT, _ROW_H, _TOP = 60, 26, 30  # the timeline's geometry: label column, row height, title


def timeline_svg(
    sim: dict[str, Any], title: str, unit_px: int = 14, slot: int | None = None
) -> str:
    """A timeline per rank of `simulate`'s result: one box per action, labelled kind+micro-batch.

    Deterministic text: the same result gives the same SVG. Stages beyond the first on a rank are
    told apart by a darker outline; empty space is the bubble. With `slot` (as drawn by
    `timeline_step_viewer`), the picture is `svg.timeline-svg[data-slot]`, a band
    `rect.slot-band` marks time slot `slot` (from t = slot to slot + 1) and each box running in
    it has `data-active="true"`.
    """
    intervals = sim["intervals"]
    active = set() if slot is None else {iv for iv in slot_actions(sim, slot).values() if iv}
    width = _LEFT + int(sim["makespan"] * unit_px) + 20
    height = _TOP + _ROW_H * len(intervals) + 10
    marks = "" if slot is None else f' class="timeline-svg" data-slot="{slot}"'
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg"{marks} width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        # the title without the idle fraction: notebook 16 asks for it before section 5 prints it
        f'<text x="4" y="16" font-size="12">{html.escape(title)}</text>',
    ]
    for r, row in sorted(intervals.items()):
        y = _TOP + r * _ROW_H
        out.append(f'<text x="4" y="{y + 16}" font-size="11">rank {r}</text>')
        first_stage = min((a[0] for _, _, a in row), default=0)
        for start, end, (stage, kind, mb) in row:
            x, w = _LEFT + start * unit_px, (end - start) * unit_px
            stroke = "#333" if stage == first_stage else "#000"
            sw = 0.5 if stage == first_stage else 2
            on = (
                ""
                if slot is None
                else f' data-active="{str((start, end, (stage, kind, mb)) in active).lower()}"'
            )
            out.append(
                f'<g class="action" data-rank="{r}" data-stage="{stage}" data-kind="{kind}" '
                f'data-mb="{mb}"{on}><rect x="{x:g}" y="{y}" width="{w:g}" height="{_ROW_H - 6}" '
                f'fill="{_COLOURS[kind]}" stroke="{stroke}" stroke-width="{sw}"/>'
                f'<text x="{x + w / 2:g}" y="{y + 14}" font-size="9" text-anchor="middle">'
                f"{kind}{mb}</text></g>"
            )
    if slot is not None:  # over the boxes, translucent: the slot's boxes show through
        out.append(
            f'<rect class="slot-band" x="{_LEFT + slot * unit_px}" y="{_TOP - 4}" '
            f'width="{unit_px}" height="{_ROW_H * len(intervals) + 2}" fill="#d62728" '
            'fill-opacity="0.18" stroke="#d62728" stroke-width="1"/>'
        )
    out.append("</svg>")
    return "\n".join(out)


def slot_count(sim: dict[str, Any]) -> int:
    """How many unit time slots (t = k to k + 1) `simulate`'s timeline spans."""
    return math.ceil(sim["makespan"])


def slot_actions(sim: dict[str, Any], slot: int) -> dict[int, tuple[float, float, Action] | None]:
    """Per rank, the interval (start, end, action) of `simulate`'s result that runs during time
    slot `slot` (from t = slot to slot + 1), or None where the rank is idle then. With the
    default costs (whole numbers) a rank runs at most one action in a slot; otherwise the first."""
    if not 0 <= slot < slot_count(sim):
        raise ValueError(f"slot must be in [0, {slot_count(sim) - 1}], got {slot}")
    return {
        r: next((iv for iv in row if iv[0] < slot + 1 and iv[1] > slot), None)
        for r, row in sorted(sim["intervals"].items())
    }


def slot_text(sim: dict[str, Any], title: str, slot: int) -> str:
    """What every rank runs in time slot `slot` of `simulate`'s result, one line per rank."""
    n = slot_count(sim)
    lines = [f"{title}: slot {slot + 1} of {n} (t = {slot} to {slot + 1})"]
    running = slot_actions(sim, slot)
    for r, iv in running.items():
        if iv is None:
            lines.append(f"rank {r}: idle")
            continue
        start, end, (stage, kind, mb) = iv
        lines.append(
            f"rank {r}: {kind}{mb} (t = {start:g} to {end:g}), {_KIND_NAMES[kind]} of "
            f"micro-batch {mb} on stage {stage}"
        )
    busy = sum(iv is not None for iv in running.values())
    lines.append(f"busy: {busy} of {len(running)} ranks")
    return "\n".join(lines)


def timeline_step_viewer(sim: dict[str, Any], title: str, unit_px: int = 14) -> Any:
    """A slider over the time slots of `simulate`'s timeline, drawn in the browser
    (`helpers.viewers.TimelineViewer`): the picture (`timeline_svg`) with the slot highlighted and
    what each rank runs in it (`slot_text`), computed here once.

    It moves in JupyterLab and in the static book alike; its plain-text twin is slot 0's text.
    Each step is `{"slot", "x", "active", "text"}`: the band's x, the indices (in drawing order)
    of the boxes running in the slot, the slot's text. Its DOM hooks for browser tests:
    `helpers.viewers.TimelineViewer.hooks`.
    """
    from helpers.viewers import TimelineViewer

    boxes = [iv for _, row in sorted(sim["intervals"].items()) for iv in row]  # drawing order
    steps = []
    for slot in range(slot_count(sim)):
        running = [iv for iv in slot_actions(sim, slot).values() if iv is not None]
        steps.append(
            {
                "slot": slot,
                "x": _LEFT + slot * unit_px,
                "active": sorted(boxes.index(iv) for iv in running),
                "text": slot_text(sim, title, slot),
            }
        )
    picture = timeline_svg(sim, title, unit_px, slot=0)
    return TimelineViewer(steps, picture=picture, text=steps[0]["text"])


def mismatch_worker(rank: int, world_size: int, op_timeout_s: float) -> None:
    """Worker with a bug on purpose: every rank waits to receive from the next, nobody sends."""
    buf = torch.empty(4)
    peer = (rank + 1) % world_size
    _wait(dist.irecv(buf, peer), "recv", rank, peer, op_timeout_s)


# ------------------------------------------------------- the checks of a from-scratch run


def check_one_process(world_size: int, run: dict[str, Any], per_rank: Sequence[dict]) -> dict:
    """A from-scratch run's loss and gradients against one process's, within 1e-6.

    `per_rank`: the run's result on each rank, rank 0 first (`scratch_step`'s dicts). Returns
    {"loss", "one_process_loss", "grad_error"} (the largest |difference| of any gradient entry,
    inf if one is NaN) and "problems": an "expected ..., found ..." line if the check fails,
    else nothing.
    """
    ref = reference(world_size)
    grads = {n: g for res in per_rank for n, g in res["grads"].items()}
    diffs = [
        abs(a - b) for n in ref["grads"] for a, b in zip(grads[n], ref["grads"][n], strict=True)
    ]
    # a NaN counts as the worst: it compares False with everything, so max() would skip it
    err = math.inf if any(math.isnan(d) for d in diffs) else max(diffs)
    loss = per_rank[world_size - 1]["loss"]
    problems = []
    if not (abs(loss - ref["loss"]) < 1e-6 and err < 1e-6):
        problems.append(
            f"p={world_size} {run['schedule']} m={run['m']}: expected one process's loss "
            f"{ref['loss']:.6f} and gradients within 1e-6, found loss {loss:.6f} and a "
            f"gradient {err:.3g} off"
        )
    return {"loss": loss, "one_process_loss": ref["loss"], "grad_error": err, "problems": problems}


def torch_order(schedule: str, world_size: int, m: int, rank: int) -> list[Action] | None:
    """`rank`'s compute actions in torch's own plan of the schedule (`ScheduleGPipe` or
    `Schedule1F1B`, through `library_order`), or None where torch refuses (m < p for 1F1B).

    1F1B's last rank has its forwards renumbered by one where its plan starts with F1 (F1..F{m},
    section 4's off-by-one, on 2.13-2.15): its run executes F0..F{m-1} (section 6).
    """
    name = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}[schedule]
    try:
        order = executed_compute(library_order(name, world_size, m)[rank])
    except ValueError:  # "Number of microbatches (m) must be greater than or equal to ..."
        return None
    if name == "Schedule1F1B" and rank == world_size - 1 and order[0][1:] == ("F", 1):
        order = [(s, k, i - 1) if k == "F" else (s, k, i) for s, k, i in order]
    return order


def _row(order: Sequence[Action]) -> str:
    return " ".join(f"{k}{i}" for _, k, i in order)


def check_held_and_order(world_size: int, run: dict[str, Any], per_rank: Sequence[dict]) -> dict:
    """A from-scratch run's peak of micro-batches held (counted, and in saved bytes) and the
    order each rank ran, against torch's own plan (`torch_order`) and against its `order_fn`'s
    (else `scratch_order`'s: so the order that ran is the one given).

    Expected at the peak: m micro-batches on every rank for GPipe, min(p-r, m) on rank r for
    1F1B. Returns {"held", "saved"} (per rank: the count, and the saved bytes over one
    micro-batch's), "torch_ranks" (the ranks whose order was compared with torch's plan) and
    "problems": an "expected ..., found ..." line per failed check.
    """
    p, m, name = world_size, run["m"], run["schedule"]
    held = [res["peak_held"] for res in per_rank]
    saved = [res["peak_saved_bytes"] / res["unit_bytes"] for res in per_rank]
    expected = [m] * p if name == "gpipe" else [min(p - r, m) for r in range(p)]
    problems = []
    if not held == expected == saved:
        problems.append(
            f"p={p} {name} m={m}: expected {expected} micro-batches held at the peak, per rank, "
            f"found {held} (counted) and {saved} (saved bytes / one micro-batch's)"
        )
    orders = [res["order"] for res in per_rank]
    torch_orders = [torch_order(name, p, m, r) for r in range(p)]
    torch_ranks = [r for r in range(p) if torch_orders[r] is not None]
    for r in torch_ranks:
        if orders[r] != torch_orders[r]:
            problems.append(
                f"p={p} {name} m={m} rank {r}: expected torch's order {_row(torch_orders[r])}, "
                f"found {_row(orders[r])}"
            )
            break  # the first rank that differs
    order_fn = run.get("order_fn", scratch_order)
    planned = [order_fn(name, p, m, r) for r in range(p)]
    if orders != planned:
        problems.append(f"p={p} {name} m={m}: expected the orders {planned}, found {orders}")
    return {"held": held, "saved": saved, "torch_ranks": torch_ranks, "problems": problems}
