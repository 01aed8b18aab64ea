"""Pictures from stored outputs (issue 37): a fresh clone opened in JupyterLab, nothing run, shows
every picture and each step viewer's first step.

A fresh clone's notebooks are untrusted (the user's notebook-signature database has never seen
them), and JupyterLab 4 then draws no output of a mime type whose renderer it marks unsafe:
`image/svg+xml` and the widget view among them. So every SVG display carries a `text/markdown`
copy, an `<img>` of the same SVG as a data URI (`helpers.pictures.svg_markdown`, which
`helpers.notebook.setup_notebook` registers for `IPython.display.SVG`), and every step viewer's
display a `text/html` drawing of its first step (`helpers.viewers.StepViewer.static_html`: the
step's picture as such an `<img>`, then its text twin), both kept by JupyterLab's sanitizer.

- `test_stored_outputs_carry_the_copies` (no browser), for every notebook of `notebooks/` and
  `notebooks/zh/` that stores a picture or a viewer: each SVG display's markdown is one `<img>`
  whose data URI is that display's SVG, byte for byte; each viewer display's HTML is one `<img>`
  of the picture its widget state shows at its start step and a `<pre>` holding its text/plain.
- `test_setup_notebook_gives_every_svg_its_copy` (no browser): the registration in an IPython
  shell, and a viewer's static copy at a start other than 0.
- `test_fresh_clone_shows_every_picture_in_jupyterlab`: JupyterLab as `make lab` starts it
  (tests/test_jupyterlab.py's `jupyterlab`: a temporary, empty signature database), serving a
  byte-for-byte copy of `notebooks/` (`stored/`); each notebook of `OPENED` is opened by its URL
  and no cell is run. The server reports the cells that hold pictures untrusted (else the test
  proves nothing); then, output by output in the stored order, every SVG display shows as a
  Markdown output holding one `<img>` that the browser decoded, with the stored copy's data URI;
  every viewer display shows as an HTML output whose `<img>` decoded and whose text is the stored
  text twin; no output shows `<IPython.core.display.SVG object>`, "Loading widget" or "Error
  displaying widget"; the page logs no error. The same check then runs on a copy of 16 whose
  outputs lost their copies, and must report its four timelines and its viewer.

A trusted notebook (one the reader ran and saved) shows the same copies for its SVG displays,
since JupyterLab ranks Markdown above SVG; its viewers are widgets again once their cells run.

Set STORED_PICTURES_SHOTS to a folder to keep screenshots of each opened notebook's first
picture cell and first viewer cell (`<NN>-pictures.png`, `<NN>-viewer.png`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import urllib.request
from html import unescape
from pathlib import Path

import nbformat
import pytest
from test_jupyterlab import (
    CURRENT,
    PAGE_TIMEOUT_S,
    PlaywrightTimeout,
    _wait,
    jupyterlab,
    new_page,
)

from helpers.viewers import STATE_MIME, VIEWERS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SVG_MIME = "image/svg+xml"
# opened in the browser: 16 (four SVG timelines, the timeline viewer) and 05 (an SVG ring, the
# ring viewer, matplotlib PNGs), 17 (two SVG grids, ring attention's and the all-to-all's
# viewers) and 01 (an SVG, the call-path viewer): every viewer class, every picture kind
OPENED = ("16", "05", "17", "01")
IMG = re.compile(r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]*)" alt="[^"<>]*"/>')
PRE = re.compile(r"<pre>(.*)</pre>", re.S)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _decoded(uri_data: str) -> str:
    return base64.b64decode(uri_data).decode("utf-8")


def viewer_picture(data: dict) -> tuple[str, str] | None:
    """(viewer name, the SVG text it shows at its start step) of a step viewer's display, from
    the state it carries; None for a display that is no step viewer (or carries no state)."""
    state = data.get(STATE_MIME, {}).get("state", {})
    models = [m["state"] for m in state.values() if m["state"].get("_anywidget_id") in VIEWERS]
    if not models:
        return None  # e.g. a prediction (helpers.viewers.predict), which shows no picture
    (model,) = models
    start = model["step"]
    picture = model["picture"] if "picture" in model else model["steps"][start].get("svg", "")
    return VIEWERS[model["_anywidget_id"]].name, picture


def expected_outputs(nb) -> list[list[dict]]:
    """Per code cell, per output: what JupyterLab must show for it when the notebook is
    untrusted: `mime` (the one it renders), and for a picture the data URI's SVG (`svg`), for a
    viewer also its text twin (`text`)."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs: list[dict] = []
        last_stream = None
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            stream = output.get("name") if output.output_type == "stream" else None
            if stream is not None and stream == last_stream:
                continue  # JupyterLab shows consecutive outputs of one stream as one
            last_stream = stream
            if (viewer := viewer_picture(data)) is not None:
                name, picture = viewer
                outputs.append(
                    {
                        "mime": "text/html",
                        "viewer": name,
                        "svg": picture,
                        "text": _text(data["text/plain"]),
                    }
                )
            elif SVG_MIME in data:
                outputs.append({"mime": "text/markdown", "svg": _text(data[SVG_MIME])})
            else:
                outputs.append({"mime": None})
        cells.append(outputs)
    return cells


