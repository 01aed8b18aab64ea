"""The causal mask's load imbalance in ring attention, in CPU time: contiguous against zig-zag.

Notebook 17 (section 4) counts the score entries each rank computes under a causal mask (asserted:
at N = 4, rank 3 of the contiguous split computes four times rank 0's, and the zig-zag split gives
every rank the same share) and shows one measurement of the time, without asserting it: a tenth
or two of a second of one rank's CPU time on a shared machine is too noisy for a test. This
script measures it the way the project measures time, in two parts.

The ranks: one launch per run (`helpers.context_parallel.ring_worker`, forward only, without
autograd), the two layouts interleaved `--repeats` times within the launch so both see the same
load; per rank and layout the least of its repeats of the main thread's CPU time in block
arithmetic (`time.thread_time` round `block_attention` and `merge_partial`: all of the rank's CPU
time when it has one intra-op thread, as `helpers.launch` gives each of 4 ranks on 2 cores;
"threads" says how many it had); the ratios computed within a run, from the score entries the
run counted (checked against `work_formula`):

- "contiguous_last_over_first": rank N-1's time over rank 0's under the contiguous split;
- "zigzag_max_over_contiguous_max": the zig-zag split's slowest rank over the contiguous
  split's slowest.

The blocks: why the times' ratios are not the counts', measured in this process on one thread,
the cases interleaved `--block-repeats` times, medians: one query block of S/N rows against one
key block of S/N under `block_attention`, "full" (every key before every query) and "diagonal"
(the block on the diagonal: half its entries masked to -inf), the mask alone on the diagonal block
(`arange`, compare, `masked_fill` into a new tensor, as `block_attention` does), and a full and a
diagonal block of S/2N (the zig-zag split's chunk size); per block the median in ms and per score
entry (a query-key pair, all heads together, as `work_formula` counts them), and the two ratios
the ranks' block loops would have if each block cost what it costs alone ("blocks_predict").

    python benchmarks/ring_balance.py                 # 4 ranks, 3 runs, S = 4096
    python benchmarks/ring_balance.py --runs 5 --seq 8192 --repeats 5

Prints one JSON object per run, one for the blocks, and a summary line (median of the per-run
ratios, with min-max). Compare ratios from the same run, not times across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from helpers import context_parallel as cp
from helpers.launch import launch


def block_costs(shape: tuple[int, ...], world_size: int, repeats: int) -> dict:
    """Per-block CPU time in this process on one thread: medians of interleaved repeats."""
    torch.set_num_threads(1)
    q, k, v = cp.make_qkv(shape)
    c = shape[2] // world_size  # the contiguous split's block: S/N
    h = c // 2  # the zig-zag split's chunk: S/2N
    cases = {
        "full": lambda: cp.block_attention(
            q[:, :, c : 2 * c], k[:, :, :c], v[:, :, :c], c, 0, True
        ),
        "diagonal": lambda: cp.block_attention(q[:, :, :c], k[:, :, :c], v[:, :, :c], 0, 0, True),
        "mask_only": lambda: _mask(q[:, :, :c], k[:, :, :c]),
        "full_half": lambda: cp.block_attention(
            q[:, :, h : 2 * h], k[:, :, :h], v[:, :, :h], h, 0, True
        ),
        "diagonal_half": lambda: cp.block_attention(
            q[:, :, :h], k[:, :, :h], v[:, :, :h], 0, 0, True
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            t0 = time.thread_time()
            run()
            times[name].append(time.thread_time() - t0)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    entries = {name: (h if name.endswith("_half") else c) ** 2 for name in cases}
    # the ranks' block loops rebuilt from these costs: contiguous rank r computes r full blocks
    # and its diagonal one; a zig-zag rank 2N-1 full half-width pairs and 2 diagonal ones
    n = world_size
    last = (n - 1) * med["full"] + med["diagonal"]
    zigzag = (2 * n - 1) * med["full_half"] + 2 * med["diagonal_half"]
    return {
        "blocks": f"one block of {c} queries x {c} keys (full_half: {h} x {h}), one thread",
        "ms": {name: round(t * 1e3, 2) for name, t in med.items()},
        "ns_per_entry": {name: round(t * 1e9 / entries[name], 2) for name, t in med.items()},
        "diagonal_over_full": round(med["diagonal"] / med["full"], 3),
        "mask_share_of_the_extra": round(med["mask_only"] / (med["diagonal"] - med["full"]), 3),
        "full_per_entry_over_half_per_entry": round(
            (med["full"] / (c * c)) / (med["full_half"] / (h * h)), 3
        ),
        "blocks_predict": {
            "contiguous_last_over_first": round(last / med["diagonal"], 3),
            "zigzag_max_over_contiguous_max": round(zigzag / last, 3),
        },
    }


def _mask(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """What `block_attention` adds on a block that straddles the diagonal: the mask, applied."""
    scores = torch.empty(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    qpos = torch.arange(0, q.shape[2]).unsqueeze(1)
    kpos = torch.arange(0, k.shape[2]).unsqueeze(0)
    return scores.masked_fill(kpos > qpos, float("-inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per layout")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096, help="sequence length S")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=32, help="head dimension")
    parser.add_argument("--block-repeats", type=int, default=9, help="interleaved, per block")
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
        cpu: dict[str, list[float]] = {lay: [] for lay in cp.LAYOUTS}
        counted: dict[str, list[int]] = {lay: [] for lay in cp.LAYOUTS}
        for r in per_rank:
            for lay in cp.LAYOUTS:
                mine = [w["work"] for c, w in zip(timed, r, strict=True) if c["layout"] == lay]
                cpu[lay].append(min(w["cpu_s"] for w in mine))
                counted[lay].append(mine[0]["scores"])
        for lay in cp.LAYOUTS:
            expected = cp.work_formula(n, lay, opts.seq)
            assert counted[lay] == expected, f"{lay}: counted {counted[lay]}, formula {expected}"
        first = cpu["contiguous"][-1] / cpu["contiguous"][0]
        most = max(cpu["zigzag"]) / max(cpu["contiguous"])
        firsts.append(first)
        maxima.append(most)
        row = {
            "run": run,
            "world_size": n,
            "seq": opts.seq,
            "threads": sorted({r[0]["threads"] for r in per_rank}),
            "cpu_s": {lay: [round(t, 4) for t in ts] for lay, ts in cpu.items()},
            "contiguous_last_over_first": round(first, 3),
            "zigzag_max_over_contiguous_max": round(most, 3),
            "counted_scores_say": {
                "contiguous_last_over_first": round(
                    counted["contiguous"][-1] / counted["contiguous"][0], 3
                ),
                "zigzag_max_over_contiguous_max": round(
                    max(counted["zigzag"]) / max(counted["contiguous"]), 3
                ),
            },
        }
        print(json.dumps(row), flush=True)
    print(json.dumps(block_costs(shape, n, opts.block_repeats)), flush=True)
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
