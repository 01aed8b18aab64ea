"""Build the rendered book: stage the repository's layout, then run Sphinx (`make book`).

    python tools/book.py [--out _build/book] [--jobs N]

Staging (`<out>/../book-src/<language>/`, rebuilt each time) holds `index.md` and `conf.py`'s
siblings from `book/`, a copy of `notebooks/NN_*.ipynb` and of `docs/*.md` (when present), in
the same folders as in the repository, so the relative links written for GitHub resolve in the
book. Notebooks are rendered from their stored outputs: nothing is executed.

Both editions go into one site, so a reader can switch language on any page: English at `<out>/`
(the URLs it always had), Chinese at `<out>/zh/`, built from `notebooks/zh/` with the landing page
`book/index.zh.md` (staged as `index.md`) and Sphinx's `language = "zh_CN"`. The two Sphinx runs are
independent processes and run side by side. Every page carries a switch to the same page in the
other edition (`book/conf.py` makes the link from the `-A peer_*` values passed here).

The step viewers (`helpers.viewers`) move in the book, not only in Jupyter: each viewer's stored
display carries its widget state (`helpers.viewers.STATE_MIME`); staging moves it into the
notebook's metadata (`widgets`, where MyST-NB looks for it), and the build serves the Jupyter
widgets HTML manager (`@jupyter-widgets/html-manager`, from npm into
`<venv>/share/widgets-html-manager` like reveal.js), RequireJS and anywidget's AMD module (from the
installed Python package) from the book's `_static/widgets/`, never from a CDN. Without the HTML
manager the viewers fall back to their text twin (the display's `text/plain`)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import nbformat

from helpers.viewers import STATE_MIME, with_modules

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
DOCS = ROOT / "docs"
# the Jupyter widgets HTML manager and RequireJS, installed from npm (the Makefile's widgets-deps)
WIDGETS_NPM = Path(sys.prefix) / "share" / "widgets-html-manager" / "node_modules"
HTML_MANAGER = WIDGETS_NPM / "@jupyter-widgets" / "html-manager" / "dist"
REQUIREJS = WIDGETS_NPM / "requirejs" / "require.js"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
# tells book/conf.py where the staged widget scripts are (a folder holding `widgets/`)
WIDGETS_ENV = "BOOK_WIDGETS_STATIC"


class Edition(NamedTuple):
    """One language of the book: where its notebooks and pages come from and go."""

    lang: str  # notebooks/<lang>/ ("en": notebooks/), book/index.<lang>.md, the output subfolder
    sphinx_language: str  # Sphinx's `language` (UI strings, search word splitting)
    subfolder: str  # under the site's root ("" for the root)
    label: str  # the switch's text, in this language, on the other edition's pages
    title: str  # html_title


EDITIONS = {
    "en": Edition("en", "en", "", "English", "PyTorch Source Reading"),
    "zh": Edition("zh", "zh_CN", "zh", "中文", "PyTorch 源码阅读"),
}


def notebooks(lang: str = "en") -> list[Path]:
    """The notebooks of one language, in reading order (their file names start with NN_)."""
    folder = NOTEBOOKS if lang == "en" else NOTEBOOKS / lang
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


# an output that shows a server the kernel ran (Netron's IFrame in notebook 10): dead in the book
LIVE_VIEW = re.compile(r"<iframe\b[^>]*\bsrc=\"https?://(127\.0\.0\.1|localhost)[:/\"]", re.I)
LIVE_VIEW_NOTE = "(a view served live by the notebook's kernel: run the notebook to see it)"


def stage_notebook(
    source: Path, target: Path, widgets: bool = True, translate: Callable | None = None
) -> int:
    """Copy one notebook for the book; returns how many live-only outputs were replaced.

    An output whose HTML frames a server on this machine (started by the kernel, gone once it
    stopped) becomes a line of text saying so: in the book it would be an empty frame and a
    failed request. A step viewer's widget state moves from its display into the notebook's
    metadata (`embed_widgets`); with `widgets=False` (no HTML manager to render it) the viewer's
    display keeps only its text twin. `translate` (the Chinese edition's: `tools.zh.ViewerCatalog`)
    maps the embedded widget state to the edition's language.
    """
    nb = nbformat.read(source, 4)
    replaced = drop_live_views(nb)
    embed_widgets(nb, keep_views=widgets, translate=translate)
    nbformat.write(nb, target)
    return replaced


def embed_widgets(nb, keep_views: bool = True, translate: Callable | None = None) -> int:
    """Move, in place, the widget state each viewer's display carries (`STATE_MIME`) into the
    notebook's `widgets` metadata, the state MyST-NB embeds in the page for the HTML manager;
    returns how many displays carried one. keep_views=False drops the widget views instead, so
    the page shows the display's text/plain (its `text/html`, the first step drawn statically
    for an untrusted JupyterLab, goes too). `translate` maps the state (the viewers' words) to
    the edition's language."""
    state: dict = {}
    found = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if STATE_MIME not in data:
                continue
            found += 1
            carried = data.pop(STATE_MIME)
            if keep_views:
                state.update(with_modules(carried["state"]))
            else:  # the text twin, not the first step's static copy (English in both editions)
                data.pop(WIDGET_VIEW_MIME, None)
                data.pop("text/html", None)
    if state and translate is not None:
        state = translate(state)
    if state:
        nb.metadata["widgets"] = {
            WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0, "state": state}
        }
    return found


