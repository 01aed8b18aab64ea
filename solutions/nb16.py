"""Worked solutions to notebook 16's exercises (pipeline parallelism)."""

# 16.1 p = 8. The idle fraction of GPipe (and 1F1B) is (p-1)/(m+p-1): p-1 slots of fill and
# drain over a step of m+p-1 slots. Under 0.1: 10(p-1) < m+p-1, so m > 9(p-1) = 63: m = 64
# (m = 63 gives exactly 7/70 = 0.1). Interleaved over v = 2 stages per rank: (p-1)/(v·m+p-1),
# so v·m > 63, m > 31.5: m = 32, which torch's ScheduleInterleaved1F1B accepts (a multiple of its
# 32 // 8 = 4 rounds). (The ratio to the ideal time, (p-1)/(v·m), would give 71, 36.)
BUBBLE = (64, 32)

# 16.2 p = 6, m = 12, rank 1: p-1-r = 4 warm-up forwards F0 F1 F2 F3 (indices 0-3), then F and B
# in turn: F4 B0 F5 B1 F6 B2 F7 (indices 4-10). After B2 comes F7, at index 10.
SLOT = ("F7", 10)

# 16.3 p = 6, m = 4: rank r holds its p-1-r warm-up forwards and the steady state's first
# forward, p-r, but never more than the m = 4 micro-batches of the step: min(p-r, m).
HELD = [4, 4, 4, 3, 2, 1]


# 16.4 The 1F1B order of one rank, with its sends and receives.
def one_f_one_b(p, m, rank):
    """Rank `rank`'s actions under 1F1B with p stages and m micro-batches, with communication."""
    warmup = min(p - 1 - rank, m)  # forwards before the first backward
    compute = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward, one backward
        compute += [("F", warmup + i), ("B", i)]
    compute += [("B", i) for i in range(m - warmup, m)]  # cool-down
    order = []
    for kind, i in compute:
        if kind == "F":
            order += [f"RECV_F{i}"] * (rank > 0) + [f"F{i}"] + [f"SEND_F{i}"] * (rank < p - 1)
        else:
            order += [f"RECV_B{i}"] * (rank < p - 1) + [f"B{i}"] + [f"SEND_B{i}"] * (rank > 0)
    return order


SOLUTIONS = {"16.1": BUBBLE, "16.2": SLOT, "16.3": HELD, "16.4": one_f_one_b}


# typical wrong answers for 16.4 (the hint must contain the words given)
def _comms(compute, p, rank):
    order = []
    for kind, i in compute:
        if kind == "F":
            order += [f"RECV_F{i}"] * (rank > 0) + [f"F{i}"] + [f"SEND_F{i}"] * (rank < p - 1)
        else:
            order += [f"RECV_B{i}"] * (rank < p - 1) + [f"B{i}"] + [f"SEND_B{i}"] * (rank > 0)
    return order


def _gpipe(p, m, rank):
    return _comms([("F", i) for i in range(m)] + [("B", i) for i in range(m)], p, rank)


def _compute_only(p, m, rank):
    """The printed `scratch_order` body, as strings: no sends, no receives."""
    warmup = min(p - 1 - rank, m)
    order = [f"F{i}" for i in range(warmup)]
    for i in range(m - warmup):
        order += [f"F{warmup + i}", f"B{i}"]
    return order + [f"B{i}" for i in range(m - warmup, m)]


def _no_cap(p, m, rank):
    """Right when m >= p (the prompt's case); with m < p it runs forwards that do not exist."""
    warmup = p - 1 - rank
    compute = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        compute += [("F", warmup + i), ("B", i)]
    return _comms(compute + [("B", i) for i in range(max(m - warmup, 0), m)], p, rank)


def _always_both(p, m, rank):
    """Every action receives and sends, as on a middle rank: right for the prompt's rank 1."""
    warmup = min(p - 1 - rank, m)
    compute = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        compute += [("F", warmup + i), ("B", i)]
    compute += [("B", i) for i in range(m - warmup, m)]
    return [f"{x}{k}{i}" if x else f"{k}{i}" for k, i in compute for x in ("RECV_", "", "SEND_")]


def _by_heart(p, m, rank):
    """The prompt's case typed out: p = 4, m = 8, rank 1."""
    return one_f_one_b(4, 8, 1)


def _reversed_warmup(p, m, rank):
    warmup = min(rank, m)
    compute = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        compute += [("F", warmup + i), ("B", i)]
    return _comms(compute + [("B", i) for i in range(m - warmup, m)], p, rank)


def _calls_helper(p, m, rank):
    from helpers import pipeline_parallel as pp

    order = pp.scratch_order("1f1b", p, m, rank)
    return _comms([(k, i) for _, k, i in order], p, rank)


def _calls_alias(p, m, rank):
    """The helper under another name, which a check of the names alone would not see."""
    from helpers import pipeline_parallel as pp

    f = getattr(pp, "scratch" + "_order")
    return _comms([(k, i) for _, k, i in f("1f1b", p, m, rank)], p, rank)


def _two_args(p, m):
    return []


WRONG = {
    "16.1": [
        ((71, 36), "ratio"),
        ((63, 31), "exactly 0.1"),
        ((64, 31), "smallest whole m"),
        ((64, 64), "fewer micro-batches"),
        ((64, 63), "denominator"),
        (64, "pair"),
    ],
    "16.2": [
        (("F7", 11), "counts from 0"),
        (("F7", 9), "wrong index"),
        (("B3", 15), "GPipe"),
        (("F4", 7), "reversed"),
        ("F7", "pair"),
    ],
    "16.3": [
        ([6, 5, 4, 3, 2, 1], "more micro-batches than a step has"),
        ([4] * 6, "GPipe"),
        ([4, 4, 3, 2, 1, 0], "first forward"),
        ([1, 2, 3, 4, 4, 4], "reversed"),
        ([4, 4, 4], "per rank"),
    ],
    "16.4": [
        (_gpipe, "GPipe's order"),
        (_compute_only, "which neighbour"),
        (_no_cap, "a hidden case"),
        (_always_both, "a hidden case"),
        (_by_heart, "a hidden case"),
        (_reversed_warmup, "p-1-r forwards first"),
        (_calls_helper, "write the order yourself"),
        (_calls_alias, "write the order yourself"),
        (_two_args, "takes (p, m, rank)"),
        ([], "give a function"),
    ],
}
