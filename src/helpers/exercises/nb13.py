"""Judges for notebook 13 (ZeRO from scratch and FSDP2): bytes, shards and hooks.

The truths come from the ZeRO paper's mixed-precision accounting (13.1, with torch's dtype sizes),
from `helpers.sharded` (`memory_formula`, `padded_numel`, `make_model`), from
FSDP2's own chunking (`_chunk_with_empty`, `_get_dim_chunked_size` in
torch/distributed/fsdp/_fully_shard/_fsdp_common.py), on which the reader's `shard_shape` runs
in-process on the shown case and hidden ones, and from autograd itself (13.3: stage 2's
reduce-and-drop run in a tensor hook and in a post-accumulate-grad hook on a leaf over two backward
passes, and each stated reason tested on a leaf). No judge launches processes.

Numbers may come as Python, numpy or 0-d torch scalars (`_num`).
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

import torch

from helpers import sharded
from helpers.exercises import (
    N_,
    Hint,
    as_int,
    binds,
    called_names,
    exercise,
    run_answer,
    started_process,
    tr,
    watching,
)

SCHEMES = ("ddp", "zero1", "zero2", "fsdp2")
BIG_NUMEL, BIG_RANKS = 7_500_000_000, 64  # 13.1
SHOWN_SHAPE, SHOWN_RANKS = (6, 30), 4  # 13.2: the last Linear's weight, the prompt's case
#: 13.2's hidden cases: uneven dim 0, world size 3, dim 0 smaller than the world size (empty
#: shards), 1-D and 3-D parameters
HIDDEN_SHAPES = [((13, 3), 4), ((7, 5), 3), ((10, 2), 3), ((2, 4), 4), ((5,), 4), ((9, 3, 2), 4),
                 ((1,), 3)]  # fmt: skip
GRAD_RANKS = 16  # 13.4 (at 4 and 8 ranks the FSDP2 figure scales from section 4's printed one)
LOCAL_RANK = 14  # 13.4: the rank whose unpadded local piece is asked (rank 15 holds none)


def _num(value: Any) -> float | None:
    """`value` as a float when it is a real number (int, float, a numpy or 0-d torch scalar)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dim() != 0 or value.dtype == torch.bool:
            return None
        value = value.item()
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    """`value` as an int when it is a whole number (a 0-d torch integer tensor too)."""
    f = _num(value)
    return None if f is None else as_int(f)


def _close(a: Any, b: float) -> bool:
    a = _num(a)
    return a is not None and abs(a - b) <= 1e-6 * b


def _close_enough(a: Any, b: float) -> bool:
    """Within 1% (a figure rounded to a GB or two decimals of one)."""
    a = _num(a)
    return a is not None and abs(a - b) <= 0.01 * b


STAGES = ("ddp", "zero1", "zero2", "zero3")  # 13.1: the paper's P_os, P_os+g, P_os+g+p


def fp32_bytes_per_rank(numel: int, world_size: int) -> dict[str, float]:
    """Section 1's fp32 accounting by `memory_formula` (the usual wrong answer to 13.1)."""
    padded = sharded.padded_numel(numel, world_size)
    return {
        t: float(sum(sharded.memory_formula(numel, padded, world_size, s).values()))
        for t, s in zip(STAGES, SCHEMES, strict=True)
    }


def mixed_bytes_per_rank(numel: int = BIG_NUMEL, world_size: int = BIG_RANKS) -> dict[str, float]:
    """Bytes per rank under the ZeRO paper's mixed-precision Adam (section 1's quote).

    fp16 parameters and gradients (2 + 2 bytes) and K = 12 bytes of fp32 optimizer state (a
    copy of the parameters, momentum, variance); stage 1 shards the optimizer state, stage 2
    the gradients too, stage 3 the parameters too. Sizes from torch's dtypes.
    """
    half, k = torch.float16.itemsize, 3 * torch.float32.itemsize
    p, n = numel, world_size
    return {
        "ddp": float((half + half + k) * p),
        "zero1": (half + half) * p + k * p / n,
        "zero2": half * p + (half + k) * p / n,
        "zero3": (half + half + k) * p / n,
    }


