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
