"""Worked solutions to notebook 13's exercises (ZeRO from scratch and FSDP2)."""

import math

# 13.1 Bytes per rank in the ZeRO paper's mixed-precision accounting (section 1's quote of its
# section 3.1): fp16 weight 2 B + fp16 gradient 2 B + K = 12 B of fp32 optimizer state (a copy of
# the parameters, momentum, variance) per parameter. P = 7.5e9 on N = 64 (a multiple of 64):
#   ddp:   (2 + 2 + 12) P                   = 16P          = 120 GB
#   zero1: (2 + 2) P + 12 P / 64            = 4.1875P      = 31.40625 GB
#   zero2: 2 P + (2 + 12) P / 64            = 2.21875P     = 16.640625 GB
#   zero3: 16 P / 64                        = 0.25P        = 1.875 GB
# Section 1's fp32 count gives the same DDP and stage-3 figures but 61.4 and 31.9 GB for stages 1
# and 2: the weight and gradient they keep whole are 4 bytes each there.
P = 7_500_000_000
BYTES = {"ddp": 16 * P, "zero1": 4 * P + 12 * P / 64, "zero2": 2 * P + 14 * P / 64,
         "zero3": 16 * P / 64}  # fmt: skip


# 13.2 FSDP2's local shard shape. `_chunk_with_empty` calls torch.chunk(param, N, dim=0):
# chunks of ceil(rows / N) rows, which may be fewer than N chunks (6 rows on 4 ranks: 2 + 2 + 2),
# and appends empty ones so that every rank has a shard; `_get_dim_chunked_size` keeps the
# other dims for an empty one. Rank r's rows: what is left after r full chunks, at most one
# chunk, at least 0.
def shard_shape(global_shape, world_size, rank):
    """The shape of rank `rank`'s local (unpadded) FSDP2 shard of a parameter of `global_shape`."""
    rows = global_shape[0]
    chunk = math.ceil(rows / world_size)
    mine = max(0, min(chunk, rows - rank * chunk))
    return (mine, *global_shape[1:])


# 13.3 Stage 2's reduce-and-drop moved into a tensor hook (`p.register_hook`, reading the
# gradient it is called with). A leaf's tensor hook runs before AccumulateGrad writes .grad (it
# finds .grad None in the first backward, a post-accumulate-grad hook finds it set), and
# AccumulateGrad still runs after the hook returns: the hook reduces the gradient into the shard
# and sets p.grad = None, then AccumulateGrad stores that same gradient in .grad. After backward 1
# (gradient 1) the shard holds 1 and p.grad 1; backward 2 (gradient 2): the hook drops p.grad,
# adds 2 (shard 3), and AccumulateGrad stores 2. So the shard is right, but every rank still holds
# a full gradient: "full", for the reason "before". Not "after" (the hook finds .grad None at
# first), not "per_use" (a leaf used twice gets one call, with the summed gradient), not "ignored"
# (in the post-accumulate-grad hook the drop sticks: section 3's stage 2 keeps only the shard).
HOOKS = ("full", "before")

# 13.4 Gradient bytes per rank for make_model() at N = 16, (ZeRO-2, FSDP2).
# ZeRO-2, padded_numel per parameter: 300 -> 304, 30 -> 32, 900 -> 912, 30 -> 32, 180 -> 192,
# 6 -> 16; sum 1488. Each rank keeps 1488 / 16 = 93 fp32 elements: 372 bytes.
# FSDP2, dim 0 to a multiple of 16 rows: (30, 10) -> 32 x 10 = 320, (30,) -> 32,
# (30, 30) -> 960, (30,) -> 32, (6, 30) -> 16 x 30 = 480, (6,) -> 16; sum 1840, / 16 = 115
# elements: 460 bytes.
# Rank 14's local piece, chunks of ceil(rows / 16): the 30-row parameters are cut into 15 chunks
# of 2 rows, so rank 14 owns rows 28-29 of each: 20 + 2 + 60 + 2 = 84 elements; the 6-row ones
# into 6 chunks of 1 row, none for rank 14. 84 x 4 = 336 bytes (rank 15 owns 0 and stores 460).
GRAD_BYTES = (372, 460, 336)

SOLUTIONS = {"13.1": BYTES, "13.2": shard_shape, "13.3": HOOKS, "13.4": GRAD_BYTES}


