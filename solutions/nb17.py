"""Worked solutions to notebook 17's exercises (context and expert parallelism)."""

# 17.1 Contiguous split, S = 64, N = 8: blocks of S/N = 8 tokens, 64 score entries each. Rank r's
# queries need the blocks of ranks 0..r (later ones are skipped), the diagonal one computed in
# full and masked inside: (r + 1) x 64.
CAUSAL_WORK = [64, 128, 192, 256, 320, 384, 448, 512]

# 17.2 S = 32, N = 4, zig-zag: 2N = 8 chunks of 4 tokens; rank 1 holds chunk 1 (tokens 4-7) and
# chunk 2N-1-1 = 6 (tokens 24-27), in that order.
ZIGZAG_TOKENS = [4, 5, 6, 7, 24, 25, 26, 27]

# 17.3 What travels is K and V stacked, (2, B, H, S/N, D) = 2 x 1 x 8 x 1024 x 64 float32 values
# = 4 MiB (4,194,304 bytes), passed on N - 1 = 3 times in forward: 12,582,912 bytes.
RING_BYTES = 12_582_912

SOLUTIONS = {"17.1": CAUSAL_WORK, "17.2": ZIGZAG_TOKENS, "17.3": RING_BYTES}

WRONG = {
    "17.1": [
        (CAUSAL_WORK[::-1], "reversed"),
        ([512] * 8, "non-causal"),
        ([0, 64, 128, 192, 256, 320, 384, 448], "diagonal"),
        ([36, 100, 164, 228, 292, 356, 420, 484], "unmasked"),
        ([64, 128], "8 numbers"),
    ],
    "17.2": [
        ([24, 25, 26, 27, 4, 5, 6, 7], "order"),
        (list(range(8, 16)), "contiguous"),
        ([4, 5, 6, 7, 28, 29, 30, 31], "2N-1-r"),
        ("4-7, 24-27", "list"),
    ],
    "17.3": [
        (4 * 4_194_304, "N-1"),
        (6_291_456, "K and V"),
        (2 * 12_582_912, "forward only"),
        (4 * 12_582_912, "per rank"),
        ("12 MiB", "whole number"),
    ],
}

# 17.4 Uniform routing, no drops: each of the 4 exchanges (dispatch, combine, and the backward
# of each) moves k T = 8192 rows of h = 4096 bf16 values (8 KiB per row); (N-1)/N = 7/8 of them
# go to other ranks: 4 x 8192 x 4096 x 2 x 7/8 = 234,881,024 bytes (224 MiB) per layer and step.
EP_STEP_BYTES = 234_881_024
# 17.5 C = ceil(1.25 x 12 x 2 / 4) = ceil(7.5) = 8; expert 0 is every token's choice once: 12
# assignments, the first 8 kept (first choices before second choices), 4 dropped.
EP_CAPACITY = {"capacity": 8, "dropped": 4}
SOLUTIONS.update({"17.4": EP_STEP_BYTES, "17.5": EP_CAPACITY})
WRONG.update(
    {
        "17.4": [
            (268_435_456, "own split"),
            (117_440_512, "backward"),
            (58_720_256, "combine"),
            (469_762_048, "2 bytes"),
            ("224 MiB", "whole number"),
        ],
        "17.5": [
            ({"capacity": 7, "dropped": 5}, "rounded up"),
            ({"capacity": 4, "dropped": 8}, "k = 2"),
            ({"capacity": 8, "dropped": 0}, "keeps the first C"),
            ({"capacity": 8}, "dict"),
        ],
    }
)
