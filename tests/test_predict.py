"""Tests of helpers.viewers.predict, the prediction widget: its display is deterministic, holds
data only and shows the question without the answer (text/plain, text/html); its words are in
locale/zh/predict.po, translated, in the style sheet, and every stored prediction carries the
catalog's current Chinese; its language rule is helpers.exercises.i18n's; and, in headless
Chromium, the book's way (the Jupyter widgets HTML manager rendering the embedded state, no
kernel) and in JupyterLab (a kernel), a reader types a prediction, commits it and only then sees
the answer, how far off it was and the explanation, in English or in Chinese."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import polib
import pytest
from static_site import serve, visit

from helpers.exercises import i18n
from helpers.viewers import STATE_MIME, WIDGET_VIEW_MIME, with_modules
from helpers.viewers import predict as pr
from tools import book, zh

ROOT = Path(__file__).resolve().parents[1]
SHOTS = Path("/tmp/predict_shots")  # screenshots of the browser tests, for a reviewer

QUESTION = "How many bytes does a rank hold of {what}?"
EXPLAIN = "It holds {count} elements of 4 bytes."


def _numbered(answer=987654, **kw) -> pr.Prediction:
    values = {"what": "the shard", "count": answer // 4}
    return pr.predict(QUESTION, answer, unit="B", explain=EXPLAIN, values=values, **kw)


def _state(widget: pr.Prediction) -> dict:
    return widget._repr_mimebundle_()[0][STATE_MIME]["state"][widget.model_id]["state"]


# --- the display ----------------------------------------------------------------------------------
def test_model_ids_are_deterministic_and_unique() -> None:
    first = _numbered()
    assert re.fullmatch(r"[0-9a-f]{32}", first.model_id), first.model_id
    second = _numbered()  # the same data while the first is alive
    assert second.model_id == f"{first.model_id}-2"
    assert first.layout.model_id == f"{first.model_id}-layout"
    other = _numbered(answer=123456)
    assert other.model_id.split("-")[0] != first.model_id, "the answer is part of the data"
    first_id = first.model_id
    for widget in (first, second, other):
        widget.close()
    again = _numbered()
    assert again.model_id == first_id, "a closed widget frees its id"
    again.close()


def test_display_shows_the_question_and_carries_data_only() -> None:
    widget = _numbered()
    data, metadata = widget._repr_mimebundle_()
    assert metadata == {}
    assert set(data) == {"text/plain", "text/html", WIDGET_VIEW_MIME, STATE_MIME}, sorted(data)
    assert data[WIDGET_VIEW_MIME]["model_id"] == widget.model_id
    question = "How many bytes does a rank hold of the shard?"
    for mime in ("text/plain", "text/html"):
        assert question in data[mime], f"{mime}: expected the question, found {data[mime]!r}"
        # neither the answer nor the explanation (which holds a number derived from it)
        for secret in ("987654", "246913", "4 bytes"):
            assert secret not in data[mime], f"{mime} gives away {secret!r}: {data[mime]!r}"
    state = data[STATE_MIME]["state"]
    assert set(state) == {widget.model_id, f"{widget.model_id}-layout"}, sorted(state)
    own = state[widget.model_id]["state"]
    # no module text, no anywidget id (the step viewers' checks take a model with one for a step
    # viewer), no live language: the English notebook and its Chinese twin store the same state
    assert not {"_esm", "_anywidget_id", "lang"} & set(own), sorted(own)
    assert own["_prediction"] == pr.KIND and own["answer"] == 987654 and own["unit"] == "B"
    assert own["texts"]["en"]["explain"] == "It holds 246913 elements of 4 bytes."
    assert own["prediction"] is None, "nothing is committed when it is displayed"
    json.dumps(data)  # plain JSON
    again = _numbered()  # the same data: the same state, but for the ids (the next one)
    assert {**_state(again), "layout": None} == {**own, "layout": None}
    widget.close()
    again.close()


def test_staging_gives_the_module_back() -> None:
    """`helpers.viewers.with_modules` (what tools/book.py stages with) knows a prediction by its
    `_prediction`, anywidget's id for the class, and gives it its module and that id again."""
    widget = _numbered()
    assert widget._anywidget_id == pr.KIND, (widget._anywidget_id, pr.KIND)
    state = widget._repr_mimebundle_()[0][STATE_MIME]["state"]
    staged = with_modules(state)
    own = staged[widget.model_id]["state"]
    assert own["_esm"] == (pr.HERE / "predict.js").read_text() and own["_anywidget_id"] == pr.KIND
    assert staged[f"{widget.model_id}-layout"] == state[f"{widget.model_id}-layout"]
    widget.close()


