"""Expert parallelism: a mixture-of-experts layer, in one process and over `all_to_all_single`.

Used by: notebook 17 (section on expert parallelism), helpers.dimensions (the closing table),
tests/test_expert_parallel.py. Workers run under `helpers.launch.launch` (gloo on CPU, N = 2 and
4 ranks; NCCL as designed, not run here: tensors go to `current_device()`) and return plain
Python data (lists, dicts, ints), never tensors.

The layer (`MoEParams`, `moe_reference`): a router (linear, with a bias) scores E experts per
token; each token goes to its top-k experts, weighted by their softmax probabilities (not
renormalized); an expert is a two-layer MLP h -> f -> h with ReLU. Tokens come in G groups (one
group per rank); within a group each expert takes at most C = ceil(capacity_factor * T * k / E)
assignments (T tokens in the group), kept in priority order: every token's first choice before
any second choice (slot-major, as DeepSpeed's top2gating numbers them), in token order within
a slot. A dropped assignment contributes nothing (a model's residual connection would carry
the token). The reference computes every expert on every token and weights the results (a dense
formulation): nothing is exchanged and nothing is routed, so it checks the routing code too.

Expert parallel (`moe_expert_parallel`): rank r owns experts r*E/N ... (r+1)*E/N - 1 and keeps
its own T tokens. Per forward it (1) routes its tokens and applies the capacity (the same
`route` as the reference, so the same assignments are dropped), (2) exchanges how many rows it
will send to each expert (one `all_to_all_single` of E int64 counts, equal splits), which gives
every rank its uneven receive sizes, (3) sends each kept assignment's token row to the expert's
owner (`all_to_all_single` with uneven, possibly zero, split sizes), (4) runs its experts on the
rows it received, (5) sends the results back the same way reversed, and (6) adds them up
weighted by the gates. The exchange is `AllToAll`, a hand-written autograd Function: forward is
one `all_to_all_single`; backward is the same exchange with input and output splits swapped
(an all-to-all only moves rows, so the gradient of each received row goes back to where the row
came from). A Function rather than the functional collectives: its backward exchange is visible
in its source and passes through EXCHANGE_LOG, where the functional op differentiates itself
inside the dispatcher. `exchange="functional"` runs the same layer on
`torch.distributed._functional_collectives.all_to_all_single`, whose op has an autograd kernel of
its own (tests/test_expert_parallel.py checks that both give the same gradients). The deprecated
`torch.distributed.nn.functional.all_to_all_single` (FutureWarning) is not used.
Every exchange is logged in `EXCHANGE_LOG` with its split sizes and the bytes this rank sent to
other ranks (its own split stays local: a copy, not a message).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from helpers.launch import current_device

__all__ = [
    "exchange_steps",
    "exchange_svg",
    "exchange_step_text",
    "exchange_step_viewer",
    "HIDDEN",
    "FFN",
    "EXPERTS",
    "TOP_K",
    "TOKENS",
    "MoEParams",
    "make_params",
    "make_tokens",
    "check_config",
    "capacity",
    "route",
    "moe_reference",
    "reference_run",
    "AllToAll",
    "EXCHANGE_LOG",
    "EXCHANGES",
    "moe_expert_parallel",
    "expert_parallel_step",
    "expert_parallel_worker",
    "max_errors",
    "exchange_bytes_formula",
    "balanced_bytes_estimate",
    "load_imbalance",
]

HIDDEN, FFN, EXPERTS, TOP_K, TOKENS = 8, 16, 4, 2, 12  # h, f, E, k, T (tokens per rank)
_FLOAT_BYTES = 4  # float32 rows


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


def make_params(
    seed: int = 0, experts: int = EXPERTS, hidden: int = HIDDEN, ffn: int = FFN, skew: float = 0.0
) -> MoEParams:
    """Seeded parameters, the same in every process; `skew` is added to expert 0's router bias
    (a router that prefers one expert: load imbalance and, with a capacity, dropped tokens)."""
    g = torch.Generator().manual_seed(seed)
    router_b = 0.1 * torch.randn(experts, generator=g)
    router_b[0] += skew
    return MoEParams(
        router_w=torch.randn(hidden, experts, generator=g) / math.sqrt(hidden),
        router_b=router_b,
        w1=torch.randn(experts, hidden, ffn, generator=g) / math.sqrt(hidden),
        b1=0.1 * torch.randn(experts, ffn, generator=g),
        w2=torch.randn(experts, ffn, hidden, generator=g) / math.sqrt(ffn),
        b2=0.1 * torch.randn(experts, hidden, generator=g),
    )


def make_tokens(world_size: int, tokens: int = TOKENS, hidden: int = HIDDEN, seed: int = 1):
    """All ranks' tokens (world_size * tokens, h): rank r holds rows r*tokens to (r+1)*tokens-1."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(world_size * tokens, hidden, generator=g)


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


