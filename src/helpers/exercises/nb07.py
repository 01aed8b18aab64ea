"""Judges for notebook 07's exercises (BatchNorm and SyncBatchNorm).

The right answers come from the installed torch: `nn.BatchNorm1d` itself for the running
statistics (of one batch for 07.1, of the ranks' batches concatenated for 07.2, which is what a
synchronised step must write), `torch.var_mean` on the concatenated batch for the global
statistics of 07.4, and
`torch.nn.modules._functions.SyncBatchNorm`'s own forward and backward for the sizes of its
collectives. That autograd function cannot run on CPU (its fused kernels are CUDA code), so
`syncbn_collective_sizes` runs it with those kernels replaced by small CPU stand-ins and the
collectives replaced by recorders that stop it at the first call. Worked solutions:
solutions/nb07.py.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
from torch import nn

from helpers.exercises import N_, Hint, as_int, collective_guard, exercise, tr

# 07.1: running statistics after two training steps on the same batch
BATCH = [1.0, 2.0, 3.0, 6.0]
STEPS = 2


def running_stats(batch: list[float] = BATCH, steps: int = STEPS) -> tuple[float, float]:
    """(running_mean, running_var) of a fresh nn.BatchNorm1d(1) after `steps` training forwards."""
    bn = nn.BatchNorm1d(1)  # momentum 0.1, running_mean 0, running_var 1
    x = torch.tensor(batch).view(-1, 1)  # (N, C) = (4, 1)
    for _ in range(steps):
        bn(x)
    return bn.running_mean.item(), bn.running_var.item()


def _simulate(keep: float, correction: int, var0: float, steps: int) -> tuple[float, float]:
    """A hand model of the update, to recognise the usual slips (keep = weight of the old value)."""
    x = torch.tensor(BATCH, dtype=torch.float64)
    m, v = 0.0, var0
    for _ in range(steps):
        m = keep * m + (1 - keep) * x.mean().item()
        v = keep * v + (1 - keep) * x.var(correction=correction).item()
    return m, v


def _pair(answer: Any, what: str) -> tuple[float, float]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair of numbers: {what}", what=what))
    return float(answer[0]), float(answer[1])


def _close(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-3, abs_tol=1e-4) for x, y in zip(a, b, strict=True))


@exercise(
    "07.1",
    "Running statistics after two steps",
    look=N_("section 1, the running-statistics update written out under the first check"),
    reveal=N_("`nn.BatchNorm1d(1)` called twice in training mode on the batch"),
)
def running_stats_after_two_steps(answer: Any) -> str:
    found = _pair(answer, "(running_mean, running_var)")
    truth = running_stats()
    momentum = nn.BatchNorm1d(1).momentum
    if _close(found, truth):
        return tr(
            (
                "running_mean = 0.9 * (0.9 * 0 + 0.1 * 3) + 0.1 * 3 = {truth_0:.4f}; "
                "running_var starts at 1 and moves towards the UNBIASED variance 14/3: "
                "{truth_1:.4f} (nn.BatchNorm1d gives the same)"
            ),
            truth_0=truth[0],
            truth_1=truth[1],
        )
    x = torch.tensor(BATCH, dtype=torch.float64)
    if _close(found, (x.mean().item(), x.var(correction=1).item())) or _close(
        found, (x.mean().item(), x.var(correction=0).item())
    ):
        raise Hint(
            tr(
                (
                    "those are the batch statistics; the running ones start at (0, 1) and move "
                    "only by momentum = {momentum} per step"
                ),
                momentum=momentum,
            )
        )
    slips = [
        ((1 - momentum, 0, 1.0, STEPS), tr("running_var is updated with the UNBIASED variance")),
        ((momentum, 1, 1.0, STEPS), tr("momentum is the weight of the NEW batch statistic")),
        ((1 - momentum, 1, 0.0, STEPS), tr("running_var starts at 1, not 0")),
        ((1 - momentum, 1, 1.0, 1), tr("two training forwards make two updates")),
    ]
    for args, hint in slips:
        if _close(found, _simulate(*args)):
            raise Hint(tr("{hint} (section 1 writes the update out)", hint=hint))
    if math.isclose(found[0], truth[0], rel_tol=1e-3):
        raise Hint(
            tr("running_mean is right; running_var starts at 1 and uses the unbiased variance")
        )
    raise Hint(
        tr("apply running = (1 - momentum) * running + momentum * batch_stat twice (section 1)")
    )


# 07.2: what the merge kernel writes to the running statistics, from per-rank statistics
# per rank: (count, mean, biased variance), realised by these values
RANK_VALUES = [[0.5, 1.5], [2.0, 2.0, 2.0, 4.0, 4.0, 4.0]]


def rank_stats() -> list[tuple[int, float, float]]:
    out = []
    for v in RANK_VALUES:
        var, mean = torch.var_mean(torch.tensor(v, dtype=torch.float64), correction=0)
        out.append((len(v), mean.item(), var.item()))
    return out


def synced_running_stats() -> tuple[float, float]:
    """(running_mean, running_var) after one synchronised training step over RANK_VALUES: what
    BatchNorm on the concatenated batch writes (float64), from a fresh layer's (0, 1)."""
    bn = nn.BatchNorm1d(1).double()  # momentum 0.1, running_mean 0, running_var 1
    bn(torch.tensor(sum(RANK_VALUES, []), dtype=torch.float64).view(-1, 1))  # (N, C) = (8, 1)
    return bn.running_mean.item(), bn.running_var.item()


