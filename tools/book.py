"""Build the rendered book: stage the repository's layout, then run Sphinx (`make book`).

    python tools/book.py [--out _build/book] [--jobs N]

Staging (`<out>/../book-src/<language>/`, rebuilt each time) holds `index.md` and `conf.py`'s
siblings from `book/`, a copy of `notebooks/NN_*.ipynb` and of `docs/*.md` (when present), in
the same folders as in the repository, so the relative links written for GitHub resolve in the
book. Notebooks are rendered from their stored outputs: nothing is executed.

A second language (issue 15) is another staging folder built from `notebooks/<lang>/` into
`<out>/<lang>/` with `-D language=<lang>`: `stage()` and `build()` take the language.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"


def notebooks(lang: str = "en") -> list[Path]:
    """The notebooks of one language, in reading order (their file names start with NN_)."""
    folder = NOTEBOOKS if lang == "en" else NOTEBOOKS / lang
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


# an output that shows a server the kernel ran (Netron's IFrame in notebook 10): dead in the book
LIVE_VIEW = re.compile(r"<iframe\b[^>]*\bsrc=\"https?://(127\.0\.0\.1|localhost)[:/\"]", re.I)
LIVE_VIEW_NOTE = "(a view served live by the notebook's kernel: run the notebook to see it)"


def stage_notebook(source: Path, target: Path) -> int:
    """Copy one notebook for the book; returns how many live-only outputs were replaced.

    An output whose HTML frames a server on this machine (started by the kernel, gone once it
    stopped) becomes a line of text saying so: in the book it would be an empty frame and a
    failed request.
    """
    nb = nbformat.read(source, 4)
    replaced = drop_live_views(nb)
    nbformat.write(nb, target)
    return replaced


def drop_live_views(nb) -> int:
    """Replace, in place, each output that frames a server on this machine by a line of text;
    returns how many (also used by tools/slides.py)."""
    replaced = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if LIVE_VIEW.search(str(output.get("data", {}).get("text/html", ""))):
                output["data"] = {"text/plain": LIVE_VIEW_NOTE}
                replaced += 1
    return replaced


def stage(staging: Path, lang: str = "en") -> Path:
    """Copy the book's sources into `staging` (emptied first); returns it."""
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "notebooks").mkdir(parents=True)
    for path in BOOK.iterdir():
        if path.suffix == ".md":
            shutil.copy2(path, staging / path.name)
    for nb in notebooks(lang):
        stage_notebook(nb, staging / "notebooks" / nb.name)
    if DOCS.is_dir():
        (staging / "docs").mkdir()
        for doc in DOCS.glob("*.md"):
            shutil.copy2(doc, staging / "docs" / doc.name)
    teaching = staging / "docs" / "teaching.md"
    if not teaching.exists():  # the landing page links to it; written separately (issue 14)
        teaching.parent.mkdir(exist_ok=True)
        teaching.write_text("# Teaching guide\n\nNot written yet: see `docs/teaching.md`.\n")
    return staging


def build(out: Path, lang: str = "en", jobs: str = "auto", quiet: bool = True) -> float:
    """Stage and build the HTML book into `out`; returns the build's seconds.

    Raises CalledProcessError (with Sphinx's output) when Sphinx fails or warns: a warning is a
    broken link, an unknown cross-reference or an output the book cannot show.
    """
    start = time.monotonic()
    staging = stage(out.parent / "book-src" / lang, lang)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-W", "--keep-going"]
    cmd += ["-j", jobs, "-D", f"language={lang}", "-E"]
    if quiet:
        cmd.append("-q")
    cmd += [str(staging), str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "book")
    parser.add_argument("--jobs", default="auto", help="Sphinx -j (a number or auto)")
    args = parser.parse_args(argv)
    try:
        seconds = build(args.out.resolve(), jobs=args.jobs, quiet=True)
    except subprocess.CalledProcessError as err:
        print(f"sphinx-build failed (exit {err.returncode})", file=sys.stderr)
        return 1
    pages = len(list(args.out.glob("**/*.html")))
    print(f"book: {pages} HTML files in {args.out} ({seconds:.1f} s)")
    print(f"open {args.out / 'index.html'} (or serve it: python -m http.server -d {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
