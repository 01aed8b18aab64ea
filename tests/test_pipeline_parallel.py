"""helpers.pipeline_parallel against one process and torch.distributed.pipelining itself.

- split_microbatches refuses a count that does not divide the batch (a clear error);
- the from-scratch orders equal the plans of torch's ScheduleGPipe and Schedule1F1B (except
  1F1B's last rank, whose plan is wrong on torch 2.13-2.15: asserted, so a fix shows up);
- simulate gives the textbook idle fractions and names the ranks of a deadlocked order;
- the saved-bytes meter counts one micro-batch's activations and drops them after backward;
- torch's raw plans: single-stage ones end every row with REDUCE_GRAD (2.15: then
  WAIT_REDUCE_GRAD), the multi-stage ones hold compute actions and empty slots only;
- on 2 gloo ranks: from-scratch GPipe/1F1B and torch's schedules give one process's loss and
  gradients; a mismatched recv (nobody sends) and 1F1B on blocking sends (both ranks send) end
  within bounded time naming both ranks; a micro-batch count that does not divide the batch
  fails on the ranks with the same clear error, from scratch and with torch's schedules;
- the exercise judges accept equivalent right answers (a list for a tuple, NumPy numbers, an array).
- the notebook's editable copy of scratch_order (a cell's function, run through `order_fn`):
  read from the notebook's cell; each of the three changes the notebook suggests fails as the
  notebook says (the held and order checks' messages, the step refusing a backward before its
  forward, a deadlock's PipelineTimeout), the first two together give the same order again, and
  the checks fail on an altered loss, a NaN gradient, or an order that is not torch's (2F2B).
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

from helpers import pipeline_parallel as pp
from helpers.launch import WorkerError, launch


def _grad_error(per_rank: list, k: int, ref: dict) -> float:
    grads = {n: g for r in per_rank for n, g in r[k]["grads"].items()}
    assert set(grads) == set(ref["grads"]), f"parameters: {sorted(grads)} vs {sorted(ref['grads'])}"
    pairs = [(a, b) for n in ref["grads"] for a, b in zip(grads[n], ref["grads"][n], strict=True)]
    return max(abs(a - b) for a, b in pairs)


@pytest.mark.parametrize("m", [3, 5, 0, -1, 2.0, True])
def test_split_refuses_bad_counts(m) -> None:
    x = torch.zeros(pp.BATCH, pp.WIDTH)
    with pytest.raises(ValueError, match="micro-batches"):
        pp.split_microbatches(x, m)


def test_split_equal_parts() -> None:
    x = torch.arange(pp.BATCH * pp.WIDTH, dtype=torch.float32).view(pp.BATCH, pp.WIDTH)
    parts = pp.split_microbatches(x, 4)
    assert [p.shape[0] for p in parts] == [4] * 4 and torch.equal(torch.cat(parts), x)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 4), (3, 6)])
def test_scratch_orders_match_torch_plans(p: int, m: int) -> None:
    gpipe = pp.library_order("ScheduleGPipe", p, m)
    one_f_one_b = pp.library_order("Schedule1F1B", p, m)
    for r in range(p):
        assert pp.executed_compute(gpipe[r]) == pp.scratch_order("gpipe", p, m, r)
    for r in range(p - 1):
        assert pp.executed_compute(one_f_one_b[r]) == pp.scratch_order("1f1b", p, m, r)
    last = [a[2] for a in pp.executed_compute(one_f_one_b[p - 1]) if a[1] == "F"]
    assert last == list(range(1, m + 1)), f"torch's 1F1B plan, last rank: {last}"


def test_raw_plans_non_compute_actions() -> None:
    version = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    tail = ["REDUCE_GRAD"] + (["WAIT_REDUCE_GRAD"] if version >= (2, 15) else [])
    for name in pp.SCHEDULES:
        plan = pp.library_plan(name, 4, 8)
        for r, row in plan.items():
            kinds = [a.computation_type.value for a in row if a is not None]
            other = [k for k in kinds if k not in ("F", "B", "I", "W")]
            if pp.SCHEDULES[name] == "single":
                assert other == tail and kinds[-len(tail) :] == tail, (name, r, kinds[-3:])
            else:
                assert other == [], (name, r, other)


def test_scratch_order_unknown_schedule() -> None:
    with pytest.raises(ValueError, match="unknown schedule"):
        pp.scratch_order("zb", 2, 4, 0)


@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (4, 8), (8, 16)])
def test_simulate_gpipe_and_1f1b_bubble(p: int, m: int) -> None:
    for name in ("gpipe", "1f1b"):
        sim = pp.simulate({r: pp.scratch_order(name, p, m, r) for r in range(p)})
        assert abs(sim["idle_fraction"] - pp.bubble_formula(p, m)) < 1e-12, (name, sim["idle"])


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
def test_simulate_interleaved_bubble(p: int, m: int) -> None:
    sim = pp.simulate(pp.library_order("ScheduleInterleaved1F1B", p, m))
    assert abs(sim["idle_fraction"] - pp.bubble_formula(p, m, v=2)) < 1e-12


def test_simulate_names_deadlocked_ranks() -> None:
    orders = {0: [(0, "B", 0), (0, "F", 0)], 1: [(1, "F", 0), (1, "B", 0)]}
    with pytest.raises(RuntimeError, match=r"deadlock: ranks \[0, 1\]"):
        pp.simulate(orders)
    with pytest.raises(RuntimeError, match="deadlock"):
        pp.simulate(pp.library_order("Schedule1F1B", 4, 8))


def test_peak_in_flight() -> None:
    p, m = 4, 8
    assert [pp.peak_in_flight(pp.scratch_order("gpipe", p, m, r)) for r in range(p)] == [m] * p
    assert [pp.peak_in_flight(pp.scratch_order("1f1b", p, m, r)) for r in range(p)] == [4, 3, 2, 1]


def test_saved_bytes_counts_activations_and_frees_them() -> None:
    model = pp.make_model(2)
    meter = pp.SavedBytes()
    pp._prepare_stage(model, 0.0, meter)
    x = torch.randn(4, pp.WIDTH)
    out = model(x)
    # per block: the Linear's input (for the weight's gradient) and tanh's output
    assert meter.live == 2 * 2 * 4 * pp.WIDTH * 4, meter.live
    out.sum().backward()
    del out
    assert meter.live == 0 and meter.peak == 2 * 2 * 4 * pp.WIDTH * 4


def test_timeline_svg_is_deterministic() -> None:
    orders = {r: pp.scratch_order("1f1b", 4, 8, r) for r in range(4)}
    a = pp.timeline_svg(pp.simulate(orders), "1F1B")
    b = pp.timeline_svg(pp.simulate(orders), "1F1B")
    assert a == b and a.count('class="action"') == 4 * 16 and a.startswith("<svg")


def test_slot_actions_and_text_by_hand() -> None:
    # GPipe, p=2, m=2: rank 0 F0 0-1, F1 1-2; rank 1 F0 1-2, F1 2-3, B0 3-5, B1 5-7; rank 0 B0
    # waits for rank 1's B0 (5-7), B1 for its B1 (7-9)
    sim = pp.simulate({r: pp.scratch_order("gpipe", 2, 2, r) for r in range(2)})
    assert pp.slot_count(sim) == 9
    assert pp.slot_actions(sim, 4) == {0: None, 1: (3.0, 5.0, (1, "B", 0))}
    assert pp.slot_actions(sim, 5) == {0: (5.0, 7.0, (0, "B", 0)), 1: (5.0, 7.0, (1, "B", 1))}
    assert pp.slot_text(sim, "GPipe", 4).splitlines() == [
        "GPipe: slot 5 of 9 (t = 4 to 5)",
        "rank 0: idle",
        "rank 1: B0 (t = 3 to 5), full backward of micro-batch 0 on stage 1",
        "busy: 1 of 2 ranks",
    ]
    for bad in (-1, 9):
        with pytest.raises(ValueError, match=r"slot must be in \[0, 8\]"):
            pp.slot_actions(sim, bad)


def test_slots_cover_every_action_for_its_duration() -> None:
    orders = {r: pp.scratch_order("1f1b", 4, 8, r) for r in range(4)}
    sim = pp.simulate(orders)
    per_slot = [pp.slot_actions(sim, t) for t in range(pp.slot_count(sim))]
    for r in range(4):
        seen = [iv for slots in per_slot if (iv := slots[r]) is not None]
        # each action shows in as many slots as it lasts (F 1, B 2), in the rank's order
        assert seen == [iv for iv in sim["intervals"][r] for _ in range(int(iv[1] - iv[0]))]
        assert [a for _, _, a in dict.fromkeys(seen)] == orders[r]


def test_timeline_svg_marks_the_slot() -> None:
    orders = {r: pp.scratch_order("1f1b", 4, 8, r) for r in range(4)}
    sim = pp.simulate(orders)
    plain = pp.timeline_svg(sim, "1F1B")
    assert "slot-band" not in plain and "data-active" not in plain and "data-slot" not in plain
    marked = pp.timeline_svg(sim, "1F1B", slot=3)
    assert 'class="timeline-svg" data-slot="3"' in marked
    assert f'<rect class="slot-band" x="{60 + 3 * 14}"' in marked
    active = re.findall(
        r'data-rank="(\d)" data-stage="\d" data-kind="(\w)" data-mb="(\d)" '
        r'data-active="true"',
        marked,
    )
    assert active == [("0", "F", "3"), ("1", "F", "2"), ("2", "F", "1"), ("3", "F", "0")]
    assert marked.count('data-active="false"') == 4 * 16 - 4
    # without the marks, the marked picture is the plain one
    unmarked = re.sub(r' data-active="\w+"| class="timeline-svg" data-slot="3"', "", marked)
    assert re.sub(r"\n<rect class=\"slot-band\"[^\n]*", "", unmarked) == plain


def test_timeline_step_viewer_steps_agree_with_the_picture() -> None:
    orders = {r: pp.scratch_order("1f1b", 4, 8, r) for r in range(4)}
    sim = pp.simulate(orders)
    viewer = pp.timeline_step_viewer(sim, "1F1B")
    try:
        assert viewer.picture == pp.timeline_svg(sim, "1F1B", slot=0)
        assert len(viewer.steps) == 33 == pp.slot_count(sim) and viewer.step == 0
        boxes = re.findall(
            r'data-rank="(\d)" data-stage="\d" data-kind="(\w)" data-mb="(\d)"', viewer.picture
        )
        for t, step in enumerate(viewer.steps):
            assert (step["slot"], step["x"]) == (t, 60 + 14 * t)
            assert step["text"] == pp.slot_text(sim, "1F1B", t)
            # the boxes marked at this slot are the actions its text lists, rank by rank
            listed = re.findall(r"^rank (\d): (\w)(\d+) ", step["text"], re.M)
            assert [boxes[k] for k in step["active"]] == listed, t
            marked = pp.timeline_svg(sim, "1F1B", slot=t)
            on = [m.start() for m in re.finditer('data-active="true"', marked)]
            assert len(on) == len(step["active"]), t
        assert viewer._repr_mimebundle_()[0]["text/plain"] == viewer.steps[0]["text"]
    finally:
        viewer.close()


def test_scratch_on_two_ranks_equals_one_process() -> None:
    runs = [dict(schedule="gpipe", m=4), dict(schedule="1f1b", m=4)]
    res = launch(pp.scratch_worker, 2, args=(runs,), timeout_s=120)
    ref = pp.reference(2)
    for k in range(2):
        assert abs(res[1][k]["loss"] - ref["loss"]) < 1e-6
        assert _grad_error(res, k, ref) < 1e-6
    assert [r[0]["peak_held"] for r in res] == [4, 4]
    assert [r[1]["peak_held"] for r in res] == [2, 1]


def test_torch_schedules_on_two_ranks_equal_one_process() -> None:
    runs = [dict(name=n, m=4) for n in ("ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B")]
    res = launch(pp.library_worker, 2, args=(runs,), timeout_s=180)
    ref = pp.reference(4)
    for k in range(len(runs)):
        loss = [r[k]["loss"] for r in res if r[k]["loss"] is not None]
        assert len(loss) == 1 and abs(loss[0] - ref["loss"]) < 1e-6, (runs[k], loss)
        assert _grad_error(res, k, ref) < 1e-6, runs[k]
    # what 1F1B ran is the from-scratch order, on every rank
    assert [r[1]["order"] for r in res] == [pp.scratch_order("1f1b", 2, 4, r) for r in range(2)]


def test_mismatched_recv_ends_in_bounded_time_naming_ranks() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(pp.mismatch_worker, 2, args=(1.0,), timeout_s=300)
    elapsed = time.monotonic() - start
    # bounded by the launch's deadline, not by a wall-clock guess (each launch starts
    # interpreters that import torch: 22-33 s each at load 18)
    assert elapsed < 300, (
        f"expected the WorkerError before the launch's 300 s deadline, took {elapsed:.1f} s"
    )
    text = str(info.value)
    assert sorted(info.value.ranks) == [0, 1] and "PipelineTimeout" in text
    assert "rank 0: recv with rank 1" in text and "rank 1: recv with rank 0" in text, text


def test_blocking_1f1b_ends_in_both_sends() -> None:
    run = dict(schedule="1f1b", m=4, blocking=True, op_timeout_s=1.0)
    got = launch(pp.deadlock_worker, 2, args=(run,), timeout_s=300)
    assert got[0]["message"].startswith("rank 0: send of activation 1 with rank 1 "), got
    assert got[1]["message"].startswith("rank 1: send of gradient 0 with rank 0 "), got
    errors = {r["error"] for r in got}
    assert "timeout" in errors and errors <= {"timeout", "failed"}, f"expected a timeout: {got}"
    assert all("[" not in r["message"] for r in got), f"expected gloo's text cut off: {got}"


def test_deadlock_worker_returns_none_without_a_deadlock() -> None:
    run = dict(schedule="gpipe", m=4, blocking=True, op_timeout_s=30.0)
    got = launch(pp.deadlock_worker, 2, args=(run,), timeout_s=300)
    assert got == [{"error": None}] * 2, f"expected GPipe on blocking sends to finish, found {got}"


def test_blocking_1f1b_ends_in_bounded_time_naming_ranks() -> None:
    start = time.monotonic()
    runs = [dict(schedule="1f1b", m=4, blocking=True, op_timeout_s=1.0)]
    with pytest.raises(WorkerError) as info:
        launch(pp.scratch_worker, 2, args=(runs,), timeout_s=300)
    elapsed = time.monotonic() - start
    assert elapsed < 300, (
        f"expected the WorkerError before the launch's 300 s deadline, took {elapsed:.1f} s"
    )
    text = str(info.value)
    assert "PipelineTimeout" in text, text
    assert "rank 0: send of activation 1 with rank 1" in text, text
    assert "rank 1: send of gradient 0 with rank 0" in text, text


@pytest.mark.parametrize(
    "worker,run",
    [
        (pp.scratch_worker, dict(schedule="gpipe", m=3)),
        (pp.library_worker, dict(name="ScheduleGPipe", m=3)),
    ],
    ids=["scratch", "torch"],
)
def test_bad_microbatch_count_fails_on_the_ranks(worker, run) -> None:
    with pytest.raises(WorkerError, match="3 micro-batches do not divide a batch of 16"):
        launch(worker, 2, args=([run],), timeout_s=120)


def test_judges_accept_equivalent_answers() -> None:
    from helpers import exercises as ex

    for answer in ((64, 32), [64, 32], (np.int64(64), 32.0)):
        assert ex.judge("16.1", answer)[0], answer
    for answer in (("F7", 10), (" f7 ", 10), ["F7", 10], ("F7", np.int64(10))):
        assert ex.judge("16.2", answer)[0], answer
    for answer in ((4, 4, 4, 3, 2, 1), [4.0, 4, 4, 3, 2, 1], np.array([4, 4, 4, 3, 2, 1])):
        assert ex.judge("16.3", answer)[0], answer


# --- the notebook's editable copy of scratch_order (section 3's "change this and rerun") -------


def _cell_copy() -> str:
    """The copy of scratch_order in the notebook's cell a16r0002: the code up to its run."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "16_pipeline_parallelism.ipynb"
    cells = json.loads(path.read_text())["cells"]
    source = "".join(next(c for c in cells if c.get("id") == "a16r0002")["source"])
    assert "\n\np, m =" in source, "expected the copy's def, a blank line, then `p, m = ...`"
    return source[: source.index("\n\np, m =")] + "\n"


