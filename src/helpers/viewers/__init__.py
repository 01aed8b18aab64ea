"""Step viewers whose view runs in the browser, so a static page moves too: anywidget widgets
fed with recorded data.

Used by: the viewer entry points of the topic harnesses and of `helpers.tracing`, which the
notebooks call (no notebook imports the viewers; notebooks import only the prediction widget,
`helpers.viewers.predict`, which is no step viewer): `helpers.allreduce.harness.ring_step_viewer`,
`helpers.tracing.step_viewer`, `helpers.pipeline_parallel.harness.timeline_step_viewer`,
`helpers.context_parallel.harness.ring_attention_step_viewer` and
`helpers.expert_parallel.harness.exchange_step_viewer`. A viewer only
replays data computed once in Python (every step's picture and text, as plain JSON in the
widget's `steps` trait; the timeline viewer's one picture in `picture`); the slider, the picture
and the text are drawn by one ES module per viewer, so the same widget moves in JupyterLab (the
kernel only hears the `step` it is at) and in the static book, where the Jupyter widgets HTML
manager renders it from its embedded state, with no kernel.

One registry: `VIEWER_CLASSES`, from which `VIEWERS` and `__all__` are read. Each viewer class
declares once its `name`, which is its ES module's file (`<name>.js` next to this file) and the
prefix of the class names that module gives its elements (`.<name>-step-view`, ...), and its DOM
hooks (`hooks`: role -> CSS selector; the roles every viewer has, `common_hooks`, are filled in
from the name), which the browser tests read (tests/viewer_checks.py builds its selectors from
them; tests/test_viewers.py checks that each hook is drawn, by the module or by the SVG the
viewer's Python builder returns).

Deterministic outputs: a widget's model id (and its layout's) is a hash of its class and data
instead of a random uuid (a second live widget with the same data gets `-2`, `-3`, ...), and
its display carries, next to the widget view, the state the book embeds (`STATE_MIME`: the
widget state of it and its layout, as `ipywidgets.embed.dependency_state` gives it, without the
ES module's text, which `with_modules` adds back from the file when the book is built), so the
stored notebook is the same on every run, holds data only (nbval compares it) and `tools/book.py`
needs no kernel. The `text/plain` of the display is the viewer's first step as text: what a
text frontend shows. Its `text/html` (`static_html`) is the first step drawn without the widget,
its picture as an `<img>` (`svg_img`) above that text: what JupyterLab shows when it does not
draw the widget, as in an untrusted notebook (a fresh clone, nothing run), where the widget view
is an unsafe mime type, the step's inline SVG would be sanitized away and an `<img>` of a data
URI is kept. A frontend that draws the widget ranks its view first.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import ipywidgets
import traitlets
from ipywidgets.embed import dependency_state

HERE = Path(__file__).resolve().parent
# the widget state a viewer's display carries for the book (tools/book.py moves it into the
# notebook's metadata, where MyST-NB looks for it): our own name, so that no frontend acts on it
STATE_MIME = "application/vnd.pytorch-source-reading.widget-state+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def esm_path(name: str) -> Path:
    """The ES module file of the viewer called `name` (a `StepViewer.name`)."""
    return HERE / f"{name}.js"


def esm(name: str) -> str:
    """A viewer's ES module as the browser gets it: what the viewers share (`slider.js`: the bar
    `stepBar`, the plumbing `driveSlider`, the picture-and-text view `renderPictureAndText`)
    followed by the viewer's own file."""
    return (HERE / "slider.js").read_text() + "\n" + esm_path(name).read_text()


def _unique_id(base: str) -> str:
    """`base`, or `base-2`, `base-3`, ... when a live widget in this process already has it."""
    live = ipywidgets.widgets.widget._instances
    model_id, n = base, 1
    while model_id in live or f"{model_id}-layout" in live:
        n += 1
        model_id = f"{base}-{n}"
    return model_id


_TITLE = re.compile(r"<title>([^<]*)</title>")


def svg_img(svg: str) -> str:
    """`svg` as an HTML `<img>` of a base64 `data:` URI, its first `<title>` as the alt text;
    "" for an empty `svg`. The same text as `helpers.pictures.svg_img` (tests/
    test_stored_pictures.py holds them equal), written out here because this package imports
    no other helper: an untrusted JupyterLab drops inline `<svg>` but keeps this `<img>`."""
    if not svg.strip():
        return ""
    found = _TITLE.search(svg)
    alt = html.unescape(found.group(1)) if found else "picture"
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img src="{uri}" alt="{html.escape(alt, quote=True)}"/>'


def common_hooks(name: str) -> dict[str, str]:
    """The DOM hooks every viewer called `name` has (its ES module draws them, slider.js's
    `stepBar` the slider and its readout): the view, the slider's range input, the readout, and
    the text."""
    return {
        "view": f".{name}-step-view",
        "slider": f".{name}-step-slider input[type=range]",
        "readout": f".{name}-step-readout",
        "text": f"pre.{name}-step-text",
    }


