"""Worked solutions to notebook 04's exercises (process groups and collectives)."""

# 04.1 What reduce_scatter leaves on each rank.
# Rank r holds torch.arange(3.) * (r + 1) (the factor is r + 1, so rank 0 is not all zeros):
#   rank 0: [0, 1, 2]    rank 1: [0, 2, 4]    rank 2: [0, 3, 6]
# reduce_scatter SUMs element-wise over the ranks: [0, 6, 12], then rank i keeps element i
# (the output tensor has world_size times fewer elements than the input: one here).
ANSWER_04_1 = [[0.0], [6.0], [12.0]]

# 04.2 torchrun's RANK when nodes differ.
# Nodes with GROUP_RANK 0, 1, 2 run 4, 2 and 4 workers. `_assign_worker_ranks` gives each node
# a base = the sum of the local world sizes of the nodes before it: node 2's base is 4 + 2 = 6.
# LOCAL_RANK 1 there is RANK 6 + 1 = 7. WORLD_SIZE is every worker: 4 + 2 + 4 = 10.
# (GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = 2 * 4 + 1 = 9 would be wrong: node 1 has 2.)
ANSWER_04_2 = (7, 10)

# 04.3 DistributedSampler's shards, unshuffled.
# DistributedSampler.__iter__ (shuffle=False, drop_last=False): indices = [0..9]; the total
# size is ceil(10 / 4) * 4 = 12, so the list is padded with its first 2 indices: [0..9, 0, 1].
# Then rank r takes indices[r:12:4].
ANSWER_04_3 = [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]


# 04.4 all_reduce from reduce and broadcast.
def my_all_reduce(rank, world_size):
    """Start from [rank + 1, 10 * (rank + 1)]; return what all_reduce(SUM) leaves, as a list."""
    t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])  # noqa: F821 (launch_source's prelude)
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)  # noqa: F821  the sum lands on rank 0 only
    dist.broadcast(t, src=0)  # noqa: F821  rank 0 sends it to everyone
    return t.tolist()


SOLUTIONS = {
    "04.1": ANSWER_04_1,
    "04.2": ANSWER_04_2,
    "04.3": ANSWER_04_3,
    "04.4": my_all_reduce,
}


# typical wrong answers (the hint must contain the words given)


def _uses_all_reduce(rank, world_size):
    t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])  # noqa: F821
    dist.all_reduce(t)  # noqa: F821
    return t.tolist()


WRONG = {
    "04.1": [
        ([[0.0, 6.0, 12.0]] * 3, "all_reduce"),
        ([0.0, 2.0, 6.0], "sums the inputs"),
        ([18.0, 18.0, 18.0], "element-wise"),
    ],
    "04.2": [
        ((9, 10), "same number of workers"),
        ((7, 4), "LOCAL_WORLD_SIZE"),
        ((6, 10), "add the LOCAL_RANK"),
    ],
    "04.3": [
        ([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]], "contiguous"),
        ([[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]], "pads"),
    ],
    "04.4": [
        (_uses_all_reduce, "do not call dist.all_reduce"),
    ],
}
