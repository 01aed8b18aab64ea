"""Judges for notebook 16 (pipeline parallelism): bubbles, slots, activations held, 1F1B's order.

The truths come from `helpers.pipeline_parallel` and the installed torch: the bubble formula,
which notebook 16 asserts equal to the replay of torch's `ScheduleGPipe` plan, and that replay
itself in the right verdict (16.1); the from-scratch 1F1B order `scratch_order` (16.2, 16.3 with
`peak_in_flight`, and 16.4, where the reader's `one_f_one_b` writes it with its sends and
receives and is compared on the prompt's case and hidden ones, m < p and p = 1 among them). For
m >= p torch's `Schedule1F1B` runs the same compute order (notebook 16 asserts it at p = 4, m = 8
and compares the plans); for m < p torch refuses 1F1B, and the from-scratch rule caps the warm-up
at m. No judge launches processes.
"""

from __future__ import annotations

import inspect
import numbers
from fractions import Fraction
from typing import Any

from helpers import pipeline_parallel as pp
from helpers.exercises import N_, Hint, as_int, exercise, tr, watching

BUBBLE_P, BUBBLE_V, BUBBLE_UNDER = 8, 2, Fraction(1, 10)  # 16.1
SLOT_P, SLOT_M, SLOT_RANK, SLOT_AFTER = 6, 12, 1, ("B", 2)  # 16.2
HELD_P, HELD_M = 6, 4  # 16.3: fewer micro-batches than stages
ORDER_SHOWN = (4, 8, 1)  # 16.4: (p, m, rank) of the prompt
ORDER_HIDDEN = [(4, 8, r) for r in (0, 3)] + [
    (5, 3, 0),  # m < p: the warm-up is cut at m
    (5, 3, 3),
    (3, 6, 2),
    (1, 4, 0),  # p = 1: no pipeline, F and B in turn
    (6, 1, 2),  # one micro-batch
    (7, 12, 4),
]


def _number(answer: Any) -> bool:
    """A real number (int, float, Fraction, a NumPy scalar), not a bool."""
    return isinstance(answer, numbers.Real) and not isinstance(answer, bool)


def _fewest(p: int, v: int = 1, under: Fraction = BUBBLE_UNDER) -> int:
    """The smallest m whose idle fraction (p-1)/(v·m+p-1) is below `under`, exactly."""
    m = 1
    while Fraction(p - 1, v * m + p - 1) >= under:
        m += 1
    return m


