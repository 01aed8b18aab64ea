"""The causal mask's load imbalance in ring attention, in CPU time: contiguous against zig-zag.

Notebook 17 (section 4) counts the score entries each rank computes under a causal mask (asserted:
at N = 4, rank 3 of the contiguous split computes four times rank 0's, and the zig-zag split gives
every rank the same share) and shows one measurement of the time, without asserting it: a few
tenths of a second of one rank's CPU time on a shared machine are too noisy for a test. This script
measures it the way the project measures time: one launch per run (`helpers.context_parallel.
ring_worker`, forward only, without autograd), the two layouts interleaved `--repeats` times within
the launch so both see the same load, each rank's thread CPU time in block arithmetic, the least of
its repeats per layout, and the ratios computed within a run:

- "contiguous_last_over_first": rank N-1's time over rank 0's under the contiguous split (the
  score entries say N; a block's cost is not its score entries alone: the diagonal block also
  builds and applies the mask, and every block after a rank's first is merged into its running
  output, see `block_attention` and `ring_attention`);
- "zigzag_max_over_contiguous_max": the zig-zag split's slowest rank over the contiguous split's
  slowest (the score entries say 36/64 = 0.56 at N = 4).

    python benchmarks/ring_balance.py                 # 4 ranks, 3 runs, S = 4096
    python benchmarks/ring_balance.py --runs 5 --seq 8192 --repeats 5

Prints one JSON object per run and a summary line (median of the per-run ratios, with min-max).
Compare ratios from the same run, not times across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics

from helpers import context_parallel as cp
from helpers.launch import launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per layout")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096, help="sequence length S")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=32, help="head dimension")
    opts = parser.parse_args()
    n = opts.world_size
    shape = (1, opts.heads, opts.seq, opts.dim)
    timed = [
        dict(causal=True, layout=lay, shape=shape, values=False)
        for _ in range(opts.repeats)
        for lay in cp.LAYOUTS
    ]
    firsts, maxima = [], []
    for run in range(opts.runs):
        per_rank = launch(cp.ring_worker, n, args=(timed,), backend="gloo", timeout_s=600)
        cpu = {lay: [] for lay in cp.LAYOUTS}
        for r in per_rank:
            for lay in cp.LAYOUTS:
                pairs = zip(timed, r, strict=True)
                cpu[lay].append(min(w["work"]["cpu_s"] for c, w in pairs if c["layout"] == lay))
        scores = {lay: cp.work_formula(n, lay, opts.seq) for lay in cp.LAYOUTS}
        first = cpu["contiguous"][-1] / cpu["contiguous"][0]
        most = max(cpu["zigzag"]) / max(cpu["contiguous"])
        firsts.append(first)
        maxima.append(most)
        row = {
            "run": run,
            "world_size": n,
            "seq": opts.seq,
            "cpu_s": {lay: [round(t, 4) for t in ts] for lay, ts in cpu.items()},
            "contiguous_last_over_first": round(first, 3),
            "zigzag_max_over_contiguous_max": round(most, 3),
            "scores_say": {
                "contiguous_last_over_first": round(
                    scores["contiguous"][-1] / scores["contiguous"][0], 3
                ),
                "zigzag_max_over_contiguous_max": round(
                    max(scores["zigzag"]) / max(scores["contiguous"]), 3
                ),
            },
        }
        print(json.dumps(row), flush=True)
    summary = {"summary": "per-run ratios of the least CPU time per rank (median, min, max)"}
    for name, values in (
        ("contiguous_last_over_first", firsts),
        ("zigzag_max_over_contiguous_max", maxima),
    ):
        summary[name] = [
            round(statistics.median(values), 3),
            round(min(values), 3),
            round(max(values), 3),
        ]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
