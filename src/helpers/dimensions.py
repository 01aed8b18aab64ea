"""The five dimensions side by side: what each strategy shards and what one step communicates.

Used by: notebook 17 (closing section), tests/test_dimensions.py. One launch of
`dimensions_worker` runs one training step of every strategy the collection builds, each with the
helper of its own notebook, and counts the bytes every collective and point-to-point message
carries on this rank:

    data       helpers.sharded "ddp" (DDP's all-reduce; notebook 13's model) and
               helpers.allreduce.ring_allreduce on the same number of floats (notebook 05)
    zero       helpers.sharded "zero2" (reduce-scatter of gradients, all-gather of parameters)
    fsdp       helpers.sharded "fsdp2" (FSDP2: all-gather forward and backward, reduce-scatter)
    tensor     helpers.tensor_parallel "tp" (Megatron's f and g: all-reduces; notebook 15)
    sequence   helpers.tensor_parallel "sp" (all-gathers and reduce-scatters along the sequence)
    pipeline   helpers.pipeline_parallel.scratch_step "gpipe" (send/recv; notebook 16)
    context    helpers.context_parallel.ring_worker (K/V around the ring; notebook 17)
    expert     helpers.expert_parallel.expert_parallel_step (all_to_all_single; notebook 17)

Counting: `CommBytes` is a TorchDispatchMode that sees every `c10d` operator (the process-group
calls reach the dispatcher as c10d.allreduce_, c10d._allgather_base_, c10d.send, c10d.recv_,
c10d.alltoall_base_, ...) and records each one's kind and message bytes: an all-reduce's tensor,
an all-gather's output (the gathered whole), a reduce-scatter's input (the whole before
scattering), a send's tensor, and for an all-to-all the rows that leave this rank. The per-rank
bytes on the wire of a collective depend on the backend's algorithm; the table gives them for
the ring algorithm (Playbook, appendix "Ring AllReduce": 2 (N - 1) K / N for an all-reduce of K
bytes, half that for a reduce-scatter or an all-gather), and the data row also counts them:
notebook 05's ring all-reduce counts the bytes of the tensors it posts to isend (`count_p2p`).
Point-to-point rows (pipeline, context) count the tensors handed to send, the expert row the
split sizes handed to the all-to-all times a row's bytes; gloo's own framing is in none of them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "STRATEGIES",
    "SHARDS",
    "CommBytes",
    "dimensions_worker",
    "step_ops",
    "dimension_table",
    "table_text",
    "PLAYBOOK",
]

STRATEGIES = ("data", "zero", "fsdp", "tensor", "sequence", "pipeline", "context", "expert")
SHARDS = {
    "data": "the batch (every rank a full replica)",
    "zero": "gradients and optimizer state (ZeRO-2)",
    "fsdp": "parameters, gradients, optimizer state (ZeRO-3)",
    "tensor": "weights along the hidden dimension (heads, FFN)",
    "sequence": "tensor's weights + activations along the sequence",
    "pipeline": "the layers (one stage per rank)",
    "context": "activations (q, k, v) along the sequence",
    "expert": "the experts (tokens travel to them)",
}
# The Ultra-Scale Playbook's statement each row is checked against (Tazi et al., 2025).
PLAYBOOK = {
    "data": "all-reduce of the gradients, K = Psi; ring: 2 (N-1) K / N per rank",
    "zero": "reduce-scatter of the gradients + all-gather of the parameters: 2 Psi, as DP",
    "fsdp": "all-gather forward (Psi) + all-gather backward (Psi) + reduce-scatter (Psi) = 3 Psi",
    "tensor": "2 all-reduces forward + 2 backward per layer, each of s b h",
    "sequence": "2 all-gathers + 2 reduce-scatters forward, the conjugates backward, each s b h",
    "pipeline": "per micro-batch: send+receive activations and gradients, 2 s mbs h each way",
    "context": "each rank sends its K/V to the next rank N-1 times (and the gradients back)",
    "expert": "all-to-all of the routed tokens and back (no byte formula given)",
}
_SHORT = {
    "allreduce_": "all_reduce",
    "_allgather_base_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "send": "send",
    "recv_": "recv",
    "alltoall_base_": "all_to_all",
    "broadcast_": "broadcast",
    "barrier": "barrier",
}


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class CommBytes(TorchDispatchMode):
    """Record every c10d operator run inside the block: {"op", "bytes"} in `self.ops`.

    bytes: the message (see the module docstring); for all_to_all the bytes this rank sends to
    other ranks, computed from the input split sizes (its own split stays local).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[dict[str, Any]] = []
        self.seconds = 0.0  # wall time inside the block (how long the strategy's step took)

    def __enter__(self) -> CommBytes:
        self._start = time.perf_counter()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self._start
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "c10d":
            name = func._schema.name.split("::")[-1]
            kind = _SHORT.get(name, name)
            if kind in ("all_gather",):
                nbytes = _nbytes(args[0])  # the output: the gathered whole
            elif kind == "all_to_all":
                out, inp, _, in_splits = args[:4]
                rank = dist.get_rank()
                rows = list(in_splits) or [inp.shape[0] // dist.get_world_size()] * (
                    dist.get_world_size()
                )
                row = math.prod(inp.shape[1:]) * inp.element_size()
                nbytes = sum(n for p, n in enumerate(rows) if p != rank) * row
            else:  # all_reduce, reduce_scatter (input = args[1] for the base op), send, recv
                nbytes = _nbytes(args[1] if kind == "reduce_scatter" else args[0])
            self.ops.append({"op": kind, "bytes": nbytes})
        return func(*args, **kwargs)


