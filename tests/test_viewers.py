"""Tests of helpers.viewers: the browser-side step viewers' model ids are deterministic and
unique, their display carries the state the book embeds, and their ES modules are the files;
every viewer of the registry names its module and CSS prefix once and draws each DOM hook it
declares (its module or the SVG its Python builder returns; and, with Chromium, the view the
module renders); notebook 17's two viewers (ring attention's schedule, an expert-parallel
step's exchanges) carry the data they are built from and draw what their text says."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
import viewer_checks as checks

from helpers import allreduce
from helpers import context_parallel as cp
from helpers import expert_parallel as ep
from helpers import pipeline_parallel as pp
from helpers.tracing import Recording, Step, step_viewer
from helpers.viewers import (
    STATE_MIME,
    VIEWER_CLASSES,
    VIEWERS,
    WIDGET_VIEW_MIME,
    AllToAllViewer,
    CallPathViewer,
    RingAttentionViewer,
    RingViewer,
    StepViewer,
    TimelineViewer,
    common_hooks,
    esm,
    esm_path,
    with_modules,
)

NAMES = [cls.name for cls in VIEWER_CLASSES]

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


@pytest.mark.parametrize("name", NAMES)
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
    assert full["_esm"] == esm(TimelineViewer.name)
    # the picture is drawn once: the module moves the band and marks boxes, it redraws nothing
    # (its own file: slider.js, prepended, holds the picture-and-text viewers' redraw)
    text = esm_path(TimelineViewer.name).read_text()
    assert text.count("innerHTML") == 1 and 'band.setAttribute("x"' in text
    assert "renderPictureAndText(" not in text, "the timeline must not redraw its picture per step"
    viewer.close()


def test_one_registry() -> None:
    """`VIEWERS` and `__all__` are read off `VIEWER_CLASSES`; each class's name is its module's
    file and its hooks start with the common ones, named after it; a class that leaves out its
    name or its picture is refused when it is declared."""
    import helpers.viewers

    assert list(VIEWERS.values()) == list(VIEWER_CLASSES)
    assert all(VIEWERS[f"helpers.viewers.{cls.__name__}"] is cls for cls in VIEWER_CLASSES)
    assert {cls.__name__ for cls in VIEWER_CLASSES} <= set(helpers.viewers.__all__)
    assert len(set(NAMES)) == len(NAMES) and all(esm_path(n).is_file() for n in NAMES)
    # the other modules: what the viewers share, and the prediction widget's (tests/test_predict.py)
    others = ["slider", "predict"]
    assert sorted(p.stem for p in esm_path("x").parent.glob("*.js")) == sorted([*NAMES, *others])
    for cls in VIEWER_CLASSES:
        assert cls._esm == esm(cls.name), cls
        assert list(cls.hooks)[:4] == list(common_hooks(cls.name)) and "picture" in cls.hooks
    with pytest.raises(TypeError, match="declares its `name`"):
        type("Nameless", (StepViewer,), {})
    with pytest.raises(TypeError, match="declares its picture"):
        type("NoPicture", (StepViewer,), {"name": "x", "hooks": {}})


def _recording() -> Recording:
    """A small hand-built call path (real torch module names, no compile run)."""
    chain = [
        "torch._dynamo.eval_frame._TorchDynamoContext.__call__",
        "torch._dynamo.convert_frame._compile",
        "torch._dynamo.output_graph.OutputGraph.call_user_compiler",
        "torch._inductor.compile_fx.compile_fx",
    ]
    steps = []
    for i, name in enumerate(chain):
        module, _, qualname = name.rpartition(".")
        code = compile("pass", name, "exec")
        relpath = module.replace(".", "/") + ".py"
        steps.append(Step(i, name, module, qualname, relpath, 1, i, i - 1 if i else None, code))
    return Recording(steps=steps, packages=("torch._dynamo", "torch._inductor"))


@pytest.fixture(scope="module")
def samples():
    """One viewer of each kind, built by its lesson's entry point from small data."""
    orders = {r: pp.scratch_order("1f1b", 2, 3, r) for r in range(2)}
    built = [
        allreduce.ring_step_viewer(allreduce.simulate_ring([[10**r] * 6 for r in range(3)])),
        step_viewer(_recording()),
        pp.timeline_step_viewer(pp.simulate(orders), "1F1B"),
        cp.ring_attention_step_viewer(2, "zigzag", causal=True),
        ep.exchange_step_viewer(_recorded_run()),
    ]
    by_name = {type(v).name: v for v in built}
    assert sorted(by_name) == sorted(NAMES), "a viewer of the registry has no sample here"
    yield by_name
    for viewer in built:
        viewer.close()


