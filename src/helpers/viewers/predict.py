"""Predict, then see: the reader commits a prediction of a number the notebook is about to show
(or picks one of a few choices), and only then sees the answer, how far off the prediction was
and why. An anywidget widget like the step viewers, drawn by one ES module (`predict.js` next to
this file), so it works in JupyterLab and in the static book, where the Jupyter widgets HTML
manager renders it from the state embedded in the page, with no kernel.

Used by: notebooks 01, 05, 13, 15, 16 and 17, in a cell just before a step viewer or the cell
that shows a key number (`predict(question, answer, ...)`, the answer computed from the run,
never typed).

What it holds is data only: the question, the answer, its unit, the explanation shown after the
commit, and every word it shows (the unit too) in English and in Chinese (`texts`; the Chinese from
`locale/zh/predict.po`, whose msgids are the English texts and templates, read with polib at
display time). The display is deterministic, like the viewers': the model id is a hash of that
data, and next to the widget view it carries the state the book embeds
(`helpers.viewers.STATE_MIME`), without three things:
- the ES module's text and anywidget's `_anywidget_id` (the step viewers' checks take every model
  that has one for a step viewer): the state names the widget by `_prediction` instead, from
  which `helpers.viewers.with_modules` gives it both back when the book is built;
- `lang`, the language a live kernel tells the module (a notebook under `notebooks/zh` gets
  Chinese, by the rule of `helpers.exercises.i18n.current_language`); in the book, the page's
  own language decides.
So the English notebook and its Chinese twin store the same output, and a changed translation is
a changed output: re-execute the notebook. One effect: the `text/plain` and `text/html` fallback
(an untrusted notebook, a frontend that does not draw the widget) is the English question, in
the twin too.

How far the answer is hidden: what is *rendered* (the `text/plain` and `text/html` fallback,
and the widget's view until the commit: the module puts the answer into the page only then)
shows the question only. The answer and the filled explanation are data of the stored widget
state (`answer`, `texts`), in the .ipynb and, in the book, in the page's embedded widget state:
hidden from the view, not from the source. A reader who reads the JSON is not predicting.

The reader types a number as they like: "11,592", "11 592" (thousands), "0,27" (a decimal
comma), "3/11" (a fraction), "1.2e4"; the answer typed as the widget shows it (4 significant
digits: 0.2727 for 3/11) counts as exactly right. A question whose answer is a fraction of 1
says so ("(a fraction, 0 to 1)"), so that nobody answers 27 for 0.27.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anywidget
import ipywidgets
import traitlets
from ipywidgets.embed import dependency_state

from helpers.viewers import HERE, STATE_MIME, WIDGET_VIEW_MIME, _unique_id

__all__ = ["LABELS", "Prediction", "catalog", "current_language", "predict"]

#: the Chinese of every English text a prediction shows (msgid: the English template)
CATALOG = HERE.parents[2] / "locale" / "zh" / "predict.po"
#: the value of `_prediction` in a prediction's state, its anywidget id: how the book's staging
#: (`helpers.viewers.with_modules`) knows it
KIND = "helpers.viewers.predict.Prediction"

#: The widget's own words, by role (the ES module fills the {fields}); each is a msgid of CATALOG.
LABELS: dict[str, str] = {
    "heading": "Predict, then commit",
    "input": "Your prediction",
    "commit": "Commit",
    "need_number": "Type a number, then commit.",
    "need_choice": "Pick one, then commit.",
    "you": "Your prediction: {prediction}",
    "answer": "The answer: {answer}",
    "exact": "Exactly right.",
    "high": "Off by {error}: {percent}% too high.",
    "low": "Off by {error}: {percent}% too low.",
    "times": "Off by {error}: {ratio} times the answer.",
    "off": "Off by {error}.",
    "right": "Right.",
    "wrong": "Not this one.",
}


@functools.cache
def catalog(path: Path = CATALOG) -> dict[str, str]:
    """msgid -> msgstr of the translated, current entries of the predictions' catalog."""
    if not path.exists():
        return {}
    import polib

    return {
        e.msgid: e.msgstr
        for e in polib.pofile(str(path), wrapwidth=0)
        if e.msgstr and not e.fuzzy and not e.obsolete
    }


def _is_zh_folder(folder: Path) -> bool:
    return folder.name == "zh" and folder.parent.name == "notebooks"


def current_language() -> str:
    """ "zh" when the running notebook is a Chinese twin, else "en": the rule of
    `helpers.exercises.i18n.current_language` (PSR_LANG, then Jupyter's JPY_SESSION_NAME, then
    the working directory), written again here because the viewers import no other helpers
    (tests/test_predict.py holds the two to the same answers)."""
    forced = os.environ.get("PSR_LANG", "").strip().lower()
    if forced in ("zh", "en"):
        return forced
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session.endswith(".ipynb"):
        return "zh" if _is_zh_folder(Path(session).parent) else "en"
    try:
        return "zh" if _is_zh_folder(Path.cwd()) else "en"
    except OSError:  # the working directory was removed
        return "en"