class StepViewer(anywidget.AnyWidget):
    """A slider over recorded steps; `steps[i]` is step i's data (what the ES module draws).

    A viewer class declares `name` (its ES module `<name>.js`, the prefix of its CSS class
    names) and `hooks`, its own DOM hooks (role -> CSS selector; at least its `picture`);
    declaring the class fills in `hooks` with `common_hooks(name)`, `_esm` (the module's text)
    and `anywidget_id` (the `_anywidget_id` of its widget state).
    """

    name: ClassVar[str] = ""
    hooks: ClassVar[dict[str, str]] = {}
    anywidget_id: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name and "name" not in cls.__dict__:
            return  # a viewer's subclass (traitlets' add_traits makes one per widget): as it is
        if not cls.name:
            raise TypeError(f"{cls.__name__}: a step viewer declares its `name`")
        own = cls.__dict__.get("hooks", {})
        if "picture" not in own or set(own) & set(common_hooks(cls.name)):
            raise TypeError(f"{cls.__name__}: `hooks` declares its picture, not the common hooks")
        cls.hooks = {**common_hooks(cls.name), **own}
        cls._esm = esm(cls.name)
        cls.anywidget_id = f"{cls.__module__}.{cls.__name__}"  # as anywidget names it

    steps = traitlets.List(traitlets.Dict()).tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)  # the slider's position in `steps`
    label = traitlets.Unicode("step").tag(sync=True)

    def __init__(self, steps: list[dict[str, Any]], start: int = 0, text: str = "", **kwargs):
        if not type(self).name:
            raise TypeError("StepViewer is the viewers' base: make one of VIEWER_CLASSES")
        if not steps:
            raise ValueError(f"{type(self).__name__} needs at least one step")
        if not 0 <= start < len(steps):
            raise ValueError(f"start must be in [0, {len(steps) - 1}], got {start}")
        digest = hashlib.sha256(
            json.dumps([type(self).__name__, steps, start], sort_keys=True).encode()
        ).hexdigest()[:32]
        model_id = _unique_id(digest)
        layout = ipywidgets.Layout(model_id=f"{model_id}-layout")
        self._text = text
        super().__init__(steps=steps, step=start, layout=layout, model_id=model_id, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self.steps)} steps>"

    def close(self) -> None:
        """Close the widget and its layout (which holds the derived id `<model id>-layout`)."""
        layout = self.layout
        super().close()
        layout.close()

    def embed_state(self) -> dict[str, Any]:
        """The widget state of this viewer and its layout, as plain JSON, without the ES
        module's text (`with_modules` adds it): what its display carries for the book."""
        state = json.loads(json.dumps(dependency_state(self, drop_defaults=False)))
        state[self.model_id]["state"].pop("_esm")
        return {"version_major": 2, "version_minor": 0, "state": state}

    def picture_at(self, i: int) -> str:
        """The SVG text step `i` shows (`steps[i]["svg"]`; "" when it has none)."""
        return str(self.steps[i].get("svg", ""))

    def static_html(self) -> str:
        """The viewer at its start step as static HTML: the step's picture as an `<img>`
        (`svg_img`) above the text twin in a `<pre>`. The `text/html` of its display."""
        body = f"<pre>{html.escape(self._text, quote=False)}</pre>" if self._text else ""
        return (
            f'<div class="{self.name}-step-static">{svg_img(self.picture_at(self.step))}'
            f"{body}</div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        view = {"version_major": 2, "version_minor": 0, "model_id": self.model_id}
        data = {
            "text/plain": self._text,
            "text/html": self.static_html(),
            WIDGET_VIEW_MIME: view,
            STATE_MIME: self.embed_state(),
        }
        return data, {}


class RingViewer(StepViewer):
    """The ring all-reduce, step by step (`helpers.allreduce.ring_step_viewer`).

    `steps[i]`: `{"step": i, "svg": ring_svg(...), "text": ring_step_text(...)}`.
    """

    name = "ring"
    hooks = {
        "picture": "svg.ring-svg[data-step]",  # helpers.pictures.ring_svg
        "transfer": "g.transfer[data-from][data-to][data-chunk]",
    }


class CallPathViewer(StepViewer):
    """A recorded compile call path, step by step (`helpers.tracing.step_viewer`).

    `steps[i]`: `{"index", "name", "url", "head", "body", "svg"}`: the step's `head` is its
    text, its `body` the start of its source.
    """

    name = "callpath"
    hooks = {
        "picture": "svg.stages-svg[data-active-stage][data-step]",  # pictures.compile_stages_svg
        "stage": "g.stage[data-stage][data-active]",
        "name": "b.callpath-step-name",
        "source": "pre.callpath-step-source",
    }


class TimelineViewer(StepViewer):
    """A pipeline schedule's timeline, time slot by time slot
    (`helpers.pipeline_parallel.timeline_step_viewer`).

    `picture`: the timeline (`timeline_svg(..., slot=0)`), drawn once; `steps[i]`:
    `{"slot": i, "x", "active", "text"}`, the band's x, the indices (in drawing order) of the
    `action` boxes running in the slot and what each rank runs. The steps' text names the
    schedule and every action, so they determine the picture (and the model id, a hash of them).
    """

    name = "timeline"
    hooks = {
        "picture": "svg.timeline-svg[data-slot]",  # helpers.pipeline_parallel.timeline_svg
        "band": "rect.slot-band",
        "action": "g.action[data-rank][data-kind][data-mb][data-active]",
    }
    picture = traitlets.Unicode("").tag(sync=True)

    def __init__(self, steps: list[dict[str, Any]], start: int = 0, text: str = "", **kwargs):
        if start != 0:  # the static copy (`static_html`) shows `picture` as Python drew it
            raise ValueError(
                f"a timeline viewer starts at slot 0, where `picture` is drawn, not at {start}"
            )
        super().__init__(steps, start=start, text=text, **kwargs)

    def picture_at(self, i: int) -> str:
        """The one picture, drawn at slot 0 (the module moves its band; Python draws no other)."""
        return self.picture if i == 0 else ""


class RingAttentionViewer(StepViewer):
    """Ring attention's schedule, step by step
    (`helpers.context_parallel.ring_attention_step_viewer`).

    `steps[s]`: `{"step": s, "plan": ring_attention_plan(...)[s], "svg", "text"}`: one `rank`
    box per rank, one `shift` arrow per send and the grid of (queries x keys) `pair` cells.
    """

    name = "ringattn"
    hooks = {
        "picture": "svg.ringattn-svg[data-step]",  # helpers.context_parallel.ring_attention_svg
        "rank": "g.rank[data-rank][data-owner]",
        "shift": "g.shift[data-from][data-to]",
        "pair": "rect.pair[data-q][data-k][data-state]",
    }


class AllToAllViewer(StepViewer):
    """An expert-parallel step's recorded exchanges, one at a time
    (`helpers.expert_parallel.exchange_step_viewer`).

    `steps[i]`: `{"index": i, "what", "phase", "rows", "bytes", "svg", "text"}` (the counts add
    "values", the experts' step "experts" and "sources" instead of "bytes"): one `flow` per
    non-empty flow between ranks, or, for the experts' step, one `expert` bar per expert.
    """

    name = "alltoall"
    hooks = {
        "picture": "svg.alltoall-svg[data-step][data-what]",  # expert_parallel.exchange_svg
        "flow": "g.flow[data-from][data-to][data-rows]",
        "expert": "g.expert[data-expert][data-rows]",
    }


#: The viewers, in the order of the course; `VIEWERS` and `__all__` are read off it.
VIEWER_CLASSES: tuple[type[StepViewer], ...] = (
    RingViewer,
    CallPathViewer,
    TimelineViewer,
    RingAttentionViewer,
    AllToAllViewer,
)
#: anywidget's id of each viewer (`_anywidget_id` in its widget state) -> its class
VIEWERS: dict[str, type[StepViewer]] = {cls.anywidget_id: cls for cls in VIEWER_CLASSES}

__all__ = [
    "STATE_MIME",
    "StepViewer",
    "VIEWER_CLASSES",
    "VIEWERS",
    "WIDGET_VIEW_MIME",
    "common_hooks",
    "esm",
    "esm_path",
    "with_modules",
    *(cls.__name__ for cls in VIEWER_CLASSES),
]


def with_modules(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of a widget state (`{model id: model}`, as `embed_state()["state"]`) in which
    each viewer's model has its ES module's text (`_esm`, from its file) again; the HTML manager
    needs it to draw the viewer (and each prediction of `helpers.viewers.predict`, which notebooks
    display themselves, its module). Raises ValueError for a viewer this module does not know."""
    out = json.loads(json.dumps(state))
    for model_id, model in out.items():
        kind = model["state"].get("_prediction")  # helpers.viewers.predict: not a step viewer
        if kind is not None:  # its module and anywidget's id (the stored state names it so)
            model["state"].update(_esm=esm_path("predict").read_text(), _anywidget_id=kind)
            continue
        anywidget_id = model["state"].get("_anywidget_id")
        if anywidget_id is None:
            continue  # a layout
        if anywidget_id not in VIEWERS:
            raise ValueError(f"widget {model_id}: unknown viewer {anywidget_id!r}")
        model["state"]["_esm"] = str(VIEWERS[anywidget_id]._esm)
    return out
