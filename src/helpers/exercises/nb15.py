"""Judges for notebook 15 (tensor and sequence parallelism): placements, bytes, memory.

The truths come from `helpers.tensor_parallel` (`ring_bytes`, `korthikanti_bytes`) and, for the
placements of 15.1, from a sequence-parallel run of the notebook's MLP block as 2 ranks in this
one process (`LocalTensorMode` with the fake process group): no judge launches processes.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from helpers import tensor_parallel as tp
from helpers.exercises import Hint, exercise, tr

ROW_B, ROW_S, ROW_H, ROW_N, ROW_BYTES = 4, 2048, 4096, 8, 2  # 15.2
GPT_S, GPT_B, GPT_H, GPT_A, GPT_T = 2048, 1, 12288, 96, 8  # 15.3


@functools.cache
def sp_grad_placements() -> dict[str, str]:
    """Gradient placements of the sequence-parallel MLP block, computed as 2 local ranks."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise Hint(
            tr("this judge runs 2 ranks in this process: check in a process without a group")
        )
    found = tp.local_tensor_grad_placements(2)
    return {k: v[1:-2] if v.startswith("(") and v.endswith(",)") else v for k, v in found.items()}


def _norm(a: Any) -> str:
    """ "(Shard(dim=0),)", "Shard(0)", " shard(0) " -> "Shard(0)"; "Replicate()" -> "Replicate"."""
    text = re.sub(r"\s+|dim=", "", str(a))
    if text.startswith("(") and text.endswith(",)"):
        text = text[1:-2]
    text = text.removesuffix("()")
    return text[:1].upper() + text[1:]


@exercise("15.1", "Gradient placements under SequenceParallel")
def placements(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"fc2.bias", "ln.weight"}:
        raise Hint(tr('give a dict {{"fc2.bias": ..., "ln.weight": ...}} of placement names'))
    truth = {k: sp_grad_placements()[k] for k in ("fc2.bias", "ln.weight")}
    for k in ("fc2.bias", "ln.weight"):
        got, want = _norm(answer[k]), _norm(truth[k])
        if got == want or (want == "Partial(sum)" and got == "Partial"):
            continue
        if k == "ln.weight" and got.startswith("Replicate"):
            raise Hint(
                tr(
                    "ln.weight: each rank's LayerNorm saw only its chunk of the sequence, so its "
                    "gradient is one term of a sum that nobody has taken yet"
                )
            )
        if k == "ln.weight" and got.startswith("Shard"):
            raise Hint(
                tr("ln.weight is not cut: its parameter is Replicate(); think of its gradient")
            )
        if k == "fc2.bias" and got.startswith("Partial"):
            raise Hint(
                tr(
                    "fc2.bias: RowwiseParallel's reduce-scatter is all-gather in backward, so "
                    "every rank sees the whole output gradient before the bias gradient is summed"
                )
            )
        raise Hint(
            tr("{k} is off: the section 7 output lists (param, grad) placements per name", k=k)
        )
    return tr(
        (
            "{truth}: the LayerNorm works on a sequence chunk, so its gradient is "
            "Partial: each rank holds one term of a sum not yet taken; the bias sees the "
            "all-gathered gradient and is replicated."
        ),
        truth=truth,
    )


def row_parallel_bytes() -> float:
    return tp.ring_bytes("all_reduce", ROW_B * ROW_S * ROW_H * ROW_BYTES, ROW_N)


def _num(a: Any) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def _close(a: Any, b: float) -> bool:
    return _num(a) and abs(a - b) <= 1e-6 * abs(b)


@exercise("15.2", "Bytes a row-parallel layer sends")
def row_bytes(answer: Any) -> str:
    if not _num(answer):
        raise Hint(tr("give a number of bytes"))
    truth = row_parallel_bytes()
    message = ROW_B * ROW_S * ROW_H * ROW_BYTES
    if _close(answer, truth):
        return tr(
            (
                "{truth:.0f} B: the message is b·s·h·2 = {message} B and a ring all-reduce "
                "sends 2(N-1)/N of it from every rank, almost twice the message."
            ),
            truth=truth,
            message=message,
        )
    if _close(answer, message):
        raise Hint(tr("that is the message itself; a ring all-reduce sends 2(N-1)/N of it"))
    if _close(answer, truth / 2):
        raise Hint(tr("that is a reduce-scatter or an all-gather; an all-reduce is both: 2(N-1)/N"))
    if _close(answer, 2 * truth):
        raise Hint(tr("bfloat16 is 2 bytes per value, not 4"))
    if _close(answer, message / ROW_N):
        raise Hint(tr("the all-reduce moves the whole output, not a 1/N shard of it"))
    raise Hint(tr("message = b·s·h·2 bytes, then `tp.ring_bytes('all_reduce', message, 8)`"))


@exercise("15.3", "Activation memory of a GPT-3-sized layer")
def gpt_memory(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"tp", "sp"}:
        raise Hint(tr('give a dict {{"tp": ..., "sp": ...}} of bytes per layer per rank'))
    args = (GPT_S, GPT_B, GPT_H, GPT_A, GPT_T)
    truth = {"tp": tp.korthikanti_bytes(*args), "sp": tp.korthikanti_bytes(*args, sequence=True)}
    sbh = GPT_S * GPT_B * GPT_H
    one = tp.korthikanti_bytes(GPT_S, GPT_B, GPT_H, GPT_A)
    for k in ("tp", "sp"):
        a = answer[k]
        if _close(a, truth[k]):
            continue
        if not _num(a):
            raise Hint(tr("{k}: give a number of bytes", k=k))
        if _close(a, one):
            raise Hint(tr("{k}: that is one process; divide by t where the formula says so", k=k))
        if k == "tp" and _close(a, truth["sp"]):
            raise Hint(tr("tp: without sequence parallelism 10·s·b·h stay on every rank"))
        if k == "sp" and _close(a, truth["tp"]):
            raise Hint(tr("sp: sequence parallelism shards the 10·s·b·h part too: 34/t"))
        if _close(a, truth[k] - 5 * GPT_A * GPT_S * sbh / GPT_H / GPT_T):
            raise Hint(tr("{k}: the attention scores term 5·a·s/(h·t) is missing", k=k))
        raise Hint(tr("{k} is off: s·b·h·(... ) with the formulas of section 5", k=k))
    gib = {k: f"{v / 2**30:.2f} GiB" for k, v in truth.items()}
    saved = 96 * (truth["tp"] - truth["sp"]) / 2**30
    return tr(
        ("{gib} per layer: over 96 layers sequence parallelism saves {saved:.0f} GiB per rank."),
        gib=gib,
        saved=saved,
    )
