"""Expert parallelism (a mixture-of-experts layer): the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.expert_parallel`, which re-exports both) still loads the
harness. tests/test_code_map.py checks the order and these rules.

Used by: notebook 17.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

HIDDEN, FFN, EXPERTS, TOP_K, TOKENS = 8, 16, 4, 2, 12  # h, f, E, k, T (tokens per rank)
_FLOAT_BYTES = 4  # float32 rows
EXCHANGE_LOG: list[dict[str, Any]] = []  # every exchange of this process, in order
_PHASE = ["forward"]
EXCHANGES = ("function", "functional")


# -- 17 · 7. A mixture of experts over `all_to_all_single` ----------------------------------------


@dataclass
class MoEParams:
    """The layer's parameters (all experts): router (h, E) + (E,), experts (E, h, f) ... (E, h)."""

    router_w: torch.Tensor
    router_b: torch.Tensor
    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor

    def named(self) -> dict[str, torch.Tensor]:
        return dict(self.__dict__)

    def requires_grad_(self) -> MoEParams:
        for t in self.__dict__.values():
            t.requires_grad_()
        return self


def route(
    x: torch.Tensor, p: MoEParams, k: int, capacity_factor: float | None
) -> dict[str, torch.Tensor]:
    """Top-k routing of one group's tokens x (T, h), with the capacity applied.

    Returns expert (T, k) int64, gate (T, k) (softmax probabilities, differentiable), keep
    (T, k) bool (False: dropped by the capacity), per_expert (E,) assignments before dropping.
    """
    experts = p.router_w.shape[1]
    probs = torch.softmax(x @ p.router_w + p.router_b, dim=-1)
    gate, expert = probs.topk(k, dim=-1)
    keep = torch.ones_like(expert, dtype=torch.bool)
    c = capacity(x.shape[0], k, experts, capacity_factor)
    if c is not None:
        # priority: slot-major (every first choice before any second), then token order
        order = expert.t().reshape(-1)  # (k*T,): slot 0 of every token, then slot 1, ...
        onehot = torch.nn.functional.one_hot(order, experts)
        position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # rank of the assignment at its expert
        keep = (position < c).reshape(k, -1).t()
    per_expert = torch.bincount(expert.reshape(-1), minlength=experts)
    return {"expert": expert, "gate": gate, "keep": keep, "per_expert": per_expert}


def _experts(p: MoEParams, e: int | slice, x: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ p.w1[e] + p.b1[e].unsqueeze(-2))
    return h @ p.w2[e] + p.b2[e].unsqueeze(-2)


