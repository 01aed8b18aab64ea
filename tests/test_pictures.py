"""Tests of helpers.pictures: the ring and compile-pipeline pictures, parsed and rendered.

Each picture is checked twice: as XML (pure: what the function returns) and rendered headlessly
in Chromium (playwright, the system browser) where the DOM is queried for what a reader sees:
the number of arrows, their chunk labels, the colours by sum count, ranks on a circle, the
highlighted stage. The pipeline tests use a small hand-built recording (a chain of real torch
module names), so no compile runs here; notebook 01 asserts the stages of a real recording.
"""

from __future__ import annotations

import ast
import math
import xml.etree.ElementTree as ET

import pytest

from helpers.allreduce import ring_schedule, ring_step_html, simulate_ring
from helpers.pictures import (
    COMPILE_STAGES,
    COMPLETE_COLOUR,
    compile_stage,
    compile_stages_svg,
    ring_svg,
    sum_colour,
)
from helpers.tracing import Recording, Step

NS = {"s": "http://www.w3.org/2000/svg"}
SIM4 = simulate_ring([[10**r] * 6 for r in range(4)])  # 4 ranks, chunks of 2, 2, 1, 1


def _transfers(svg: str) -> list[dict[str, str]]:
    root = ET.fromstring(svg)
    return [g.attrib for g in root.iter(f"{{{NS['s']}}}g") if g.get("class") == "transfer"]


def _step(i: int, name: str, parent: int | None, depth: int) -> Step:
    module, _, qualname = name.rpartition(".")
    code = compile("pass", name, "exec")
    return Step(i, name, module, qualname, module.replace(".", "/") + ".py", 1, depth, parent, code)


def _recording() -> Recording:
    chain = [
        "torch._dynamo.eval_frame._TorchDynamoContext.__call__",
        "torch._dynamo.convert_frame._compile",
        "torch._dynamo.symbolic_convert.InstructionTranslatorBase.run",
        "torch._dynamo.output_graph.OutputGraph.call_user_compiler",
        "torch._inductor.compile_fx.compile_fx",
        "torch._functorch.aot_autograd.aot_module_simplified",
        "torch._inductor.graph.GraphLowering.run",
        "torch.fx.graph.Graph.python_code",  # FX: the stage of its caller
    ]
    steps = [_step(i, n, i - 1 if i else None, i) for i, n in enumerate(chain)]
    steps.append(_step(8, "torch._dynamo.guards.CheckFunctionManager.__init__", 1, 2))
    steps.append(_step(9, "torch._dynamo.utils.increment_frame", None, 0))  # in no stage
    return Recording(steps=steps, packages=("torch._dynamo",))


# --------------------------------------------------------------------------- pure: parsed XML


def test_ring_svg_arrows_follow_the_schedule() -> None:
    n = SIM4.world_size
    assert _transfers(ring_svg(SIM4.steps, 0)) == []  # the inputs: nothing sent yet
    for step in range(1, len(SIM4.steps)):
        found = [
            (int(t["data-from"]), int(t["data-to"]), int(t["data-chunk"]))
            for t in _transfers(ring_svg(SIM4.steps, step))
        ]
        expected = [(r, (r + 1) % n, ring_schedule(r, n, step - 1)[1]) for r in range(n)]
        assert found == expected, f"step {step}"
    assert ring_svg(SIM4.steps, 3) == ring_svg(SIM4.steps, 3)  # pure
    with pytest.raises(ValueError, match="step must be in"):
        ring_svg(SIM4.steps, len(SIM4.steps))


def test_ring_svg_colours_count_the_ranks_summed() -> None:
    # a chunk sent at reduce-scatter step s sums s ranks; all-gather chunks sum all of them
    for step, sums in ((1, 1), (2, 2), (3, 3), (4, 4), (6, 4)):
        svg = ring_svg(SIM4.steps, step)
        assert {t["data-sums"] for t in _transfers(svg)} == {str(sums)}, f"step {step}"
        assert f'stroke="{sum_colour(sums, 4)}"' in svg
    root = ET.fromstring(ring_svg(SIM4.steps, 3))  # end of the reduce-scatter
    complete = [
        (int(r.get("data-rank")), int(r.get("data-chunk")))
        for r in root.iter(f"{{{NS['s']}}}rect")
        if r.get("class") == "chunk" and r.get("fill") == COMPLETE_COLOUR
    ]
    assert complete == [(0, 1), (1, 2), (2, 3), (3, 0)]  # rank r owns chunk r+1
    assert root.get("data-phase") == "reduce-scatter" and root.get("data-step") == "3"


