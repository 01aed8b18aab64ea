"""Judges for notebook 16 (pipeline parallelism): bubbles, slots and activations held.

The truths come from `helpers.pipeline_parallel` and the installed torch: torch's own
`ScheduleGPipe.pipeline_order` replayed by `simulate` (16.1), torch's `Schedule1F1B.pipeline_order`
read by `library_order` (16.2), and the from-scratch 1F1B order counted by `peak_in_flight`
(16.3: torch's 1F1B plan is wrong on the last rank, and what `Schedule1F1B` runs is the
from-scratch order, which notebook 16 asserts). No judge launches processes.
"""

from __future__ import annotations

import numbers
from typing import Any

from helpers import pipeline_parallel as pp
from helpers.exercises import Hint, exercise, tr

BUBBLE_P, BUBBLE_M = 8, 32  # 16.1
SLOT_P, SLOT_M, SLOT_RANK, SLOT_INDEX = 4, 8, 1, 4  # 16.2
HELD_P, HELD_M = 8, 16  # 16.3


def _number(answer: Any) -> bool:
    """A real number (int, float, Fraction, a NumPy scalar), not a bool."""
    return isinstance(answer, numbers.Real) and not isinstance(answer, bool)


def gpipe_idle(p: int = BUBBLE_P, m: int = BUBBLE_M) -> float:
    """GPipe's idle fraction: torch's ScheduleGPipe plan replayed by `simulate`."""
    return pp.simulate(pp.library_order("ScheduleGPipe", p, m))["idle_fraction"]


@exercise("16.1", "GPipe's idle fraction for p = 8, m = 32")
def bubble(answer: Any) -> str:
    if not _number(answer):
        raise Hint(tr("give a number, the fraction of the step a rank is idle (between 0 and 1)"))
    p, m = BUBBLE_P, BUBBLE_M
    answer = float(answer)
    truth = gpipe_idle()
    if abs(answer - truth) < 1e-3:
        return tr(
            (
                "{truth:.4f} = (p-1)/(m+p-1) = {fill}/{slots}: the fill and the drain cost p-1 "
                "slots of forward+backward each rank spends idle out of m+p-1."
            ),
            truth=truth,
            fill=p - 1,
            slots=m + p - 1,
        )
    if abs(answer - (p - 1) / m) < 1e-3:
        raise Hint(
            tr(
                "(p-1)/m is the Playbook's ratio of the bubble to the ideal time, not a "
                "fraction of the step: the step lasts m+p-1 slots, not m"
            )
        )
    if abs(answer - 100 * truth) < 0.1:
        raise Hint(tr("that is a percentage: give the fraction, a number between 0 and 1"))
    if abs(answer - (1 - truth)) < 1e-3:
        raise Hint(tr("that is the fraction a rank is busy; the question asks for the idle part"))
    if abs(answer - (p - 1) / (m + p)) < 1e-3 or abs(answer - p / (m + p - 1)) < 1e-3:
        raise Hint(tr("off by one slot: count the p-1 slots of fill before the last stage starts"))
    raise Hint(
        tr("replay it: pp.simulate({{r: pp.scratch_order('gpipe', 8, 32, r) for r in range(8)}})")
    )


def slot_action(
    p: int = SLOT_P, m: int = SLOT_M, rank: int = SLOT_RANK, index: int = SLOT_INDEX
) -> str:
    """Kind and micro-batch of `rank`'s compute action number `index` in torch's 1F1B plan."""
    stage, kind, mb = pp.executed_compute(pp.library_order("Schedule1F1B", p, m)[rank])[index]
    return f"{kind}{mb}"


@exercise("16.2", "Rank 1's fifth action in Schedule1F1B, p = 4, m = 8")
def slot(answer: Any) -> str:
    truth = slot_action()
    if isinstance(answer, (tuple, list)) and len(answer) in (2, 3):
        # ("F", 3) or the plan's own (stage, "F", 3): the same action, written as a tuple
        kind, mb = answer[-2], answer[-1]
        stage_ok = len(answer) == 2 or answer[0] == SLOT_RANK
        if stage_ok and isinstance(kind, str) and isinstance(mb, int):
            answer = f"{kind}{mb}"
    if not isinstance(answer, str):
        raise Hint(tr('give a string such as "F2" or "B0"'))
    a = answer.strip().upper().replace(" ", "")
    if a == truth:
        return tr(
            (
                "{truth}: rank 1 runs p-1-r = 2 warm-up forwards (F0, F1), then alternates "
                "one forward and one backward: F2, B0, F3, B1, ..."
            ),
            truth=truth,
        )
    if a == "F4":
        raise Hint(
            tr("that would be GPipe's order (every forward first); 1F1B starts backward early")
        )
    if a == "B0":
        raise Hint(tr("one slot too early: B0 is index 3, the fourth action; index 4 is the fifth"))
    if a == "F2":
        raise Hint(
            tr(
                "F2 is index 2, the first forward after rank 1's p-1-r = 2 warm-up forwards; "
                "count on to index 4"
            )
        )
    if a == "B1":
        raise Hint(tr("one slot too late: count F0 F1 F2 B0 ... from index 0"))
    raise Hint(
        tr(
            "rank r runs p-1-r forwards, then one forward and one backward in turn; print "
            "pp.library_order('Schedule1F1B', 4, 8)[1]"
        )
    )


def held_1f1b(p: int = HELD_P, m: int = HELD_M) -> list[int]:
    """Per rank, the most micro-batches 1F1B holds (forwarded, not yet backwarded)."""
    return [pp.peak_in_flight(pp.scratch_order("1f1b", p, m, r)) for r in range(p)]


@exercise("16.3", "Micro-batches held per rank under 1F1B, p = 8, m = 16")
def held(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or not all(_number(a) for a in answer):
        raise Hint(tr("give a list of numbers, one per rank, rank 0 first"))
    truth = held_1f1b()
    got = list(answer)
    if len(got) != HELD_P:
        raise Hint(tr("one number per rank: {ranks} ranks", ranks=HELD_P))
    if got == truth:
        return tr(
            (
                "{truth}: rank r holds its p-1-r warm-up micro-batches plus the one it "
                "forwards before its first backward, p-r in all, for any m >= p-r (GPipe "
                "would hold m = 16)."
            ),
            truth=truth,
        )
    if got == [HELD_M] * HELD_P:
        raise Hint(
            tr("that is GPipe: every forward before any backward; 1F1B starts backward early")
        )
    if got == [t - 1 for t in truth]:
        raise Hint(
            tr("count the steady state's first forward too: it runs before the first backward")
        )
    if got == [HELD_P] * HELD_P:
        raise Hint(tr("p is rank 0's peak; later ranks start backward sooner"))
    if got == truth[::-1]:
        raise Hint(tr("reversed: rank 0 (the first stage) waits longest for its first backward"))
    raise Hint(tr("count with pp.peak_in_flight(pp.scratch_order('1f1b', 8, 16, r)) for each r"))
