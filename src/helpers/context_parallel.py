"""Context parallelism: ring attention from scratch, the all-gather variant, torch's API on CPU.

Used by: notebook 17. Workers run under `helpers.launch` with gloo on CPU and return plain Python
data (nested lists, floats, strings), never tensors. Tensors are (B, H, S, D): batch, heads,
sequence, head dimension; the sequence dimension S (dim 2) is what is sharded.

What "from scratch" means here: each rank keeps its own queries and its own block of keys and
values. `ring_attention` computes attention block by block: its queries against the key/value
block it holds, merged into a running output with a running log-sum-exp (the online softmax), then
passes the key/value block to the next rank and receives the previous rank's (`RingShift`, on
`isend`/`irecv`), N - 1 times. Backward is autograd through the same blockwise arithmetic;
`RingShift`'s backward passes the gradient of the received block back the other way round the
ring, so the gradients of k and v arrive at the rank that owns them. A causal mask is decided
from global token positions, so the same code serves the contiguous split (rank r holds tokens
[r S/N, (r+1) S/N)) and the zig-zag split (2N chunks; rank r holds chunks r and 2N-1-r).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = [
    "LAYOUTS",
    "make_qkv",
    "chunks_of",
    "split_sequence",
    "merge_sequence",
    "block_attention",
    "merge_partial",
    "RingShift",
    "ring_attention",
    "reference",
    "ring_worker",
    "ring_worker_with",
    "one_process_errors",
    "check_one_process",
    "allgather_attention",
    "allgather_worker",
    "strides_worker",
    "pitfall_worker",
    "library_worker",
    "rotater_worker",
    "work_formula",
    "work_grid",
    "work_grid_svg",
    "ring_owner",
    "block_skipped",
    "ring_attention_plan",
    "ring_attention_svg",
    "ring_attention_step_text",
    "ring_attention_step_viewer",
]

LAYOUTS = ("contiguous", "zigzag")
SHAPE = (1, 2, 16, 8)  # (B, H, S, D): S = 16 splits into 2N chunks for N = 2 and 4


def make_qkv(shape: Sequence[int] = SHAPE, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """The same q, k, v (float32, `shape`) on every rank and in the reference (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) for _ in range(3))


def chunks_of(seq_len: int, world_size: int, rank: int, layout: str) -> list[tuple[int, int]]:
    """Rank `rank`'s chunks of a sequence of `seq_len` tokens, as (start, length) in order.

    contiguous: one chunk of S/N tokens; zigzag: chunks r and 2N-1-r of 2N equal chunks. Raises
    ValueError when `seq_len` does not split into equal chunks (N, or 2N for zigzag).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    parts = world_size if layout == "contiguous" else 2 * world_size
    if seq_len % parts != 0:
        raise ValueError(
            f"sequence length {seq_len} does not split into {parts} equal chunks "
            f"({layout} layout over {world_size} ranks): pad it to a multiple of {parts}"
        )
    c = seq_len // parts
    if layout == "contiguous":
        return [(rank * c, c)]
    return [(rank * c, c), ((2 * world_size - 1 - rank) * c, c)]


def split_sequence(x: torch.Tensor, world_size: int, rank: int, layout: str) -> torch.Tensor:
    """Rank `rank`'s part of x (B, H, S, D) along S: its chunks concatenated, (B, H, S/N, D)."""
    parts = [x.narrow(2, s, n) for s, n in chunks_of(x.shape[2], world_size, rank, layout)]
    return torch.cat(parts, dim=2)


def merge_sequence(parts: Sequence[torch.Tensor], layout: str) -> torch.Tensor:
    """Inverse of split_sequence: the ranks' parts (rank order) back into one (B, H, S, D)."""
    world_size = len(parts)
    seq_len = sum(p.shape[2] for p in parts)
    out = torch.empty(*parts[0].shape[:2], seq_len, *parts[0].shape[3:], dtype=parts[0].dtype)
    for rank, part in enumerate(parts):
        offset = 0
        for s, n in chunks_of(seq_len, world_size, rank, layout):
            out[:, :, s : s + n] = part[:, :, offset : offset + n]
            offset += n
    return out


def block_skipped(q_start: int, q_len: int, k_start: int, causal: bool) -> bool:
    """Whether a causal mask hides a whole block: its first key comes after its last query."""
    return causal and k_start > q_start + q_len - 1


def ring_owner(rank: int, step: int, world_size: int) -> int:
    """The rank whose key/value block `rank` holds at ring step `step`: (rank - step) mod N."""
    return (rank - step) % world_size


