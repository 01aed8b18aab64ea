"""Judges for notebook 17 (context and expert parallelism): causal work, zig-zag, ring bytes, MoE.

The truths come from `helpers.context_parallel` (`chunks_of` and the skip rule of
`block_attention`, counted by `work_grid`-style enumeration for 17.1; `chunks_of` for 17.2; the
shape of the tensor `ring_attention` shifts for 17.3) and `helpers.expert_parallel` (17.4, 17.5).
No judge launches processes.
"""

from __future__ import annotations

import math
from typing import Any

from helpers import context_parallel as cp
from helpers import expert_parallel as ep
from helpers.exercises import Hint, as_int, exercise, tr

WORK_S, WORK_N = 64, 8  # 17.1
ZZ_S, ZZ_N, ZZ_RANK = 32, 4, 1  # 17.2
RING_B, RING_H, RING_S, RING_D, RING_N, RING_BYTES = 1, 8, 4096, 64, 4, 4  # 17.3


def causal_work(seq_len: int, world_size: int, layout: str) -> list[int]:
    """Score entries per rank under a causal mask, enumerated with ring_attention's skip rule."""
    work = []
    for rank in range(world_size):
        total = 0
        for qs, qn in cp.chunks_of(seq_len, world_size, rank, layout):
            for owner in range(world_size):
                for ks, kn in cp.chunks_of(seq_len, world_size, owner, layout):
                    if ks <= qs + qn - 1:  # block_attention skips a block only above this
                        total += qn * kn
        work.append(total)
    return work


def _int_list(answer: Any, length: int, what: str) -> list[int]:
    if not isinstance(answer, (list, tuple)) or any(as_int(a) is None for a in answer):
        raise Hint(tr("give a list of whole numbers, {what}", what=what))
    if len(answer) != length:
        raise Hint(tr("give {n} numbers, {what}", n=length, what=what))
    return [as_int(a) for a in answer]


