"""Lecture slides (`make slides`, `make present`, tools/slides.py): the plan, the stored slide
metadata, every notebook's deck walked slide by slide in headless Chromium at 1280x720, and
presenting with RISE from a copy.

- The plan is proven on a small synthetic notebook: the title and each `## ` section start a
  slide, a markdown cell starts one, a `###` heading too, a picture is a slide of its own with
  its code hidden, asserts and nbval markers leave the code shown, long code and long outputs
  are cut (saying how much more the notebook has), the setup cell, check-only cells and harness
  code are left out, a step viewer shows its stored static first step (or one drawn from its
  widget state) and an SVG shows once, not again as its `text/markdown` copy.
- Each notebook that carries slide metadata carries what the plan computes (`-k NN` picks one
  notebook's cases, as `make one` does).
- Each notebook's deck (exported from the stored outputs, nothing applied) opens in Chromium at
  1280x720 with no console error and no request leaving 127.0.0.1; every slide is walked: none
  is taller or wider than the slide, no element sticks out of it or scrolls or clips inside it,
  none was scaled below FIT_FLOOR; every `## ` section has a top-level slide that starts with
  its heading; no check-only cell, setup cell or harness code is on a slide and no shown code
  line is an assert; each step viewer is a picture slide (an image, not the frozen text); the
  deck has one cell per planned piece. With SLIDES_SHOTS=<folder>, notebook 16's title, viewer
  and a code slide are saved there as 1280x720 screenshots.
- `make present`'s command starts JupyterLab over a copy; RISE's Alt+R in the browser saves the
  copy, and the tracked notebook (its bytes, and `git status notebooks/`) is left as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from static_site import serve, visit

from helpers.processes import alive, free_port, wait_gone
from tools import slides

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SHOTS = os.environ.get("SLIDES_SHOTS")
WIDTH, HEIGHT = slides.LAYOUT["width"], slides.LAYOUT["height"]

# Every slide of a deck, walked in the browser: its box against its content, every element
# against the slide's box (sticking out) and its own (scrolling or clipping inside), what it
# shows. Transitions are turned off so that a slide is measured where it stands.
WALK = """() => {
  Reveal.configure({transition: 'none', backgroundTransition: 'none'});
  const found = [];
  Array.from(document.querySelectorAll('.reveal .slides > section')).forEach((stack, h) => {
    Array.from(stack.querySelectorAll(':scope > section')).forEach((slide, v) => {
      Reveal.slide(h, v);
      const box = slide.getBoundingClientRect();
      const out = [], clipped = [];
      for (const el of slide.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        const hidden = el.checkVisibility && !el.checkVisibility();  // in a closed <details>
        if ((r.width === 0 && r.height === 0) || hidden) continue;
        const name = el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined
          ? '.' + String(el.className).split(' ')[0] : '');
        if (r.right > box.right + 1 || r.left < box.left - 1 || r.bottom > box.bottom + 1)
          out.push(name);
        const style = getComputedStyle(el);
        if (/(auto|scroll|hidden)/.test(style.overflowX + style.overflowY)
            && (el.scrollHeight > el.clientHeight + 2 || el.scrollWidth > el.clientWidth + 2))
          clipped.push(name);
      }
      const heading = slide.querySelector('h1, h2');
      found.push({
        h, v, kind: slide.dataset.kind || '', fit: parseFloat(slide.dataset.fit || '0'),
        height: [slide.scrollHeight, slide.clientHeight],
        width: [slide.scrollWidth, slide.clientWidth],
        out: out.slice(0, 4), clipped: clipped.slice(0, 4),
        heading: heading ? heading.innerText.replace(/\\s+/g, ' ').trim() : '',
        first: slide.firstElementChild && slide.firstElementChild.contains(heading),
        cells: Array.from(slide.querySelectorAll('.jp-Cell'))
          .map(c => (c.id || '').replace(/^cell-id=/, '')),
        inputs: slide.querySelectorAll('.jp-InputArea').length,
        pictures: slide.querySelectorAll('img, svg').length,
        code: Array.from(slide.querySelectorAll('.jp-InputArea-editor'))
          .map(e => e.innerText).join('\\n'),
        text: slide.innerText.slice(0, 80),
      });
    });
  });
  return found;
}"""
FITTED = "document.body && document.body.dataset.fitted === 'true'"


def _synthetic():
    long_output = new_output("stream", name="stdout", text="x\n" * 60)
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100"><rect width="200" height="100" fill="#7fb3e6"/></svg>'  # noqa: E501
    picture = new_output(
        "display_data",
        data={"image/svg+xml": svg, "text/markdown": "<img src='x.svg'>", "text/plain": "<SVG>"},
    )
    state = {"state": {"m": {"state": {"steps": [{"svg": svg, "text": "step 0 of 2"}, {}]}}}}
    viewer = new_output(
        "display_data",
        data={slides.VIEW_MIME: {"model_id": "m"}, slides.STATE_MIME: state, "text/plain": "x"},
    )
    long_code = "\n".join(f"v{i} = {i}" for i in range(40))
    cells = [
        new_markdown_cell("# 99 · Title\n\nintro"),
        new_code_cell("from helpers.notebook import setup_notebook\nsetup_notebook()"),
        new_markdown_cell("## 1. Short"),
        new_code_cell("# NBVAL_IGNORE_OUTPUT\nx = 1\n# x is one\nassert x == 1, 'x'\nprint(x)"),
        new_code_cell('assert x == 1, f"x: expected 1, found {x}"'),
        new_markdown_cell("## 2. Long"),
        new_code_cell("print('a')", outputs=[long_output]),
        new_code_cell(long_code),
        new_markdown_cell("More prose.\n\n### A subsection\n\nIts prose."),
        new_code_cell("show()", outputs=[picture]),
        new_code_cell("# harness: timing\nrun()", outputs=[long_output, picture]),
        new_code_cell("v = viewer()\nv", outputs=[viewer]),
        new_code_cell('check("99.1", answer)\nimport torch'),
    ]
    return new_notebook(cells=cells)


def test_the_plan_on_a_synthetic_notebook(tmp_path: Path) -> None:
    nb = _synthetic()
    types = slides.compute(nb)
    assert types == [
        "slide", "skip",  # title; setup skipped
        "slide", "-", "skip",  # a short section: one slide, its assert-only cell skipped
        "slide", "-", "subslide",  # a long output cut to fill the slide; long code on the next
        "subslide", "subslide", "subslide", "subslide",  # prose; picture; harness picture; viewer
        "skip",  # a check cell
    ], types  # fmt: skip
    pieces = slides.plan(nb)
    by_cell = {}
    for piece in pieces:
        by_cell.setdefault(piece.index, []).append(piece)
    shown = by_cell[3][0].cell.source
    assert shown == "x = 1\nprint(x)", f"asserts, their comments and nbval markers stay: {shown!r}"
    output = by_cell[6][0].cell.outputs[0]["text"]
    assert "more lines in the notebook" in output and len(output.splitlines()) < 40, output
    code = by_cell[7][0].cell.source
    assert code.endswith("more lines in the notebook") and len(code.splitlines()) <= 25, code
    prose = [p.slide_type for p in by_cell[8]]
    assert prose == ["subslide", "subslide"], f"a ### heading starts a slide: {prose}"
    (pic,) = by_cell[9]
    assert pic.kind == "picture" and pic.cell.metadata["transient"]["remove_source"]
    assert list(pic.cell.outputs[0]["data"]) == ["image/svg+xml"], "an SVG shows once"
    (harness,) = by_cell[10]
    assert harness.kind == "picture", "a harness cell shows its picture only"
    (view,) = by_cell[11]
    html = view.cell.outputs[0]["data"]["text/html"]
    assert view.kind == "picture" and "<img" in html and "step 0 of 2" in html, html
    stored_html = dict(view.cell.outputs[0], data={"text/html": "<div>stored</div>"})
    assert slides.viewer_html({slides.VIEW_MIME: {}, **stored_html["data"]}) == "<div>stored</div>"
    running = [p.cell.metadata.slideshow["data"].get("running") for p in by_cell[9]]
    assert running == ["2. Long"], f"a sub-slide names its section: {running}"

    path = tmp_path / "99_x.ipynb"
    nbformat.write(nb, path)
    assert slides.differences(path), "a notebook without slide metadata passed --check"
    check = [sys.executable, str(ROOT / "tools" / "slides.py"), "check", str(path)]
    assert subprocess.run(check, capture_output=True).returncode == 1
    assert slides.apply(path) is True
    first = path.read_bytes()
    assert slides.apply(path) is False, "apply is not idempotent"
    assert path.read_bytes() == first
    assert slides.differences(path) == []
    assert subprocess.run(check, capture_output=True).returncode == 0
    assert slides.slide_count(nbformat.read(path, 4)) == 3


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_slide_metadata_is_current(notebook: Path) -> None:
    """A notebook that carries slide metadata (`make execute` applies it) carries what the plan
    computes: a cell added or edited since is caught."""
    nb = nbformat.read(notebook, 4)
    if not any("slideshow" in c.metadata for c in nb.cells):
        pytest.skip(f"{notebook.name} carries no slide metadata: python tools/slides.py apply")
    stale = slides.differences(notebook)
    assert not stale, "stale slide metadata (python tools/slides.py apply):\n" + "\n".join(
        stale[:20]
    )


@pytest.fixture(scope="module")
def decks(tmp_path_factory: pytest.TempPathFactory):
    """A served folder and a function exporting one notebook's deck into it (once) -> URL."""
    if not (slides.REVEAL / "dist" / "reveal.js").exists():
        reason = f"reveal.js is not installed at {slides.REVEAL} (`make slides-deps`, needs npm)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{reason}; CI is set, so the slides test must run")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("slides")
    slides.install_reveal(out)
    done: dict[Path, str] = {}
    with serve(out) as base:

        def deck(path: Path) -> str:
            if path not in done:
                nb = nbformat.read(path, 4)
                slides._book_module().drop_live_views(nb)
                body, _ = slides.exporter().from_notebook_node(
                    slides.lecture(nb),
                    resources={"lecture": dict(slides.LAYOUT, fit_floor=slides.FIT_FLOOR)},
                )
                (out / f"{path.stem}.slides.html").write_text(body, encoding="utf-8")
                done[path] = f"{base}{path.stem}.slides.html"
            return done[path]

        yield deck


