"""Context parallelism (ring attention): the harness.

What the notebooks run around the lesson (`lesson.py` beside this file) without showing it. It
imports from the lesson, never the reverse.

Used by: notebook 17.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .lesson import (
    SHAPE,
    allgather_worker,
    block_skipped,
    chunks_of,
    ring_attention_plan,
    strides_worker,
)


def work_grid(world_size: int, layout: str) -> list[list[int | None]]:
    """Causal mask, 2N chunks: grid[i][j] is the rank that computes query chunk i on key chunk j.

    None where no rank computes the pair (the block holding it is skipped). Under the contiguous
    split a rank's block is two chunks wide, so the pair just above the diagonal inside its
    diagonal block is computed (and masked inside the block) too.
    """
    parts = 2 * world_size
    grid: list[list[int | None]] = [[None] * parts for _ in range(parts)]
    for rank in range(world_size):
        for qs, qn in chunks_of(parts, world_size, rank, layout):
            for owner in range(world_size):
                for ks, kn in chunks_of(parts, world_size, owner, layout):
                    if block_skipped(qs, qn, ks, True):
                        continue  # skipped, as in block_attention
                    for i in range(qs, qs + qn):
                        for j in range(ks, ks + kn):
                            grid[i][j] = rank
    return grid


_RANK_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948")


def work_grid_svg(world_size: int, layout: str, cell_px: int = 22) -> str:
    """work_grid as an SVG: rows are query chunks, columns key chunks, colour = computing rank.

    A computed pair above the diagonal (all masked inside its block) is drawn pale. Deterministic.
    """
    grid = work_grid(world_size, layout)
    n = len(grid)
    left, top = 30, 34
    width, height = left + n * cell_px + 120, top + n * cell_px + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<text x="4" y="14" font-size="12">{layout} split, N={world_size}, causal: '
        f"query chunk (row) x key chunk (column)</text>",
    ]
    for i, row in enumerate(grid):
        out.append(f'<text x="4" y="{top + i * cell_px + 15}" font-size="10">q{i}</text>')
        for j, rank in enumerate(row):
            x, y = left + j * cell_px, top + i * cell_px
            fill = "#ffffff" if rank is None else _RANK_COLOURS[rank % len(_RANK_COLOURS)]
            opacity = "0.35" if rank is not None and j > i else "1"
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell_px - 2}" height="{cell_px - 2}" '
                f'fill="{fill}" fill-opacity="{opacity}" stroke="#999" stroke-width="0.5"/>'
            )
    for r in range(world_size):
        y = top + r * 18
        colour = _RANK_COLOURS[r % len(_RANK_COLOURS)]
        out.append(
            f'<rect x="{left + n * cell_px + 12}" y="{y}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{left + n * cell_px + 30}" y="{y + 10}" font-size="11">rank {r}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def pitfall_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]]) -> dict:
    """Section 5 in one launch: allgather_worker(cases) and strides_worker()."""
    return {
        "variants": allgather_worker(rank, world_size, cases),
        "strides": strides_worker(rank, world_size),
    }


def _tokens(chunks: Sequence[tuple[int, int]]) -> str:
    """Token ranges as text: [(0, 2), (14, 2)] -> "0-1,14-15"."""
    return ",".join(f"{s}-{s + n - 1}" for s, n in chunks)


def ring_attention_step_text(
    plan: list[list[dict[str, Any]]], step: int, layout: str, causal: bool, seq_len: int
) -> str:
    """Step `step` of `ring_attention_plan`'s plan as text: per rank the block it holds, the chunk
    pairs it computes and skips (queries x keys, as token ranges), the keys its running (out,
    LSE) has folded in so far, what it sends and receives. Deterministic: ranks and token
    positions only."""
    n = len(plan)
    mask = "causal" if causal else "no mask"
    lines = [
        f"step {step} of 0..{n - 1}: ring attention, {layout} split, {mask}, N={n}, S={seq_len}"
    ]
    for entry in plan[step]:
        r, owner = entry["rank"], entry["owner"]
        q_len = dict(chunks_of(seq_len, n, r, layout))
        k_len = dict(chunks_of(seq_len, n, owner, layout))

        pairs = {
            key: ", ".join(
                f"q{_tokens([(qs, q_len[qs])])} x k{_tokens([(ks, k_len[ks])])}"
                for qs, ks in entry[key]
            )
            for key in ("computed", "skipped")
        }
        held = _tokens(chunks_of(seq_len, n, owner, layout))
        lines.append(f"rank {r} holds the K/V block of rank {owner} (keys {held})")
        lines.append(
            f"  computes {pairs['computed'] or 'nothing'}; skips {pairs['skipped'] or 'none'}"
        )
        for qs, qn in chunks_of(seq_len, n, r, layout):
            folded = []
            for s in range(step + 1):
                keys = dict(chunks_of(seq_len, n, plan[s][r]["owner"], layout))
                folded += [(ks, keys[ks]) for q0, ks in plan[s][r]["computed"] if q0 == qs]
            lines.append(
                f"  running (out, LSE) of queries {_tokens([(qs, qn)])} has folded in keys "
                f"{', '.join(_tokens([c]) for c in folded)}"
            )
        if entry["send_to"] is None:
            lines.append("  last step: no shift")
        else:
            lines.append(
                f"  sends it to rank {entry['send_to']}, receives rank {entry['arrives']}'s block"
                f" from rank {entry['recv_from']}"
            )
    return "\n".join(lines)


def ring_attention_svg(
    plan: list[list[dict[str, Any]]], step: int, layout: str, seq_len: int, cell_px: int = 18
) -> str:
    """Step `step` of the plan as an SVG: a box per rank (the block it holds, in its owner's
    colour), the shifts to the next rank, and the (query chunk, key chunk) grid of 2N chunks,
    each pair marked by state: computed at this step, folded earlier (both in the colour of the
    rank whose queries they are), skipped at this step, skipped earlier, or not yet met.
    Deterministic; it draws the picture's DOM hooks of `helpers.viewers.RingAttentionViewer.hooks`
    (`picture`, `rank`, `shift`, `pair`)."""
    n = len(plan)
    parts, unit = 2 * n, seq_len // (2 * n)
    box_w, box_h, gap = 118, 50, 14
    width = max(n * (box_w + gap) + 20, 2 * cell_px * parts + 220)
    grid_top = box_h + 70
    height = grid_top + parts * cell_px + 30
    colour = [_RANK_COLOURS[r % len(_RANK_COLOURS)] for r in range(n)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ringattn-svg" data-step="{step}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="DejaVu Sans, Arial, sans-serif">',
        '<defs><marker id="ringattn-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6"'
        ' markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
        "</defs>",
    ]
    for entry in plan[step]:
        r, owner = entry["rank"], entry["owner"]
        x = 10 + r * (box_w + gap)
        held = _tokens(chunks_of(seq_len, n, owner, layout))
        out.append(
            f'<g class="rank" data-rank="{r}" data-owner="{owner}" '
            f'data-computed="{len(entry["computed"])}" data-skipped="{len(entry["skipped"])}">'
            f'<rect x="{x}" y="10" width="{box_w}" height="{box_h}" rx="4" fill="{colour[owner]}"'
            ' fill-opacity="0.25" stroke="#555"/>'
            f'<text x="{x + 6}" y="26" font-size="11">rank {r}</text>'
            f'<text x="{x + 6}" y="40" font-size="10">K/V of rank {owner}</text>'
            f'<text x="{x + 6}" y="53" font-size="10">keys {held}</text></g>'
        )
        if entry["send_to"] is not None:
            to = entry["send_to"]
            x0, y0 = x + box_w / 2 - 8, 10 + box_h
            x1 = 10 + to * (box_w + gap) + box_w / 2
            dip = 22 if to == r + 1 else 40  # the wrap-around arrow goes lower
            out.append(
                f'<g class="shift" data-from="{r}" data-to="{to}"><path d="M{x0:.0f},{y0} '
                f'C{x0:.0f},{y0 + dip} {x1:.0f},{y0 + dip} {x1 + 8:.0f},{y0 + 2}" fill="none" '
                'stroke="#555" marker-end="url(#ringattn-arrow)"/></g>'
            )
    out.append(
        f'<text x="10" y="{grid_top - 8}" font-size="11">query chunk (row) x key chunk (column),'
        f" {parts} chunks of {unit} tokens</text>"
    )
    for j in range(parts):
        out.append(
            f'<text x="{40 + j * cell_px}" y="{grid_top + parts * cell_px + 12}" '
            f'font-size="9">k{j * unit}</text>'
        )
    state: dict[tuple[int, int], tuple[str, int]] = {}
    for s in range(step + 1):
        for entry in plan[s]:
            r, owner = entry["rank"], entry["owner"]
            qn = dict(chunks_of(seq_len, n, r, layout))
            kn = dict(chunks_of(seq_len, n, owner, layout))
            for key, kind in (("computed", "now"), ("skipped", "skipped-now")):
                for qs, ks in entry[key]:
                    for i in range(qs // unit, (qs + qn[qs]) // unit):
                        for j in range(ks // unit, (ks + kn[ks]) // unit):
                            label = (
                                kind if s == step else ("folded" if kind == "now" else "skipped")
                            )
                            state[(i, j)] = (label, r)
    fills = {"skipped-now": "#bbbbbb", "skipped": "#eeeeee", "pending": "#ffffff"}
    for i in range(parts):
        y = grid_top + i * cell_px
        out.append(f'<text x="10" y="{y + 13}" font-size="9">q{i * unit}</text>')
        for j in range(parts):
            label, r = state.get((i, j), ("pending", -1))
            fill = fills.get(label, colour[r] if r >= 0 else "#ffffff")
            opacity = "0.35" if label == "folded" else "1"
            stroke = (
                ' stroke="#000" stroke-width="1.5"'
                if label in ("now", "skipped-now")
                else (' stroke="#999" stroke-width="0.5"')
            )
            out.append(
                f'<rect class="pair" data-q="{i * unit}" data-k="{j * unit}" data-state="{label}" '
                f'x="{40 + j * cell_px}" y="{y}" width="{cell_px - 2}" height="{cell_px - 2}" '
                f'fill="{fill}" fill-opacity="{opacity}"{stroke}/>'
            )
    lx = 60 + parts * cell_px
    # a pair takes the colour of the rank whose queries it holds (a box: its block owner's), so
    # the legend's computed and folded swatches are grey
    for k, (label, fill) in enumerate(
        (("computed at this step (the query rank's colour)", "#888888"),
         ("folded earlier (pale)", "#888888"),
         ("skipped at this step", fills["skipped-now"]), ("skipped earlier", fills["skipped"]),
         ("not met yet", fills["pending"]))
    ):  # fmt: skip
        y = grid_top + k * 18
        opacity = "0.35" if k == 1 else "1"
        out.append(
            f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{fill}" fill-opacity="{opacity}"'
            f' stroke="#999"/><text x="{lx + 18}" y="{y + 10}" font-size="10">{label}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def ring_attention_step_viewer(
    world_size: int, layout: str, causal: bool, seq_len: int = SHAPE[2]
) -> Any:
    """A slider over the steps of `ring_attention_plan(world_size, layout, causal, seq_len)`, drawn
    in the browser (`helpers.viewers.RingAttentionViewer`); its plain-text twin is step 0's text.

    steps[s]: {"step": s, "plan": plan[s], "svg": ring_attention_svg(...), "text":
    ring_attention_step_text(...)}. Its DOM hooks: `helpers.viewers.RingAttentionViewer.hooks`.
    """
    from helpers.viewers import RingAttentionViewer

    plan = ring_attention_plan(world_size, layout, causal, seq_len)
    steps = [
        {
            "step": s,
            "plan": plan[s],
            "svg": ring_attention_svg(plan, s, layout, seq_len),
            "text": ring_attention_step_text(plan, s, layout, causal, seq_len),
        }
        for s in range(world_size)
    ]
    return RingAttentionViewer(steps, text=steps[0]["text"])
