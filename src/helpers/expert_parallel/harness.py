"""Expert parallelism (a mixture-of-experts layer): the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 17.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from helpers.launch import current_device

from .lesson import (
    _FLOAT_BYTES,
    _PHASE,
    EXCHANGE_LOG,
    EXPERTS,
    FFN,
    HIDDEN,
    TOKENS,
    TOP_K,
    MoEParams,
    check_config,
    moe_expert_parallel,
    moe_reference,
)


def make_params(
    seed: int = 0, experts: int = EXPERTS, hidden: int = HIDDEN, ffn: int = FFN, skew: float = 0.0
) -> MoEParams:
    """Seeded parameters, the same in every process; `skew` is added to expert 0's router bias
    (a router that prefers one expert: load imbalance and, with a capacity, dropped tokens)."""
    g = torch.Generator().manual_seed(seed)
    router_b = 0.1 * torch.randn(experts, generator=g)
    router_b[0] += skew
    return MoEParams(
        router_w=torch.randn(hidden, experts, generator=g) / math.sqrt(hidden),
        router_b=router_b,
        w1=torch.randn(experts, hidden, ffn, generator=g) / math.sqrt(hidden),
        b1=0.1 * torch.randn(experts, ffn, generator=g),
        w2=torch.randn(experts, ffn, hidden, generator=g) / math.sqrt(ffn),
        b2=0.1 * torch.randn(experts, hidden, generator=g),
    )


def make_tokens(world_size: int, tokens: int = TOKENS, hidden: int = HIDDEN, seed: int = 1):
    """All ranks' tokens (world_size * tokens, h): rank r holds rows r*tokens to (r+1)*tokens-1."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(world_size * tokens, hidden, generator=g)


def reference_run(
    world_size: int,
    k: int = TOP_K,
    capacity_factor: float | None = None,
    skew: float = 0.0,
    experts: int = EXPERTS,
    tokens: int = TOKENS,
    seed: int = 0,
) -> dict[str, Any]:
    """One forward and backward of `moe_reference` (loss = sum of y squared): y, grads, stats."""
    p = make_params(seed, experts=experts, skew=skew).requires_grad_()
    x = make_tokens(world_size, tokens).requires_grad_()
    y, stats = moe_reference(x, p, world_size, k, capacity_factor)
    (y**2).sum().backward()
    return {
        "y": y.detach(),
        "x_grad": x.grad,
        "grads": {n: t.grad for n, t in p.named().items()},
        **stats,
    }


def _local_params(p: MoEParams, rank: int, world_size: int) -> MoEParams:
    local = p.w1.shape[0] // world_size
    s = slice(rank * local, (rank + 1) * local)
    return MoEParams(
        p.router_w.clone(), p.router_b.clone(), p.w1[s].clone(), p.b1[s].clone(),
        p.w2[s].clone(), p.b2[s].clone(),
    ).requires_grad_()  # fmt: skip


def expert_parallel_step(
    rank: int,
    world_size: int,
    k: int = TOP_K,
    capacity_factor: float | None = None,
    skew: float = 0.0,
    experts: int = EXPERTS,
    tokens: int = TOKENS,
    seed: int = 0,
    exchange: str = "function",
) -> dict[str, Any]:
    """One forward and backward (loss = sum of y squared) on this rank; plain data back.

    Returns y and x_grad (this rank's rows, flat lists), grads (this rank's parameters: the
    router's are this rank's share of the sum), the routing info and the exchanges (EXCHANGE_LOG).
    """
    check_config(experts, world_size, k, capacity_factor)  # every rank raises the same error
    device = current_device()
    full = make_params(seed, experts=experts, skew=skew)
    p = _local_params(full, rank, world_size)
    for name, t in p.named().items():
        setattr(p, name, t.detach().to(device).requires_grad_())
    x = make_tokens(world_size, tokens)[rank * tokens : (rank + 1) * tokens]
    x = x.to(device).requires_grad_()
    EXCHANGE_LOG.clear()
    _PHASE[0] = "forward"
    y, info = moe_expert_parallel(x, p, k, capacity_factor, exchange)
    _PHASE[0] = "backward"
    (y**2).sum().backward()
    return {
        "config": {
            "k": k,
            "capacity_factor": capacity_factor,
            "skew": skew,
            "experts": experts,
            "tokens": tokens,
            "seed": seed,
            "world_size": world_size,
            "exchange": exchange,
        },
        "y": y.detach().cpu().reshape(-1).tolist(),
        "x_grad": x.grad.cpu().reshape(-1).tolist(),
        "grads": {n: t.grad.cpu().reshape(-1).tolist() for n, t in p.named().items()},
        **info,
        "exchanges": [dict(e) for e in EXCHANGE_LOG],
    }


