"""Ring all-reduce from scratch against the backend's own `dist.all_reduce`, side by side.

Both run on the SAME process group inside ONE launch per world size, alternating call by call
(ring, builtin, builtin, ring, ...) after a barrier, on float32 tensors, one intra-op thread per
rank. Each sample is the slowest rank's time for one call; we print medians.

Prints one JSON object per line and configuration:
    world_size, bytes, backend, gloo_s, ring_s (medians, seconds), ratio (ring_s / gloo_s),
    busbw_gbps (the ring's, as nccl-tests define it: algbw * 2(N-1)/N), gloo_busbw_gbps,
    algbw_gbps, repeats, threads, check
`gloo_s` is the builtin all-reduce of whatever backend launch chose ("backend" says which: on a
machine with enough GPUs that is NCCL).

    python benchmarks/allreduce.py                      # N = 2 and 4, 64 KiB .. 64 MiB
    python benchmarks/allreduce.py --world-sizes 4 --sizes-kib 16384 --repeats 21

Timings on a shared machine are noisy: compare ratios from the same run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from helpers.allreduce import busbw_gbps, timing_worker
from helpers.launch import launch

DEFAULT_SIZES_KIB = [64, 256, 1024, 4096, 16384, 65536]


def _repeats(nbytes: int, base: int) -> int:
    """Fewer samples for the big sizes, so a run stays within a couple of minutes."""
    if nbytes >= 64 << 20:
        return max(3, base // 4)
    if nbytes >= 16 << 20:
        return max(5, base // 2)
    return base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=DEFAULT_SIZES_KIB)
    parser.add_argument("--repeats", type=int, default=21, help="samples per small size")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument(
        "--check",
        action="store_true",
        help="time the ring with its shape/dtype agreement check (one tiny all_gather)",
    )
    args = parser.parse_args(argv)
    sizes = [kib * 1024 for kib in args.sizes_kib]
    repeats = [_repeats(s, args.repeats) for s in sizes]
    for world_size in args.world_sizes:
        results = launch(
            timing_worker,
            world_size,
            (sizes, ("ring", "builtin"), repeats, 2, args.threads, args.check),
            timeout_s=1800,
        )
        medians = results[0]["medians"]
        for k, nbytes in enumerate(sizes):
            ring_s, builtin_s = medians["ring"][k], medians["builtin"][k]
            row = {
                "world_size": world_size,
                "bytes": nbytes,
                "backend": results.backend,
                "gloo_s": builtin_s,
                "ring_s": ring_s,
                "ratio": round(ring_s / builtin_s, 3),
                "busbw_gbps": round(busbw_gbps(nbytes, ring_s, world_size), 3),
                "gloo_busbw_gbps": round(busbw_gbps(nbytes, builtin_s, world_size), 3),
                "algbw_gbps": round(nbytes / ring_s / 1e9, 3),
                "repeats": repeats[k],
                "threads": args.threads,
                "check": args.check,
            }
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
