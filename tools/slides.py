"""Slide metadata for every notebook, computed from its structure; reveal.js slides, offline.

    python tools/slides.py apply notebooks/*.ipynb     # write cell.metadata.slideshow (idempotent)
    python tools/slides.py check notebooks/*.ipynb     # exit 1 when stored metadata differs
    python tools/slides.py count notebooks/*.ipynb     # slides per notebook
    python tools/slides.py export --out _build/slides notebooks/*.ipynb   # `make slides`

The rule (the same metadata drives RISE in JupyterLab and `make slides`):
- the title cell and each `## ` section start a slide: a notebook has 1 + (number of `## `
  sections) top-level slides;
- a section whose visible cells are longer than SECTION_LINES lines gets one sub-slide (a slide
  below it), starting at its first `### ` heading, else at the visible cell where half its
  length is reached: every section is one or two slides;
- cells that only check are skipped: the setup cell (`setup_notebook(...)`), and code cells
  whose statements are all asserts, imports or calls to a checker (`check`, `expect_params`,
  `expect_default`, `present`); every other cell continues the slide (`-`).

`export` needs reveal.js installed in the venv (`make slides-deps`: npm, pinned in the
Makefile) and copies it next to the slides; the pages load nothing from outside.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tools" / "slides_template"
REVEAL = Path(sys.prefix) / "share" / "reveal.js" / "node_modules" / "reveal.js"
CHECKERS = {"check", "expect_params", "expect_default", "present"}
SECTION_LINES = 40  # a section longer than this (source + output lines) gets a second slide
OUTPUT_LINES_CAP = 15  # a long output counts as this many lines (the slide scrolls)


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
    return bool(body) and all(_statement_checks(node) for node in body)


def _output_lines(cell) -> int:
    total = 0
    for output in cell.get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        if any(k.startswith("image/") for k in output.get("data", {})):
            total += OUTPUT_LINES_CAP
        else:
            total += min(OUTPUT_LINES_CAP, len(str(text).splitlines()))
    return total


def _lines(cell) -> int:
    return len(cell.source.splitlines()) + _output_lines(cell)


def _starts_section(index: int, cell) -> bool:
    return index == 0 or (cell.cell_type == "markdown" and cell.source.startswith("## "))


def compute(nb) -> list[str]:
    """The slide_type of every cell of `nb`, by the rule in the module docstring."""
    types = ["skip" if is_check_only(c) else "-" for c in nb.cells]
    starts = [i for i, c in enumerate(nb.cells) if _starts_section(i, c)]
    for start, end in zip(starts, starts[1:] + [len(nb.cells)], strict=True):
        types[start] = "slide"
        shown = [i for i in range(start + 1, end) if types[i] != "skip"]
        lengths = [_lines(nb.cells[i]) for i in [start, *shown]]
        if sum(lengths) <= SECTION_LINES or not shown:
            continue
        sub = [i for i in shown if nb.cells[i].source.startswith("### ")]
        if not sub:
            running, half = lengths[0], sum(lengths) / 2
            for i, length in zip(shown, lengths[1:], strict=True):
                if running + length > half:
                    sub = [i]
                    break
                running += length
        types[sub[0]] = "subslide"
    return types


def stored(nb) -> list[str | None]:
    return [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]


def slide_count(nb) -> int:
    """Top-level slides (reveal.js horizontal sections) that `nb`'s stored metadata makes."""
    return sum(t == "slide" for t in stored(nb))


def apply(path: Path) -> bool:
    """Write the computed slide metadata into the notebook; returns whether it changed."""
    nb = nbformat.read(path, 4)
    types = compute(nb)
    if stored(nb) == types:
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
    )


def _book_module():
    """tools/book.py (its drop_live_views), also when this file runs as a script."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tools import book

    return book


def export(paths: list[Path], out: Path) -> list[Path]:
    """Write `<out>/<notebook>.slides.html` for each notebook (stored metadata, stored
    outputs; a frame of a server the kernel ran becomes a line saying so, as in the book);
    returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    install_reveal(out)
    slides = exporter()
    drop_live_views = _book_module().drop_live_views
    written = []
    for path in paths:
        nb = nbformat.read(path, 4)
        drop_live_views(nb)
        body, _ = slides.from_notebook_node(nb)
        target = out / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["apply", "check", "count", "export"])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "slides")
    args = parser.parse_args(argv)
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
            types = compute(nbformat.read(path, 4))
            print(
                f"{path.name}: {types.count('slide')} slides, {types.count('subslide')} sub-slides"
            )
    else:
        for target in export(paths, args.out):
            print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
