"""Eager vs Inductor (torch.compile) on CPU: a pointwise chain and a small MLP training step,
plus the cold vs warm compile cost with the FX graph cache. Prints one JSON object per line.

Usage: python benchmarks/compile_speedup.py [--threads 1] [--repeats 15]

Method: eager and compiled run in alternation after a warm-up (so a busy neighbour slows both
alike) and the medians are compared. Compile cost is measured in fresh processes: "cold" with
an empty TORCHINDUCTOR_CACHE_DIR, "warm" in a second process reusing that directory.
Three Inductor compiles in all (chain, MLP forward+backward, cold probe) plus one cache load.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import tempfile
import time

import torch

from helpers.compile_tools import (
    compile_cost_in_subprocess,
    make_timing_mlp,
    mlp_loss,
    pointwise_chain,
    time_alternating,
)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def bench_pointwise(numel: int, repeats: int) -> dict:
    x = torch.randn(numel)
    compiled = torch.compile(pointwise_chain, backend="inductor")
    t0 = time.perf_counter()
    compiled(x)
    compile_s = time.perf_counter() - t0
    torch.testing.assert_close(compiled(x), pointwise_chain(x), rtol=1e-4, atol=1e-5)
    med = time_alternating(
        {"eager": lambda: pointwise_chain(x), "inductor": lambda: compiled(x)}, repeats=repeats
    )
    return {
        "bench": "pointwise_chain",
        "numel": numel,
        "eager_ms": round(med["eager"] * 1e3, 3),
        "inductor_ms": round(med["inductor"] * 1e3, 3),
        "speedup": round(med["eager"] / med["inductor"], 2),
        "first_call_s": round(compile_s, 2),
    }


def bench_mlp_step(batch: int, width: int, repeats: int) -> dict:
    model_eager = make_timing_mlp(width=width, depth=3, seed=0)
    model_comp = copy.deepcopy(model_eager)
    opt_eager = torch.optim.SGD(model_eager.parameters(), lr=1e-3)
    opt_comp = torch.optim.SGD(model_comp.parameters(), lr=1e-3)
    compiled_loss = torch.compile(mlp_loss, backend="inductor")
    x, y = torch.randn(batch, width), torch.randn(batch, 1)

    def step(model, opt, loss_fn):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    loss_c = step(model_comp, opt_comp, compiled_loss)
    compile_s = time.perf_counter() - t0
    loss_e = step(model_eager, opt_eager, mlp_loss)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-5)
    med = time_alternating(
        {
            "eager": lambda: step(model_eager, opt_eager, mlp_loss),
            "inductor": lambda: step(model_comp, opt_comp, compiled_loss),
        },
        repeats=repeats,
    )
    return {
        "bench": "mlp_train_step",
        "batch": batch,
        "width": width,
        "depth": 3,
        "eager_ms": round(med["eager"] * 1e3, 3),
        "inductor_ms": round(med["inductor"] * 1e3, 3),
        "speedup": round(med["eager"] / med["inductor"], 2),
        "first_call_s": round(compile_s, 2),
    }


def bench_compile_cache() -> dict:
    cache_dir = tempfile.mkdtemp(prefix="compile_speedup_cache_")
    try:
        cold = compile_cost_in_subprocess(cache_dir)
        warm = compile_cost_in_subprocess(cache_dir)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return {
        "bench": "compile_cold_vs_warm",
        "what": "pointwise_chain, new process each, importing torch not timed",
        "cold_s": round(cold["compile_s"], 2),
        "warm_s": round(warm["compile_s"], 2),
        "ratio": round(cold["compile_s"] / warm["compile_s"], 1),
        "cold_fxgraph_cache_miss": cold["fxgraph_cache_miss"],
        "warm_fxgraph_cache_hit": warm["fxgraph_cache_hit"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # this process's own compiles go to a throwaway cache, so they are cold too
    own_cache = tempfile.mkdtemp(prefix="compile_speedup_own_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = own_cache
    try:
        emit(
            {
                "bench": "environment",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "cpu_count": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
        emit(bench_pointwise(numel=1 << 22, repeats=args.repeats))
        emit(bench_mlp_step(batch=256, width=256, repeats=args.repeats))
        emit(bench_compile_cache())
    finally:
        shutil.rmtree(own_cache, ignore_errors=True)


if __name__ == "__main__":
    main()
