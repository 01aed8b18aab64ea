"""Lecture slides from the notebooks: slide metadata for RISE, reveal.js slides exported offline
from the stored outputs, and a presenting copy that RISE may save into.

    python tools/slides.py apply notebooks/*.ipynb     # write cell.metadata.slideshow (idempotent)
    python tools/slides.py check notebooks/*.ipynb     # exit 1 when stored metadata differs
    python tools/slides.py count notebooks/*.ipynb     # sections, RISE slides, exported slides
    python tools/slides.py export --out _build/slides notebooks/*.ipynb   # `make slides`
    python tools/slides.py present notebooks/16_pipeline_parallelism.ipynb  # `make present`

One plan cuts both (`plan`): the notebook becomes a list of *pieces*, each a cell or a part of
one, laid out on 1280x720 slides:
- the title cell and each `## ` section start a top-level slide (1 + sections of them); the
  slides after it, in the same section, are sub-slides below it, each with the section's name as
  a running header;
- a markdown cell starts a slide (one idea: the prose and the code cells that follow it, as long
  as they fit); a long one is cut at its paragraphs, list items, table rows or, for a very long
  paragraph, sentences, and a `### ` heading starts a slide;
- a picture (an image, an SVG, a step viewer's first step) is a slide of its own, code hidden;
- code shows without its asserts (and the comments just above them) and without nbval markers,
  cut to at most CODE_LINES lines (the cut says how many more are in the notebook); its
  outputs follow while they fit, cut to the room left, and the rest go on further slides;
- left out: the setup cell (`setup_notebook(...)`), cells that only check (nothing but asserts,
  imports and checker calls: `check`, `expect_params`, `expect_default`, `present`) and the
  text of harness cells (a `# harness:` comment: launch and timing plumbing; their pictures
  stay).
Heights are estimated from the slide's fonts (LAYOUT, shared with the template's CSS); in the
browser, a slide that still does not fit is scaled down, never below FIT_FLOOR (tests/
test_slides.py walks every slide at 1280x720 and fails on one that scrolls, clips or shrinks
further).

RISE cuts by whole cells: `apply` writes each cell's slide_type from the plan (the type of the
cell's first piece; `skip` for a cell with none), so RISE and the export start the same slides;
the export also cuts inside cells. An output is shown in its richest stored form: a step
viewer's static `text/html` first step where stored, else its first step drawn from the stored
widget state; an SVG or PNG before a `text/markdown` copy of it; one form, never two.

`export` needs reveal.js installed in the venv (`make slides-deps`: npm, pinned in the
Makefile) and copies it next to the slides; the pages load nothing from outside.

`present` copies the notebook into `_build/present/` (ignored by git; replaced each time) and
starts JupyterLab there: RISE's Alt+R saves the notebook before it renders, and what it saves is
the copy, so presenting never rewrites a tracked notebook (turning autosave off would not help:
RISE's preview saves explicitly).
"""

from __future__ import annotations

import argparse
import ast
import base64
import copy
import html
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tools" / "slides_template"
REVEAL = Path(sys.prefix) / "share" / "reveal.js" / "node_modules" / "reveal.js"
PRESENT = ROOT / "_build" / "present"
CHECKERS = {"check", "expect_params", "expect_default", "present"}
HARNESS = re.compile(r"#\s*harness:")
VIEW_MIME = "application/vnd.jupyter.widget-view+json"
STATE_MIME = "application/vnd.pytorch-source-reading.widget-state+json"
# richest first; a step viewer's widget view comes before all of them (VIEW_MIME)
PRIORITY = (
    "image/svg+xml",
    "image/png",
    "image/jpeg",
    "image/gif",
    "text/html",
    "text/markdown",
    "text/latex",
    "text/plain",
)

#: The slide's geometry and fonts, in CSS pixels: the template's CSS is written from these, and
#: the planner estimates heights with them.
LAYOUT = {
    "width": 1280,
    "height": 720,
    "pad_x": 48,
    "pad_y": 22,
    "pad_bottom": 30,  # the slide number sits in the bottom right corner
    "running": 26,  # the running header of a sub-slide (its line and margin)
    "prose_px": 22,
    "prose_lh": 1.4,
    "code_px": 16,
    "code_lh": 1.35,
    "h1_px": 40,
    "h2_px": 32,
    "h3_px": 26,
    "table_px": 17,
}
FIT_FLOOR = 0.8  # the browser scales a slide that does not fit, down to this and no further
CODE_LINES = 18  # code shown on a slide, at most (long code is cut, the rest is in the notebook)
MIN_OUTPUT_LINES = 6  # an output cut to fewer lines than this goes to a slide of its own


