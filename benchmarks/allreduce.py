"""Plain ring, pipelined ring and the backend's own all-reduce, side by side in one launch.

All run on the SAME process group inside ONE launch per world size and run, alternating call by
call (forward order, then reversed) after a barrier, on float32 tensors, one intra-op thread per
rank. Each sample is the slowest rank's time for one call; each run gives a median per
algorithm and size. The launch is repeated `--runs` times: we report the median of the per-run
medians with their min-max, and the ratios to the backend's all-reduce computed within each run
(median and min-max over runs). "pipelined" is the segment count with the lowest median of
medians among `--segments`. `gloo` is the builtin all-reduce of whatever backend launch chose
("backend" says which: on a machine with enough GPUs that is NCCL).

Prints one JSON object per line and (world size, size), then a text table on stderr.
With `--profile`, also each rank's mean time per call waiting, adding and posting inside the
pipelined ring at `--profile-mib` (`helpers.allreduce.profile_ring`).

    python benchmarks/allreduce.py                        # N = 2 and 4, 1 .. 64 MiB, 3 runs
    python benchmarks/allreduce.py --world-sizes 4 --sizes-mib 16 --runs 5 --profile

Timings on a shared machine are noisy: compare ratios from the same run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from helpers.allreduce import busbw_gbps, profile_worker, timing_worker
from helpers.launch import launch

DEFAULT_SIZES_MIB = [1, 4, 16, 64]


def _repeats(nbytes: int, base: int) -> int:
    """Fewer samples for the big sizes, so a run stays within a few minutes."""
    if nbytes >= 64 << 20:
        return max(3, base // 3)
    if nbytes >= 16 << 20:
        return max(5, base // 2)
    return base


def _spread(values: list[float], digits: int) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def _rows(world_size: int, sizes: list[int], runs: list[dict], segments: list[int]) -> list[dict]:
    rows = []
    for k, nbytes in enumerate(sizes):
        per_run = {name: [r["medians"][name][k] for r in runs] for name in runs[0]["medians"]}
        mom = {name: statistics.median(v) for name, v in per_run.items()}
        best = min(segments, key=lambda s: mom[f"pipelined:{s}"])
        gloo, ring, pipe = per_run["builtin"], per_run["ring"], per_run[f"pipelined:{best}"]
        rows.append(
            {
                "world_size": world_size,
                "bytes": nbytes,
                "runs": len(runs),
                "gloo_ms": _spread([t * 1e3 for t in gloo], 2),
                "ring_ms": _spread([t * 1e3 for t in ring], 2),
                "pipelined_ms": _spread([t * 1e3 for t in pipe], 2),
                "best_segments": best,
                "ring_over_gloo": _spread([a / b for a, b in zip(ring, gloo, strict=True)], 3),
                "pipelined_over_gloo": _spread([a / b for a, b in zip(pipe, gloo, strict=True)], 3),
                "pipelined_ms_by_segments": {
                    s: round(mom[f"pipelined:{s}"] * 1e3, 2) for s in segments
                },
                "gloo_busbw_gbps": round(busbw_gbps(nbytes, mom["builtin"], world_size), 3),
                "pipelined_busbw_gbps": round(
                    busbw_gbps(nbytes, mom[f"pipelined:{best}"], world_size), 3
                ),
            }
        )
    return rows


def _table(rows: list[dict]) -> str:
    lines = [
        " N   MiB   gloo ms (min-max)      ring/gloo (min-max)   pipelined/gloo (min-max)  K",
    ]
    for r in rows:
        g, a, b = r["gloo_ms"], r["ring_over_gloo"], r["pipelined_over_gloo"]
        lines.append(
            f"{r['world_size']:2d} {r['bytes'] >> 20:5d}  {g['median']:7.1f} "
            f"({g['min']:.1f}-{g['max']:.1f})".ljust(33)
            + f"{a['median']:.3f} ({a['min']:.3f}-{a['max']:.3f})   "
            + f"{b['median']:.3f} ({b['min']:.3f}-{b['max']:.3f})      {r['best_segments']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=DEFAULT_SIZES_MIB)
    parser.add_argument("--segments", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--runs", type=int, default=3, help="launches per world size")
    parser.add_argument("--repeats", type=int, default=15, help="samples per small size")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--profile", action="store_true", help="waits vs adds per rank")
    parser.add_argument("--profile-mib", type=int, default=16)
    args = parser.parse_args(argv)
    sizes = [mib << 20 for mib in args.sizes_mib]
    repeats = [_repeats(s, args.repeats) for s in sizes]
    names = ("builtin", "ring", *(f"pipelined:{s}" for s in args.segments))
    all_rows = []
    for world_size in args.world_sizes:
        runs = []
        for _ in range(args.runs):
            results = launch(
                timing_worker,
                world_size,
                (sizes, names, repeats, 2, args.threads, False),
                timeout_s=1800,
            )
            runs.append(results[0])
        for row in _rows(world_size, sizes, runs, args.segments):
            row.update(backend=results.backend, threads=args.threads, repeats=repeats)
            print(json.dumps(row), flush=True)
            all_rows.append(row)
        if args.profile:
            prof = launch(
                profile_worker,
                world_size,
                (args.profile_mib << 20, [f"pipelined:{s}" for s in args.segments], 5),
                timeout_s=1800,
            )
            for rank, per_alg in enumerate(prof):
                for name, secs in per_alg.items():
                    ms = {k.replace("_s", "_ms"): round(v * 1e3, 2) for k, v in secs.items()}
                    line = {"profile": name, "world_size": world_size, "rank": rank, **ms}
                    print(json.dumps(line), flush=True)
    print(_table(all_rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