@exercise(
    "07.2",
    "What the merge kernel writes",
    look=N_(
        "section 6's second excerpt (the merge loop), then the lines after it in the header, "
        "to the end of that kernel; section 1 for the running update"
    ),
    reveal=N_(
        "`nn.BatchNorm1d(1)` run once in training mode on the 8 values together, e.g. "
        "[0.5, 1.5] and [2, 2, 2, 4, 4, 4]: a synchronised step's statistics are those of the "
        "concatenated batch"
    ),
)
def kernel_running_stats(answer: Any) -> str:
    found = _pair(answer, tr("(running_mean, running_var)"))
    truth = synced_running_stats()
    stats = rank_stats()
    n = sum(c for c, _, _ in stats)
    momentum = nn.BatchNorm1d(1).momentum
    mean = sum(c * m for c, m, _ in stats) / n
    var_n = sum(c * (v + (m - mean) ** 2) for c, m, v in stats)  # the loop's var_n

    def write(m: float, v: float, keep: float = 1 - momentum) -> tuple[float, float]:
        return keep * 0.0 + (1 - keep) * m, keep * 1.0 + (1 - keep) * v

    if _close(found, truth):
        return tr(
            (
                "the loop merges the ranks to avg = {mean:.4g} and var_n = {var_n:.4g} over n = "
                "{n} values (invstd then uses the biased var_n / n = {biased:.4g}); after it the "
                "kernel writes running_mean = 0.9 * 0 + 0.1 * {mean:.4g} = {truth_0:.4f} and "
                "running_var = "
                "0.9 * 1 + 0.1 * var_n / (n - 1) = {truth_1:.4f}: the unbiased variance of all "
                "{n} values together, as BatchNorm on the concatenated batch writes it"
            ),
            mean=mean,
            var_n=var_n,
            n=n,
            biased=var_n / n,
            truth_0=truth[0],
            truth_1=truth[1],
        )
    if _close((found[1], found[0]), truth):
        raise Hint(tr("both numbers are right but swapped: give (running_mean, running_var)"))
    if _close(found, (mean, var_n / n)) or _close(found, (mean, var_n / (n - 1))):
        raise Hint(
            tr(
                (
                    "those are the merged batch's statistics; the kernel writes the running "
                    "ones, which start at (0, 1) and move only by momentum = {momentum}"
                ),
                momentum=momentum,
            )
        )
    mean_of_means = sum(m for _, m, _ in stats) / len(stats)
    if math.isclose(found[0], write(mean_of_means, 0.0)[0], rel_tol=1e-3):
        raise Hint(
            tr(
                "that running_mean comes from a mean of the rank means: the loop weighs each "
                "rank's mean by its count"
            )
        )
    if math.isclose(found[0], write(mean, 0.0, keep=momentum)[0], rel_tol=1e-3):
        raise Hint(
            tr("momentum is the weight of the NEW batch statistic (section 1 writes it out)")
        )
    if not math.isclose(found[0], truth[0], rel_tol=1e-3):
        raise Hint(
            tr(
                "running_mean is (1 - momentum) * 0 + momentum * the merged mean: what mean "
                "does the loop end with?"
            )
        )
    slips = [
        (var_n / n, tr("running_var moves towards the UNBIASED variance (section 1)")),
        (
            var_n / (n - len(stats)),
            tr(
                "the unbiased variance divides by one less than the count of the merged batch, "
                "not once per rank"
            ),
        ),
        (
            sum(c * v for c, _, v in stats) / (n - 1),
            tr(
                "that variance misses the spread of the rank means around the merged mean: the "
                "loop adds it for every rank it merges"
            ),
        ),
        (
            sum(c * v for c, _, v in stats) / n,
            tr(
                "that variance misses the spread of the rank means around the merged mean: the "
                "loop adds it for every rank it merges"
            ),
        ),
    ]
    for var, hint in slips:
        if math.isclose(found[1], write(mean, var)[1], rel_tol=1e-4):
            raise Hint(hint)
    raise Hint(
        tr(
            "running_mean is right; for running_var, merge the variances as the loop does, "
            "then read what the kernel does with var_n after the loop"
        )
    )