@exercise(
    "16.1",
    "How many micro-batches keep the bubble under 10%",
    look=N_('section 5, "Bubbles, counted and measured": the idle fraction of a step'),
    reveal=N_(
        "`min(m for m in range(1, 100) if pp.bubble_formula(8, m, v=v) < 0.1)` for v = 1 and 2, "
        "and the replays `pp.simulate(pp.library_order('ScheduleGPipe', 8, m))` and "
        "`pp.simulate(pp.library_order('ScheduleInterleaved1F1B', 8, m, v=2))`"
    ),
)
def bubble(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("give a pair (m for GPipe, m for interleaved 1F1B with v = 2)"))
    got = [as_int(a) for a in answer]
    if any(g is None for g in got):
        raise Hint(tr("each m is a whole number of micro-batches"))
    p, v = BUBBLE_P, BUBBLE_V
    truth = (_fewest(p), _fewest(p, v))
    if tuple(got) == truth:
        m, mv = truth
        at = pp.simulate(pp.library_order("ScheduleGPipe", p, m))["idle_fraction"]
        inter = pp.simulate(pp.library_order("ScheduleInterleaved1F1B", p, mv, v=v))
        return tr(
            (
                "{truth}: (p-1)/(v·m+p-1) < 0.1 means v·m > 9(p-1) = {bound}, so m > {bound} "
                "for GPipe and m > {half} with v = 2. At m = {prev} GPipe idles {p1}/{d} = 0.1 "
                "exactly, not under (the replay's float sum is a hair below 0.1). The replays of "
                "torch's plans idle {at:.4f} (GPipe, m = {m}) and {inter:.4f} (interleaved, "
                "m = {mv}); torch's ScheduleInterleaved1F1B also needs m to be a multiple of its "
                "m // p rounds, which {mv} is."
            ),
            truth=truth,
            bound=9 * (p - 1),
            half=9 * (p - 1) / v,
            prev=m - 1,
            p1=p - 1,
            d=m - 1 + p - 1,
            at=at,
            inter=inter["idle_fraction"],
            m=m,
            mv=mv,
        )
    ratio = tuple(
        next(m for m in range(1, 1000) if (p - 1) / (w * m) < BUBBLE_UNDER) for w in (1, v)
    )
    if tuple(got) == ratio:
        raise Hint(
            tr(
                "that keeps (p-1)/(v·m), the bubble's ratio to the ideal time, under 0.1; the "
                "question is about the fraction of the whole step, which also counts the bubble"
            )
        )
    if got[0] == truth[0] - 1:
        raise Hint(
            tr(
                "at GPipe's m = {m} the idle fraction is exactly 0.1, not under it: one more "
                "micro-batch",
                m=got[0],
            )
        )
    if got[0] == truth[0] and got[1] == truth[1] - 1:
        raise Hint(
            tr(
                "GPipe's m is right; for v = 2 the bound on m is not a whole number: the "
                "smallest whole m above it"
            )
        )
    if got[1] == truth[0]:
        raise Hint(tr("the interleaved schedule needs fewer micro-batches than GPipe, not as many"))
    if got[0] == truth[0] and got[1] != truth[1]:
        raise Hint(
            tr(
                "GPipe's m is right; interleaving v stages per rank multiplies m, not p-1, in "
                "the denominator: (p-1)/(v·m+p-1)"
            )
        )
    raise Hint(
        tr(
            "write the idle fraction as (p-1) slots of fill and drain over the step's length in "
            "slots, set it below 0.1 and solve for m, once with v = 1 and once with v = 2"
        )
    )


def _order_strings(order: list) -> list[str]:
    return [f"{k}{i}" for _, k, i in order]


def slot_truth() -> tuple[str, int]:
    """The action right after rank SLOT_RANK's B2 in 1F1B, and its index in the rank's order."""
    order = _order_strings(pp.scratch_order("1f1b", SLOT_P, SLOT_M, SLOT_RANK))
    at = order.index("".join(map(str, SLOT_AFTER))) + 1
    return order[at], at


@exercise(
    "16.2",
    "What rank 1 runs right after B2, p = 6, m = 12",
    look=N_("section 3, the warm-up rule: rank r runs p-1-r forwards, then F and B in turn"),
    reveal=N_("`pp.scratch_order('1f1b', 6, 12, 1)` (what `Schedule1F1B` runs)"),
)
def slot(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr('give a pair (action, index), e.g. ("F3", 7)'))
    action, index = answer
    if not isinstance(action, str) or as_int(index) is None:
        raise Hint(tr('give a pair (action, index), e.g. ("F3", 7)'))
    action, index = action.strip().upper().replace(" ", ""), as_int(index)
    truth = slot_truth()
    warmup = SLOT_P - 1 - SLOT_RANK
    if (action, index) == truth:
        return tr(
            (
                "{truth}: rank 1 runs p-1-r = {warmup} warm-up forwards (F0..F3), then F4 B0 F5 "
                "B1 F6 B2 F7 ...: after backward i comes forward i + {warmup} + 1, at index "
                "{warmup} + 2i + 2 = {index}."
            ),
            truth=truth,
            warmup=warmup,
            index=truth[1],
        )
    if (action, index) == (truth[0], truth[1] + 1):
        raise Hint(tr("right action; the index counts from 0, the first forward is index 0"))
    if action == truth[0]:
        raise Hint(
            tr(
                "right action, wrong index: count the warm-up forwards, then two actions per "
                "backward of the steady state"
            )
        )
    if action == "B3":
        raise Hint(
            tr("that is GPipe's order (every forward first); 1F1B alternates F and B after warm-up")
        )
    if action.startswith("B"):
        raise Hint(
            tr(
                "in the steady state a backward is followed by a forward, until the forwards "
                "run out"
            )
        )
    if action == "F4":
        raise Hint(
            tr("that warm-up is reversed (rank r forwards r micro-batches first): it is p-1-r")
        )
    raise Hint(
        tr(
            "write rank 1's order out: how many forwards before its first backward, then "
            "which forward follows each backward"
        )
    )


