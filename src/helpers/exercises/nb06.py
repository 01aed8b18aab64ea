"""Judges for notebook 06's exercises (DDP internals).

The right answers come from the installed torch, mostly from real DDP runs on gloo ranks (through
`helpers.launch.launch`): one 4-rank launch replays 06.1's three bucket settings on
`make_wide_mlp` (`cap_replay_worker`) and runs 06.2's sum-loss backward (`sum_loss_worker`, no
comm hook: DDP's default all-reduce), one 2-rank launch runs 06.3's candidates
(`helpers.ddp.unused_loop_worker`); 06.4's assignment is the C++
`dist._compute_bucket_assignment_by_size`. Worked solutions: solutions/nb06.py.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import textwrap
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.ddp import (
    _flat_grads,
    _rank_batch,
    attach_counter,
    jobs_worker,
    make_mlp,
    make_wide_mlp,
    unused_loop_worker,
    wrap_ddp,
)
from helpers.exercises import N_, Hint, choice_set, exercise, tr
from helpers.launch import current_device

# 06.1 and 06.2 share one launch of RANKS gloo ranks (below)
RANKS, PER_RANK, OUTPUTS = 4, 3, 4  # 06.2: make_mlp has 8 features in, 4 out

# 06.1: lowering bucket_cap_mb on make_wide_mlp, which statements hold
CAP_RUNS = {
    "default": {},
    "bucket_cap_mb=2": {"bucket_cap_mb": 2},
    "bucket_cap_mb=0.5": {"bucket_cap_mb": 0.5},
}
CAP_STEPS = 3
#: The statements 06.1 offers, by letter (the prompt spells them out).
CAP_STATEMENTS = ("A", "B", "C", "D", "E")


def cap_replay_worker(rank: int, world_size: int, runs: dict, steps: int) -> dict:
    """`make_wide_mlp` under each run's DDP arguments for `steps` steps, as section 4 trains it:
    the caps DDP chose and, per step, the buckets `count_allreduce_hook` was handed (bytes,
    parameter names in the bucket's order)."""
    out = {}
    for label, kwargs in runs.items():
        ddp = wrap_ddp(make_wide_mlp(seed=0), **kwargs)
        counter = attach_counter(ddp)
        for step in range(steps):
            counter.step = step
            x = _rank_batch(rank, 4, 256, seed=step).to(current_device())  # (4, 256)
            ddp(x).square().mean().backward()
        out[label] = {
            "first_cap": ddp._bucket_config.first_bucket_bytes_cap,
            "cap": ddp._bucket_config.bucket_bytes_cap,
            "steps": [
                [(c["numel"] * 4, c["params"]) for c in counter.calls if c["step"] == step]
                for step in range(steps)
            ],  # float32: 4 bytes per element
        }
    return out


def _sum_loss_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """06.2's global batch: RANKS * PER_RANK samples of make_mlp's 8 features and 4 targets."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(RANKS * PER_RANK, 8, generator=g)  # (12, 8)
    return x, torch.randn(RANKS * PER_RANK, OUTPUTS, generator=g)  # (12, 4)


def sum_loss_worker(rank: int, world_size: int, per_rank: int) -> list[float]:
    """One backward of make_mlp under DDP (default arguments, no comm hook) with
    `F.mse_loss(..., reduction="sum")` on this rank's `per_rank` samples: the gradient DDP
    leaves in `.grad`, flat."""
    device = current_device()
    x, y = _sum_loss_batch()
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    ddp = wrap_ddp(make_mlp(seed=0))
    F.mse_loss(ddp(x[mine].to(device)), y[mine].to(device), reduction="sum").backward()
    return _flat_grads(ddp.module).tolist()


@functools.cache
def _replays() -> list[dict]:
    """Each rank's results of one RANKS-rank launch: 06.1's replay and 06.2's backward (cached:
    one launch per process)."""
    from helpers.launch import launch

    jobs = [(cap_replay_worker, (CAP_RUNS, CAP_STEPS)), (sum_loss_worker, (PER_RANK,))]
    return launch(jobs_worker, world_size=RANKS, args=(jobs,), backend="gloo", timeout_s=180)


def _replay(exercise_key: str, job: str) -> Any:
    """`job`'s result on every rank; a launch that failed is not the reader's try."""
    try:
        results = _replays()
    except Exception as e:
        raise Hint(
            tr(
                "the check could not run {key}'s DDP run ({error}: {message}); run this cell again",
                key=exercise_key,
                error=type(e).__name__,
                message=e,
            ),
            counts=False,
        ) from None
    return [r[job] for r in results]


def _sizes(run: dict) -> list[list[int]]:
    return [[nbytes for nbytes, _ in step] for step in run["steps"]]


def cap_facts() -> tuple[dict[str, bool], dict]:
    """({letter: whether 06.1's statement holds}, rank 0's replay), from the real DDP runs."""
    per_rank = _replay("06.1", "cap_replay_worker")
    runs = per_rank[0]
    if any(r != runs for r in per_rank):
        raise RuntimeError("06.1: the ranks saw different buckets: update 06.1")
    default, two, half = (runs[label] for label in CAP_RUNS)
    truth = {
        # every step after the first all-reduces one bucket
        "A": all(len(step) == 1 for step in two["steps"][1:]),
        # step 1's bucket lists the parameters as step 0's did: not rebuilt
        "B": [p for _, p in two["steps"][1]] == [p for _, p in two["steps"][0]],
        # the first bucket's cap is the explicit cap, like every other bucket's
        "C": two["first_cap"] == two["cap"] == int(2 * 2**20),
        # the first iteration is already cut into several buckets
        "D": len(half["steps"][0]) > 1,
        # from step 1 on, the same bucket sizes as the default caps
        "E": _sizes(half)[1:] == _sizes(default)[1:],
    }
    return truth, runs


#: 06.1's `look`, also the first half of the second step of its hints (`_cap_hint`).
_CAP_LOOK = N_(
    "section 4: the excerpts of `_BucketCapacityConfig.create` (the first bucket's cap when "
    "bucket_cap_mb is given) and of `compute_bucket_size_limits` (the first iteration), the "
    "rebuild rule `should_rebuild_buckets`, the `bucket_cap_mb=25` rows and the "
    "`parameter bytes:` line"
)


def _first_caps() -> dict[str, int]:
    """The first bucket's cap (bytes) that the installed `_BucketCapacityConfig.create` gives
    bucket_cap_mb None, 25 and 2, and a bucket_cap_mb_list of [1, 25] with bucket_cap_mb None."""
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    cases = {"None": (None, None), "25": (25, None), "2": (2, None), "list": (None, [1, 25])}
    return {
        label: _BucketCapacityConfig.create(mb, mb_list, False).first_bucket_bytes_cap
        for label, (mb, mb_list) in cases.items()
    }


@exercise(
    "06.1",
    "A smaller cap, fewer buckets?",
    look=_CAP_LOOK,
    reveal=N_(
        "`cap_replay_worker(rank, 4, CAP_RUNS, 3)` in the judge module, launched on 4 gloo "
        "ranks: the three runs under real DDP, the buckets the comm hook was handed at each step"
    ),
)
def smaller_cap(answer: Any) -> str:
    found = choice_set(
        answer, CAP_STATEMENTS, tr("letters"), "{'B', 'D'}", lambda s: str(s).strip().upper()
    )
    truth, runs = cap_facts()
    right = {k for k, holds in truth.items() if holds}
    if found == right:
        default, two, half = (runs[label] for label in CAP_RUNS)
        step0_one = all(len(run["steps"][0]) == 1 for run in runs.values())
        rebuilt = all(run["steps"][1][0][1][0] == "4.bias" for run in runs.values())
        mib = 2**20
        caps = {"None": mib, "25": 25 * mib, "2": 2 * mib, "list": 25 * mib}
        if not (step0_one and rebuilt and default["first_cap"] == mib and _first_caps() == caps):
            raise RuntimeError("06.1: DDP's first iteration, caps or rebuild changed: update 06.1")
        return tr(
            (
                "{right} hold. Once the buckets are rebuilt, an explicit bucket_cap_mb is every "
                "bucket's cap, the first's too ({first} B with bucket_cap_mb=2): passing it "
                "explicitly (2 here, 25 in section 4 alike) leaves this model one bucket, and the "
                "1 MiB first bucket that splits the default run in two is only for bucket_cap_mb "
                "left at None with no bucket_cap_mb_list. Step 0 is one bucket in every run (the "
                "first iteration has no size limit), and every run rebuilds its buckets after "
                "it, in gradient order (step 1 lists {first_param} first). With 0.5 MiB the "
                "buckets close at the same parameters as the default's. The replay, bytes per "
                "bucket at steps 0, 1, 2: default {default}; bucket_cap_mb=2 {two}; "
                "bucket_cap_mb=0.5 {half}"
            ),
            right=sorted(right),
            first=two["first_cap"],
            first_param=repr(two["steps"][1][0][1][0]),
            default=_sizes(default),
            two=_sizes(two),
            half=_sizes(half),
        )
    # The first try names no statement (a question per statement would name its letter, and a
    # few tries would then read the answer off the hints); the second step asks all five.
    raise Hint(
        tr("at least one statement you chose is false")
        if found - right
        else tr("a true statement is missing"),
        look=tr(
            "{look}; and for each statement (the same five questions, whichever you chose): "
            "{questions}",
            look=tr(_CAP_LOOK),
            questions=" ".join(f"{k}: {tr(_CAP_QUESTIONS[k])}" for k in CAP_STATEMENTS),
        ),
    )


#: What to think about for each of 06.1's statements (all five, in order, from the second try).
_CAP_QUESTIONS = {
    "A": N_(
        "with bucket_cap_mb given, how many of the model's 1,597,480 bytes fit under the first "
        "bucket's cap once the buckets are rebuilt?"
    ),
    "B": N_(
        "does a byte cap appear in the condition under which the Reducer rebuilds its buckets "
        "after an iteration?"
    ),
    "C": N_(
        "when bucket_cap_mb is passed explicitly, what is the first bucket's cap once the buckets "
        "are rebuilt?"
    ),
    "D": N_(
        "which size limit does DDP give the first iteration when neither per-bucket caps nor "
        "find_unused_parameters are given?"
    ),
    "E": N_(
        "walking the gradients from the last layer with a 0.5 MiB cap, where does each bucket "
        "close (once it reaches its cap, with the parameter that reaches it inside)?"
    ),
}
# 06.2: a sum loss on the ranks against a mean loss on one process


def _grads(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, reduction: str
) -> torch.Tensor:
    model.zero_grad()
    F.mse_loss(model(x), y, reduction=reduction).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def sum_loss_factor() -> float:
    """DDP's gradient after a real backward on RANKS gloo ranks (`sum_loss_worker`:
    reduction='sum' on each rank's PER_RANK samples, DDP's default all-reduce, no comm hook) /
    the single-process gradient (reduction='mean' on all RANKS * PER_RANK samples).

    Also checks what the verdict says of the default all-reduce: DDP's gradient equals the
    ranks' local sum-loss gradients (computed here on one process) added and divided by RANKS.
    """
    per_rank = _replay("06.2", "sum_loss_worker")
    ddp_grad = torch.tensor(per_rank[0])
    if any(not torch.equal(torch.tensor(g), ddp_grad) for g in per_rank):
        raise RuntimeError("06.2: DDP left different gradients on the ranks: update 06.2")
    x, y = _sum_loss_batch()
    model = make_mlp(seed=0)
    shards = [slice(r * PER_RANK, (r + 1) * PER_RANK) for r in range(RANKS)]
    local = torch.stack([_grads(model, x[s], y[s], "sum") for s in shards])
    if not torch.allclose(ddp_grad, local.sum(0) / RANKS, rtol=1e-4, atol=1e-6):
        raise RuntimeError("06.2: DDP's gradient is not the ranks' sum / world_size: update 06.2")
    reference = _grads(model, x, y, "mean")
    ratio = (ddp_grad @ reference) / (reference @ reference)  # least-squares factor
    if not torch.allclose(ddp_grad, ratio * reference, rtol=1e-4, atol=1e-5):
        raise RuntimeError("06.2: DDP's gradient is not a multiple of the reference: update 06.2")
    return float(ratio)


@exercise(
    "06.2",
    "A sum loss on the ranks, a mean loss as reference",
    look=N_(
        "section 4: what the default all-reduce does with the ranks' sum-loss gradients "
        "(divided by world_size, then summed), and section 5's comparison with a mean loss"
    ),
    reveal=N_(
        "`sum_loss_factor()` in the judge module: DDP's gradient after a real backward on 4 "
        "gloo ranks (`sum_loss_worker`, no comm hook), against the mean-loss gradient of one "
        "process on all 12 samples (48 elements)"
    ),
)
def sum_instead_of_mean(answer: Any) -> str:
    try:
        found = float(answer)
    except (TypeError, ValueError):
        raise Hint(
            tr("give one number: DDP's gradient divided by the reference gradient")
        ) from None
    truth = sum_loss_factor()
    total = RANKS * PER_RANK
    elements = total * OUTPUTS
    if math.isclose(found, truth, rel_tol=1e-3):
        return tr(
            (
                "each rank's gradient is the sum over its {per_rank} samples; DDP divides each "
                "by world_size = {ranks} and adds the {ranks}: G / {ranks}, G the sum over all "
                "{total} samples (a real DDP backward on {ranks} gloo ranks, without a comm "
                "hook, left that in .grad, to float rounding); the mean loss divides by every "
                "element, {total} x {outputs} = {elements}: G / {elements}. Factor "
                "{elements}/{ranks} = {truth:g}"
            ),
            per_rank=PER_RANK,
            ranks=RANKS,
            total=total,
            outputs=OUTPUTS,
            elements=elements,
            truth=truth,
        )
    if math.isclose(found, 1 / truth, rel_tol=1e-3):
        raise Hint(tr("upside down: which one is larger, a sum over samples or a mean over them?"))
    if math.isclose(found, elements, rel_tol=1e-3):
        raise Hint(
            tr(
                "that compares the plain sum of all the ranks' gradients with the reference; "
                "DDP does not just add them: it divides each rank's gradient by world_size and "
                "sums them (section 4 and notebook 05 section 1: without a comm hook the "
                "Reducer divides each gradient by world_size as it copies it into the bucket, "
                "then sums; `_allreduce_fut` does `div_` first too)"
            )
        )
    if math.isclose(found, total / RANKS, rel_tol=1e-3):
        raise Hint(
            tr(
                "reduction='mean' of mse_loss averages over every element of the output, not "
                "over the samples: each sample has {outputs} outputs",
                outputs=OUTPUTS,
            )
        )
    if math.isclose(found, 1 / RANKS, rel_tol=1e-3) or math.isclose(found, 1.0):
        raise Hint(
            tr(
                "the reference is a MEAN over every element of the {total} samples' outputs, "
                "the ranks' losses are SUMS: write both gradients in terms of the sum over "
                "all samples",
                total=total,
            )
        )
    raise Hint(
        tr(
            "write DDP's gradient as (g_0 + ... + g_3) / world_size with g_r a sum over rank r's "
            "samples, and the reference as (g_0 + ... + g_3) / (what the mean divides by)"
        )
    )


# 06.3: an unused parameter, and which DDP arguments let the loop run


#: The argument sets 06.3 offers, by letter.
UNUSED_CANDIDATES = {
    "A": {},
    "B": {"find_unused_parameters": True},
    "C": {"static_graph": True},
    "D": {"gradient_as_bucket_view": True},
    "E": {"bucket_cap_mb": 1},
}


def unused_candidates_worker(rank: int, world_size: int, candidates: dict) -> dict:
    """`unused_loop_worker` under each candidate's DDP arguments: {letter: its result}."""
    return {k: unused_loop_worker(rank, world_size, kw) for k, kw in candidates.items()}


