"""Judges for notebook 19 (when distributed training hangs); see helpers.exercises.

19.1's truth is the construction of its hung job (`helpers.hangs.MYSTERY`), 19.2's what
`monitored_barrier`'s docstring says of `wait_all_ranks`, 19.3's the keys gloo's rendezvous
writes (`job/0/<rank>` under the worker's prefix `job`); tests/test_hangs.py runs each of these
jobs and checks that the tools read them as the judges say. No judge launches processes.
"""

from __future__ import annotations

from typing import Any

from helpers.exercises import Hint, as_int, exercise, tr
from helpers.hangs import MYSTERY

LATE = {2, 3}  # 19.2: the ranks of 4 that never reach rank 0's monitored_barrier
RENDEZVOUS_WORLD, RENDEZVOUS_MISSING = 4, 1  # 19.3


def rendezvous_truth() -> tuple[list[str], str]:
    """(the keys the store holds, the key the waiting ranks name) for 19.3's rendezvous."""
    keys = [f"job/0/{r}" for r in range(RENDEZVOUS_WORLD) if r != RENDEZVOUS_MISSING]
    return keys, f"/job/0/{RENDEZVOUS_MISSING}"


@exercise("19.1", "which rank and which collective hang the job")
def mystery(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise Hint(tr("answer with a tuple (rank, sequence number, op), e.g. (0, 1, 'barrier')"))
    rank, seq, op = as_int(answer[0]), as_int(answer[1]), str(answer[2]).removeprefix("gloo:")
    truth = (MYSTERY["rank"], MYSTERY["seq"], MYSTERY["op"])
    if (rank, seq, op) == truth:
        return tr(
            "rank {rank} calls {op} at sequence number {seq} where ranks 0 and 2 call "
            "all_reduce: the first {before} entries agree on every rank, as the analyzer finds.",
            rank=truth[0],
            op=truth[2],
            seq=truth[1],
            before=truth[1] - 1,
        )
    if rank is None or seq is None:
        raise Hint(tr("the rank and the sequence number are whole numbers"))
    if seq != truth[1]:
        raise Hint(
            tr(
                "look for the first sequence number (collective_seq_id) whose op differs "
                "between the ranks' entries; the earlier ones agree"
            )
        )
    if rank != truth[0]:
        raise Hint(
            tr(
                "two of the three ranks call the same op there: the odd one out is the rank "
                "whose op differs from the other two"
            )
        )
    raise Hint(tr("the op is the one the odd rank's entry names (its profiling_name)"))


@exercise("19.2", "the ranks monitored_barrier names")
def every_late_rank(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with two sets: (named with False, named with True)"))
    try:
        first, every = ({as_int(r) for r in part} for part in answer)
    except TypeError:
        raise Hint(tr("answer with two sets of ranks, e.g. ({1}, {1, 2})")) from None
    truth = ({min(LATE)}, set(LATE))
    if (first, every) == truth:
        return tr(
            "with wait_all_ranks=False rank 0 throws on the first failed rank it meets (rank "
            "{first}); with True it collects every failed rank ({every}).",
            first=min(LATE),
            every=sorted(LATE),
        )
    if 0 in first | every:
        raise Hint(tr("rank 0 is the rank that waits and reports; it never names itself"))
    if first == set(LATE):
        raise Hint(tr("with False, rank 0 throws on the first failed rank it meets, in rank order"))
    if first != {min(LATE)}:
        raise Hint(tr("rank 0 checks the other ranks in rank order: which late rank comes first?"))
    raise Hint(tr("with wait_all_ranks=True it collects all failed ranks before it throws"))


@exercise("19.3", "what the store holds when a rank never arrives")
def store_keys(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with a tuple (sorted list of keys, the key named)"))
    keys, named = answer
    if isinstance(keys, str) or not isinstance(keys, (list, tuple, set)):
        raise Hint(tr("the keys are a list of strings, e.g. ['job/0/0']"))
    keys = sorted(str(k).lstrip("/") for k in keys)
    truth_keys, truth_named = rendezvous_truth()
    named_ok = str(named).lstrip("/") == truth_named.lstrip("/")
    if keys == truth_keys and named_ok:
        return tr(
            "every rank that arrived wrote its key ({keys}); the waiting ranks name the key "
            "of rank {missing}, which never came ({named}).",
            keys=truth_keys,
            missing=RENDEZVOUS_MISSING,
            named=truth_named,
        )
    missing_key = f"job/0/{RENDEZVOUS_MISSING}"
    if missing_key in keys:
        raise Hint(
            tr("rank {missing} never arrived, so it wrote no key", missing=RENDEZVOUS_MISSING)
        )
    if keys != truth_keys:
        raise Hint(tr("every rank that arrived writes one key, job/0/<its rank>"))
    raise Hint(tr("the waiting ranks name the key they wait for: the missing rank's"))