def test_answers_are_numbers_or_choices() -> None:
    import numpy as np
    import torch

    assert _state(pr.predict("q?", 12.0))["answer"] == 12, "a whole float is stored as an int"
    assert _state(pr.predict("q?", torch.tensor(2.5)))["answer"] == 2.5
    assert _state(pr.predict("q?", np.int64(7)))["answer"] == 7
    picked = pr.predict("Which?", "b", choices=["a", "b", "c"])
    assert _state(picked)["answer"] == 1 and _state(picked)["choices"] == ["a", "b", "c"]
    assert "(b) b" in picked._repr_mimebundle_()[0]["text/plain"], "the choices are listed"
    bad = [
        (TypeError, lambda: pr.predict("q?", True)),
        (TypeError, lambda: pr.predict("q?", "12")),
        (ValueError, lambda: pr.predict("q?", float("nan"))),
        (ValueError, lambda: pr.predict("q?", "d", choices=["a", "b"])),
        (ValueError, lambda: pr.predict("q?", "a", choices=["a"])),
        (ValueError, lambda: pr.predict(" ", 1)),
        (KeyError, lambda: pr.predict("q?", 1, explain="{missing}")),
    ]
    for error, make in bad:
        with pytest.raises(error):
            make()


# --- the language and the catalog -----------------------------------------------------------------
def test_language_rule_is_the_exercises_rule(monkeypatch, tmp_path) -> None:
    zh_folder = tmp_path / "notebooks" / "zh"
    zh_folder.mkdir(parents=True)
    cases = [
        ({}, tmp_path, "en"),
        ({}, zh_folder, "zh"),
        ({"JPY_SESSION_NAME": str(zh_folder / "13_x.ipynb")}, tmp_path, "zh"),
        ({"JPY_SESSION_NAME": str(tmp_path / "13_x.ipynb")}, zh_folder, "en"),
        ({"PSR_LANG": "zh"}, tmp_path, "zh"),
        ({"PSR_LANG": "en"}, zh_folder, "en"),
    ]
    for env, cwd, want in cases:
        for name in ("PSR_LANG", "JPY_SESSION_NAME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(cwd)
        found = (pr.current_language(), i18n.current_language())
        assert found == (want, want), f"{env}, cwd {cwd.name}: expected {want}, found {found}"
        widget = _numbered()
        assert widget.lang == want, f"the live widget should tell the module {want}"
        widget.close()


def _entries() -> list[polib.POEntry]:
    return list(polib.pofile(str(pr.CATALOG), wrapwidth=0))


def test_catalog_is_translated_in_the_style_sheet() -> None:
    entries = _entries()
    ids = {e.msgid for e in entries}
    assert set(pr.LABELS.values()) <= ids, sorted(set(pr.LABELS.values()) - ids)
    wrong = []
    for e in entries:
        fields = (
            sorted(re.findall(r"\{(\w+)\}", e.msgid)),
            sorted(re.findall(r"\{(\w+)\}", e.msgstr)),
        )
        if not e.msgstr or e.fuzzy:
            wrong.append(f"{e.msgid!r}: not translated")
        elif fields[0] != fields[1]:
            wrong.append(f"{e.msgid!r}: fields {fields[1]}, English {fields[0]}")
        wrong += [f"{e.msgid[:40]!r}: {p}" for p in zh.style_problems(e.msgstr, False)]
        wrong += [
            f"{e.msgid[:40]!r}: rejected form {v!r} (the glossary says {chosen!r})"
            for chosen, rejected in zh.glossary_choices()
            for v in rejected
            if v in e.msgstr
        ]
    assert not wrong, "locale/zh/predict.po:\n" + "\n".join(wrong)


def _template(msgid: str) -> re.Pattern:
    """A msgid as a regex: each {field} a named group (a repeated one, the same text again)."""
    out, seen = [], set()
    for i, part in enumerate(re.split(r"\{(\w+)\}", msgid)):
        if i % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(f"(?P={part})" if part in seen else f"(?P<{part}>.+?)")
            seen.add(part)
    return re.compile("".join(out))


def stored_predictions() -> list[tuple[str, dict]]:
    """(notebook, model state) of every prediction the English notebooks display."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, 4).cells:
            for output in cell.get("outputs", []):
                state = output.get("data", {}).get(STATE_MIME, {}).get("state", {})
                found += [
                    (path.name[:2], m["state"])
                    for m in state.values()
                    if m["state"].get("_prediction") == pr.KIND
                ]
    return found


def test_stored_predictions_carry_the_catalogs_chinese() -> None:
    """Each stored prediction's English texts are catalog templates, and its Chinese is what the
    catalog gives for them now (a changed translation: re-execute that notebook), with the
    current labels; every entry of the catalog is shown by a widget or by a stored prediction."""
    stored = stored_predictions()
    assert {nb for nb, _ in stored} >= {"13", "15"}, [nb for nb, _ in stored]
    chinese = {e.msgid: e.msgstr for e in _entries()}
    used = set(pr.LABELS.values())
    wrong = []
    for nb, state in stored:
        en, cn = state["texts"]["en"], state["texts"]["zh"]
        assert en["labels"] == pr.LABELS and cn["labels"] == {
            k: chinese[v] for k, v in pr.LABELS.items()
        }, f"{nb}: stale labels: re-execute notebook {nb}"
        pairs = [(en["question"], cn["question"]), (en["explain"], cn["explain"])]
        pairs += list(zip(en["choices"], cn["choices"], strict=True))
        assert en["unit"] == state["unit"], f"{nb}: the English unit is the unit"
        pairs.append((en["unit"], cn["unit"]))
        for english, stored_zh in pairs:
            if not english:
                continue
            hits = [m for m in chinese if _template(m).fullmatch(english)]
            if not hits:
                wrong.append(f"{nb}: {english[:60]!r} is no msgid of locale/zh/predict.po")
                continue
            used.update(hits)
            fields = _template(hits[0]).fullmatch(english).groupdict()
            if stored_zh != chinese[hits[0]].format(**fields):
                wrong.append(f"{nb}: {english[:50]!r}: stale Chinese, re-execute notebook {nb}")
    assert not wrong, "\n".join(wrong)
    assert set(chinese) <= used, f"catalog entries no prediction shows: {set(chinese) - used}"


# --- no giveaway: a prediction's answer is not on the page before its commit ----------------------
_SVG_TEXT = re.compile(r"<text\b[^>]*>(.*?)</text>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _shown(output: dict) -> str:
    """What a reader sees of one stored output: its text, its HTML's and its SVG's text (not a
    widget's stored state, which no view shows before a commit)."""
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    if "image/svg+xml" in data:
        return " ".join(_SVG_TEXT.findall("".join(data["image/svg+xml"])))
    if "text/html" in data:
        return _TAG.sub(" ", "".join(data["text/html"]))
    return "".join(data.get("text/plain", ""))


def _answer_forms(answer: int | float) -> list[re.Pattern]:
    """The answer as a page would print it, each a whole number on its own (33, not 133 or 3.3):
    a whole number as it is and with thousands commas; another to 4 significant digits (the
    widget's) and to 3."""
    if isinstance(answer, int):
        forms = {str(answer), f"{answer:,}"}
    else:
        forms = {f"{float(f'{answer:.{d}g}'):g}" for d in (3, 4)}
    return [re.compile(rf"(?<![\w.]){re.escape(f)}(?!\w|\.\d)") for f in sorted(forms)]


def test_no_prediction_is_answered_above_it() -> None:
    """R42L: for each stored prediction of a number, its answer (as a page would print it) is in
    no output and no markdown cell above it, English or Chinese, nor in the first output after
    it when that is a viewer's (a widget's view, which opens on its first step while the
    question is open). A cell that prints the number after the prediction is its reveal; a
    choice's answer is a name the page uses anyway, so a reader checks those."""
    wrong, seen = [], 0
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, 4).cells
        twin = {c.id: c for c in nbformat.read(ROOT / "notebooks" / "zh" / path.name, 4).cells}
        for i, cell in enumerate(cells):
            for output in cell.get("outputs", []):
                models = output.get("data", {}).get(STATE_MIME, {}).get("state", {}).values()
                for m in (m["state"] for m in models if m["state"].get("_prediction") == pr.KIND):
                    if m["choices"]:
                        continue
                    seen += 1
                    above = []
                    for c in cells[:i]:
                        if c.cell_type == "markdown":
                            above += [c.source, twin[c.id].source if c.id in twin else ""]
                        above += [_shown(o) for o in c.get("outputs", [])]
                    after = next((c for c in cells[i + 1 :] if c.get("outputs")), None)
                    first = after.outputs[0] if after is not None else {}
                    if WIDGET_VIEW_MIME in first.get("data", {}):
                        above.append(_shown(first))
                    for form in _answer_forms(m["answer"]):
                        hits = [t for t in above if form.search(t)]
                        for text in hits[:1]:
                            at = form.search(text).start()
                            wrong.append(
                                f"{path.name[:2]} {cell.id}: the answer {form.pattern!r} is "
                                f"shown before the commit: ...{text[max(0, at - 60) : at + 30]!r}"
                            )
    assert seen >= 6, f"expected the stored number predictions, found {seen}"
    assert not wrong, "\n".join(wrong)


# --- in the browser: the book's way, with no kernel -----------------------------------------------
PAGE = """<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8">
<script type="application/vnd.jupyter.widget-state+json">{state}</script>
<script src="widgets/require.js"></script>
<script src="widgets/config.js"></script>
<script src="widgets/embed-amd.js"></script>
</head><body>{views}</body></html>
"""
STORED = ["13_sharded_data_parallel.ipynb", "15_tensor_and_sequence_parallelism.ipynb"]
VIEW = (
    '<div class="output"><script type="application/vnd.jupyter.widget-view+json">{}</script></div>'
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two pages (English, Chinese) built as the book builds a page: the displays of a notebook
    staged by tools/book.py (`embed_widgets`: the state moves into the metadata, the ES module
    comes back), that state in the page for the widgets HTML manager (MyST-NB's way), the views."""
    folder = tmp_path_factory.mktemp("predict-site")
    SHOTS.mkdir(exist_ok=True)
    if book.stage_widgets(folder) is None:
        pytest.skip("no Jupyter widgets HTML manager (`make widgets-deps` installs it)")
    widgets = [
        _numbered(answer=11592),
        pr.predict("Which collective?", "all_gather", choices=["all_reduce", "all_gather"],
                   explain="FSDP2 all-gathers each layer before its forward."),
        pr.predict("What fraction?", 3 / 11),  # shown as 0.2727
    ]  # fmt: skip
    cells = []
    for widget in widgets:
        data, _ = widget._repr_mimebundle_()
        cell = nbformat.v4.new_code_cell("predict(...)", execution_count=1)
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        cells.append(cell)
        widget.close()
    nb = nbformat.v4.new_notebook(cells=cells)
    assert book.embed_widgets(nb) == 3
    state = nb.metadata["widgets"][book.WIDGET_STATE_MIME]
    models = [m["state"] for m in state["state"].values() if "_prediction" in m["state"]]
    assert len(models) == 3 and all(m["_esm"].startswith("// Predict") for m in models), (
        "staging (helpers.viewers.with_modules) should give each prediction its ES module back"
    )
    views = "".join(
        VIEW.format(json.dumps(c.outputs[0]["data"][WIDGET_VIEW_MIME])) for c in nb.cells
    )
    for lang in ("en", "zh-CN"):
        page = PAGE.format(lang=lang, state=json.dumps(state), views=views)
        (folder / f"{lang}.html").write_text(page, encoding="utf-8")
    for nb_path in STORED:
        for lang, source, translate in (
            ("en", ROOT / "notebooks" / nb_path, None),
            ("zh-CN", ROOT / "notebooks" / "zh" / nb_path, zh.ViewerCatalog().state),
        ):
            staged = folder / f"{nb_path[:2]}-{lang}.ipynb"
            book.stage_notebook(source, staged, translate=translate)
            nb = nbformat.read(staged, 4)
            views = "".join(
                VIEW.format(json.dumps(o["data"][WIDGET_VIEW_MIME]))
                for c in nb.cells
                for o in c.get("outputs", [])
                if WIDGET_VIEW_MIME in o.get("data", {})
            )
            state = nb.metadata["widgets"][book.WIDGET_STATE_MIME]
            page = PAGE.format(lang=lang, state=json.dumps(state), views=views)
            (folder / f"{nb_path[:2]}-{lang}.html").write_text(page, encoding="utf-8")
    with serve(folder) as base:
        yield base


VIEWS = """() => Array.from(document.querySelectorAll('.predict-view'), v => ({
  html: v.innerHTML,
  heading: v.querySelector('.predict-heading')?.innerText ?? null,
  question: v.querySelector('.predict-question')?.innerText ?? null,
  message: v.querySelector('.predict-message')?.innerText ?? '',
  you: v.querySelector('.predict-you')?.innerText ?? null,
  answer: v.querySelector('.predict-answer')?.innerText ?? null,
  error: v.querySelector('.predict-error')?.innerText ?? null,
  explain: v.querySelector('.predict-explain')?.innerText ?? null,
  disabled: v.querySelector('.predict-commit').disabled,
}))"""

WANT = {
    "en": {
        "heading": "Predict, then commit",
        "question": [
            "How many bytes does a rank hold of the shard?",
            "Which collective?",
            "What fraction?",
        ],
        "need_number": "Type a number, then commit.",
        "you": "Your prediction: 11000 B",
        "answer": "The answer: 11592 B",
        "error": "Off by 592 B: 5.1% too low.",
        "explain": "It holds 2898 elements of 4 bytes.",
        "choice": ("The answer: all_gather", "Not this one."),
    },
    "zh-CN": {
        "heading": "先预测，再提交",
        "question": [
            "How many bytes does a rank hold of the shard?",
            "Which collective?",
            "What fraction?",
        ],
        "need_number": "先输入一个数，再提交。",
        "you": "你的预测：11000 B",
        "answer": "答案：11592 B",
        "error": "相差 592 B：偏低 5.1%。",
        "explain": "It holds 2898 elements of 4 bytes.",  # not in the catalog: stays English
        "choice": ("答案：all_gather", "不对。"),
    },
}


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_commit_then_see_in_the_static_page(site, browser, lang: str) -> None:
    """No kernel: the HTML manager draws each prediction from the embedded state. Before the
    commit neither the answer nor the explanation is in the view; an empty commit asks for a
    number; after one, the view shows the prediction, the answer, the error and why."""
    want = WANT[lang]
    ready = "document.querySelectorAll('.predict-view').length === 3"
    with visit(browser, f"{site}{lang}.html", ready=ready) as (page, record):
        before = page.evaluate(VIEWS)
        assert [v["question"] for v in before] == want["question"], before
        assert before[0]["heading"] == want["heading"], before[0]
        for view in before:
            for secret in ("11592", "2898", "all_gather", "predict-result"):
                if secret == "all_gather" and view is before[1]:
                    continue  # the choice's own label
                assert secret not in view["html"], f"{lang}: {secret!r} before the commit"
        text = page.evaluate("document.body.innerText")
        assert "11592" not in text and "2898" not in text, f"{lang}: the answer shows: {text!r}"
        number = page.locator(".predict-view").nth(0)
        if lang == "en":
            number.screenshot(path=str(SHOTS / "before_commit.png"))
        number.locator(".predict-commit").click()
        asked = page.evaluate(VIEWS)[0]
        assert asked["message"] == want["need_number"] and asked["answer"] is None, asked
        number.locator(".predict-input").fill("11,000")
        number.locator(".predict-input").press("Enter")
        page.wait_for_selector(".predict-view .predict-result")
        after = page.evaluate(VIEWS)[0]
        found = {k: after[k] for k in ("you", "answer", "error", "explain")}
        assert found == {k: want[k] for k in found}, f"{lang}: expected {want}, found {found}"
        assert after["disabled"] and after["message"] == "", after
        if lang == "en":
            number.screenshot(path=str(SHOTS / "after_commit.png"))
        choice = page.locator(".predict-view").nth(1)
        choice.locator(".predict-choice", has_text="all_reduce").click()
        choice.locator(".predict-commit").click()
        picked = page.evaluate(VIEWS)[1]
        assert (picked["answer"], picked["error"]) == want["choice"], picked
        assert picked["explain"] == "FSDP2 all-gathers each layer before its forward.", picked
    assert not record.problems(), f"{lang}: {record.problems()}"


def test_relative_error_words(site, browser) -> None:
    """The error as the reader reads it: a percent within a factor of 2, else a ratio; exact,
    also for the answer typed as the widget shows it (0.2727 for 3/11); what a reader types:
    thousands commas, a decimal comma, a fraction (R42L-PW-1, PW-3)."""
    cases = {
        (0, "11592"): "Exactly right.",
        (0, "11,592"): "Exactly right.",
        (0, "11592,0"): "Exactly right.",
        (0, "12000"): "Off by 408 B: 3.5% too high.",
        (0, "46368"): "Off by 34776 B: 4 times the answer.",
        (0, "-5"): "Off by 11597 B.",
        (2, "0.2727"): "Exactly right.",
        (2, "0,2727"): "Exactly right.",
        (2, "3/11"): "Exactly right.",
        (2, "0,27"): "Off by 0.002727: 1% too low.",
    }
    for (nth, typed), want in cases.items():
        with visit(
            browser, f"{site}en.html", ready="!!document.querySelector('.predict-view')"
        ) as (
            page,
            record,
        ):
            number = page.locator(".predict-view").nth(nth)
            number.locator(".predict-input").fill(typed)
            number.locator(".predict-commit").click()
            found = page.evaluate(VIEWS)[nth]["error"]
            assert found == want, f"typed {typed}: expected {want!r}, found {found!r}"
        assert not record.problems(), record.problems()


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
@pytest.mark.parametrize("nb", [name[:2] for name in STORED])
def test_stored_prediction_in_the_book(site, browser, nb: str, lang: str) -> None:
    """The prediction notebook 13 (15) stores, staged as the book stages it (the English notebook,
    or the Chinese twin with the zh edition's translation), in a page of that language: the
    question in that language and no answer; a prediction 10% high gives the answer, "10% too
    high" and the stored explanation."""
    (name,) = [n for n in STORED if n.startswith(nb)]
    (state,) = [s for n, s in stored_predictions() if n == nb]
    texts = state["texts"]["zh" if lang.startswith("zh") else "en"]
    answer, unit = state["answer"], state["unit"]
    typed = round(answer * 1.1)
    ready = "!!document.querySelector('.predict-view .predict-commit')"
    with visit(browser, f"{site}{nb}-{lang}.html", ready=ready) as (page, record):
        (before,) = page.evaluate(VIEWS)
        assert before["question"] == texts["question"].replace("`", ""), before
        assert before["heading"] == texts["labels"]["heading"], before
        assert str(answer) not in before["html"] and before["answer"] is None, before
        view = page.locator(".predict-view")
        if nb == "13":
            view.screenshot(path=str(SHOTS / f"nb13_{lang}_before.png"))
        view.locator(".predict-input").fill(str(typed))
        view.locator(".predict-commit").click()
        page.wait_for_selector(".predict-view .predict-result")
        (after,) = page.evaluate(VIEWS)
        if nb == "13":
            view.screenshot(path=str(SHOTS / f"nb13_{lang}_after.png"))
    labels = texts["labels"]
    want = {
        "answer": labels["answer"].format(answer=f"{answer} {unit}"),
        "error": labels["high"].format(error=f"{typed - answer} {unit}", percent=10),
        "explain": texts["explain"].replace("`", ""),
    }
    assert {k: after[k] for k in want} == want, f"{nb} {lang}: expected {want}, found {after}"
    assert not record.problems(), f"{nb} {lang}: {record.problems()}"


# --- in JupyterLab: a kernel, a notebook under notebooks/zh ---------------------------------------
# a code cell of the visible notebook has run or is running ("[1]:", "[*]:")
RAN = """() => [...document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
  .some(p => /\\[(\\*|\\d+)\\]/.test(p.innerText))"""
LAB_CELLS = [
    "from helpers.viewers.predict import predict\n\n"
    'widget = predict("How many bytes does a rank hold of {what}?", 4096, unit="B",\n'
    '                 explain="It holds {count} elements of 4 bytes.",\n'
    '                 values={"what": "the shard", "count": 1024})\nwidget',
    'print("the kernel heard:", widget.prediction)',
]


def test_commit_then_see_in_jupyterlab(browser, tmp_path: Path) -> None:
    """A notebook under notebooks/zh, run in the project kernel in a real JupyterLab (the
    fixture of tests/test_jupyterlab.py): the widget draws with the Chinese labels the kernel
    chose from the notebook's path, hides the answer until the commit, then shows it, and the
    kernel hears the committed prediction."""
    from test_jupyterlab import (
        CURRENT,
        KERNEL,
        KERNEL_STATE,
        KERNEL_TIMEOUT_S,
        PlaywrightTimeout,
        _click,
        _wait,
        jupyterlab,
        new_page,
    )

    with jupyterlab(tmp_path) as (url, token), new_page(browser) as page:
        folder = tmp_path / "notebooks" / "zh"
        folder.mkdir()
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in LAB_CELLS])
        nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": KERNEL, "language": "python"}
        nbformat.write(nb, folder / "predict_lab.ipynb")
        page.goto(f"{url}/lab/tree/zh/predict_lab.ipynb?token={token}")
        _wait(page, CURRENT + " .jp-Cell", "the notebook never opened")
        _wait(
            page,
            CURRENT + " .jp-Notebook-ExecutionIndicator[data-status='idle']",
            lambda: f"the kernel never became idle ({page.evaluate(KERNEL_STATE)})",
            timeout_s=KERNEL_TIMEOUT_S,
        )
        # a click on the menu can be lost before the notebook has the focus: once more then
        # (as tests/test_jupyterlab.py's run_ring_viewer does)
        for attempt in range(3):
            page.locator(CURRENT + " .jp-Cell").first.click()
            _click(page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")), "the Run menu")
            _click(page.locator(".lm-Menu-item[data-command='runmenu:run-all']"), "Run All Cells")
            try:
                page.wait_for_function(RAN, timeout=30_000)
                break
            except PlaywrightTimeout:
                assert attempt < 2, f"Run All Cells started nothing: {page.evaluate(KERNEL_STATE)}"
        _wait(
            page,
            ".predict-view .predict-commit",
            lambda: f"the prediction never rendered ({page.evaluate(KERNEL_STATE)})",
            timeout_s=KERNEL_TIMEOUT_S,
        )
        _wait(page, CURRENT + " .jp-OutputArea-output:has-text('the kernel heard: None')", "cell 2")
        (before,) = page.evaluate(VIEWS)
        assert before["heading"] == "先预测，再提交", f"expected the Chinese labels: {before}"
        assert "4096" not in before["html"] and before["answer"] is None, before
        view = page.locator(".predict-view")
        view.locator(".predict-input").fill("2048")
        view.locator(".predict-input").press("Enter")
        page.wait_for_selector(".predict-view .predict-result")
        (after,) = page.evaluate(VIEWS)
        found = {k: after[k] for k in ("you", "answer", "error")}
        want = {
            "you": "你的预测：2048 B",
            "answer": "答案：4096 B",
            "error": "相差 2048 B：是答案的 0.5 倍。",
        }
        assert found == want, f"expected {want}, found {found}"
        # the second cell again: the kernel heard the prediction
        page.locator(CURRENT + " .jp-CodeCell").nth(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        _wait(
            page,
            CURRENT + " .jp-OutputArea-output:has-text('the kernel heard: 2048')",
            lambda: f"the kernel did not hear the commit ({page.evaluate(KERNEL_STATE)})",
        )
