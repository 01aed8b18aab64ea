"""Judges for notebook 19 (when distributed training hangs); see helpers.exercises.

19.1's truth is the construction of its hung job (`helpers.hangs.MYSTERY`), 19.2's what
`monitored_barrier`'s docstring says of `wait_all_ranks` and what DETAIL's check names, 19.3's
the keys gloo's rendezvous writes (`job/0/<rank>` under the worker's prefix `job`);
tests/test_hangs.py runs each of these jobs and checks that the tools read them as the judges
say. 19.4 is code: the reader's `culprit(dumps)` runs in-process on the dumps of 19.1's job
(`hangs.mystery_dumps()`, one launch per process, cached) and on hidden dumps made from their
entries (other world sizes, the odd rank elsewhere, a rank stuck before a collective, a rank two
collectives behind, a rank one collective ahead, a rank that differs and records nothing more, a
tie), whose truth is their construction. No other judge launches processes.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any

from helpers.exercises import N_, Hint, as_int, called_names, exercise, tr
from helpers.hangs import MYSTERY

LATE = {2, 3}  # 19.2: the ranks of 4 that never reach rank 0's barrier (or skip the all_reduce)
RENDEZVOUS_WORLD, RENDEZVOUS_MISSING = 4, (1, 3)  # 19.3


def rendezvous_truth() -> tuple[list[str], str]:
    """(the keys the store holds, the key the waiting ranks name) for 19.3's rendezvous."""
    keys = [f"job/0/{r}" for r in range(RENDEZVOUS_WORLD) if r not in RENDEZVOUS_MISSING]
    return keys, f"/job/0/{min(RENDEZVOUS_MISSING)}"


@exercise(
    "19.1",
    "which rank and which collective hang the job",
    look=N_(
        "section 3: the dumps' entries side by side (sequence number and op), and why torch's "
        "analyzer blames the ranks it does"
    ),
    reveal=N_("`show_source(hangs.mystery_worker)`: the job's program, which decides"),
)
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