def _pictures(viewer: StepViewer) -> list[str]:
    """Every SVG text a viewer shows: each step's, and its one `picture` if it has one."""
    return [s["svg"] for s in viewer.steps if "svg" in s] + [getattr(viewer, "picture", "")]


def _compounds(selector: str) -> list[tuple[str, list[str], list[tuple[str, str | None]]]]:
    """A selector's compound parts (descendant combinators only): (tag, classes, attributes)."""
    parts = []
    for compound in selector.split():
        m = re.fullmatch(r"([a-z]*)((?:\.[\w-]+)*)((?:\[[^\]]+\])*)", compound)
        assert m, f"hook {selector!r}: expected tag.class[attr] parts, found {compound!r}"
        attrs = [
            (a, v.strip('"') if v else None)
            for a, v in re.findall(r"\[([\w-]+)(?:=([^\]]+))?\]", m.group(3))
        ]
        parts.append((m.group(1), m.group(2).split(".")[1:], attrs))
    return parts


def _drawn_by_svg(part, svgs: list[str]) -> bool:
    tag, classes, attrs = part
    for svg in filter(None, svgs):
        for el in ET.fromstring(svg).iter():
            if tag and el.tag.rpartition("}")[2] != tag:
                continue
            if set(classes) <= set(el.get("class", "").split()) and all(
                el.get(a) is not None and (v is None or el.get(a) == v) for a, v in attrs
            ):
                return True
    return False


def _drawn_by_module(part, module: str) -> bool:
    tag, classes, attrs = part
    camel = lambda a: re.sub(r"-(\w)", lambda m: m.group(1).upper(), a[5:])  # noqa: E731
    return (
        (not tag or f'createElement("{tag}")' in module)
        and all(re.search(rf'className = ["`]{re.escape(c)}["`]', module) for c in classes)
        and all(
            f'.{a} = "{v}"' in module if not a.startswith("data-") else
            f"dataset.{camel(a)} = " in module
            for a, v in attrs
        )
    )  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_hooks_are_drawn(samples, name: str) -> None:
    """The viewer's ES module names its elements with its prefix (its `name`), and each part of
    each hook it declares is drawn: by the module (the class names, tags and attributes it
    sets) or by the SVG the viewer's Python builder returned."""
    viewer = samples[name]
    own = esm_path(name).read_text()
    assert f'prefix: "{name}"' in own, f"{name}.js: expected to pass its prefix {name!r}"
    module = esm(name).replace("${prefix}", name)  # slider.js's names, for this viewer
    named = re.findall(r'className = ["`]([^"`]+)["`]', module)
    assert named and all(c.startswith(f"{name}-") for c in named), (name, named)
    svgs = _pictures(viewer)
    for role, selector in type(viewer).hooks.items():
        for part in _compounds(selector):
            assert _drawn_by_svg(part, svgs) or _drawn_by_module(part, module), (
                f"{type(viewer).__name__}.hooks[{role!r}] = {selector!r}: expected {part} to be "
                f"drawn by {name}.js or by the viewer's SVG, found neither"
            )
    if name != "timeline":  # every step carries its picture, marked with the viewer's name
        root = _compounds(type(viewer).hooks["picture"])[0]
        assert all(_drawn_by_svg(root, [s["svg"]]) for s in viewer.steps), name