def block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    k_start: int,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Attention of one query chunk on one key/value chunk: (out, lse), or None if all masked.

    q (B, H, Sq, D), k and v (B, H, Sk, D); q_start and k_start are the chunks' global positions.
    out (B, H, Sq, D) is softmax(q k^T / sqrt(D)) v over this block only; lse (B, H, Sq) is the
    log of the block's softmax denominator, so that blocks can be merged exactly afterwards.
    """
    sq, sk = q.shape[2], k.shape[2]
    if block_skipped(q_start, sq, k_start, causal):
        return None  # every key is after every query: the block is skipped, no work
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Sq, Sk)
    if causal and k_start + sk - 1 > q_start:  # the block straddles the diagonal
        qpos = torch.arange(q_start, q_start + sq).unsqueeze(1)
        kpos = torch.arange(k_start, k_start + sk).unsqueeze(0)
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, H, Sq)
    out = torch.exp(scores - lse.unsqueeze(-1)) @ v
    return out, lse


def merge_partial(
    out: torch.Tensor | None,
    lse: torch.Tensor | None,
    block_out: torch.Tensor,
    block_lse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge a block's (out, lse) into the running (out, lse): the online softmax step.

    With L = logaddexp(lse, block_lse), the merged output is the two outputs weighted by
    exp(lse - L) and exp(block_lse - L): each block's share of the full softmax denominator.
    """
    if out is None:
        return block_out, block_lse
    new_lse = torch.logaddexp(lse, block_lse)
    out = (
        torch.exp(lse - new_lse).unsqueeze(-1) * out
        + torch.exp(block_lse - new_lse).unsqueeze(-1) * block_out
    )
    return out, new_lse