@exercise(
    "19.2",
    "the ranks a monitored barrier names",
    look=N_(
        "section 2: `monitored_barrier`'s docstring on wait_all_ranks, gloo's comment on the "
        "order in which rank 0 waits, and the wrapper's checks in ProcessGroupWrapper.cpp"
    ),
    reveal=N_(
        "`launch(hangs.late_rank_worker, 4, args=([2, 3], 2.0, False))` and, under DETAIL, "
        '`launch(hangs.fingerprint_worker, 4, args=("skip", (2, 3), 3.0))`'
    ),
)
def every_late_rank(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with two sets: (named by monitored_barrier, named by DETAIL)"))
    try:
        if any(isinstance(part, (str, bytes)) for part in answer):
            raise TypeError
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


@exercise(
    "19.3",
    "what the store holds when ranks never arrive",
    look=N_(
        "section 5: the keys a rank writes, and how gloo's createAndConnectAllPairs waits for "
        "the others' keys by default"
    ),
    reveal=N_(
        "`launch(hangs.rendezvous_worker, 4, args=(port, [1, 3], 3.0))` inside "
        "`hangs.hosted_store()`, as section 5 runs it on 3 ranks"
    ),
)
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


# --- 19.4 the culprit, in code -----------------------------------------------------------------


@functools.cache
def shown_dumps() -> tuple:
    """19.1's job as run here (3 ranks, gloo): one Flight Recorder dump per rank, run once."""
    from helpers.hangs import mystery_dumps

    return tuple(mystery_dumps())


def _make_dumps(templates: list[dict], programs: list[list[str]], part: int) -> list[dict]:
    """Dumps of a hung job whose rank r recorded the ops `programs[r]` (sequence numbers from 1),
    each entry a copy of a real entry of `templates[r % len(templates)]` (its thread id too) with
    its sequence number, op and ids rewritten; the entries from `part` on never ended (`retired`
    False) and `pg_status` says the last completed collective is the one before."""
    dumps = []
    for r, ops in enumerate(programs):
        template = templates[r % len(templates)]
        entry0 = template["entries"][0]
        dump = copy.deepcopy(template)
        dump["entries"] = []
        for i, op in enumerate(ops):
            e = copy.deepcopy(entry0)
            e.update(
                collective_seq_id=i + 1,
                op_id=i + 1,
                record_id=i,
                profiling_name=f"gloo:{op}",
                retired=i + 1 < part,
                time_created_ns=entry0["time_created_ns"] + 1000 * i,
            )
            dump["entries"].append(e)
        for status in dump.get("pg_status", {}).values():
            status["last_enqueued_collective"] = str(len(ops))
            status["last_completed_collective"] = str(min(len(ops), part - 1))
        dumps.append(dump)
    return dumps


def culprit_cases() -> list[dict]:
    """The shown case (19.1's real dumps) and the hidden ones: name, parameters, dumps, truth."""
    shown = [copy.deepcopy(d) for d in shown_dumps()]
    ar, bc = "all_reduce", "broadcast"
    hidden = [
        (
            N_(
                "world size 4, the odd rank last: rank 3 calls barrier at 3 where the others "
                "call all_reduce"
            ),
            [[ar, bc, ar]] * 3 + [[ar, bc, "barrier"]],
            (3, 3),
        ),
        (
            N_(
                "world size 5, rank 2 stuck elsewhere: its entries end at 3, the others' "
                "all_reduce at 4 waits for it"
            ),
            [[ar, ar, bc, ar]] * 2 + [[ar, ar, bc]] + [[ar, ar, bc, ar]] * 2,
            (2, 4),
        ),
        (
            N_(
                "world size 4, rank 1 two collectives behind: its entries end at 3, the others "
                "enqueued 4 and 5 (async all_reduces)"
            ),
            [[bc, ar, ar, ar, ar]] + [[bc, ar, ar]] + [[bc, ar, ar, ar, ar]] * 2,
            (1, 4),
        ),
        (
            N_("world size 6, rank 4 differs at 2 and its entries go on to 3 as the others' do"),
            [[ar, ar, ar]] * 4 + [[ar, "all_gather", ar]] + [[ar, ar, ar]],
            (4, 2),
        ),
        (
            N_(
                "world size 3, rank 0 one collective ahead: it calls an all_reduce at 4 the "
                "others never call (they recorded nothing at 4)"
            ),
            [[ar, bc, ar, ar]] + [[ar, bc, ar]] * 2,
            (0, 4),
        ),
        (
            N_(
                "world size 4, rank 2 differs at 2 and records nothing after; the others go on to 4"
            ),
            [[ar] * 4] * 2 + [[ar, bc]] + [[ar] * 4],
            (2, 2),
        ),
        (
            N_(
                "world size 4, a tie: ranks 0 and 1 call broadcast at 2, ranks 2 and 3 "
                "all_reduce, so no op has a majority"
            ),
            [[ar, bc, ar]] * 2 + [[ar, ar, ar]] * 2,
            None,
        ),
    ]
    cases = [
        dict(
            name="shown",
            params=N_("19.1's dumps"),
            dumps=shown,
            truth=(MYSTERY["rank"], MYSTERY["seq"]),
        )
    ]
    for params, programs, truth in hidden:  # params: msgids
        part = truth[1] if truth else 2
        cases.append(
            dict(
                name="hidden",
                params=params,
                dumps=_make_dumps(shown, programs, part),
                truth=truth,
            )
        )
    return cases


_calls = called_names


_ANALYZERS = {"analyze_dumps", "build_db", "build_collectives", "_build_db"}


@exercise(
    "19.4",
    "the culprit from Flight Recorder dumps, in code",
    look=N_(
        "section 3: each entry's collective_seq_id and profiling_name, and torch's analyzer, "
        "which takes the first rank's entry as the expected one"
    ),
    reveal=N_(
        "`hangs.fr_entries(dump)` for each rank, then `collections.Counter` of the ops (None for "
        "no entry) at each sequence number, the first where they differ, and its "
        "`most_common(2)`: a tie gives None"
    ),
)
def culprit_exercise(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function culprit(dumps) returning (rank, sequence number)"))
    try:
        sig = inspect.signature(answer)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        try:
            sig.bind(1)
        except TypeError:
            raise Hint(
                tr(
                    "the function takes one argument, the list of dumps; yours takes {params}",
                    params=list(sig.parameters),
                )
            ) from None
    if _calls(answer) & _ANALYZERS:
        raise Hint(
            tr(
                "read the entries yourself: torch's analyzer takes the first rank's entry as "
                "the expected one, which is what this exercise is about"
            )
        )
    try:
        cases = culprit_cases()  # before the reader's code runs: a failed launch is not theirs
    except Exception as e:
        raise Hint(
            tr(
                "the check could not run 19.1's job ({error}: {message}); run this cell again",
                error=type(e).__name__,
                message=e,
            ),
            counts=False,
        ) from None
    for case in cases:
        got = answer(copy.deepcopy(case["dumps"]))
        if case["truth"] is None:
            if got is None:
                continue
            raise Hint(
                tr(
                    "right on 19.1's dumps, but on a hidden case ({params}) you return {found!r}: "
                    "where no op is recorded by more ranks than any other, the dumps say where "
                    "the ranks part, not who is odd, and the function returns None",
                    params=tr(case["params"]),
                    found=got,
                )
            )
        if got is None and case["name"] == "hidden":
            raise Hint(
                tr(
                    "right on 19.1's dumps, but on a hidden case ({params}; {world} dumps) you "
                    "return None: one op there is recorded by more ranks than any other",
                    params=tr(case["params"]),
                    world=len(case["dumps"]),
                )
            )
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Hint(tr("return a pair (rank, sequence number), found {found!r}", found=got))
        rank, seq = as_int(got[0]), as_int(got[1])
        if rank is None or seq is None:
            raise Hint(
                tr("the rank and the sequence number are whole numbers, found {found!r}", found=got)
            )
        if (rank, seq) == case["truth"]:
            continue
        world = len(case["dumps"])
        if case["name"] == "shown":
            if seq != case["truth"][1]:
                raise Hint(
                    tr(
                        "on 19.1's dumps your sequence number is {seq}: find the first "
                        "collective_seq_id at which the ranks' entries do not all name the same op",
                        seq=seq,
                    )
                )
            raise Hint(
                tr(
                    "on 19.1's dumps the sequence number is right and the rank ({rank}) is not: at "
                    "that sequence number, which op do most ranks record, and whose entry differs?",
                    rank=rank,
                )
            )
        what = (
            tr("the sequence number (yours {seq})", seq=seq)
            if seq != case["truth"][1]
            else tr("the rank (yours {rank})", rank=rank)
        )
        raise Hint(
            tr(
                "right on 19.1's dumps, but on a hidden case ({params}; {world} dumps) {what} "
                "differs: a rank with no entry at a sequence number another rank reached "
                "differs there too, and nothing may assume the world size or where the odd rank is",
                params=tr(case["params"]),
                world=world,
                what=what,
            )
        )
    return tr(
        "your culprit finds the odd rank on 19.1's dumps, rank {rank} at {seq}, and on hidden "
        "dumps of 3 to 6 ranks: the odd rank last or in the middle, a rank stuck before a "
        "collective, a rank two collectives behind, a rank one ahead, a rank that differs and "
        "stops, and a tie (None). The first sequence number where the entries differ says where "
        "the ranks part; the majority there, where there is one, says which rank is the odd one "
        "out, which torch's analyzer, taking the first rank as the expected one, does not. "
        "Which program is wrong is still a question about the program (section 3).",
        rank=MYSTERY["rank"],
        seq=MYSTERY["seq"],
    )
