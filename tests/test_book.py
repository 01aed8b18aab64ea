"""The rendered book (`make book`, tools/book.py): both editions (English at the root, Chinese
under zh/) built once into a temporary folder from the stored notebooks, served on 127.0.0.1 and
opened page by page in headless Chromium.

Every page loads with no console error, no uncaught exception, no failed load and no request
leaving 127.0.0.1; shows its title (a notebook's page: the notebook's H1); every internal link
(same host) and every image resolves (HTTP 200, and the fragment names an element of the target
page); every image output stored in a notebook (matplotlib PNGs, SVG pictures) is an image on its
page that the browser decoded. Every page of each edition shows the language switch, and its
target loads (HTTP 200) and is the same page in the other edition (a notebook: the one with the
same number), or that edition's landing page when it has no such page. Each landing page lists
every notebook of its language, in reading order, and each edition's search page finds a notebook.

The step viewers move in the static book, not only in Jupyter: on every page whose notebook
displays one (`viewer_pages`, read off the stored notebooks: every viewer of the registry
`helpers.viewers.VIEWER_CLASSES` is on one; today 05 the ring, 01 the call path, 16 a pipeline
schedule's timeline, 17 ring attention's schedule and an expert-parallel step's all-to-all
exchanges), in both editions, the widget renders from the state the page embeds, one ArrowRight
on its slider moves it one step, and what it shows before and after is that step's recorded
content (the steps embedded in the staged notebook, checked by tests/viewer_checks.py's
`check_move`; the ring also gets the JupyterLab test's checks; the timeline's marked boxes are
the actions its text lists; ring attention's boxes and arrows are the holders and sends its text
lists, the all-to-all's flows the rows its text lists), with no console error and no request
leaving 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

import nbformat
import pytest
from static_site import HOST, http_status, serve, visit
from viewer_checks import STATES, check_move, step_viewer, stored_viewers, text_key

from tools import book

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MIMES = ("image/svg+xml", "image/png", "image/jpeg")
LANGS = ("en", "zh")
# what each landing page must name: its course paths (book/index.md, book/index.zh.md)
COURSE_PATHS = {
    "en": (
        "torch.compile, 90 minutes",
        "Distributed training, 90 minutes",
        "ONNX and deployment, 60",
    ),
    "zh": ("torch.compile，90 分钟", "分布式训练，90 分钟", "ONNX 与部署，60 分钟"),
}


# what a page shows: its H1 (without the permalink mark), the language switch, links, images and
# how they decoded
PAGE_STATE = """() => {
  const h1 = document.querySelector('article h1') || document.querySelector('h1');
  let title = '';
  if (h1) {
    const copy = h1.cloneNode(true);
    copy.querySelectorAll('.headerlink').forEach(a => a.remove());
    title = copy.textContent.trim();
  }
  const visible = h1 ? h1.getBoundingClientRect().height > 0 : false;
  const sw = document.querySelector('a.lang-switch');
  return {
    title, visible,
    langSwitch: sw ? {href: sw.href, text: sw.textContent.trim(),
                      shown: sw.getBoundingClientRect().height > 0} : null,
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    images: Array.from(document.querySelectorAll('img')).map(i => ({
      src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
      output: !!i.closest('.cell_output')})),
  };
}"""


VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}
# The Chinese edition's pages that Chromium opens; the others are read from their HTML (same
# templates and outputs as their English twins, which Chromium opens all of): about 1 s a page.
ZH_IN_BROWSER = {
    "index.html",
    "search.html",
    "genindex.html",
    "docs/glossary.html",
    "docs/teaching.html",
    "docs/compatibility.html",
}
ZH_NOTEBOOKS_IN_BROWSER = ("00_", "05_", "14_")


class _PageReader(HTMLParser):
    """PAGE_STATE from a page's HTML, without a browser (images: HTTP 200 instead of decoded)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url, self.stack = url, []  # stack: (tag, classes) of the open elements
        self.h1s: list[tuple[bool, list[str]]] = []  # (inside <article>, its text)
        self.in_h1 = self.in_headerlink = 0
        self.switch: dict | None = None
        self.links: list[str] = []
        self.images: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "h1":
            self.h1s.append((any(t == "article" for t, _ in self.stack), []))
            self.in_h1 = 1
        if tag == "a" and "headerlink" in classes:
            self.in_headerlink = 1
        if tag == "a" and a.get("href") is not None:
            href = urljoin(self.url, a["href"])
            self.links.append(href)
            if "lang-switch" in classes:
                self.switch = {"href": href, "text": "", "shown": True}
        if tag == "img":
            src = urljoin(self.url, a.get("src", ""))
            inside = any("cell_output" in c for _, c in self.stack)
            self.images.append({"src": src, "ok": http_status(src) == 200, "output": inside})
        if tag not in VOID:
            self.stack.append((tag, classes))

    def handle_endtag(self, tag: str) -> None:
        if tag == "h1":
            self.in_h1 = 0
        if tag == "a":
            self.in_headerlink = 0
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.in_h1 and not self.in_headerlink:
            self.h1s[-1][1].append(data)
        if self.switch is not None and not self.switch["text"] and data.strip():
            self.switch["text"] = data.strip()

    def state(self) -> dict:
        # like PAGE_STATE: the first h1 inside <article>, else the first h1
        chosen = next((t for inside, t in self.h1s if inside), self.h1s[0][1] if self.h1s else [])
        title = " ".join("".join(chosen).split())
        return {
            "title": title,
            "visible": bool(title),
            "langSwitch": self.switch,
            "links": self.links,
            "images": self.images,
        }