def _px(name: str) -> float:
    return float(LAYOUT[name])


CONTENT_W = _px("width") - 2 * _px("pad_x")
# the content height of a slide (less the running header and a margin)
BUDGET = _px("height") - _px("pad_y") - _px("pad_bottom") - _px("running") - 8
PROSE_LINE = _px("prose_px") * _px("prose_lh")
CODE_LINE = _px("code_px") * _px("code_lh")
# characters a line holds: Source Sans Pro (the theme's font, shipped with reveal.js) averages
# 0.43 em a character in this prose (measured), monospace is 0.6 em; both counted wider
PROSE_CPL = int(CONTENT_W / (_px("prose_px") * 0.47))
CODE_CPL = int((CONTENT_W - 24) / (_px("code_px") * 0.61))
CODE_BOX = 18.0  # a code block's padding, border and margin
OUTPUT_BOX = 10.0
CELL_GAP = 10.0  # between two cells on a slide
PARA_GAP = 0.5 * _px("prose_px")


# --- which cells are left out ---------------------------------------------------------------


def _statement_checks(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assert | ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name in CHECKERS
    return False


def is_check_only(cell) -> bool:
    """A code cell that only checks: setup, or nothing but asserts, imports and checker calls."""
    if cell.cell_type != "code":
        return False
    if "setup_notebook(" in cell.source:
        return True
    try:
        body = ast.parse(cell.source).body
    except SyntaxError:  # IPython magics: shown
        return False
    return bool(body) and all(_statement_checks(node) or _only_asserts(node) for node in body)


def is_harness(cell) -> bool:
    """A code cell marked `# harness:` (launch or timing plumbing): its code is not shown."""
    return cell.cell_type == "code" and bool(HARNESS.search(cell.source))


# --- code and text, cut to a slide ----------------------------------------------------------


# CJK characters and full-width punctuation: about 2.4 prose characters wide, 2 in monospace
_WIDE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def _width(line: str) -> int:
    return len(line) + len(_WIDE.findall(line))


def _visual_lines(text: str, cpl: int) -> int:
    return sum(max(1, math.ceil(_width(line) / cpl)) for line in text.split("\n"))


def _only_asserts(node: ast.stmt) -> bool:
    """An assert, or a compound statement (a loop, an if, a with) holding nothing but them."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.For | ast.AsyncFor | ast.While | ast.If | ast.With | ast.AsyncWith):
        bodies = [node.body, getattr(node, "orelse", [])]
        return all(_only_asserts(s) for body in bodies for s in body)
    return False


def _parse(source: str) -> ast.Module | None:
    """`source` parsed, IPython's `%` and `!` lines read as `pass` (same lines); None if not
    Python."""
    lines = [re.sub(r"^(\s*)(%|!(?!=)).*$", r"\1pass", line) for line in source.split("\n")]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def shown_code(source: str) -> str:
    """The code a slide shows: no asserts (nor loops and ifs that only assert, nor the comment
    lines just above them), no nbval markers or `# fmt: skip`; a block that only asserts
    becomes `...  # checked in the notebook`."""
    lines = source.split("\n")
    drop: set[int] = set()
    replace: dict[int, str] = {}
    tree = _parse(source)
    for node in ast.walk(tree) if tree else ():
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                continue
            checks = [s for s in stmts if _only_asserts(s)]
            if not checks or (len(checks) == len(stmts) and isinstance(node, ast.Module)):
                continue
            for stmt in checks:
                first = stmt.lineno - 1
                indent = len(lines[first]) - len(lines[first].lstrip())
                while first > 0 and lines[first - 1].strip().startswith("#"):
                    above = lines[first - 1]
                    if len(above) - len(above.lstrip()) != indent:
                        break
                    first -= 1
                drop.update(range(first, stmt.end_lineno))
            if len(checks) == len(stmts):  # the block would be empty
                line = stmts[0].lineno - 1
                indent = len(lines[line]) - len(lines[line].lstrip())
                replace[line] = " " * indent + "...  # checked in the notebook"
    kept = []
    for i, line in enumerate(lines):
        if i in replace and not any(j in drop and j not in replace for j in _enclosing(tree, i)):
            kept.append(replace[i])
        elif i in drop or re.match(r"\s*#\s*NBVAL_", line):
            continue
        else:
            kept.append(re.sub(r"\s*# fmt: (skip|off|on)\s*$", "", line))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")


def _enclosing(tree: ast.Module | None, line: int) -> list[int]:
    """The first lines of the statements that hold line `line` (0-based), itself excluded."""
    found = []
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.stmt) and node.lineno - 1 < line < node.end_lineno:
            found.append(node.lineno - 1)
    return found


def _statement_starts(code: str) -> set[int]:
    try:
        return {node.lineno - 1 for node in ast.parse(code).body}
    except SyntaxError:
        return set()


def cut_code(code: str, max_lines: int) -> str:
    """`code` in at most `max_lines` visual lines; a cut ends at a top-level statement when one
    is near, and says how many lines the notebook has beyond it."""
    if _visual_lines(code, CODE_CPL) <= max_lines:
        return code
    lines = code.split("\n")
    keep, used = 0, 0
    for line in lines:
        need = max(1, math.ceil(_width(line) / CODE_CPL))
        if used + need > max_lines - 1:
            break
        keep, used = keep + 1, used + need
    starts = [s for s in _statement_starts(code) if max(1, keep // 2) <= s <= keep]
    if starts and max(starts) < len(lines):
        keep = max(starts)
    while keep > 1 and not lines[keep - 1].strip():
        keep -= 1
    rest = len(lines) - keep
    return "\n".join([*lines[:keep], f"# … {rest} more lines in the notebook"])


def cut_text(text: str, max_lines: int) -> str:
    """A text output in at most `max_lines` visual lines, saying how many more there are."""
    body = text.rstrip("\n")
    if _visual_lines(body, CODE_CPL) <= max_lines:
        return text
    lines = body.split("\n")
    keep, used = 0, 0
    for line in lines:
        need = max(1, math.ceil(_width(line) / CODE_CPL))
        if used + need > max_lines - 1:
            break
        keep, used = keep + 1, used + need
    keep = max(keep, 1)
    return "\n".join([*lines[:keep], f"… {len(lines) - keep} more lines in the notebook"]) + "\n"


# --- markdown: blocks and heights -----------------------------------------------------------

_ITEM = re.compile(r"^(\s{0,3})([-*+]|\d+[.)])\s")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s")
_SENTENCE_END = re.compile(r"(?<=[.;:?!])\s+(?=[A-Z`*(\[])")


@dataclass
class Block:
    kind: str  # heading, para, item, fence, table, html
    text: str
    sep: str = "\n\n"  # what separated it from the block before, in the source

    @property
    def level(self) -> int:
        found = _HEADING.match(self.text)
        return len(found.group(1)) if found else 0


def _md_blocks(text: str) -> list[Block]:
    """`text` cut into its blocks: headings, paragraphs, list items, fences, tables."""
    blocks: list[Block] = []
    current: list[str] = []
    kind, sep = "", "\n\n"
    fence: str | None = None

    def flush() -> None:
        nonlocal current, kind, sep
        if current:
            blocks.append(Block(kind, "\n".join(current), sep))
            sep = "\n"
        current, kind = [], ""

    for line in text.split("\n"):
        if fence is not None:
            current.append(line)
            if line.strip().startswith(fence):
                fence = None
                flush()
            continue
        if not line.strip():
            flush()
            sep = "\n\n"
            continue
        opening = _FENCE.match(line)
        if opening:
            flush()
            kind, fence = "fence", opening.group(1)
            current.append(line)
        elif _HEADING.match(line):
            flush()
            kind = "heading"
            current.append(line)
            flush()
        elif line.lstrip().startswith("|"):
            if kind != "table":
                flush()
                kind = "table"
            current.append(line)
        elif _ITEM.match(line):
            flush()
            kind = "item"
            current.append(line)
        else:
            if kind == "table":
                flush()
            if not kind:
                kind = "html" if line.lstrip().startswith("<") else "para"
            current.append(line)
    flush()
    return blocks


def _visible(text: str) -> str:
    """What markdown shows of `text`, for counting characters: no link targets or markup."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[*_`]|^\s*([-*+]|\d+[.)])\s|^#+\s", "", text, flags=re.M)


