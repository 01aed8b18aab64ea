"""Judges for notebook 05's exercises (all-reduce from scratch).

Each judge computes the right answer from this project's model of the ring, which the notebook
checks against `dist.all_reduce` and the p2p byte counters: `expected_p2p` for bytes,
`simulate_ring` (the schedule `ring_allreduce` runs) for whose shares a chunk holds,
`alpha_beta_time` for the crossover; the reader's reduce-scatter runs through `launch_source` on
3 ranks and on a hidden 4-rank case, each rank given only its own row, its p2p calls watched.
Worked solutions: solutions/nb05.py.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from helpers import allreduce as ar
from helpers.exercises import (
    N_,
    Hint,
    as_int,
    collective_guard,
    exercise,
    launch_source,
    tr,
    watching,
)

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


@exercise(
    "05.1",
    "The bytes rank 0 sends on the ring",
    look=N_("section 2's `ring_schedule` (how many steps, one chunk each) and section 5's counts"),
    reveal=N_('`ar.expected_p2p("ring", 1000, 4, 8, 0)["bytes_sent"]`'),
)
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


# 05.2: whose shares the chunk rank RS_RANK receives at each reduce-scatter step contains
RS_RANKS, RS_RANK = 5, 2


def _received_shares(n: int, rank: int) -> list[frozenset[int]]:
    """For each of the N-1 reduce-scatter steps, the ranks whose shares the chunk `rank`
    receives at that step already holds (what it gains that step), from `simulate_ring`."""
    sim = ar.simulate_ring([[10**r] * n for r in range(n)])
    gained = []
    for before, after in zip(sim.steps[: n - 1], sim.steps[1:n], strict=True):
        new = [after.owners[rank][c] - before.owners[rank][c] for c in range(n)]
        grown = [g for g in new if g]
        if len(grown) != 1:
            raise RuntimeError(f"simulate_ring: rank {rank} grew {len(grown)} chunks: update 05.2")
        gained.append(frozenset(grown[0]))
    return gained


def _as_share_sets(answer: Any, n: int) -> list[frozenset[int]] | None:
    try:
        found = [frozenset(as_int(r) for r in step) for step in answer]
    except TypeError:
        return None
    if any(None in step for step in found):
        return None
    return found


#: Hidden cases of 05.2, (N, rank): other world sizes, rank 0 and the last rank.
RS_SHARE_HIDDEN = ((4, 0), (7, 6), (3, 1), (6, 3))


def _run_refusing_simulator(answer: Any, n: int, rank: int) -> tuple[Any, bool]:
    """answer(n, rank), and whether it ran the ring's simulator (`simulate_ring`, the pipelined
    one, or this module's truth), watched by their code objects so that an alias is seen too."""
    watched = {
        ar.simulate_ring.__code__,
        ar.simulate_pipelined_ring.__code__,
        _received_shares.__code__,
    }
    with watching(watched) as hits:
        result = answer(n, rank)
    return result, bool(hits)


def _shares_of(answer: Any, n: int, rank: int) -> list[frozenset[int]]:
    """The reader's sets for (n, rank), or a Hint for a wrong shape or a simulator call."""
    try:
        result, simulated = _run_refusing_simulator(answer, n, rank)
    except Exception as e:  # noqa: BLE001  the reader's bug: a hint, not a traceback
        raise Hint(
            tr(
                "received_shares({n}, {rank}) raised {error}: {message}",
                n=n,
                rank=rank,
                error=type(e).__name__,
                message=str(e).splitlines()[0] if str(e) else "",
            )
        ) from None
    if simulated:
        raise Hint(
            tr(
                "do not run the ring's simulator: derive the sets from `ring_schedule`'s rule "
                "(which chunk a rank sends at step s, and where it came from)"
            )
        )
    if not isinstance(result, (tuple, list)) or len(result) != n - 1:
        raise Hint(
            tr(
                "return a list of N-1 = {count} sets, one per reduce-scatter step: the ranks "
                "whose shares the chunk rank {rank} receives at that step contains",
                count=n - 1,
                rank=rank,
            )
        )
    found = _as_share_sets(result, n)
    if found is None:
        raise Hint(
            tr(
                "each step's entry is a set of ranks (whose shares the received chunk holds), "
                "not a chunk index"
            )
        )
    return found