# typical wrong answers (the hint must contain the words given)


def _by_heart(global_shape, world_size, rank):
    # the prompt's case, (6, 30) on 4 ranks, typed in
    return [(2, 30), (2, 30), (2, 30), (0, 30)][rank]


def _no_floor(global_shape, world_size, rank):
    # right on the prompt's case; a rank past the last row gets a negative count
    chunk = math.ceil(global_shape[0] / world_size)
    return (min(chunk, global_shape[0] - rank * chunk), *global_shape[1:])


def _even(global_shape, world_size, rank):
    rows = global_shape[0]
    base, extra = divmod(rows, world_size)
    return (base + (rank < extra), *global_shape[1:])


def _rows_only(global_shape, world_size, rank):
    return (math.ceil(global_shape[0] / world_size),)


def _library(global_shape, world_size, rank):
    from torch.distributed.fsdp._fully_shard import _fsdp_common

    full = torch.empty(global_shape)  # noqa: F821
    chunk = _fsdp_common._chunk_with_empty(full, world_size, dim=0)[rank]
    return tuple(_fsdp_common._get_dim_chunked_size(chunk, full.size(), dim=0))


def _floor(global_shape, world_size, rank):
    # chunks of rows // N: too few rows in all
    return (global_shape[0] // world_size, *global_shape[1:])


def _dtensor(global_shape, world_size, rank):
    # DTensor's placement code does the job
    from torch.distributed.tensor.placement_types import Shard

    return (Shard.local_shard_size_and_offset(global_shape[0], world_size, rank)[0],
            *global_shape[1:])  # fmt: skip


def _alias(global_shape, world_size, rank):
    # FSDP2's own chunking, reached through names the check cannot read
    import importlib

    import torch

    fc = importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_common")
    chunk = getattr(fc, "_chunk_with" + "_empty")
    return tuple(chunk(torch.empty(global_shape), world_size, dim=0)[rank].shape)


WRONG = {
    "13.1": [
        ({**BYTES, "ddp": 16 * P / 64}, "does not shard"),
        ({**BYTES, "zero3": 16 * P}, "stage 3 shards"),
        ({**BYTES, "zero1": 8 * P + 12 * P / 64}, "fp32 accounting"),
        ({**BYTES, "zero2": 4 * P + 16 * P / 64}, "fp32 accounting"),
        ({**BYTES, "zero1": 4 * P + 8 * P / 64}, "K = 12"),
        ({**BYTES, "zero2": BYTES["zero1"]}, "gradients too"),
        ({**BYTES, "zero2": 3 * P}, "keep whole"),
        ({**BYTES, "zero1": 31.4}, "not GB"),
        ({"ddp": 16 * P}, "keys"),
    ],
    "13.2": [
        (_by_heart, "a hidden case"),
        (_no_floor, "a hidden case"),
        (_even, "even split"),
        (_rows_only, "other dims"),
        (_library, "do not call"),
        (_dtensor, "do not call"),
        (_alias, "do not call"),
        (_floor, "cover every row"),
        ([(2, 30), (2, 30), (2, 30), (0, 30)], "give a function"),
    ],
    "13.3": [
        (("same", "after"), "first backward"),
        (("same", "after"), "after a tensor hook returns"),
        (("same", "before"), "after a tensor hook returns"),
        (("full", "after"), "first backward"),
        (("full", "ignored"), "not ignored"),
        (("twice", "per_use"), "count the calls"),
        (("lost", "before"), "nothing removes"),
        (("twice", "before"), "reaches the shard once"),
        (("full", "because"), "not a reason key"),
        (("kept", "before"), "not an outcome key"),
        ("full", "pair"),
    ],
    "13.4": [
        ((361.5, 460, 336), "padded with zeros"),
        ((5784, 460, 336), "full gradient"),
        ((364, 460, 336), "on its own"),
        ((372, 372, 336), "dim 0"),
        ((372, 361.5, 336), "buffer"),
        ((372, 398, 336), "depends on N"),
        ((363, 398, 336), "depends on N"),
        ((372, 7360, 336), "whole padded"),
        ((372, 460, 460), "unpadded"),
        ((372, 460, 361.5), "uneven"),
        ((372, 460, 0), "which rows"),
        ((372, 460), "triple"),
    ],
}