@functools.cache
def _unused_results() -> dict[str, dict]:
    """{letter: rank 0's result}, from one 2-rank launch (cached: one per process)."""
    from helpers.launch import launch

    result = launch(
        unused_candidates_worker, world_size=2, args=(UNUSED_CANDIDATES,), backend="gloo"
    )
    return result[0]


@exercise(
    "06.3",
    "An unused head",
    look=N_(
        "the docstring of DistributedDataParallel (`DDP.__doc__`): find_unused_parameters and "
        "static_graph (and gradient_as_bucket_view, bucket_cap_mb: what each one changes)"
    ),
    reveal=N_(
        "`unused_candidates_worker` in the judge module, launched on 2 ranks: each candidate's "
        "two steps under real DDP"
    ),
)
def unused_parameters(answer: Any) -> str:
    found = choice_set(answer, UNUSED_CANDIDATES, tr("letters"), "{'A', 'D'}", str)
    try:
        results = _unused_results()
    except Exception as e:
        raise Hint(
            tr(
                "the check could not run {key}'s DDP run ({error}: {message}); run this cell again",
                key="06.3",
                error=type(e).__name__,
                message=e,
            ),
            counts=False,
        ) from None
    truth = {k for k, r in results.items() if r["error"] is None}
    if found == truth:
        return tr(
            (
                "{truth} run both steps: find_unused_parameters=True walks the autograd graph "
                "after each forward and marks head_b ready; with static_graph=True, the docstring "
                "says, it does not matter whether find_unused_parameters is set (reducer.cpp "
                "records the unused parameters in the first iteration). The others "
                "wait for head_b's gradient, and the second iteration raises: {error}"
            ),
            truth=sorted(truth),
            error=results["A"]["error"],
        )
    extra = found - truth
    if extra:
        plain = {k for k in extra if not UNUSED_CANDIDATES[k]}
        reason = (
            tr("plain DDP waits for every parameter's gradient, and head_b's never comes")
            if plain == extra
            else tr(
                "an option that changes how gradients are bucketed or stored does not change "
                "whether DDP waits for head_b's gradient, which never comes"
            )
        )
        raise Hint(
            tr(
                "at least one of your sets still stops at the second iteration: {reason}",
                reason=reason,
            )
        )
    raise Hint(
        tr(
            "a set that runs both steps is missing: which arguments tell DDP that some "
            "parameters may get no gradient in an iteration, either found at every forward or "
            "known to be the same in every iteration?"
        )
    )