def capacity(tokens: int, k: int, experts: int, capacity_factor: float | None) -> int | None:
    """Assignments an expert takes from one group: ceil(capacity_factor * T * k / E) (None: all)."""
    if capacity_factor is None:
        return None
    return math.ceil(capacity_factor * tokens * k / experts)


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


def reference_run(
    world_size: int,
    k: int = TOP_K,
    capacity_factor: float | None = None,
    skew: float = 0.0,
    experts: int = EXPERTS,
    tokens: int = TOKENS,
    seed: int = 0,
) -> dict[str, Any]:
    """One forward and backward of `moe_reference` (loss = sum of y squared): y, grads, stats."""
    p = make_params(seed, experts=experts, skew=skew).requires_grad_()
    x = make_tokens(world_size, tokens).requires_grad_()
    y, stats = moe_reference(x, p, world_size, k, capacity_factor)
    (y**2).sum().backward()
    return {
        "y": y.detach(),
        "x_grad": x.grad,
        "grads": {n: t.grad for n, t in p.named().items()},
        **stats,
    }


# ---------------------------------------------------------------- the exchange
EXCHANGE_LOG: list[dict[str, Any]] = []  # every exchange of this process, in order
_PHASE = ["forward"]


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


def _all_to_all(
    out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int], what: str
) -> None:
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    _log_exchange(inp, out_splits, in_splits, what)


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


def _functional_exchange(x: torch.Tensor, out_splits, in_splits, what: str) -> torch.Tensor:
    """The same exchange through the functional collective (autograd in the op itself)."""
    import torch.distributed._functional_collectives as fc

    out = fc.all_to_all_single(x.contiguous(), list(out_splits), list(in_splits), dist.group.WORLD)
    _log_exchange(x, list(out_splits), list(in_splits), what)
    return fc.wait_tensor(out)


EXCHANGES = ("function", "functional")


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


def _local_params(p: MoEParams, rank: int, world_size: int) -> MoEParams:
    local = p.w1.shape[0] // world_size
    s = slice(rank * local, (rank + 1) * local)
    return MoEParams(
        p.router_w.clone(), p.router_b.clone(), p.w1[s].clone(), p.b1[s].clone(),
        p.w2[s].clone(), p.b2[s].clone(),
    ).requires_grad_()  # fmt: skip


def expert_parallel_step(
    rank: int,
    world_size: int,
    k: int = TOP_K,
    capacity_factor: float | None = None,
    skew: float = 0.0,
    experts: int = EXPERTS,
    tokens: int = TOKENS,
    seed: int = 0,
    exchange: str = "function",
) -> dict[str, Any]:
    """One forward and backward (loss = sum of y squared) on this rank; plain data back.

    Returns y and x_grad (this rank's rows, flat lists), grads (this rank's parameters: the
    router's are this rank's share of the sum), the routing info and the exchanges (EXCHANGE_LOG).
    """
    check_config(experts, world_size, k, capacity_factor)  # every rank raises the same error
    device = current_device()
    full = make_params(seed, experts=experts, skew=skew)
    p = _local_params(full, rank, world_size)
    for name, t in p.named().items():
        setattr(p, name, t.detach().to(device).requires_grad_())
    x = make_tokens(world_size, tokens)[rank * tokens : (rank + 1) * tokens]
    x = x.to(device).requires_grad_()
    EXCHANGE_LOG.clear()
    _PHASE[0] = "forward"
    y, info = moe_expert_parallel(x, p, k, capacity_factor, exchange)
    _PHASE[0] = "backward"
    (y**2).sum().backward()
    return {
        "config": {
            "k": k,
            "capacity_factor": capacity_factor,
            "skew": skew,
            "experts": experts,
            "tokens": tokens,
            "seed": seed,
            "world_size": world_size,
            "exchange": exchange,
        },
        "y": y.detach().cpu().reshape(-1).tolist(),
        "x_grad": x.grad.cpu().reshape(-1).tolist(),
        "grads": {n: t.grad.cpu().reshape(-1).tolist() for n, t in p.named().items()},
        **info,
        "exchanges": [dict(e) for e in EXCHANGE_LOG],
    }