def test_compile_stage_comes_from_the_call_path() -> None:
    rec = _recording()
    stages = [compile_stage(rec.path_to(i))[0] for i in range(len(rec))]
    assert stages == [
        "Dynamo frame hook",
        "Dynamo frame hook",
        "bytecode translation",
        "graph capture",
        "Inductor",
        "AOTAutograd",
        "Inductor",
        "Inductor",  # torch.fx called by GraphLowering.run
        "guards",
        None,
    ]
    assert compile_stage(rec.path_to(7))[1].name == "torch._inductor.graph.GraphLowering.run"
    assert [s.name for s in COMPILE_STAGES][-1] == "guards"


def test_compile_stages_svg_highlights_one_stage() -> None:
    rec = _recording()
    root = ET.fromstring(compile_stages_svg(rec.path_to(5)))
    boxes = [g for g in root.iter(f"{{{NS['s']}}}g") if "stage" in g.get("class", "").split()]
    assert [g.get("data-stage") for g in boxes] == [s.name for s in COMPILE_STAGES]
    assert [g.get("data-stage") for g in boxes if g.get("data-active") == "true"] == ["AOTAutograd"]
    assert root.get("data-step") == "5" and root.get("data-active-stage") == "AOTAutograd"
    unnumbered = ET.fromstring(compile_stages_svg(rec.path_to(5), numbered=False))
    assert "data-step" not in unnumbered.attrib
    none = ET.fromstring(compile_stages_svg(rec.path_to(9)))
    assert none.get("data-active-stage") == "" and 'data-active="true"' not in compile_stages_svg(
        rec.path_to(9)
    )


# ------------------------------------------------------------------------ rendered in Chromium


@pytest.fixture(scope="module")
def page(browser):
    # the one Chromium of this pytest process (tests/conftest.py): a second sync playwright
    # driver in a process whose session fixture already runs one raises "using Playwright Sync
    # API inside the asyncio loop", which is what a parallel run that puts the book or slides
    # tests on the same worker hit
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def test_ring_rendered(page) -> None:
    page.set_content(ring_step_html(SIM4, 2))  # what the viewer shows at step 2
    arrows = page.locator("svg.ring-svg g.transfer")
    assert arrows.count() == 4
    labels = page.locator("svg.ring-svg g.transfer text.transfer-label").all_text_contents()
    assert labels == ["c3", "c0", "c1", "c2"]  # at step 2 rank r sends chunk r-1
    strokes = page.eval_on_selector_all(
        "g.transfer line.arrow", "els => els.map(e => getComputedStyle(e).stroke)"
    )
    assert strokes == [_rgb(sum_colour(2, 4))] * 4
    fills = page.eval_on_selector_all(
        "rect.chunk", "els => els.map(e => [e.dataset.sums, getComputedStyle(e).fill])"
    )
    assert len(fills) == 16 and all(fill == _rgb(sum_colour(int(k), 4)) for k, fill in fills)
    assert sorted(int(k) for k, _ in fills).count(3) == 4  # each rank: one chunk sums 3 ranks
    centres = page.eval_on_selector_all(
        "g.rank circle",
        "els => els.map(e => {const b = e.getBoundingClientRect();"
        " return [b.x + b.width / 2, b.y + b.height / 2]})",
    )
    cx = sum(x for x, _ in centres) / 4
    cy = sum(y for _, y in centres) / 4
    radii = [math.hypot(x - cx, y - cy) for x, y in centres]
    assert max(radii) - min(radii) < 1 and min(radii) > 50  # ranks on a circle
    assert "reduce-scatter 2 of 3" in page.inner_text("pre.ring-step-text")


def test_pipeline_rendered(page) -> None:
    rec = _recording()
    page.set_content(compile_stages_svg(rec.path_to(7)))  # an FX step called by Inductor's lowering
    active = page.locator('svg.stages-svg g.stage[data-active="true"]')
    assert active.count() == 1
    assert active.get_attribute("data-stage") == "Inductor"
    assert active.locator("text").first.text_content() == "Inductor"
    assert page.locator("svg.stages-svg g.stage").count() == len(COMPILE_STAGES)
    fill = active.locator("rect").evaluate("e => getComputedStyle(e).fill")
    others = page.eval_on_selector_all(
        'g.stage[data-active="false"] rect', "els => els.map(e => getComputedStyle(e).fill)"
    )
    assert len(set(others)) == 1 and fill not in others  # only the active stage stands out
    assert "GraphLowering.run" in page.text_content("text.step-decided")


def test_pictures_imports_nothing_from_helpers() -> None:
    """The pictures take plain data: allreduce and tracing import pictures, never the reverse."""
    import helpers.pictures

    tree = ast.parse(open(helpers.pictures.__file__, encoding="utf-8").read())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported, "helpers.pictures: expected its standard-library imports, found none"
    ours = [m for m in imported if m == "helpers" or m.startswith("helpers.")]
    assert ours == [], f"helpers.pictures: expected no import from helpers, found {ours}"
