"""Judges for notebook 13 (ZeRO from scratch and FSDP2): bytes, shards and hooks.

The truths come from `helpers.sharded` (`memory_formula`, `padded_numel`, `make_model`,
`ZeroAdamW`'s source) and from FSDP2's own chunking (`_chunk_with_empty`,
`_get_dim_chunked_size` in torch/distributed/fsdp/_fully_shard/_fsdp_common.py). No judge
launches processes.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from helpers import sharded
from helpers.exercises import Hint, exercise, tr
from helpers.source import source_view

SCHEMES = ("ddp", "zero1", "zero2", "fsdp2")
BIG_NUMEL, BIG_RANKS = 7_000_000_000, 8  # 13.1
SHARD_SHAPE, SHARD_RANKS = (6, 30), 4  # 13.2: the last Linear's weight
GRAD_RANKS = 8  # 13.4


def _close(a: Any, b: float) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a - b) <= 1e-6 * b


def _close_enough(a: Any, b: float) -> bool:
    """Within 1% (a figure rounded to a GB or two decimals of one)."""
    return isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a - b) <= 0.01 * b


def bytes_per_rank(numel: int = BIG_NUMEL, world_size: int = BIG_RANKS) -> dict[str, float]:
    """Total bytes per rank (params + grads + optimizer) of each scheme, by `memory_formula`."""
    padded = sharded.padded_numel(numel, world_size)
    return {
        s: float(sum(sharded.memory_formula(numel, padded, world_size, s).values()))
        for s in SCHEMES
    }


@exercise("13.1", "Bytes per rank for a 7-billion-parameter model on 8 ranks")
def big_model_bytes(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != set(SCHEMES):
        raise Hint(
            tr(
                "give a dict with the keys {list_schemes}: total bytes per rank each",
                list_schemes=list(SCHEMES),
            )
        )
    truth = bytes_per_rank()
    n, p = BIG_RANKS, BIG_NUMEL
    for s in SCHEMES:
        a = answer[s]
        if _close(a, truth[s]):
            continue
        for unit, size, text in (("GB", 1e9, "1e9"), ("GiB", 2**30, "2**30")):
            if _close_enough(a, truth[s] / size):  # a rounded figure in GB or GiB
                raise Hint(
                    tr(
                        "answer in bytes, not GB: {s} = {a} {unit} is {a} x {text} bytes",
                        s=s,
                        a=a,
                        unit=unit,
                        text=text,
                    )
                )
        if s == "ddp" and _close(a, truth[s] / n):
            raise Hint(tr("DDP does not shard: every rank holds all 16 bytes per parameter"))
        if s == "fsdp2" and _close(a, 16 * p):
            raise Hint(tr("FSDP2 shards parameters, gradients and optimizer state: all of it / N"))
        if s in ("zero1", "zero2") and _close(a, truth[s] - 4 * p / n):
            raise Hint(
                tr(
                    (
                        "{s}: ZeRO's optimizer keeps 12 bytes per owned element (its fp32 copy of "
                        "the shard plus exp_avg and exp_avg_sq), not 8: read `memory_formula`"
                    ),
                    s=s,
                )
            )
        if s == "zero1" and _close(a, truth["zero2"]):
            raise Hint(tr("zero1 shards only the optimizer state; the gradients stay full"))
        if s == "zero2" and _close(a, truth["zero1"]):
            raise Hint(tr("zero2 shards the gradients too: 4 bytes x padded / N"))
        raise Hint(
            tr("{s} is off: add params, grads and optimizer of `memory_formula(..., {s!r})`", s=s)
        )
    gb = {s: f"{v / 1e9:.1f}" for s, v in truth.items()}
    fits = [s for s in SCHEMES if truth[s] <= 80e9]
    return tr(
        (
            "GB per rank {gb}: only {fits} fit their model states in an 80 GB GPU "
            "(activations and the all-gather, reduce-scatter and bucket buffers not counted); "
            "DDP needs 16 B x 7e9 = 112 GB on every rank."
        ),
        gb=gb,
        fits=fits,
    )


def fsdp2_local_shapes(shape: tuple[int, ...] = SHARD_SHAPE, n: int = SHARD_RANKS) -> list:
    """Each rank's local (unpadded) shard shape, computed with FSDP2's own chunking."""
    from torch.distributed.fsdp._fully_shard import _fsdp_common  # a slow import: only here

    full = torch.empty(shape)
    chunks = _fsdp_common._chunk_with_empty(full, n, dim=0)
    return [tuple(_fsdp_common._get_dim_chunked_size(c, full.size(), dim=0)) for c in chunks]


@exercise("13.2", "FSDP2's shard shapes for the last layer on 4 ranks")
def shard_shapes(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or not all(
        isinstance(s, (tuple, list)) for s in answer
    ):
        raise Hint(tr("give a list of shapes, one tuple per rank, e.g. [(r0, c0), (r1, c1), ...]"))
    shapes = [tuple(s) for s in answer]
    truth = fsdp2_local_shapes()
    rows, cols = SHARD_SHAPE
    if len(shapes) != SHARD_RANKS:
        raise Hint(
            tr(
                (
                    "one shape per rank ({shard_ranks}): a rank whose chunk is empty still gets "
                    "a shard, with 0 rows (`_chunk_with_empty`)"
                ),
                shard_ranks=SHARD_RANKS,
            )
        )
    if shapes == truth:
        return tr(
            (
                "{truth}: torch.chunk cuts {rows} rows into chunks of "
                "ceil({rows}/{shard_ranks}) = {truth_0_0}, which makes only {rows_truth_0_0} "
                "chunks; the last rank gets an empty one, padded to the first chunk's size "
                "for the all-gather."
            ),
            truth=truth,
            rows=rows,
            shard_ranks=SHARD_RANKS,
            truth_0_0=truth[0][0],
            rows_truth_0_0=rows // truth[0][0],
        )
    if any(s[1:] != (cols,) for s in shapes):
        raise Hint(tr("Shard(dim=0) cuts rows: every shard keeps all {cols} columns", cols=cols))
    if sorted(s[0] for s in shapes) == sorted(t.shape[0] for t in torch.empty(rows).tensor_split(
        SHARD_RANKS
    )):  # fmt: skip
        raise Hint(
            tr(
                "that is an even split (torch.tensor_split); FSDP2 uses torch.chunk: chunks "
                "of ceil(rows / N), so the last rank may get fewer rows, even none"
            )
        )
    if all(s[0] == truth[0][0] for s in shapes):
        raise Hint(
            tr(
                "every rank stores the padded size for the all-gather, but its local shard "
                "is unpadded: how many rows are left for the last rank?"
            )
        )
    raise Hint(
        tr(
            "the rows must add up to {rows}, in chunks of ceil({rows}/{shard_ranks})",
            rows=rows,
            shard_ranks=SHARD_RANKS,
        )
    )


def post_backward_hook_api() -> str:
    """The Tensor method `ZeroAdamW` uses to run code once backward has accumulated a grad."""
    code = source_view(sharded.ZeroAdamW.__init__).code
    (name,) = re.findall(r"\.(register_\w+_hook)\(", code)
    return name


@exercise("13.3", "What moves ZeRO-2's reduce-scatter into backward")
def hook_api(answer: Any) -> str:
    if not isinstance(answer, str):
        raise Hint(tr("give a name as a string, e.g. 'some_method'"))
    name = answer.strip().split(".")[-1].rstrip("()")
    truth = post_backward_hook_api()
    if name == truth:
        return tr(
            (
                "`Tensor.{truth}`: its hook runs after backward has accumulated the "
                "parameter's .grad, so `_reduce` can reduce-scatter it at once and stage 2 "
                "may drop the full gradient (nothing later in backward reads it)."
            ),
            truth=truth,
        )
    if name == "register_hook":
        raise Hint(
            tr(
                "`Tensor.register_hook` fires when the gradient w.r.t. the tensor is "
                "computed, before it is accumulated into .grad: look at `ZeroAdamW.__init__` "
                "for the other one"
            )
        )
    if name == "_reduce":
        raise Hint(
            tr("`_reduce` is what runs; which Tensor method registers it to run in backward?")
        )
    if name in ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter"):
        raise Hint(
            tr("that is the collective itself; the question is what makes it run in backward")
        )
    raise Hint(tr("read `show_source(sharded.ZeroAdamW.__init__)`: the `if stage == 2:` branch"))


def zero2_grad_bytes(world_size: int = GRAD_RANKS) -> float:
    """ZeRO-2 gradient bytes on each rank for `make_model()`, padding included."""
    params = list(sharded.make_model().parameters())
    numel = sum(p.numel() for p in params)
    padded = sum(sharded.padded_numel(p.numel(), world_size) for p in params)
    return sharded.memory_formula(numel, padded, world_size, "zero2")["grads"]


@exercise("13.4", "ZeRO-2's gradient bytes per rank at N = 8, padding included")
def zero2_grads(answer: Any) -> str:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Hint(tr("give a number of bytes"))
    truth = zero2_grad_bytes()
    numel = sum(p.numel() for p in sharded.make_model().parameters())
    if answer == truth:
        padded = int(truth * GRAD_RANKS / 4)
        return tr(
            (
                "{truth:.0f} B: each parameter padded to a multiple of {grad_ranks} ({numel} "
                "-> {padded} elements), 4 bytes x {padded} / {grad_ranks}."
            ),
            truth=truth,
            grad_ranks=GRAD_RANKS,
            numel=numel,
            padded=padded,
        )
    if answer == 4 * numel / GRAD_RANKS:
        raise Hint(
            tr(
                "padding: each parameter is padded separately to a multiple of N before it "
                "is cut into N equal shards (`padded_numel`, section 2)"
            )
        )
    if answer == 4 * numel:
        raise Hint(tr("that is DDP's and ZeRO-1's full gradient; ZeRO-2 keeps only its shard"))
    if answer == 4 * sharded.padded_numel(numel, GRAD_RANKS) / GRAD_RANKS:
        raise Hint(tr("ZeroAdamW pads every parameter on its own, not the whole model at once"))
    raise Hint(tr("4 bytes x (the sum over parameters of padded_numel(numel, 8)) / 8"))
