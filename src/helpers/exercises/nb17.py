"""Judges for notebook 17 (context and expert parallelism): the merge, causal work, ring bytes, MoE.

17.1 is code: the reader's `merge(out_a, lse_a, out_b, lse_b)` is called in-process on the shown
case (a query chunk of `cp.make_qkv` against two causal key blocks) and on hidden ones, and compared
with full attention over both blocks (`F.scaled_dot_product_attention`, and `torch.logsumexp` of
the masked scores for the LSE; a row that sees no key at all has output 0 and LSE -inf). The
other truths come from `helpers.context_parallel` (the skip rule `block_skipped`, counted by
enumeration over a split the notebook does not build, for 17.2; the shape of the tensor
`ring_attention` shifts for 17.3) and `helpers.expert_parallel` (17.4, 17.5). No judge launches
processes.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
import torch.nn.functional as F

from helpers import context_parallel as cp
from helpers import expert_parallel as ep
from helpers.exercises import N_, Hint, as_int, called_names, exercise, tr, watching

WORK_S, WORK_N = 64, 8  # 17.2
RING_B, RING_H, RING_S, RING_D, RING_N, RING_BYTES = 1, 8, 4096, 64, 4, 4  # 17.3


# --- 17.1 the merge of two partial results ----------------------------------------------------


def _block(q, k, v, q_pos, k_pos):
    """(out, lse) of queries at positions `q_pos` on one key block at `k_pos`, causal; a row that
    sees no key of the block has lse -inf and an output row of zeros (the convention this check
    uses; torch's CPU flash kernel returns lse 0 there)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(k_pos.unsqueeze(0) > q_pos.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse.unsqueeze(-1)).nan_to_num(0.0)
    return weights @ v, lse


def _full(q, k, v, q_pos, k_pos):
    """Full attention of the queries on the keys (causal by position): SDPA's output, the LSE; a
    row that sees no key at all gets output 0 and LSE -inf (the contract of 17.1)."""
    allowed = k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    empty = ~allowed.any(-1)  # (S,): rows with no key, where SDPA's softmax is 0/0
    out = torch.where(empty.view(1, 1, -1, 1), torch.zeros_like(out), out)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return out, lse


def merge_cases() -> list[dict]:
    """The shown case and the hidden ones: name, parameters, the two blocks, the truth."""
    cases = []
    q, k, v = cp.make_qkv()  # (1, 2, 16, 8), the notebook's section 2
    qs = slice(4, 8)
    cases.append(
        dict(
            name="shown",
            params=N_("queries 4-7 of cp.make_qkv(), key blocks 0-3 and 4-7, causal"),
            q=q[:, :, qs],
            blocks=[(k[:, :, 0:4], v[:, :, 0:4], 0), (k[:, :, 4:8], v[:, :, 4:8], 4)],
            q_start=4,
            swap=False,
        )
    )
    q2, k2, v2 = cp.make_qkv((2, 3, 10, 5), seed=1)
    cases.append(
        dict(
            name="uneven",
            params=N_("shape (2, 3, 6, 5), key blocks of 3 and 7 tokens, no key after a query"),
            q=q2[:, :, 4:10],
            blocks=[(k2[:, :, 0:3], v2[:, :, 0:3], -10), (k2[:, :, 3:10], v2[:, :, 3:10], -7)],
            q_start=4,
            swap=False,
        )
    )
    q3, k3, v3 = cp.make_qkv((1, 2, 8, 4), seed=2)
    for swap in (False, True):
        cases.append(
            dict(
                name="masked row",
                params=N_(
                    "queries 0-3, key blocks at 0-1 and 2-5, causal: queries 0 and 1 see no key "
                    "of the block at 2-5 (its LSE is -inf there), passed as the first argument"
                )
                if swap
                else N_(
                    "queries 0-3, key blocks at 0-1 and 2-5, causal: queries 0 and 1 see no key "
                    "of the block at 2-5 (its LSE is -inf there), passed as the second argument"
                ),
                q=q3[:, :, 0:4],
                blocks=[(k3[:, :, 0:2], v3[:, :, 0:2], 0), (k3[:, :, 2:6], v3[:, :, 2:6], 2)],
                q_start=0,
                swap=swap,
            )
        )
    cases.append(
        dict(
            name="empty row",
            params=N_(
                "queries 0-3, key blocks at 2-3 and 4-5, causal: queries 0 and 1 see no key of "
                "either block (both LSEs are -inf there)"
            ),
            q=q3[:, :, 0:4],
            blocks=[(k3[:, :, 2:4], v3[:, :, 2:4], 2), (k3[:, :, 4:6], v3[:, :, 4:6], 4)],
            q_start=0,
            swap=False,
        )
    )
    q4, k4, v4 = cp.make_qkv((1, 2, 4, 8), seed=3)
    cases.append(
        dict(
            name="large LSE",
            params=N_(
                "queries scaled by 300, LSE values near 1000, past exp's limit in float32 (88) "
                "and in float64 (709)"
            ),
            q=q4 * 300.0,
            blocks=[(k4, v4, -8), (k4.flip(2) + 1.0, v4.flip(2), -4)],
            q_start=0,
            swap=False,
        )
    )
    for case in cases:
        q, start = case["q"], case["q_start"]
        q_pos = torch.arange(start, start + q.shape[2])
        parts = [
            _block(q, kb, vb, q_pos, torch.arange(ks, ks + kb.shape[2]))
            for kb, vb, ks in case["blocks"]
        ]
        if case["swap"]:
            parts = parts[::-1]
        case["parts"] = parts
        k_all = torch.cat([b[0] for b in case["blocks"]], 2)
        v_all = torch.cat([b[1] for b in case["blocks"]], 2)
        k_pos = torch.cat([torch.arange(ks, ks + kb.shape[2]) for kb, _, ks in case["blocks"]])
        case["truth"] = _full(q, k_all, v_all, q_pos, k_pos)
    return cases


_calls = called_names


_LIBRARY_MERGES = {"merge_partial", "_SDPAMerger", "_merge_one", "ring_attention", "reference"}


def _library_codes() -> set:
    """The code objects of the notebook's and torch's merges, to spot a call of one at run time
    (under another name too: an alias, getattr, functools.partial)."""
    codes = {cp.merge_partial.__code__, cp.ring_attention.__code__}
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention

        codes.add(_attention._SDPAMerger._merge_one.__code__)
    except (ImportError, AttributeError):
        pass
    return codes


def _run_watched(fn: Any, args: list, codes: set) -> tuple[Any, bool]:
    """fn(*args), and whether a Python function whose code is in `codes` ran during it."""
    with watching(codes) as hits:
        result = fn(*args)
    return result, bool(hits)


def _difference(got: Any, truth: tuple) -> tuple[str, float] | None:
    """None when (out, lse) equal the truth; else (which, how far off) or raise a Hint on misuse."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Hint(tr("return a pair (out, lse), found {found}", found=type(got).__name__))
    out, lse = got
    if not all(isinstance(t, torch.Tensor) for t in (out, lse)):
        raise Hint(tr("return two tensors, out and lse"))
    for what, t, ref in (("out", out, truth[0]), ("lse", lse, truth[1])):
        if tuple(t.shape) != tuple(ref.shape):
            raise Hint(
                tr(
                    "{what} has shape {shape}, expected {expected}: out is (B, H, S, D), lse "
                    "(B, H, S), as the inputs",
                    what=what,
                    shape=tuple(t.shape),
                    expected=tuple(ref.shape),
                )
            )
    for what, t, ref in (("out", out, truth[0]), ("lse", lse, truth[1])):
        t, ref = t.detach().double(), ref.double()
        empty = ref == -math.inf  # a row with no key at all: lse must be -inf there too
        if not torch.equal(t[empty], ref[empty]):
            return what, math.inf
        t, ref = t[~empty], ref[~empty]
        if not torch.isfinite(t).all():
            return what, math.inf
        if t.numel() == 0:
            continue
        err = (t - ref).abs().max().item()
        if err > 1e-4 * max(1.0, ref.abs().max().item()):
            return what, err
    return None


@exercise(
    "17.1",
    "The ring's merge of two partial results",
    look=N_(
        "section 2, 'What must travel': how each block's output is weighted by its share of "
        "the whole softmax denominator, and the cell that checks the blockwise result against SDPA"
    ),
    reveal=N_(
        "`cp.merge_partial(out_a, lse_a, out_b, lse_b)`, section 2's merge, with out 0 and lse "
        "-inf where both LSEs are -inf (it gives nan there); the check compares with SDPA over "
        "both blocks and `torch.logsumexp` of the masked scores"
    ),
)
def merge_exercise(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function merge(out_a, lse_a, out_b, lse_b)"))
    try:
        sig = inspect.signature(answer)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        try:
            sig.bind(1, 2, 3, 4)
        except TypeError:
            raise Hint(
                tr(
                    "the function takes (out_a, lse_a, out_b, lse_b); yours takes {params}",
                    params=list(sig.parameters),
                )
            ) from None
    refused = tr(
        "write the merge yourself from the two LSEs: a call of the notebook's or torch's merge "
        "checks theirs, not yours"
    )
    if _calls(answer) & _LIBRARY_MERGES:
        raise Hint(refused)
    codes = _library_codes()
    for case in merge_cases():
        (out_a, lse_a), (out_b, lse_b) = case["parts"]
        args = [t.clone() for t in (out_a, lse_a, out_b, lse_b)]
        got, library = _run_watched(answer, args, codes)
        if library:
            raise Hint(refused)
        off = _difference(got, case["truth"])
        if off is None:
            continue
        what, err = off
        if case["name"] == "shown":
            if what == "lse":
                raise Hint(
                    tr(
                        "on the shown case your lse differs from the log-sum-exp of both blocks' "
                        "scores by {err:.2g}: the merged denominator is the sum of the two "
                        "denominators, and each lse is the log of one",
                        err=err,
                    )
                )
            raise Hint(
                tr(
                    "on the shown case your out differs from full attention by {err:.2g}: each "
                    "block's output is normalised by its own denominator; weigh it by its share "
                    "of the whole one",
                    err=err,
                )
            )
        how = (
            tr("is not finite (inf or nan)")
            if err == math.inf
            else tr("differs from full attention by {err:.2g}", err=err)
        )
        advice = {
            "uneven": tr(
                "nothing may assume the shown case's sizes (B, H, S, D or the blocks' lengths)"
            ),
            "masked row": tr(
                "a row that saw no key of a block has lse -inf there: its weight must come out "
                "0, whichever argument the block is, and the merged lse is then the other "
                "block's (logaddexp(-inf, x) = x)"
            ),
            "empty row": tr(
                "a row that saw no key of either block has no softmax at all: the function's "
                "contract says out 0 and lse -inf there; what is exp(-inf - (-inf))?"
            ),
            "large LSE": tr(
                "exp of an LSE near 1000 overflows float32 and float64 alike: work with "
                "differences of LSEs, never exp(lse) alone"
            ),
        }[case["name"]]
        raise Hint(
            tr(
                "right on the shown case, but on a hidden case ({params}) your {what} {how}; "
                "{advice}",
                params=tr(case["params"]),
                what=what,
                how=how,
                advice=advice,
            )
        )
    return tr(
        "your merge equals full attention over both blocks (SDPA's output and the LSE of all the "
        "scores) on the shown case and on blocks of uneven sizes, rows that saw no key of a block "
        "(either argument) or of either block (out 0, lse -inf) and LSEs near 1000: with L = "
        "logaddexp(lse_a, lse_b), out = exp(lse_a - L) out_a + exp(lse_b - L) out_b, and lse = "
        "L, where L is finite"
    )


# --- 17.2 causal work --------------------------------------------------------------------------


def shifted_chunks(seq_len: int, world_size: int, rank: int) -> list[tuple[int, int]]:
    """17.2's split: 2N equal chunks, rank r holding chunks r and N + r (no mirror)."""
    h = seq_len // (2 * world_size)
    return [(rank * h, h), ((world_size + rank) * h, h)]


def causal_work(seq_len: int, world_size: int, chunks: Any) -> list[int]:
    """Score entries per rank under a causal mask, enumerated with ring_attention's skip rule
    (`cp.block_skipped`) over every (query chunk, key chunk) pair; `chunks(rank)` is a rank's."""
    work = []
    for rank in range(world_size):
        total = 0
        for qs, qn in chunks(rank):
            for owner in range(world_size):
                for ks, kn in chunks(owner):
                    if not cp.block_skipped(qs, qn, ks, True):
                        total += qn * kn
        work.append(total)
    return work


def _int_list(answer: Any, length: int, what: str) -> list[int]:
    if not isinstance(answer, (list, tuple)) or any(as_int(a) is None for a in answer):
        raise Hint(tr("give a list of whole numbers, {what}", what=what))
    if len(answer) != length:
        raise Hint(tr("give {n} numbers, {what}", n=length, what=what))
    return [as_int(a) for a in answer]


@exercise(
    "17.2",
    "Causal work per rank when the second chunk is not the mirror",
    look=N_(
        "section 4: which blocks a causal rank skips, and why the zig-zag split pairs chunk r "
        "with its mirror 2N-1-r"
    ),
    reveal=N_(
        "`cp.block_skipped(qs, 4, ks, True)` for each of rank r's chunks, qs in (4r, 4(8 + r)), "
        "against every key chunk ks = 0, 4, ..., 60: 16 entries per pair not skipped"
    ),
)
def causal_work_exercise(answer: Any) -> str:
    if isinstance(answer, (tuple, list)) and len(answer) == 2 and isinstance(answer[0], list):
        raise Hint(tr("answer with one list: the work of each rank under this split"))
    got = _int_list(answer, WORK_N, tr("one per rank, rank 0 first"))
    truth = causal_work(WORK_S, WORK_N, lambda r: shifted_chunks(WORK_S, WORK_N, r))
    if got == truth:
        h = WORK_S // (2 * WORK_N)
        return tr(
            "rank r computes (r + 1) + (N + r + 1) = N + 2r + 2 chunk pairs of (S/2N)^2 = {h2} "
            "entries: {truth}, the last rank {ratio:.2f} times the mean. Taking the mirror 2N-1-r "
            "instead gives (r + 1) + (2N - r) = 2N + 1 pairs on every rank: the mirror, not the "
            "two chunks, is what balances.",
            h2=h * h,
            truth=truth,
            ratio=max(truth) / (sum(truth) / WORK_N),
        )
    h = WORK_S // (2 * WORK_N)
    zigzag = causal_work(WORK_S, WORK_N, lambda r: cp.chunks_of(WORK_S, WORK_N, r, "zigzag"))
    contiguous = causal_work(
        WORK_S, WORK_N, lambda r: cp.chunks_of(WORK_S, WORK_N, r, "contiguous")
    )
    pairs = [t // (h * h) for t in truth]
    if got == zigzag:
        raise Hint(
            tr(
                "that is the zig-zag split's work, where the second chunk is the mirror 2N-1-r; "
                "here rank r's second chunk is N + r"
            )
        )
    if got == contiguous:
        raise Hint(tr("rank r holds two chunks of S/2N tokens here, r and N + r, not one of S/N"))
    if got == truth[::-1]:
        raise Hint(tr("reversed: rank 0 holds the first chunks, which see the fewest keys"))
    if len(set(got)) == 1:
        raise Hint(
            tr(
                "does every rank do the same here? Count one rank's pairs: its head chunk's and "
                "its tail chunk's"
            )
        )
    if got == pairs:
        raise Hint(tr("those are chunk pairs: each is (S/2N)^2 score entries"))
    if got == [t - 2 * h * h for t in truth]:
        raise Hint(tr("count the diagonal pairs too: a diagonal block is computed in full"))
    raise Hint(
        tr(
            "cut S into 2N chunks of S/2N; a query chunk computes a key chunk unless the key "
            "chunk starts after its last query: count the pairs for each of rank r's two chunks"
        )
    )


# --- 17.3 ring bytes ---------------------------------------------------------------------------


@exercise(
    "17.3",
    "Bytes one rank sends round the ring in forward",
    look=N_(
        "section 3: the tensor `ring_attention` hands to `RingShift`, and how many steps shift it"
    ),
    reveal=N_("`(N - 1) * torch.stack([k, v]).nbytes` for k and v of one rank, (B, H, S/N, D)"),
)
def ring_bytes(answer: Any) -> str:
    a = as_int(answer)
    if a is None:
        raise Hint(tr("give a whole number of bytes"))
    kv = torch.empty(2, RING_B, RING_H, RING_S // RING_N, RING_D, dtype=torch.float32)
    block = kv.nelement() * kv.element_size()  # K and V, stacked: what one shift sends
    truth = (RING_N - 1) * block
    if a == truth:
        return tr(
            "N-1 = {n1} shifts of K and V stacked, (2, B, H, S/N, D) float32 = {block} bytes "
            "each: {truth} bytes (backward sends as much again, the gradients)",
            n1=RING_N - 1,
            block=block,
            truth=truth,
        )
    if a == RING_N * block:
        raise Hint(tr("the last block is used, not passed on: N-1 shifts, not N"))
    if a == truth // 2:
        raise Hint(tr("K and V both travel (stacked into one tensor)"))
    if a == 2 * truth:
        raise Hint(tr("forward only: backward's gradient shifts are not asked for"))
    if a == (RING_N - 1) * block * RING_N:
        raise Hint(tr("per rank, not for all ranks together"))
    if a == (RING_N - 1) * block // RING_N:
        raise Hint(tr("a block is S/N tokens of K and of V: do not divide by N twice"))
    raise Hint(tr("what moves per shift: K and V of S/N tokens, B x H x D each, 4 bytes a value"))


# --- 17.4, 17.5 expert parallelism ---------------------------------------------------------------

EP_TOKENS, EP_K, EP_HIDDEN, EP_RANKS, EP_BYTES = 4096, 2, 4096, 8, 2  # 17.4
EP_LOCAL = 0.25  # 17.4: the share of a rank's assignments that go to experts on the rank itself
CAP_LARGE = (4096, 2, 64)  # 17.5: a second layer, (T, k, E)


def ep_bytes_truth() -> int:
    """17.4: the four exchanges of section 8's formula, with the off-rank share 1 - EP_LOCAL in
    place of the uniform router's (N-1)/N."""
    uniform = ep.balanced_bytes_estimate(EP_TOKENS, EP_K, EP_HIDDEN, EP_RANKS, EP_BYTES)
    every_row = uniform * EP_RANKS / (EP_RANKS - 1)  # all k T rows, 4 exchanges
    return round(every_row * (1 - EP_LOCAL))


@exercise(
    "17.4",
    "Bytes an expert-parallel step sends when a quarter stays home",
    look=N_(
        "section 8's bytes paragraph: the four exchanges, and which rows stay on the rank; "
        "section 7 for how the layer sends a row per assignment"
    ),
    reveal=N_(
        "`ep.balanced_bytes_estimate(4096, 2, 4096, 8, 2)` (uniform: 7/8 of the rows leave) "
        "times (3/4) / (7/8)"
    ),
)
def ep_step_bytes(answer: Any) -> str:
    a = as_int(answer)
    truth = ep_bytes_truth()
    if a is None:
        raise Hint(tr("give a whole number of bytes"))
    if a == truth:
        return tr(
            "4 exchanges (dispatch, combine and their backwards) x k T rows x h x 2 bytes, "
            "3/4 of them to other ranks: {truth} bytes, about {mib:.0f} MiB per MoE layer; a "
            "uniform router would send (N-1)/N = 7/8 of them",
            truth=truth,
            mib=truth / 2**20,
        )
    every_row = round(truth / (1 - EP_LOCAL))
    uniform = ep.balanced_bytes_estimate(EP_TOKENS, EP_K, EP_HIDDEN, EP_RANKS, EP_BYTES)
    if a == round(uniform):
        raise Hint(
            tr(
                "that is the uniform router's (N-1)/N; here a quarter of the assignments stay "
                "on the rank"
            )
        )
    if a == every_row:
        raise Hint(tr("a row for an expert on the rank itself never leaves it"))
    if a == round(every_row * EP_LOCAL):
        raise Hint(tr("count the rows that leave the rank, not those that stay"))
    if a == truth // 2:
        raise Hint(
            tr(
                "backward exchanges as much again: the gradients of the dispatched and the "
                "combined rows go back the other way"
            )
        )
    if a == truth // 4:
        raise Hint(tr("count the combine too (results go back), and the backward of both"))
    if a == truth * 2:
        raise Hint(tr("bf16 is 2 bytes per value, not 4"))
    raise Hint(tr("work it out per exchange: rows sent off-rank x h x bytes per value"))


def smallest_factor(tokens: int, k: int, experts: int) -> float:
    """The smallest capacity factor, in steps of 0.25, at which `ep.capacity` keeps all `tokens`
    assignments an expert gets when every token picks it."""
    f = 0.25
    while ep.capacity(tokens, k, experts, f) < tokens:
        f += 0.25
    return f


def _factor(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        try:
            x = float(x)
        except (TypeError, ValueError):
            return None
    return float(x) if math.isfinite(float(x)) else None


@exercise(
    "17.5",
    "The capacity factor that drops nothing",
    look=N_(
        "section 8: the formula for C from the Switch Transformer and GShard, and the lines "
        "of `ep.route` that keep an assignment"
    ),
    reveal=N_(
        "`math.ceil(f * 12 * 2 / 4)` for f = 0.25, 0.5, ... until it reaches 12, and "
        "`math.ceil(f * 4096 * 2 / 64)` until it reaches 4096"
    ),
)
def ep_capacity(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("answer with a pair of factors: (this layer, the layer with E = 64)"))
    got = [_factor(x) for x in answer]
    if None in got:
        raise Hint(tr("a capacity factor is a number, e.g. 1.25"))
    T, k, E = ep.TOKENS, ep.TOP_K, ep.EXPERTS
    truth = [smallest_factor(T, k, E), smallest_factor(*CAP_LARGE)]
    if got == truth:
        return tr(
            "an expert every token picks receives T assignments; C = ceil(f x T k / E) reaches T "
            "first at f = {f1} here (f = 1.75 gives ceil(10.5) = 11) and at f = {f2} with E = 64: "
            "E/k, the largest imbalance a top-k router can make",
            f1=truth[0],
            f2=truth[1],
        )
    for i, (g, t, ee) in enumerate(zip(got, truth, (E, CAP_LARGE[2]), strict=True)):
        if g == t:
            continue
        which = tr("this layer's") if i == 0 else tr("the E = 64 layer's")
        if g == ee:
            raise Hint(
                tr(
                    "{which} factor: each token makes k = 2 assignments, so T k / E is the "
                    "average an expert gets",
                    which=which,
                )
            )
        if g < t:
            raise Hint(
                tr(
                    "{which} factor is too small: at it C is below the T assignments an expert "
                    "every token picks receives",
                    which=which,
                )
            )
        raise Hint(
            tr(
                "{which} factor keeps everything, but a smaller step of 0.25 does too: solve "
                "C >= T for the factor, with C rounded up",
                which=which,
            )
        )
    raise Hint(tr("solve C >= T for the factor"))