class RingShift(torch.autograd.Function):
    """Send a tensor to rank+1 and receive rank-1's (isend/irecv); backward goes the other way."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any = None) -> torch.Tensor:
        ctx.group = group
        return _shift(x, +1, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # the gradient of what this rank received belongs to the rank it came from (rank-1)
        return _shift(grad, -1, ctx.group), None


def _shift(x: torch.Tensor, direction: int, group: Any) -> torch.Tensor:
    """Send x to rank+direction and return what rank-direction sent (both posted at once)."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    x = x.contiguous()
    received = torch.empty_like(x)
    # both posted before either waits: gloo's send blocks until the peer's receive is posted
    send = dist.isend(x, (rank + direction) % world_size, group=group)
    recv = dist.irecv(received, (rank - direction) % world_size, group=group)
    send.wait()
    recv.wait()
    return received


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    layout: str = "contiguous",
    group: Any = None,
    tie: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Ring attention on this rank's q, k, v (B, H, S/N, D): (out, lse, work).

    Step s uses the key/value block of rank (rank - s) mod N, then passes it on (N - 1 shifts of
    k and v stacked into one tensor). work counts the score entries this rank computed
    ("scores"), the blocks it computed and skipped, its CPU time in block arithmetic ("cpu_s") and,
    per step, the owner of the block it held as `ring_owner` names it, the (q start, k start) chunk
    pairs it computed and skipped (what `ring_attention_plan` predicts) and "first_key", the first value
    of the key block it actually held (k[0, 0, 0, 0], read from the block itself, which the caller
    can compare with the named owner's shard) ("steps"). tie=False leaves out the weight-0 tie at
    the end (the unit tests show the deadlock it prevents).
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    local = q.shape[2]
    seq_len = local * world_size
    q_chunks = chunks_of(seq_len, world_size, rank, layout)
    kv = torch.stack([k, v])  # (2, B, H, S/N, D): one tensor travels, one shift per step
    running: list[tuple[Any, Any]] = [(None, None)] * len(q_chunks)  # (out, lse) per q chunk
    work: dict[str, Any] = {"scores": 0, "blocks": 0, "skipped": 0, "cpu_s": 0.0, "steps": []}
    for step in range(world_size):
        owner = ring_owner(rank, step, world_size)
        # what this step did: the (q start, k start) pairs of the chunks computed and skipped, and
        # the first key value of the block held (read from the data, not from the rule)
        done: dict[str, Any] = {"owner": owner, "computed": [], "skipped": []}
        done["first_key"] = kv[0, 0, 0, 0, 0].item()  # k of this block: (B, H, S/N, D) index 0
        work["steps"].append(done)
        t0 = time.thread_time()
        q_off = 0
        for i, (qs, qn) in enumerate(q_chunks):
            k_off = 0
            for ks, kn in chunks_of(seq_len, world_size, owner, layout):
                res = block_attention(
                    q[:, :, q_off : q_off + qn],
                    kv[0][:, :, k_off : k_off + kn],
                    kv[1][:, :, k_off : k_off + kn],
                    qs,
                    ks,
                    causal,
                )
                k_off += kn
                if res is None:
                    work["skipped"] += 1
                    done["skipped"].append([qs, ks])
                    continue
                work["blocks"] += 1
                done["computed"].append([qs, ks])
                work["scores"] += qn * kn
                running[i] = merge_partial(*running[i], *res)
            q_off += qn
        work["cpu_s"] += time.thread_time() - t0
        if step < world_size - 1:
            kv = RingShift.apply(kv, group)
    # every query chunk saw at least its own diagonal block at step 0, so none is None here
    out = torch.cat([o for o, _ in running], dim=2)
    # Tie the last block received into the output with weight 0. Under a causal mask a rank may
    # skip every block after step 0 (rank 0 of the contiguous split does); then nothing uses the
    # shifted blocks, autograd never calls RingShift.backward on that rank, and its neighbours
    # wait for it in theirs forever. Through the tie every rank runs all N - 1 backward shifts.
    if tie:
        out = out + 0.0 * kv.sum()
    lse = torch.cat([m for _, m in running], dim=2)
    return out, lse, work


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> dict[str, torch.Tensor]:
    """One process, the whole sequence: SDPA's output, the log-sum-exp, and dq, dk, dv.

    The loss is (out * weight).sum() with a fixed weight tensor, the same as the workers use.
    """
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[2]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    (out * loss_weight(out.shape)).sum().backward()
    return {"out": out.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def loss_weight(shape: Sequence[int]) -> torch.Tensor:
    """A fixed, seeded weight for the loss (out * weight).sum(): every gradient entry differs."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(99))


def ring_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]]) -> list[dict]:
    """Each case {causal, layout, shape}: this rank's out, lse, dq, dk, dv (lists) and work.

    A case with values=False (long, timed sequences) runs the forward only, without autograd, on
    one intra-op thread, and returns only {"work": ..., "threads": 1}: with autograd every block's
    saved tensors stay alive, the heap grows, and the page faults of new memory land in the rank's
    CPU time, unevenly across ranks; on one thread `ring_attention`'s `time.thread_time` is all of
    the rank's CPU time (with more, the other threads' share would be left out).
    """
    results = []
    for case in cases:
        shape = case.get("shape", SHAPE)
        layout = case["layout"]
        full = make_qkv(shape)
        if not case.get("values", True):  # timed cases: the forward's work counts only
            q, k, v = (split_sequence(t, world_size, rank, layout) for t in full)
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the thread time is then all of the rank's CPU time
            try:
                with torch.no_grad():
                    _, _, work = ring_attention(q, k, v, case["causal"], layout)
            finally:
                torch.set_num_threads(threads)
            results.append({"work": work, "threads": 1})
            continue
        q, k, v = (split_sequence(t, world_size, rank, layout).requires_grad_() for t in full)
        out, lse, work = ring_attention(q, k, v, case["causal"], layout, tie=case.get("tie", True))
        weight = split_sequence(loss_weight(shape), world_size, rank, layout)
        (out * weight).sum().backward()
        results.append(
            {
                "out": out.detach().tolist(),
                "lse": lse.detach().unsqueeze(-1).tolist(),  # (B, H, S/N, 1): splits like q
                "dq": q.grad.tolist(),
                "dk": k.grad.tolist(),
                "dv": v.grad.tolist(),
                "work": work,
            }
        )
    return results


def work_formula(world_size: int, layout: str, seq_len: int) -> list[int]:
    """Score entries each rank computes under a causal mask (skipped blocks cost nothing).

    contiguous: rank r computes r+1 blocks of (S/N)^2; zigzag: 2N+1 chunk pairs of (S/2N)^2.
    """
    if layout == "contiguous":
        c = seq_len // world_size
        return [(r + 1) * c * c for r in range(world_size)]
    c = seq_len // (2 * world_size)
    return [(2 * world_size + 1) * c * c for _ in range(world_size)]


def work_grid(world_size: int, layout: str) -> list[list[int | None]]:
    """Causal mask, 2N chunks: grid[i][j] is the rank that computes query chunk i on key chunk j.

    None where no rank computes the pair (the block holding it is skipped). Under the contiguous
    split a rank's block is two chunks wide, so the pair just above the diagonal inside its
    diagonal block is computed (and masked inside the block) too.
    """
    parts = 2 * world_size
    grid: list[list[int | None]] = [[None] * parts for _ in range(parts)]
    for rank in range(world_size):
        for qs, qn in chunks_of(parts, world_size, rank, layout):
            for owner in range(world_size):
                for ks, kn in chunks_of(parts, world_size, owner, layout):
                    if block_skipped(qs, qn, ks, True):
                        continue  # skipped, as in block_attention
                    for i in range(qs, qs + qn):
                        for j in range(ks, ks + kn):
                            grid[i][j] = rank
    return grid


_RANK_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948")


def work_grid_svg(world_size: int, layout: str, cell_px: int = 22) -> str:
    """work_grid as an SVG: rows are query chunks, columns key chunks, colour = computing rank.

    A computed pair above the diagonal (all masked inside its block) is drawn pale. Deterministic.
    """
    grid = work_grid(world_size, layout)
    n = len(grid)
    left, top = 30, 34
    width, height = left + n * cell_px + 120, top + n * cell_px + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        f'<text x="4" y="14" font-size="12">{layout} split, N={world_size}, causal: '
        f"query chunk (row) x key chunk (column)</text>",
    ]
    for i, row in enumerate(grid):
        out.append(f'<text x="4" y="{top + i * cell_px + 15}" font-size="10">q{i}</text>')
        for j, rank in enumerate(row):
            x, y = left + j * cell_px, top + i * cell_px
            fill = "#ffffff" if rank is None else _RANK_COLOURS[rank % len(_RANK_COLOURS)]
            opacity = "0.35" if rank is not None and j > i else "1"
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell_px - 2}" height="{cell_px - 2}" '
                f'fill="{fill}" fill-opacity="{opacity}" stroke="#999" stroke-width="0.5"/>'
            )
    for r in range(world_size):
        y = top + r * 18
        colour = _RANK_COLOURS[r % len(_RANK_COLOURS)]
        out.append(
            f'<rect x="{left + n * cell_px + 12}" y="{y}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{left + n * cell_px + 30}" y="{y + 10}" font-size="11">rank {r}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


class _GatherSeq(torch.autograd.Function):
    """All-gather along S in forward; backward: all-reduce the gradient, keep this rank's part."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        world_size = dist.get_world_size()
        parts = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()  # every rank's queries contributed to every key's gradient
        dist.all_reduce(grad)
        return grad.chunk(dist.get_world_size(), dim=2)[dist.get_rank()]


def _gather(x: torch.Tensor, how: str) -> torch.Tensor:
    """x (B, H, S/N, D) on every rank -> (B, H, S, D) in rank order, with autograd."""
    if how == "nn.functional":
        import torch.distributed.nn.functional as dnnf

        return torch.cat(dnnf.all_gather(x), dim=2)
    if how == "functional_collectives":
        from torch.distributed import _functional_collectives as funcol

        return funcol.all_gather_single(x, 2, dist.group.WORLD)
    if how == "function":
        return _GatherSeq.apply(x)
    raise ValueError(f"unknown gather {how!r}")


def allgather_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, how: str
) -> torch.Tensor:
    """This rank's queries (contiguous split) on the all-gathered k and v: out (B, H, S/N, D)."""
    rank = dist.get_rank()
    k_full, v_full = _gather(k, how), _gather(v, how)
    local, seq_len = q.shape[2], k_full.shape[2]
    mask = None
    if causal:
        qpos = torch.arange(rank * local, (rank + 1) * local).unsqueeze(1)
        mask = torch.arange(seq_len).unsqueeze(0) <= qpos  # True: may attend
    return F.scaled_dot_product_attention(q, k_full, v_full, attn_mask=mask)