def moe_reference(
    x: torch.Tensor, p: MoEParams, groups: int, k: int = TOP_K, capacity_factor=None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The layer in one process, dense: every expert on every token, weighted by the routing.

    x is all groups' tokens (groups * T, h), group g = rows g*T ... (g+1)*T-1; the capacity is
    per group and expert. Returns (y, stats) with stats = per_expert (E,) assignments before
    dropping, kept (E,) after, dropped (int).
    """
    experts = p.router_w.shape[1]
    weights, per_expert, kept = [], 0, 0
    for xg in x.chunk(groups):
        r = route(xg, p, k, capacity_factor)
        onehot = torch.nn.functional.one_hot(r["expert"], experts)  # (T, k, E)
        mask = onehot * r["keep"].unsqueeze(-1)
        weights.append((mask * r["gate"].unsqueeze(-1)).sum(1))  # (T, E)
        per_expert = per_expert + r["per_expert"]
        kept = kept + mask.sum((0, 1))
    w = torch.cat(weights)  # (groups * T, E)
    dense = _experts(p, slice(None), x.unsqueeze(0).expand(experts, -1, -1))  # (E, G*T, h)
    y = torch.einsum("te,eth->th", w, dense)
    stats = {
        "per_expert": per_expert.tolist(),
        "kept": kept.tolist(),
        "dropped": int(per_expert.sum() - kept.sum()),
    }
    return y, stats


def check_config(experts: int, world_size: int, k: int, capacity_factor: float | None) -> int:
    """Experts per rank E / N; a ValueError saying what is wrong otherwise."""
    if world_size < 1 or experts < 1:
        raise ValueError(f"need experts >= 1 and world_size >= 1, got {experts} and {world_size}")
    if experts % world_size:
        raise ValueError(
            f"expert parallelism needs the number of experts divisible by the world size: "
            f"{experts} experts cannot be split evenly over {world_size} ranks"
        )
    if not 1 <= k <= experts:
        raise ValueError(f"top-k routing needs 1 <= k <= experts ({experts}), got k={k}")
    if capacity_factor is not None and capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be positive (or None), got {capacity_factor}")
    return experts // world_size


def _all_to_all(
    out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int], what: str
) -> None:
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    _log_exchange(inp, out_splits, in_splits, what)


def _functional_exchange(x: torch.Tensor, out_splits, in_splits, what: str) -> torch.Tensor:
    """The same exchange through the functional collective (autograd in the op itself)."""
    import torch.distributed._functional_collectives as fc

    out = fc.all_to_all_single(x.contiguous(), list(out_splits), list(in_splits), dist.group.WORLD)
    _log_exchange(x, list(out_splits), list(in_splits), what)
    return fc.wait_tensor(out)


def moe_expert_parallel(
    x: torch.Tensor,
    p: MoEParams,
    k: int = TOP_K,
    capacity_factor: float | None = None,
    exchange: str = "function",
) -> tuple[torch.Tensor, dict[str, Any]]:
    """This rank's tokens x (T, h) through the layer; p holds this rank's experts only.

    p.router_w / router_b are the full router (replicated); p.w1 ... b2 hold the E/N local
    experts. `exchange`: "function" (`AllToAll`, the default) or "functional"
    (`torch.distributed._functional_collectives.all_to_all_single`, whose op carries its own
    autograd kernel; its first call in a process costs seconds). Returns (y, info): info has the
    routing counts and the split sizes used.
    """
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
    move = AllToAll.apply if exchange == "function" else _functional_exchange
    rank, n = dist.get_rank(), dist.get_world_size()
    experts = p.router_w.shape[1]
    local = check_config(experts, n, k, capacity_factor)
    if p.w1.shape[0] != local:
        raise ValueError(f"rank {rank} holds {p.w1.shape[0]} experts, expected E/N = {local}")
    r = route(x, p, k, capacity_factor)
    expert, gate, keep = r["expert"].reshape(-1), r["gate"].reshape(-1), r["keep"].reshape(-1)
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)
    kept = keep.nonzero().squeeze(-1)
    kept = kept[torch.sort(expert[kept], stable=True).indices]  # grouped by expert
    counts = torch.bincount(expert[kept], minlength=experts)  # kept rows per expert (E,)
    # (2) sizes first: every rank learns how many rows each source sends to each local expert
    recv_counts = torch.empty_like(counts)
    _all_to_all(recv_counts, counts, [local] * n, [local] * n, "counts")
    recv_counts = recv_counts.view(n, local).tolist()  # [source][local expert]
    send_splits = counts.view(n, local).sum(1).tolist()
    recv_splits = [sum(row) for row in recv_counts]
    # (3) dispatch, (4) local experts, (5) combine
    rows = move(x[token[kept]], recv_splits, send_splits, "dispatch")
    pieces, offset = [], 0
    for source in range(n):
        for e in range(local):
            c = recv_counts[source][e]
            pieces.append(_experts(p, e, rows[offset : offset + c]))
            offset += c
    done = torch.cat(pieces) if pieces else rows
    back = move(done, send_splits, recv_splits, "combine")
    # (6) weighted sum at each token
    y = x.new_zeros(x.shape).index_add(0, token[kept], back * gate[kept].unsqueeze(-1))
    info = {
        "per_expert": r["per_expert"].tolist(),
        "kept_per_expert": counts.tolist(),
        "dropped": int((~keep).sum()),
        "send_splits": send_splits,
        "recv_splits": recv_splits,
        "recv_counts": recv_counts,
    }
    return y, info


class AllToAll(torch.autograd.Function):
    """Rows of x go to the ranks `in_splits` says; returns the rows received (`out_splits`).

    Backward: the same exchange reversed (the received rows' gradients go back to their senders).
    """

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, what):
        ctx.splits, ctx.what = (list(out_splits), list(in_splits)), what
        x = x.contiguous()
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        _all_to_all(out, x, list(out_splits), list(in_splits), what)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        grad = grad.contiguous()
        back = grad.new_empty((sum(in_splits), *grad.shape[1:]))
        _all_to_all(back, grad, in_splits, out_splits, ctx.what + " (backward)")
        return back, None, None, None


def _log_exchange(x: torch.Tensor, out_splits: list[int], in_splits: list[int], what: str) -> None:
    """Append one exchange of rows of `x` to EXCHANGE_LOG (rows, bytes to and from other ranks)."""
    rank = dist.get_rank()
    row = math.prod(x.shape[1:]) * x.element_size()  # bytes of one row (1 for a 1-D tensor)
    EXCHANGE_LOG.append(
        {
            "what": what,
            "phase": _PHASE[0],
            "send_rows": list(in_splits),
            "recv_rows": list(out_splits),
            "bytes_sent": sum(n for p, n in enumerate(in_splits) if p != rank) * row,
            "bytes_received": sum(n for p, n in enumerate(out_splits) if p != rank) * row,
        }
    )


# -- 17 · 8. Capacity, dropped tokens, bytes and expert load --------------------------------------


def capacity(tokens: int, k: int, experts: int, capacity_factor: float | None) -> int | None:
    """Assignments an expert takes from one group: ceil(capacity_factor * T * k / E) (None: all)."""
    if capacity_factor is None:
        return None
    return math.ceil(capacity_factor * tokens * k / experts)


def exchange_bytes_formula(per_rank: list[dict], row_bytes: int = HIDDEN * _FLOAT_BYTES) -> list:
    """Bytes each rank sends to other ranks in one step, from the routing alone (the formula).

    D_r = kept rows rank r routes to experts it does not own, R_r = rows it receives from
    others. Forward: dispatch sends D_r rows, combine sends R_r back; backward reverses both
    (combine's backward sends D_r, dispatch's R_r): 2 (D_r + R_r) rows, plus the counts
    exchange (E int64 per forward, E/N of them stay local).
    """
    n = len(per_rank)
    out = []
    for rank, r in enumerate(per_rank):
        d = sum(c for p, c in enumerate(r["send_splits"]) if p != rank)
        rcv = sum(c for p, c in enumerate(r["recv_splits"]) if p != rank)
        experts = len(r["per_expert"])
        counts = (experts - experts // n) * 8
        out.append({"dispatch": d * row_bytes, "combine": rcv * row_bytes,
                    "step_rows": 2 * (d + rcv) * row_bytes, "counts": counts,
                    "step": 2 * (d + rcv) * row_bytes + counts})  # fmt: skip
    return out
