"""Judges for notebook 05's exercises (all-reduce from scratch).

Each judge computes the right answer from this project's model of the ring, which the notebook
checks against `dist.all_reduce` and the p2p byte counters: `expected_p2p` for bytes,
`simulate_ring` (the schedule `ring_allreduce` runs) for who owns what, `alpha_beta_time` for
the crossover; the reader's reduce-scatter runs on 3 ranks through `launch_source`.
Worked solutions: solutions/nb05.py.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from helpers import allreduce as ar
from helpers.exercises import Hint, as_int, exercise, launch_source, tr

# 05.1: the ring's bytes
NUMEL, ITEMSIZE, WORLD = 1000, 4, 8


def _number(answer: Any, what: str) -> float:
    if as_int(answer) is not None:  # 7, 7.0 and numpy.int64(7) alike
        return float(as_int(answer))
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Hint(
            tr(
                "give {what} as a number, found {found_type}",
                what=what,
                found_type=type(answer).__name__,
            )
        )
    return float(answer)


@exercise("05.1", "The bytes rank 0 sends on the ring")
def ring_bytes(answer: Any) -> str:
    found = _number(answer, tr("the bytes"))
    truth = ar.expected_p2p("ring", NUMEL, ITEMSIZE, WORLD, 0)["bytes_sent"]
    nbytes, chunk = NUMEL * ITEMSIZE, NUMEL // WORLD * ITEMSIZE
    if found == truth:
        return tr(
            (
                "{steps} steps (reduce-scatter, then all-gather) of one {chunk}-byte "
                "chunk: {truth} bytes, 2(N-1)/N of the tensor's {nbytes}"
            ),
            steps=2 * (WORLD - 1),
            chunk=chunk,
            truth=truth,
            nbytes=nbytes,
        )
    if found == truth / ITEMSIZE:
        raise Hint(
            tr("that counts elements; a float32 element is {itemsize} bytes", itemsize=ITEMSIZE)
        )
    if found == truth / 2:
        raise Hint(
            tr(
                "that is the reduce-scatter alone: the all-gather sends as many chunks again "
                "(`ring_schedule` has 2(N-1) steps)"
            )
        )
    if found in (nbytes, 2 * nbytes, (WORLD - 1) * nbytes):
        raise Hint(
            tr(
                "the ring never sends the whole tensor: each step sends one chunk of n/N "
                "bytes (section 5's formula 2(N-1)/N n)"
            )
        )
    raise Hint(
        tr(
            (
                "count the steps (`ring_schedule`: 2(N-1) of them) times the bytes of one chunk "
                "({numel} float32 elements cut into {world} chunks)"
            ),
            numel=NUMEL,
            world=WORLD,
        )
    )


# 05.2: who owns which complete chunk after the reduce-scatter
RS_RANKS = 4


def _owners_after_reduce_scatter(n: int) -> dict[int, int]:
    sim = ar.simulate_ring([[10**r] * n for r in range(n)])
    mid = sim.steps[n - 1]  # after the N-1 reduce-scatter steps
    return {r: c for r in range(n) for c in range(n) if len(mid.owners[r][c]) == n}


@exercise("05.2", "Who owns which chunk after the reduce-scatter")
def reduce_scatter_owners(answer: Any) -> str:
    if isinstance(answer, (list, tuple)) and len(answer) == RS_RANKS:
        answer = dict(enumerate(answer))  # [chunk of rank 0, chunk of rank 1, ...]
    if not isinstance(answer, dict):
        raise Hint(
            tr(
                "give a dict {{rank: chunk}} for ranks 0..3, found {found_type}",
                found_type=type(answer).__name__,
            )
        )
    truth = _owners_after_reduce_scatter(RS_RANKS)
    if sorted(answer) != list(range(RS_RANKS)):
        raise Hint(
            tr(
                "give one entry per rank, keys 0..{last}; found {keys}",
                last=RS_RANKS - 1,
                keys=sorted(answer),
            )
        )
    found = {r: int(c) for r, c in answer.items()}
    if found == truth:
        return tr(
            (
                "after step N-1 = {last_step} rank r holds chunk (r + 1) % N complete: "
                "{truth}; it received that chunk last, from rank r-1, and added its own share"
            ),
            last_step=RS_RANKS - 1,
            truth=truth,
        )
    if found == {r: r for r in range(RS_RANKS)}:
        raise Hint(
            tr(
                "rank r SENDS its own chunk r first and never gets it back during the "
                "reduce-scatter; look at the green chunks of `ring_svg(sim.steps, N - 1)`"
            )
        )
    if found == {r: (r - 1) % RS_RANKS for r in range(RS_RANKS)}:
        raise Hint(tr("wrong direction: rank r sends to rank r+1 (`ring_schedule`), not to r-1"))
    raise Hint(
        tr(
            "run `simulate_ring` on 4 ranks and look at step 3 (`ring_step_text` marks a "
            "complete chunk with *, `ring_svg` colours it green)"
        )
    )


# 05.3: the alpha-beta crossover of ring and naive
ALPHA, BETA, AB_WORLD = 20e-6, 1 / 10e9, 8


def _crossover() -> float:
    """The size (bytes) where the modelled ring and naive times are equal, by bisection."""

    def gap(s: float) -> float:
        return ar.alpha_beta_time("ring", s, AB_WORLD, ALPHA, BETA) - ar.alpha_beta_time(
            "naive", s, AB_WORLD, ALPHA, BETA
        )

    lo, hi = 1.0, 1e12
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


@exercise("05.3", "Where the ring starts to beat naive")
def ring_beats_naive(answer: Any) -> str:
    found = _number(answer, tr("the size in bytes"))
    truth = _crossover()
    if abs(found - truth) <= 0.02 * truth:
        return tr(
            (
                "about {truth:,.0f} bytes: (N-1)(α + nβ) = 2(N-1)α + 2(N-1)/N nβ gives n = αN "
                "/ ((N-2)β); below it the ring's {extra_steps} extra messages (latencies) cost "
                "more than the bytes it saves"
            ),
            truth=truth,
            extra_steps=AB_WORLD - 1,
        )
    if abs(found - ALPHA / BETA) <= 0.02 * ALPHA / BETA:
        raise Hint(
            tr(
                "that is α/β alone; the ring sends 2(N-1)/N n bytes, naive (N-1) n: solve "
                "(N-1)(α + nβ) = 2(N-1)α + 2(N-1)/N nβ for n"
            )
        )
    for unit, factor in (("kB", 1e3), ("MB", 1e6), ("KiB", 1024), ("MiB", 2**20)):
        if abs(found * factor - truth) <= 0.02 * truth:
            raise Hint(tr("that looks like {unit}: give the size in bytes", unit=unit))
    side = tr("faster") if found > truth else tr("slower")
    raise Hint(
        tr(
            (
                "at {found:,.0f} bytes the ring is still {side} than naive in the model; "
                "`alpha_beta_time` on both sides of your answer tells you which way to go"
            ),
            found=found,
            side=side,
        )
    )


# 05.4: the reduce-scatter on send/recv, on RS_WORLD ranks
RS_WORLD = 3  # three ranks: two steps, so the chunk indices must follow the schedule
RS_INPUTS = [[10**r * (i + 1) for i in range(5)] for r in range(RS_WORLD)]
_P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"}
_COLLECTIVES = {"all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce", "all_gather"}


def _calls(fn: Any) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


@exercise("05.4", "The ring's reduce-scatter with send and recv")
def reduce_scatter_on_p2p(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                "give a function my_reduce_scatter(rank, world_size, inputs), found {answer!r}",
                answer=answer,
            )
        )
    params = list(inspect.signature(answer).parameters)
    if len(params) != 3:
        raise Hint(
            tr("the function takes (rank, world_size, inputs); yours takes {params}", params=params)
        )
    calls = _calls(answer)
    if calls & _COLLECTIVES:
        raise Hint(
            tr(
                (
                    "do not call a collective ({collectives}): move the chunks "
                    "yourself with dist.send/dist.recv (or isend/irecv), as `ring_allreduce` does"
                ),
                collectives=sorted(calls & _COLLECTIVES),
            )
        )
    if not calls & _P2P:
        raise Hint(tr("the ranks must exchange chunks: use dist.isend/dist.irecv (or send/recv)"))
    n = len(RS_INPUTS)
    found = list(launch_source(answer, world_size=n, args=(RS_INPUTS,), timeout_s=90))
    sim = ar.simulate_ring(RS_INPUTS)
    mid = sim.steps[n - 1]
    truth = [((r + 1) % n, list(mid.values[r][(r + 1) % n])) for r in range(n)]
    got = [(int(i), [float(v) for v in vals]) for i, vals in found]
    if got == [(i, [float(v) for v in vals]) for i, vals in truth]:
        chunks = tr(", ").join(
            tr("rank {r}: chunk {i} = {vals}", r=r, i=i, vals=vals)
            for r, (i, vals) in enumerate(truth)
        )
        return tr(
            "each rank ends with one chunk summed over all {n} ranks: {chunks}", n=n, chunks=chunks
        )
    if [i for i, _ in got] != [i for i, _ in truth]:
        raise Hint(
            tr(
                (
                    "ranks returned chunks {got_chunks}; after N-1 steps rank r holds chunk "
                    "(r + 1) % N complete (`ring_schedule`: at step s it receives chunk (r - s - "
                    "1) % N)"
                ),
                got_chunks=[i for i, _ in got],
            )
        )
    raise Hint(
        tr(
            (
                "right chunks, wrong values: {got}; at each step ADD the received chunk to your "
                "own copy of it, and send the chunk you completed the step before"
            ),
            got=got,
        )
    )


# 05.5: the master's bottleneck, in bytes
MASTER_WORLD = 8


@exercise("05.5", "The master's busy link")
def master_bytes(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair: (bytes rank 0 receives, bytes rank 1 receives)"))
    root, other = (_number(a, tr("each count of bytes")) for a in answer)
    truth = tuple(
        ar.expected_p2p("master", NUMEL, ITEMSIZE, MASTER_WORLD, r)["bytes_received"]
        for r in (0, 1)
    )
    nbytes = NUMEL * ITEMSIZE
    if (root, other) == truth:
        return tr(
            (
                "rank 0 receives {truth_0} bytes, N-1 = {tensors} whole tensors, rank "
                "1 only the result ({truth_1}): the master's link carries N-1 times the "
                "traffic of any other, which is what the ring spreads out"
            ),
            truth_0=truth[0],
            tensors=MASTER_WORLD - 1,
            truth_1=truth[1],
        )
    if root == other == nbytes:
        raise Hint(tr("rank 0 receives a whole tensor from EVERY other rank, not just one"))
    if root == other:
        raise Hint(tr("rank 1 receives only the result from rank 0: one tensor"))
    if root == truth[0] / ITEMSIZE or other == truth[1] / ITEMSIZE:
        raise Hint(
            tr("that counts elements; a float32 element is {itemsize} bytes", itemsize=ITEMSIZE)
        )
    raise Hint(
        tr(
            (
                "read `master_allreduce` (section 2): who sends what to whom, in whole tensors of "
                "{nbytes} bytes"
            ),
            nbytes=nbytes,
        )
    )
