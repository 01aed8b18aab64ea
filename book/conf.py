"""Sphinx configuration of the rendered book (`make book`; built by `tools/book.py`).

The source folder is not this one: `tools/book.py` stages a copy of the repository's layout
(`index.md` from here, `notebooks/*.ipynb`, `docs/*.md`) into a build folder and runs
`sphinx-build -c book <staging> <out>`, so links written for the repository
(`../notebooks/01_torch_compile_entry.ipynb` in `docs/teaching.md`, `02_...ipynb` between
notebooks) resolve in the book too. A second language is a second staging folder built with
`-D language=<code>` into a subfolder of the output: nothing here names the notebooks.

The language switch on every page links the same page in the other edition.
`tools/book.py` tells each build where that edition is and which pages it has, as `html_context`
values (`sphinx-build -A`): `peer_prefix` (the other edition's root, relative to this one's root:
`zh/` from English, `../` from Chinese), `peer_docs` (its page names, comma-separated),
`peer_label` and `peer_lang`. A page the other edition lacks links to its landing page.

Notebooks are rendered from their stored outputs (`nb_execution_mode = "off"`): the book shows
what CI checked. The build must work offline, so nothing here loads a script from a CDN.
"""

from __future__ import annotations

import os

project = "PyTorch Source Reading"
author = "PyTorch Source Reading contributors"
copyright = "the PyTorch Source Reading contributors"
language = "en"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "README.md"]

# --- MyST-NB: stored outputs only -------------------------------------------------------------
nb_execution_mode = "off"
# The step viewers' widget state: tools/book.py moves it from each viewer's display into the
# notebook's metadata, where MyST-NB finds it and embeds it in the page
# (myst_nb.core.render.NbElementRenderer.render_nb_finalise), followed by these scripts: RequireJS,
# the paths of the widget modules (config.js) and the Jupyter widgets HTML manager, all staged
# by tools/book.py into _static/widgets/ (WIDGETS_ENV names the folder), never from a CDN.
# Without them (no npm) tools/book.py keeps only each viewer's text twin: nothing to load.
_widgets = os.environ.get("BOOK_WIDGETS_STATIC")
nb_ipywidgets_js = {}
if _widgets:
    nb_ipywidgets_js = {
        "widgets/require.js": {},
        "widgets/config.js": {},
        "widgets/embed-amd.js": {},
    }
nb_merge_streams = True
# Markdown cells and text/markdown outputs (show_source excerpts with their permalinks)
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# show_source excerpts of docstrings and C++ are fenced as python: Pygments retries them plainly
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]

# --- HTML -------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "PyTorch Source Reading"
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    # the language switch first, then the theme's own buttons (its default for this slot)
    "article_header_end": ["lang-switch.html", "article-header-buttons.html"],
}
pygments_style = "default"
templates_path = ["_templates"]  # relative to this folder, like html_static_path
html_static_path = ["_static"]  # relative to this folder (the -c folder), not the staging
if _widgets:
    html_static_path.append(_widgets)  # holds widgets/: copied into _static/widgets/
html_css_files = ["book.css"]
# The theme's mode script logs a console error when no default mode is set
html_context = {"default_mode": "light"}


def _language_switch(app, pagename, templatename, context, doctree) -> None:
    """Give the page `lang_switch_url`: its counterpart in the other edition (or that edition's
    landing page), relative to this page, so the site works from any folder or server."""
    peer = app.config.html_context
    context["lang_switch_url"] = ""
    if not peer.get("peer_prefix"):
        return  # a one-language build: no switch
    target = pagename if pagename in peer["peer_docs"].split(",") else app.config.root_doc
    up = "../" * pagename.count("/")
    context["lang_switch_url"] = f"{up}{peer['peer_prefix']}{target}.html"
    context["lang_switch_label"] = peer["peer_label"]
    context["lang_switch_hreflang"] = peer["peer_lang"]
    context["lang_switch_title"] = peer.get("peer_title", peer["peer_label"])


def _chinese_search():
    """Sphinx 9.0.4's Chinese search language, with its JavaScript stemmer named right.

    `SearchChinese` stems Latin words with `english-stemmer.js` (which defines `EnglishStemmer`),
    but `get_js_stemmer_code` names the stemmer after `language_name`: every Chinese page's
    `language_data.js` ends `window.Stemmer = ChineseStemmer;`, an uncaught ReferenceError, and
    search finds nothing: https://github.com/sphinx-doc/sphinx/issues/14229, fixed upstream by
    https://github.com/sphinx-doc/sphinx/pull/14416 (which names it `EnglishStemmer`, as here).
    The word splitting (jieba when installed, else Latin words only) is Sphinx's own.
    """
    from sphinx.search.zh import SearchChinese

    class Chinese(SearchChinese):
        language_name = "English"  # only names the JS stemmer class (english-stemmer.js)

    return Chinese


def setup(app) -> None:
    app.connect("html-page-context", _language_switch)
    app.add_search_language(_chinese_search())