def _read_page(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        reader = _PageReader(url)
        reader.feed(response.read().decode())
    return reader.state()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    """The book (both editions), built once for this module; yields (site folder, base URL)."""
    out = tmp_path_factory.mktemp("book") / "html"
    book.build(out, both=True)
    with serve(out) as base:
        yield out, base


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


@pytest.mark.parametrize("lang", LANGS)
def test_landing_page_lists_every_notebook_in_order(site, lang: str) -> None:
    out, _ = site
    edition = book.EDITIONS[lang]
    html = (out / edition.subfolder / "index.html").read_text()
    section = re.search(r'<section id="reading-order">(.*?)</section>', html, re.S)
    assert section, f"the {lang} landing page has no 'Reading order' section"
    listed = re.findall(r'href="notebooks/([^"#]+)\.html"', section.group(1))
    expected = [nb.stem for nb in book.notebooks(lang)]
    assert len(expected) >= 15, f"expected at least 15 {lang} notebooks, found {expected}"
    assert listed == expected, f"{lang} reading order: expected {expected}, landing lists {listed}"
    for path in COURSE_PATHS[lang]:
        assert path in html, f"course path {path!r} missing from the {lang} landing page"
    assert 'href="docs/teaching.html"' in html, (
        f"the {lang} landing does not link the teaching guide"
    )


def _number(title: str) -> str:
    """A notebook page's number, from its H1 ("06 · Inside DistributedDataParallel")."""
    return title.split()[0] if title[:2].isdigit() else ""


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_loads_cleanly_and_its_links_resolve(site, browser, lang: str) -> None:
    out, base = site
    edition = book.EDITIONS[lang]
    other = next(e for e in book.EDITIONS.values() if e is not edition)
    root = urljoin(base, f"{edition.subfolder}/" if edition.subfolder else "")
    other_root = urljoin(base, f"{other.subfolder}/" if other.subfolder else "")
    pages = book.pages(out, edition)
    other_pages = set(book.pages(out, other))
    staged = out.parent / "book-src" / lang  # what was built (the repository may move on)
    titles = {
        f"notebooks/{nb.stem}.html": _title(staged / "notebooks" / nb.name)
        for nb in book.notebooks(lang)
    }
    assert set(titles) <= set(pages), f"notebook pages missing: {set(titles) - set(pages)}"
    problems: list[str] = []
    targets: dict[str, str] = {}  # internal URL -> the page that refers to it
    switches: dict[str, str] = {}  # page -> its switch's target
    in_browser = 0
    for rel in pages:
        url = urljoin(root, rel)
        name = rel.removeprefix("notebooks/")
        if lang == "en" or rel in ZH_IN_BROWSER or name.startswith(ZH_NOTEBOOKS_IN_BROWSER):
            in_browser += 1
            with visit(browser, url) as (page, record):
                state = page.evaluate(PAGE_STATE)
            problems += [f"{rel}: {p}" for p in record.problems()]
            read = _read_page(url)  # the reader used for the pages not opened: does it agree?
            for key in ("title", "langSwitch"):
                if read[key] != state[key]:
                    problems.append(
                        f"{rel}: HTML reader {key} {read[key]!r}, Chromium {state[key]!r}"
                    )
            if [i["output"] for i in read["images"]] != [i["output"] for i in state["images"]]:
                problems.append(f"{rel}: the HTML reader and Chromium see different images")
        else:
            state = _read_page(url)
        if not (state["title"] and state["visible"]):
            problems.append(f"{rel}: no visible title (h1 {state['title']!r})")
        if rel in titles and state["title"] != titles[rel]:
            problems.append(f"{rel}: title {state['title']!r}, notebook says {titles[rel]!r}")
        switch = state["langSwitch"]
        if not (switch and switch["shown"] and switch["text"] == other.label):
            problems.append(f"{rel}: no visible language switch labelled {other.label!r}: {switch}")
        else:
            expected = urljoin(other_root, rel if rel in other_pages else "index.html")
            if switch["href"] != expected:
                problems.append(f"{rel}: the switch leads to {switch['href']}, not {expected}")
            switches[rel] = switch["href"]
        for img in state["images"]:
            if not img["ok"]:
                problems.append(f"{rel}: image not decoded: {img['src']}")
        if rel in titles:
            stored = _image_outputs(staged / rel.replace(".html", ".ipynb"))
            shown = sum(img["output"] for img in state["images"])
            if shown != stored:
                problems.append(f"{rel}: {stored} image outputs stored, {shown} shown")
        for link in state["links"] + [img["src"] for img in state["images"]]:
            if urlsplit(link).netloc.split(":")[0] == HOST:
                targets.setdefault(link, rel)
    html_cache: dict[str, str] = {}

    def html_of(address: str) -> str:
        if address not in html_cache:
            with urllib.request.urlopen(address, timeout=30) as response:
                html_cache[address] = response.read().decode()
        return html_cache[address]

    statuses: dict[str, int] = {}  # one request per address, however many links lead there
    ids: dict[str, set[str]] = {}
    for link, rel in sorted(targets.items()):
        address, _, fragment = link.partition("#")
        status = statuses.setdefault(address, http_status(address))
        if status != 200:
            problems.append(f"{rel}: link {link} gives HTTP {status}")
            continue
        if fragment and address.endswith(".html") and address not in ids:
            ids[address] = _ids(html_of(address))
        if fragment and address.endswith(".html") and fragment not in ids[address]:
            problems.append(f"{rel}: link {link}: no element with id {fragment!r}")
    # the switch's target is there, and a notebook's counterpart is the same notebook
    for rel, href in sorted(switches.items()):
        status = http_status(href)
        if status != 200:
            problems.append(f"{rel}: language switch {href} gives HTTP {status}")
        elif rel in titles:
            head = re.search(r"<title>(.*?)</title>", html_of(href), re.S)  # "06 · ... — book"
            theirs = _number(head.group(1).strip()) if head else ""
            if theirs != _number(titles[rel]):
                problems.append(f"{rel}: the switch leads to notebook {theirs!r}, not its twin")
    assert not problems, f"{len(problems)} problems in the {lang} book:\n" + "\n".join(
        problems[:40]
    )
    assert len(targets) > 3 * len(pages), f"only {len(targets)} internal links: were they read?"
    assert len(switches) == len(pages), f"{len(pages) - len(switches)} pages lack the switch"
    assert in_browser >= (len(pages) if lang == "en" else 8), f"{in_browser} pages in Chromium"


@pytest.mark.parametrize("lang", LANGS)
def test_search_finds_a_notebook(site, browser, lang: str) -> None:
    """Search works offline in both editions, for an API name and for a word of the edition's
    own language: the Chinese index splits Chinese text with jieba (sphinx/search/zh.py; without
    jieba it would index the Latin words only)."""
    _, base = site
    folder = book.EDITIONS[lang].subfolder
    word = {"en": "guard", "zh": "守卫"}[lang]  # notebook 02: Dynamo's guards
    for query, notebook in (
        ("DistributedDataParallel", "06_ddp_internals"),
        (word, "02_dynamo_bytecode_guards_graph_breaks"),
    ):
        url = urljoin(base, f"{folder}/search.html" if folder else "search.html")
        url += "?q=" + quote(query)
        ready = "document.querySelectorAll('#search-results li, ul.search li').length > 0"
        with visit(browser, url, ready=ready) as (page, record):
            hits = page.eval_on_selector_all(
                "#search-results li a, ul.search li a", "els => els.map(a => a.href)"
            )
        assert not record.problems(), record.problems()
        prefix = urljoin(base, f"{folder}/notebooks/" if folder else "notebooks/")
        assert any(h.startswith(prefix + notebook) for h in hits), f"{query}: hits {hits[:10]}"


def viewer_pages() -> list[tuple[str, type]]:
    """The step viewers that must move in the book: (notebook page, viewer class) for each
    viewer of the registry (`helpers.viewers.VIEWER_CLASSES`) that a stored notebook displays
    (`viewer_checks.stored_viewers`); every viewer of the registry is displayed by one."""
    from helpers.viewers import VIEWER_CLASSES

    pages = list(dict.fromkeys((stem, cls) for stem, cls, _ in stored_viewers()))
    shown = {cls for _, cls in pages}
    missing = [cls.__name__ for cls in VIEWER_CLASSES if cls not in shown]
    assert not missing, f"expected every step viewer to be displayed by a notebook: {missing}"
    return pages


def test_every_viewer_is_in_the_book() -> None:
    """Without Sphinx: each viewer of the registry is displayed by a stored notebook (which the
    book test then moves), and what the browser checks read of it is declared."""
    from helpers.viewers import VIEWER_CLASSES

    pages = viewer_pages()
    assert {cls.name for _, cls in pages} == {cls.name for cls in VIEWER_CLASSES} == set(STATES)


def _embedded_viewer(staged: Path, kind: str) -> tuple[list[dict], int]:
    """The `steps` and start `step` of the one step viewer of class `kind` (its anywidget id) a
    staged notebook embeds."""
    nb = nbformat.read(staged, 4)
    state = nb.metadata.get("widgets", {}).get(book.WIDGET_STATE_MIME, {}).get("state", {})
    viewers = [
        m["state"]
        for m in state.values()
        if m["model_name"] == "AnyModel" and m["state"].get("_anywidget_id") == kind
    ]
    assert len(viewers) == 1, f"{staged.name}: expected one embedded {kind}, found {viewers}"
    return viewers[0]["steps"], viewers[0]["step"]


@pytest.mark.parametrize("lang", LANGS)
def test_step_viewers_move_in_the_book(site, browser, lang: str) -> None:
    out, base = site
    folder = book.EDITIONS[lang].subfolder
    if not (out / folder / "_static" / "widgets" / "embed-amd.js").exists():
        reason = "no Jupyter widgets HTML manager (npm): the book shows the viewers' text twins"
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{reason}; CI is set, so the book's viewers must move")
        pytest.skip(reason)
    for stem, viewer in viewer_pages():
        rel = f"notebooks/{stem}.html"
        url = urljoin(base, f"{folder}/{rel}" if folder else rel)
        ready = f"({STATES[viewer.name]})().text !== null"
        with visit(browser, url, ready=ready) as (page, record):
            before, after = step_viewer(page, viewer.name)
        assert not record.problems(), f"{lang} {rel}: {record.problems()}"
        staged = out.parent / "book-src" / lang / f"notebooks/{stem}.ipynb"
        steps, start = _embedded_viewer(staged, viewer.anywidget_id)
        if lang != "en":
            # the Chinese page shows the catalog's translation of the English steps; the checks
            # below read the English text (the picture's hooks are the same in both editions)
            english = out.parent / "book-src" / "en" / f"notebooks/{stem}.ipynb"
            en_steps, en_start = _embedded_viewer(english, viewer.anywidget_id)
            before, after = _as_english(before, after, steps, en_steps, viewer.name, start, lang)
            steps, start = en_steps, en_start
        check_move(viewer.name, before, after, steps, start)


def _as_english(before, after, steps, en_steps, name, start, lang):
    """What the viewer showed, with its Chinese text checked against the staged (translated)
    step and replaced by the English step's text, which the shared checks parse."""
    from tools import zh

    assert (
        steps
        == zh.ViewerCatalog().state({"m": {"state": {"steps": en_steps}}})["m"]["state"]["steps"]
    ), f"{lang}: the staged steps are not the catalog's translation of the English ones"
    key = text_key(name)
    shown = []
    for view, i in ((before, start), (after, start + 1)):
        assert view["text"] == steps[i][key], (
            f"{lang} viewer at step {i}: expected the translated text {steps[i][key]!r}, "
            f"found {view['text']!r}"
        )
        assert not zh.english_prose(view["text"].splitlines()[0]), view["text"]
        shown.append({**view, "text": en_steps[i][key]})
    return shown


def test_zh_staging_translates_viewers_and_pages(tmp_path: Path) -> None:
    """Without Sphinx: the zh edition's staged notebooks carry the viewers' words in Chinese (the
    English edition's stay English), and docs/zh/*.md replace their English pages, with links
    that resolve in the staged book."""
    from tools import zh

    nb = "17_context_and_expert_parallelism.ipynb"
    for lang in ("en", "zh"):
        source = (book.NOTEBOOKS / nb) if lang == "en" else (book.NOTEBOOKS / "zh" / nb)
        translate = zh.ViewerCatalog().state if lang == "zh" else None
        book.stage_notebook(source, tmp_path / f"{lang}.ipynb", translate=translate)
    texts = {
        lang: " ".join(
            step["text"]
            for m in nbformat.read(tmp_path / f"{lang}.ipynb", 4)
            .metadata["widgets"][book.WIDGET_STATE_MIME]["state"]
            .values()
            for step in m["state"].get("steps", [])
        )
        for lang in ("en", "zh")
    }
    assert "holds the K/V block of rank" in texts["en"], texts["en"][:200]
    assert "的 K/V 块" in texts["zh"] and "holds the" not in texts["zh"], texts["zh"][:200]
    staging = book.stage(tmp_path / "zh", "zh", widgets=True)
    for name in ("teaching.md", "compatibility.md"):
        page = (staging / "docs" / name).read_text()
        assert re.search(r"[\u4e00-\u9fff]", page.splitlines()[0]), (
            f"zh staging: docs/{name} is not the Chinese page: {page.splitlines()[0]!r}"
        )
        for target in re.findall(r"\]\(([^)#\s]+)", page):
            if not target.startswith(("http://", "https://")):
                assert (staging / "docs" / target).resolve().exists(), f"docs/{name}: {target}"
    english = book.stage(tmp_path / "en", "en", widgets=True)
    assert (english / "docs" / "teaching.md").read_text() == (book.DOCS / "teaching.md").read_text()


def test_staging_moves_viewer_state_into_metadata() -> None:
    """A viewer's display carries its state (data only); staging puts it, with the ES module,
    where MyST-NB looks (the notebook's `widgets` metadata), or, without the HTML manager,
    leaves the text twin alone: no widget view for a page that could not draw it."""
    from helpers.viewers import STATE_MIME, WIDGET_VIEW_MIME, RingViewer, esm

    viewer = RingViewer([{"step": 0, "svg": "<svg/>", "text": "step 0 of 0"}], text="step 0 of 0")
    data, _ = viewer._repr_mimebundle_()
    model_id = viewer.model_id
    viewer.close()

    def notebook():
        cell = nbformat.v4.new_code_cell("viewer", execution_count=1)
        result = nbformat.v4.new_output("execute_result", data=dict(data), execution_count=1)
        cell.outputs = [result]
        return nbformat.v4.new_notebook(cells=[cell])

    nb = notebook()
    assert book.embed_widgets(nb) == 1
    output = nb.cells[0].outputs[0]["data"]
    assert STATE_MIME not in output and WIDGET_VIEW_MIME in output, sorted(output)
    state = nb.metadata["widgets"][book.WIDGET_STATE_MIME]["state"]
    assert state[model_id]["state"]["_esm"] == esm("ring")
    assert set(state) == {model_id, f"{model_id}-layout"}, sorted(state)
    bare = notebook()
    assert book.embed_widgets(bare, keep_views=False) == 1
    assert sorted(bare.cells[0].outputs[0]["data"]) == ["text/plain"]
    assert "widgets" not in bare.metadata
