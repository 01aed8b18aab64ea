"""Worked solutions to notebook 05's exercises (all-reduce from scratch)."""

# 05.1 The bytes rank 0 sends on the ring.
# 1000 float32 elements on N = 8 ranks: 8 chunks of 125 elements = 500 bytes each.
# The ring runs 2(N-1) = 14 steps (7 of reduce-scatter, 7 of all-gather) and rank 0 sends one
# chunk per step: 14 * 500 = 7000 bytes, that is 2(N-1)/N * 4000 (the tensor's bytes).
# `expected_p2p("ring", 1000, 4, 8, 0)["bytes_sent"]` says the same.
ANSWER_05_1 = 7000

# 05.2 Who owns which chunk after the reduce-scatter (N = 4).
# `ring_schedule`: at step s rank r receives chunk (r - s - 1) % N from rank r-1 and adds it.
# Its last receive, at step N-2 = 2, is chunk (r - 3) % 4 = (r + 1) % 4, which then holds every
# rank's share: rank 0 owns chunk 1, rank 1 chunk 2, rank 2 chunk 3, rank 3 chunk 0.
# In the picture: `ring_svg(ar.simulate_ring([[1]*4]*4).steps, 3)` has one green chunk per rank.
ANSWER_05_2 = {0: 1, 1: 2, 2: 3, 3: 0}

# 05.3 Where the ring starts to beat naive (α = 20 µs, β = 1 / 10 GB/s, N = 8).
# naive: (N-1)(α + nβ); ring: 2(N-1)α + 2(N-1)/N nβ. Equal when
#   (N-1)α + (N-1)nβ = 2(N-1)α + 2(N-1)/N nβ  ->  nβ (1 - 2/N) = α  ->  n = αN / ((N-2)β)
# = 20e-6 * 8 / (6 * 1e-10) ≈ 266,667 bytes (about 260 KiB). Above it the ring wins.
ANSWER_05_3 = 20e-6 * 8 / ((8 - 2) * (1 / 10e9))


# 05.4 The ring's reduce-scatter with send and recv.
def my_reduce_scatter(rank, world_size, inputs):
    """Reduce-scatter `inputs[rank]` on the ring; return (chunk index, its values)."""
    x = torch.tensor(inputs[rank], dtype=torch.float64)  # noqa: F821 (launch_source's prelude)
    chunks = list(torch.tensor_split(x, world_size))  # noqa: F821  views into x
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):
        send_i = (rank - step) % world_size  # the chunk completed one step ago (own at step 0)
        recv_i = (rank - step - 1) % world_size
        inbox = torch.empty_like(chunks[recv_i])  # noqa: F821
        # post both before waiting: two blocking sends facing each other could wait forever
        reqs = [dist.isend(chunks[send_i], right), dist.irecv(inbox, left)]  # noqa: F821
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
    "05.2": ANSWER_05_2,
    "05.3": ANSWER_05_3,
    "05.4": my_reduce_scatter,
    "05.5": ANSWER_05_5,
}

# typical wrong answers (the hint must contain the words given)


def _uses_all_reduce(rank, world_size, inputs):
    x = torch.tensor(inputs[rank], dtype=torch.float64)  # noqa: F821
    dist.all_reduce(x)  # noqa: F821
    return (rank + 1) % world_size, torch.tensor_split(x, world_size)[(rank + 1) % world_size]  # noqa: F821


def _no_inputs(rank, world_size):
    return rank, []


WRONG = {
    "05.1": [
        (1750, "elements"),
        (3500, "all-gather"),
        (8000, "never sends the whole tensor"),
    ],
    "05.2": [
        ({0: 0, 1: 1, 2: 2, 3: 3}, "sends its own chunk"),
        ({0: 3, 1: 0, 2: 1, 3: 2}, "direction"),
    ],
    "05.3": [
        (200_000.0, "α/β alone"),
        (0.2667, "MB"),
        (1e6, "faster"),
    ],
    "05.4": [
        (_uses_all_reduce, "do not call a collective"),
        (_no_inputs, "takes (rank, world_size, inputs)"),
    ],
    "05.5": [
        ((4000, 4000), "every other rank"),
        ((28000, 28000), "only the result"),
        ((7000, 1000), "elements"),
    ],
}