def allgather_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]]) -> list[dict]:
    """Each case {causal, how}: this rank's out, dq, dk, dv (lists), contiguous split."""
    results = []
    for case in cases:
        full = make_qkv(SHAPE)
        q, k, v = (split_sequence(t, world_size, rank, "contiguous").requires_grad_() for t in full)
        out = allgather_attention(q, k, v, case["causal"], case["how"])
        weight = split_sequence(loss_weight(SHAPE), world_size, rank, "contiguous")
        (out * weight).sum().backward()
        results.append(
            {
                "out": out.detach().tolist(),
                "dq": q.grad.tolist(),
                "dk": k.grad.tolist(),
                "dv": v.grad.tolist(),
            }
        )
    return results


def strides_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Why nn.functional.all_gather's K gradient is wrong on gloo: the buffers its backward gets.

    Gathers this rank's k (contiguous split) with torch.distributed.nn.functional.all_gather,
    runs SDPA and backward, and records the strides of the gradients reaching the gather's
    backward and of the receive buffers handed to dist.scatter; then scatters a known tensor into
    a buffer with those strides and into a contiguous one, and says which arrived intact.
    """
    import torch.distributed.nn.functional as dnnf

    seen: dict[str, Any] = {"grad strides": [], "buffer strides": []}
    real_scatter = dist.scatter

    def recording_scatter(tensor, scatter_list=None, src=0, group=None, **kw):
        seen["buffer strides"].append(tensor.stride())
        return real_scatter(tensor, scatter_list, src, group, **kw)

    q, k, v = (split_sequence(t, world_size, rank, "contiguous") for t in make_qkv(SHAPE))
    k.requires_grad_()
    parts = dnnf.all_gather(k)
    for p in parts:
        p.register_hook(lambda g: seen["grad strides"].append(g.stride()))
    out = F.scaled_dot_product_attention(q, torch.cat(parts, dim=2), make_qkv(SHAPE)[2])
    dist.scatter = recording_scatter
    try:
        out.sum().backward()
    finally:
        dist.scatter = real_scatter
    # the scatter alone: rank 0 sends arange values; a buffer laid out like the gradient
    shape = tuple(k.shape)  # (B, H, S/N, D)
    sent = [
        torch.arange(math.prod(shape), dtype=torch.float32).view(shape) + 1000 * i
        for i in range(world_size)
    ]
    strided = torch.empty(shape[0], shape[2], shape[1], shape[3]).transpose(
        1, 2
    )  # (B,S,H,D) memory
    for name, buf in (("strided", strided), ("contiguous", torch.empty(shape))):
        dist.scatter(buf, sent if rank == 0 else None, src=0)
        seen[f"{name} buffer intact"] = bool(torch.equal(buf, sent[rank]))
        seen[f"{name} buffer is_contiguous"] = buf.is_contiguous()
        if name == "strided":  # its memory, read in order, against the data sent in order
            memory = buf.transpose(1, 2).contiguous().flatten()
            seen["strided buffer's memory is the data in contiguous order"] = bool(
                torch.equal(memory, sent[rank].flatten())
            )
    seen["strided buffer strides"] = strided.stride()
    return seen


def pitfall_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]]) -> dict:
    """Section 5 in one launch: allgather_worker(cases) and strides_worker()."""
    return {
        "variants": allgather_worker(rank, world_size, cases),
        "strides": strides_worker(rank, world_size),
    }


def library_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]]) -> list[dict]:
    """torch's context_parallel on CPU: per case {causal, backward}, what ran or what it raised.

    The context manager shards the buffers in place along S (`resize_`) on entry and restores
    them the same way on exit, so a buffer cannot require grad ("cannot resize variables that
    require grad"); for a backward case the attention runs on grad-requiring copies
    (`detach().clone().requires_grad_()`) of this rank's shards, made inside the context.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (world_size,))
    results = []
    for case in cases:
        q, k, v = (t.clone() for t in make_qkv(SHAPE))
        ref = reference(*make_qkv(SHAPE), case["causal"])
        t0 = time.perf_counter()
        try:
            with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
                shard_shape = tuple(q.shape)
                grad = case["backward"]
                qs, ks, vs = (t.detach().clone().requires_grad_(grad) for t in (q, k, v))
                out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=case["causal"])
                expected = split_sequence(ref["out"], world_size, rank, "contiguous")
                err = (out.detach() - expected).abs().max().item()
                if case["backward"]:
                    (
                        out * split_sequence(loss_weight(SHAPE), world_size, rank, "contiguous")
                    ).sum().backward()
            results.append(
                {
                    "ok": True,
                    "error": err,
                    "type": type(out).__name__,
                    "shard shape": shard_shape,
                    "s": time.perf_counter() - t0,
                }
            )
        except Exception as exc:  # recorded, not raised: the notebook shows what failed
            results.append(
                {
                    "ok": False,
                    "raised": type(exc).__name__,
                    "message": str(exc)[:3000],
                    "s": time.perf_counter() - t0,
                }
            )
    return results