def step_ops(ops: list[dict], counts: dict[str, dict[str, int]]) -> list[dict]:
    """The ops of one training step: for each kind, the first n logged (n from CommDebugMode's
    per-phase counts, which helpers.sharded returns); what came before the step (DDP's initial
    broadcast) or after it (FSDP2's full_tensor when the parameters are read back) is left out."""
    want: dict[str, int] = {}
    for phase in counts.values():
        for kind, n in phase.items():
            want[kind] = want.get(kind, 0) + n
    taken, out = {k: 0 for k in want}, []
    for op in ops:
        if taken.get(op["op"], 0) < want.get(op["op"], 0):
            taken[op["op"]] += 1
            out.append(op)
    return out


def _summary(ops: list[dict]) -> dict[str, dict[str, int]]:
    s: dict[str, dict[str, int]] = {}
    for op in ops:
        d = s.setdefault(op["op"], {"count": 0, "bytes": 0})
        d["count"] += 1
        d["bytes"] += op["bytes"]
    return s


def _numel(params: Any) -> int:
    return sum(p.numel() for p in params)


def dimensions_worker(rank: int, world_size: int, expert_runs: list[dict] = ()) -> dict[str, Any]:
    """One step of every strategy on this rank; per strategy the ops summary and the sizes the
    formulas need. Run under helpers.launch.launch (N = 2 or 4). `expert_runs` (optional): also
    run `expert_parallel.expert_parallel_worker(rank, world_size, expert_runs)` in the same
    launch, returned as out["expert_runs"] (saves notebook 17 a launch). out["seconds"]: wall
    time of each strategy's part on this rank (not printed by the notebook: it varies)."""
    from helpers import allreduce, context_parallel, expert_parallel, pipeline_parallel, sharded
    from helpers import tensor_parallel as tp

    out: dict[str, Any] = {"seconds": {}}
    psi = _numel(sharded.make_model().parameters())
    for name, scheme in (("data", "ddp"), ("zero", "zero2"), ("fsdp", "fsdp2")):
        with CommBytes() as cb:
            (r,) = sharded.sharding_worker(rank, world_size, [scheme], steps=1)
        ops = step_ops(cb.ops, r["collectives"])
        out["seconds"][name] = cb.seconds
        out[name] = {"ops": _summary(ops), "psi": psi, "padded": r["padded"],
                     "param_bytes": r["param_bytes"], "whole_param_bytes": 4 * psi}  # fmt: skip
    grads = torch.ones(psi)  # the gradients' size, through notebook 05's ring
    with allreduce.count_p2p() as counter:
        allreduce.ring_allreduce(grads)
    out["data"]["ring_sent"] = counter.bytes_sent
    out["data"]["ring_expected"] = allreduce.expected_p2p("ring", psi, 4, world_size, rank)[
        "bytes_sent"
    ]

    layer_numel = _numel(tp.make_layer().parameters())
    for name, mode in (("tensor", "tp"), ("sequence", "sp")):
        with CommBytes() as cb:
            r = tp.layer_worker(rank, world_size, mode)[mode]
        held = sum(len(g) for g in r["grads"].values())
        logged = [{"op": c["kind"], "bytes": c["bytes"], "phase": c["phase"]} for c in r["comm"]]
        out[name] = {"ops": _summary(logged), "seen": _summary(cb.ops), "log": logged,
                     "sbh": tp.SEQ * tp.BATCH * tp.HIDDEN,
                     "param_bytes": 4 * held, "whole_param_bytes": 4 * layer_numel}  # fmt: skip
        out["seconds"][name] = cb.seconds

    m = 4
    with CommBytes() as cb:
        r = pipeline_parallel.scratch_step(rank, world_size, "gpipe", m)
    stage = pipeline_parallel.make_model(world_size)
    out["pipeline"] = {"ops": _summary(cb.ops), "m": m, "mbs": pipeline_parallel.BATCH // m,
                       "h": pipeline_parallel.WIDTH,
                       "param_bytes": 4 * _numel(stage[rank].parameters()),
                       "whole_param_bytes": 4 * _numel(stage.parameters())}  # fmt: skip
    out["seconds"]["pipeline"] = cb.seconds

    shape = context_parallel.SHAPE
    with CommBytes() as cb:
        context_parallel.ring_worker(rank, world_size, [{"causal": False, "layout": "contiguous"}])
    b, heads, s, d = shape
    out["context"] = {"ops": _summary(cb.ops), "kv_block_bytes": 2 * b * heads * (s // world_size)
                      * d * 4, "param_bytes": 0, "whole_param_bytes": 0}  # fmt: skip
    out["seconds"]["context"] = cb.seconds

    with CommBytes() as cb:
        r = expert_parallel.expert_parallel_step(rank, world_size)
    full = expert_parallel.make_params()
    experts = full.w1.shape[0]
    expert_numel = sum(t.numel() for t in (full.w1, full.b1, full.w2, full.b2))
    out["expert"] = {"ops": _summary(cb.ops),
                     "logged": sum(e["bytes_sent"] for e in r["exchanges"]),
                     "send_splits": r["send_splits"], "recv_splits": r["recv_splits"],
                     "per_expert": r["per_expert"],
                     "param_bytes": 4 * expert_numel // world_size,
                     "whole_param_bytes": 4 * expert_numel, "experts": experts}  # fmt: skip
    out["seconds"]["expert"] = cb.seconds
    if expert_runs:
        start = time.perf_counter()
        out["expert_runs"] = expert_parallel.expert_parallel_worker(rank, world_size, expert_runs)
        out["seconds"]["expert_runs"] = time.perf_counter() - start
    return out


# ---------------------------------------------------------------- the table (parent side)
def _ring(kind: str, message: float, n: int) -> float:
    from helpers.tensor_parallel import ring_bytes

    return ring_bytes(kind, message, n)


def _fsdp_padded(world_size: int) -> int:
    """Elements FSDP2's collectives carry: each parameter's dim 0 padded to a multiple of N."""
    from helpers import sharded

    return sum(
        sharded.fsdp_padded_numel(p.shape, world_size) for p in sharded.make_model().parameters()
    )


def _bytes(ops: dict, kind: str) -> int:
    return ops.get(kind, {}).get("bytes", 0)


def dimension_table(per_rank: list[dict]) -> list[dict[str, Any]]:
    """One row per strategy: measured message bytes, per-rank bytes sent, the formula, a check.

    Each row: strategy, shards, collectives ({kind: count}), message (measured bytes of rank 0's
    messages in one step), formula (what the Playbook's statement gives for this model),
    sent_per_rank (list over ranks: the ring formula of rank 0's measured messages for the
    collectives, the same for every rank; for data, the bytes notebook 05's ring posted to isend;
    the bytes handed to send and all-to-all, per rank), held (fraction of the parameters rank 0
    holds),
    matches (measured == formula, exactly).
    """
    n = len(per_rank)
    r0 = per_rank[0]
    rows = []

    def row(name, collectives, message, formula, sent, held, sent_formula=None):
        ok = message == formula and (sent_formula is None or list(sent) == list(sent_formula))
        rows.append({"strategy": name, "shards": SHARDS[name], "collectives": collectives,
                     "message": message, "formula": formula, "sent_per_rank": sent,
                     "sent_formula": sent_formula, "held": held, "matches": ok})  # fmt: skip

    def held(name):
        d = r0[name]
        return d["param_bytes"] / d["whole_param_bytes"] if d["whole_param_bytes"] else 1.0

    def counts(d):
        return {k: v["count"] for k, v in sorted(d["ops"].items())}

    d = r0["data"]
    k = 4 * d["psi"]
    row("data", counts(d), _bytes(d["ops"], "all_reduce"), k,
        [p["data"]["ring_sent"] for p in per_rank], held("data"))  # fmt: skip
    d = r0["zero"]
    k = 4 * d["padded"]
    msg = _bytes(d["ops"], "reduce_scatter") + _bytes(d["ops"], "all_gather")
    rs, ag = _bytes(d["ops"], "reduce_scatter"), _bytes(d["ops"], "all_gather")  # measured
    row("zero", counts(d), msg, 2 * k,
        [_ring("reduce_scatter", rs, n) + _ring("all_gather", ag, n)] * n,
        held("zero"))  # fmt: skip
    d = r0["fsdp"]
    k = 4 * _fsdp_padded(n)
    msg = _bytes(d["ops"], "reduce_scatter") + _bytes(d["ops"], "all_gather")
    rs, ag = _bytes(d["ops"], "reduce_scatter"), _bytes(d["ops"], "all_gather")  # measured
    row("fsdp", counts(d), msg, 3 * k,
        [_ring("all_gather", ag, n) + _ring("reduce_scatter", rs, n)] * n,
        held("fsdp"))  # fmt: skip
    d = r0["tensor"]
    sbh = 4 * d["sbh"]
    row("tensor", counts(d), _bytes(d["ops"], "all_reduce"), 4 * sbh,
        [_ring("all_reduce", _bytes(d["ops"], "all_reduce"), n)] * n, held("tensor"))  # fmt: skip
    d = r0["sequence"]
    msg = _bytes(d["ops"], "all_gather") + _bytes(d["ops"], "reduce_scatter")
    # the Playbook's 4 + 4 collectives of s b h, plus one re-gather in backward for each of the
    # two GatherColumnLinear (it saves only its sequence shard, as Korthikanti et al. do)
    row("sequence", counts(d), msg, 8 * sbh + 2 * sbh,
        [_ring("all_gather", _bytes(d["ops"], "all_gather"), n)
         + _ring("reduce_scatter", _bytes(d["ops"], "reduce_scatter"), n)] * n,
        held("sequence"))  # fmt: skip
    d = r0["pipeline"]
    unit = 4 * d["mbs"] * d["h"]  # one micro-batch's activation (or gradient), bytes
    # rank r sends m activations forward (unless last) and m gradients backward (unless first)
    pp_sent = [d["m"] * unit * ((r < n - 1) + (r > 0)) for r in range(n)]
    row("pipeline", counts(d), _bytes(d["ops"], "send") + _bytes(d["ops"], "recv"),
        2 * pp_sent[0], [_bytes(p["pipeline"]["ops"], "send") for p in per_rank],
        held("pipeline"), pp_sent)  # fmt: skip
    d = r0["context"]
    cp_sent = [2 * (n - 1) * d["kv_block_bytes"]] * n  # N-1 K/V blocks forward, N-1 grads back
    row("context", counts(d), _bytes(d["ops"], "send"), cp_sent[0],
        [_bytes(p["context"]["ops"], "send") for p in per_rank], None, cp_sent)  # fmt: skip
    d = r0["expert"]
    from helpers.expert_parallel import exchange_bytes_formula

    ep_sent = [f["step"] for f in exchange_bytes_formula([p["expert"] for p in per_rank])]
    row("expert", counts(d), _bytes(d["ops"], "all_to_all"), ep_sent[0],
        [_bytes(p["expert"]["ops"], "all_to_all") for p in per_rank], held("expert"),
        ep_sent)  # fmt: skip
    return rows


def table_text(rows: list[dict]) -> str:
    """The table as fixed-width text (invariant: only integers and fixed fractions)."""
    head = f"{'strategy':<9} {'shards':<50} {'collectives (count)':<38} {'bytes':>6} {'formula':>7}"
    lines = [head + "  sent per rank (bytes)     params held", "-" * 140]
    for r in rows:
        coll = ", ".join(f"{k} {v}" for k, v in r["collectives"].items())
        sent = ", ".join(f"{round(s)}" for s in r["sent_per_rank"])
        held = "-" if r["held"] is None else f"{r['held']:.3f}"
        lines.append(
            f"{r['strategy']:<9} {r['shards']:<50} {coll:<38} {r['message']:>6} "
            f"{r['formula']:>7}  {sent:<25} {held}"
        )
    return "\n".join(lines)