def expert_parallel_worker(rank: int, world_size: int, runs: list[dict]) -> list[dict]:
    """Worker: `expert_parallel_step(rank, world_size, **run)` for each run, in one launch."""
    return [expert_parallel_step(rank, world_size, **run) for run in runs]


# ---------------------------------------------------------------- checks (parent side)
def max_errors(per_rank: list[dict]) -> dict[str, float]:
    """Max |expert parallel - one process| of y, x_grad and every gradient, over the ranks.

    `per_rank` is one run's results (one dict per rank). Expert gradients are compared with the
    reference's rows of the experts each rank owns; the router's gradient summed over ranks.
    """
    n, cfg = len(per_rank), per_rank[0]["config"]
    ref = reference_run(n, cfg["k"], cfg["capacity_factor"], cfg["skew"], cfg["experts"],
                        cfg["tokens"], cfg["seed"])  # fmt: skip
    local, t = cfg["experts"] // n, cfg["tokens"]

    def err(got, want) -> float:
        return float((torch.as_tensor(got).reshape(-1) - want.reshape(-1)).abs().max())

    errors = {
        "y": max(err(r["y"], ref["y"][i * t : (i + 1) * t]) for i, r in enumerate(per_rank)),
        "x_grad": max(
            err(r["x_grad"], ref["x_grad"][i * t : (i + 1) * t]) for i, r in enumerate(per_rank)
        ),  # fmt: skip
    }
    for name in ("router_w", "router_b"):
        errors[name] = err(
            sum(torch.tensor(r["grads"][name]) for r in per_rank), ref["grads"][name]
        )
    for name in ("w1", "b1", "w2", "b2"):
        errors[name] = max(
            err(r["grads"][name], ref["grads"][name][i * local : (i + 1) * local])
            for i, r in enumerate(per_rank)
        )
    return errors


def balanced_bytes_estimate(
    tokens: int, k: int, hidden: int, world_size: int, element_bytes: int = _FLOAT_BYTES
) -> float:
    """Token rows one rank sends in one step if routing were uniform and nothing dropped.

    Each of the four exchanges (dispatch, combine, and their backwards) sends k T rows of h
    elements, of which the fraction (N - 1) / N goes to other ranks: 4 k T h b (N - 1) / N.
    """
    return 4 * k * tokens * hidden * element_bytes * (world_size - 1) / world_size


def load_imbalance(per_expert: list[int]) -> float:
    """max / mean of the assignments per expert (1.0: perfectly balanced)."""
    mean = sum(per_expert) / len(per_expert)
    return max(per_expert) / mean if mean else 0.0


# ---------------------------------------------------------------- the exchanges, step by step
_RANK_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948")
_WHAT = {
    "counts": "the sizes first: each rank sends every rank its kept-row counts for that rank's"
    " experts (E/N int64 values each)",
    "dispatch": "dispatch: each kept assignment's token row goes to the rank of its expert",
    "experts": "the local experts run on the rows received (no exchange)",
    "combine": "combine: each expert's output row goes back to its token's rank",
    "combine (backward)": "backward of combine: the output rows' gradients go to the experts'"
    " ranks",
    "dispatch (backward)": "backward of dispatch: the token rows' gradients go back to the tokens'"
    " ranks",
}