def with_pictures(folder: Path) -> list[Path]:
    """The notebooks of `folder` that store an SVG display or a step viewer."""
    return [
        p
        for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))
        if any(e["mime"] for c in expected_outputs(nbformat.read(p, 4)) for e in c)
    ]


STORED = with_pictures(NOTEBOOKS) + with_pictures(NOTEBOOKS / "zh")


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.relative_to(NOTEBOOKS).as_posix())
def test_stored_outputs_carry_the_copies(path: Path) -> None:
    nb = nbformat.read(path, 4)
    problems = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            where = f"cell {index} ({cell.get('id')})"
            if (viewer := viewer_picture(data)) is not None:
                name, picture = viewer
                shown = _text(data.get("text/html", ""))
                imgs = IMG.findall(shown)
                pre = PRE.search(shown)
                if not shown:
                    problems.append(f"{where}: the {name} viewer's display has no text/html")
                elif len(imgs) != bool(picture) or (imgs and _decoded(imgs[0]) != picture):
                    problems.append(
                        f"{where}: the {name} viewer's text/html should hold one <img> of its "
                        f"start step's picture, found {len(imgs)} <img> (or another picture)"
                    )
                elif not pre or unescape(pre.group(1)) != _text(data["text/plain"]):
                    problems.append(
                        f"{where}: the {name} viewer's text/html should end with its text twin "
                        f"(text/plain) in a <pre>, found {shown[-200:]!r}"
                    )
            elif SVG_MIME in data:
                copy = _text(data.get("text/markdown", ""))
                imgs = IMG.findall(copy)
                if len(imgs) != 1 or IMG.fullmatch(copy) is None:
                    problems.append(
                        f"{where}: an SVG display should carry a text/markdown copy that is one "
                        f"<img> of a data URI, found {copy[:120]!r}"
                    )
                elif _decoded(imgs[0]) != _text(data[SVG_MIME]):
                    problems.append(f"{where}: the markdown copy is not the stored SVG")
    assert not problems, (
        f"{path.relative_to(ROOT)}: re-execute it (`make execute NB=...`, CONTRIBUTING.md "
        "'Refreshing outputs') so that JupyterLab shows its pictures untrusted:\n"
        + "\n".join(problems)
    )


