"""Worked solutions to notebook 05's exercises (all-reduce from scratch)."""

from helpers import allreduce as ar

# 05.1 The bytes rank 0 sends on the ring.
# 1000 float32 elements on N = 8 ranks: 8 chunks of 125 elements = 500 bytes each.
# The ring runs 2(N-1) = 14 steps (7 of reduce-scatter, 7 of all-gather) and rank 0 sends one
# chunk per step: 14 * 500 = 7000 bytes, that is 2(N-1)/N * 4000 (the tensor's bytes).
# `expected_p2p("ring", 1000, 4, 8, 0)["bytes_sent"]` says the same.
ANSWER_05_1 = 7000


# 05.2 Whose shares arrive during the reduce-scatter.
# `ring_schedule`: at step s rank r sends chunk (r - s) % N to rank r+1: at step 0 its own share
# of chunk r, afterwards the chunk it received at step s-1 with its own share added. So what
# rank r receives at step s comes from rank r-1, which started it at step 0 with its left
# neighbour's chain: the shares of ranks r-1, r-2, ..., r-1-s. For N = 5, rank 2: [{1}, {0, 1},
# {0, 1, 4}, {0, 1, 3, 4}], to whose last chunk rank 2 adds its own share: complete.
def received_shares(n, rank):
    """For each of the N-1 reduce-scatter steps, the set of ranks whose shares the chunk `rank`
    receives at that step holds."""
    return [{(rank - 1 - k) % n for k in range(s + 1)} for s in range(n - 1)]


# 05.3 Where the ring starts to beat naive (α = 20 µs, β = 1 / 10 GB/s, N = 8 and N = 2).
# naive: (N-1)(α + nβ); ring: 2(N-1)α + 2(N-1)/N nβ. Equal when
#   (N-1)α + (N-1)nβ = 2(N-1)α + 2(N-1)/N nβ  ->  nβ (1 - 2/N) = α  ->  n = αN / ((N-2)β)
# (section 6's n*, derived there for its fit at N = 4; here the arithmetic with this α, β, N)
# N = 8: 20e-6 * 8 / (6 * 1e-10) ≈ 266,667 bytes (about 260 KiB). Above it the ring wins.
# N = 2: the formula divides by N-2 = 0, so go back to the two times: naive α + nβ, ring
# 2α + nβ. The byte terms are equal (2(N-1)/N = 1 = N-1), the ring has one more message: it is
# α slower at every size, and there is no crossover (None).
ANSWER_05_3 = (20e-6 * 8 / ((8 - 2) * (1 / 10e9)), None)


# 05.4 The ring's reduce-scatter with isend and irecv.
def my_reduce_scatter(rank, world_size, x):
    """Reduce-scatter this rank's 1-D tensor `x` on the ring; return (chunk index, its values)."""
    chunks = list(torch.tensor_split(x, world_size))  # noqa: F821 (prelude)  views into x
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send_i = (rank - step) % world_size  # the chunk completed one step ago (own at step 0)
        recv_i = (rank - step - 1) % world_size
        inbox = torch.empty_like(chunks[recv_i])  # noqa: F821
        # post both before waiting: two blocking sends facing each other could wait forever
        reqs = [dist.isend(chunks[send_i], dst=right), dist.irecv(inbox, src=left)]  # noqa: F821
        for req in reqs:
            req.wait()
        chunks[recv_i] += inbox  # add the left neighbour's partial sum to ours
    mine = (rank + 1) % world_size  # the last chunk received is now complete
    return mine, chunks[mine].tolist()


# 05.5 The master's busy link (1000 float32 elements = 4000 bytes, N = 8).
# `master_allreduce`: every rank r > 0 sends its whole tensor to rank 0 (rank 0 receives 7 of
# them: 28000 bytes), rank 0 adds them up and sends the result back to each (rank 1 receives
# one tensor: 4000 bytes). Rank 0's link carries N-1 = 7 times what rank 1's does.
ANSWER_05_5 = (7 * 4000, 4000)

SOLUTIONS = {
    "05.1": ANSWER_05_1,
    "05.2": received_shares,
    "05.3": ANSWER_05_3,
    "05.4": my_reduce_scatter,
    "05.5": ANSWER_05_5,
}

# typical wrong answers (the hint must contain the words given)


def _uses_all_reduce(rank, world_size, x):
    dist.all_reduce(x)  # noqa: F821
    return (rank + 1) % world_size, torch.tensor_split(x, world_size)[(rank + 1) % world_size]  # noqa: F821


def _no_inputs(rank, world_size):
    return rank, []


