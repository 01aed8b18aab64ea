"""Worked solutions to notebook 17's exercises (context and expert parallelism)."""

import torch


# 17.1 The online softmax step (section 2). Each block's out is normalised by its own softmax
# denominator exp(lse_i); the merged denominator is exp(lse_a) + exp(lse_b) = exp(L) with
# L = logaddexp(lse_a, lse_b), computed without forming exp(lse) (which overflows float32 past
# about 88, float64 past about 709). Each out is weighted by its share exp(lse_i - L): a block a
# row saw no key of has lse -inf there and weight exp(-inf) = 0, whichever argument it is. A row
# that saw no key of either block has L = -inf, and exp(-inf - (-inf)) is nan: measure the
# weights from 0 there instead, which makes both weights exp(-inf) = 0 and out 0.
def merge(out_a, lse_a, out_b, lse_b):
    """(out, lse) of attention over both key blocks, from each block's (out, lse)."""
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    out = (
        torch.exp(lse_a - ref).unsqueeze(-1) * out_a + torch.exp(lse_b - ref).unsqueeze(-1) * out_b
    )
    return out, lse


def merge_section_2(out_a, lse_a, out_b, lse_b):
    """Section 2's printed merge, copied: nan on a row that saw no key of either block."""
    new_lse = torch.logaddexp(lse_a, lse_b)
    out = (
        torch.exp(lse_a - new_lse).unsqueeze(-1) * out_a
        + torch.exp(lse_b - new_lse).unsqueeze(-1) * out_b
    )
    return out, new_lse


def merge_naive_float64(out_a, lse_a, out_b, lse_b):
    """exp(lse) in float64: finite for LSEs near 200, inf near 1000; nan on an empty row."""
    ea, eb = torch.exp(lse_a.double()), torch.exp(lse_b.double())
    out = (ea.unsqueeze(-1) * out_a + eb.unsqueeze(-1) * out_b) / (ea + eb).unsqueeze(-1)
    return out.float(), torch.log(ea + eb).float()


def merge_with_eps(out_a, lse_a, out_b, lse_b, eps=0.0):
    """The worked merge with an extra defaulted parameter: accepted."""
    out, lse = merge(out_a, lse_a, out_b, lse_b)
    return out + eps, lse


def merge_naive(out_a, lse_a, out_b, lse_b):
    """Right on paper, and on the shown case; exp(lse) overflows float32 on a hidden case."""
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)
    out = (ea.unsqueeze(-1) * out_a + eb.unsqueeze(-1) * out_b) / (ea + eb).unsqueeze(-1)
    return out, torch.log(ea + eb)


def merge_relative_to_a(out_a, lse_a, out_b, lse_b):
    """Stable against overflow, but measured from lse_a: a row with lse_a = -inf gives nan."""
    w = torch.exp(lse_b - lse_a)
    out = (out_a + w.unsqueeze(-1) * out_b) / (1 + w).unsqueeze(-1)
    return out, lse_a + torch.log1p(w)


def merge_mean(out_a, lse_a, out_b, lse_b):
    """Averages the two outputs: forgets each block's share of the denominator."""
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_lse_sum(out_a, lse_a, out_b, lse_b):
    """Weights right, but the LSE of a sum of denominators is not the sum of the LSEs."""
    out, _ = merge(out_a, lse_a, out_b, lse_b)
    return out, lse_a + lse_b


def merge_library(out_a, lse_a, out_b, lse_b):
    """Calls the notebook's merge instead of writing it."""
    from helpers import context_parallel as cp

    return cp.merge_partial(out_a, lse_a, out_b, lse_b)


def merge_library_renamed(out_a, lse_a, out_b, lse_b):
    """Calls the notebook's merge under a name the source does not show (refused at run time)."""
    from helpers import context_parallel as cp

    out, lse = getattr(cp, "merge_" + "partial")(out_a, lse_a, out_b, lse_b)
    return out.nan_to_num(0.0), lse


