"""The rendered book (`make book`, tools/book.py): built once into a temporary folder from the
stored notebooks, served on 127.0.0.1 and opened page by page in headless Chromium.

Every page loads with no console error, no uncaught exception, no failed load and no request
leaving 127.0.0.1; shows its title (a notebook's page: the notebook's H1); every internal link
(same host) and every image resolves (HTTP 200, and the fragment names an element of the target
page); every image output stored in a notebook (matplotlib PNGs, SVG pictures) is an image on its
page that the browser decoded. The landing page lists every notebook, in reading order, and the
search page finds a notebook.
"""

from __future__ import annotations

import importlib.util
import re
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
from static_site import HOST, chromium, http_status, serve, visit

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MIMES = ("image/svg+xml", "image/png", "image/jpeg")


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


book = _load_tool("book")

# what a page shows: its H1 (without the permalink mark), links, images and how they decoded
PAGE_STATE = """() => {
  const h1 = document.querySelector('article h1') || document.querySelector('h1');
  let title = '';
  if (h1) {
    const copy = h1.cloneNode(true);
    copy.querySelectorAll('.headerlink').forEach(a => a.remove());
    title = copy.textContent.trim();
  }
  const visible = h1 ? h1.getBoundingClientRect().height > 0 : false;
  return {
    title, visible,
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    images: Array.from(document.querySelectorAll('img')).map(i => ({
      src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
      output: !!i.closest('.cell_output')})),
  };
}"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    """The book, built once for this module; yields (output folder, base URL)."""
    out = tmp_path_factory.mktemp("book") / "html"
    book.build(out)
    with serve(out) as base:
        yield out, base


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def _title(nb_path: Path) -> str:
    """The notebook's H1 as the page shows it (markdown code marks dropped)."""
    first = nbformat.read(nb_path, 4).cells[0].source.splitlines()[0]
    assert first.startswith("# "), f"{nb_path.name}: first line is not an H1: {first!r}"
    return first[2:].replace("`", "").strip()


def _image_outputs(nb_path: Path) -> int:
    nb = nbformat.read(nb_path, 4)
    return sum(
        any(mime in out.get("data", {}) for mime in IMAGE_MIMES)
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', html))


def test_landing_page_lists_every_notebook_in_order(site) -> None:
    out, _ = site
    html = (out / "index.html").read_text()
    section = re.search(r'<section id="reading-order">(.*?)</section>', html, re.S)
    assert section, "the landing page has no 'Reading order' section"
    listed = re.findall(r'href="notebooks/([^"#]+)\.html"', section.group(1))
    expected = [nb.stem for nb in book.notebooks()]
    assert len(expected) >= 15, f"expected at least 15 notebooks, found {expected}"
    assert listed == expected, f"reading order: expected {expected}, the landing lists {listed}"
    paths = (
        "torch.compile, 90 minutes",
        "Distributed training, 90 minutes",
        "ONNX and deployment, 60",
    )
    for path in paths:
        assert path in html, f"course path {path!r} missing from the landing page"
    assert 'href="docs/teaching.html"' in html, "the landing page does not link the teaching guide"


def test_every_page_loads_cleanly_and_its_links_resolve(site, browser) -> None:
    out, base = site
    # every page of the site (not the theme's template fragments under _static/)
    pages = sorted(
        rel
        for p in out.glob("**/*.html")
        if not (rel := p.relative_to(out).as_posix()).startswith("_")
    )
    titles = {f"notebooks/{nb.stem}.html": _title(nb) for nb in book.notebooks()}
    assert set(titles) <= set(pages), f"notebook pages missing: {set(titles) - set(pages)}"
    problems: list[str] = []
    targets: dict[str, str] = {}  # internal URL -> the page that refers to it
    for rel in pages:
        url = urljoin(base, rel)
        with visit(browser, url) as (page, record):
            state = page.evaluate(PAGE_STATE)
        problems += [f"{rel}: {p}" for p in record.problems()]
        if not (state["title"] and state["visible"]):
            problems.append(f"{rel}: no visible title (h1 {state['title']!r})")
        if rel in titles and state["title"] != titles[rel]:
            problems.append(f"{rel}: title {state['title']!r}, notebook says {titles[rel]!r}")
        for img in state["images"]:
            if not img["ok"]:
                problems.append(f"{rel}: image not decoded: {img['src']}")
        if rel in titles:
            stored = _image_outputs(out.parent / "book-src" / "en" / rel.replace(".html", ".ipynb"))
            shown = sum(img["output"] for img in state["images"])
            if shown != stored:
                problems.append(f"{rel}: {stored} image outputs stored, {shown} shown")
        for link in state["links"] + [img["src"] for img in state["images"]]:
            if urlsplit(link).netloc.split(":")[0] == HOST:
                targets.setdefault(link, rel)
    html_cache: dict[str, str] = {}
    for link, rel in sorted(targets.items()):
        address, _, fragment = link.partition("#")
        status = http_status(address)
        if status != 200:
            problems.append(f"{rel}: link {link} gives HTTP {status}")
            continue
        if fragment and address.endswith(".html"):
            if address not in html_cache:
                with urllib.request.urlopen(address, timeout=30) as response:
                    html_cache[address] = response.read().decode()
            if fragment not in _ids(html_cache[address]):
                problems.append(f"{rel}: link {link}: no element with id {fragment!r}")
    assert not problems, f"{len(problems)} problems in the book:\n" + "\n".join(problems[:40])
    assert len(targets) > 3 * len(pages), f"only {len(targets)} internal links: were they read?"


def test_search_finds_a_notebook(site, browser) -> None:
    _, base = site
    url = urljoin(base, "search.html?q=DistributedDataParallel")
    ready = "document.querySelectorAll('#search-results li, ul.search li').length > 0"
    with visit(browser, url, ready=ready) as (page, record):
        hits = page.eval_on_selector_all(
            "#search-results li a, ul.search li a", "els => els.map(a => a.href)"
        )
    assert not record.problems(), record.problems()
    assert any("06_ddp_internals" in h for h in hits), f"search hits: {hits[:10]}"
