"""Pictures for the step viewers: pure functions that return SVG text.

Used by: `helpers.allreduce.ring_step_viewer` and `helpers.tracing.step_viewer` (the picture next
to their text), notebooks 01 and 05 (one step shown as a static `image/svg+xml` output, which
the book renders), `helpers.notebook.setup_notebook` (`svg_markdown`, below),
tests/test_pictures.py (rendered in Chromium and counted).

The pictures take plain data and import nothing from `helpers`, so the imports point one way
(allreduce and tracing call pictures, never the reverse; tests/test_pictures.py checks it):

- `ring_svg(steps, step)`: a ring schedule (`RingFrame`s, for example the `steps` of a
  `helpers.allreduce.RingSimulation`) after `step`: ranks on a circle, this step's transfers as
  arrows labelled with their chunk, each chunk coloured by how many ranks it already sums.
- `compile_stage(path)` and `compile_stages_svg(path)`: where the last step of a call path
  (`PathStep`s, outermost first, for example `helpers.tracing.Recording.path_to(i)`) sits among
  the stages of a first compile (`COMPILE_STAGES`), read off the modules on that path, and a
  diagram of the stages with that one highlighted.

- `svg_img(svg)`: an SVG as an HTML `<img>` of a `data:` URI, which JupyterLab shows from an
  untrusted notebook (a fresh clone), where it shows no `image/svg+xml` output: its sanitizer
  drops `<svg>` from HTML and Markdown but keeps that `<img>`. `helpers.notebook.setup_notebook`
  registers it as the `text/markdown` copy of every `IPython.display.SVG` (`svg_markdown`);
  `helpers.viewers` (which imports no helper) writes the same `<img>` for each viewer's first
  step, the `text/html` of its display (tests/test_stored_pictures.py holds the two equal).

No randomness, no clocks, no ids that change between runs: the same arguments give the same
text, so a stored output compares equal under strict nbval. Elements carry class names and
`data-*` attributes (`g.transfer[data-chunk]`, `g.stage[data-active]`, ...) for tests and for
the browser test that moves a viewer's slider.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple, Protocol

__all__ = [
    "COMPILE_STAGES",
    "SUM_COLOURS",
    "COMPLETE_COLOUR",
    "RingFrame",
    "PathStep",
    "Stage",
    "sum_colour",
    "ring_svg",
    "compile_stage",
    "compile_stages_svg",
    "svg_data_uri",
    "svg_img",
    "svg_markdown",
]

_SVG = 'xmlns="http://www.w3.org/2000/svg"'
_FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'

# ------------------------------------------------------------------------------------ the ring

#: Fill of a chunk that sums k ranks (k = 1, 2, ...), light to dark; a chunk that sums every rank
#: is COMPLETE_COLOUR instead. Counts past the palette reuse its last colour.
SUM_COLOURS = ("#fde2c4", "#f9bd86", "#f4964f", "#e46f2a", "#c4511b", "#9c3a12", "#74290c")
COMPLETE_COLOUR = "#3b9a57"


def sum_colour(count: int, world_size: int) -> str:
    """The fill of a chunk that holds the sum of `count` of `world_size` ranks."""
    if count >= world_size:
        return COMPLETE_COLOUR
    return SUM_COLOURS[min(count, len(SUM_COLOURS)) - 1]


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


class RingFrame(Protocol):
    """One step of a ring schedule, as plain data (`helpers.allreduce.RingStep` is one)."""

    step: int  # 0: the inputs
    phase: str  # "start", "reduce-scatter" or "all-gather"
    transfers: Sequence[tuple[int, int, int]]  # (from rank, to rank, chunk) this step
    owners: Sequence[Sequence[Collection[int]]]  # [rank][chunk]: the ranks summed in it


def ring_svg(steps: Sequence[RingFrame], step: int) -> str:
    """`steps[step]` as SVG: the picture twin of `allreduce.ring_step_text(sim, step)`.

    `steps` is the whole schedule, step 0 (the inputs) first; the world size is the number of
    ranks in `owners`.

    Each rank is a `g.rank[data-rank]` on a circle (rank 0 at the top, then clockwise) with a row
    of `rect.chunk[data-rank][data-chunk][data-sums]`, filled by `sum_colour` of how many ranks
    that chunk sums after the step. Each transfer of the step is a `g.transfer[data-from]
    [data-to][data-chunk][data-sums]`: an arrow from sender to receiver labelled `c<chunk>`
    (`text.transfer-label`), coloured by how many ranks the chunk it carries sums. The root
    `svg.ring-svg` carries `data-step`, `data-phase` and `data-world-size`.
    """
    last = len(steps) - 1
    if not 0 <= step <= last:
        raise ValueError(f"step must be in [0, {last}], got {step}")
    st, n = steps[step], len(steps[0].owners)
    before = steps[step - 1] if step > 0 else st
    width, height, cx, cy = 420, 400, 210, 190
    radius = 125 if n > 1 else 0
    node_r, box = 34, 14

    def centre(r: int) -> tuple[float, float]:
        angle = 2 * math.pi * r / n - math.pi / 2
        return cx + radius * math.cos(angle), cy + radius * math.sin(angle)

    if st.phase == "start":
        caption = f"step 0 of {last}: the inputs, cut into {n} chunks"
    else:
        k = st.step if st.phase == "reduce-scatter" else st.step - (n - 1)
        caption = f"step {st.step} of {last}: {st.phase} {k} of {n - 1}"
    out = [
        f'<svg {_SVG} class="ring-svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" data-step="{st.step}" data-phase="{_e(st.phase)}" '
        f'data-world-size="{n}" role="img" {_FONT} font-size="12">',
        f"<title>{_e(caption)}</title>",
        "<defs>",
    ]
    counts = sorted({len(before.owners[a][c]) for a, _, c in st.transfers})
    for count in counts:  # one arrow head per colour, so each head matches its line
        out.append(
            f'<marker id="ring-head-{count}" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="14" markerHeight="14" markerUnits="userSpaceOnUse" orient="auto">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{sum_colour(count, n)}" stroke="#333" '
            f'stroke-width="0.8"/></marker>'
        )
    out.append("</defs>")
    out.append(f'<text class="caption" x="{cx}" y="20" text-anchor="middle">{_e(caption)}</text>')
    for a, b, c in st.transfers:
        count = len(before.owners[a][c])
        (x1, y1), (x2, y2) = centre(a), centre(b)
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy) or 1.0
        ux, uy = dx / length, dy / length
        px, py = -uy * 7, ux * 7  # a little to the right of the line: 0->1 and 1->0 apart
        sx, sy = x1 + ux * (node_r + 4) + px, y1 + uy * (node_r + 4) + py
        ex, ey = x2 - ux * (node_r + 6) + px, y2 - uy * (node_r + 6) + py
        lx, ly = (x1 + x2) / 2 + px * 2.6, (y1 + y2) / 2 + py * 2.6
        out.append(
            f'<g class="transfer" data-from="{a}" data-to="{b}" data-chunk="{c}" '
            f'data-sums="{count}">'
            f'<line class="arrow" x1="{sx:.1f}" y1="{sy:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" '
            f'stroke="{sum_colour(count, n)}" stroke-width="4" '
            f'marker-end="url(#ring-head-{count})"/>'
            f'<text class="transfer-label" x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle" '
            f'font-weight="bold">c{c}</text></g>'
        )
    for r in range(n):
        x, y = centre(r)
        out.append(
            f'<g class="rank" data-rank="{r}">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{node_r}" fill="#f4f4f4" stroke="#555"/>'
            f'<text x="{x:.1f}" y="{y - 6:.1f}" text-anchor="middle">rank {r}</text>'
        )
        x0 = x - n * box / 2
        for c in range(n):
            owners = st.owners[r][c]
            tip = f"rank {r} chunk {c}: ranks {'+'.join(str(o) for o in sorted(owners))}"
            out.append(
                f'<rect class="chunk" data-rank="{r}" data-chunk="{c}" '
                f'data-sums="{len(owners)}" x="{x0 + c * box:.1f}" y="{y + 2:.1f}" '
                f'width="{box}" height="{box}" fill="{sum_colour(len(owners), n)}" '
                f'stroke="#333" stroke-width="0.6"><title>{_e(tip)}</title></rect>'
                f'<text x="{x0 + c * box + box / 2:.1f}" y="{y + 13:.1f}" '
                f'text-anchor="middle" font-size="9">{c}</text>'
            )
        out.append("</g>")
    y = height - 22
    out.append(
        f'<g class="legend"><text x="10" y="{y - 8}" font-size="11">colour: how many ranks a '
        f"chunk sums; arrow: the chunk sent this step</text>"
    )
    for k in range(1, n + 1):
        x = 10 + (k - 1) * 46
        label = f"{k}" if k < n else f"{k} (all)"
        out.append(
            f'<rect class="legend-swatch" data-sums="{k}" x="{x}" y="{y}" width="{box}" '
            f'height="{box}" fill="{sum_colour(k, n)}" stroke="#333" stroke-width="0.6"/>'
            f'<text x="{x + box + 3}" y="{y + 11}" font-size="10">{label}</text>'
        )
    out.append("</g></svg>")
    return "\n".join(out)


# -------------------------------------------------------------------------- the compile stages


class PathStep(Protocol):
    """A step on a recorded call path, as plain data (`helpers.tracing.Step` is one)."""

    index: int  # position in the recording
    name: str  # dotted: module + qualname
    module: str
    relpath: str  # file inside its repository
    location: str  # "relpath:line"


class Stage(NamedTuple):
    """A stage of a first `torch.compile` call and the modules whose functions belong to it."""

    name: str
    modules: tuple[str, ...]


#: The stages of a first `torch.compile` call, in order, each with the module prefixes (dotted)
#: of its functions. `torch.fx` is in no stage: every stage builds or runs FX graphs, so an FX
#: function belongs to the stage of its nearest caller that is in one.
COMPILE_STAGES: tuple[Stage, ...] = (
    Stage("Dynamo frame hook", ("torch._dynamo.eval_frame", "torch._dynamo.convert_frame")),
    Stage(
        "bytecode translation",
        (
            "torch._dynamo.bytecode_transformation",
            "torch._dynamo.symbolic_convert",
            "torch._dynamo.variables",
        ),
    ),
    Stage("graph capture", ("torch._dynamo.output_graph",)),
    Stage("AOTAutograd", ("torch._functorch",)),
    Stage("Inductor", ("torch._inductor",)),
    Stage("guards", ("torch._dynamo.guards",)),
)


def _stage_of_module(module: str) -> Stage | None:
    for stage in COMPILE_STAGES:
        if any(module == m or module.startswith(m + ".") for m in stage.modules):
            return stage
    return None


def compile_stage(path: Sequence[PathStep]) -> tuple[str | None, PathStep | None]:
    """(stage name, the step that decided it) for the last step of `path` (a call path,
    outermost first): the innermost step on it whose module is in a `COMPILE_STAGES` stage.
    (None, None) when no step on the path is (e.g. a `torch._dynamo.utils` helper at the root).
    """
    for s in reversed(path):
        stage = _stage_of_module(s.module)
        if stage is not None:
            return stage.name, s
    return None, None


def compile_stages_svg(path: Sequence[PathStep], numbered: bool = True) -> str:
    """The compile stages as SVG with the stage of the last step of `path` highlighted.

    One `g.stage[data-stage][data-active]` box per stage of `COMPILE_STAGES` (name and module
    prefixes), arrows between them, and under them the step's dotted name, its file and the step
    on its call path that decided the stage. The root `svg.stages-svg` carries
    `data-active-stage` and, with numbered=True, `data-step` (the index; leave it out for output
    compared across runs, like `tracing.step_text(..., numbered=False)`).
    """
    step = path[-1]
    active, decided = compile_stage(path)
    bw, bh, gap, top = 178, 70, 20, 34
    width = len(COMPILE_STAGES) * bw + (len(COMPILE_STAGES) - 1) * gap + 20
    height = 180
    number = f' data-step="{step.index}"' if numbered else ""
    out = [
        f'<svg {_SVG} class="stages-svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" data-active-stage="{_e(active or "")}"{number} role="img" '
        f'{_FONT} font-size="12">',
        f"<title>{_e(step.name)}: {_e(active or 'no stage')}</title>",
        '<defs><marker id="stages-head" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#666"/></marker></defs>',
        f'<text class="caption" x="10" y="20">the compile pipeline: where this step is '
        f"({_e(active or 'in no stage')})</text>",
    ]
    for k, stage in enumerate(COMPILE_STAGES):
        x = 10 + k * (bw + gap)
        on = stage.name == active
        fill, stroke, weight = ("#ffd27a", "#b36b00", 3) if on else ("#f2f2f2", "#888", 1)
        out.append(
            f'<g class="stage{" active" if on else ""}" data-stage="{_e(stage.name)}" '
            f'data-active="{"true" if on else "false"}">'
            f'<rect x="{x}" y="{top}" width="{bw}" height="{bh}" rx="8" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{weight}"/>'
            f'<text x="{x + bw / 2}" y="{top + 22}" text-anchor="middle" '
            f'font-weight="{"bold" if on else "normal"}">{_e(stage.name)}</text>'
        )
        for j, module in enumerate(stage.modules):
            short = module.removeprefix("torch.")
            out.append(
                f'<text class="stage-module" x="{x + bw / 2}" y="{top + 40 + 11 * j}" '
                f'text-anchor="middle" font-size="9" fill="#555">{_e(short)}</text>'
            )
        out.append("</g>")
        if k:
            ax = x - gap
            out.append(
                f'<line x1="{ax + 2}" y1="{top + bh / 2}" x2="{x - 3}" y2="{top + bh / 2}" '
                f'stroke="#666" stroke-width="2" marker-end="url(#stages-head)"/>'
            )
    by = top + bh + 28
    how = (
        f"stage from {decided.name} ({decided.relpath})"
        if decided is not None and decided.index != step.index
        else f"stage from its own module ({step.relpath})"
        if decided is not None
        else "no step on its call path is in a stage module"
    )
    out += [
        f'<text class="step-name" x="10" y="{by}" font-weight="bold">{_e(step.name)}</text>',
        f'<text class="step-where" x="10" y="{by + 18}">at {_e(step.location)}</text>',
        f'<text class="step-decided" x="10" y="{by + 36}">{_e(how)}</text>',
        "</svg>",
    ]
    return "\n".join(out)


# ------------------------------------------------------- pictures where inline SVG is not shown

_TITLE = re.compile(r"<title>([^<]*)</title>")


def svg_data_uri(svg: str) -> str:
    """`svg` as a `data:image/svg+xml;base64,...` URI (the same bytes, so the same picture)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def svg_img(svg: str, alt: str | None = None) -> str:
    """`svg` as an HTML `<img>` of its data URI, with `alt` (default: the picture's first
    `<title>`, else "picture"); "" for an empty `svg`.

    What an untrusted notebook still shows in JupyterLab 4: its sanitizer keeps `<img>` with any
    `src` scheme (it checks schemes on `href` and `cite` only) and drops `<svg>`. In an `<img>`
    the picture's `<title>` tooltips and text selection are lost; the pixels are the same.
    """
    if not svg.strip():
        return ""
    if alt is None:
        found = _TITLE.search(svg)
        alt = html.unescape(found.group(1)) if found else "picture"
    return f'<img src="{svg_data_uri(svg)}" alt="{_e(alt)}"/>'


def svg_markdown(svg: str) -> str:
    """The `text/markdown` copy of a displayed SVG: its `svg_img`, as raw HTML in Markdown.

    Markdown rather than HTML: MyST-NB (the book) ranks `text/html` above `image/svg+xml` above
    `text/markdown`, so it keeps drawing the SVG itself. JupyterLab shows no SVG output from an
    untrusted notebook and shows this copy; it ranks Markdown above SVG, so a trusted notebook
    shows the copy too: the same pixels.
    """
    return svg_img(svg)