def exchange_steps(per_rank: list[dict]) -> list[dict[str, Any]]:
    """One recorded run (`expert_parallel_step`'s results, one dict per rank) as steps, in the
    order of the ranks' EXCHANGE_LOG: one per exchange, with the local experts' step after the
    forward dispatch.

    An exchange step: what, phase, `rows[r]` = rank r's `send_rows` (rows, or values for the
    counts, it sent to each rank), `bytes[r]` = its `bytes_sent`, and for the counts the values
    sent (`values[r]`: rank r's kept rows per expert). The experts' step: `rows[p][s]` = rows rank
    p received from rank s, `experts[e]` = rows expert e ran on and `sources[e]` = how many came
    from each rank (from each rank's `recv_counts`).
    Raises ValueError when the ranks' logs do not list the same exchanges.
    """
    n = len(per_rank)
    kinds = [[e["what"] for e in r["exchanges"]] for r in per_rank]
    if any(k != kinds[0] for k in kinds):
        raise ValueError(f"the ranks logged different exchanges: {kinds}")
    local = len(per_rank[0]["recv_counts"][0])
    steps: list[dict[str, Any]] = []
    for i, what in enumerate(kinds[0]):
        records = [r["exchanges"][i] for r in per_rank]
        step = {
            "what": what,
            "phase": records[0]["phase"],
            "rows": [e["send_rows"] for e in records],
            "bytes": [e["bytes_sent"] for e in records],
        }
        if what == "counts":
            step["values"] = [r["kept_per_expert"] for r in per_rank]
        steps.append(step)
        if what == "dispatch":
            experts = [
                sum(per_rank[p]["recv_counts"][src][e] for src in range(n))
                for p in range(n)
                for e in range(local)
            ]
            sources = [
                [per_rank[p]["recv_counts"][src][e] for src in range(n)]
                for p in range(n)
                for e in range(local)
            ]
            received = [[sum(row) for row in per_rank[p]["recv_counts"]] for p in range(n)]
            steps.append({"what": "experts", "phase": "forward", "rows": received,
                          "experts": experts, "sources": sources})  # fmt: skip
    for i, step in enumerate(steps):
        step["index"] = i
    return steps


def exchange_step_text(steps: list[dict[str, Any]], i: int, local: int) -> str:
    """Step i of `exchange_steps` as text: per rank what it sent to each rank (or, for the
    experts' step, what each expert ran on). Deterministic: counts from the recorded run only."""
    step, n = steps[i], len(steps[i]["rows"])
    name = step["what"] if step["phase"] in step["what"] else f"{step['what']} ({step['phase']})"
    lines = [f"step {i + 1} of {len(steps)}: {name}", _WHAT[step["what"]]]
    if step["what"] == "experts":
        for p in range(n):
            for e in range(p * local, (p + 1) * local):
                lines.append(
                    f"rank {p}, expert {e}: {step['experts'][e]} rows"
                    f" (from ranks 0..{n - 1}: {step['sources'][e]})"
                )
        return "\n".join(lines)
    unit = "values" if step["what"] == "counts" else "rows"
    for r in range(n):
        line = f"rank {r} sends {step['rows'][r]} {unit} to ranks 0..{n - 1}"
        if step["what"] == "counts":
            line += f" (its kept rows per expert {step['values'][r]})"
        lines.append(f"{line}; {step['bytes'][r]} bytes leave it (its own split stays on it)")
    return "\n".join(lines)


