"""Worked solutions to notebook 19's exercises (when distributed training hangs)."""

# 19.1 fr_entries of the three dumps agree on 1 gloo:all_reduce and 2 gloo:broadcast; at 3,
# ranks 0 and 2 record gloo:all_reduce and rank 1 gloo:broadcast. analyze_dumps(dumps,
# ranks=[0, 1, 2]) marks sequence number 3 and blames rank 1 (it differs from rank 0's entry,
# and here rank 0 agrees with rank 2, so the blame is right).
MYSTERY = (1, 3, "broadcast")

# 19.2 monitored_barrier's docstring: with wait_all_ranks=False rank 0 "will throw on the first
# failed rank it encounters"; with True it "will collect all failed ranks". Rank 0 waits for the
# ranks in order, so the first late one is rank 2 ("Rank 2 failed to pass monitoredBarrier";
# with True, "Ranks 2, 3 failed").
LATE = ({2}, {2, 3})

# 19.3 Ranks 0, 2 and 3 each write job/0/<rank> and wait for the others; rank 1's key never
# comes, and each waiting rank names it: "wait timeout after ...ms, keys: /job/0/1".
STORE = (["job/0/0", "job/0/2", "job/0/3"], "/job/0/1")

SOLUTIONS = {"19.1": MYSTERY, "19.2": LATE, "19.3": STORE}

WRONG = {
    "19.1": [
        ((0, 3, "all_reduce"), "odd one out"),
        ((1, 2, "broadcast"), "first sequence number"),
        ((1, 3, "all_reduce"), "profiling_name"),
        ("rank 1", "tuple"),
    ],
    "19.2": [
        (({2, 3}, {2, 3}), "first failed rank"),
        (({3}, {2, 3}), "rank order"),
        (({2}, {2}), "collects all"),
        (({0, 2}, {0, 2, 3}), "never names itself"),
        ({2}, "two sets"),
    ],
    "19.3": [
        ((["job/0/0", "job/0/1", "job/0/2", "job/0/3"], "/job/0/1"), "wrote no key"),
        ((["job/0/0"], "/job/0/1"), "every rank that arrived"),
        ((["job/0/0", "job/0/2", "job/0/3"], "/job/0/3"), "missing rank"),
        (("job/0/0", "/job/0/1"), "list of strings"),
    ],
}