def rotater_worker(rank: int, world_size: int) -> dict[str, Any]:
    """torch's own K/V rotaters of `context_parallel`, run on this process group (gloo, CPU).

    Each rank's buffer holds its rank number (4 values). For each `_RotateMethod`, the loop of
    `_templated_ring_attention` (exchange at steps 0..N-2, take the next buffer at steps 1..N-1)
    records which rank's buffer this rank holds at each step, and the elements the rotater keeps
    after its first exchange (all-gather: every rank's; all-to-all: one block).
    """
    from torch.distributed.tensor.experimental._context_parallel import _attention

    pg = dist.group.WORLD
    results: dict[str, Any] = {}
    for method in (_attention._RotateMethod.ALL_GATHER, _attention._RotateMethod.ALL_TO_ALL):
        rotater = _attention._create_rotater(pg, 2, method)
        buffer = torch.full((4,), float(rank))
        held, kept = [rank], None
        for step in range(world_size):
            if step > 0:
                buffer = rotater.next_buffer()
                held.append(int(buffer[0].item()))
            if step < world_size - 1:
                rotater.exchange_buffers(buffer)
                if kept is None:
                    pending = getattr(rotater, "_aggregated_buffer", None)
                    pending = rotater._buffer if pending is None else pending
                    kept = int(pending.numel())
        results[method.name] = {"held": held, "kept after the first exchange": kept}
    return results