def _step_viewers(nb) -> set[str]:
    """The ids of the cells that show a step viewer (a widget view with steps in its state)."""
    return {
        cell.id
        for cell in nb.cells
        for o in cell.get("outputs", [])
        if slides.VIEW_MIME in o.get("data", {})
        and slides._first_step(o["data"].get(slides.STATE_MIME) or {})
    }


def _of(slide: dict, ids: set[str]) -> bool:
    return any(i in ids or i.rsplit("-", 1)[0] in ids for i in slide["cells"])


def _shots(tab, walked: list[dict], viewers: set[str], folder: Path) -> list[Path]:
    """A deck's title, its first step viewer and its longest code slide, as screenshots."""
    viewer = next(s for s in walked if s["kind"] == "picture" and _of(s, viewers))
    code = max((s for s in walked if s["kind"] == "code"), key=lambda s: len(s["code"]))
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    for name, slide in (("title", walked[0]), ("viewer", viewer), ("code", code)):
        tab.evaluate(f"Reveal.slide({slide['h']}, {slide['v']})")
        tab.wait_for_timeout(200)
        target = folder / f"16_{name}_{slide['h']}-{slide['v']}.png"
        tab.screenshot(path=str(target))
        saved.append(target)
    return saved


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_deck_fits_every_slide_at_1280x720(notebook: Path, decks, browser) -> None:
    nb = nbformat.read(notebook, 4)
    pieces = slides.plan(nb)
    viewers = _step_viewers(nb)
    url = decks(notebook)
    with visit(browser, url, ready=FITTED) as (tab, record):
        tab.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        tab.evaluate("Reveal.layout()")
        walked = tab.evaluate(WALK)
        if SHOTS and notebook.name.startswith("16_"):
            print("screenshots:", *_shots(tab, walked, viewers, Path(SHOTS)))
    problems = [f"page: {p}" for p in record.problems()]

    for s in walked:
        where = f"slide {s['h']}.{s['v']} ({s['kind']}: {s['text'][:50]!r})"
        if s["height"][0] > s["height"][1] + 1 or s["width"][0] > s["width"][1] + 1:
            problems.append(f"{where}: content {s['width'][0]}x{s['height'][0]} in a slide of "
                            f"{s['width'][1]}x{s['height'][1]}")  # fmt: skip
        if s["out"]:
            problems.append(f"{where}: elements outside the slide: {s['out']}")
        if s["clipped"]:
            problems.append(f"{where}: elements that scroll or clip: {s['clipped']}")
        if s["fit"] < slides.FIT_FLOOR - 1e-6:
            problems.append(f"{where}: scaled to {s['fit']} (or never fitted)")
        asserts = [line for line in s["code"].splitlines() if line.lstrip().startswith("assert ")]
        if asserts:
            problems.append(f"{where}: shows asserts: {asserts[:2]}")

    # every section: a top-level slide that starts with its heading
    headings = [c.source.split("\n", 1)[0].lstrip("#").strip() for c in nb.cells
                if c.cell_type == "markdown" and c.source.startswith("## ")]  # fmt: skip
    tops = [s for s in walked if s["v"] == 0]
    if len(tops) != 1 + len(headings):
        problems.append(f"{len(tops)} top-level slides for 1 + {len(headings)} sections")
    for k, heading in enumerate(headings, start=1):
        top = tops[k] if k < len(tops) else None
        shown = re.sub(r"\s+", " ", re.sub(r"`|\*\*", "", heading))
        if not top or top["heading"] != shown or not top["first"]:
            problems.append(
                f"section {heading!r}: its slide starts with {top and top['heading']!r}"
            )

    # nothing left out is on a slide; one cell per planned piece; viewers are pictures
    ids = {c.get("id"): c for c in nb.cells}
    on_slides = [(s, i) for s in walked for i in s["cells"]]
    for s, piece_id in on_slides:
        cell = ids.get(piece_id) or ids.get(piece_id.rsplit("-", 1)[0])
        if cell is None:
            problems.append(f"slide {s['h']}.{s['v']}: a cell {piece_id!r} not in the notebook")
        elif slides.is_check_only(cell):
            problems.append(f"slide {s['h']}.{s['v']}: check-only cell {piece_id} shown")
        elif slides.is_harness(cell) and s["inputs"]:
            problems.append(f"slide {s['h']}.{s['v']}: harness cell {piece_id} shows its code")
    deck_code = "\n".join(s["code"] for s in walked)
    for marker in ("# harness:", "setup_notebook(", "NBVAL_"):
        if marker in deck_code:
            problems.append(f"the deck's code shows {marker!r}")
    if len(on_slides) != len(pieces):
        problems.append(f"{len(on_slides)} cells on slides, {len(pieces)} planned")
    for cell_id in sorted(viewers):  # a step viewer: a picture slide, not its frozen text
        if not [
            s for s in walked if s["kind"] == "picture" and s["pictures"] and _of(s, {cell_id})
        ]:
            problems.append(f"cell {cell_id}: a step viewer with no picture slide")
    assert not problems, f"{notebook.name}, {len(walked)} slides:\n" + "\n".join(problems[:30])