def held_truth(p: int = HELD_P, m: int = HELD_M) -> list[int]:
    """Per rank, the most micro-batches 1F1B holds (forwarded, not yet backwarded)."""
    return [pp.peak_in_flight(pp.scratch_order("1f1b", p, m, r)) for r in range(p)]


@exercise(
    "16.3",
    "Micro-batches held per rank under 1F1B, p = 6, m = 4",
    look=N_("section 3, after the held counts: the peak in general, when m can be below p"),
    reveal=N_("`pp.peak_in_flight(pp.scratch_order('1f1b', 6, 4, r))` for each rank r"),
)
def held(answer: Any) -> str:
    if hasattr(answer, "tolist") and not _number(answer):  # a NumPy array or a tensor
        answer = answer.tolist()
    if not isinstance(answer, (list, tuple)) or not all(_number(a) for a in answer):
        raise Hint(tr("give a list of numbers, one per rank, rank 0 first"))
    truth = held_truth()
    got = list(answer)
    if len(got) != HELD_P:
        raise Hint(tr("one number per rank: {ranks} ranks", ranks=HELD_P))
    if got == truth:
        return tr(
            (
                "{truth}: rank r holds min(p-r, m): its p-1-r warm-up forwards and the first "
                "forward of the steady state, but never more than the m micro-batches a step "
                "has, so with m = {m} the first ranks hold as much as GPipe would."
            ),
            truth=truth,
            m=HELD_M,
        )
    if got == [HELD_P - r for r in range(HELD_P)]:
        raise Hint(
            tr("p-r holds only while m >= p-r: can a rank hold more micro-batches than a step has?")
        )
    if got == [HELD_M] * HELD_P:
        raise Hint(
            tr("that is GPipe: every forward before any backward; 1F1B starts backward early")
        )
    if got == [t - 1 for t in truth] or got == [min(HELD_P - 1 - r, HELD_M) for r in range(HELD_P)]:
        raise Hint(
            tr("count the steady state's first forward too: it runs before the first backward")
        )
    if got == truth[::-1]:
        raise Hint(tr("reversed: rank 0 (the first stage) waits longest for its first backward"))
    raise Hint(
        tr(
            "for each rank count the forwards it runs before its first backward, and remember "
            "that a step has only m micro-batches"
        )
    )


# --- 16.4: the 1F1B order of one rank with its sends and receives, written by the reader ------

_LIBRARY = ("scratch_order", "library_order", "library_plan", "torch_order")


def with_comms(order: list, p: int, rank: int) -> list[str]:
    """A rank's compute order with each receive just before the action that waits on it and
    each send just after the action that produces it: F i receives activation i from rank-1
    (not on rank 0) and sends its output to rank+1 (not on the last rank); B i receives the
    gradient from rank+1 (not on the last rank) and sends its input's gradient to rank-1."""
    out = []
    for _, kind, i in order:
        first, last = rank == 0, rank == p - 1
        before = ("RECV_F" if not first else None) if kind == "F" else None
        after = ("SEND_F" if not last else None) if kind == "F" else None
        if kind == "B":
            before = "RECV_B" if not last else None
            after = "SEND_B" if not first else None
        out += [f"{before}{i}"] * (before is not None) + [f"{kind}{i}"]
        out += [f"{after}{i}"] * (after is not None)
    return out


def order_truth(p: int, m: int, rank: int) -> list[str]:
    return with_comms(pp.scratch_order("1f1b", p, m, rank), p, rank)


def _helper_codes() -> set:
    from helpers.pipeline_parallel import harness, lesson

    codes = set()
    for module in (pp, lesson, harness):
        for name in _LIBRARY:
            fn = getattr(module, name, None)
            if getattr(fn, "__code__", None) is not None:
                codes.add(fn.__code__)
    return codes


def _call_watched(answer: Any, codes: set, args: tuple) -> tuple[Any, bool]:
    """answer(*args), and whether it called one of the notebook's order helpers (any alias)."""
    with watching(codes) as hits:
        result = answer(*args)
    return result, bool(hits)