@exercise(
    "05.2",
    "Whose shares arrive during the reduce-scatter",
    look=N_(
        "section 2's `ring_schedule` (which chunk a rank sends at step s, and where it came "
        "from) and section 3's pictures of the ring's steps"
    ),
    reveal=N_("`ar.simulate_ring([[10**r] * n for r in range(n)])`, its `owners`, step by step"),
)
def reduce_scatter_shares(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                "give a function received_shares(n, rank), found {answer!r}",
                answer=answer,
            )
        )
    try:
        inspect.signature(answer).bind(RS_RANKS, RS_RANK)
    except TypeError:
        raise Hint(tr("the function takes (n, rank)")) from None
    n, rank = RS_RANKS, RS_RANK
    truth = _received_shares(n, rank)
    found = _shares_of(answer, n, rank)
    left = (rank - 1) % n
    if found != truth:
        raise Hint(_shares_hint(found, n, rank))
    for hn, hrank in RS_SHARE_HIDDEN:
        hidden_truth = _received_shares(hn, hrank)
        try:
            hidden = _shares_of(answer, hn, hrank)
        except Hint as h:
            raise Hint(
                tr("a hidden case (N = {n}, rank {rank}): {problem}", n=hn, rank=hrank, problem=h)
            ) from None
        if hidden != hidden_truth:
            step = next(s for s in range(hn - 1) if hidden[s] != hidden_truth[s])
            raise Hint(
                tr(
                    "a hidden case (N = {n}, rank {rank}): the set at step {step} differs. "
                    "Which rank sends to rank {rank}, and which chunk does it send at that step?",
                    n=hn,
                    rank=hrank,
                    step=step,
                )
            )
    return tr(
        (
            "rank {rank} receives {truth}: at step s rank {left} forwards the chunk it "
            "received at step s-1 with its own share added, so each arrives with one share "
            "more; the last, chunk {owned} = (r + 1) % N, then gets rank {rank}'s own share "
            "and holds all {n}; hidden cases (other N, rank 0 and the last rank) agree too"
        ),
        rank=rank,
        truth=[sorted(t) for t in truth],
        left=left,
        owned=(rank + 1) % n,
        n=n,
    )


def _shares_hint(found: list[frozenset[int]], n: int, rank: int) -> str:
    """The hint for a wrong answer on the prompt's case (N = 5, rank 2)."""
    left = (rank - 1) % n
    if any(rank in step for step in found):
        return tr(
            "rank {rank}'s own share is not in what it receives: it adds its share to the "
            "chunk after it arrives",
            rank=rank,
        )
    if all(len(step) == 1 for step in found):
        return tr(
            "a chunk is not forwarded as it arrived: before sending it on, the left "
            "neighbour adds its own share to it, so what arrives grows step by step"
        )
    if found == [frozenset((rank + 1 + k) % n for k in range(s + 1)) for s in range(n - 1)]:
        return tr("wrong direction: rank r receives from rank r-1 and sends to rank r+1")
    return tr(
        "at step 0 every rank sends its own share of one chunk to rank r+1; at step s it "
        "sends the chunk it received at step s-1, with its own share added. Follow what "
        "rank {left} holds when it sends",
        left=left,
    )


# 05.3: the alpha-beta crossover of ring and naive, at N = 8 and at N = 2
ALPHA, BETA, AB_WORLD, AB_PAIR = 20e-6, 1 / 10e9, 8, 2
#: Sizes (bytes) at which the N = 2 gap between the modelled ring and naive is measured.
PAIR_SIZES = (1.0, 1e3, 1e6, 1e9, 1e12)
#: What the reader may write for "the ring never beats naive" (besides None and math.inf).
NEVER_WORDS = ("never", "none", "no crossover")


def _gap(size: float, world: int) -> float:
    """Modelled ring time minus naive time (seconds) for `size` bytes on `world` ranks."""
    return ar.alpha_beta_time("ring", size, world, ALPHA, BETA) - ar.alpha_beta_time(
        "naive", size, world, ALPHA, BETA
    )


def _crossover(world: int = AB_WORLD) -> float | None:
    """The size (bytes) where the modelled ring and naive times are equal, by bisection on
    1 B .. 1 TB; None when the ring is slower at every size there (the gap does not change
    sign)."""
    lo, hi = 1.0, 1e12
    if _gap(hi, world) > 0:
        return None
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if _gap(mid, world) > 0 else (lo, mid)
    return (lo + hi) / 2


