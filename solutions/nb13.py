"""Worked solutions to notebook 13's exercises (ZeRO from scratch and FSDP2)."""

import math

# 13.1 Bytes per rank, 7e9 parameters, 8 ranks, fp32 + AdamW (section 1's accounting; 7e9 is a
# multiple of 8, so padded = numel = P):
#   ddp:   params 4P + grads 4P + optimizer 8P (exp_avg, exp_avg_sq)  = 16P       = 112 GB
#   zero1: 4P + 4P + 12P/8 (ZeRO's fp32 shard copy + 2 moments)       = 9.5P      = 66.5 GB
#   zero2: 4P + 4P/8 + 12P/8                                          = 6P        = 42 GB
#   fsdp2: (4P + 4P + 8P) / 8                                         = 2P        = 14 GB
# Only DDP does not fit in an 80 GB GPU, and that is before activations and buffers.
P = 7_000_000_000
BYTES = {"ddp": 16 * P, "zero1": 9.5 * P, "zero2": 6 * P, "fsdp2": 2 * P}


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


# 13.3 What w.grad holds when each hook runs. A register_hook hook receives the gradient before
# AccumulateGrad adds it to .grad; a post-accumulate-grad hook runs after. Backward 1 (gradient
# 1): .grad None before, 1.0 after. Backward 2 (gradient 2, no zero_grad): 1.0 before, 3.0 after.
# So ZeRO-2 reduces in the post-accumulate-grad hook: .grad is complete there and can be dropped.
HOOKS = {("hook", 1): None, ("post", 1): 1.0, ("hook", 2): 1.0, ("post", 2): 3.0}

# 13.4 Gradient bytes per rank for make_model() at N = 16, (ZeRO-2, FSDP2).
# ZeRO-2, padded_numel per parameter: 300 -> 304, 30 -> 32, 900 -> 912, 30 -> 32, 180 -> 192,
# 6 -> 16; sum 1488. Each rank keeps 1488 / 16 = 93 fp32 elements: 372 bytes.
# FSDP2, dim 0 to a multiple of 16 rows: (30, 10) -> 32 x 10 = 320, (30,) -> 32,
# (30, 30) -> 960, (30,) -> 32, (6, 30) -> 16 x 30 = 480, (6,) -> 16; sum 1840, / 16 = 115
# elements: 460 bytes.
GRAD_BYTES = (372, 460)

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
        ({**BYTES, "ddp": 2 * P}, "does not shard"),
        ({**BYTES, "fsdp2": 16 * P}, "FSDP2 shards"),
        ({**BYTES, "zero1": 9 * P}, "12 bytes"),
        ({**BYTES, "zero2": 9.5 * P}, "gradients too"),
        ({**BYTES, "zero2": 7 * P}, "keep whole"),
        ({**BYTES, "fsdp2": 2.5 * P}, "no extra fp32 copy"),
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
        ({("hook", 1): None, ("post", 1): None, ("hook", 2): 1.0, ("post", 2): 3.0}, "after"),
        ({("hook", 1): 1.0, ("post", 1): 1.0, ("hook", 2): 1.0, ("post", 2): 3.0}, "before"),
        ({("hook", 1): None, ("post", 1): 1.0, ("hook", 2): 1.0, ("post", 2): 2.0}, "adds"),
        ({("hook", 1): None, ("post", 1): 1.0, ("hook", 2): 2.0, ("post", 2): 3.0}, "not received"),
        ({("hook", 1): None, ("post", 1): 1.0}, "keys"),
    ],
    "13.4": [
        ((361.5, 460), "padded with zeros"),
        ((5784, 460), "full gradient"),
        ((364, 460), "on its own"),
        ((372, 372), "dim 0"),
        ((372, 361.5), "buffer"),
        ((372, 398), "depends on N"),
        ((363, 398), "depends on N"),
        ((372, 7360), "whole padded"),
        (372, "pair"),
    ],
}