def _as_strings(result: Any) -> list[str]:
    """The reader's order as ["F0", "SEND_F0", ...]."""
    if not isinstance(result, (list, tuple)):
        raise Hint(
            tr(
                'return a list of actions such as ["RECV_F0", "F0", "SEND_F0", ...], found '
                "{found_type}",
                found_type=type(result).__name__,
            )
        )
    if not all(isinstance(a, str) for a in result):
        raise Hint(tr('each action is a string such as "F0", "SEND_F0" or "RECV_B3"'))
    return [a.strip().upper().replace(" ", "") for a in result]


def _first_difference(got: list[str], want: list[str]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return tr("at index {i} yours runs {g}", i=i, g=g)
    return tr("yours has {n} actions where the step has {want}", n=len(got), want=len(want))


def _compute_only(got: list[str]) -> list[str]:
    return [a for a in got if not a.startswith(("SEND", "RECV"))]


@exercise(
    "16.4",
    "The 1F1B order of one rank, with its sends and receives",
    look=N_(
        "section 3: GPipe and 1F1B from scratch, its warm-up, steady state and cool-down; and "
        "section 2's `scratch_step`: which neighbour each rank receives activations and "
        "gradients from"
    ),
    reveal=N_(
        "`pp.scratch_order('1f1b', p, m, rank)` for the compute actions, each receive put just "
        "before and each send just after its action"
    ),
)
def one_f_one_b(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function one_f_one_b(p, m, rank), found {answer!r}", answer=answer))
    try:
        inspect.signature(answer).bind(1, 1, 0)
    except (TypeError, ValueError):
        params = list(inspect.signature(answer).parameters)
        raise Hint(
            tr("the function takes (p, m, rank); yours takes {params}", params=params)
        ) from None
    codes = _helper_codes()
    cases = [ORDER_SHOWN, *ORDER_HIDDEN]
    truths = [order_truth(*c) for c in cases]
    for k, ((p, m, rank), want) in enumerate(zip(cases, truths, strict=True)):
        result, helped = _call_watched(answer, codes, (p, m, rank))
        if helped:
            raise Hint(
                tr("write the order yourself: do not call the notebook's helper that computes it")
            )
        got = _as_strings(result)
        if got == want:
            continue
        if k == 0:
            compute = _compute_only(want)
            if got == compute or _compute_only(got) == compute:
                raise Hint(
                    tr(
                        "p = {p}, m = {m}, rank {rank}: the compute actions are right; {where}: "
                        "which neighbour does each F and each B wait on, and which one does it "
                        "feed? (rank 0 receives no activations, the last rank no gradients)",
                        p=p,
                        m=m,
                        rank=rank,
                        where=_first_difference(got, want),
                    )
                )
            if _compute_only(got) == [f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]:
                raise Hint(
                    tr("that is GPipe's order: 1F1B starts a backward before every forward is done")
                )
            raise Hint(
                tr(
                    "p = {p}, m = {m}, rank {rank}: {where}; rank r runs p-1-r forwards first, "
                    "then one forward and one backward in turn, then the remaining backwards",
                    p=p,
                    m=m,
                    rank=rank,
                    where=_first_difference(got, want),
                )
            )
        raise Hint(
            tr(
                (
                    "a hidden case differs: p = {p}, m = {m}, rank {rank}: {where}. The "
                    "order must follow from p, m and rank (mind m < p, p = 1, the first and "
                    "the last rank)"
                ),
                p=p,
                m=m,
                rank=rank,
                where=_first_difference(got, want),
            )
        )
    return tr(
        (
            "your order matches the from-scratch 1F1B with its sends and receives on p = 4, "
            "m = 8, rank 1 and on {n} hidden cases, m < p and p = 1 among them: min(p-1-r, m) "
            "warm-up forwards, then F and B in turn, then the cool-down's backwards. For m >= p "
            "its compute actions are what torch's Schedule1F1B runs (section 6); for m < p torch "
            "refuses 1F1B in its __init__, and the from-scratch rule cuts the warm-up at m."
        ),
        n=len(ORDER_HIDDEN),
    )
