"""Judges for notebook 19 (when distributed training hangs); see helpers.exercises.

19.1's truth is the construction of its hung job (`helpers.hangs.MYSTERY`), 19.2's what
`monitored_barrier`'s docstring says of `wait_all_ranks` and what DETAIL's check names, 19.3's
the keys gloo's rendezvous writes (`job/0/<rank>` under the worker's prefix `job`);
tests/test_hangs.py runs each of these jobs and checks that the tools read them as the judges
say. No judge launches processes.
"""

from __future__ import annotations

from typing import Any

from helpers.exercises import Hint, as_int, exercise, tr
from helpers.hangs import MYSTERY

LATE = {2, 3}  # 19.2: the ranks of 4 that never reach rank 0's barrier (or skip the all_reduce)
RENDEZVOUS_WORLD, RENDEZVOUS_MISSING = 4, (1, 3)  # 19.3


def rendezvous_truth() -> tuple[list[str], str]:
    """(the keys the store holds, the key the waiting ranks name) for 19.3's rendezvous."""
    keys = [f"job/0/{r}" for r in range(RENDEZVOUS_WORLD) if r not in RENDEZVOUS_MISSING]
    return keys, f"/job/0/{min(RENDEZVOUS_MISSING)}"


@exercise("19.1", "which rank and which collective hang the job")
def mystery(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        raise Hint(tr("answer with a tuple (rank, sequence number, op), e.g. (0, 1, 'barrier')"))
    rank, seq, op = as_int(answer[0]), as_int(answer[1]), str(answer[2]).removeprefix("gloo:")
    truth = (MYSTERY["rank"], MYSTERY["seq"], MYSTERY["op"])
    others = [r for r in range(MYSTERY["world_size"]) if r != truth[0]]
    if (rank, seq, op) == truth:
        return tr(
            "rank {rank} calls {op} at sequence number {seq} where ranks {others} call "
            "all_reduce: two ranks agree, so rank {rank}'s program is the odd one. torch's "
            "analyzer takes rank {rank}'s entry as the expected one and blames ranks {others}.",
            rank=truth[0],
            op=truth[2],
            seq=truth[1],
            others=", ".join(map(str, others)),
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
    if rank in others:
        raise Hint(
            tr(
                "which rank's entry does torch's analyzer take as the expected one (section "
                "3)? Count how many ranks call each op at that sequence number"
            )
        )
    if rank != truth[0]:
        raise Hint(tr("the job has ranks 0 to {last}", last=MYSTERY["world_size"] - 1))
    raise Hint(tr("the op is the one the odd rank's entry names (its profiling_name)"))


@exercise("19.2", "the ranks a monitored barrier names")
def every_late_rank(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with two sets: (named by monitored_barrier, named by DETAIL)"))
    try:
        first, every = ({as_int(r) for r in part} for part in answer)
    except TypeError:
        raise Hint(tr("answer with two sets of ranks, e.g. ({{1}}, {{1, 2}})")) from None
    truth = ({min(LATE)}, set(LATE))
    if (first, every) == truth:
        return tr(
            "with wait_all_ranks=False rank 0 throws on the first failed rank it meets (rank "
            "{first}); DETAIL's check begins with a monitored barrier called with waitAllRanks "
            "true, which names every rank that missed it ({every}).",
            first=min(LATE),
            every=sorted(LATE),
        )
    if 0 in first | every:
        raise Hint(tr("rank 0 is the rank that waits and reports; it never names itself"))
    if first == set(LATE):
        raise Hint(tr("with False, rank 0 throws on the first failed rank it meets, in rank order"))
    if first != {min(LATE)}:
        raise Hint(tr("rank 0 checks the other ranks in rank order: which late rank comes first?"))
    raise Hint(
        tr(
            "DETAIL's check is a monitored barrier too: with which waitAllRanks does the "
            "wrapper call it (section 2)?"
        )
    )


@exercise("19.3", "what the store holds when ranks never arrive")
def store_keys(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with a tuple (sorted list of keys, the key named)"))
    keys, named = answer
    if isinstance(keys, str) or not isinstance(keys, (list, tuple, set)):
        raise Hint(tr("the keys are a list of strings, e.g. ['job/0/0']"))
    keys = sorted(str(k).lstrip("/") for k in keys)
    truth_keys, truth_named = rendezvous_truth()
    missing_keys = [f"job/0/{r}" for r in RENDEZVOUS_MISSING]
    named_key = str(named).lstrip("/") if isinstance(named, str) else None
    if keys == truth_keys and named_key == truth_named.lstrip("/"):
        return tr(
            "every rank that arrived wrote its key ({keys}); both waiting ranks name only "
            "{named}, the first missing key in rank order: the message names one key, and "
            "the store's key list is what shows every rank that arrived.",
            keys=truth_keys,
            named=truth_named,
        )
    if any(k in keys for k in missing_keys):
        raise Hint(
            tr(
                "ranks {missing} never arrived, so they wrote no key",
                missing=", ".join(map(str, RENDEZVOUS_MISSING)),
            )
        )
    if keys != truth_keys:
        raise Hint(tr("every rank that arrived writes one key, job/0/<its rank>"))
    if named_key is None:
        raise Hint(tr("the message names one key, a string like '/job/0/2'"))
    if named_key not in missing_keys:
        raise Hint(tr("the waiting ranks name a key that never came"))
    raise Hint(
        tr(
            "a waiting rank waits for the ranks' keys one after another, in rank order, and "
            "names the one its wait timed out on: which missing key does it reach first?"
        )
    )
