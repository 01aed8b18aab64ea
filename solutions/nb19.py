"""Worked solutions to notebook 19's exercises (when distributed training hangs)."""

# 19.1 fr_entries of the three dumps agree on 1 gloo:all_reduce and 2 gloo:broadcast; at 3,
# rank 0 records gloo:broadcast and ranks 1 and 2 gloo:all_reduce. Two ranks agree, so rank 0
# is the odd one. analyze_dumps(dumps, ranks=[0, 1, 2]) marks sequence number 3 but takes rank
# 0's entry as the expected one, so it blames ranks 1 and 2: its culprit is not the answer.
MYSTERY = (0, 3, "broadcast")

# 19.2 monitored_barrier's docstring: with wait_all_ranks=False rank 0 "will throw on the first
# failed rank it encounters"; it checks the ranks in order, so it names rank 2 ("Rank 2 failed
# to pass monitoredBarrier"). Under DETAIL the wrapper's check before the all_reduce is a
# monitored barrier called with waitAllRanks true (section 2 quotes ProcessGroupWrapper.cpp),
# so with ranks 2 and 3 skipping it names both ("Ranks 2, 3 failed").
LATE = ({2}, {2, 3})

# 19.3 Ranks 0 and 2 each write job/0/<rank> and wait for the others' keys; ranks 1 and 3 write
# none. Each waiting rank names one key, the first missing one in rank order:
# "wait timeout after ...ms, keys: /job/0/1"; rank 3's key is not named.
STORE = (["job/0/0", "job/0/2"], "/job/0/1")

SOLUTIONS = {"19.1": MYSTERY, "19.2": LATE, "19.3": STORE}

WRONG = {
    "19.1": [
        ((1, 3, "all_reduce"), "expected one"),
        ((2, 3, "all_reduce"), "Count how many"),
        ((0, 2, "broadcast"), "first sequence number"),
        ((0, 3, "all_reduce"), "profiling_name"),
        ((5, 3, "broadcast"), "ranks 0 to 2"),
        ("rank 0", "tuple"),
    ],
    "19.2": [
        (({2, 3}, {2, 3}), "first failed rank"),
        (({3}, {2, 3}), "rank order"),
        (({2}, {2}), "waitAllRanks"),
        (({0, 2}, {0, 2, 3}), "never names itself"),
        ({2}, "two sets"),
    ],
    "19.3": [
        ((["job/0/0", "job/0/1", "job/0/2", "job/0/3"], "/job/0/1"), "wrote no key"),
        ((["job/0/0"], "/job/0/1"), "every rank that arrived"),
        ((["job/0/0", "job/0/2"], "/job/0/3"), "reach first"),
        ((["job/0/0", "job/0/2"], "/job/0/0"), "never came"),
        ((["job/0/0", "job/0/2"], ["/job/0/1", "/job/0/3"]), "one key"),
        (("job/0/0", "/job/0/1"), "list of strings"),
    ],
}