def _never(value: Any) -> bool:
    """The reader's way of saying there is no crossover: None, +inf, or a word for it."""
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip().lower() in NEVER_WORDS
    try:
        return float(value) == float("inf")
    except (TypeError, ValueError):
        return False


@exercise(
    "05.3",
    "Where the ring starts to beat naive",
    look=N_("section 6: the α-β formulas of naive and ring, and the crossover n* below the timing"),
    reveal=N_(
        '`ar.alpha_beta_time("ring", n, N, 20e-6, 1e-10)` against the same for "naive", '
        "bisected for n, at N = 8 and N = 2"
    ),
)
def ring_beats_naive(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(
            tr(
                "give a pair: (the size in bytes at N = {n}, the size at N = {pair}, or None "
                "where there is none)",
                n=AB_WORLD,
                pair=AB_PAIR,
            )
        )
    at_eight, at_two = answer
    if _never(at_eight):
        raise Hint(
            tr(
                "at N = {n} the ring does win above some size: the bytes it saves grow with the "
                "size, its extra latencies do not",
                n=AB_WORLD,
            )
        )
    found = _number(at_eight, tr("the size in bytes"))
    truth = _crossover()
    if truth is None:
        raise RuntimeError("05.3: the modelled ring never beats naive at N = 8: update 05.3")
    if abs(found - truth) > 0.02 * truth:
        _crossover_hint(found, truth)
    gaps = [_gap(size, AB_PAIR) for size in PAIR_SIZES]
    if _crossover(AB_PAIR) is not None or not all(abs(g - ALPHA) <= 1e-9 * ALPHA for g in gaps):
        raise RuntimeError(
            f"05.3: at N = 2 the modelled ring should be α slower at every size, found {gaps}"
        )
    if not _never(at_two):
        raise Hint(
            tr(
                "N = {n} is right; N = {pair} is not yet: write both modelled times out at "
                "N = {pair} and compare them term by term before trusting n*'s formula",
                n=AB_WORLD,
                pair=AB_PAIR,
            )
        )
    return tr(
        (
            "about {truth:,.0f} bytes at N = {n}: (N-1)(α + nβ) = 2(N-1)α + 2(N-1)/N nβ gives "
            "n = αN / ((N-2)β); below it the ring's {extra_steps} extra messages (latencies) "
            "cost more than the bytes it saves. At N = {pair} there is none: the ring sends "
            "2(N-1)/N n = n bytes, as many as naive's (N-1) n, in 2 messages against 1, so the "
            "model has it one α ({alpha:g} s) slower at every size (N-2 = 0 in n*'s "
            "denominator)"
        ),
        truth=truth,
        n=AB_WORLD,
        extra_steps=AB_WORLD - 1,
        pair=AB_PAIR,
        alpha=ALPHA,
    )


def _crossover_hint(found: float, truth: float) -> None:
    """Raise the hint for a wrong size at N = AB_WORLD (the pair's first element)."""
    if abs(found - ALPHA / BETA) <= 0.02 * ALPHA / BETA:
        raise Hint(
            tr(
                "that is α/β alone; section 6's n* also has a factor in N, from the byte "
                "terms: the ring sends 2(N-1)/N n bytes, naive (N-1) n"
            )
        )
    for unit, factor in (("kB", 1e3), ("MB", 1e6), ("KiB", 1024), ("MiB", 2**20)):
        if abs(found * factor - truth) <= 0.02 * truth:
            raise Hint(tr("that looks like {unit}: give the size in bytes", unit=unit))
    n = AB_WORLD
    slips = {
        ALPHA * n / ((n - 1) * BETA): tr("there is N-2 where you have N-1"),
        ALPHA * n / ((n - 2) * BETA) * 2: tr("a factor 2 too many"),
        ALPHA * n / ((n - 2) * BETA) / 2: tr("a factor 2 too few"),
    }
    for value, slip in slips.items():
        if abs(found - value) <= 0.02 * value:
            raise Hint(
                tr(
                    "close to the form, but {slip}: naive sends (N-1) n bytes as N-1 messages "
                    "(in its one step), the ring 2(N-1)/N n bytes as 2(N-1) messages (one per "
                    "step)",
                    slip=slip,
                )
            )
    raise Hint(
        tr(
            "section 6 derives the crossover n*, where the ring's extra latencies cost as much "
            "as the bytes it saves: put in this α in seconds, β in seconds per byte and "
            "N = {n}",
            n=AB_WORLD,
        )
    )


# 05.4: the reduce-scatter on send/recv, on RS_WORLD ranks
RS_WORLD = 3  # three ranks: two steps, so the chunk indices must follow the schedule
RS_INPUTS = [[10**r * (i + 1) for i in range(5)] for r in range(RS_WORLD)]
_P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"}
_COLLECTIVES = (
    "all_reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "gather",
    "scatter",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
#: The marker of a rule the run-time watch (`_watch_p2p`) found broken, in a rank's error.
_RULE = "05.4 rule:"
RS_TIMEOUT_S = 60  # a correct ring takes seconds, even with the machine loaded


def _calls(fn: Any) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


class OwnRow:
    """What the judge passes to every rank: all ranks' rows, pickled once, but each worker
    unpickles only ITS row (the rank comes from the RANK variable the launcher sets before it
    unpickles the arguments), so rank r's function never sees another rank's input. Unpickling
    also installs `_watch_p2p` in that worker."""

    def __init__(self, rows: list[list[float]]) -> None:
        self.rows = rows

    def __reduce__(self) -> tuple:
        return (_own_row, (self.rows,))


def _own_row(rows: list[list[float]]) -> Any:
    import os

    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    _watch_p2p(rank, world, len(rows[rank]))
    return torch.tensor(rows[rank], dtype=torch.float64)


def _watch_p2p(rank: int, world: int, numel: int) -> None:
    """In a worker: wrap torch.distributed's p2p functions so that they check, as the reader's
    function calls them, the ring's rules (sends go to rank+1, receives come from rank-1, at
    most N-1 of each, the k-th one of the size of chunk (r - k) % N, resp. (r - k - 1) % N, of
    `tensor_split`), and make every collective raise. A broken rule raises at that call."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    sizes = [len(c) for c in torch.tensor_split(torch.empty(numel), world)]
    count = {"send": 0, "recv": 0, "inside": 0}  # inside: send calls isend in torch

    def watched(name: str, kind: str, original: Any) -> Any:
        signature = inspect.signature(original)
        key = "dst" if kind == "send" else "src"

        def call(*args: Any, **kwargs: Any) -> Any:
            if count["inside"]:
                return original(*args, **kwargs)
            try:  # the peer as torch resolves it: dst/src, or group_dst/group_src in `group`
                given = signature.bind(*args, **kwargs).arguments
                group = c10d._group_or_default_group(given.get("group"))
                peer = c10d._canonicalize_group_rank(
                    group, given.get(key), given.get(f"group_{key}"), return_global=True
                )
            except TypeError:  # arguments torch itself refuses: let torch say so
                return original(*args, **kwargs)
            except ValueError:
                if given.get(key) is not None:  # both dst and group_dst: torch's own error
                    return original(*args, **kwargs)
                peer = None  # no peer named (a receive from any rank)
            tensor = given["tensor"]
            want_peer = (rank + 1) % world if kind == "send" else (rank - 1) % world
            k = count[kind]
            if peer != want_peer:
                raise RuntimeError(
                    f"{_RULE} {kind} {name} with rank {peer}; on the ring rank {rank} "
                    f"only sends to rank {(rank + 1) % world} and receives from rank "
                    f"{(rank - 1) % world}"
                )
            if k >= world - 1:
                raise RuntimeError(
                    f"{_RULE} rank {rank} posted more than N-1 = {world - 1} {kind}s"
                )
            chunk = (rank - k) % world if kind == "send" else (rank - k - 1) % world
            if tensor.numel() != sizes[chunk]:
                raise RuntimeError(
                    f"{_RULE} rank {rank}'s {kind} number {k} has {tensor.numel()} elements, "
                    f"chunk {chunk} has {sizes[chunk]}"
                )
            count[kind] = k + 1
            count["inside"] += 1
            try:
                return original(*args, **kwargs)  # the reader's arguments, untouched
            finally:
                count["inside"] -= 1

        return call

    for name, kind in (("send", "send"), ("isend", "send"), ("recv", "recv"), ("irecv", "recv")):
        wrapped = watched(name, kind, getattr(c10d, name))
        setattr(dist, name, wrapped)
        setattr(c10d, name, wrapped)

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{_RULE} the collective {name} was called")

        return call

    for name in _COLLECTIVES:
        if hasattr(c10d, name):
            setattr(dist, name, refuse(name))
            setattr(c10d, name, refuse(name))
    _push_p2p_dispatch_guard()


#: 05.4: the dispatcher's ops a ring of isend/irecv runs (and the barrier of the launcher's
#: teardown); any other collective op, reached by whatever Python route, breaks the rule
_P2P_OPS = {"c10d.send", "c10d.recv_", "c10d.recv_any_source_", "c10d.barrier"}


def _push_p2p_dispatch_guard() -> None:
    """In a worker: every collective op but point-to-point sends and receives raises, whatever
    Python called it (`collective_guard`)."""
    collective_guard(
        lambda name, *_: None if name in _P2P_OPS else f"{_RULE} the collective {name} was called"
    )


@exercise(
    "05.4",
    "The ring's reduce-scatter with isend and irecv",
    look=N_(
        "section 2: the reduce-scatter half of `ring_allreduce` and `ring_schedule`'s chunk indices"
    ),
    reveal=N_(
        "`ar.simulate_ring(inputs)` after its N-1 reduce-scatter steps, on the prompt's 3 ranks "
        "and a hidden 4-rank case"
    ),
)
def reduce_scatter_on_p2p(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                "give a function my_reduce_scatter(rank, world_size, x), found {answer!r}",
                answer=answer,
            )
        )
    params = list(inspect.signature(answer).parameters)
    if len(params) != 3:
        raise Hint(
            tr("the function takes (rank, world_size, x); yours takes {params}", params=params)
        )
    calls = _calls(answer)
    if calls & set(_COLLECTIVES):
        raise Hint(
            tr(
                (
                    "do not call a collective ({collectives}): move the chunks yourself "
                    "with dist.isend and dist.irecv, posting both before waiting on either"
                ),
                collectives=sorted(calls & set(_COLLECTIVES)),
            )
        )
    if not calls & _P2P:
        raise Hint(
            tr(
                "each rank holds only its own x: to sum over all ranks they must exchange "
                "chunks with dist.isend/dist.irecv"
            )
        )
    n = len(RS_INPUTS)
    got, truth = _run_reduce_scatter(answer, RS_INPUTS, None)
    if got != truth:
        raise Hint(_reduce_scatter_hint(got, truth))
    # the hidden case: 4 ranks, 9 elements (chunks of 3, 2, 2, 2), other values
    hidden_got, hidden_truth = _run_reduce_scatter(answer, RS_HIDDEN, RS_HIDDEN_CASE)
    if hidden_got != hidden_truth:
        raise Hint(
            tr(
                "a hidden case ({case}): {problem}",
                case=tr(RS_HIDDEN_CASE),
                problem=_reduce_scatter_hint(hidden_got, hidden_truth, show=False),
            )
        )
    chunks = tr(", ").join(
        tr("rank {r}: chunk {i} = {vals}", r=r, i=i, vals=vals) for r, (i, vals) in enumerate(truth)
    )
    return tr(
        "each rank ends with one chunk summed over all {n} ranks: {chunks}; each rank saw only "
        "its own row and sent N-1 chunks to its right neighbour (checked as it ran); a hidden "
        "case (4 ranks, 9 elements, uneven chunks) agrees too",
        n=n,
        chunks=chunks,
    )


def _first_failure(error: Exception) -> str:
    """The line of a launch error that names the first rank's own exception (not the peers'
    lost connections), else its first line."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    rank = getattr(error, "rank", None)
    for line in lines:
        if rank is not None and line.startswith(f"rank {rank} raised"):
            return line
    return lines[0] if lines else ""


#: The case the prompt does not show: 4 ranks, 9 elements, so tensor_split's chunks are uneven.
RS_HIDDEN = [[(r + 1) * 0.5 - i for i in range(9)] for r in range(4)]
RS_HIDDEN_CASE = N_("4 ranks, 9 elements per rank, chunks of 3, 2, 2, 2")


def _launch_hint(error: Exception, case: str | None) -> Hint:
    """A Hint for a launch that failed: a broken ring rule, a hang, or the reader's error."""
    from helpers.launch import LaunchTimeout

    if isinstance(error, LaunchTimeout):
        message = tr(
            (
                "the ranks did not finish within {seconds} s: on the ring every rank sends "
                "and receives at once, so a rank that blocks (in a dist.send, or waiting on "
                "its receive before its send is posted, or on a receive its neighbour never "
                "sends) waits for a neighbour that is blocked the same way; post dist.isend "
                "and dist.irecv, then wait on both"
            ),
            seconds=RS_TIMEOUT_S,
        )
    else:
        line = next((ln for ln in str(error).splitlines() if _RULE in ln), None)
        if line is not None:
            message = tr(
                (
                    "your ranks broke a rule of the ring ({rule}): at each of the N-1 steps "
                    "rank r sends one chunk to rank r+1 and receives one from rank r-1, "
                    "through dist.isend/dist.irecv only"
                ),
                rule=line.split(_RULE, 1)[1].strip(),
            )
        else:
            message = tr(
                "your code raised {error}: {message}",
                error=type(error).__name__,
                message=_first_failure(error),
            )
    if case is None:
        return Hint(message)
    return Hint(tr("a hidden case ({case}): {problem}", case=tr(case), problem=message))


def _run_reduce_scatter(
    answer: Any, inputs: list[list[float]], case: str | None
) -> tuple[list, list]:
    """(what the reader's ranks returned, the truth from `simulate_ring`), both as
    [(chunk index, [float, ...]) per rank]; one launch, in which each rank gets only its own
    row (`OwnRow`) and its p2p calls are watched (`_watch_p2p`)."""
    n = len(inputs)
    try:
        found = list(
            launch_source(answer, world_size=n, args=(OwnRow(inputs),), timeout_s=RS_TIMEOUT_S)
        )
    except Hint:
        raise
    except Exception as e:  # noqa: BLE001  the reader's bug: a hint, not a traceback
        raise _launch_hint(e, case) from None
    mid = ar.simulate_ring(inputs).steps[n - 1]
    truth = [((r + 1) % n, [float(v) for v in mid.values[r][(r + 1) % n]]) for r in range(n)]
    try:
        got = [(int(i), [float(v) for v in vals]) for i, vals in found]
    except (TypeError, ValueError):
        raise Hint(
            tr("each rank returns (chunk index, list of values); found {found}", found=found)
        ) from None
    close = len(got) == len(truth) and all(
        gi == ti
        and len(gv) == len(tv)
        and all(abs(a - b) <= 1e-9 * (1 + abs(b)) for a, b in zip(gv, tv, strict=True))
        for (gi, gv), (ti, tv) in zip(got, truth, strict=True)
    )
    return (truth if close else got), truth


def _reduce_scatter_hint(got: list, truth: list, show: bool = True) -> str:
    if [i for i, _ in got] != [i for i, _ in truth]:
        return tr(
            (
                "ranks returned chunks {got_chunks}; after N-1 steps rank r holds chunk "
                "(r + 1) % N complete (`ring_schedule`: at step s it receives chunk (r - s - "
                "1) % N)"
            ),
            got_chunks=[i for i, _ in got],
        )
    if [len(v) for _, v in got] != [len(v) for _, v in truth]:
        return tr(
            "the chunks have {got_lengths} elements: cut the tensor as torch.tensor_split does, "
            "into world_size chunks, the first ones one element longer",
            got_lengths=[len(v) for _, v in got],
        )
    if show:
        return tr(
            (
                "right chunks, wrong values: {got}; at each step ADD the received chunk to your "
                "own copy of it, and send the chunk you completed the step before"
            ),
            got=got,
        )
    return tr(
        "right chunks, wrong values; at each step ADD the received chunk to your own copy of "
        "it, and send the chunk you completed the step before"
    )


# 05.5: the master's bottleneck, in bytes
MASTER_WORLD = 8


@exercise(
    "05.5",
    "The master's busy link",
    look=N_("section 2: `master_allreduce`, who sends what to whom"),
    reveal=N_('`ar.expected_p2p("master", 1000, 4, 8, r)["bytes_received"]` for r = 0 and r = 1'),
)
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
