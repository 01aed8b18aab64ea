"""Context parallelism (ring attention): the lesson.

The code the notebook teaches, in the order the notebook first shows it (what a definition calls may
come just before it). Every top-level definition here is shown by a notebook (`show_source`) or
called, anywhere in its body, by one that is, so the counting and timing that shown code does itself
stays here.

What the notebooks run without showing it (other workers, the counters' context managers, summaries,
pictures, the step viewer) is `harness.py` beside this file. This file's source imports no harness;
importing it through the package (`helpers.context_parallel`, which re-exports both) still loads the
harness. tests/test_code_map.py checks the order and these rules.

Used by: notebook 17.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

LAYOUTS = ("contiguous", "zigzag")
SHAPE = (1, 2, 16, 8)  # (B, H, S, D): S = 16 splits into 2N chunks for N = 2 and 4
TOLERANCE = 2e-6  # section 3's: float32 rounding of the blockwise merge, measured below 1e-6


# -- 17 · 1. The sequence, split over ranks -------------------------------------------------------


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


# -- 17 · 2. What must travel: attention one block at a time --------------------------------------


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


def block_skipped(q_start: int, q_len: int, k_start: int, causal: bool) -> bool:
    """Whether a causal mask hides a whole block: its first key comes after its last query."""
    return causal and k_start > q_start + q_len - 1


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


# -- 17 · 3. Ring attention from scratch ----------------------------------------------------------


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
    pairs it computed and skipped (what `ring_attention_plan` predicts) and "first_key", the first
    value of the key block it actually held (k[0, 0, 0, 0], read from the block itself, which the
    caller can compare with the named owner's shard) ("steps"). tie=False leaves out the weight-0
    tie at the end (the unit tests show the deadlock it prevents).
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


def make_qkv(shape: Sequence[int] = SHAPE, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """The same q, k, v (float32, `shape`) on every rank and in the reference (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g) for _ in range(3))


def split_sequence(x: torch.Tensor, world_size: int, rank: int, layout: str) -> torch.Tensor:
    """Rank `rank`'s part of x (B, H, S, D) along S: its chunks concatenated, (B, H, S/N, D)."""
    parts = [x.narrow(2, s, n) for s, n in chunks_of(x.shape[2], world_size, rank, layout)]
    return torch.cat(parts, dim=2)


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


def ring_owner(rank: int, step: int, world_size: int) -> int:
    """The rank whose key/value block `rank` holds at ring step `step`: (rank - step) mod N."""
    return (rank - step) % world_size


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


# -- 17 · 4. The causal mask's load imbalance, and the zig-zag split ------------------------------


def work_formula(world_size: int, layout: str, seq_len: int) -> list[int]:
    """Score entries each rank computes under a causal mask (skipped blocks cost nothing).

    contiguous: rank r computes r+1 blocks of (S/N)^2; zigzag: 2N+1 chunk pairs of (S/2N)^2.
    """
    if layout == "contiguous":
        c = seq_len // world_size
        return [(r + 1) * c * c for r in range(world_size)]
    c = seq_len // (2 * world_size)
    return [(2 * world_size + 1) * c * c for _ in range(world_size)]


# -- 17 · 5. The all-gather alternative, and its gradient pitfall ---------------------------------


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


# -- 17 · 6. PyTorch's `context_parallel` on CPU --------------------------------------------------


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