def expert_parallel_worker(rank: int, world_size: int, runs: list[dict]) -> list[dict]:
    """Worker: `expert_parallel_step(rank, world_size, **run)` for each run, in one launch."""
    return [expert_parallel_step(rank, world_size, **run) for run in runs]


# ---------------------------------------------------------------- checks (parent side)
def max_errors(per_rank: list[dict]) -> dict[str, float]:
    """Max |expert parallel - one process| of y, x_grad and every gradient, over the ranks.

    `per_rank` is one run's results (one dict per rank). Expert gradients are compared with the
    reference's rows of the experts each rank owns; the router's gradient summed over ranks.
    """
    n, cfg = len(per_rank), per_rank[0]["config"]
    ref = reference_run(n, cfg["k"], cfg["capacity_factor"], cfg["skew"], cfg["experts"],
                        cfg["tokens"], cfg["seed"])  # fmt: skip
    local, t = cfg["experts"] // n, cfg["tokens"]

    def err(got, want) -> float:
        return float((torch.as_tensor(got).reshape(-1) - want.reshape(-1)).abs().max())

    errors = {
        "y": max(err(r["y"], ref["y"][i * t : (i + 1) * t]) for i, r in enumerate(per_rank)),
        "x_grad": max(
            err(r["x_grad"], ref["x_grad"][i * t : (i + 1) * t]) for i, r in enumerate(per_rank)
        ),  # fmt: skip
    }
    for name in ("router_w", "router_b"):
        errors[name] = err(
            sum(torch.tensor(r["grads"][name]) for r in per_rank), ref["grads"][name]
        )
    for name in ("w1", "b1", "w2", "b2"):
        errors[name] = max(
            err(r["grads"][name], ref["grads"][name][i * local : (i + 1) * local])
            for i, r in enumerate(per_rank)
        )
    return errors


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


def balanced_bytes_estimate(
    tokens: int, k: int, hidden: int, world_size: int, element_bytes: int = _FLOAT_BYTES
) -> float:
    """Token rows one rank sends in one step if routing were uniform and nothing dropped.

    Each of the four exchanges (dispatch, combine, and their backwards) sends k T rows of h
    elements, of which the fraction (N - 1) / N goes to other ranks: 4 k T h b (N - 1) / N.
    """
    return 4 * k * tokens * hidden * element_bytes * (world_size - 1) / world_size


def load_imbalance(per_expert: list[int]) -> float:
    """max / mean of the assignments per expert (1.0: perfectly balanced)."""
    mean = sum(per_expert) / len(per_expert)
    return max(per_expert) / mean if mean else 0.0


# ---------------------------------------------------------------- the exchanges, step by step
_RANK_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948")
_WHAT = {
    "counts": "the sizes first: each rank sends every rank its kept-row counts for that rank's"
    " experts (E/N int64 values each)",
    "dispatch": "dispatch: each kept assignment's token row goes to the rank of its expert",
    "experts": "the local experts run on the rows received (no exchange)",
    "combine": "combine: each expert's output row goes back to its token's rank",
    "combine (backward)": "backward of combine: the output rows' gradients go to the experts'"
    " ranks",
    "dispatch (backward)": "backward of dispatch: the token rows' gradients go back to the tokens'"
    " ranks",
}