def stage_widgets(folder: Path) -> Path | None:
    """Put the scripts the HTML manager needs into `folder/widgets/` (emptied first); returns
    `folder`, or None when the HTML manager is not installed (`npm`, see WIDGETS_NPM)."""
    if not (HTML_MANAGER / "embed-amd.js").exists() or not REQUIREJS.exists():
        return None
    import anywidget

    target = folder / "widgets"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in HTML_MANAGER.iterdir():  # embed-amd.js and the fonts its CSS names (same folder)
        if path.name == "embed-amd.js" or path.suffix in (
            ".woff",
            ".woff2",
            ".ttf",
            ".eot",
            ".svg",
        ):
            shutil.copy2(path, target / path.name)
    shutil.copy2(REQUIREJS, target / "require.js")
    # anywidget's front end as an AMD module, from the installed package (its version matches
    # the `_model_module_version` of every viewer's state)
    amd = Path(anywidget.__file__).parent / "nbextension" / "index.js"
    shutil.copy2(amd, target / "anywidget.js")
    shutil.copy2(BOOK / "_static" / "widgets-config.js", target / "config.js")
    return folder


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


def stage(staging: Path, lang: str = "en", widgets: bool = True) -> Path:
    """Copy the book's sources into `staging` (emptied first); returns it."""
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "notebooks").mkdir(parents=True)
    for path in BOOK.glob("*.md"):
        name, _, suffix = path.name.partition(".")  # index.md, index.zh.md
        if suffix == "md" and (BOOK / f"{name}.{lang}.md").exists():
            continue  # this language has its own version of the page
        if suffix in ("md", f"{lang}.md"):
            shutil.copy2(path, staging / f"{name}.md")
    translate = None
    if lang == "zh":  # the step viewers' words (locale/zh/viewers.po), the Chinese pages
        from tools import zh

        translate = zh.ViewerCatalog().state
    for nb in notebooks(lang):
        stage_notebook(nb, staging / "notebooks" / nb.name, widgets=widgets, translate=translate)
    if DOCS.is_dir():
        (staging / "docs").mkdir()
        for doc in DOCS.glob("*.md"):
            shutil.copy2(doc, staging / "docs" / doc.name)
        for doc in (DOCS / lang).glob("*.md") if lang != "en" else []:
            # docs/<lang>/X.md replaces docs/X.md in its edition; its links are written for
            # GitHub (from docs/zh/: ../../notebooks/zh/NN.ipynb, ../glossary.md), and the
            # staged page sits in docs/
            text = doc.read_text().replace(f"](../../notebooks/{lang}/", "](../notebooks/")
            text = re.sub(r"\]\(\.\./(?!notebooks/)", "](", text)  # ../glossary.md: a sibling
            (staging / "docs" / doc.name).write_text(text)
    teaching = staging / "docs" / "teaching.md"
    if not teaching.exists():  # the landing page links to it: a stub keeps that link whole
        teaching.parent.mkdir(exist_ok=True)
        teaching.write_text("# Teaching guide\n\nNot written yet: see `docs/teaching.md`.\n")
    return staging


