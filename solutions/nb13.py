"""Worked solutions to notebook 13's exercises (ZeRO from scratch and FSDP2)."""

# 13.1 Bytes per rank, 7e9 parameters, 8 ranks, fp32 + AdamW (`memory_formula`; 7e9 is a
# multiple of 8, so padded = numel = P):
#   ddp:   params 4P + grads 4P + optimizer 8P (exp_avg, exp_avg_sq)  = 16P       = 112 GB
#   zero1: 4P + 4P + 12P/8 (ZeRO's fp32 shard copy + 2 moments)       = 9.5P      = 66.5 GB
#   zero2: 4P + 4P/8 + 12P/8                                          = 6P        = 42 GB
#   fsdp2: (4P + 4P + 8P) / 8                                         = 2P        = 14 GB
# Only DDP does not fit in an 80 GB GPU, and that is before activations and buffers.
P = 7_000_000_000
BYTES = {"ddp": 16 * P, "zero1": 9.5 * P, "zero2": 6 * P, "fsdp2": 2 * P}

# 13.2 FSDP2's local shard of the last Linear's weight, shape (6, 30), on 4 ranks.
# `_chunk_with_empty` calls torch.chunk(param, 4, dim=0): chunks of ceil(6 / 4) = 2 rows, which
# gives only 3 chunks (2 + 2 + 2 = 6); it appends an empty one so that every rank has a shard.
# `_get_dim_chunked_size` keeps the other dims for the empty one: (0, 30). (The all-gather
# moves padded shards of chunks[0]'s size, (2, 30), from every rank.)
SHAPES = [(2, 30), (2, 30), (2, 30), (0, 30)]

# 13.3 What makes ZeRO-2's reduce-scatter run inside backward?
# In `ZeroAdamW.__init__`, stage 2 registers `self._reduce` on every parameter with
# `p.register_post_accumulate_grad_hook(...)`: autograd calls it once that parameter's .grad
# holds its accumulated gradient. `_reduce` reduce-scatters it and, stage 2, sets p.grad = None:
# backward never reads .grad again (it only writes it), so the full gradient can go at once.
HOOK = "register_post_accumulate_grad_hook"

# 13.4 ZeRO-2's gradient bytes per rank for make_model() at N = 8.
# padded_numel per parameter: 300 -> 304, 30 -> 32, 900 -> 904, 30 -> 32, 180 -> 184, 6 -> 8;
# sum 1464 (instead of 1446). Each rank keeps 1464 / 8 = 183 fp32 elements: 732 bytes.
GRAD_BYTES = 732

SOLUTIONS = {"13.1": BYTES, "13.2": SHAPES, "13.3": HOOK, "13.4": GRAD_BYTES}

WRONG = {
    "13.1": [
        ({**BYTES, "ddp": 2 * P}, "does not shard"),
        ({**BYTES, "fsdp2": 16 * P}, "FSDP2 shards"),
        ({**BYTES, "zero1": 9 * P}, "12 bytes"),
        ({**BYTES, "zero2": 9.5 * P}, "gradients too"),
        ({"ddp": 16 * P}, "keys"),
    ],
    "13.2": [
        ([(2, 30), (2, 30), (1, 30), (1, 30)], "tensor_split"),
        ([(2, 30), (2, 30), (2, 30)], "empty"),
        ([(2, 30)] * 4, "unpadded"),
        ([(6, 8), (6, 8), (6, 8), (6, 6)], "columns"),
    ],
    "13.3": [
        ("register_hook", "before it is accumulated"),
        ("_reduce", "registers"),
        ("reduce_scatter_single", "collective itself"),
    ],
    "13.4": [(723, "padding"), (5784, "full gradient"), (724, "on its own")],
}