@exercise("17.1", "Causal work per rank, contiguous split, N = 8")
def causal_work_exercise(answer: Any) -> str:
    got = _int_list(answer, WORK_N, tr("one per rank, rank 0 first"))
    truth = causal_work(WORK_S, WORK_N, "contiguous")
    c = WORK_S // WORK_N
    if got == truth:
        return tr(
            "rank r computes r+1 blocks of (S/N)^2 = {c2} entries: {truth}; the last rank does "
            "{ratio:.2f} times the mean, 2N/(N+1)",
            c2=c * c,
            truth=truth,
            ratio=max(truth) / (sum(truth) / WORK_N),
        )
    if got == truth[::-1]:
        raise Hint(tr("reversed: rank 0 holds the first tokens, which see the fewest keys"))
    if got == [c * c * WORK_N] * WORK_N or got == [WORK_S * WORK_S // WORK_N] * WORK_N:
        raise Hint(tr("that is the non-causal work: a causal rank skips blocks above the diagonal"))
    if got == [r * c * c for r in range(WORK_N)]:
        raise Hint(tr("count the diagonal block too: rank r computes blocks 0..r"))
    unmasked = [sum(range(r * c + 1, (r + 1) * c + 1)) for r in range(WORK_N)]
    if got == unmasked:
        raise Hint(
            tr("those are the unmasked pairs; a diagonal block is computed in full, masked inside")
        )
    raise Hint(tr("rank r holds queries [r S/N, (r+1) S/N) and needs the blocks of ranks 0..r"))


@exercise("17.2", "Rank 1's tokens, zig-zag, S = 32, N = 4")
def zigzag_tokens(answer: Any) -> str:
    got = _int_list(
        answer, len(answer) if isinstance(answer, (list, tuple)) else 0, tr("positions")
    )
    pieces = cp.chunks_of(ZZ_S, ZZ_N, ZZ_RANK, "zigzag")
    truth = [t for s, n in pieces for t in range(s, s + n)]
    if got == truth:
        return tr(
            "2N = 8 chunks of 4: rank 1 holds chunk 1 ({a}) and chunk 2N-1-1 = 6 ({b}): "
            "one from the head, one from the tail",
            a=truth[:4],
            b=truth[4:],
        )
    if sorted(got) == sorted(truth):
        raise Hint(tr("the right tokens in another order: the head chunk first, then the tail one"))
    if got == list(range(8, 16)):
        raise Hint(tr("that is the contiguous split: zig-zag cuts the sequence into 2N chunks"))
    if got == [4, 5, 6, 7, 28, 29, 30, 31] or got == [0, 1, 2, 3, 28, 29, 30, 31]:
        raise Hint(tr("the tail chunk of rank r is chunk 2N-1-r, counted from 0"))
    raise Hint(tr("cut 32 tokens into 2N = 8 chunks of 4; rank r holds chunks r and 2N-1-r"))


@exercise("17.3", "Bytes one rank sends round the ring in forward")
def ring_bytes(answer: Any) -> str:
    a = as_int(answer)
    if a is None:
        raise Hint(tr("give a whole number of bytes"))
    block = 2 * RING_B * RING_H * (RING_S // RING_N) * RING_D * RING_BYTES  # K and V, stacked
    truth = (RING_N - 1) * block
    if a == truth:
        return tr(
            "N-1 = {n1} shifts of K and V stacked, (2, B, H, S/N, D) float32 = {block} bytes "
            "each: {truth} bytes (backward sends as much again, the gradients)",
            n1=RING_N - 1,
            block=block,
            truth=truth,
        )
    if a == RING_N * block:
        raise Hint(tr("the last block is used, not passed on: N-1 shifts, not N"))
    if a == truth // 2:
        raise Hint(tr("K and V both travel (stacked into one tensor)"))
    if a == 2 * truth:
        raise Hint(tr("forward only: backward's gradient shifts are not asked for"))
    if a == (RING_N - 1) * block * RING_N:
        raise Hint(tr("per rank, not for all ranks together"))
    if a == (RING_N - 1) * block // RING_N:
        raise Hint(tr("a block is S/N tokens of K and of V: do not divide by N twice"))
    raise Hint(tr("what moves per shift: K and V of S/N tokens, B x H x D each, 4 bytes a value"))


EP_TOKENS, EP_K, EP_HIDDEN, EP_RANKS, EP_BYTES = 4096, 2, 4096, 8, 2  # 17.4
CAP_FACTOR = 1.25  # 17.5


@exercise("17.4", "Bytes an expert-parallel step sends at scale")
def ep_step_bytes(answer: Any) -> str:
    a = as_int(answer)
    truth = ep.balanced_bytes_estimate(EP_TOKENS, EP_K, EP_HIDDEN, EP_RANKS, EP_BYTES)
    if a is None:
        raise Hint(tr("give a whole number of bytes"))
    if a == truth:
        return tr(
            "4 exchanges (dispatch, combine and their backwards) x k T rows x h x 2 bytes, "
            "(N-1)/N of them to other ranks: {truth} bytes, about {mib:.0f} MiB per MoE layer",
            truth=int(truth),
            mib=truth / 2**20,
        )
    full = truth * EP_RANKS / (EP_RANKS - 1)
    if a == full:
        raise Hint(tr("a rank's own split never leaves it: only (N-1)/N of the rows travel"))
    if a == truth / 2:
        raise Hint(
            tr(
                "backward exchanges as much again: the gradients of the dispatched and the "
                "combined rows go back the other way"
            )
        )
    if a == truth / 4:
        raise Hint(tr("count the combine too (results go back), and the backward of both"))
    if a == truth * 2:
        raise Hint(tr("bf16 is 2 bytes per value, not 4"))
    raise Hint(tr("work it out per exchange: rows sent off-rank x h x bytes per value"))


@exercise("17.5", "Capacity and dropped assignments")
def ep_capacity(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"capacity", "dropped"}:
        raise Hint(tr('give a dict {{"capacity": C, "dropped": n}}'))
    c, d = as_int(answer["capacity"]), as_int(answer["dropped"])
    if c is None or d is None:
        raise Hint(tr("the capacity and the dropped count are whole numbers"))
    truth = ep.capacity(ep.TOKENS, ep.TOP_K, ep.EXPERTS, CAP_FACTOR)
    wanted = ep.TOKENS  # every token picks expert 0 once
    if c != truth:
        if c == math.floor(CAP_FACTOR * ep.TOKENS * ep.TOP_K / ep.EXPERTS):
            raise Hint(tr("the capacity is rounded up (ceil): read ep.capacity"))
        if c == ep.capacity(ep.TOKENS, 1, ep.EXPERTS, CAP_FACTOR):
            raise Hint(tr("each token makes k = 2 assignments: C = ceil(factor x T x k / E)"))
        raise Hint(tr("C = ceil(capacity_factor x T x k / E): show_source(ep.capacity)"))
    if d != wanted - truth:
        raise Hint(tr("expert 0 receives {w} assignments and keeps the first C of them", w=wanted))
    return tr(
        "C = ceil(1.25 x 12 x 2 / 4) = ceil(7.5) = {c}; expert 0 gets 12 assignments, keeps {c}, "
        "drops {d}",
        c=truth,
        d=wanted - truth,
    )