def _prose_height(text: str, px: float, cpl: int, lh: float = 1.0) -> float:
    # a code span is monospace at 0.85 em with padding: about 1.3 prose characters a character
    spans = sum(len(m) + 2 for m in re.findall(r"`([^`]+)`", text))
    visible = " ".join(_visible(text).split())
    chars = len(visible) + int(0.3 * spans) + int(1.4 * len(_WIDE.findall(visible)))
    return max(1, math.ceil(chars / cpl)) * px * lh


def _table_rows(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


def _table_height(rows: list[str]) -> float:
    px = _px("table_px")
    cpl = int(CONTENT_W / (px * 0.52)) - 4
    height = 8.0
    for row in rows:
        if re.match(r"^\s*\|?\s*:?-{2,}", row):
            continue
        cells = [c for c in row.strip().strip("|").split("|")]
        chars = sum(len(" ".join(_visible(c).split())) + 2 for c in cells)
        height += max(1, math.ceil(chars * 1.2 / cpl)) * px * 1.3 + 9
    return height


def block_height(block: Block) -> float:
    if block.kind == "heading":
        px = _px({1: "h1_px", 2: "h2_px"}.get(block.level, "h3_px"))
        cpl = int(CONTENT_W / (px * 0.55))
        return _prose_height(block.text, px, cpl, 1.2) + 0.6 * px
    if block.kind == "fence":
        code = "\n".join(block.text.split("\n")[1:-1])
        return _visual_lines(code, CODE_CPL) * CODE_LINE + CODE_BOX
    if block.kind == "table":
        return _table_height(_table_rows(block.text)) + PARA_GAP
    if block.kind == "item":
        return _prose_height(block.text, _px("prose_px"), PROSE_CPL - 4, _px("prose_lh")) + 4
    return _prose_height(block.text, _px("prose_px"), PROSE_CPL, _px("prose_lh")) + PARA_GAP


def _split_block(block: Block, room: float) -> list[Block]:
    """A block taller than `room`: a table by rows (each part keeps the header), a paragraph or
    a list item by sentences; other blocks stay whole."""
    if block.kind == "table":
        rows = _table_rows(block.text)
        header, body = rows[:2], rows[2:]
        parts, current = [], []
        for row in body:
            if current and _table_height(header + current + [row]) + PARA_GAP > room:
                parts.append(current)
                current = []
            current.append(row)
        parts.append(current)
        return [Block("table", "\n".join(header + p), block.sep if i == 0 else "\n\n")
                for i, p in enumerate(parts)]  # fmt: skip
    if block.kind in ("para", "item"):
        sentences = _SENTENCE_END.split(block.text)
        parts, current = [], ""
        for sentence in sentences:
            joined = f"{current} {sentence}".strip()
            if current and block_height(Block(block.kind, joined)) > room:
                parts.append(current)
                current = sentence
            else:
                current = joined
        parts.append(current)
        first, *rest = parts
        return [Block(block.kind, first, block.sep)] + [Block("para", p) for p in rest]
    return [block]


def _join(blocks: list[Block]) -> str:
    return "".join((b.sep if i else "") + b.text for i, b in enumerate(blocks))


def markdown_parts(source: str) -> list[tuple[str, float]]:
    """A markdown cell cut into the parts that fit a slide each: (source, estimated height).
    A `###` heading (or deeper) starts a part, and a heading never ends one."""
    blocks: list[Block] = []
    for block in _md_blocks(source):
        blocks += (
            _split_block(block, BUDGET * 0.8) if block_height(block) > BUDGET * 0.8 else [block]
        )
    parts: list[list[Block]] = [[]]
    used = 0.0
    for block in blocks:
        height = block_height(block)
        new = parts[-1] and (
            used + height > BUDGET - CELL_GAP or (block.kind == "heading" and block.level >= 3)
        )
        if new:
            carried = []
            while parts[-1] and parts[-1][-1].kind == "heading":
                carried.insert(0, parts[-1].pop())
            if not parts[-1]:  # only headings: keep them with this block
                parts[-1] = carried
            else:
                parts.append(carried)
            used = sum(block_height(b) for b in parts[-1])
        parts[-1].append(block)
        used += height
    return [(_join(p), sum(block_height(b) for b in p)) for p in parts if p]


# --- outputs: the richest stored form, its height, how to cut it ----------------------------


@dataclass
class Shown:
    """One output as a slide shows it: a copy holding one mime type."""

    output: dict
    kind: str  # picture, text, markdown, html
    height: float

    def cut(self, room: float) -> Shown | None:
        """This output in `room` px, or None when it cannot be cut that small."""
        if self.height <= room:
            return self
        lines = int((room - OUTPUT_BOX) // CODE_LINE)
        if self.kind == "text" and lines >= MIN_OUTPUT_LINES:
            out = copy.deepcopy(self.output)
            if out["output_type"] == "stream":
                out["text"] = cut_text(out["text"], lines)
            else:
                out["data"]["text/plain"] = cut_text(out["data"]["text/plain"], lines)
            return _shown(out)
        if self.kind == "markdown":
            text = self.output["data"]["text/markdown"]
            fence = re.search(r"```[^\n]*\n(.*?)\n```", text, re.S)
            if not fence:
                return None
            outside = text[: fence.start()] + text[fence.end() :]
            room_code = room - OUTPUT_BOX - _markdown_height(outside) - CODE_BOX
            lines = int(room_code // CODE_LINE)
            if lines < MIN_OUTPUT_LINES:
                return None
            body = cut_code(fence.group(1), lines)
            out = copy.deepcopy(self.output)
            out["data"]["text/markdown"] = text[: fence.start(1)] + body + text[fence.end(1) :]
            return _shown(out)
        return None


def _markdown_height(text: str) -> float:
    return sum(block_height(b) for b in _md_blocks(text)) if text.strip() else 0.0


def _first_step(bundle: dict) -> tuple[str, str, int, str] | None:
    """(picture, text, steps, label) of a step viewer's first step, from its stored state."""
    models = [m.get("state", {}) for m in bundle.get("state", {}).values()]
    state = next((m for m in models if m.get("steps") is not None), None)
    if state is None:
        return None
    steps = state.get("steps") or [{}]
    first = steps[0] if isinstance(steps[0], dict) else {}
    picture = first.get("svg") or state.get("picture") or ""
    text = first.get("text") or "\n".join(str(first[k]) for k in ("head", "body") if first.get(k))
    return picture, re.sub(r"<[^>]+>", "", text), len(steps), state.get("label") or "step"


def viewer_html(data: dict) -> str | None:
    """A step viewer's first step as a static picture: its stored `text/html` when it has one,
    else drawn from the widget state stored next to the view."""
    if data.get("text/html"):
        return str(data["text/html"])
    found = _first_step(data.get(STATE_MIME) or {})
    if not found or not found[0]:
        return None
    picture, text, steps, label = found
    text = cut_text(text, 7).rstrip("\n") if text else ""
    src = "data:image/svg+xml;base64," + base64.b64encode(picture.encode()).decode()
    return (
        f'<div class="lecture-viewer"><img src="{src}" alt="{html.escape(label)} 1 of {steps}">'
        + (f"<pre>{html.escape(text)}</pre>" if text else "")
        + f'<p class="lecture-viewer-note">{html.escape(label)} 1 of {steps}: the notebook\'s '
        "viewer steps through the rest</p></div>"
    )


def _is_picture_html(text: str) -> bool:
    return bool(re.search(r"<(svg|img)\b", text, re.I))


def _shown(out: dict) -> Shown:
    if out["output_type"] == "stream":
        return Shown(
            out, "text", _visual_lines(out["text"].rstrip("\n"), CODE_CPL) * CODE_LINE + OUTPUT_BOX
        )
    mime = next(iter(out["data"]))
    value = str(out["data"][mime])
    if mime.startswith("image/") or (
        mime in ("text/html", "text/markdown") and _is_picture_html(value)
    ):
        return Shown(out, "picture", BUDGET)
    if mime == "text/html":
        rows = len(re.findall(r"<tr\b", value, re.I))
        lines = len(re.findall(r"<(br|p|li|div|h\d)\b", value, re.I))
        return Shown(out, "html", (rows + lines + 1) * _px("table_px") * 1.6 + OUTPUT_BOX)
    if mime == "text/markdown":
        fence = re.search(r"```[^\n]*\n(.*?)\n```", value, re.S)
        code = fence.group(1) if fence else ""
        outside = value[: fence.start()] + value[fence.end() :] if fence else value
        height = _markdown_height(outside) + OUTPUT_BOX
        if fence:
            height += _visual_lines(code, CODE_CPL) * CODE_LINE + CODE_BOX
        return Shown(out, "markdown", height)
    return Shown(out, "text", _visual_lines(value.rstrip("\n"), CODE_CPL) * CODE_LINE + OUTPUT_BOX)


def show_output(output) -> Shown | None:
    """`output` in the one form a slide shows (None: nothing to show)."""
    out = copy.deepcopy(dict(output))
    if out["output_type"] == "stream":
        return _shown(out) if out.get("text", "").strip() else None
    if out["output_type"] == "error":
        text = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"
        return _shown({"output_type": "stream", "name": "stderr", "text": text + "\n"})
    data = out.get("data", {})
    if VIEW_MIME in data:
        picture = viewer_html(data)
        if picture:
            out["data"] = {"text/html": picture}
            out["metadata"] = {}
            return _shown(out)
    mime = next((m for m in PRIORITY if m in data), None)
    if mime is None or (mime == "text/plain" and not str(data[mime]).strip()):
        return None
    out["data"] = {mime: data[mime]}
    out["metadata"] = {k: v for k, v in out.get("metadata", {}).items() if k == mime}
    return _shown(out)


# --- the plan -------------------------------------------------------------------------------


@dataclass
class Piece:
    """One cell of the exported slides: a cell of the notebook, or a part of one."""

    cell: dict
    index: int  # the notebook cell it comes from
    kind: str  # title, heading, prose, code, picture, output
    height: float
    slide_type: str = "-"
    section: str = ""
    outputs: list = field(default_factory=list)


def _section_title(cell) -> str:
    first = cell.source.split("\n", 1)[0]
    return re.sub(r"^#+\s*", "", first).replace("`", "").strip()


def _starts_section(index: int, cell) -> bool:
    return index == 0 or (cell.cell_type == "markdown" and cell.source.startswith("## "))


class _Planner:
    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.used = BUDGET  # nothing can join before the first slide
        self.section = ""

    def room(self) -> float:
        if self.pieces and self.pieces[-1].kind == "picture":
            return 0.0
        return BUDGET - self.used

    def add(self, piece: Piece, new: bool = False, section: bool = False) -> None:
        piece.height += CELL_GAP
        if section:
            piece.slide_type, self.used = "slide", piece.height
        elif new or piece.kind == "picture" or piece.height > self.room() + 0.5:
            piece.slide_type, self.used = "subslide", piece.height
        else:
            piece.slide_type, self.used = "-", self.used + piece.height
        piece.section = self.section
        self.pieces.append(piece)


def _part(cell, index: int, k: int, **changes) -> dict:
    part = copy.deepcopy(dict(cell))
    part = nbformat.from_dict(part)
    if k:
        part["id"] = f"{cell.get('id', 'cell')}-{k}"
    for key, value in changes.items():
        part[key] = value
    part.setdefault("metadata", {})
    dropped = ("slideshow", "jupyter", "collapsed")  # the export sets its own
    part["metadata"] = nbformat.from_dict(
        {k: v for k, v in part["metadata"].items() if k not in dropped}
    )
    return part


def _hide_input(part) -> None:
    part["metadata"]["transient"] = {"remove_source": True}


def _plan_code(planner: _Planner, cell, index: int) -> None:
    harness = is_harness(cell)
    shown = [s for s in (show_output(o) for o in cell.get("outputs", [])) if s]
    pictures = [s for s in shown if s.kind == "picture"]
    texts = [] if harness else [s for s in shown if s.kind != "picture"]
    k = 0
    for picture in pictures:  # each a slide of its own, first; the code stays in the notebook
        part = _part(cell, index, k, outputs=[picture.output])
        _hide_input(part)
        planner.add(Piece(part, index, "picture", picture.height), new=True)
        k += 1
    if harness or (pictures and not texts):
        return
    code = "" if pictures else shown_code(cell.source)
    limit = CODE_LINES if texts else CODE_LINES + 6
    code = cut_code(code, limit) if code else ""
    code_h = _visual_lines(code, CODE_CPL) * CODE_LINE + CODE_BOX if code else 0.0
    first = texts[0] if texts else None
    need = code_h + (min(first.height, MIN_OUTPUT_LINES * CODE_LINE + OUTPUT_BOX) if first else 0)
    joins = need <= planner.room() - CELL_GAP
    room = (planner.room() if joins else BUDGET) - CELL_GAP
    new = not joins
    current: list[Shown] = []
    left = room - code_h
    pending = list(texts)
    while pending:
        out = pending[0]
        fitted = out.cut(left)
        if fitted is None and not current and not code:  # alone on a slide: cut to the slide
            fitted = out.cut(BUDGET - CELL_GAP) or out
        if fitted is None:
            break
        current.append(fitted)
        left -= fitted.height
        pending.pop(0)
        if fitted is not out:
            break
    part = _part(cell, index, k, outputs=[s.output for s in current], source=code)
    if not code:
        _hide_input(part)
    if code or current:
        planner.add(
            Piece(
                part, index, "code" if code else "output", code_h + sum(s.height for s in current)
            ),
            new=new,
        )
        k += 1
    while pending:  # the rest, each on the slides after
        out = pending.pop(0)
        fitted = out.cut(planner.room() - CELL_GAP)
        alone = fitted is None
        if alone:
            fitted = out.cut(BUDGET - CELL_GAP) or out
        part = _part(cell, index, k, outputs=[fitted.output])
        _hide_input(part)
        planner.add(Piece(part, index, "output", fitted.height), new=alone)
        k += 1


def plan(nb) -> list[Piece]:
    """The notebook's slides, piece by piece, by the rule in the module docstring."""
    planner = _Planner()
    for index, cell in enumerate(nb.cells):
        starts = _starts_section(index, cell)
        if starts:
            planner.section = _section_title(cell) if cell.cell_type == "markdown" else ""
        if cell.cell_type == "markdown":
            parts = markdown_parts(cell.source) if cell.source.strip() else []
            for k, (text, height) in enumerate(parts):
                kind = ("title" if index == 0 else "heading") if starts and k == 0 else "prose"
                planner.add(Piece(_part(cell, index, k, source=text), index, kind, height),
                            new=True, section=starts and k == 0)  # fmt: skip
        elif cell.cell_type == "code" and not is_check_only(cell):
            _plan_code(planner, cell, index)
    for piece in planner.pieces:
        data = {"kind": piece.kind}
        if piece.slide_type == "subslide" and piece.section:
            data["running"] = piece.section
        piece.cell["metadata"]["slideshow"] = {"slide_type": piece.slide_type, "data": data}
    return planner.pieces


def compute(nb) -> list[str]:
    """The slide_type of every cell of `nb` (RISE cuts by cells): its first piece's type, or
    `skip` for a cell with no piece."""
    types = ["skip"] * len(nb.cells)
    seen: set[int] = set()
    for piece in plan(nb):
        if piece.index not in seen:
            seen.add(piece.index)
            types[piece.index] = piece.slide_type
    return types


def lecture(nb):
    """The notebook the slides are exported from: one cell per piece, with slide metadata."""
    out = nbformat.from_dict(copy.deepcopy(dict(nb)))
    out.cells = [piece.cell for piece in plan(nb)]
    out.metadata.pop("widgets", None)
    return out


def stored(nb) -> list[str | None]:
    return [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]


def slide_count(nb) -> int:
    """Top-level slides (reveal.js horizontal sections) that `nb`'s stored metadata makes."""
    return sum(t == "slide" for t in stored(nb))


def apply(path: Path) -> bool:
    """Write the computed slide metadata into the notebook; returns whether it changed."""
    nb = nbformat.read(path, 4)
    types = compute(nb)
    if stored(nb) == types and all(
        set(c.metadata.get("slideshow", {})) == {"slide_type"} for c in nb.cells
    ):
        return False
    for cell, slide_type in zip(nb.cells, types, strict=True):
        cell.metadata["slideshow"] = {"slide_type": slide_type}
    nbformat.write(nb, path)
    return True


def differences(path: Path) -> list[str]:
    """Cells whose stored slide metadata differs from the computed one."""
    nb = nbformat.read(path, 4)
    return [
        f"{path.name} cell {i} ({cell.get('id', '?')}): stored {old!r}, expected {new!r}"
        for i, (cell, old, new) in enumerate(zip(nb.cells, stored(nb), compute(nb), strict=True))
        if old != new
    ]


# --- export ---------------------------------------------------------------------------------


def install_reveal(out: Path) -> Path:
    """Copy reveal.js (dist/ and the notes plugin) into `out/reveal.js`; returns it."""
    if not (REVEAL / "dist" / "reveal.js").exists():
        raise FileNotFoundError(f"reveal.js is not installed at {REVEAL}: run `make slides-deps`")
    target = out / "reveal.js"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(REVEAL / "dist", target / "dist", ignore=shutil.ignore_patterns("*.map"))
    shutil.copytree(REVEAL / "plugin" / "notes", target / "plugin" / "notes")
    return target


def exporter():
    """nbconvert's SlidesExporter with the offline template and the local reveal.js."""
    from nbconvert import SlidesExporter

    return SlidesExporter(
        template_name="offline",
        extra_template_basedirs=[str(TEMPLATES)],
        reveal_url_prefix="reveal.js",
        reveal_theme="white",
        reveal_width=str(LAYOUT["width"]),
        reveal_height=str(LAYOUT["height"]),
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


def _book_module():
    """tools/book.py (its drop_live_views), also when this file runs as a script."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tools import book

    return book


def export(paths: list[Path], out: Path) -> list[Path]:
    """Write `<out>/<notebook>.slides.html` for each notebook (the plan, stored outputs; a
    frame of a server the kernel ran becomes a line saying so, as in the book); returns the
    files written."""
    out.mkdir(parents=True, exist_ok=True)
    install_reveal(out)
    slides = exporter()
    drop_live_views = _book_module().drop_live_views
    resources = {"lecture": dict(LAYOUT, fit_floor=FIT_FLOOR)}
    written = []
    for path in paths:
        nb = nbformat.read(path, 4)
        drop_live_views(nb)
        body, _ = slides.from_notebook_node(lecture(nb), resources=copy.deepcopy(resources))
        target = out / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


# --- present --------------------------------------------------------------------------------


def present_copy(path: Path, folder: Path = PRESENT) -> Path:
    """Copy `path` into `folder` (a notebook under notebooks/ keeps its place below it:
    notebooks/zh/X.ipynb becomes <folder>/zh/X.ipynb); returns the copy."""
    path = path.resolve()
    try:
        relative = path.relative_to(ROOT / "notebooks")
    except ValueError:
        relative = Path(path.name)
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return target


def present(path: Path, folder: Path = PRESENT, lab_args: list[str] | None = None) -> int:
    """JupyterLab over a fresh copy of `path` in `folder`, opened at the copy (RISE: Alt+R)."""
    target = present_copy(path, folder)
    jupyter = Path(sys.executable).with_name("jupyter")
    url = "/lab/tree/" + target.relative_to(folder).as_posix()
    cmd = [str(jupyter), "lab", f"--notebook-dir={folder}", f"--LabApp.default_url={url}"]
    cmd += lab_args or []
    print(f"presenting a copy: {target} (RISE: Alt+R; it saves into the copy)", flush=True)
    return subprocess.call(cmd, env=dict(os.environ))


def counts(path: Path) -> dict:
    nb = nbformat.read(path, 4)
    pieces = plan(nb)
    types = compute(nb)
    return {
        "cells": len(nb.cells),
        "sections": types.count("slide"),
        "rise": sum(t in ("slide", "subslide") for t in types),
        "exported": sum(p.slide_type in ("slide", "subslide") for p in pieces),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["apply", "check", "count", "export", "present"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "slides")
    parser.add_argument("--dir", type=Path, default=PRESENT, help="present: the copy's folder")
    args, lab_args = parser.parse_known_args(argv)
    if lab_args and args.command != "present":
        parser.error(f"unrecognized arguments: {' '.join(lab_args)}")
    paths = sorted(args.notebooks)
    if args.command == "apply":
        for path in paths:
            if apply(path):
                print(f"slide metadata written: {path}")
    elif args.command == "check":
        found = [line for path in paths for line in differences(path)]
        if found:
            print("\n".join(found), file=sys.stderr)
            print(
                "slide metadata is stale: run `python tools/slides.py apply` on them",
                file=sys.stderr,
            )
            return 1
    elif args.command == "count":
        for path in paths:
            n = counts(path)
            print(
                f"{path.name}: {n['cells']} cells, {n['sections']} sections, "
                f"{n['rise']} RISE slides, {n['exported']} exported slides"
            )
    elif args.command == "present":
        if len(paths) != 1:
            parser.error("present takes one notebook (make present NB=notebooks/NN_x.ipynb)")
        return present(paths[0], args.dir, lab_args)
    else:
        for target in export(paths, args.out):
            print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