# --- presenting -----------------------------------------------------------------------------


def _git_status() -> str | None:
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--", "notebooks"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _present_recipe() -> list[str]:
    """`make present`'s command line, from the Makefile (the test runs what it runs)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^present:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "Makefile: no `present:` target with a recipe"
    line = recipe.group(1).replace("\\\n", " ").strip()
    assert re.search(r"tools/slides\.py present \$\(NB\)", line), line
    return line.split()


def test_present_saves_the_copy_not_the_notebook(tmp_path: Path, browser) -> None:
    from test_jupyterlab import PAGE_TIMEOUT_S, SERVER_TIMEOUT_S, _descendants

    _present_recipe()
    notebook = ROOT / "notebooks" / "00_orientation.ipynb"
    before = (hashlib.sha256(notebook.read_bytes()).hexdigest(), notebook.stat().st_mtime_ns)
    status = _git_status()

    env = dict(os.environ)
    env.pop("JUPYTER_TOKEN", None)
    for var, name in (
        ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),  # not ~/.jupyter, as in test_jupyterlab
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTER_DATA_DIR", "data"),
        ("IPYTHONDIR", "ipython"),
    ):
        env[var] = str(tmp_path / name)
    folder = tmp_path / "present"
    port, token = free_port(), secrets.token_hex(16)
    cmd = [sys.executable, str(ROOT / "tools" / "slides.py"), "present", str(notebook)]
    cmd += [f"--dir={folder}", "--no-browser", "--ip=127.0.0.1", f"--port={port}"]
    cmd += ["--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    cmd += ["--allow-root"] if os.getuid() == 0 else []
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    copy = folder / notebook.name
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (tmp_path / "lab.log").read_text()[-3000:]
                pytest.fail(f"`{' '.join(cmd)}` did not serve; its log:\n{tail}")
            time.sleep(0.5)
        assert copy.exists(), f"no copy at {copy}"
        copied = copy.stat().st_mtime_ns
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        context.set_default_timeout(PAGE_TIMEOUT_S * 1000)
        try:
            page = context.new_page()
            page.goto(f"{url}/?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-MarkdownOutput h1", state="visible")
            page.click(".jp-Notebook .jp-Cell >> nth=0")
            page.keyboard.press("Escape")
            time.sleep(0.5)  # the lab's first save after opening would also count: let it pass
            copied = copy.stat().st_mtime_ns
            page.keyboard.press("Alt+KeyR")  # RISE: save, then render as slides
            page.wait_for_selector("iframe[src*='rise']", state="attached")
            deadline = time.monotonic() + PAGE_TIMEOUT_S
            while copy.stat().st_mtime_ns == copied and time.monotonic() < deadline:
                time.sleep(0.25)
        finally:
            context.close()
        assert copy.stat().st_mtime_ns != copied, (
            "Alt+R did not save the copy (RISE's preview saves)"
        )
        assert nbformat.read(copy, 4).cells, "the saved copy is not a notebook"
    finally:
        pids = [server.pid, *_descendants(server.pid)]
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        for pid in wait_gone(pids, timeout_s=10):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        assert not [p for p in wait_gone(pids, timeout_s=5) if alive(p)], "present left processes"
    after = (hashlib.sha256(notebook.read_bytes()).hexdigest(), notebook.stat().st_mtime_ns)
    assert after == before, f"presenting changed {notebook.relative_to(ROOT)}"
    if status is not None:
        assert _git_status() == status, "presenting changed `git status notebooks/`"
    assert json.loads(copy.read_text())["cells"], "the copy is empty"