COPY = _cell_copy()
# the changes the notebook suggests, each a line of COPY replaced ("both" makes the first
# two together)
BROKEN = {
    "one more warm-up forward": ("world_size - 1 - rank", "world_size - rank"),
    "backward first": (
        '[(rank, "F", warmup + i), (rank, "B", i)]',
        '[(rank, "B", i), (rank, "F", warmup + i)]',
    ),
    "warm-up reversed": ("min(world_size - 1 - rank, m)", "min(rank, m)"),
}
BOTH = [
    ("min(world_size - 1 - rank, m)", "min(world_size - rank, m)"),
    BROKEN["backward first"],
]


BROKEN_CELLS: list[str] = []  # the cells typed so far, one name each


def _typed_in_a_cell(change: str | None = None) -> object:
    """COPY (with one of BROKEN's changes) as a notebook cell defines it: module __main__, its
    source in linecache, so launch writes it out for the workers."""
    import linecache

    code = COPY
    for old, new in BOTH if change == "both" else [] if change is None else [BROKEN[change]]:
        assert old in code, f"expected {old!r} in the notebook's copy"
        code = code.replace(old, new)
    assert change is None or code != COPY, f"expected {change!r} to change the copy"
    cell = f"<ipython-input-{len(BROKEN_CELLS) + 1}-{len(code):012x}>"
    BROKEN_CELLS.append(cell)
    linecache.cache[cell] = (len(code), None, code.splitlines(keepends=True), cell)
    namespace = {"__name__": "__main__"}
    exec(compile(code, cell, "exec"), namespace)
    return namespace["scratch_order"]