def exchange_svg(steps: list[dict[str, Any]], i: int, local: int) -> str:
    """Step i of `exchange_steps` as an SVG: senders on the left, receivers on the right (each box
    says what the rank sends or receives, rank by rank), a line per non-empty flow (width by
    rows; dashed when a rank's own split stays on it), or, for the experts' step, a bar per
    expert. Deterministic; it draws the picture's DOM hooks of
    `helpers.viewers.AllToAllViewer.hooks` (`picture`, `flow`, `expert`)."""
    step, n = steps[i], len(steps[i]["rows"])
    row_h, width = 44, 640
    height = 40 + n * row_h
    colour = [_RANK_COLOURS[r % len(_RANK_COLOURS)] for r in range(n)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="alltoall-svg" data-step="{i}" '
        f'data-what="{step["what"]}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<text x="10" y="16" font-size="11">{_WHAT[step["what"]]}</text>',
    ]

    def box(x: float, r: int, label: str, note: str = "") -> str:
        y = 30 + r * row_h
        return (
            f'<rect x="{x}" y="{y}" width="150" height="36" rx="4" fill="{colour[r]}" '
            f'fill-opacity="0.25" stroke="#555"/><text x="{x + 6}" y="{y + 15}" '
            f'font-size="11">{label}</text><text x="{x + 6}" y="{y + 30}" font-size="9">'
            f"{note}</text>"
        )

    def experts_of(r: int) -> str:
        first, last = r * local, (r + 1) * local - 1
        return f"expert {first}" if local == 1 else f"experts {first}-{last}"

    if step["what"] == "experts":
        top = max(step["experts"]) or 1
        for p in range(n):
            out.append(box(10, p, f"rank {p}"))
            for j, e in enumerate(range(p * local, (p + 1) * local)):
                rows = step["experts"][e]
                y = 30 + p * row_h + j * (36 / local)
                w = 250 * rows / top
                out.append(
                    f'<g class="expert" data-expert="{e}" data-rows="{rows}"><rect x="180" '
                    f'y="{y:.1f}" width="{w:.1f}" height="{36 / local - 2:.1f}" '
                    f'fill="{colour[p]}"/><text x="{186 + w:.1f}" y="{y + 36 / local - 8:.1f}" '
                    f'font-size="10">expert {e}: {rows} rows</text></g>'
                )
        out.append("</svg>")
        return "\n".join(out)
    to_experts = step["what"] in ("counts", "dispatch", "combine (backward)")
    unit = "values" if step["what"] == "counts" else "rows"
    for r in range(n):
        got = [step["rows"][s][r] for s in range(n)]
        left = f"rank {r}" + ("" if to_experts else f" ({experts_of(r)})")
        right = f"rank {r}" + (f" ({experts_of(r)})" if to_experts else "")
        out.append(box(10, r, left, f"sends {step['rows'][r]} {unit}"))
        out.append(box(width - 160, r, right, f"receives {got}"))
    top = max(max(row) for row in step["rows"]) or 1
    for r in range(n):
        for p in range(n):
            rows = step["rows"][r][p]
            if not rows:
                continue
            y0, y1 = 48 + r * row_h, 48 + p * row_h
            dash = ' stroke-dasharray="4 3"' if r == p else ""
            out.append(
                f'<g class="flow" data-from="{r}" data-to="{p}" data-rows="{rows}">'
                f'<line x1="160" y1="{y0}" x2="{width - 160}" y2="{y1}" stroke="{colour[r]}" '
                f'stroke-width="{1 + 5 * rows / top:.1f}" stroke-opacity="0.8"{dash}/></g>'
            )
    out.append("</svg>")
    return "\n".join(out)


def exchange_step_viewer(per_rank: list[dict]) -> Any:
    """A slider over the recorded exchanges of one run (`exchange_steps(per_rank)`), drawn in the
    browser (`helpers.viewers.AllToAllViewer`); its plain-text twin is the first step's text.

    steps[i]: `exchange_steps(...)[i]` with its "svg" (`exchange_svg`) and "text"
    (`exchange_step_text`). Its DOM hooks: `helpers.viewers.AllToAllViewer.hooks`.
    """
    from helpers.viewers import AllToAllViewer

    local = len(per_rank[0]["recv_counts"][0])
    steps = exchange_steps(per_rank)
    for i, step in enumerate(steps):
        step["svg"] = exchange_svg(steps, i, local)
        step["text"] = exchange_step_text(steps, i, local)
    return AllToAllViewer(steps, text=steps[0]["text"])
