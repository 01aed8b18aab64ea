"""Judges for notebook 06's exercises (DDP internals).

The right answers come from the installed torch: DDP's own `_BucketCapacityConfig` and the C++
bucket assignment `dist._compute_bucket_assignment_by_size` for the buckets, a numerical
gradient comparison for the loss reduction, and a real 2-rank DDP loop (`unused_loop_worker`,
through `helpers.launch.launch`) for the unused-parameter fix. Worked solutions: solutions/nb06.py.
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

from helpers.ddp import TwoHeadNet, make_mlp, make_wide_mlp, wrap_ddp
from helpers.exercises import N_, Hint, choice_set, exercise, tr

# 06.1: the rebuilt buckets of make_wide_mlp with an explicit bucket_cap_mb
CAP_MB = 0.015


def rebuilt_buckets(bucket_cap_mb: float | None = CAP_MB) -> list[list[str]]:
    """Parameter names per bucket after DDP's rebuild, in gradient order (last layer first).

    Caps from DDP's `_BucketCapacityConfig.create`; assignment by the C++ function the Reducer
    uses, on the parameters in the order their gradients arrive (reverse definition order for
    this MLP, as section 4 measured).
    """
    from torch.nn.parallel.distributed import _BucketCapacityConfig

    cfg = _BucketCapacityConfig.create(bucket_cap_mb, None, use_python_reducer=False)
    limits = [cfg.first_bucket_bytes_cap, cfg.bucket_bytes_cap]
    named = list(make_wide_mlp(seed=0).named_parameters())
    names = [n for n, _ in named]
    order = list(reversed(range(len(named))))  # gradient order, as definition indices
    assign, _ = dist._compute_bucket_assignment_by_size(
        [named[i][1] for i in order], limits, [False] * len(order), order
    )
    return [[names[i] for i in bucket] for bucket in assign]


@exercise(
    "06.1",
    "Buckets with bucket_cap_mb=0.015",
    look=N_(
        "section 4: the excerpt of `_BucketCapacityConfig.create` (the first bucket's cap when "
        "bucket_cap_mb is given) and the `parameter bytes:` line"
    ),
    reveal=N_(
        "`rebuilt_buckets(0.015)` in the judge module: `dist._compute_bucket_assignment_by_size` "
        "on the parameters in gradient order, with both caps from `_BucketCapacityConfig`"
    ),
)
def buckets(answer: Any) -> str:
    truth = rebuilt_buckets()
    try:
        found = [[str(n) for n in b] for b in answer]
    except TypeError:
        raise Hint(
            tr("give a list of buckets, each a list of parameter names like '4.bias'")
        ) from None
    names = {n for n, _ in make_wide_mlp(seed=0).named_parameters()}
    unknown = sorted({n for b in found for n in b} - names)
    if unknown:
        raise Hint(
            tr(
                "not parameter names of make_wide_mlp: {unknown}; they look like '0.weight'",
                unknown=unknown,
            )
        )
    if [set(b) for b in found] == [set(b) for b in truth]:
        pb = {n: p.numel() * p.element_size() for n, p in make_wide_mlp(seed=0).named_parameters()}
        sizes = [sum(pb[n] for n in b) for b in truth]
        return tr(
            (
                "an explicit bucket_cap_mb={cap_mb} makes every cap int({cap_mb} * 2**20) = "
                "{int_cap_mb_2_20} B, the first bucket's too; walking the gradients from the "
                "last layer, each bucket closes once it reaches the cap: {truth}, {sizes} B"
            ),
            cap_mb=CAP_MB,
            int_cap_mb_2_20=int(CAP_MB * 2**20),
            truth=truth,
            sizes=sizes,
        )
    if len(found) == 1:
        raise Hint(tr("one bucket with everything is step 0; the question is about the rebuild"))
    if found and "0.weight" in found[0]:
        raise Hint(
            tr(
                "the rebuilt buckets follow gradient order: backward produces the last "
                "layer's gradients first, so bucket 0 starts with '4.bias'"
            )
        )
    if [set(b) for b in found] == [set(b) for b in rebuilt_buckets(None)]:
        raise Hint(
            tr(
                "those are the default buckets (1 MiB first bucket); with bucket_cap_mb "
                "given explicitly, read _BucketCapacityConfig.create: what is "
                "first_bucket_bytes_cap?"
            )
        )
    if all(len(b) == 1 for b in found):
        raise Hint(
            tr(
                "a bucket closes after the parameter that makes it reach the cap, not before "
                "it: a parameter bigger than the cap still shares its bucket with the ones "
                "before it"
            )
        )
    raise Hint(
        tr(
            (
                "cap = int({cap_mb} * 2**20) bytes for every bucket; add the parameters' "
                "bytes in gradient order (section 4 prints param_bytes) and close a bucket "
                "once it reaches the cap"
            ),
            cap_mb=CAP_MB,
        )
    )


# 06.2: a sum loss on the ranks against a mean loss on one process
RANKS, PER_RANK, OUTPUTS = 4, 3, 4  # make_mlp: 8 features in, 4 out


def _grads(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, reduction: str
) -> torch.Tensor:
    model.zero_grad()
    F.mse_loss(model(x), y, reduction=reduction).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def sum_loss_factor(ranks: int = RANKS, per_rank: int = PER_RANK) -> float:
    """DDP's gradient (reduction='sum' on every rank) / the single-process gradient
    (reduction='mean' on all ranks * per_rank samples).

    DDP's default all-reduce sums the ranks' gradients and divides by the world size (section 4;
    `allreduce_hook`'s `_allreduce_fut` does `div_(size)` first), so DDP's gradient is the mean
    of the per-rank gradients, computed here on a shared model.
    """
    src = inspect.getsource(dist.algorithms.ddp_comm_hooks.default_hooks._allreduce_fut)
    if "div_(" not in src:
        raise RuntimeError("_allreduce_fut no longer divides by the world size: update 06.2")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(ranks * per_rank, 8, generator=g)
    y = torch.randn(ranks * per_rank, OUTPUTS, generator=g)
    model = make_mlp(seed=0)
    shards = [slice(r * per_rank, (r + 1) * per_rank) for r in range(ranks)]
    per_rank_grads = [_grads(model, x[s], y[s], "sum") for s in shards]
    ddp_grad = torch.stack(per_rank_grads).sum(0) / ranks
    reference = _grads(model, x, y, "mean")
    ratio = (ddp_grad @ reference) / (reference @ reference)  # least-squares factor
    if not torch.allclose(ddp_grad, ratio * reference, rtol=1e-4, atol=1e-5):
        raise RuntimeError("DDP's gradient is not a multiple of the reference: update 06.2")
    return float(ratio)


@exercise(
    "06.2",
    "A sum loss on the ranks, a mean loss as reference",
    look=N_(
        "section 4: what the default all-reduce does with the ranks' summed gradients "
        "(divided by world_size, then summed), and section 5's comparison with a mean loss"
    ),
    reveal=N_(
        "`sum_loss_factor(4, 3)` in the judge module: the per-rank sum-loss gradients, added "
        "and divided by the world size, against the mean-loss gradient on all 12 samples "
        "(48 elements)"
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
                "{total} samples; the mean loss divides by every element, {total} x {outputs} = "
                "{elements}: G / {elements}. Factor {elements}/{ranks} = {truth:g}"
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


def unused_loop_worker(rank: int, world_size: int, ddp_kwargs: dict) -> dict:
    """Two training steps of TwoHeadNet through head_a only (head_b never used), under DDP."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))  # (3, 4)
    model = TwoHeadNet(seed=0)
    ddp = wrap_ddp(model, **ddp_kwargs)
    try:
        for _ in range(2):
            ddp(x, "a").sum().backward()
    except RuntimeError as err:
        return {"error": str(err).split(". ")[0] + "."}
    return {"error": None, "head_b grad": model.head_b.weight.grad is not None}


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
    results = _unused_results()
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