def _number(value: Any) -> int | float:
    """A finite real number as JSON will carry it: an int when it is whole."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:  # a 0-d tensor or a NumPy scalar
            value = value.item()
        except AttributeError:
            raise TypeError(f"the answer must be a number, got {type(value).__name__}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"the answer must be a number, got {type(value).__name__}")
    value = float(value) if not isinstance(value, int) else value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"the answer must be finite, got {value}")
        if value.is_integer():
            value = int(value)
    return value


def _texts(
    question: str,
    explain: str,
    values: Mapping[str, Any],
    choices: Sequence[str],
    unit: str = "",
) -> dict[str, dict[str, Any]]:
    """Every word the widget shows, in English and in Chinese (a text without a translation
    stays English in both)."""
    zh = catalog()
    out = {}
    for lang in ("en", "zh"):
        word = (lambda s: zh.get(s, s)) if lang == "zh" else (lambda s: s)
        out[lang] = {
            "question": word(question).format(**values),
            "explain": word(explain).format(**values),
            "choices": [word(c) for c in choices],
            "unit": word(unit) if unit else "",
            "labels": {k: word(v) for k, v in LABELS.items()},
        }
    return out


class Prediction(anywidget.AnyWidget):
    """A question, an input (a number, or one of `choices`), a commit button; after the commit,
    the answer, how far off the prediction was and the explanation (see the module docstring).
    Build it with `predict(...)`."""

    _esm = (HERE / "predict.js").read_text()
    _prediction = traitlets.Unicode(KIND).tag(sync=True)
    question = traitlets.Unicode("").tag(sync=True)
    answer = traitlets.Any(None).tag(sync=True)  # a number, or the index of the right choice
    unit = traitlets.Unicode("").tag(sync=True)
    choices = traitlets.List(traitlets.Unicode()).tag(sync=True)
    texts = traitlets.Dict().tag(sync=True)
    # what the reader committed (a number, or a choice's index), heard back from the module
    prediction = traitlets.Any(None).tag(sync=True)
    lang = traitlets.Unicode("").tag(sync=True)  # live only: not in the stored state

    def __init__(self, data: dict[str, Any], **kwargs: Any) -> None:
        digest = hashlib.sha256(
            json.dumps([type(self).__name__, data], sort_keys=True).encode()
        ).hexdigest()[:32]
        model_id = _unique_id(digest)
        layout = ipywidgets.Layout(model_id=f"{model_id}-layout")
        super().__init__(
            **data, lang=current_language(), layout=layout, model_id=model_id, **kwargs
        )

    def __repr__(self) -> str:
        return f"<Prediction: {self.question}>"

    def close(self) -> None:
        """Close the widget and its layout (which holds the derived id `<model id>-layout`)."""
        layout = self.layout
        super().close()
        layout.close()

    def text(self) -> str:
        """The question as text, without the answer: the display's `text/plain`."""
        lines = [f"Predict, then commit: {self.question}"]
        if self.choices:
            lines += [f"  ({chr(ord('a') + i)}) {c}" for i, c in enumerate(self.choices)]
        else:
            lines.append(f"  (a number{f', in {self.unit}' if self.unit else ''})")
        return "\n".join(lines)

    def static_html(self) -> str:
        """The question as static HTML, without the answer: the display's `text/html`, what a
        frontend that does not draw the widget shows (JupyterLab with an untrusted notebook)."""
        pre = html.escape(self.text(), quote=False)
        return f'<div class="predict-static"><pre>{pre}</pre></div>'

    def embed_state(self) -> dict[str, Any]:
        """The widget state of this prediction and its layout, as plain JSON, without the ES
        module, anywidget's id and the live language (see the module docstring)."""
        state = json.loads(json.dumps(dependency_state(self, drop_defaults=False)))
        for key in ("_esm", "_anywidget_id", "lang"):
            state[self.model_id]["state"].pop(key, None)
        return {"version_major": 2, "version_minor": 0, "state": state}

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        view = {"version_major": 2, "version_minor": 0, "model_id": self.model_id}
        data = {
            "text/plain": self.text(),
            "text/html": self.static_html(),
            WIDGET_VIEW_MIME: view,
            STATE_MIME: self.embed_state(),
        }
        return data, {}


def predict(
    question: str,
    answer: Any,
    *,
    unit: str = "",
    explain: str = "",
    values: Mapping[str, Any] | None = None,
    choices: Sequence[str] | None = None,
) -> Prediction:
    """A prediction widget: `question`, `answer` computed from the run (a number; or, with
    `choices`, the right one of them), its `unit`, and `explain`, shown after the commit.
    `question`, `explain`, `unit` and each choice are English msgids of locale/zh/predict.po; the
    question's and the explanation's {fields} are filled from `values`."""
    values = dict(values or {})
    choices = list(choices or [])
    if not question.strip():
        raise ValueError("a prediction needs a question")
    if choices:
        if len(choices) < 2 or len(set(choices)) != len(choices):
            raise ValueError(f"choices must be two or more distinct texts, got {choices}")
        if answer not in choices:
            raise ValueError(f"the answer {answer!r} is not one of the choices {choices}")
        answer = choices.index(answer)
    else:
        answer = _number(answer)
    texts = _texts(question, explain, values, choices, unit)  # a field without a value fails
    data = {
        "question": texts["en"]["question"],
        "answer": answer,
        "unit": unit,
        "choices": choices,
        "texts": texts,
    }
    return Prediction(data)