# 07.3: what nn.SyncBatchNorm's collectives carry
CHANNELS, WORLD = 64, 4


class _Stop(Exception):
    pass


def syncbn_collective_sizes(
    channels: int = CHANNELS, world_size: int = WORLD, backend: str = "gloo"
) -> dict[str, int]:
    """Elements in SyncBatchNorm's forward all-gather (sent, held after) and backward all-reduce.

    Runs the installed `torch.nn.modules._functions.SyncBatchNorm.forward`/`backward` up to
    their first collective, on CPU: `torch.batch_norm_stats` and
    `torch.batch_norm_backward_reduce` (no CPU kernels) are replaced by stand-ins with the same
    output shapes, and the collectives record their tensors and stop the function.
    """
    import torch.nn.modules._functions as functions

    c = channels
    x = torch.randn(2, c, 3, 3, generator=torch.Generator().manual_seed(0))  # (N, C, H, W)
    found: dict[str, int] = {}

    def stats(inp: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        dims = [0, *range(2, inp.dim())]
        return inp.mean(dims), torch.rsqrt(inp.var(dims, correction=0) + eps)  # (C,), (C,)

    def gather(out_list: list, t: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        found["forward sent"] = t.numel()
        found["forward held"] = sum(o.numel() for o in out_list)
        raise _Stop

    def gather_single(out: torch.Tensor, t: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        found["forward sent"], found["forward held"] = t.numel(), out.numel()
        raise _Stop

    def backward_reduce(*args: Any) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(c) for _ in range(4))  # sum_dy, sum_dy_xmu, grad w, grad b

    def all_reduce(t: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        found["backward all-reduced"] = t.numel()
        raise _Stop

    group = SimpleNamespace(_get_backend_name=lambda: backend)
    fn = functions.SyncBatchNorm
    ones, zeros = torch.ones(c), torch.zeros(c)
    with (
        mock.patch.object(torch, "batch_norm_stats", stats),
        mock.patch.object(functions.dist, "all_gather", gather),
        mock.patch.object(functions.dist, "all_gather_single", gather_single),
    ):
        try:
            fn.forward(SimpleNamespace(), x, ones, zeros, zeros, ones, 1e-5, 0.1, group, world_size)
        except _Stop:
            pass
    ctx = SimpleNamespace(
        saved_tensors=(x, ones, zeros, ones, torch.ones(world_size)),
        process_group=group,
        needs_input_grad=(True, True, True),
    )
    with (
        mock.patch.object(torch, "batch_norm_backward_reduce", backward_reduce),
        mock.patch.object(torch.distributed, "all_reduce", all_reduce),
    ):
        try:
            fn.backward(ctx, torch.ones_like(x))
        except _Stop:
            pass
    return found


@exercise(
    "07.3",
    "What SyncBatchNorm's collectives carry",
    look=N_("section 4's excerpts: the `torch.cat` before each collective, forward and backward"),
    reveal=N_(
        "`syncbn_collective_sizes(64, 4)` in helpers/exercises/nb07.py: the installed autograd "
        "function run up to each collective"
    ),
)
def collective_sizes(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 3):
        raise Hint(tr("give three numbers: (sent in forward, held after the gather, all-reduced)"))
    found = tuple(as_int(a) for a in answer)
    if None in found:
        raise Hint(tr("each size is a whole number of elements: count them, do not estimate"))
    sizes = syncbn_collective_sizes()
    truth = (sizes["forward sent"], sizes["forward held"], sizes["backward all-reduced"])
    c, w = CHANNELS, WORLD
    if found == truth:
        return tr(
            (
                "each rank sends [mean (C), invstd (C), count (1)] = 2C + 1 = {truth_0} "
                "numbers, holds W of them after the all-gather = {truth_1}, and all-reduces "
                "[sum_dy (C), sum_dy_xmu (C)] = 2C = {truth_2} in backward (measured by "
                "running the installed autograd function up to each collective)"
            ),
            truth_0=truth[0],
            truth_1=truth[1],
            truth_2=truth[2],
        )
    if found[0] == 2 * c:
        raise Hint(tr("forward also sends the rank's count: the excerpt's torch.cat has 3 parts"))
    if found[0] == 2 * c + w or found[0] == 3 * c:
        raise Hint(
            tr("the count is ONE number per rank (torch.full((1,), ...)), not one per channel")
        )
    if found[0] != truth[0]:
        raise Hint(tr("read `combined = torch.cat(...)` in section 4's excerpt: what goes in it?"))
    if found[1] == found[0]:
        raise Hint(
            tr("an all-gather leaves every rank with all W ranks' vectors, not only its own")
        )
    if found[1] == (w - 1) * found[0]:
        raise Hint(
            tr(
                "that is what a rank receives from the others; after the all-gather it also "
                "holds its own vector"
            )
        )
    if found[1] != truth[1]:
        raise Hint(
            tr(
                "after the all-gather, how many ranks' vectors does each rank hold, of how many "
                "numbers each?"
            )
        )
    if found[2] in (truth[1], w * 2 * c):
        raise Hint(tr("backward all-reduces (sums in place), it does not gather: no factor W"))
    if found[2] == 2 * c + 1:
        raise Hint(
            tr("backward sends no count: read the torch.cat before the all_reduce in backward")
        )
    raise Hint(
        tr("read SyncBatchNorm.backward: which tensor goes into torch.distributed.all_reduce?")
    )


# 07.4: the global statistics with one all-reduce: the shown case on 2 ranks, a hidden one on 3
BATCHES = [[1.0, 2.0, 6.0], [4.0]]  # rank 0 holds 3 values, rank 1 one
HIDDEN_COUNTS = [1, 4, 2]  # 3 ranks; their values are drawn afresh at each check


def _hidden_batches() -> list[list[float]]:
    """The hidden case's values, new at each check: no rank can know another's by heart."""
    import random

    rng = random.Random()  # seeded from the OS: nothing to read in this module
    return [[round(rng.uniform(-5.0, 10.0), 2) for _ in range(n)] for n in HIDDEN_COUNTS]


def _mine(batches: list[list[float]]) -> list[float]:
    """Unpickled in each worker: of all ranks' values, keep only this rank's (RANK is set)."""
    import os

    return list(batches[int(os.environ["RANK"])])


class _PerRank:
    """An argument that reaches each rank as that rank's own list of values only."""

    def __init__(self, batches: list[list[float]]) -> None:
        self.batches = batches

    def __reduce__(self) -> tuple:
        return _mine, (self.batches,)


_GUARD = "07.4 guard: "


def _guard_collectives() -> None:
    """In a worker: allow one all-reduce and refuse every other collective (at run time): the
    functions of dist and the functional collectives by name, and every collective op the
    dispatcher runs (`_push_dispatch_guard`), so a process group's own method counts too."""
    import inspect

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    count = [0]

    def counted(real: Any) -> Any:
        def all_reduce(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] > 1:
                raise RuntimeError(_GUARD + "a second all-reduce")
            return real(*args, **kwargs)

        return all_reduce

    def refused(name: str) -> Any:
        def collective(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(_GUARD + "refused " + name)

        return collective

    dist.all_reduce = counted(dist.all_reduce)
    funcol.all_reduce = counted(funcol.all_reduce)
    for module in (dist, funcol):
        for name in dir(module):
            low = name.lower()
            if name.startswith("_") or name == "all_reduce":
                continue
            words = ("gather", "scatter", "broadcast", "all_to_all", "send", "recv", "reduce")
            if any(w in low for w in words) and inspect.isfunction(getattr(module, name)):
                setattr(module, name, refused(name))
    try:
        from helpers.syncbn import lesson

        lesson.global_batch_stats = refused("global_batch_stats")
    except ImportError:
        pass
    _push_dispatch_guard()


#: 07.4: the dispatcher's collective ops: the all-reduces (one allowed, by whichever route), the
#: functional collectives' bookkeeping, and the barrier the launcher's teardown runs
_ALL_REDUCE_OPS = {"c10d.allreduce_", "_c10d_functional.all_reduce", "_c10d_functional.all_reduce_"}
_HARMLESS_OPS = {"_c10d_functional.wait_tensor", "_c10d_functional._wrap_tensor_autograd"}
_HARMLESS_OPS |= {"c10d.barrier"}


def _push_dispatch_guard() -> None:
    """In a worker: of the collective ops the dispatcher runs, whatever Python called it, one
    all-reduce is allowed and every other collective refused (`collective_guard`)."""
    count = [0]

    def decide(name: str, *_: Any) -> str | None:
        if name in _ALL_REDUCE_OPS:
            count[0] += 1
            return _GUARD + "a second all-reduce" if count[0] > 1 else None
        return None if name in _HARMLESS_OPS else _GUARD + "refused " + name

    collective_guard(decide)


_GUARD_PRELUDE = "from helpers.exercises.nb07 import _guard_collectives\n_guard_collectives()\n"


def _calls(fn: Any) -> list[str]:
    """Names of the functions `fn` calls, in source order (attribute calls by their last name)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return [
        c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
        for c in calls
    ]


def _truth(batches: list[list[float]]) -> tuple[float, float]:
    whole = torch.tensor(sum(batches, []), dtype=torch.float64)  # BatchNorm on the whole batch
    var, mean = torch.var_mean(whole, correction=0)
    return mean.item(), var.item()


def _result_pair(answer: Any) -> tuple[float, float]:
    """A rank's (mean, var): any two numbers (a tuple, a list, a (2,) tensor)."""
    if isinstance(answer, torch.Tensor):
        answer = answer.detach().flatten().tolist()
    try:
        items = list(answer)
    except TypeError:
        items = []
    if len(items) != 2:
        raise Hint(
            tr("give a pair of numbers: {what}", what=tr("(mean, biased variance) as floats"))
        )
    return tuple(float(v) for v in items)  # type: ignore[return-value]


def _run_case(answer: Any, batches: list[list[float]], hidden: bool) -> tuple[float, float]:
    """Run `answer` on len(batches) ranks, each given only its own values; raise Hint naming
    the case if it is not the truth. Returns the truth."""
    from helpers.exercises import _PRELUDE
    from helpers.launch import WorkerError, launch

    counts = [len(b) for b in batches]
    if hidden:
        prefix = tr(
            "a hidden case ({world} ranks holding {counts} values) differs: ",
            world=len(batches),
            counts=counts,
        )
    else:
        prefix = ""
    try:
        found = list(
            launch(
                answer,
                len(batches),
                (_PerRank(batches),),
                timeout_s=60,
                prelude=_PRELUDE + _GUARD_PRELUDE,
                backend="gloo",  # the judge's ranks run on the CPU, whatever the machine has
            )
        )
    except WorkerError as err:
        text = str(err)
        if _GUARD + "a second all-reduce" in text:
            raise Hint(
                prefix
                + tr(
                    "your function ran a second all-reduce: pack everything the ranks must "
                    "combine into one tensor and all-reduce it once"
                )
            ) from None
        if _GUARD + "refused" in text:
            raise Hint(
                prefix
                + tr(
                    "one all-reduce and no other collective (no gather, broadcast, send): pack "
                    "what adds up across ranks into one tensor"
                )
            ) from None
        raise
    truth = _truth(batches)
    pairs = [_result_pair(f) for f in found]
    if all(_close(p, truth) for p in pairs):
        return truth
    if not all(_close(p, pairs[0]) for p in pairs):
        raise Hint(prefix + tr("the ranks disagree; every rank must end with the same numbers"))
    found_mean, found_var = pairs[0]
    n = sum(counts)
    if math.isclose(found_mean, sum(sum(b) / len(b) for b in batches) / len(batches)):
        raise Hint(
            prefix
            + tr(
                "that mean is a mean of the rank means: divide the global total by the global count"
            )
        )
    if math.isclose(found_var, truth[1] * n / (n - 1), rel_tol=1e-4):
        raise Hint(
            prefix + tr("that is the unbiased variance; BatchNorm normalises with the biased one")
        )
    if hidden:
        raise Hint(
            prefix
            + tr(
                "your function returned {found}: each rank sees only its own values, so does "
                "it combine every rank's through the all-reduce, counts included?",
                found=[round(v, 4) for v in pairs[0]],
            )
        )
    raise Hint(
        tr(
            "every rank returned {found}, not the statistics of all {n} values: what adds up "
            "across ranks, so that one all-reduce can combine it? (means do not)",
            found=[round(v, 4) for v in pairs[0]],
            n=n,
        )
    )


@exercise(
    "07.4",
    "One all-reduce for the global statistics",
    look=N_("section 6, `global_batch_stats`: what it packs before its one all-reduce"),
    reveal=N_(
        "`local = torch.stack([S, SS, n])` (total, total of squares, count), one all-reduce "
        "of it, then mean = S / n and var = SS / n - mean^2"
    ),
)
def one_all_reduce(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give the worker function itself, `my_global_stats`, not its result"))
    if "global_batch_stats" in _calls(answer):
        raise Hint(tr("write the merge yourself rather than calling section 6's helper"))
    truth = _run_case(answer, BATCHES, hidden=False)
    hidden_batches = _hidden_batches()
    hidden = _run_case(answer, hidden_batches, hidden=True)
    return tr(
        (
            "every rank gets mean {truth_0} and biased variance {truth_1} of all "
            "{whole_numel} values from one all-reduce of [total, total of squares, count], and "
            "the 3-rank case with counts 1, 4, 2 ({hidden_0:.4g}, {hidden_1:.4g}) too: "
            "counts travel with the totals, so uneven ranks weigh right"
        ),
        truth_0=truth[0],
        truth_1=truth[1],
        whole_numel=sum(len(b) for b in BATCHES),
        hidden_0=hidden[0],
        hidden_1=hidden[1],
    )