def docnames(staging: Path) -> list[str]:
    """The page names a staged edition will have (Sphinx's docnames, plus its generated pages)."""
    pages = [
        p.relative_to(staging).with_suffix("").as_posix()
        for p in staging.glob("**/*")
        if p.suffix in (".md", ".ipynb")
    ]
    return sorted(pages) + ["genindex", "search"]


def sphinx_command(
    staging: Path,
    out: Path,
    edition: Edition,
    peer: tuple[Edition, Path] | None,
    jobs: str,
    quiet: bool,
) -> list[str]:
    """The sphinx-build command line of one edition; `peer` is the other edition and its staging
    (for the language switch), None for a one-language book."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-W", "--keep-going"]
    cmd += ["-j", jobs, "-D", f"language={edition.sphinx_language}", "-E"]
    cmd += ["-D", f"html_title={edition.title}"]
    if peer:
        other, other_staging = peer
        # the other edition's root, relative to this one's root (editions sit at "" or "<lang>")
        up = "../" if edition.subfolder else ""
        prefix = up + (f"{other.subfolder}/" if other.subfolder else "")
        cmd += ["-A", f"peer_prefix={prefix}", "-A", f"peer_label={other.label}"]
        cmd += ["-A", f"peer_lang={other.sphinx_language.replace('_', '-')}"]
        cmd += ["-A", f"peer_docs={','.join(docnames(other_staging))}"]
    if quiet:
        cmd.append("-q")
    return cmd + [str(staging), str(out)]


def build(
    out: Path, lang: str = "en", jobs: str = "auto", quiet: bool = True, both: bool = False
) -> float:
    """Stage and build the HTML book into `out`; returns the build's seconds.

    With `both`, `out` is the site's root: English there and every other edition in its
    subfolder (`lang` is then ignored), each page with the language switch. Without it, one
    edition (`lang`) goes into `out` with no switch.

    Raises CalledProcessError (with Sphinx's output) when Sphinx fails or warns: a warning is a
    broken link, an unknown cross-reference or an output the book cannot show.
    """
    start = time.monotonic()
    editions = list(EDITIONS.values()) if both else [EDITIONS[lang]]
    widgets = stage_widgets(out.parent / "book-src" / "_widgets")
    env = dict(os.environ)
    env.pop(WIDGETS_ENV, None)
    if widgets:
        env[WIDGETS_ENV] = str(widgets)
    stagings = {
        e.lang: stage(out.parent / "book-src" / e.lang, e.lang, widgets=bool(widgets))
        for e in editions
    }
    runs = []
    for edition in editions:
        peer = None
        if both:
            other = next(e for e in editions if e is not edition)
            peer = (other, stagings[other.lang])
        target = out / edition.subfolder if both else out
        cmd = sphinx_command(stagings[edition.lang], target, edition, peer, jobs, quiet)
        runs.append((cmd, subprocess.Popen(cmd, cwd=ROOT, env=env)))
    failed = [(cmd, proc.wait()) for cmd, proc in runs]
    for cmd, code in failed:
        if code:
            raise subprocess.CalledProcessError(code, cmd)
    return time.monotonic() - start


def pages(site: Path, edition: Edition) -> list[str]:
    """An edition's HTML pages in a built site, relative to the edition's folder (the theme's
    fragments under `_static/` and the other editions' folders left out)."""
    folder = site / edition.subfolder
    others = {e.subfolder for e in EDITIONS.values() if e.subfolder and e is not edition}
    return sorted(
        rel
        for p in folder.glob("**/*.html")
        if not (rel := p.relative_to(folder).as_posix()).startswith("_")
        and rel.split("/")[0] not in others
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "book")
    parser.add_argument("--jobs", default="auto", help="Sphinx -j (a number or auto)")
    args = parser.parse_args(argv)
    try:
        seconds = build(args.out.resolve(), jobs=args.jobs, quiet=True, both=True)
    except subprocess.CalledProcessError as err:
        print(f"sphinx-build failed (exit {err.returncode})", file=sys.stderr)
        return 1
    for edition in EDITIONS.values():
        count = len(pages(args.out, edition))
        print(f"book ({edition.lang}): {count} pages in {args.out / edition.subfolder}")
    print(f"built in {seconds:.1f} s")
    print(f"open {args.out / 'index.html'} (or serve it: python -m http.server -d {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
