"""Tensor and sequence parallelism: the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.tensor_parallel`, which re-exports both) still loads the
harness. tests/test_code_map.py checks the order and these rules.

Used by: notebook 15.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from helpers.launch import current_device

SEQ, BATCH, HIDDEN, HEADS = 8, 2, 16, 4  # s, b, h, a: heads split over N = 2 or 4 ranks
FFN = 4 * HIDDEN
DROPOUT = 0.1
COMM_LOG: list[dict[str, Any]] = []  # every collective of `_collective`, in order
_PHASE = ["forward"]  # set by the worker: "forward" or "backward"


# -- 15 · 1. Column- and row-parallel linear layers, and `f` and `g` ------------------------------


class Layer(nn.Module):
    """A pre-LayerNorm transformer layer: x + Drop(Attn(LN(x))), then x + Drop(MLP(LN(x)))."""

    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, ffn: int = FFN) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.o = nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)


def check_divisible(size: int, world_size: int, what: str) -> int:
    """`size // world_size`, or a ValueError saying what cannot be split evenly."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if size % world_size:
        raise ValueError(
            f"{what} {size} is not divisible by the world size {world_size}: tensor "
            f"parallelism gives every rank an equal shard ({size} / {world_size} is not whole)"
        )
    return size // world_size


def shard_layer(layer: Layer, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s shards, as plain tensors with requires_grad (raises on uneven sizes).

    Column-parallel (output rows split): q, k, v by heads, fused into one (3 h / N, h) weight;
    fc1 by rows. Row-parallel (input columns split): o and fc2; their biases are kept whole
    and added once, after the reduction. LayerNorms are replicated.
    """
    heads = check_divisible(layer.heads, world_size, "number of heads")
    width = check_divisible(layer.q.out_features, world_size, "hidden size")
    ffn = check_divisible(layer.fc1.out_features, world_size, "MLP hidden size")
    if heads * (layer.q.out_features // layer.heads) != width:
        raise ValueError("heads and hidden size must split together")
    rows, fc_rows = slice(rank * width, (rank + 1) * width), slice(rank * ffn, (rank + 1) * ffn)
    shards = {
        "ln1.weight": layer.ln1.weight, "ln1.bias": layer.ln1.bias,
        "ln2.weight": layer.ln2.weight, "ln2.bias": layer.ln2.bias,
        "qkv.weight": torch.cat([m.weight[rows] for m in (layer.q, layer.k, layer.v)]),
        "qkv.bias": torch.cat([m.bias[rows] for m in (layer.q, layer.k, layer.v)]),
        "o.weight": layer.o.weight[:, rows], "o.bias": layer.o.bias,
        "fc1.weight": layer.fc1.weight[fc_rows], "fc1.bias": layer.fc1.bias[fc_rows],
        "fc2.weight": layer.fc2.weight[:, fc_rows], "fc2.bias": layer.fc2.bias,
    }  # fmt: skip
    return {k: v.detach().clone().requires_grad_() for k, v in shards.items()}


class CopyToParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return _collective("all_reduce", grad)


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return _collective("all_reduce", x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def _collective(kind: str, tensor: torch.Tensor) -> torch.Tensor:
    """Run one collective on `tensor` (s-first), log its message bytes, return the result.

    all_reduce: the tensor, summed. all_gather: the shards concatenated along dim 0 (message =
    the gathered tensor). reduce_scatter: rank r's dim-0 chunk of the sum (message = the input).
    """
    n = dist.get_world_size()
    tensor = tensor.contiguous()
    if kind == "all_reduce":
        out, message = tensor.clone(), tensor
        dist.all_reduce(out)
    elif kind == "all_gather":
        out = tensor.new_empty((n * tensor.shape[0], *tensor.shape[1:]))
        dist.all_gather_single(out, tensor)
        message = out
    elif kind == "reduce_scatter":
        out = tensor.new_empty((tensor.shape[0] // n, *tensor.shape[1:]))
        dist.reduce_scatter_single(out, tensor)
        message = tensor
    else:
        raise ValueError(f"unknown collective {kind!r}")
    COMM_LOG.append({"kind": kind, "phase": _PHASE[0], "bytes": message.nbytes})
    return out


# -- 15 · 2. An MLP and an attention block, heads split across ranks ------------------------------


def _drop(x: torch.Tensor, keep: torch.Tensor, p: float = DROPOUT) -> torch.Tensor:
    # mul by a bool mask saves only the mask (1 byte per element) for backward
    return x * keep * (1.0 / (1.0 - p))


def _attention(q, k, v, keep, heads: int) -> torch.Tensor:
    """Softmax attention over (s, b, heads * d) projections; returns (s, b, heads * d)."""
    s, b, width = q.shape
    d = width // heads
    q, k, v = (t.view(s, b, heads, d).permute(1, 2, 0, 3) for t in (q, k, v))  # (b, a, s, d)
    probs = torch.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d)), dim=-1)
    context = _drop(probs, keep) @ v  # (b, a, s, d)
    return context.permute(2, 0, 1, 3).reshape(s, b, width)


def attention_block(w, x, local, world_size: int, sequence: bool = False, use_f: bool = True):
    """x + Dropout(Attention(LN(x))) on one rank, heads split; see `tp_layer`."""
    h = F.layer_norm(x, (HIDDEN,), w["ln1.weight"], w["ln1.bias"])
    if sequence:  # all-gather inside the linear; only the shard is kept for backward
        qkv = GatherColumnLinear.apply(h, w["qkv.weight"], w["qkv.bias"])
    else:
        qkv = F.linear(CopyToParallel.apply(h) if use_f else h, w["qkv.weight"], w["qkv.bias"])
    attn = _attention(*qkv.chunk(3, dim=-1), local["attn"], HEADS // world_size)
    partial = F.linear(attn, w["o.weight"])  # (s, b, h): this rank's heads' share of the sum
    if sequence:
        out = ReduceScatterToSequence.apply(partial)
    else:
        out = ReduceFromParallel.apply(partial)
    return x + _drop(out + w["o.bias"], local["attn_out"])  # the bias once, after the sum


def mlp_block(w, x, local, sequence: bool = False, use_f: bool = True):
    """x + Dropout(fc2(GeLU(fc1(LN(x))))) on one rank, fc1 column- and fc2 row-parallel."""
    h = F.layer_norm(x, (HIDDEN,), w["ln2.weight"], w["ln2.bias"])
    if sequence:
        h = GatherColumnLinear.apply(h, w["fc1.weight"], w["fc1.bias"])
    else:
        h = F.linear(CopyToParallel.apply(h) if use_f else h, w["fc1.weight"], w["fc1.bias"])
    partial = F.linear(F.gelu(h), w["fc2.weight"])  # (s, b, h): a partial sum
    if sequence:
        out = ReduceScatterToSequence.apply(partial)
    else:
        out = ReduceFromParallel.apply(partial)
    return x + _drop(out + w["fc2.bias"], local["mlp_out"])


def make_layer(seed: int = 0, dtype: torch.dtype = torch.float32) -> Layer:
    """The same seeded layer on every rank (h = 16, a = 4 heads, ffn = 4h)."""
    torch.manual_seed(seed)
    layer = Layer().to(dtype)
    for p in layer.parameters():  # no special values (LayerNorm's ones and zeros, zero biases)
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    return layer


def layer_input(seed: int = 1, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The input x, (s, b, h), the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SEQ, BATCH, HIDDEN, generator=g).to(dtype)


def dropout_masks(seed: int = 2, p: float = DROPOUT) -> dict[str, torch.Tensor]:
    """Keep-masks (bool) for the three dropouts, drawn once for the whole layer.

    Every rank draws the same full masks and applies its slice, so the parallel layer and the
    one-process layer drop the same elements: "attn" (b, a, s, s), "attn_out" and "mlp_out"
    (s, b, h).
    """
    g = torch.Generator().manual_seed(seed)
    return {
        "attn": torch.rand(BATCH, HEADS, SEQ, SEQ, generator=g) >= p,
        "attn_out": torch.rand(SEQ, BATCH, HIDDEN, generator=g) >= p,
        "mlp_out": torch.rand(SEQ, BATCH, HIDDEN, generator=g) >= p,
    }


def _local_masks(masks, rank: int, world_size: int, sequence: bool) -> dict[str, torch.Tensor]:
    heads = HEADS // world_size
    out = {"attn": masks["attn"][:, rank * heads : (rank + 1) * heads]}
    for name in ("attn_out", "mlp_out"):
        chunk = SEQ // world_size
        out[name] = masks[name][rank * chunk : (rank + 1) * chunk] if sequence else masks[name]
    return out


def tp_layer(shards, x, masks, rank: int, world_size: int, sequence: bool = False, use_f=True):
    """The layer on one rank: tensor parallel, or with `sequence=True` sequence parallel too.

    Tensor parallel: x is the full (s, b, h) input on every rank. Sequence parallel: x is this
    rank's (s / N, b, h) chunk, and so is the result. `use_f=False` leaves out f (the pitfall).
    """
    local = _local_masks(masks, rank, world_size, sequence)
    x = attention_block(shards, x, local, world_size, sequence, use_f)
    return mlp_block(shards, x, local, sequence, use_f)


def _log_counts(phase: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in COMM_LOG:
        if c["phase"] == phase:
            out[c["kind"]] = out.get(c["kind"], 0) + 1
    return dict(sorted(out.items()))


def _scratch_mlp_counts(layer, rank, world_size, sequence) -> dict[str, dict[str, int]]:
    """The from-scratch MLP block's collectives, per phase, counted from COMM_LOG."""
    device = current_device()
    shards = {k: v.to(device).detach().requires_grad_()
              for k, v in shard_layer(layer, rank, world_size).items()}  # fmt: skip
    ones = {k: torch.ones_like(v, device=device) for k, v in dropout_masks().items()}
    local = _local_masks(ones, rank, world_size, sequence)
    x = layer_input().to(device)
    if sequence:
        x = x[rank * (SEQ // world_size) : (rank + 1) * (SEQ // world_size)]
    COMM_LOG.clear()
    _PHASE[0] = "forward"
    out = mlp_block(shards, x.clone().requires_grad_(), local, sequence)
    _PHASE[0] = "backward"
    (out**2).sum().backward()
    return {"forward": _log_counts("forward"), "backward": _log_counts("backward")}


def tensor_parallel_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Everything notebook 15 measures on this rank: TP, TP without f, SP, memory, DTensor."""
    device = current_device()
    layer, x, masks = make_layer(), layer_input().to(device), dropout_masks()
    masks = {k: v.to(device) for k, v in masks.items()}
    results = {}
    for name, kw in {"tp": {}, "no_f": {"use_f": False}, "sp": {"sequence": True}}.items():
        shards = {k: v.to(device) for k, v in shard_layer(layer, rank, world_size).items()}
        shards = {k: v.detach().requires_grad_() for k, v in shards.items()}
        results[name] = _run(shards, x, masks, rank, world_size, **kw)
    # activation memory in bf16 (the paper's 2-byte values), forward only
    layer16 = make_layer(dtype=torch.bfloat16).to(device)
    x16 = layer_input(dtype=torch.bfloat16).to(device).requires_grad_()
    memory = {}
    for name, sequence in (("tp", False), ("sp", True)):
        shards = shard_layer(layer16, rank, world_size)
        xin = (
            x16[rank * (SEQ // world_size) : (rank + 1) * (SEQ // world_size)] if sequence else x16
        )
        _, memory[name] = activation_bytes(
            lambda s=shards, xi=xin, q=sequence: tp_layer(s, xi, masks, rank, world_size, q),
            shards.values(),
        )
    results["memory"] = memory
    results["scratch_mlp"] = {
        name: _scratch_mlp_counts(layer, rank, world_size, sequence)
        for name, sequence in (("tp", False), ("sp", True))
    }
    results["dtensor"] = {
        name: _dtensor_run(rank, world_size, sequence)
        for name, sequence in (("tp", False), ("sp", True))
    }
    return results


def _grads(named: dict[str, torch.Tensor]) -> dict[str, list]:
    return {k: v.grad.detach().cpu().reshape(-1).tolist() for k, v in named.items()}


def _run(shards, x, masks, rank, n, sequence=False, use_f=True):
    COMM_LOG.clear()
    _PHASE[0] = "forward"
    if sequence:
        chunk = SEQ // n
        x = x[rank * chunk : (rank + 1) * chunk]
    x = x.detach().clone().requires_grad_()
    out = tp_layer(shards, x, masks, rank, n, sequence=sequence, use_f=use_f)
    loss = (out.double() ** 2).sum()  # full-sequence loss is the sum of the chunks' losses
    if sequence:
        t = loss.detach().clone()
        dist.all_reduce(t)  # not logged: only to report the loss
        total = float(t)
    else:
        total = float(loss)
    _PHASE[0] = "backward"
    loss.backward()
    return {
        "loss": total,
        "out": out.detach().cpu().reshape(-1).tolist(),
        "x_grad": x.grad.detach().cpu().reshape(-1).tolist(),
        "grads": _grads(shards),
        "comm": list(COMM_LOG),
    }


# -- 15 · 4. Sequence parallelism: all-gather and reduce-scatter ----------------------------------


class ReduceScatterToSequence(torch.autograd.Function):
    """Reduce-scatter along the sequence, all-gather backward (Korthikanti et al.'s ḡ)."""

    @staticmethod
    def forward(ctx, x):
        return _collective("reduce_scatter", x)

    @staticmethod
    def backward(ctx, grad):
        return _collective("all_gather", grad)


class GatherColumnLinear(torch.autograd.Function):
    """All-gather the sequence shard, then a column-parallel linear; saves only the shard.

    Backward all-gathers the input again (for the weight gradient) instead of keeping the full
    input, and reduce-scatters the input gradient: Korthikanti et al.'s memory-saving choice.
    """

    @staticmethod
    def forward(ctx, x_shard, weight, bias):
        ctx.save_for_backward(x_shard, weight)
        return F.linear(_collective("all_gather", x_shard), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x_shard, weight = ctx.saved_tensors
        x = _collective("all_gather", x_shard)  # (s, b, h), recomputed
        grad_weight = grad.flatten(0, 1).t() @ x.flatten(0, 1)
        grad_bias = grad.sum((0, 1))
        grad_x = _collective("reduce_scatter", grad @ weight)
        return grad_x, grad_weight, grad_bias


def reference_layer(layer: Layer, x: torch.Tensor, masks: dict[str, torch.Tensor]):
    """The layer in one process: the result every parallel version must reproduce."""
    h = layer.ln1(x)
    attn = _attention(layer.q(h), layer.k(h), layer.v(h), masks["attn"], layer.heads)
    x = x + _drop(layer.o(attn), masks["attn_out"])
    h = F.gelu(layer.fc1(layer.ln2(x)))
    return x + _drop(layer.fc2(h), masks["mlp_out"])


# parameters whose gradient is a partial sum on each rank under sequence parallelism: they act on
# a sequence chunk only (LayerNorms, the row-parallel biases); Megatron all-reduces them
SEQUENCE_PARTIAL = ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "o.bias", "fc2.bias")


def _grad_shards(layer: Layer, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """The one-process gradients cut the way `shard_layer` cuts the parameters."""
    grads = Layer()
    with torch.no_grad():
        for p, g in zip(grads.parameters(), layer.parameters(), strict=True):
            p.copy_(g.grad)
    return {k: v.detach() for k, v in shard_layer(grads, rank, world_size).items()}


def max_errors(per_rank: list[dict], name: str) -> dict[str, float]:
    """Max |parallel - one process| over ranks, for the loss, output, input and every gradient.

    `per_rank` is a launch of `tensor_parallel_worker`; `name` is "tp", "no_f" or "sp". Under
    "sp" the output and input gradient are the ranks' chunks concatenated, and the gradients in
    SEQUENCE_PARTIAL are summed over ranks before the comparison.
    """
    n = len(per_rank)
    layer, x, masks = make_layer(), layer_input().requires_grad_(), dropout_masks()
    out = reference_layer(layer, x, masks)
    loss = (out.double() ** 2).sum()
    loss.backward()
    runs = [r[name] for r in per_rank]
    errors = {"loss": max(abs(r["loss"] - float(loss.detach())) for r in runs)}
    for key, ref in (("out", out.detach()), ("x_grad", x.grad)):
        if name == "sp":
            got = torch.cat([torch.tensor(r[key]) for r in runs])
            errors[key] = float((got - ref.reshape(-1)).abs().max())
        else:
            errors[key] = max(float((torch.tensor(r[key]) - ref.reshape(-1)).abs().max())
                              for r in runs)  # fmt: skip
    grads = [_grad_shards(layer, rank, n) for rank in range(n)]
    for k in grads[0]:
        if name == "sp" and k in SEQUENCE_PARTIAL:
            got = sum(torch.tensor(r["grads"][k]) for r in runs)
            errors[k] = float((got - grads[0][k].reshape(-1)).abs().max())
        else:
            errors[k] = max(float((torch.tensor(r["grads"][k]) - g[k].reshape(-1)).abs().max())
                            for r, g in zip(runs, grads, strict=True))  # fmt: skip
    return errors


# -- 15 · 5. Activation memory per rank, against Korthikanti et al. (2022) ------------------------


def korthikanti_bytes(s: int, b: int, h: int, a: int, t: int = 1, sequence: bool = False):
    """Activation bytes per layer per rank, Korthikanti et al. 2022 (16-bit values, 1-byte masks).

    No parallelism: s·b·h·(34 + 5·a·s/h); tensor parallel t: s·b·h·(10 + 24/t + 5·a·s/(h·t));
    tensor + sequence parallel: s·b·h·(34/t + 5·a·s/(h·t)).
    """
    sbh = s * b * h
    if sequence:
        return sbh * (34 / t + 5 * a * s / (h * t))
    return sbh * (10 + 24 / t + 5 * a * s / (h * t))


def activation_bytes(fn, params) -> tuple[Any, dict[str, int]]:
    """Run `fn()` and count the bytes of the tensors autograd saves for backward.

    Parameters (and views of them) are left out; a tensor saved twice (the same storage, offset,
    shape and strides) counts once. LayerNorm's per-token mean and rstd are counted apart, as
    "stats" (one value per token each): the paper's formula leaves them out.
    """
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[tuple, tuple[int, bool]] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs:
            key = (ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
            seen[key] = (t.numel() * t.element_size(), t.dim() == 3 and t.shape[-1] == 1)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    stats = sum(b for b, is_stat in seen.values() if is_stat)
    return out, {"activations": sum(b for b, s in seen.values() if not s), "stats": stats}


# -- 15 · 6. Bytes per collective, per layer, per rank --------------------------------------------


def ring_bytes(kind: str, message_bytes: float, world_size: int) -> float:
    """Bytes one rank sends for a collective of `message_bytes` under the ring algorithm.

    all_reduce (a reduce-scatter, then an all-gather): 2 (N - 1) / N x message;
    all_gather and reduce_scatter: (N - 1) / N x message (message = the full tensor).
    """
    factor = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}
    if kind not in factor:
        raise ValueError(f"unknown collective {kind!r}: use one of {sorted(factor)}")
    return factor[kind] * (world_size - 1) / world_size * message_bytes


# -- 15 · 7. The same block with PyTorch's API ----------------------------------------------------


class MLPBlock(nn.Module):
    """The layer's second block without dropout and residual: fc2(GeLU(fc1(LN(x))))."""

    def __init__(self, layer: Layer) -> None:
        super().__init__()
        self.ln, self.fc1, self.fc2 = layer.ln2, layer.fc1, layer.fc2

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.ln(x))))


def parallel_mlp_block(mesh, sequence: bool = False) -> MLPBlock:
    """MLPBlock on the mesh's device through parallelize_module: Colwise fc1, Rowwise fc2 (and
    SequenceParallel LN). The tensor-parallel plan does not name the LayerNorm, so the whole
    block is moved to the mesh's device first."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    if sequence:  # activations (s, b, h) sharded on dim 0 outside the two linears
        plan = {
            "ln": SequenceParallel(sequence_dim=0),  # the default, 1, is (b, s, h)'s
            "fc1": ColwiseParallel(input_layouts=Shard(0)),
            "fc2": RowwiseParallel(output_layouts=Shard(0)),
        }
    return parallelize_module(MLPBlock(make_layer()).to(mesh.device_type), mesh, plan)


def comm_counts(comm) -> dict[str, int]:
    """Collectives seen by a CommDebugMode, by short name: {"all_reduce": 1, ...}."""
    names = {"allreduce_": "all_reduce", "_allgather_base_": "all_gather",
             "_reduce_scatter_base_": "reduce_scatter", "all_gather_into_tensor": "all_gather",
             "reduce_scatter_tensor": "reduce_scatter"}  # fmt: skip
    out: dict[str, int] = {}
    for k, v in comm.get_comm_counts().items():
        name = str(k).split(".")[-1]
        out[names.get(name, name)] = out.get(names.get(name, name), 0) + v
    return dict(sorted(out.items()))


def _dtensor_run(rank: int, world_size: int, sequence: bool) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh(current_device().type, (world_size,))
    block = parallel_mlp_block(mesh, sequence)
    x = layer_input().to(current_device())
    if sequence:
        chunk = SEQ // world_size
        x = x[rank * chunk : (rank + 1) * chunk]
    x = x.clone().requires_grad_()
    saved = []  # (placements, numel) of every DTensor autograd keeps for backward

    def pack(t):
        if isinstance(t, DTensor):
            saved.append((str(t.placements), t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with CommDebugMode() as comm:  # one context per phase (a second forward in one raises)
            out = block(x)
            loss = (out**2).sum()
    forward = comm_counts(comm)
    with CommDebugMode() as comm:
        loss.backward()
    backward = comm_counts(comm)
    total = loss.detach().clone()
    if sequence:
        dist.all_reduce(total)
    grads, placements = {}, {}
    for k, p in block.named_parameters():
        g = p.grad
        placements[k] = {
            "param": str(p.placements) if isinstance(p, DTensor) else "tensor",
            "grad": str(g.placements) if isinstance(g, DTensor) else "tensor",
            "local": list(p.to_local().shape if isinstance(p, DTensor) else p.shape),
        }
        grads[k] = (g.full_tensor() if isinstance(g, DTensor) else g).reshape(-1).tolist()
    return {
        "loss": float(total),
        "out_type": type(out).__name__,
        "out": out.detach().reshape(-1).tolist(),  # this rank's chunk under sequence parallelism
        "x_grad": x.grad.reshape(-1).tolist(),
        "grads": grads,
        "placements": placements,
        "comm": {"forward": forward, "backward": backward},
        "saved": saved,
    }


# -- 15 · 8. Many ranks in one process ------------------------------------------------------------


def local_tensor_mlp(world_size: int) -> dict[str, Any]:
    """The DTensor MLP block (tensor-parallel plan) as N ranks in this one process.

    LocalTensorMode with the fake process group.

    Private, testing-only API (torch.distributed._local_tensor). Initialises the "fake" process
    group in this process and destroys it before returning.
    """
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("local_tensor_mlp needs a process without a process group")
    check_divisible(FFN, world_size, "MLP hidden size")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (world_size,))  # outside the mode
        x = layer_input().requires_grad_()
        with LocalTensorMode(world_size):
            mlp = parallel_mlp_block(mesh)
            loss = (mlp(x) ** 2).sum()
            loss.backward()
            fc1 = mlp.fc1.weight.grad.to_local()
            shards = {r: tuple(t.shape) for r, t in fc1._local_tensors.items()}
            grads = {}
            for k, p in mlp.named_parameters():
                full = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                full = full.reconcile() if isinstance(full, LocalTensor) else full
                grads[k] = full.reshape(-1).tolist()
            losses = loss._local_tensors if isinstance(loss, LocalTensor) else {0: loss}
            per_rank_loss = [float(losses[r]) for r in sorted(losses)]
            xg = x.grad.reconcile() if isinstance(x.grad, LocalTensor) else x.grad
        return {"loss": per_rank_loss, "grads": grads, "x_grad": xg.reshape(-1).tolist(),
                "fc1_grad_shards": shards}  # fmt: skip
    finally:
        dist.destroy_process_group()