# ---------------------------------------------------------------- the ring, step by step
def ring_attention_plan(
    world_size: int, layout: str, causal: bool, seq_len: int = SHAPE[2]
) -> list[list[dict[str, Any]]]:
    """What every rank does at each step of `ring_attention`: plan[s][r], from the same rules.

    Each entry: the rank, the owner of the block it holds (`ring_owner`), the (q start, k start)
    chunk pairs it computes and skips (`block_skipped`, in `ring_attention`'s order), and, except
    at the last step, the rank it sends the block to, the rank it receives from and whose block
    arrives (`ring_owner` at the next step). Plain data (lists), comparable with the steps a run
    records (`work["steps"]`).
    """
    plan = []
    for step in range(world_size):
        last = step == world_size - 1
        ranks = []
        for rank in range(world_size):
            owner = ring_owner(rank, step, world_size)
            computed, skipped = [], []
            for qs, qn in chunks_of(seq_len, world_size, rank, layout):
                for ks, _ in chunks_of(seq_len, world_size, owner, layout):
                    (skipped if block_skipped(qs, qn, ks, causal) else computed).append([qs, ks])
            ranks.append(
                {
                    "rank": rank,
                    "owner": owner,
                    "computed": computed,
                    "skipped": skipped,
                    "send_to": None if last else (rank + 1) % world_size,
                    "recv_from": None if last else (rank - 1) % world_size,
                    "arrives": None if last else ring_owner(rank, step + 1, world_size),
                }
            )
        plan.append(ranks)
    return plan


def _tokens(chunks: Sequence[tuple[int, int]]) -> str:
    """Token ranges as text: [(0, 2), (14, 2)] -> "0-1,14-15"."""
    return ",".join(f"{s}-{s + n - 1}" for s, n in chunks)


def ring_attention_step_text(
    plan: list[list[dict[str, Any]]], step: int, layout: str, causal: bool, seq_len: int
) -> str:
    """Step `step` of `ring_attention_plan`'s plan as text: per rank the block it holds, the chunk pairs
    it computes and skips (queries x keys, as token ranges), the keys its running (out, LSE) has
    folded in so far, what it sends and receives. Deterministic: ranks and token positions only."""
    n = len(plan)
    mask = "causal" if causal else "no mask"
    lines = [
        f"step {step} of 0..{n - 1}: ring attention, {layout} split, {mask}, N={n}, S={seq_len}"
    ]
    for entry in plan[step]:
        r, owner = entry["rank"], entry["owner"]
        q_len = dict(chunks_of(seq_len, n, r, layout))
        k_len = dict(chunks_of(seq_len, n, owner, layout))

        pairs = {
            key: ", ".join(
                f"q{_tokens([(qs, q_len[qs])])} x k{_tokens([(ks, k_len[ks])])}"
                for qs, ks in entry[key]
            )
            for key in ("computed", "skipped")
        }
        held = _tokens(chunks_of(seq_len, n, owner, layout))
        lines.append(f"rank {r} holds the K/V block of rank {owner} (keys {held})")
        lines.append(
            f"  computes {pairs['computed'] or 'nothing'}; skips {pairs['skipped'] or 'none'}"
        )
        for qs, qn in chunks_of(seq_len, n, r, layout):
            folded = []
            for s in range(step + 1):
                keys = dict(chunks_of(seq_len, n, plan[s][r]["owner"], layout))
                folded += [(ks, keys[ks]) for q0, ks in plan[s][r]["computed"] if q0 == qs]
            lines.append(
                f"  running (out, LSE) of queries {_tokens([(qs, qn)])} has folded in keys "
                f"{', '.join(_tokens([c]) for c in folded)}"
            )
        if entry["send_to"] is None:
            lines.append("  last step: no shift")
        else:
            lines.append(
                f"  sends it to rank {entry['send_to']}, receives rank {entry['arrives']}'s block"
                f" from rank {entry['recv_from']}"
            )
    return "\n".join(lines)