def exchange_steps(per_rank: list[dict]) -> list[dict[str, Any]]:
    """One recorded run (`expert_parallel_step`'s results, one dict per rank) as steps, in the
    order of the ranks' EXCHANGE_LOG: one per exchange, with the local experts' step after the
    forward dispatch.

    An exchange step: what, phase, `rows[r]` = rank r's `send_rows` (rows, or values for the
    counts, it sent to each rank), `bytes[r]` = its `bytes_sent`, and for the counts the values
    sent (`values[r]`: rank r's kept rows per expert). The experts' step: `rows[p][s]` = rows rank
    p received from rank s, `experts[e]` = rows expert e ran on and `sources[e]` = how many came
    from each rank (from each rank's `recv_counts`).
    Raises ValueError when the ranks' logs do not list the same exchanges.
    """
    n = len(per_rank)
    kinds = [[e["what"] for e in r["exchanges"]] for r in per_rank]
    if any(k != kinds[0] for k in kinds):
        raise ValueError(f"the ranks logged different exchanges: {kinds}")
    local = len(per_rank[0]["recv_counts"][0])
    steps: list[dict[str, Any]] = []
    for i, what in enumerate(kinds[0]):
        records = [r["exchanges"][i] for r in per_rank]
        step = {
            "what": what,
            "phase": records[0]["phase"],
            "rows": [e["send_rows"] for e in records],
            "bytes": [e["bytes_sent"] for e in records],
        }
        if what == "counts":
            step["values"] = [r["kept_per_expert"] for r in per_rank]
        steps.append(step)
        if what == "dispatch":
            experts = [
                sum(per_rank[p]["recv_counts"][src][e] for src in range(n))
                for p in range(n)
                for e in range(local)
            ]
            sources = [
                [per_rank[p]["recv_counts"][src][e] for src in range(n)]
                for p in range(n)
                for e in range(local)
            ]
            received = [[sum(row) for row in per_rank[p]["recv_counts"]] for p in range(n)]
            steps.append({"what": "experts", "phase": "forward", "rows": received,
                          "experts": experts, "sources": sources})  # fmt: skip
    for i, step in enumerate(steps):
        step["index"] = i
    return steps


def exchange_step_text(steps: list[dict[str, Any]], i: int, local: int) -> str:
    """Step i of `exchange_steps` as text: per rank what it sent to each rank (or, for the
    experts' step, what each expert ran on). Deterministic: counts from the recorded run only."""
    step, n = steps[i], len(steps[i]["rows"])
    name = step["what"] if step["phase"] in step["what"] else f"{step['what']} ({step['phase']})"
    lines = [f"step {i + 1} of {len(steps)}: {name}", _WHAT[step["what"]]]
    if step["what"] == "experts":
        for p in range(n):
            for e in range(p * local, (p + 1) * local):
                lines.append(
                    f"rank {p}, expert {e}: {step['experts'][e]} rows"
                    f" (from ranks 0..{n - 1}: {step['sources'][e]})"
                )
        return "\n".join(lines)
    unit = "values" if step["what"] == "counts" else "rows"
    for r in range(n):
        line = f"rank {r} sends {step['rows'][r]} {unit} to ranks 0..{n - 1}"
        if step["what"] == "counts":
            line += f" (its kept rows per expert {step['values'][r]})"
        lines.append(f"{line}; {step['bytes'][r]} bytes leave it (its own split stays on it)")
    return "\n".join(lines)