# a viewer's module rendered in a page with no widget manager: a stand-in model holding `state`
# (`set` tells the module's listeners, as a widget model does), the view in the page's body; the
# module's text is imported from a blob: URL
_MOUNT = """async ({code, state}) => {
  const url = URL.createObjectURL(new Blob([code], {type: 'text/javascript'}));
  const { default: viewer } = await import(url);
  const listeners = {};
  window.viewerModel = {
    get: (key) => state[key],
    set: (key, value) => {
      state[key] = value;
      (listeners['change:' + key] || []).forEach((f) => f());
    },
    save_changes: () => {},
    on: (event, f) => { (listeners[event] = listeners[event] || []).push(f); },
    off: () => {},
  };
  document.body.replaceChildren();
  const el = document.createElement('div');
  document.body.append(el);
  viewer.render({ model: window.viewerModel, el });
}"""

# the roles of `hooks` that match an element of the view at some step, moved through them all
_FOUND = """(hooks) => {
  const model = window.viewerModel, found = new Set();
  for (let i = 0; i < model.get('steps').length; i++) {
    model.set('step', i);
    for (const [role, selector] of Object.entries(hooks))
      if (document.querySelector(selector)) found.add(role);
  }
  return Array.from(found);
}"""


def _mount(page, viewer: StepViewer) -> None:
    state = {k: getattr(viewer, k) for k in ("steps", "step", "label")}
    state["picture"] = getattr(viewer, "picture", "")
    page.evaluate(_MOUNT, {"code": esm(type(viewer).name), "state": state})


@pytest.fixture(scope="module")
def page(browser):
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content("<!doctype html><body></body>")
        yield page
    finally:
        context.close()


def test_hooks_match_the_rendered_view(samples, page) -> None:
    """In Chromium, each viewer's module renders its sample's steps, and every hook its class
    declares matches an element of the view at some step."""
    for name, viewer in samples.items():
        _mount(page, viewer)
        hooks = type(viewer).hooks
        missing = sorted(set(hooks) - set(page.evaluate(_FOUND, hooks)))
        assert not missing, f"{name}: no element of the rendered view matches {missing}"


@pytest.mark.parametrize(
    "index", range(len(checks.stored_viewers())),
    ids=[f"{stem}-{cls.name}" for stem, cls, _ in checks.stored_viewers()],
)  # fmt: skip
def test_browser_checks_pass_on_the_stored_viewers(page, index: int) -> None:
    """The book's and JupyterLab's browser checks (tests/viewer_checks.py), without either: the
    viewer a stored notebook displays, rendered by its module in Chromium from the state it
    carries, moves one step from its start under the keyboard and shows that step's data."""
    _, viewer, state = checks.stored_viewers()[index]
    page.evaluate(_MOUNT, {"code": esm(viewer.name), "state": state})
    before, after = checks.step_viewer(page, viewer.name, timeout_s=10)
    checks.check_move(viewer.name, before, after, state["steps"], state["step"])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        RingViewer([])
    with pytest.raises(TypeError, match="the viewers' base"):
        StepViewer(STEPS)
    with pytest.raises(ValueError, match=r"start must be in \[0, 1\], got 2"):
        RingViewer(STEPS, start=2)