def _torch_chunk(rank, world_size, x):
    # a plausible bug: torch.chunk instead of torch.tensor_split. For 5 elements on 3 ranks both
    # cut 2, 2, 1; for 9 on 4, torch.chunk cuts 3, 3, 3 (three chunks, not four).
    chunks = list(torch.chunk(x, world_size))  # noqa: F821
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send_i, recv_i = (rank - step) % world_size, (rank - step - 1) % world_size
        inbox = torch.empty_like(chunks[recv_i])  # noqa: F821
        reqs = [dist.isend(chunks[send_i], right), dist.irecv(inbox, left)]  # noqa: F821
        for req in reqs:
            req.wait()
        chunks[recv_i] += inbox
    mine = (rank + 1) % world_size
    return mine, chunks[mine].tolist()


def _whole_ring(rank, world_size, x):
    # the notebook's whole ring all-reduce (2(N-1) sends), then the owned chunk, and a dead
    # dist.isend so that the source names a p2p call: the run-time watch counts the sends
    ar.ring_allreduce(x)
    mine = (rank + 1) % world_size
    if world_size < 0:
        dist.isend(x, 0)  # noqa: F821
    return mine, torch.tensor_split(x, world_size)[mine].tolist()  # noqa: F821


def _shares_by_heart(n, rank):
    # passes the shown case (N = 5, rank 2) by heart
    return [{1}, {0, 1}, {0, 1, 4}, {0, 1, 3, 4}]


def _shares_simulated(n, rank):
    from helpers.allreduce import simulate_ring as sim  # an alias: the watch sees the code

    steps = sim([[10**r] * n for r in range(n)]).steps
    return [
        set().union(*(steps[s + 1].owners[rank][c] - steps[s].owners[rank][c] for c in range(n)))
        for s in range(n - 1)
    ]


def _dummy_ring_then_process_group(rank, world_size, x):
    # the right sends on dummy buffers, then the default group's own all-reduce (not a
    # torch.distributed function): the dispatch-level watch sees the collective op
    import torch
    import torch.distributed as dist

    chunks = list(torch.tensor_split(x.clone(), world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send_i, recv_i = (rank - step) % world_size, (rank - step - 1) % world_size
        inbox = torch.empty_like(chunks[recv_i])
        for req in [dist.isend(chunks[send_i], dst=right), dist.irecv(inbox, src=left)]:
            req.wait()
    dist.distributed_c10d._get_default_group().allreduce([x]).wait()
    i = (rank + 1) % world_size
    return i, torch.tensor_split(x, world_size)[i]


WRONG = {
    "05.1": [
        (1750, "elements"),
        (3500, "all-gather"),
        (8000, "never sends the whole tensor"),
    ],
    "05.2": [
        (lambda n, rank: [{1, 2}, {0, 1, 2}, {0, 1, 2, 4}, {0, 1, 2, 3, 4}], "own share"),
        (lambda n, rank: [{1}, {0}, {4}, {3}], "adds its own share"),
        (
            lambda n, rank: [{(rank + 1 + k) % n for k in range(s + 1)} for s in range(n - 1)],
            "direction",
        ),
        (lambda n, rank: [1, 0, 4, 3], "not a chunk index"),
        (lambda n, rank: [{1}, {0, 1}, {0, 1, 4}], "N-1 = 4"),
        (lambda n, rank: [{1}, {1, 0}, {1, 0, 3}, {0, 1, 3, 4}], "Follow what rank 1 holds"),
        (_shares_by_heart, "a hidden case"),
        (_shares_simulated, "simulator"),
        ([{1}, {0, 1}, {0, 1, 4}, {0, 1, 3, 4}], "function"),
    ],
    "05.3": [
        ((200_000.0, None), "α/β alone"),
        ((0.2667, None), "MB"),
        ((1e6, None), "put in this α"),
        ((20e-6 * 8 / (7 * 1e-10), None), "N-2"),
        # N = 8 right, and n* = αN/((N-1)β) at N = 2 (the N-1 slip dodges the division by 0)
        ((266_667.0, 400_000.0), "compare them term by term"),
        ((266_667.0, 0.0), "compare them term by term"),
        ((None, None), "the ring does win above some size"),
        # the first part alone, as the exercise asked before it asked for N = 2
        (266_667.0, "give a pair"),
    ],
    "05.4": [
        (_uses_all_reduce, "do not call a collective"),
        (_dummy_ring_then_process_group, "collective"),
        (_no_inputs, "takes (rank, world_size, x)"),
        (_torch_chunk, "a hidden case"),
        (_whole_ring, "broke a rule of the ring"),
    ],
    "05.5": [
        ((4000, 4000), "every other rank"),
        ((28000, 28000), "only the result"),
        ((7000, 1000), "elements"),
    ],
}