def test_setup_notebook_gives_every_svg_its_copy() -> None:
    """In a kernel (an IPython shell), what `setup_notebook` registers makes an
    `IPython.display.SVG` display carry `svg_markdown` of its SVG (nbval on the stored notebooks
    proves that their setup cells register it; called alone here, since `setup_notebook` also
    sets torch's threads and print options for the rest of the worker). A viewer's display
    carries `static_html`, whose picture is its start step's (a timeline viewer, whose one
    picture is drawn at slot 0, refuses another start)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import SVG

    from helpers.notebook import _register_svg_copies
    from helpers.pictures import svg_img, svg_markdown
    from helpers.viewers import RingViewer, TimelineViewer
    from helpers.viewers import svg_img as viewers_svg_img

    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><title>a &lt; b</title></svg>'
    )
    shell = InteractiveShell.instance()
    try:
        before, _ = shell.display_formatter.format(SVG(svg))
        _register_svg_copies()
        after, _ = shell.display_formatter.format(SVG(svg))
    finally:
        InteractiveShell.clear_instance()
    assert "text/markdown" not in before, f"IPython alone gives no copy, found {sorted(before)}"
    assert after["text/markdown"] == svg_markdown(svg), after
    (uri,) = IMG.findall(after["text/markdown"])
    assert _decoded(uri) == svg and 'alt="a &lt; b"' in after["text/markdown"]
    steps = [{"step": i, "svg": f"<svg><title>{i}</title></svg>", "text": f"t{i}"} for i in (0, 1)]
    viewer = RingViewer(steps, start=1, text="t<1>")
    shown = viewer._repr_mimebundle_()[0]["text/html"]
    viewer.close()
    assert [_decoded(u) for u in IMG.findall(shown)] == [steps[1]["svg"]], shown
    assert PRE.search(shown).group(1) == "t&lt;1&gt;", shown
    with pytest.raises(ValueError, match="starts at slot 0"):
        TimelineViewer([{"slot": 0}, {"slot": 1}], start=1, picture="<svg/>")
    # helpers.viewers imports no helper, so it writes the <img> itself: the same text
    for picture in (svg, "<svg/>", "<svg><title>&quot;x&quot; &amp; y</title></svg>", " "):
        assert viewers_svg_img(picture) == svg_img(picture), picture


# --- the browser --------------------------------------------------------------------------------

# Per code cell of the visible notebook, per output: the mime type JupyterLab rendered, its text,
# each <img>'s src and whether it decoded, and the text of each <pre> in an HTML output.
SHOWN = """async () => {
  const panel = document.querySelector('CURRENT');
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  return Promise.all(cells.map(cell => Promise.all(
    [...cell.querySelectorAll('.jp-OutputArea-output')].map(async out => {
      const imgs = [...out.querySelectorAll('img')];
      const decoded = await Promise.all(imgs.map(i => i.decode().then(() => i.naturalWidth > 0,
                                                                   () => false)));
      return {
        mime: out.getAttribute('data-mime-type'),
        text: out.textContent,
        imgs: imgs.map((i, k) => ({src: i.getAttribute('src'), ok: decoded[k]})),
        pres: [...out.querySelectorAll('pre')].map(p => p.textContent),
      };
    }))));
}""".replace("CURRENT", CURRENT)

# every code cell has its outputs in the DOM (rendering is asynchronous): the counts per cell
COUNTS = """() => {
  const panel = document.querySelector('CURRENT');
  if (!panel) return null;
  return [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')]
    .map(c => c.querySelectorAll('.jp-OutputArea-output').length);
}""".replace("CURRENT", CURRENT)

NOT_DRAWN = ("<IPython.core.display.SVG object>", "Loading widget", "Error displaying widget")


def untrusted_picture_cells(url: str, token: str, rel: str) -> tuple[int, int]:
    """(cells holding a picture or a viewer, how many of them the server marks trusted)."""
    with urllib.request.urlopen(f"{url}/api/contents/{rel}?content=1&token={token}") as answer:
        model = json.load(answer)
    cells = [
        c
        for c in model["content"]["cells"]
        if any(
            SVG_MIME in o.get("data", {}) or STATE_MIME in o.get("data", {})
            for o in c.get("outputs", [])
        )
    ]
    return len(cells), sum(bool(c["metadata"].get("trusted")) for c in cells)


def check_shown(expected: list[list[dict]], shown: list[list[dict]], what: str) -> None:
    """Every picture and viewer output shows as `expected` says; raises AssertionError naming
    each that does not."""
    problems = []
    if [len(c) for c in expected] != [len(c) for c in shown]:
        problems.append(
            f"outputs per code cell: expected {[len(c) for c in expected]}, "
            f"found {[len(c) for c in shown]}"
        )
    for k, (want_cell, got_cell) in enumerate(zip(expected, shown, strict=False)):
        for j, (want, got) in enumerate(zip(want_cell, got_cell, strict=False)):
            where = f"code cell {k} output {j}"
            bad = [s for s in NOT_DRAWN if s in got["text"]]
            if bad:
                problems.append(f"{where} shows {bad[0]!r}")
            if want["mime"] is None:
                continue
            kind = f"the {want['viewer']} viewer" if "viewer" in want else "an SVG picture"
            uris = [i["src"] for i in got["imgs"]]
            if got["mime"] != want["mime"]:
                problems.append(
                    f"{where}: {kind} should render as {want['mime']}, JupyterLab rendered "
                    f"{got['mime']} ({got['text'][:60]!r})"
                )
            elif len(uris) != bool(want["svg"]) or not all(i["ok"] for i in got["imgs"]):
                problems.append(
                    f"{where}: {kind} should show {int(bool(want['svg']))} decoded image, "
                    f"found {[(u[:40], i['ok']) for u, i in zip(uris, got['imgs'], strict=True)]}"
                )
            elif uris and _decoded(uris[0].partition(",")[2]) != want["svg"]:
                problems.append(f"{where}: {kind}'s image is not the stored SVG")
            elif "text" in want and got["pres"][-1:] != [want["text"]]:
                problems.append(
                    f"{where}: {kind} should show its first step's text "
                    f"{want['text'][:60]!r}, found {got['pres']}"
                )
    assert not problems, f"{what}, opened untrusted and not run:\n" + "\n".join(problems)


def open_stored(page, url: str, token: str, rel: str, expected: list[list[dict]]) -> list:
    """Open `rel` (under the served folder) by its URL, wait until every code cell shows its
    outputs; returns what each output shows (`SHOWN`)."""
    page.goto(f"{url}/lab/tree/{rel}?token={token}")
    name = rel.rsplit("/", 1)[1]
    _wait(
        page,
        f".jp-mod-current[title*='{name}'], .lm-mod-current[title*='{name}']",
        f"{rel} never opened",
    )
    _wait(page, CURRENT + " .jp-Cell", f"{rel} opened but its cells never rendered")
    counts = json.dumps([len(c) for c in expected], separators=(",", ":"))  # as JSON.stringify
    try:
        page.wait_for_function(
            f"() => JSON.stringify(({COUNTS})()) === {json.dumps(counts)}",
            timeout=PAGE_TIMEOUT_S * 1000,
        )
    except PlaywrightTimeout:
        pass  # check_shown says what is missing
    return page.evaluate(SHOWN)


def _shoot(page, shots: Path | None, stem: str, expected: list[list[dict]]) -> None:
    if shots is None:
        return
    shots.mkdir(parents=True, exist_ok=True)
    cells = page.locator(CURRENT + " .jp-Notebook .jp-CodeCell")
    for label, pick in (
        ("pictures", lambda o: "viewer" not in o),
        ("viewer", lambda o: "viewer" in o),
    ):
        index = next(
            (k for k, c in enumerate(expected) if any(o["mime"] and pick(o) for o in c)), None
        )
        if index is not None:
            output = cells.nth(index).locator(".jp-Cell-outputWrapper")
            for _ in range(3):  # cells above it take their size as they come into view
                output.scroll_into_view_if_needed()
                page.wait_for_timeout(500)
            output.screenshot(path=str(shots / f"{stem}-{label}.png"))


def check_stored(browser, url: str, token: str, rel: str, source: Path, shots: Path | None):
    """Open the served copy `rel` of `source`, untrusted and not run, and check what it shows."""
    held, trusted = untrusted_picture_cells(url, token, rel)
    assert held and not trusted, (
        f"{rel}: expected the server to mark its {held} picture cells untrusted (a fresh "
        f"clone), found {trusted} trusted: the test would prove nothing"
    )
    expected = expected_outputs(nbformat.read(source, 4))
    errors: list[str] = []
    with new_page(browser) as page:
        page.set_viewport_size({"width": 1280, "height": 2000})  # a tall cell fits a screenshot
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        shown = open_stored(page, url, token, rel, expected)
        check_shown(expected, shown, rel)
        _shoot(page, shots, source.name[:2], expected)
    assert not errors, f"{rel}: errors in the page: {errors}"


def without_copies(source: Path, target: Path) -> list[list[dict]]:
    """Write `source` with its pictures' and viewers' copies taken out; returns what it should
    show if it had them (`expected_outputs` of it)."""
    bare = nbformat.read(source, 4)
    for cell in bare.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if SVG_MIME in data or viewer_picture(data) is not None:
                data.pop("text/markdown", None)
                data.pop("text/html", None)
    nbformat.write(bare, target)
    return expected_outputs(bare)


def test_fresh_clone_shows_every_picture_in_jupyterlab(browser, tmp_path: Path) -> None:
    folder = os.environ.get("STORED_PICTURES_SHOTS")
    shots = Path(folder) if folder else None
    with jupyterlab(tmp_path) as (url, token):
        served = tmp_path / "notebooks" / "stored"
        shutil.copytree(NOTEBOOKS, served)  # the folder as stored, byte for byte
        for stem in OPENED:
            (source,) = NOTEBOOKS.glob(f"{stem}_*.ipynb")
            assert (served / source.name).read_bytes() == source.read_bytes()
            check_stored(browser, url, token, f"stored/{source.name}", source, shots)
        # the detector: 16 without its copies shows neither its timelines nor its viewer
        (source,) = NOTEBOOKS.glob("16_*.ipynb")
        expected = without_copies(source, served / "16_without_copies.ipynb")
        with new_page(browser) as page:
            shown = open_stored(page, url, token, "stored/16_without_copies.ipynb", expected)
        with pytest.raises(AssertionError) as failure:
            check_shown(expected, shown, "16 without its copies")
    report = str(failure.value).split("\nassert ")[0]  # the problems, not their repr again
    assert report.count("an SVG picture should render as text/markdown") == 4, report
    assert report.count("the timeline viewer should render as text/html") == 1, report
    assert "<IPython.core.display.SVG object>" in report, report