# 17.2 S = 64, N = 8: 2N = 16 chunks of 4 tokens, rank r holding chunks r and 8 + r. A causal
# query chunk computes every key chunk that does not start after its last query: chunk r computes
# key chunks 0..r (r + 1 pairs), chunk 8 + r key chunks 0..8 + r (9 + r pairs), the diagonal ones
# in full: 10 + 2r pairs of 4 x 4 = 16 entries, from 160 on rank 0 to 384 on rank 7 (1.41 times
# the mean of 272). The mirror 15 - r (zig-zag) would give 17 pairs on every rank.
SHIFTED_WORK = [160, 192, 224, 256, 288, 320, 352, 384]

# 17.3 What travels is K and V stacked, (2, B, H, S/N, D) = 2 x 1 x 8 x 1024 x 64 float32 values
# = 4 MiB (4,194,304 bytes), passed on N - 1 = 3 times in forward: 12,582,912 bytes.
RING_BYTES = 12_582_912

SOLUTIONS = {"17.1": merge, "17.2": SHIFTED_WORK, "17.3": RING_BYTES}

WRONG = {
    "17.1": [
        (merge_section_2, "a hidden case"),
        (merge_naive, "a hidden case"),
        (merge_naive_float64, "a hidden case"),
        (merge_relative_to_a, "a hidden case"),
        (merge_mean, "share"),
        (merge_lse_sum, "sum of the two denominators"),
        (merge_library, "yourself"),
        (merge_library_renamed, "yourself"),
        (lambda out_a, lse_a: (out_a, lse_a), "takes (out_a, lse_a, out_b, lse_b)"),
        (42, "function"),
    ],
    "17.2": [
        ([272] * 8, "zig-zag"),
        ([64, 128, 192, 256, 320, 384, 448, 512], "not one of S/N"),
        (SHIFTED_WORK[::-1], "reversed"),
        ([10, 12, 14, 16, 18, 20, 22, 24], "chunk pairs"),
        ([128, 160, 192, 224, 256, 288, 320, 352], "diagonal"),
        ([256] * 8, "every rank do the same"),
        (SHIFTED_WORK[:2], "8 numbers"),
        ((SHIFTED_WORK, [272] * 8), "one list"),
    ],
    "17.3": [
        (4 * 4_194_304, "N-1"),
        (6_291_456, "K and V"),
        (2 * 12_582_912, "forward only"),
        (4 * 12_582_912, "per rank"),
        ("12 MiB", "whole number"),
    ],
}

# 17.4 A quarter of each rank's assignments go to its own experts, so 3/4 of the k T = 8192 rows
# (h = 4096 bf16 values, 8 KiB each) leave the rank, in each of the 4 exchanges (dispatch,
# combine, and the backward of each): 4 x 8192 x 4096 x 2 x 3/4 = 201,326,592 bytes (192 MiB)
# per layer and step; a uniform router would send 7/8 (224 MiB).
EP_STEP_BYTES = 201_326_592
# 17.5 An expert every token picks receives T assignments; C = ceil(f T k / E) >= T needs
# f T k / E > T - 1. Here T k / E = 6: f = 1.75 gives ceil(10.5) = 11 < 12, f = 2.0 gives 12.
# With T = 4096, k = 2, E = 64: T k / E = 128, f = 31.75 gives 4064, f = 32.0 gives 4096. Both
# are E/k, the largest imbalance a top-k router can make.
EP_CAPACITY = (2.0, 32.0)
SOLUTIONS.update({"17.4": EP_STEP_BYTES, "17.5": EP_CAPACITY})
WRONG.update(
    {
        "17.4": [
            (234_881_024, "uniform"),
            (268_435_456, "never leaves"),
            (67_108_864, "not those that stay"),
            (100_663_296, "backward"),
            (50_331_648, "combine"),
            (402_653_184, "2 bytes"),
            ("192 MiB", "whole number"),
        ],
        "17.5": [
            ((1.75, 32.0), "too small"),
            ((4.0, 32.0), "k = 2"),
            ((2.0, 64.0), "k = 2"),
            ((2.5, 32.0), "smaller step"),
            (2.0, "pair of factors"),
            (("two", 32.0), "number"),
        ],
    }
)