# 06.4: DDP's bucket assignment, written by the reader

#: The prompt's case: make_wide_mlp's parameters in gradient order, the default caps.
SHOWN_LIMITS = [2**20, 25 * 2**20]


def _shown_params() -> list[torch.Tensor]:
    return list(reversed(list(make_wide_mlp(seed=0).parameters())))


def _hidden_cases() -> list[tuple[str, list[torch.Tensor], list[int]]]:
    """(description, params in gradient order, limits): what the prompt does not show."""

    def zeros(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(n, dtype=dtype)

    f16, f64 = torch.float16, torch.float64
    return [
        (
            N_("one cap [4000] for every bucket, float32 sizes 100, 900, 50, 2000, 10, 10"),
            [zeros(n) for n in (100, 900, 50, 2000, 10, 10)],
            [4000],
        ),
        (
            N_("a parameter bigger than the cap: float32 sizes 10, 5000, 10, 10, caps [100, 1000]"),
            [zeros(n) for n in (10, 5000, 10, 10)],
            [100, 1000],
        ),
        (
            N_(
                "three caps [400, 800, 1200], float32 sizes 60, 60, 60, 200, 100, 300, 300, 300, 50"
            ),
            [zeros(n) for n in (60, 60, 60, 200, 100, 300, 300, 300, 50)],
            [400, 800, 1200],
        ),
        (
            N_(
                "mixed dtypes: float32 100, float16 300, float32 100, float64 80, float16 300, "
                "float32 100, float16 10; caps [500, 1000]"
            ),
            [
                zeros(100),
                zeros(300, f16),
                zeros(100),
                zeros(80, f64),
                zeros(300, f16),
                zeros(100),
                zeros(10, f16),
            ],
            [500, 1000],
        ),
        (
            N_(
                "more buckets than caps: float32 sizes 60, 60, 60, 200, 100, 300, 50, 50, 50, 50, "
                "caps [400, 800, 1200]"
            ),
            [zeros(n) for n in (60, 60, 60, 200, 100, 300, 50, 50, 50, 50)],
            [400, 800, 1200],
        ),
    ]


def bucket_truth(params: list[torch.Tensor], limits: list[int]) -> list[list[int]]:
    """The installed C++ assignment on `params` (already in gradient order), buckets by their
    first position (what it returns when given no separate order)."""
    assign, _ = dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))
    return [list(b) for b in assign]