@pytest.mark.parametrize("layout", cp.LAYOUTS)
@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_attention_plan_is_the_ring(world_size: int, layout: str) -> None:
    """Every rank meets every block once; under a causal mask what it computes is work_formula's
    count; what arrives at a rank is what its left neighbour held, and holds it next step."""
    n, seq = world_size, 16
    for causal in (False, True):
        plan = cp.ring_attention_plan(n, layout, causal, seq)
        for r in range(n):
            assert sorted(step[r]["owner"] for step in plan) == list(range(n)), plan
        for s, step in enumerate(plan[:-1]):
            for e in step:
                left = step[(e["rank"] - 1) % n]["owner"]
                assert e["arrives"] == left == plan[s + 1][e["rank"]]["owner"], (s, e)
                assert (e["send_to"], e["recv_from"]) == ((e["rank"] + 1) % n, (e["rank"] - 1) % n)
        assert all(e["send_to"] is None for e in plan[-1]), plan[-1]
        chunk = dict(cp.chunks_of(seq, n, 0, layout))[0]  # every chunk has this length
        pairs = [sum(len(step[r]["computed"]) for step in plan) for r in range(n)]
        skipped = [sum(len(step[r]["skipped"]) for step in plan) for r in range(n)]
        if causal:
            assert [p * chunk * chunk for p in pairs] == cp.work_formula(n, layout, seq), pairs
        else:
            assert skipped == [0] * n, skipped
        assert {p + q for p, q in zip(pairs, skipped, strict=True)} == {
            n * len(cp.chunks_of(seq, n, 0, layout)) ** 2
        }


def test_ring_attention_viewer_draws_its_schedule() -> None:
    viewer = cp.ring_attention_step_viewer(4, "zigzag", causal=True)
    assert isinstance(viewer, RingAttentionViewer) and len(viewer.steps) == 4
    plan = cp.ring_attention_plan(4, "zigzag", True)
    assert [step["plan"] for step in viewer.steps] == plan
    for s, step in enumerate(viewer.steps):
        svg, text = step["svg"], step["text"]
        assert f'class="ringattn-svg" data-step="{s}"' in svg and text.startswith(f"step {s} of")
        owners = re.findall(r'<g class="rank" data-rank="(\d+)" data-owner="(\d+)"', svg)
        assert owners == [(str(e["rank"]), str(e["owner"])) for e in plan[s]], owners
        listed = re.findall(r"^rank (\d+) holds the K/V block of rank (\d+)", text, re.M)
        assert listed == owners, (listed, owners)
        shifts = re.findall(r'<g class="shift" data-from="(\d+)" data-to="(\d+)"', svg)
        assert len(shifts) == (4 if s < 3 else 0), shifts
        now = len(re.findall(r'data-state="now"', svg))
        assert now == sum(len(e["computed"]) for e in plan[s]), now  # zig-zag: 1 cell a pair
    assert viewer._repr_mimebundle_()[0]["text/plain"] == viewer.steps[0]["text"]
    again = cp.ring_attention_step_viewer(4, "zigzag", causal=True)
    assert again.model_id == f"{viewer.model_id}-2"  # the same data: the same id, made unique
    viewer.close()
    again.close()


def _recorded_run() -> list[dict]:
    """A 2-rank run shaped as expert_parallel_step returns it (E = 4, 2 experts a rank)."""
    kept = [[3, 1, 0, 2], [1, 2, 2, 1]]  # kept rows per expert, rank by rank
    send = [[sum(k[0:2]), sum(k[2:4])] for k in kept]
    recv_counts = [[kept[s][2 * p : 2 * p + 2] for s in range(2)] for p in range(2)]
    recv = [[sum(c) for c in recv_counts[p]] for p in range(2)]
    row = ep.HIDDEN * 4

    def record(what, phase, sent, got, r, unit=row):
        others = lambda rows: sum(n for p, n in enumerate(rows) if p != r) * unit  # noqa: E731
        return {"what": what, "phase": phase, "send_rows": sent, "recv_rows": got,
                "bytes_sent": others(sent), "bytes_received": others(got)}  # fmt: skip

    return [
        {
            "kept_per_expert": kept[r],
            "recv_counts": recv_counts[r],
            "send_splits": send[r],
            "recv_splits": recv[r],
            "exchanges": [
                record("counts", "forward", [2, 2], [2, 2], r, 8),
                record("dispatch", "forward", send[r], recv[r], r),
                record("combine", "forward", recv[r], send[r], r),
                record("combine (backward)", "backward", send[r], recv[r], r),
                record("dispatch (backward)", "backward", recv[r], send[r], r),
            ],
        }
        for r in range(2)
    ]


