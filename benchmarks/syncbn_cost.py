"""What synchronised BatchNorm costs: DDP step time with plain BatchNorm2d and with SyncBN.

One launch of 2 ranks per run (`helpers.syncbn.syncbn_cost_worker`): the same small conv net
(`--layers` Conv-BatchNorm-ReLU blocks) is built twice, with plain BatchNorm2d and with
synchronised BN (nn.SyncBatchNorm on CUDA under NCCL, helpers.syncbn.CPUSyncBatchNorm
otherwise), and their training steps alternate step by step (which goes first alternates too),
so both see the same machine load. Per run and rank: the median step time of each; the ratio
sync/plain is computed within a run. Repeated `--runs` times; prints one JSON object per run and
a summary line (median of the per-run ratios, with min-max). Also reports the collectives one
step of each dispatches (synchronised BN adds one per layer in forward, one in backward).

    python benchmarks/syncbn_cost.py                  # 2 ranks, 3 runs of 30 steps
    python benchmarks/syncbn_cost.py --runs 5 --layers 8 --size 32

Timings on a shared machine are noisy: compare ratios from the same run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics

from helpers.launch import launch
from helpers.syncbn import syncbn_cost_worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per model and run")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8, help="examples per rank")
    parser.add_argument("--size", type=int, default=16, help="image height and width")
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4, help="BatchNorm layers")
    opts = parser.parse_args()
    args = (opts.steps, opts.batch, opts.size, opts.channels, opts.layers)
    ratios = []
    for run in range(opts.runs):
        result = launch(syncbn_cost_worker, opts.world_size, args, timeout_s=600)
        for rank, r in enumerate(result):
            plain = statistics.median(r["times"]["plain"])
            sync = statistics.median(r["times"]["sync"])
            ratios.append(sync / plain)
            row = {
                "run": run,
                "rank": rank,
                "backend": result.backend,
                "sync_class": r["sync_class"],
                "steps": opts.steps,
                "layers": opts.layers,
                "plain_ms": round(plain * 1e3, 2),
                "sync_ms": round(sync * 1e3, 2),
                "ratio": round(sync / plain, 3),
                "collectives": r["collectives"],
            }
            print(json.dumps(row), flush=True)
    summary = {
        "summary": "sync/plain step time, per run and rank",
        "median_ratio": round(statistics.median(ratios), 3),
        "min_ratio": round(min(ratios), 3),
        "max_ratio": round(max(ratios), 3),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