class _Forbidden(Exception):
    """Raised when the reader's function calls torch's assignment (or this judge's)."""


@contextlib.contextmanager
def _without_torch_assignment() -> Any:
    """While the reader's function runs, torch's C++ assignment and `bucket_truth` raise."""
    import helpers.exercises.nb06 as judge_module

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _Forbidden

    saved = dist._compute_bucket_assignment_by_size, judge_module.bucket_truth
    dist._compute_bucket_assignment_by_size = judge_module.bucket_truth = refuse
    try:
        yield
    finally:
        dist._compute_bucket_assignment_by_size, judge_module.bucket_truth = saved


def _call_reader(answer: Any, params: list[torch.Tensor], limits: list[int]) -> Any:
    with _without_torch_assignment():
        try:
            return answer(list(params), list(limits))
        except _Forbidden:
            raise Hint(_WRITE_IT) from None


_WRITE_IT = N_(
    "write the assignment yourself, with sizes and dtypes only: torch's own is what the check "
    "compares with"
)


def _source_names(fn: Any) -> set[str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return names | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _as_buckets(found: Any) -> list[list[int]]:
    try:
        return [[int(i) for i in b] for b in found]
    except (TypeError, ValueError):
        raise Hint(
            tr("return a list of buckets, each a list of positions in params, e.g. [[0, 1], [2]]")
        ) from None


def _diagnose(
    buckets: list[list[int]], params: list[torch.Tensor], limits: list[int], truth: list[list[int]]
) -> str:
    """What to think about when `buckets` differ from `truth` (without showing `truth`)."""
    flat = sorted(i for b in buckets for i in b)
    if flat != list(range(len(params))):
        return tr("every position 0..{last} must be in exactly one bucket", last=len(params) - 1)
    for b in buckets:
        if len({params[i].dtype for i in b}) > 1:
            return tr("a bucket mixes dtypes; the Reducer keeps each dtype in buckets of its own")
    if [b[0] for b in buckets] != sorted(b[0] for b in buckets):
        return tr("order the buckets by the first position each one holds")
    if len(limits) > 1 and buckets == bucket_truth(params, limits[:1]):
        return tr(
            "every bucket got the first cap: a dtype's first bucket takes limits[0], and each "
            "bucket it closes moves it on to the next cap"
        )
    nbytes = [p.numel() * p.element_size() for p in params]
    seen: dict[Any, int] = {}
    for b in buckets:
        key = (params[b[0]].dtype, params[b[0]].device)
        k = seen[key] = seen.get(key, -1) + 1
        cap = limits[min(k, len(limits) - 1)]
        size = sum(nbytes[i] for i in b)
        last_of_dtype = not any(
            (params[c[0]].dtype, params[c[0]].device) == key and c[0] > b[0] for c in buckets
        )
        if size - nbytes[b[-1]] >= cap:
            return tr(
                "a bucket of {size} bytes goes on past its cap of {cap}: it closes as soon as "
                "its bytes reach the cap",
                size=size,
                cap=cap,
            )
        if size < cap and not last_of_dtype:
            return tr(
                "a bucket closes at {size} bytes, below its cap of {cap}: it closes only once "
                "its bytes reach the cap, with the parameter that makes it reach the cap inside",
                size=size,
                cap=cap,
            )
    return tr(
        "you have fewer or differently cut buckets: each dtype starts with the first cap, takes "
        "the next cap after each bucket it closes, and keeps the last cap once the list ends"
    )


@exercise(
    "06.4",
    "DDP's bucket assignment",
    look=N_(
        "section 4: the excerpts of `_BucketCapacityConfig`, the three-tensor assert with "
        "float32 and float16, and the cell that runs the C++ assignment on the gradient order"
    ),
    reveal=N_("`dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))`"),
)
def bucket_assignment(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr("give a function assign_buckets(params, limits), found {answer!r}", answer=answer)
        )
    try:
        params_of = list(inspect.signature(answer).parameters)
    except (TypeError, ValueError):
        params_of = []
    if len(params_of) != 2:
        raise Hint(
            tr("the function takes (params, limits); yours takes {params}", params=params_of)
        )
    if {"_compute_bucket_assignment_by_size", "Reducer"} & _source_names(answer):
        raise Hint(tr(_WRITE_IT))
    shown = _shown_params()
    truth = bucket_truth(shown, SHOWN_LIMITS)
    found = _as_buckets(_call_reader(answer, shown, SHOWN_LIMITS))
    if found != truth:
        raise Hint(
            tr(
                "section 4's case (make_wide_mlp in gradient order, caps [1 MiB, 25 MiB]) gives "
                "{found}: {why}",
                found=found,
                why=_diagnose(found, shown, SHOWN_LIMITS, truth),
            )
        )
    for desc, params, limits in _hidden_cases():
        truth = bucket_truth(params, limits)
        try:
            got = _call_reader(answer, params, limits)
        except Hint:
            raise
        except Exception as e:  # noqa: BLE001  the reader's bug, on a case it did not see
            raise Hint(
                tr(
                    "a hidden case ({case}) raised {error}: {message}",
                    case=tr(desc),
                    error=type(e).__name__,
                    message=e,
                )
            ) from None
        got = _as_buckets(got)
        if got != truth:
            raise Hint(
                tr(
                    "a hidden case ({case}): your function returned {n_found} buckets, torch "
                    "{n_truth}; {why}",
                    case=tr(desc),
                    n_found=len(got),
                    n_truth=len(truth),
                    why=_diagnose(got, params, limits, truth),
                )
            )
    return tr(
        (
            "your assignment equals torch's (`_compute_bucket_assignment_by_size` without tensor "
            "indices, buckets by first position, as DDP's initial assignment calls it) on "
            "section 4's case {truth} and on {n} hidden cases (one cap, a parameter bigger than "
            "its cap, three caps, three dtypes, more buckets than caps): a bucket closes once it "
            "reaches its cap, each dtype walks the list of caps on its own and keeps the last"
        ),
        truth=bucket_truth(shown, SHOWN_LIMITS),
        n=len(_hidden_cases()),
    )