def ring_attention_svg(
    plan: list[list[dict[str, Any]]], step: int, layout: str, seq_len: int, cell_px: int = 18
) -> str:
    """Step `step` of the plan as an SVG: a box per rank (the block it holds, in its owner's
    colour), the shifts to the next rank, and the (query chunk, key chunk) grid of 2N chunks,
    each pair marked by state: computed at this step, folded earlier (both in the colour of the
    rank whose queries they are), skipped at this step, skipped earlier, or not yet met.
    Deterministic; DOM hooks: `svg.ringattn-svg[data-step]`, `g.rank[data-rank][data-owner]`,
    `g.shift[data-from][data-to]`, `rect.pair[data-state][data-q][data-k]`."""
    n = len(plan)
    parts, unit = 2 * n, seq_len // (2 * n)
    box_w, box_h, gap = 118, 50, 14
    width = max(n * (box_w + gap) + 20, 2 * cell_px * parts + 220)
    grid_top = box_h + 70
    height = grid_top + parts * cell_px + 30
    colour = [_RANK_COLOURS[r % len(_RANK_COLOURS)] for r in range(n)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ringattn-svg" data-step="{step}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="DejaVu Sans, Arial, sans-serif">',
        '<defs><marker id="ringattn-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6"'
        ' markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
        "</defs>",
    ]
    for entry in plan[step]:
        r, owner = entry["rank"], entry["owner"]
        x = 10 + r * (box_w + gap)
        held = _tokens(chunks_of(seq_len, n, owner, layout))
        out.append(
            f'<g class="rank" data-rank="{r}" data-owner="{owner}" '
            f'data-computed="{len(entry["computed"])}" data-skipped="{len(entry["skipped"])}">'
            f'<rect x="{x}" y="10" width="{box_w}" height="{box_h}" rx="4" fill="{colour[owner]}"'
            ' fill-opacity="0.25" stroke="#555"/>'
            f'<text x="{x + 6}" y="26" font-size="11">rank {r}</text>'
            f'<text x="{x + 6}" y="40" font-size="10">K/V of rank {owner}</text>'
            f'<text x="{x + 6}" y="53" font-size="10">keys {held}</text></g>'
        )
        if entry["send_to"] is not None:
            to = entry["send_to"]
            x0, y0 = x + box_w / 2 - 8, 10 + box_h
            x1 = 10 + to * (box_w + gap) + box_w / 2
            dip = 22 if to == r + 1 else 40  # the wrap-around arrow goes lower
            out.append(
                f'<g class="shift" data-from="{r}" data-to="{to}"><path d="M{x0:.0f},{y0} '
                f'C{x0:.0f},{y0 + dip} {x1:.0f},{y0 + dip} {x1 + 8:.0f},{y0 + 2}" fill="none" '
                'stroke="#555" marker-end="url(#ringattn-arrow)"/></g>'
            )
    out.append(
        f'<text x="10" y="{grid_top - 8}" font-size="11">query chunk (row) x key chunk (column),'
        f" {parts} chunks of {unit} tokens</text>"
    )
    for j in range(parts):
        out.append(
            f'<text x="{40 + j * cell_px}" y="{grid_top + parts * cell_px + 12}" '
            f'font-size="9">k{j * unit}</text>'
        )
    state: dict[tuple[int, int], tuple[str, int]] = {}
    for s in range(step + 1):
        for entry in plan[s]:
            r, owner = entry["rank"], entry["owner"]
            qn = dict(chunks_of(seq_len, n, r, layout))
            kn = dict(chunks_of(seq_len, n, owner, layout))
            for key, kind in (("computed", "now"), ("skipped", "skipped-now")):
                for qs, ks in entry[key]:
                    for i in range(qs // unit, (qs + qn[qs]) // unit):
                        for j in range(ks // unit, (ks + kn[ks]) // unit):
                            label = (
                                kind if s == step else ("folded" if kind == "now" else "skipped")
                            )
                            state[(i, j)] = (label, r)
    fills = {"skipped-now": "#bbbbbb", "skipped": "#eeeeee", "pending": "#ffffff"}
    for i in range(parts):
        y = grid_top + i * cell_px
        out.append(f'<text x="10" y="{y + 13}" font-size="9">q{i * unit}</text>')
        for j in range(parts):
            label, r = state.get((i, j), ("pending", -1))
            fill = fills.get(label, colour[r] if r >= 0 else "#ffffff")
            opacity = "0.35" if label == "folded" else "1"
            stroke = (
                ' stroke="#000" stroke-width="1.5"'
                if label in ("now", "skipped-now")
                else (' stroke="#999" stroke-width="0.5"')
            )
            out.append(
                f'<rect class="pair" data-q="{i * unit}" data-k="{j * unit}" data-state="{label}" '
                f'x="{40 + j * cell_px}" y="{y}" width="{cell_px - 2}" height="{cell_px - 2}" '
                f'fill="{fill}" fill-opacity="{opacity}"{stroke}/>'
            )
    lx = 60 + parts * cell_px
    # a pair takes the colour of the rank whose queries it holds (a box: its block owner's), so
    # the legend's computed and folded swatches are grey
    for k, (label, fill) in enumerate(
        (("computed at this step (the query rank's colour)", "#888888"),
         ("folded earlier (pale)", "#888888"),
         ("skipped at this step", fills["skipped-now"]), ("skipped earlier", fills["skipped"]),
         ("not met yet", fills["pending"]))
    ):  # fmt: skip
        y = grid_top + k * 18
        opacity = "0.35" if k == 1 else "1"
        out.append(
            f'<rect x="{lx}" y="{y}" width="12" height="12" fill="{fill}" fill-opacity="{opacity}"'
            f' stroke="#999"/><text x="{lx + 18}" y="{y + 10}" font-size="10">{label}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def ring_attention_step_viewer(
    world_size: int, layout: str, causal: bool, seq_len: int = SHAPE[2]
) -> Any:
    """A slider over the steps of `ring_attention_plan(world_size, layout, causal, seq_len)`, drawn in
    the browser (`helpers.viewers.RingAttentionViewer`); its plain-text twin is step 0's text.

    steps[s]: {"step": s, "plan": plan[s], "svg": ring_attention_svg(...), "text":
    ring_attention_step_text(...)}. DOM hooks: `.ringattn-step-view`, its slider
    `.ringattn-step-slider` (`input[type=range]`, readout `.ringattn-step-readout`), the
    picture `svg.ringattn-svg[data-step]` (hooks in `ring_attention_svg`), the text
    `pre.ringattn-step-text`.
    """
    from helpers.viewers import RingAttentionViewer

    plan = ring_attention_plan(world_size, layout, causal, seq_len)
    steps = [
        {
            "step": s,
            "plan": plan[s],
            "svg": ring_attention_svg(plan, s, layout, seq_len),
            "text": ring_attention_step_text(plan, s, layout, causal, seq_len),
        }
        for s in range(world_size)
    ]
    return RingAttentionViewer(steps, text=steps[0]["text"])


# -- edit and rerun: section 3's run and check with the reader's copy of ring_attention ----------

TOLERANCE = 2e-6  # section 3's: float32 rounding of the blockwise merge, measured below 1e-6


def ring_worker_with(
    rank: int, world_size: int, attention: Any, cases: Sequence[dict[str, Any]]
) -> list[dict]:
    """`ring_worker` itself, with `attention` (a notebook's copy of `ring_attention`, same
    signature and return) called in `ring_attention`'s place: the same shards, loss and results.
    """
    global ring_attention
    own = ring_attention
    ring_attention = attention  # ring_worker looks the name up in this module when it runs
    try:
        return ring_worker(rank, world_size, cases)
    finally:
        ring_attention = own


def one_process_errors(
    ring: dict[int, Sequence[list[dict]]], cases: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Section 3's comparison: per world size N and case, each of out, lse, dq, dk, dv merged
    from the ranks' shards (`merge_sequence`) minus one process's (`reference`, SDPA), largest
    absolute difference. `ring[N]` is a launch's per-rank results of `ring_worker(..., cases)`.
    """
    rows = []
    for n, per_rank in ring.items():
        for j, case in enumerate(cases):
            ref = reference(*make_qkv(), case["causal"])
            ref["lse"] = ref["lse"].unsqueeze(-1)  # (B, H, S, 1): split like q
            errs = {
                key: (
                    merge_sequence([torch.tensor(r[j][key]) for r in per_rank], case["layout"])
                    - ref[key]
                )
                .abs()
                .max()
                .item()
                for key in ("out", "lse", "dq", "dk", "dv")
            }
            rows.append({"n": n, "causal": case["causal"], "layout": case["layout"], **errs})
    return rows


def check_one_process(rows: Sequence[dict[str, Any]], tolerance: float = TOLERANCE) -> None:
    """Section 3's assert on `one_process_errors` rows: every error below `tolerance`, or an
    AssertionError naming the worst (N, case, tensor).
    """
    found = [
        (row[key], f"N={row['n']} causal={row['causal']} {row['layout']}: {key}")
        for row in rows
        for key in ("out", "lse", "dq", "dk", "dv")
    ]
    # a NaN counts as the worst: it compares False with everything, so max() would skip it
    worst, where = max(found, key=lambda e: math.inf if math.isnan(e[0]) else e[0])
    tol = f"{tolerance:.0e}".replace("e-0", "e-")  # 2e-6, as section 3 prints it
    assert worst < tolerance, (
        f"expected ring attention to equal SDPA within {tol}, found {worst:.2e} (worst at {where})"
    )