# 19.4 Where the ranks part is the first sequence number at which their entries do not all name
# the same op (a rank with no entry there, stuck before that collective or behind, differs
# too, and so does a rank ahead of the others, which alone has an entry); who is the odd one out
# is a vote: the op (or absence) most ranks record there is the majority's, and the rank whose
# entry differs from it is the culprit. Where two ops tie for the most ranks (2 ranks, one each,
# as in section 3), the dumps say where, not who: None. torch's analyzer instead takes the first
# rank's entry as the expected one, so on 19.1's dumps it blames ranks 1 and 2.
def culprit(dumps):
    """(rank, collective_seq_id) of the odd rank (the one whose entry differs from most ranks')
    at the first sequence number where they do not all agree; None on a tie."""
    from collections import Counter

    ops = [{e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for d in dumps]
    for seq in sorted(set().union(*ops)):
        at = [o.get(seq) for o in ops]  # None: this rank recorded nothing there
        if len(set(at)) > 1:
            top = Counter(at).most_common(2)
            if top[0][1] == top[1][1]:
                return None
            return next(r for r, op in enumerate(at) if op != top[0][0]), seq
    return None


def culprit_no_tie_rule(dumps):
    """The vote without a tie rule: on a tie it picks whichever op `max` meets first."""
    ops = [{e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for d in dumps]
    for seq in sorted(set().union(*ops)):
        at = [o.get(seq) for o in ops]
        if len(set(at)) > 1:
            common = max(at, key=at.count)
            return next(r for r, op in enumerate(at) if op != common), seq
    return None


def culprit_fewest_next(dumps):
    """The rank with the fewest entries, at its last seq + 1; else the minority op: wrong for a
    rank ahead and for a rank that differs and then stops."""
    lengths = [len(d["entries"]) for d in dumps]
    if len(set(lengths)) > 1:
        r = lengths.index(min(lengths))
        return r, dumps[r]["entries"][-1]["collective_seq_id"] + 1
    return culprit(dumps)


def culprit_missing_is_culprit(dumps):
    """A rank with no entry at a sequence number is the culprit; else the minority op: wrong for a
    rank ahead, where the ranks with no entry are the majority."""
    ops = [{e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for d in dumps]
    for seq in sorted(set().union(*ops)):
        at = [o.get(seq) for o in ops]
        if None in at:
            return at.index(None), seq
        if len(set(at)) > 1:
            return next(r for r, op in enumerate(at) if at.count(op) == 1), seq
    return None


def culprit_verbose(dumps, verbose=False):
    """The worked culprit with an extra defaulted parameter: accepted."""
    return culprit(dumps)


def culprit_by_heart(dumps):
    """19.1's answer, whatever the dumps."""
    return (0, 3)


def culprit_first_rank_expected(dumps):
    """The analyzer's rule: the first rank's entry is the expected one."""
    first = {e["collective_seq_id"]: e["profiling_name"] for e in dumps[0]["entries"]}
    for seq in sorted(first):
        for r, d in enumerate(dumps[1:], start=1):
            ops = {e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]}
            if ops.get(seq) != first[seq]:
                return r, seq
    return None


def culprit_common_only(dumps):
    """Compares ops only where every rank has an entry: misses a rank that is behind."""
    ops = [{e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for d in dumps]
    common = set.intersection(*(set(o) for o in ops))
    for seq in sorted(common):
        at = [o[seq] for o in ops]
        if len(set(at)) > 1:
            return next(r for r, op in enumerate(at) if at.count(op) == 1), seq
    return 0, max(common)


def culprit_last_entry(dumps):
    """The rank with the fewest entries, at its last one: off by one for a rank behind, and
    no help when every rank recorded as many."""
    lengths = [len(d["entries"]) for d in dumps]
    if len(set(lengths)) == 1:
        return culprit(dumps)
    r = lengths.index(min(lengths))
    return r, dumps[r]["entries"][-1]["collective_seq_id"]


def culprit_analyzer(dumps):
    """Hands the dumps to torch's analyzer."""
    from helpers import hangs

    return hangs.analyze_dumps(dumps, ranks=list(range(len(dumps))))


SOLUTIONS["19.4"] = culprit
WRONG["19.4"] = [
    (culprit_by_heart, "a hidden case"),
    (culprit_common_only, "a hidden case"),
    (culprit_last_entry, "a hidden case"),
    (culprit_no_tie_rule, "a hidden case"),
    (culprit_fewest_next, "a hidden case"),
    (culprit_missing_is_culprit, "a hidden case"),
    (culprit_first_rank_expected, "whose entry differs"),
    (culprit_analyzer, "yourself"),
    (lambda dumps, rank: (0, 3), "one argument"),
    (lambda dumps: (0, 3, "broadcast"), "pair (rank, sequence number)"),
    ((0, 3), "function"),
]
