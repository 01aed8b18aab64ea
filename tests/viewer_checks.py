"""The step viewers' browser checks, shared by the JupyterLab test (tests/test_jupyterlab.py)
and the book test (tests/test_book.py): what a viewer shows (read through the DOM hooks that
`helpers.allreduce.ring_step_viewer`, `helpers.tracing.step_viewer`,
`helpers.pipeline_parallel.timeline_step_viewer`,
`helpers.context_parallel.ring_attention_step_viewer` and
`helpers.expert_parallel.exchange_step_viewer` document), how a reader moves its slider (focus,
one ArrowRight), and what must hold before and after the move."""

from __future__ import annotations

import re

VIEW_TIMEOUT_S = 60.0  # for a view to redraw, on a loaded 2-core machine

# the ring viewer (notebook 05)
VIEW_STATE = """() => {
  const view = document.querySelector('.ring-step-view');
  const svg = view && view.querySelector('svg.ring-svg');
  const text = view && view.querySelector('.ring-step-text');
  return {
    readout: view?.querySelector('.ring-step-slider .ring-step-readout')?.innerText ?? null,
    text: text ? text.innerText : null,
    svg_step: svg ? svg.getAttribute('data-step') : null,
    transfers: svg ? Array.from(svg.querySelectorAll('g.transfer'), g =>
      `r${g.dataset.from} -c${g.dataset.chunk}-> r${g.dataset.to}`) : null,
  };
}"""

# the call-path viewer (notebook 01)
CALLPATH_STATE = """() => {
  const view = document.querySelector('.callpath-step-view');
  const svg = view && view.querySelector('svg.stages-svg');
  const active = svg && svg.querySelector('g.stage[data-active="true"]');
  return {
    readout: view?.querySelector('.callpath-step-slider .callpath-step-readout')?.innerText ?? null,
    name: view?.querySelector('.callpath-step-name')?.innerText ?? null,
    text: view?.querySelector('.callpath-step-text')?.innerText ?? null,
    svg_step: svg ? svg.getAttribute('data-step') : null,
    svg_stage: svg ? svg.getAttribute('data-active-stage') : null,
    active_box: active ? active.dataset.stage : null,
  };
}"""

# the pipeline timeline viewer (notebook 16)
TIMELINE_STATE = """() => {
  const view = document.querySelector('.timeline-step-view');
  const svg = view && view.querySelector('svg.timeline-svg');
  const band = svg && svg.querySelector('rect.slot-band');
  return {
    readout: view?.querySelector('.timeline-step-slider .timeline-step-readout')?.innerText ?? null,
    text: view?.querySelector('.timeline-step-text')?.innerText ?? null,
    svg_slot: svg ? svg.getAttribute('data-slot') : null,
    band_x: band ? band.getAttribute('x') : null,
    active: svg ? Array.from(svg.querySelectorAll('g.action'), (g, k) =>
      g.dataset.active === 'true' ? k : null).filter(k => k !== null) : null,
    active_boxes: svg ? Array.from(svg.querySelectorAll('g.action[data-active="true"]'), g =>
      `rank ${g.dataset.rank}: ${g.dataset.kind}${g.dataset.mb}`) : null,
  };
}"""

# the ring attention viewer (notebook 17, section 3)
RINGATTN_STATE = """() => {
  const view = document.querySelector('.ringattn-step-view');
  const svg = view && view.querySelector('svg.ringattn-svg');
  return {
    readout: view?.querySelector('.ringattn-step-slider .ringattn-step-readout')?.innerText ?? null,
    text: view?.querySelector('.ringattn-step-text')?.innerText ?? null,
    svg_step: svg ? svg.getAttribute('data-step') : null,
    holds: svg ? Array.from(svg.querySelectorAll('g.rank'), g =>
      `rank ${g.dataset.rank} holds ${g.dataset.owner}`) : null,
    shifts: svg ? Array.from(svg.querySelectorAll('g.shift'), g =>
      `${g.dataset.from} -> ${g.dataset.to}`) : null,
    pairs: svg ? Array.from(svg.querySelectorAll('rect.pair'), r =>
      `${r.dataset.state} q${r.dataset.q} k${r.dataset.k}`) : null,
  };
}"""

# the all-to-all viewer (notebook 17, section 7)
ALLTOALL_STATE = """() => {
  const view = document.querySelector('.alltoall-step-view');
  const svg = view && view.querySelector('svg.alltoall-svg');
  return {
    readout: view?.querySelector('.alltoall-step-slider .alltoall-step-readout')?.innerText ?? null,
    text: view?.querySelector('.alltoall-step-text')?.innerText ?? null,
    svg_step: svg ? svg.getAttribute('data-step') : null,
    svg_what: svg ? svg.getAttribute('data-what') : null,
    flows: svg ? Array.from(svg.querySelectorAll('g.flow'), g =>
      `${g.dataset.from} -> ${g.dataset.to}: ${g.dataset.rows}`) : null,
    experts: svg ? Array.from(svg.querySelectorAll('g.expert'), g =>
      `expert ${g.dataset.expert}: ${g.dataset.rows}`) : null,
  };
}"""

SLIDERS = {
    VIEW_STATE: ".ring-step-view .ring-step-slider input[type=range]",
    CALLPATH_STATE: ".callpath-step-view .callpath-step-slider input[type=range]",
    TIMELINE_STATE: ".timeline-step-view .timeline-step-slider input[type=range]",
    RINGATTN_STATE: ".ringattn-step-view .ringattn-step-slider input[type=range]",
    ALLTOALL_STATE: ".alltoall-step-view .alltoall-step-slider input[type=range]",
}


def step_viewer(page, state: str = VIEW_STATE, timeout_s: float = VIEW_TIMEOUT_S):
    """Move a viewer's slider one step with the keyboard, as a reader would; returns `state`
    (one of SLIDERS' keys) before and after. Raises AssertionError when
    the view does not redraw."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    before = page.evaluate(state)
    page.locator(SLIDERS[state]).focus()
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
            "its view (src/helpers/viewers/*.js) did not redraw"
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
