"""Tests of helpers.viewers: the browser-side step viewers' model ids are deterministic and
unique, their display carries the state the book embeds, and their ES modules are the files."""

from __future__ import annotations

import json
import re

import pytest

from helpers.viewers import (
    STATE_MIME,
    WIDGET_VIEW_MIME,
    CallPathViewer,
    RingViewer,
    StepViewer,
    TimelineViewer,
    esm,
    with_modules,
)

STEPS = [{"step": 0, "svg": "<svg/>", "text": "step 0"}, {"step": 1, "svg": "<svg/>", "text": "1"}]


def test_model_ids_are_deterministic_and_unique() -> None:
    first = RingViewer(STEPS, text="step 0")
    assert re.fullmatch(r"[0-9a-f]{32}", first.model_id), first.model_id
    second = RingViewer(STEPS, text="step 0")  # the same data while the first is alive
    assert second.model_id == f"{first.model_id}-2"
    assert first.layout.model_id == f"{first.model_id}-layout"
    other = RingViewer(STEPS, start=1)
    assert other.model_id.split("-")[0] != first.model_id  # the start is part of the data
    first_id = first.model_id
    for viewer in (first, second, other):
        viewer.close()
    assert RingViewer(STEPS).model_id == first_id  # a closed widget frees its id


def test_display_carries_view_state_and_text_twin() -> None:
    viewer = CallPathViewer([{"index": 3, "svg": "", "name": "f"}], text="f\n  at x.py:1")
    data, metadata = viewer._repr_mimebundle_()
    assert data["text/plain"] == "f\n  at x.py:1" and metadata == {}
    assert data[WIDGET_VIEW_MIME]["model_id"] == viewer.model_id
    state = data[STATE_MIME]["state"]
    assert set(state) == {viewer.model_id, f"{viewer.model_id}-layout"}, sorted(state)
    model = state[viewer.model_id]
    assert (model["model_module"], model["model_name"]) == ("anywidget", "AnyModel")
    assert model["state"]["layout"] == f"IPY_MODEL_{viewer.model_id}-layout"
    assert "_esm" not in model["state"]  # data only: the module is added for the book
    full = with_modules(state)[viewer.model_id]["state"]
    assert full["_esm"] == esm("callpath") == viewer._esm
    assert {k: v for k, v in full.items() if k != "_esm"} == model["state"]
    with pytest.raises(ValueError, match="unknown viewer 'x.Y'"):
        with_modules({"m": {"state": {"_anywidget_id": "x.Y"}}})
    assert model["state"]["steps"] == viewer.steps and model["state"]["step"] == 0
    assert json.loads(json.dumps(data)) == data  # plain JSON
    viewer.close()


@pytest.mark.parametrize("name", ["ring", "callpath", "pipeline"])
def test_es_modules_export_a_render(name: str) -> None:
    text = esm(name)
    assert "export default { render }" in text and "function render({ model, el })" in text
    assert "http" not in text.replace("https://", ""), "the module loads nothing"
    assert 'model.on("change:step"' in text and "model.save_changes()" in text


def test_timeline_viewer_carries_its_picture_once() -> None:
    steps = [{"slot": t, "x": 60 + 14 * t, "active": [t], "text": f"slot {t + 1}"} for t in (0, 1)]
    viewer = TimelineViewer(steps, picture="<svg/>", text="slot 1")
    data, _ = viewer._repr_mimebundle_()
    model = data[STATE_MIME]["state"][viewer.model_id]["state"]
    assert model["picture"] == "<svg/>" and model["steps"] == steps, model
    assert model["_anywidget_id"] == "helpers.viewers.TimelineViewer"
    full = with_modules(data[STATE_MIME]["state"])[viewer.model_id]["state"]
    assert full["_esm"] == esm("pipeline")
    # the picture is drawn once: the module moves the band and marks boxes, it redraws nothing
    text = esm("pipeline")
    assert text.count("innerHTML") == 1 and 'band.setAttribute("x"' in text
    viewer.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        StepViewer([])
    with pytest.raises(ValueError, match=r"start must be in \[0, 1\], got 2"):
        RingViewer(STEPS, start=2)