def exchange_svg(steps: list[dict[str, Any]], i: int, local: int) -> str:
    """Step i of `exchange_steps` as an SVG: senders on the left, receivers on the right (each box
    says what the rank sends or receives, rank by rank), a line per non-empty flow (width by
    rows; dashed when a rank's own split stays on it), or, for the experts' step, a bar per
    expert. Deterministic; DOM hooks: `svg.alltoall-svg[data-step]
    [data-what]`, `g.flow[data-from][data-to][data-rows]`, `g.expert[data-expert][data-rows]`."""
    step, n = steps[i], len(steps[i]["rows"])
    row_h, width = 44, 640
    height = 40 + n * row_h
    colour = [_RANK_COLOURS[r % len(_RANK_COLOURS)] for r in range(n)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="alltoall-svg" data-step="{i}" '
        f'data-what="{step["what"]}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<text x="10" y="16" font-size="11">{_WHAT[step["what"]]}</text>',
    ]

    def box(x: float, r: int, label: str, note: str = "") -> str:
        y = 30 + r * row_h
        return (
            f'<rect x="{x}" y="{y}" width="150" height="36" rx="4" fill="{colour[r]}" '
            f'fill-opacity="0.25" stroke="#555"/><text x="{x + 6}" y="{y + 15}" '
            f'font-size="11">{label}</text><text x="{x + 6}" y="{y + 30}" font-size="9">'
            f"{note}</text>"
        )

    def experts_of(r: int) -> str:
        first, last = r * local, (r + 1) * local - 1
        return f"expert {first}" if local == 1 else f"experts {first}-{last}"

    if step["what"] == "experts":
        top = max(step["experts"]) or 1
        for p in range(n):
            out.append(box(10, p, f"rank {p}"))
            for j, e in enumerate(range(p * local, (p + 1) * local)):
                rows = step["experts"][e]
                y = 30 + p * row_h + j * (36 / local)
                w = 250 * rows / top
                out.append(
                    f'<g class="expert" data-expert="{e}" data-rows="{rows}"><rect x="180" '
                    f'y="{y:.1f}" width="{w:.1f}" height="{36 / local - 2:.1f}" '
                    f'fill="{colour[p]}"/><text x="{186 + w:.1f}" y="{y + 36 / local - 8:.1f}" '
                    f'font-size="10">expert {e}: {rows} rows</text></g>'
                )
        out.append("</svg>")
        return "\n".join(out)
    to_experts = step["what"] in ("counts", "dispatch", "combine (backward)")
    unit = "values" if step["what"] == "counts" else "rows"
    for r in range(n):
        got = [step["rows"][s][r] for s in range(n)]
        left = f"rank {r}" + ("" if to_experts else f" ({experts_of(r)})")
        right = f"rank {r}" + (f" ({experts_of(r)})" if to_experts else "")
        out.append(box(10, r, left, f"sends {step['rows'][r]} {unit}"))
        out.append(box(width - 160, r, right, f"receives {got}"))
    top = max(max(row) for row in step["rows"]) or 1
    for r in range(n):
        for p in range(n):
            rows = step["rows"][r][p]
            if not rows:
                continue
            y0, y1 = 48 + r * row_h, 48 + p * row_h
            dash = ' stroke-dasharray="4 3"' if r == p else ""
            out.append(
                f'<g class="flow" data-from="{r}" data-to="{p}" data-rows="{rows}">'
                f'<line x1="160" y1="{y0}" x2="{width - 160}" y2="{y1}" stroke="{colour[r]}" '
                f'stroke-width="{1 + 5 * rows / top:.1f}" stroke-opacity="0.8"{dash}/></g>'
            )
    out.append("</svg>")
    return "\n".join(out)


def exchange_step_viewer(per_rank: list[dict]) -> Any:
    """A slider over the recorded exchanges of one run (`exchange_steps(per_rank)`), drawn in the
    browser (`helpers.viewers.AllToAllViewer`); its plain-text twin is the first step's text.

    steps[i]: `exchange_steps(...)[i]` with its "svg" (`exchange_svg`) and "text"
    (`exchange_step_text`). DOM hooks: `.alltoall-step-view`, its slider `.alltoall-step-slider`
    (`input[type=range]`, readout `.alltoall-step-readout`), the picture `svg.alltoall-svg`
    (hooks in `exchange_svg`), the text `pre.alltoall-step-text`.
    """
    from helpers.viewers import AllToAllViewer

    local = len(per_rank[0]["recv_counts"][0])
    steps = exchange_steps(per_rank)
    for i, step in enumerate(steps):
        step["svg"] = exchange_svg(steps, i, local)
        step["text"] = exchange_step_text(steps, i, local)
    return AllToAllViewer(steps, text=steps[0]["text"])