@exercise(
    "13.1",
    "The ZeRO paper's mixed-precision bytes per rank, 7.5e9 parameters on 64 ranks",
    look=N_(
        "section 1's quote of the paper's section 3.1: 2 + 2 bytes of fp16 weight and gradient, "
        "K = 12 of fp32 optimizer state, and which of them each stage divides by N"
    ),
    reveal=N_(
        "`nb13.mixed_bytes_per_rank(7_500_000_000, 64)`: (2 + 2 + 12) P for DDP, "
        "(2 + 2) P + 12 P / N, 2 P + 14 P / N, 16 P / N"
    ),
)
def big_model_bytes(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != set(STAGES):
        raise Hint(
            tr(
                "give a dict with the keys {list_schemes}: total bytes per rank each",
                list_schemes=list(STAGES),
            )
        )
    n, p = BIG_RANKS, BIG_NUMEL
    truth = mixed_bytes_per_rank(p, n)
    fp32 = fp32_bytes_per_rank(p, n)
    for s in STAGES:
        a = answer[s]
        if _close(a, truth[s]):
            continue
        for unit, size, text in (("GB", 1e9, "1e9"), ("GiB", 2**30, "2**30")):
            if _close_enough(a, truth[s] / size):  # a rounded figure in GB or GiB
                raise Hint(
                    tr(
                        "answer in bytes, not GB: {s} = {a} {unit} is {a} x {text} bytes",
                        s=s,
                        a=_num(a),
                        unit=unit,
                        text=text,
                    )
                )
        if s == "ddp" and _close(a, truth[s] / n):
            raise Hint(tr("DDP does not shard: every rank holds all 16 bytes per parameter"))
        if s == "zero3" and _close(a, truth["ddp"]):
            raise Hint(
                tr("stage 3 shards parameters, gradients and optimizer state: all of it / N")
            )
        if _close(a, fp32[s]):
            raise Hint(
                tr(
                    (
                        "{s}: that is section 1's fp32 accounting; the paper's is mixed "
                        "precision: the weight and the gradient are fp16, 2 bytes each"
                    ),
                    s=s,
                )
            )
        if s in ("zero1", "zero2") and _close(a, truth[s] - 4 * p / n):
            raise Hint(
                tr(
                    (
                        "{s}: mixed-precision Adam keeps K = 12 bytes per owned element (an fp32 "
                        "copy of the parameters plus momentum and variance), not 8"
                    ),
                    s=s,
                )
            )
        if s == "zero1" and _close(a, truth["zero2"]):
            raise Hint(tr("zero1 shards only the optimizer state; the gradients stay full"))
        if s == "zero2" and _close(a, truth["zero1"]):
            raise Hint(tr("zero2 shards the fp16 gradients too: 2 bytes x P / N"))
        raise Hint(
            tr(
                (
                    "{s} is off: per element, which of fp16 weight (2 B), fp16 gradient (2 B) "
                    "and fp32 optimizer state (12 B) does {s} keep whole, and which 1/N of?"
                ),
                s=s,
            )
        )
    gb = {s: f"{v / 1e9:.3f}" for s, v in truth.items()}
    return tr(
        (
            "GB per rank {gb}: the same 16 bytes per parameter as section 1's fp32 count for DDP "
            "({ddp:.0f} GB), but stage 1 keeps {zero1:.1f} GB here against {fp32_zero1:.1f} GB "
            "in fp32, because the weight and the gradient left whole are 2 bytes each, not 4."
        ),
        gb=gb,
        ddp=truth["ddp"] / 1e9,
        zero1=truth["zero1"] / 1e9,
        fp32_zero1=fp32["zero1"] / 1e9,
    )


def fsdp2_local_shapes(shape: tuple[int, ...] = SHOWN_SHAPE, n: int = SHOWN_RANKS) -> list:
    """Each rank's local (unpadded) shard shape, computed with FSDP2's own chunking."""
    from torch.distributed.fsdp._fully_shard import _fsdp_common  # a slow import: only here

    full = torch.empty(shape)
    chunks = _fsdp_common._chunk_with_empty(full, n, dim=0)
    return [tuple(_fsdp_common._get_dim_chunked_size(c, full.size(), dim=0)) for c in chunks]


#: Names whose call does the job for the reader (FSDP2's and DTensor's own shape code); a
#: first check by name, before `_watching` catches the same functions (and aliases) at run time.
_LIBRARY = {
    "_chunk_with_empty",
    "_get_dim_chunked_size",
    "compute_local_shape_and_global_offset",
    "compute_local_shape",
    "local_shard_size_and_offset",
    "_local_shard_size_and_offset",
    "_split_tensor",
    "fully_shard",
    "distribute_tensor",
}


def _params(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


_takes = binds


_called_names = called_names


def _shape(value: Any) -> tuple | None:
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, (tuple, list)) and all(_int(v) is not None for v in value):
        return tuple(_int(v) for v in value)
    return None


def _library_code() -> tuple[set, set]:
    """The code objects (and builtins) of FSDP2's and DTensor's shape code, for `_watching`."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard import _fsdp_common
    from torch.distributed.tensor import _utils, distribute_tensor, placement_types

    fns = [
        _fsdp_common._chunk_with_empty,
        _fsdp_common._get_dim_chunked_size,
        _utils.compute_local_shape_and_global_offset,
        fully_shard,
        distribute_tensor,
    ]
    for cls in vars(placement_types).values():
        if isinstance(cls, type):
            for name in ("local_shard_size_and_offset", "_local_shard_size_and_offset",
                         "_split_tensor", "_custom_chunk"):  # fmt: skip
                if name in vars(cls):
                    fns.append(getattr(cls, name))
    codes, builtins = set(), set()
    for fn in fns:
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        if hasattr(fn, "__code__"):
            codes.add(fn.__code__)
        else:
            builtins.add(id(fn))
    return codes, builtins


_watching = watching


@exercise(
    "13.2",
    "FSDP2's shard shape, written by you",
    look=N_(
        "section 4: FSDP2 cuts dim 0 into chunks of ceil(rows / N), and section 6's 8, 8, 8, 6 "
        "rows of the (30, 10) weight on 4 ranks"
    ),
    reveal=N_(
        "`_fsdp_common._chunk_with_empty(full, world_size, dim=0)` and "
        "`_fsdp_common._get_dim_chunked_size(chunk, shape, dim=0)` (torch/distributed/fsdp/"
        "_fully_shard/_fsdp_common.py)"
    ),
)
def shard_shape_code(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                "give a function shard_shape(global_shape, world_size, rank), found {answer!r}",
                answer=answer,
            )
        )
    if not _takes(answer, (SHOWN_SHAPE, SHOWN_RANKS, 0)):
        raise Hint(
            tr(
                "the function takes (global_shape, world_size, rank); yours takes {params}",
                params=_params(answer),
            )
        )
    refusal = tr(
        "do not call FSDP2's or DTensor's own shape code: compute the rows yourself "
        "from global_shape[0] and world_size"
    )
    if _called_names(answer) & _LIBRARY:
        raise Hint(refusal)
    cases = [(SHOWN_SHAPE, SHOWN_RANKS), *HIDDEN_SHAPES]
    codes, builtins = _library_code()
    # every answer first, each under the watch; the truths only after (none is in a frame of
    # this judge while the reader's code runs), and a case's error in the cases' order
    answers = []
    for i, (shape, n) in enumerate(cases):
        where = (
            tr("the prompt's case")
            if i == 0
            else tr("a hidden case, global_shape={shape}, world_size={n}", shape=shape, n=n)
        )
        with _watching(codes, builtins, processes=True) as hits:
            try:
                answers.append((where, [run_answer(where, answer, shape, n, r) for r in range(n)]))
            except Hint as raised:
                answers.append((where, raised))
        started_process(hits)
        if hits:
            raise Hint(refusal)
    for (where, found), (shape, n) in zip(answers, cases, strict=True):
        if isinstance(found, Hint):
            raise found
        truth = fsdp2_local_shapes(shape, n)
        got = [_shape(f) for f in found]
        if any(g is None for g in got):
            bad = next(f for f, g in zip(found, got, strict=True) if g is None)
            raise Hint(tr("return the shape as a tuple of ints, found {bad!r}", bad=bad))
        if got == truth:
            continue
        wrong = [r for r in range(n) if got[r] != truth[r]]
        if any(g[1:] != tuple(shape[1:]) for g in got):
            raise Hint(
                tr(
                    "{where}: Shard(dim=0) cuts rows only; every shard keeps the other dims {rest}",
                    where=where,
                    rest=tuple(shape[1:]),
                )
            )
        if any(g[0] < 0 for g in got):
            raise Hint(
                tr(
                    (
                        "{where}: rank {rank} got {rows} rows; once the rows run out, a rank's "
                        "shard is empty, it cannot go below zero"
                    ),
                    where=where,
                    rank=wrong[0],
                    rows=got[wrong[0]][0],
                )
            )
        if sum(g[0] for g in got) < shape[0]:
            raise Hint(
                tr(
                    (
                        "{where}: your shards hold {total} rows between them, the parameter has "
                        "{rows}; the shards must cover every row, in chunks of ceil(rows / N)"
                    ),
                    where=where,
                    total=sum(g[0] for g in got),
                    rows=shape[0],
                )
            )
        if sum(g[0] for g in got) > shape[0]:
            raise Hint(
                tr(
                    (
                        "{where}: your shards hold {total} rows between them, the parameter has "
                        "{rows}; a local shard is unpadded"
                    ),
                    where=where,
                    total=sum(g[0] for g in got),
                    rows=shape[0],
                )
            )
        even = [t.shape[0] for t in torch.empty(shape[0]).tensor_split(n)]
        if [g[0] for g in got] == even:
            raise Hint(
                tr(
                    (
                        "{where}: that is an even split, as torch.tensor_split makes; FSDP2 "
                        "gives each rank ceil(rows / N) rows until the rows run out"
                    ),
                    where=where,
                )
            )
        raise Hint(
            tr(
                "{where}: rank {rank}'s shape differs (yours {got}); which rows does it own?",
                where=where,
                rank=wrong[0],
                got=got[wrong[0]],
            )
        )
    shown = fsdp2_local_shapes()
    return tr(
        (
            "{shown} for {shape} on {n} ranks, and the {hidden} hidden cases too (uneven rows, "
            "world size 3, dim 0 smaller than N, 1-D and 3-D): torch.chunk makes chunks of "
            "ceil(rows / N), which may be fewer than N, and FSDP2 gives the remaining ranks "
            "empty shards, padded to the first chunk's size for the all-gather."
        ),
        shown=shown,
        shape=SHOWN_SHAPE,
        n=SHOWN_RANKS,
        hidden=len(HIDDEN_SHAPES),
    )


#: 13.3: the two hooks, by the names `hook_timeline` records them under
HOOK_KEYS = (("hook", 1), ("post", 1), ("hook", 2), ("post", 2))
#: 13.3: what a rank would hold if stage 2 reduced and dropped in a tensor hook (`register_hook`)
OUTCOMES = ("same", "full", "lost", "twice")
#: 13.3: the stated reasons; the judge decides from autograd which one holds
HOOK_REASONS = ("before", "after", "per_use", "ignored")


def hook_timeline() -> dict[tuple[str, int], float | None]:
    """What `w.grad` holds when each hook runs, over two backward passes without zero_grad.

    A leaf `w` (a scalar, 0.0) with `w.register_hook` ("hook") and
    `w.register_post_accumulate_grad_hook` ("post"); backward k computes `(k * w).sum()`, so its
    gradient is k: 1 the first time, 2 the second.
    """
    w = torch.zeros((), requires_grad=True)
    seen: dict[tuple[str, int], float | None] = {}
    k = 0

    def grad_now() -> float | None:
        return None if w.grad is None else float(w.grad)

    def hook(grad: torch.Tensor) -> None:
        seen[("hook", k)] = grad_now()

    def post(param: torch.Tensor) -> None:
        seen[("post", k)] = grad_now()

    w.register_hook(hook)
    w.register_post_accumulate_grad_hook(post)
    for k in (1, 2):  # noqa: B007 (the hooks read k)
        (k * w).sum().backward()
    return {key: seen[key] for key in HOOK_KEYS}


def hook_variant(kind: str) -> tuple[float, float | None]:
    """(the shard's gradient, `w.grad`) after two backward passes of stage 2's reduce-and-drop.

    `ZeroAdamW._reduce` at world size 1 (the shard is the whole gradient, no process group): a
    leaf `w`, backward k computes `(k * w).sum()` (gradient k), no zero_grad between them. The
    hook adds the gradient into the shard's and sets `w.grad = None`; it is registered with
    `register_post_accumulate_grad_hook` ("post", reading `w.grad` as section 3's does) or with
    `register_hook` ("hook", reading the gradient it is called with).
    """
    w = torch.zeros((), requires_grad=True)
    shard: list[torch.Tensor] = []

    def reduce(grad: torch.Tensor) -> None:
        out = grad.detach().clone()
        shard[:] = [out if not shard else shard[0] + out]
        w.grad = None  # stage 2 keeps only the shard

    if kind == "hook":
        w.register_hook(lambda grad: reduce(grad))
    else:
        w.register_post_accumulate_grad_hook(lambda p: reduce(p.grad))
    for k in (1, 2):
        (k * w).sum().backward()
    return float(shard[0]), None if w.grad is None else float(w.grad)


def hook_outcome() -> str | None:
    """The OUTCOMES key for what the tensor-hook variant leaves after two backward passes."""
    shard, grad = hook_variant("hook")
    return {(3.0, None): "same", (3.0, 2.0): "full", (2.0, None): "lost", (2.0, 2.0): "lost",
            (4.0, None): "twice", (4.0, 2.0): "twice"}.get((shard, grad))  # fmt: skip


def hook_reasons() -> dict[str, bool]:
    """Which of HOOK_REASONS holds in the installed torch, each decided by autograd itself."""
    seen = hook_timeline()
    w = torch.zeros((), requires_grad=True)
    calls: list[float] = []
    w.register_hook(lambda grad: calls.append(float(grad)))
    (2 * w + 3 * w).sum().backward()  # w used twice in one forward
    dropped = hook_variant("post")[1] is None  # p.grad = None in a hook sticks
    return {
        "before": seen[("hook", 1)] is None and seen[("post", 1)] is not None,
        "after": seen[("hook", 1)] is not None,
        "per_use": len(calls) == 2,
        "ignored": not dropped,
    }


_REASON_HINTS = {
    "after": N_(
        "if a tensor hook ran after .grad is written, it would find .grad set in the first "
        "backward: record what w.grad holds inside one"
    ),
    "per_use": N_(
        "for a leaf used twice in forward, backward sums the two parts of its gradient "
        "before it calls the tensor hook: count the calls"
    ),
    "ignored": N_(
        "section 3's stage 2 sets p.grad = None in its hook and keeps only the shard (section 4 "
        "measures it): an assignment in a hook is not ignored"
    ),
}
_OUTCOME_HINTS = {
    "same": N_(
        "the drop saves memory only if nothing writes .grad again later in the same backward: "
        "what runs on the parameter after a tensor hook returns?"
    ),
    "lost": N_(
        "the hook adds each backward's gradient into the shard's, which keeps what it held: "
        "nothing removes the first one"
    ),
    "twice": N_(
        "the hook reads the gradient it is called with, that backward's alone, not .grad: "
        "each gradient reaches the shard once"
    ),
}


@exercise(
    "13.3",
    "Why ZeRO-2 drops the gradient in a post-accumulate-grad hook",
    look=N_(
        "torch's docs of the two Tensor methods: register_post_accumulate_grad_hook \"will be "
        "called after all gradients for a tensor have been accumulated, meaning that the .grad "
        'field has been updated"; register_hook\'s hook is called "every time a gradient with '
        'respect to the Tensor is computed" and "can optionally return a new gradient which '
        "will be used in place of grad\" (AccumulateGrad, the node that writes a leaf's .grad, "
        "comes later in the course: notebook 14 section 6)"
    ),
    reveal=N_(
        "`helpers.exercises.nb13.hook_variant('hook')`: the reduce-and-drop in a tensor hook over "
        "two backward passes; `hook_reasons()` decides each reason"
    ),
)
def hook_timing(answer: Any) -> str:
    if isinstance(answer, list) and len(answer) == 2:
        answer = tuple(answer)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise Hint(
            tr(
                "give a pair (outcome, reason), e.g. ('lost', 'after'); the outcomes are "
                "{outcomes}, the reasons {reasons}",
                outcomes=list(OUTCOMES),
                reasons=list(HOOK_REASONS),
            )
        )
    outcome, reason = answer
    if outcome not in OUTCOMES:
        raise Hint(
            tr(
                "{outcome!r} is not an outcome key; choose one of {outcomes}",
                outcome=outcome,
                outcomes=list(OUTCOMES),
            )
        )
    if reason not in HOOK_REASONS:
        raise Hint(
            tr(
                "{reason!r} is not a reason key; choose one of {reasons}",
                reason=reason,
                reasons=list(HOOK_REASONS),
            )
        )
    truths = hook_reasons()
    holds = [r for r in HOOK_REASONS if truths[r]]
    right_outcome = hook_outcome()
    if holds != ["before"] or right_outcome != "full":  # the world the verdict below explains
        raise Hint(
            tr(
                "this torch's autograd no longer matches the exercise (reasons that hold: "
                "{holds}, outcome: {outcome}); the notebook needs updating",
                holds=holds,
                outcome=right_outcome,
            ),
            counts=False,
        )
    if (outcome, reason) == (right_outcome, holds[0]):
        shard, grad = hook_variant("hook")
        return tr(
            (
                "{pair}: backward calls a tensor hook before AccumulateGrad stores the gradient "
                "in .grad, so the reduce-scatter happens, but the p.grad = None it sets is "
                "undone when AccumulateGrad then stores the gradient the hook just reduced. On a "
                "scalar leaf with gradients 1 and 2 (world size 1), after the second backward "
                "the shard holds {shard} (the sum) and p.grad {grad}, the second gradient alone: a "
                "full-size gradient stays on every rank, as much memory as under ZeRO-1 (where "
                "p.grad would hold the sum). A post-accumulate-grad hook runs after "
                "AccumulateGrad: .grad then holds everything backward accumulated and nothing "
                "later in backward writes it, so the drop sticks. That is why stage 2 reduces "
                "there."
            ),
            pair=(outcome, reason),
            shard=shard,
            grad=grad,
        )
    if reason != holds[0] and outcome != right_outcome:  # both wrong: one hint for each
        raise Hint(tr(_REASON_HINTS[reason]) + "\n" + tr(_OUTCOME_HINTS[outcome]))
    if reason != holds[0]:
        raise Hint(tr(_REASON_HINTS[reason]))
    raise Hint(tr(_OUTCOME_HINTS[outcome]))


def grad_bytes(world_size: int = GRAD_RANKS) -> tuple[float, float]:
    """(ZeRO-2, FSDP2) gradient bytes stored per rank for `make_model()`, padding included.

    FSDP2's from its own chunking: every rank stores a buffer of the first chunk's size
    (`padded_sharded_param_size` in `FSDPParam._init_sharded_param`).
    """
    from torch.distributed.fsdp._fully_shard import _fsdp_common  # a slow import: only here

    params = list(sharded.make_model().parameters())
    numel = sum(p.numel() for p in params)
    padded = sum(sharded.padded_numel(p.numel(), world_size) for p in params)
    fsdp = world_size * sum(
        _fsdp_common._chunk_with_empty(torch.empty(p.shape), world_size, dim=0)[0].numel()
        for p in params
    )
    zero2 = sharded.memory_formula(numel, padded, world_size, "zero2")["grads"]
    fsdp2 = sharded.memory_formula(numel, padded, world_size, "fsdp2", fsdp)["grads"]
    return zero2, fsdp2


def local_grad_bytes(rank: int = LOCAL_RANK, world_size: int = GRAD_RANKS) -> int:
    """Bytes of gradient in rank `rank`'s unpadded FSDP2 local piece, from FSDP2's chunking."""
    return sum(
        4 * math.prod(fsdp2_local_shapes(tuple(p.shape), world_size)[rank])
        for p in sharded.make_model().parameters()
    )


@exercise(
    "13.4",
    "ZeRO-2's and FSDP2's gradient bytes per rank at N = 16, and rank 14's local piece",
    look=N_(
        "section 2's padding rule (ZeRO: each flattened parameter to a multiple of N) and "
        "section 4's (FSDP2: every rank stores a first chunk, ceil(rows / N) rows), and "
        "13.2's rule for the rows a rank owns"
    ),
    reveal=N_(
        "`sharded.padded_numel(numel, 16)` and `sharded.fsdp_padded_numel(shape, 16)` per "
        "parameter, then `sharded.memory_formula(...)`'s grads entry; rank 14's piece: "
        "`nb13.fsdp2_local_shapes(shape, 16)[14]` per parameter, 4 bytes an element"
    ),
)
def padded_grads(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 3) or any(
        _num(a) is None for a in answer
    ):
        raise Hint(
            tr("give a triple of numbers of bytes: (ZeRO-2, FSDP2, FSDP2's local piece on rank 14)")
        )
    zero2, fsdp2, local = (_num(a) for a in answer)
    t_zero2, t_fsdp2 = grad_bytes()
    t_local = local_grad_bytes()
    n = GRAD_RANKS
    params = list(sharded.make_model().parameters())
    numel = sum(p.numel() for p in params)
    s_zero2, s_fsdp2 = (4 * b / n for b in grad_bytes(4))  # section 4's N = 4 figures, scaled
    if zero2 != t_zero2:
        if zero2 == s_zero2:
            raise Hint(
                tr(
                    "the padding depends on N: redo it for {n} ranks, do not scale a figure "
                    "printed for 4",
                    n=n,
                )
            )
        if zero2 == 4 * numel / n:
            raise Hint(
                tr(
                    "ZeRO-2: each parameter is padded with zeros to a multiple of N before it "
                    "is cut into N equal shards (section 2)"
                )
            )
        if zero2 == 4 * numel:
            raise Hint(tr("that is DDP's and ZeRO-1's full gradient; ZeRO-2 keeps only its shard"))
        if zero2 == 4 * math.ceil(numel / n):
            raise Hint(tr("ZeroAdamW pads every parameter on its own, not the whole model at once"))
        raise Hint(
            tr(
                "ZeRO-2: how many elements of the (6,) bias does each of 16 ranks store, once it "
                "is padded to a multiple of N? Then the other five parameters"
            )
        )
    if fsdp2 != t_fsdp2:
        if fsdp2 == s_fsdp2:
            raise Hint(
                tr(
                    "the padding depends on N: redo it for {n} ranks, do not scale a figure "
                    "printed for 4",
                    n=n,
                )
            )
        if fsdp2 == t_zero2:
            raise Hint(
                tr(
                    "FSDP2 pads along dim 0, to a multiple of N rows (section 4), not the "
                    "flattened parameter: a (6, 30) weight gains whole rows"
                )
            )
        if fsdp2 == 4 * numel / n:
            raise Hint(
                tr(
                    "FSDP2's local pieces are uneven, but every rank stores its gradient in a "
                    "buffer of the first chunk's size (section 4): padded"
                )
            )
        if fsdp2 == n * t_fsdp2:
            raise Hint(tr("that is the whole padded gradient; each rank stores 1/N of it"))
        raise Hint(
            tr(
                "FSDP2: how many rows of the (6, 30) weight does each of 16 ranks store, padding "
                "included? Then the other five parameters"
            )
        )
    if local != t_local:
        if local == t_fsdp2:
            raise Hint(
                tr(
                    "that is what rank 14 stores; its local piece is unpadded: only the rows "
                    "it owns"
                )
            )
        if local == 4 * numel / n:
            raise Hint(tr("FSDP2's local pieces are uneven: an even 1/N is nobody's piece"))
        raise Hint(
            tr(
                "which rows of each parameter does rank 14 own, in chunks of ceil(rows / N) "
                "that may run out before the last ranks?"
            )
        )
    return tr(
        (
            "({t_zero2:.0f}, {t_fsdp2:.0f}, {t_local:.0f}) B: ZeRO-2 pads each flattened "
            "parameter to a "
            "multiple of {n} ({numel} -> {padded} elements, / {n}); FSDP2 pads dim 0, so the "
            "(6, 30) weight and its bias store one row each per rank although 6 < {n}. Rank 14's "
            "local piece is {t_local:.0f} B (the last 2 rows of each 30-row parameter, nothing of "
            "the 6-row ones) and rank 15's is {last:.0f} B: it stores {t_fsdp2:.0f} B of "
            "padding only."
        ),
        t_local=t_local,
        last=local_grad_bytes(n - 1),
        t_zero2=t_zero2,
        t_fsdp2=t_fsdp2,
        n=n,
        numel=numel,
        padded=int(t_zero2 * n / 4),
    )
