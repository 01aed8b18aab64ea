"""The step viewers' browser checks, shared by the JupyterLab test (tests/test_jupyterlab.py)
and the book test (tests/test_book.py), for every viewer of `helpers.viewers.VIEWER_CLASSES`,
by its `name`: what it shows (`STATES`, read through the DOM hooks its class declares), how a
reader moves its slider (`step_viewer`: focus, one ArrowRight), and what must hold before and
after the move (`check_move`). A viewer added to the registry without them fails at import."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from helpers.viewers import STATE_MIME, VIEWER_CLASSES, VIEWERS

VIEW_TIMEOUT_S = 60.0  # for a view to redraw, on a loaded 2-core machine

# each viewer's DOM hooks (role -> CSS selector), as the viewer classes declare them
HOOKS = {cls.name: cls.hooks for cls in VIEWER_CLASSES}

# What each viewer shows, read in the browser through its hooks: a JS function of no argument
# returning the view's readout and text and `svg`, the viewer's picture, plus the fields below;
# in a field, HOOK(role) is the viewer's selector for `role`, as a JS string.
_FIELDS = {
    # the ring viewer (notebook 05)
    "ring": """
    svg_step: svg ? svg.getAttribute('data-step') : null,
    transfers: svg ? Array.from(svg.querySelectorAll(HOOK(transfer)), g =>
      `r${g.dataset.from} -c${g.dataset.chunk}-> r${g.dataset.to}`) : null,""",
    # the call-path viewer (notebook 01)
    "callpath": """
    name: view?.querySelector(HOOK(name))?.innerText ?? null,
    svg_step: svg ? svg.getAttribute('data-step') : null,
    svg_stage: svg ? svg.getAttribute('data-active-stage') : null,
    active_box: (svg && svg.querySelector(HOOK(stage) + '[data-active="true"]'))?.dataset.stage
      ?? null,""",
    # the pipeline timeline viewer (notebook 16)
    "timeline": """
    svg_slot: svg ? svg.getAttribute('data-slot') : null,
    band_x: svg?.querySelector(HOOK(band))?.getAttribute('x') ?? null,
    active: svg ? Array.from(svg.querySelectorAll(HOOK(action)), (g, k) =>
      g.dataset.active === 'true' ? k : null).filter(k => k !== null) : null,
    active_boxes: svg ? Array.from(svg.querySelectorAll(HOOK(action) + '[data-active="true"]'),
      g => `rank ${g.dataset.rank}: ${g.dataset.kind}${g.dataset.mb}`) : null,""",
    # the ring attention viewer (notebook 17, section 3)
    "ringattn": """
    svg_step: svg ? svg.getAttribute('data-step') : null,
    holds: svg ? Array.from(svg.querySelectorAll(HOOK(rank)), g =>
      `rank ${g.dataset.rank} holds ${g.dataset.owner}`) : null,
    shifts: svg ? Array.from(svg.querySelectorAll(HOOK(shift)), g =>
      `${g.dataset.from} -> ${g.dataset.to}`) : null,
    pairs: svg ? Array.from(svg.querySelectorAll(HOOK(pair)), r =>
      `${r.dataset.state} q${r.dataset.q} k${r.dataset.k}`) : null,""",
    # the all-to-all viewer (notebook 17, section 7)
    "alltoall": """
    svg_step: svg ? svg.getAttribute('data-step') : null,
    svg_what: svg ? svg.getAttribute('data-what') : null,
    flows: svg ? Array.from(svg.querySelectorAll(HOOK(flow)), g =>
      `${g.dataset.from} -> ${g.dataset.to}: ${g.dataset.rows}`) : null,
    experts: svg ? Array.from(svg.querySelectorAll(HOOK(expert)), g =>
      `expert ${g.dataset.expert}: ${g.dataset.rows}`) : null,""",
}
if set(_FIELDS) != set(HOOKS):
    raise RuntimeError(
        f"tests/viewer_checks.py: expected what to read of each viewer of helpers.viewers "
        f"{sorted(HOOKS)}, found it for {sorted(_FIELDS)}"
    )


def _state(name: str) -> str:
    hooks = HOOKS[name]
    hook = lambda role: json.dumps(hooks[role])  # noqa: E731
    fields = re.sub(r"HOOK\((\w+)\)", lambda m: hook(m.group(1)), _FIELDS[name])
    return f"""() => {{
  const view = document.querySelector({hook("view")});
  const svg = view && view.querySelector({hook("picture")});
  return {{
    readout: view?.querySelector({hook("readout")})?.innerText ?? null,
    text: view?.querySelector({hook("text")})?.innerText ?? null,{fields}
  }};
}}"""


NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@functools.cache
def stored_viewers() -> tuple[tuple[str, type, dict], ...]:
    """(notebook stem, viewer class, its widget state) for each step viewer that a stored
    notebook of notebooks/ displays (the state its display carries for the book), in order."""
    found = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                carried = output.get("data", {}).get(STATE_MIME, {}).get("state", {})
                for model_id, model in carried.items():
                    kind = model["state"].get("_anywidget_id")
                    if kind is None:
                        continue  # its layout
                    if kind not in VIEWERS:
                        raise ValueError(f"{path.name}: widget {model_id}: unknown viewer {kind}")
                    found.append((path.stem, VIEWERS[kind], model["state"]))
    return tuple(found)


# viewer name -> what it shows (a JS function for `page.evaluate`)
STATES = {name: _state(name) for name in HOOKS}
# viewer name -> the range input a reader moves
SLIDERS = {name: f"{hooks['view']} {hooks['slider']}" for name, hooks in HOOKS.items()}


def text_key(name: str) -> str:
    """The key of a step (in the viewer's `steps`) whose text the view's text hook shows."""
    return "head" if name == "callpath" else "text"


def step_viewer(page, name: str, timeout_s: float = VIEW_TIMEOUT_S):
    """Move the slider of the viewer called `name` one step with the keyboard, as a reader
    would; returns what it shows (`STATES[name]`) before and after. Raises AssertionError when
    the view does not redraw."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    state = STATES[name]
    before = page.evaluate(state)
    page.locator(SLIDERS[name]).focus()
    page.keyboard.press("ArrowRight")
    try:
        page.wait_for_function(
            f"before => ({state})().text !== before",
            arg=before["text"],
            timeout=timeout_s * 1000,
        )
    except PlaywrightTimeout:
        raise AssertionError(
            f"the slider moved (readout {before['readout']!r} -> "
            f"{page.evaluate(state)['readout']!r}) but the viewer's content did not change: "
            f"its view (src/helpers/viewers/{name}.js) did not redraw"
        ) from None
    return before, page.evaluate(state)


def check_ring_steps(before: dict, after: dict) -> None:
    """The ring viewer showed step 0, then step 1: readout, picture and text agree at each."""
    for step, shown in enumerate((before, after)):
        assert shown["readout"] == str(step) and shown["svg_step"] == str(step), (
            f"ring viewer at step {step}: expected the readout and the picture's data-step to "
            f"say {step}, found {shown}"
        )
        assert shown["text"] and shown["text"].startswith(f"step {step} of"), (
            f"ring viewer at step {step}: expected its text to start 'step {step} of', "
            f"found {shown['text']!r}"
        )
        # the picture's arrows are the sends the text lists ("r0 -c0-> r1": rank, chunk, rank)
        sends = re.findall(r"r\d+ -c\d+-> r\d+", shown["text"])
        assert sorted(shown["transfers"] or []) == sorted(sends), (
            f"ring viewer at step {step}: expected the picture's arrows to be the sends {sends}, "
            f"found {shown['transfers']}"
        )
    assert after["transfers"], f"step 1 should send chunks, the picture shows {after}"


def check_callpath_step(shown: dict, expected: dict, position: int, count: int) -> None:
    """The call-path viewer shows `expected` (one of its `steps`), at `position` of `count`:
    readout, name, text, the picture's step and its highlighted stage box."""
    stage = re.search(r'data-active-stage="([^"]*)"', expected["svg"])
    want = {
        "readout": f"{position + 1} of {count}",
        "name": expected["name"],
        "text": expected["head"],
        "svg_step": str(expected["index"]),
        "svg_stage": stage.group(1) if stage else None,
        "active_box": stage.group(1) if stage else None,
    }
    assert shown == want, f"call-path viewer at {position}: expected {want}, found {shown}"


def check_timeline_step(shown: dict, expected: dict, position: int, count: int) -> None:
    """The timeline viewer shows `expected` (one of its `steps`), at `position` of `count`:
    readout, text, the picture's slot, its band's place and the boxes it marks, which are the
    actions the text lists, rank by rank."""
    want = {
        "readout": f"{position + 1} of {count}",
        "text": expected["text"],
        "svg_slot": str(expected["slot"]),
        "band_x": str(expected["x"]),
        "active": expected["active"],
    }
    found = {k: shown[k] for k in want}
    assert found == want, f"timeline viewer at slot {position}: expected {want}, found {found}"
    listed = re.findall(r"^(rank \d+: [FBIW]\d+) ", shown["text"], re.M)
    assert shown["active_boxes"] == listed, (
        f"timeline viewer at slot {position}: expected the marked boxes to be the actions the "
        f"text lists, {listed}, found {shown['active_boxes']}"
    )


def check_ringattn_step(shown: dict, expected: dict, position: int) -> None:
    """The ring attention viewer shows `expected` (one of its `steps`, at `position`): readout,
    text and picture's step; the picture's boxes and arrows are the holders and sends the text
    lists, rank by rank, which are the step's schedule (`plan`); its grid marks as computed and as
    skipped at this step exactly the cells of the (queries x keys) pairs the text lists as
    computed and skipped, which are the schedule's pairs."""
    want = {"readout": f"s = {position}", "text": expected["text"], "svg_step": str(position)}
    found = {k: shown[k] for k in want}
    assert found == want, (
        f"ring attention viewer at step {position}: expected {want}, found {found}"
    )
    holds, shifts, listed = [], [], {"computes": [], "skips": []}
    for block in re.split(r"^(?=rank \d+ holds)", shown["text"], flags=re.M)[1:]:
        rank, owner = re.match(r"rank (\d+) holds the K/V block of rank (\d+)", block).groups()
        holds.append(f"rank {rank} holds {owner}")
        shifts += [f"{rank} -> {to}" for to in re.findall(r"sends it to rank (\d+)", block)]
        does = re.search(r"^  computes (.*); skips (.*)$", block, re.M)
        for key, part in zip(listed, does.groups(), strict=True):  # "q4-7 x k0-3, ..."
            ranges = re.findall(r"q(\d+)-(\d+) x k(\d+)-(\d+)", part)
            listed[key].append([tuple(int(x) for x in r) for r in ranges])
    assert (shown["holds"], shown["shifts"]) == (holds, shifts), (
        f"ring attention viewer at step {position}: expected the picture's boxes {holds} and "
        f"arrows {shifts} (the text's), found {shown['holds']} and {shown['shifts']}"
    )
    plan = expected["plan"]
    scheduled = (
        [f"rank {e['rank']} holds {e['owner']}" for e in plan],
        [[[q0, k0] for q0, _, k0, _ in pairs] for pairs in listed["computes"]],
        [[[q0, k0] for q0, _, k0, _ in pairs] for pairs in listed["skips"]],
    )
    from_plan = (holds, [e["computed"] for e in plan], [e["skipped"] for e in plan])
    assert scheduled == from_plan, (
        f"ring attention viewer at step {position}: expected the text to list the step's "
        f"schedule (holders, computed and skipped pairs) {from_plan}, found {scheduled}"
    )
    cells = [re.fullmatch(r"(\S+) q(\d+) k(\d+)", p).groups() for p in shown["pairs"] or []]
    for key, state in (("computes", "now"), ("skips", "skipped-now")):
        pairs = [r for per_rank in listed[key] for r in per_rank]
        want_cells = sorted(
            (int(q), int(k))
            for _, q, k in cells
            if any(a <= int(q) <= b and c <= int(k) <= d for a, b, c, d in pairs)
        )
        marked = sorted((int(q), int(k)) for s, q, k in cells if s == state)
        assert marked == want_cells and (marked or not pairs), (
            f"ring attention viewer at step {position}: expected the grid to mark as {state!r} "
            f"the cells of the pairs the text {key} {pairs}, i.e. {want_cells}, found {marked}"
        )


def check_alltoall_step(shown: dict, expected: dict, position: int, count: int) -> None:
    """The all-to-all viewer shows `expected` (one of its `steps`), at `position` of `count`:
    readout, text, the picture's step and exchange; its flows (or expert bars) are the rows the
    text lists, rank by rank."""
    want = {
        "readout": f"{position + 1} of {count}",
        "text": expected["text"],
        "svg_step": str(position),
        "svg_what": expected["what"],
    }
    found = {k: shown[k] for k in want}
    assert found == want, f"all-to-all viewer at {position}: expected {want}, found {found}"
    if expected["what"] == "experts":
        listed = [
            f"expert {e}: {n}" for e, n in re.findall(r"expert (\d+): (\d+) rows", shown["text"])
        ]
        assert shown["experts"] == listed and not shown["flows"], (
            f"all-to-all viewer at {position}: expected the expert bars {listed} and no flows, "
            f"found {shown['experts']} and {shown['flows']}"
        )
        return
    listed = [
        f"{r} -> {p}: {n}"
        for r, rows in re.findall(r"^rank (\d+) sends \[([\d, ]+)\]", shown["text"], re.M)
        for p, n in enumerate(int(x) for x in rows.split(", "))
        if n
    ]
    assert shown["flows"] == listed and listed, (
        f"all-to-all viewer at {position}: expected the flows the text lists {listed}, found "
        f"{shown['flows']}"
    )


def _ring_move(before: dict, after: dict, steps: list[dict], start: int) -> None:
    check_ring_steps(before, after)
    shown = [before["text"], after["text"]]
    expected = [steps[start]["text"], steps[start + 1]["text"]]
    assert shown == expected, f"ring viewer: expected {expected}, found {shown}"


def _each_step(check):
    """A move check from a check of one step, `check(shown, expected, position, count)`."""

    def move(before: dict, after: dict, steps: list[dict], start: int) -> None:
        for position, shown in ((start, before), (start + 1, after)):
            check(shown, steps[position], position, len(steps))

    return move


# viewer name -> what must hold of what it showed at `start` and, after one move, at `start + 1`
MOVE_CHECKS = {
    "ring": _ring_move,
    "callpath": _each_step(check_callpath_step),
    "timeline": _each_step(check_timeline_step),
    "ringattn": _each_step(lambda shown, step, at, _count: check_ringattn_step(shown, step, at)),
    "alltoall": _each_step(check_alltoall_step),
}
if set(MOVE_CHECKS) != set(HOOKS):
    raise RuntimeError(
        f"tests/viewer_checks.py: expected a move check for each viewer {sorted(HOOKS)}, found "
        f"{sorted(MOVE_CHECKS)}"
    )


def check_move(name: str, before: dict, after: dict, steps: list[dict], start: int) -> None:
    """The viewer called `name`, whose recorded `steps` it starts at `start`, showed step
    `start` (`before`), then, after one move, step `start + 1` (`after`)."""
    MOVE_CHECKS[name](before, after, steps, start)