def test_exchange_viewer_replays_the_log() -> None:
    per_rank = _recorded_run()
    viewer = ep.exchange_step_viewer(per_rank)
    assert isinstance(viewer, AllToAllViewer)
    order = [s["what"] for s in viewer.steps]
    assert order == ["counts", "dispatch", "experts", "combine", "combine (backward)",
                     "dispatch (backward)"], order  # fmt: skip
    by = {s["what"]: s for s in viewer.steps}
    assert by["dispatch"]["rows"] == [r["send_splits"] for r in per_rank]
    assert by["experts"]["experts"] == [4, 3, 2, 3] and by["experts"]["sources"][0] == [3, 1]
    assert by["counts"]["values"] == [r["kept_per_expert"] for r in per_rank]
    for i, step in enumerate(viewer.steps):
        svg, text = step["svg"], step["text"]
        assert f'data-step="{i}" data-what="{step["what"]}"' in svg
        assert text.startswith(f"step {i + 1} of 6: {step['what']}")
        flows = re.findall(
            r'<g class="flow" data-from="(\d)" data-to="(\d)" data-rows="(\d+)"', svg
        )
        if step["what"] == "experts":
            assert not flows and len(re.findall(r'<g class="expert"', svg)) == 4, svg
            continue
        want = [(str(r), str(p), str(n)) for r, rows in enumerate(step["rows"])
                for p, n in enumerate(rows) if n]  # fmt: skip
        assert flows == want, (step["what"], flows, want)
        for r, rows in enumerate(step["rows"]):
            assert f"rank {r} sends {rows} " in text, text
    assert "(backward) (backward)" not in by["dispatch (backward)"]["text"]
    viewer.close()
    bad = _recorded_run()
    bad[1]["exchanges"].pop()
    with pytest.raises(ValueError, match="logged different exchanges"):
        ep.exchange_steps(bad)


def _ringattn_shown(step: dict, position: int) -> dict:
    """What viewer_checks.STATES["ringattn"] reads in the browser, read from the SVG text."""
    svg = step["svg"]
    rank = r'<g class="rank" data-rank="(\d+)" data-owner="(\d+)"'
    pair = r'<rect class="pair" data-q="(\d+)" data-k="(\d+)" data-state="([^"]+)"'
    return {
        "readout": f"s = {position}",
        "text": step["text"],
        "svg_step": re.search(r'class="ringattn-svg" data-step="(\d+)"', svg).group(1),
        "holds": [f"rank {r} holds {o}" for r, o in re.findall(rank, svg)],
        "shifts": [
            f"{a} -> {b}"
            for a, b in re.findall(r'<g class="shift" data-from="(\d+)" data-to="(\d+)"', svg)
        ],
        "pairs": [f"{s} q{q} k{k}" for q, k, s in re.findall(pair, svg)],
    }


@pytest.mark.parametrize("layout", cp.LAYOUTS)
def test_the_ring_attention_check_reads_the_grid(layout: str) -> None:
    """check_ringattn_step passes every step as drawn and fails a step drawn with the next
    step's grid (the computed cells then differ from the pairs the text lists)."""
    viewer = cp.ring_attention_step_viewer(4, layout, causal=True)
    steps = viewer.steps
    for s, step in enumerate(steps):
        checks.check_ringattn_step(_ringattn_shown(step, s), step, s)
    for s in range(len(steps) - 1):
        shown = _ringattn_shown(steps[s], s)
        shown["pairs"] = _ringattn_shown(steps[s + 1], s + 1)["pairs"]
        with pytest.raises(AssertionError, match="expected the grid to mark"):
            checks.check_ringattn_step(shown, steps[s], s)
    viewer.close()