def test_the_copy_is_the_helper() -> None:
    copy, both = _typed_in_a_cell(), _typed_in_a_cell("both")
    for name, p, m in [("gpipe", 4, 8), ("1f1b", 4, 8), ("1f1b", 2, 4), ("1f1b", 4, 2)]:
        assert all(copy(name, p, m, r) == pp.scratch_order(name, p, m, r) for r in range(p))
        # the first two changes together: torch's way of writing 1F1B, the same order
        assert all(both(name, p, m, r) == pp.scratch_order(name, p, m, r) for r in range(p))
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        copy("zb", 4, 8, 0)


def _results(p: int, run: dict, orders: list) -> list[dict]:
    """Per-rank results as scratch_step returns them, one process's loss and gradients, the
    expected peaks, and the given orders (a check of the checks, no launch)."""
    ref = pp.reference(p)
    expected = (
        [run["m"]] * p if run["schedule"] == "gpipe" else [min(p - r, run["m"]) for r in range(p)]
    )
    return [
        dict(
            loss=ref["loss"],
            grads=dict(ref["grads"]) if r == 0 else {},
            peak_held=expected[r],
            peak_saved_bytes=expected[r] * 10,
            unit_bytes=10,
            order=orders[r],
        )
        for r in range(p)
    ]


def test_the_order_check_fails_on_an_order_that_is_not_1f1b() -> None:
    # rank 0 runs two forwards then two backwards: the held peak is still 4, and the copy that
    # returns it reached the ranks, so only the comparison with torch's plan can fail
    run = dict(schedule="1f1b", m=8)
    two = [(0, k, i) for k, i in [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1)]]
    two += [(0, k, i) for k, i in [("F", 4), ("F", 5), ("B", 2), ("B", 3), ("F", 6), ("F", 7)]]
    two += [(0, "B", i) for i in range(4, 8)]
    orders = [two] + [pp.scratch_order("1f1b", 4, 8, r) for r in range(1, 4)]
    run["order_fn"] = lambda s, p, m, r: orders[r]
    got = pp.check_held_and_order(4, run, _results(4, run, orders))
    assert got["held"] == [4, 3, 2, 1] and got["torch_ranks"] == [0, 1, 2, 3], got
    assert got["problems"] == [
        "p=4 1f1b m=8 rank 0: expected torch's order F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 "
        "B6 B7, found F0 F1 F2 F3 B0 B1 F4 F5 B2 B3 F6 F7 B4 B5 B6 B7"
    ], got["problems"]
    # the right orders pass, GPipe's too; where torch refuses (1F1B with m < p) nothing is compared
    for name, p, m in [("1f1b", 4, 8), ("gpipe", 4, 8), ("1f1b", 2, 4), ("1f1b", 4, 2)]:
        run = dict(schedule=name, m=m)
        got = pp.check_held_and_order(
            p, run, _results(p, run, [pp.scratch_order(name, p, m, r) for r in range(p)])
        )
        assert got["problems"] == [], got["problems"]
        assert got["torch_ranks"] == ([] if m < p and name == "1f1b" else list(range(p))), got


