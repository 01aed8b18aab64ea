"""Worked solutions to notebook 15's exercises (tensor and sequence parallelism)."""

# 15.1 Gradient placements under the sequence-parallel plan (section 7's output).
# ln (SequenceParallel): its parameters are Replicate(), but each rank normalised only its chunk
# of the sequence, so its gradient is one term of the sum over chunks: Partial(sum). The
# optimizer step has to all-reduce it (Megatron does that by hand for sequence parallelism).
# fc2.bias (RowwiseParallel, output Shard(0)): backward of the reduce-scatter is an all-gather,
# so every rank has the whole (s, b, h) output gradient and sums it to the same bias gradient:
# Replicate().
PLACEMENTS = {"fc2.bias": "Replicate()", "ln.weight": "Partial(sum)"}

# 15.2 The all-reduce at the end of a row-parallel layer: message = b·s·h·2 bytes (bfloat16)
# = 4·2048·4096·2 = 67,108,864 B. A ring all-reduce is a reduce-scatter then an all-gather, each
# sending (N-1)/N of the message from every rank: 2·7/8·67,108,864 = 117,440,512 B.
ROW_BYTES = 2 * 7 / 8 * 4 * 2048 * 4096 * 2

# 15.3 Korthikanti et al. (2022), s = 2048, b = 1, h = 12288, a = 96, t = 8; s·b·h = 25,165,824,
# 5·a·s/(h·t) = 5·96·2048/(12288·8) = 10 (one process: 34 + 80 = 114·s·b·h).
#   tp: s·b·h·(10 + 24/8 + 10) = 23·s·b·h      = 578,813,952 B (0.54 GiB)
#   sp: s·b·h·(34/8 + 10)      = 14.25·s·b·h   = 358,612,992 B (0.33 GiB)
SBH = 2048 * 1 * 12288
MEMORY = {"tp": 23 * SBH, "sp": 14.25 * SBH}

SOLUTIONS = {"15.1": PLACEMENTS, "15.2": ROW_BYTES, "15.3": MEMORY}

WRONG = {
    "15.1": [
        ({"fc2.bias": "Replicate()", "ln.weight": "Replicate()"}, "chunk of the sequence"),
        ({"fc2.bias": "Partial(sum)", "ln.weight": "Partial(sum)"}, "all-gather in backward"),
        ({"fc2.bias": "Replicate()", "ln.weight": "Shard(dim=0)"}, "not cut"),
        ({"ln.weight": "Partial(sum)"}, "give a dict"),
    ],
    "15.2": [
        (4 * 2048 * 4096 * 2, "message itself"),
        (7 / 8 * 4 * 2048 * 4096 * 2, "reduce-scatter"),
        (2 * ROW_BYTES, "2 bytes"),
        (4 * 2048 * 4096 * 2 / 8, "whole output"),
    ],
    "15.3": [
        ({"tp": 14.25 * SBH, "sp": 14.25 * SBH}, "stay on every rank"),
        ({"tp": 23 * SBH, "sp": 23 * SBH}, "34/t"),
        ({"tp": 114 * SBH, "sp": 14.25 * SBH}, "one process"),
        ({"tp": 13 * SBH, "sp": 14.25 * SBH}, "scores term"),
    ],
}