def test_a_nan_gradient_fails_the_one_process_check() -> None:
    run = dict(schedule="1f1b", m=4)
    per_rank = _results(2, run, [[], []])
    ref = pp.reference(2)
    per_rank[0]["grads"] = {
        n: [g[0]] + [float("nan")] * (len(g) - 1) for n, g in ref["grads"].items()
    }
    got = pp.check_one_process(2, run, per_rank)
    assert got["grad_error"] == float("inf") and len(got["problems"]) == 1, got
    assert pp.check_one_process(2, run, _results(2, run, [[], []]))["problems"] == []


def test_one_more_warmup_forward_fails_the_held_and_order_checks() -> None:
    # one copy per launch: launch writes a notebook function to notebook_<name>.py, so two
    # functions of one name in one launch would both run as the first
    run = dict(schedule="1f1b", m=8, order_fn=_typed_in_a_cell("one more warm-up forward"))
    res = launch(pp.scratch_worker, 4, args=([run],), backend="gloo", timeout_s=300)
    per_rank = [res[r][0] for r in range(4)]
    problems = pp.check_one_process(4, run, per_rank)["problems"]
    assert problems == [], f"expected one process's loss and gradients, found {problems}"
    problems = pp.check_held_and_order(4, run, per_rank)["problems"]
    assert problems == [
        "p=4 1f1b m=8: expected [4, 3, 2, 1] micro-batches held at the peak, per rank, "
        "found [5, 4, 3, 2] (counted) and [5.0, 4.0, 3.0, 2.0] (saved bytes / one "
        "micro-batch's)",
        "p=4 1f1b m=8 rank 0: expected torch's order F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 "
        "B6 B7, found F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 B4 B5 B6 B7",
    ], problems
    # the other checks fail too where they should (the same results, altered)
    per_rank = [dict(r) for r in per_rank]
    per_rank[3]["loss"] += 1e-3
    problems = pp.check_one_process(4, run, per_rank)["problems"]
    assert len(problems) == 1 and "expected one process's loss" in problems[0], problems
    per_rank[0]["order"] = per_rank[0]["order"][::-1]
    problems = pp.check_held_and_order(4, run, per_rank)["problems"]
    assert len(problems) == 3 and "expected the orders" in problems[2], problems


def test_backward_first_is_refused_on_the_last_rank() -> None:
    broken = _typed_in_a_cell("backward first")
    with pytest.raises(
        ValueError, match=r"^rank 3: B0 before F0 in B0 F0 B1 F1 .* B7 F7: expected"
    ):
        pp._check_order(broken("1f1b", 4, 8, 3), 3, 8)
    with pytest.raises(WorkerError) as info:
        runs = [dict(schedule="1f1b", m=4, order_fn=broken)]
        launch(pp.scratch_worker, 2, args=(runs,), backend="gloo", timeout_s=300)
    assert info.value.rank == 1, str(info.value)
    assert (
        "rank 1: B0 before F0 in B0 F0 B1 F1 B2 F2 B3 F3: expected each backward after its "
        "forward, whose activations it needs" in str(info.value)
    ), str(info.value)


def test_an_order_missing_a_micro_batch_is_refused() -> None:
    order = pp.scratch_order("1f1b", 2, 4, 0)[:-1]
    with pytest.raises(ValueError, match=r"rank 0: expected an order of F0..F3 and B0..B3"):
        pp._check_order(order, 0, 4)


def test_reversed_warmup_deadlocks_and_times_out() -> None:
    runs = [dict(schedule="1f1b", m=4, order_fn=_typed_in_a_cell("warm-up reversed"))]
    runs[0]["op_timeout_s"] = 1.0
    with pytest.raises(WorkerError) as info:
        launch(pp.scratch_worker, 2, args=(runs,), backend="gloo", timeout_s=300)
    text = str(info.value)
    waits = {
        0: "rank 0: recv of gradient 0 with rank 1 did not complete within 1.0 s",
        1: "rank 1: recv of activation 1 with rank 0 did not complete within 1.0 s",
    }
    assert "PipelineTimeout" in text and waits[info.value.rank] in text, (
        f"expected rank {info.value.rank} to time out in {waits[info.value.rank]!r}, found {text}"
    )
