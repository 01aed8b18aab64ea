"""DDP under torch.compile (DDPOptimizer's graph split) and the profiler's view of overlap.

Used by: notebook 14. Workers run under `helpers.launch` (gloo on CPU; with one GPU per rank
launch picks NCCL and the workers put rank r on cuda:r, untested here). The profile analysis reads
gloo's event names and CPU-side events only: on GPUs it would time launches, not the NCCL
kernels. Compiles use backend="aot_eager" (no Inductor code generation). Workers return plain
Python data, not tensors.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.launch import current_device

__all__ = [
    "WIDTH",
    "DEPTH",
    "Net",
    "make_model",
    "param_mib",
    "batch",
    "optimize_ddp_mode_readers",
    "optimize_ddp_mode_calls",
    "compile_worker",
    "profile_worker",
    "is_allreduce",
    "interval_union",
    "overlap_us",
    "trace_names",
    "is_gradient_compute",
    "analyze_profile",
    "timeline",
    "show_timeline",
]

WIDTH, DEPTH = 512, 6  # six 512x512 layers: 1 MiB of fp32 weights each, about 6 MiB in all


class Net(nn.Module):
    """DEPTH Linear(WIDTH, WIDTH) layers with ReLU between them.

    A model class of our own, not nn.Sequential: Dynamo does not start a frame whose code lives
    in torch/nn (MOD_SKIPLIST; torch/nn/attention/flex_attention.py, on LEGACY_MOD_INLINELIST,
    and the forward of a module with hooks aside), though it inlines such code called from a
    frame it traces (MOD_INLINELIST). Under a compiled DDP, tracing of DDP.forward breaks at its
    C++ logger, and that break, inside an inlined call, ends the inlining (nested_graph_breaks
    is off): DDP runs uncompiled, and the model's forward then starts a frame of its own: an
    nn.Sequential's is skipped, Net's compiled.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, WIDTH) -> (B, WIDTH)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < DEPTH - 1:
                x = torch.relu(x)
        return x


def make_model(seed: int = 0, kind: str = "net") -> nn.Module:
    """The same model on every rank (seeded): our Net, or (kind="sequential") the same layers
    as an nn.Sequential."""
    torch.manual_seed(seed)
    net = Net()
    if kind == "sequential":
        layers: list[nn.Module] = []
        for i, layer in enumerate(net.layers):
            layers += [layer] if i == DEPTH - 1 else [layer, nn.ReLU()]
        return nn.Sequential(*layers)
    return net


def param_mib(model: nn.Module) -> float:
    """Parameter bytes of `model` in MiB (what DDP's buckets are filled with)."""
    return sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20


def batch(rank: int, step: int, size: int = 16) -> torch.Tensor:
    """Rank `rank`'s input at `step`, shape (size, WIDTH)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, WIDTH, generator=g)


def _record_ddp_optimizer(log: list[dict[str, Any]]) -> Any:
    """Wrap DDPOptimizer.compile_fn (in this worker process only) to record its buckets."""
    from torch._dynamo.backends.distributed import DDPOptimizer

    original = DDPOptimizer.compile_fn

    def compile_fn(self: Any, gm: Any, example_inputs: Any, **kw: Any) -> Any:
        out = original(self, gm, example_inputs, **kw)
        log.append(
            {
                "bucket_bytes_cap": self.bucket_bytes_cap,
                "first_bucket_cap": self.first_bucket_cap,
                "bucket_bytes": [b.size for b in self.buckets],
                "bucket_params": [list(b.params) for b in self.buckets],
            }
        )
        return out

    DDPOptimizer.compile_fn = compile_fn
    return original


def optimize_ddp_mode_readers() -> dict[str, list[str]]:
    """Where the installed torch acts on `optimize_ddp`: {file: modes compared}, package-wide.

    Every `.py` file under torch/ is searched for `get_optimize_ddp_mode() == "<mode>"`, the only
    way the mode is read (the function itself maps True/False to "ddp_optimizer" and
    "no_optimization" and validates the string against `_ddp_optimization_mode`). A mode that no
    file compares against changes nothing: it behaves as "no_optimization". On 2.13.0, 2.14.1 and
    2.15.0: DDP's constructor compares "python_reducer", CatchErrorsWrapper "ddp_optimizer".
    """
    import re

    root = Path(torch.__file__).parent
    pattern = re.compile(r"get_optimize_ddp_mode\(\)\s*==\s*[\"']([a-z_]+)[\"']")
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "get_optimize_ddp_mode" in text:
            modes = sorted(set(pattern.findall(text)))
            if modes:
                found[path.relative_to(root.parent).as_posix()] = modes
    return found


def optimize_ddp_mode_calls() -> dict[str, int]:
    """Every call of `get_optimize_ddp_mode(` under torch/ (its definition left out), per file.

    If each call is one of the `==` comparisons `optimize_ddp_mode_readers` finds, nothing else
    reads the mode (a `!=`, an `in (...)` or a stored result would show up here only).
    """
    import re

    root = Path(torch.__file__).parent
    call = re.compile(r"(?<!def )get_optimize_ddp_mode\(")
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        calls = len(call.findall(text))
        if calls:
            found[path.relative_to(root.parent).as_posix()] = calls
    return found


def _train_step(model: nn.Module, x: torch.Tensor) -> None:
    model(x).square().mean().backward()


def _counting_allreduce(state, bucket):  # noqa: ANN001 (DDP checks the real annotations)
    """DDP's default all-reduce (average), counting the buckets it is called for."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state.append(bucket.buffer().numel())
    return allreduce_hook(None, bucket)


def compile_worker(
    rank: int, world_size: int, settings: list[dict[str, Any]], steps: int = 2
) -> list[dict[str, Any]]:
    """Compile DDP(model) with each setting; report DDPOptimizer's split and DDP's buckets.

    A setting is {"bucket_cap_mb": float, "optimize_ddp": bool | str, "compiled_autograd": bool,
    "model": "net" | "sequential"} (the same layers as an nn.Sequential: section 2's skip rule).
    The backend counts the graphs it is handed (one per DDPOptimizer subgraph) and runs them with
    aot_eager; the gradients are compared with an uncompiled DDP model after `steps` steps.
    """
    from torch._dynamo.backends.debugging import aot_eager

    device = current_device()  # cuda:rank under NCCL (launch chose it), else the CPU
    log: list[dict[str, Any]] = []
    original = _record_ddp_optimizer(log)
    results = []
    try:
        for setting in settings:
            torch._dynamo.reset()
            log.clear()
            graphs: list[dict[str, int]] = []  # one entry per graph the backend compiles

            def backend(gm: Any, example_inputs: list[Any], graphs: list = graphs) -> Any:
                graphs.append(
                    {
                        "inputs": sum(1 for n in gm.graph.nodes if n.op == "placeholder"),
                        "all_reduce": sum(
                            1 for n in gm.graph.nodes if "all_reduce" in str(n.target)
                        ),
                    }
                )
                return aot_eager(gm, example_inputs)

            # bucket_cap_mb=None: DDP's default (25 MiB, with a 1 MiB first bucket)
            cap = setting.get("bucket_cap_mb")
            kw = {} if cap is None else {"bucket_cap_mb": cap}
            # the uncompiled reference: plain DDP; its comm hook runs once per bucket
            ref = DDP(make_model().to(device), **kw)
            calls: list[int] = []
            ref.register_comm_hook(calls, _counting_allreduce)
            with torch._dynamo.config.patch(
                optimize_ddp=setting.get("optimize_ddp", True),
                compiled_autograd=setting.get("compiled_autograd", False),
            ):
                ddp = DDP(make_model(kind=setting.get("model", "net")).to(device), **kw)
                if setting.get("compiled_autograd", False):
                    # compiled autograd traces a backward that runs inside the compiled call
                    compiled = torch.compile(_train_step, backend=backend)
                else:
                    compiled_ddp = torch.compile(ddp, backend=backend)

                    def compiled(m: nn.Module, x: torch.Tensor, c: Any = compiled_ddp) -> None:
                        c(x).square().mean().backward()

                for step in range(steps):
                    x = batch(rank, step).to(device)  # (16, WIDTH)
                    ddp.zero_grad()
                    ref.zero_grad()
                    calls.clear()
                    compiled(ddp, x)
                    _train_step(ref, x)
            max_diff = max(
                (a.grad - b.grad).abs().max().item()
                for a, b in zip(ddp.parameters(), ref.parameters(), strict=True)
            )
            results.append(
                {
                    **setting,
                    "graphs": graphs,
                    "ddp_buckets": len(calls),
                    "ddp_first_bucket_cap": ref._bucket_config.first_bucket_bytes_cap,
                    "ddp_bucket_cap": ref.bucket_bytes_cap,
                    "ddp_optimizer_calls": len(log),
                    "subgraphs": len(log[-1]["bucket_bytes"]) if log else None,
                    "split": log[-1] if log else None,
                    "grad_max_diff": max_diff,
                }
            )
    finally:
        from torch._dynamo.backends.distributed import DDPOptimizer

        DDPOptimizer.compile_fn = original
    return results


# ---------------------------------------------------------------------------------------------
# Profiler: compute vs communication


def is_allreduce(name: str) -> bool:
    """True for the profiler's name of an all-reduce: gloo's (measured), NCCL's (untested)."""
    return name in ("gloo:all_reduce", "nccl:all_reduce")


def interval_union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping [start, end) intervals into a sorted disjoint list."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def overlap_us(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two interval sets."""
    a, b = interval_union(a), interval_union(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def trace_names(path: str | os.PathLike[str]) -> Counter[str]:
    """Count the event names in a Chrome trace JSON file (what Perfetto would show)."""
    with open(path) as f:
        data = json.load(f)
    return Counter(e.get("name", "") for e in data["traceEvents"])


_KEEP = ("backward:", "autograd::engine::evaluate_function", "DistributedDataParallel.forward")
LAUNCH = "c10d::allreduce_"  # the dispatcher op: where the backward's thread starts an all-reduce


def is_gradient_compute(name: str) -> bool:
    """An autograd node that computes gradients: evaluate_function, AccumulateGrad left out.

    AccumulateGrad only stores a parameter's gradient, and DDP's reducer hooks run inside it
    (copy into the bucket, and the all-reduce launch when the bucket is full).
    """
    return name.startswith("autograd::engine::evaluate_function") and "AccumulateGrad" not in name


def _events(prof: Any) -> list[dict[str, Any]]:
    """The events the analysis needs, as plain dicts (times in microseconds)."""
    return [
        {"name": e.name, "start": e.time_range.start, "end": e.time_range.end}
        for e in prof.events()
        if is_allreduce(e.name) or e.name == LAUNCH or e.name.startswith(_KEEP)
    ]


def profile_worker(
    rank: int, world_size: int, trace_dir: str, accum: int = 4, steps: int = 2
) -> dict[str, Any]:
    """Profile DDP training: `steps` steps of `accum` micro-batches, synced and with no_sync.

    Phase "sync": every micro-batch's backward all-reduces. Phase "no_sync": the first accum-1
    micro-batches run inside `ddp.no_sync()`, only the last one all-reduces. Each backward is
    wrapped in record_function("backward:<phase>:<step>:<micro-batch>"). Rank r writes its Chrome
    trace to trace_dir/rank<r>.json and returns the events the analysis needs.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    device = current_device()  # cuda:rank under NCCL (launch chose it), else the CPU
    # no comm hook: the reducer runs its built-in C++ all-reduce, as plain DDP does
    ddp = DDP(make_model().to(device), bucket_cap_mb=2)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    # Warm-up, each iteration profiled on its own to count its all-reduce launches (one per
    # bucket): DDP uses one bucket in the first iteration, then rebuilds.
    warmup_buckets = []
    for step in range(2):
        with profile(activities=activities) as warm:
            ddp(batch(rank, step).to(device)).square().mean().backward()
        warmup_buckets.append(sum(e.name == LAUNCH for e in warm.events()))
    buckets = warmup_buckets[-1]
    with profile(activities=activities) as prof:
        for phase in ("sync", "no_sync"):
            for step in range(steps):
                opt.zero_grad()
                for i in range(accum):
                    x = batch(rank, 10 * step + i).to(device)  # (16, WIDTH)
                    skip = phase == "no_sync" and i < accum - 1
                    with ddp.no_sync() if skip else contextlib.nullcontext():
                        loss = ddp(x).square().mean()
                        with record_function(f"backward:{phase}:{step}:{i}"):
                            loss.backward()
                opt.step()
    path = Path(trace_dir) / f"rank{rank}.json"
    prof.export_chrome_trace(str(path))
    return {
        "events": _events(prof),
        "trace": str(path),
        "buckets": buckets,
        "warmup_buckets": warmup_buckets,
        "comm_hook": ddp._get_ddp_logging_data().get("comm_hook"),  # None: the built-in one
        "accum": accum,
    }


def analyze_profile(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase: all-reduce counts, where they start, and their overlap with backward compute.

    "compute" is the union of the autograd engine's gradient-computing nodes (`evaluate_function`
    events other than AccumulateGrad, inside which DDP's hooks launch the all-reduces);
    "all-reduce" the union of gloo's all-reduce events as the profiler records them.
    "launched_early": per synced backward, how many all-reduces its thread started (`c10d::
    allreduce_`) before the backward's last gradient-computing node began, i.e. while backward
    still had gradients to compute: an order on one thread, not a timing.
    """
    events, accum = result["events"], result["accum"]
    spans = [e for e in events if e["name"].startswith("backward:")]
    out: dict[str, dict[str, Any]] = {}
    for phase in ("sync", "no_sync"):
        mine = [e for e in spans if e["name"].split(":")[1] == phase]
        lo, hi = min(e["start"] for e in mine), max(e["end"] for e in mine)
        synced = [e for e in mine if phase == "sync" or int(e["name"].split(":")[3]) == accum - 1]
        skipped = [e for e in mine if e not in synced]
        comm = [e for e in events if is_allreduce(e["name"]) and lo <= e["start"] <= hi]
        compute = [
            (e["start"], e["end"])
            for e in events
            if is_gradient_compute(e["name"]) and lo <= e["start"] <= hi
        ]

        def starts_in(e: dict[str, Any], group: list[dict[str, Any]]) -> bool:
            return any(b["start"] <= e["start"] <= b["end"] for b in group)

        def launched_early(b: dict[str, Any]) -> int:
            inside = [e for e in events if b["start"] <= e["start"] <= b["end"]]
            last = max(e["start"] for e in inside if is_gradient_compute(e["name"]))
            return sum(e["name"] == LAUNCH and e["start"] < last for e in inside)

        comm_spans = [(e["start"], e["end"]) for e in comm]
        comm_us = sum(e - s for s, e in interval_union(comm_spans))
        out[phase] = {
            "backward_calls": len(mine),
            "allreduces": len(comm),
            "in_synced_backward": sum(starts_in(e, synced) for e in comm),
            "in_skipped_backward": sum(starts_in(e, skipped) for e in comm),
            "launched_early": [launched_early(b) for b in synced],
            "allreduce_ms": comm_us / 1e3,
            "overlap_fraction": overlap_us(comm_spans, compute) / comm_us if comm_us else 0.0,
            "window_ms": (hi - lo) / 1e3,
        }
    return out


def timeline(result: dict[str, Any], phase: str, step: int = 0) -> dict[str, list]:
    """Bars (start_ms, width_ms) of one step of `phase`: forward, backward compute, all-reduce."""
    events = result["events"]
    mine = [e for e in events if e["name"].startswith(f"backward:{phase}:{step}:")]
    # the step starts at its first forward, just before its first backward
    fwd = [e for e in events if e["name"] == "DistributedDataParallel.forward"]
    first = min(e["start"] for e in mine)
    lo = max(e["start"] for e in fwd if e["start"] < first)
    hi = max(e["end"] for e in mine)

    def bars(pred: Any) -> list[tuple[float, float]]:
        spans = [(e["start"], e["end"]) for e in events if pred(e) and lo <= e["start"] <= hi]
        return [((s - lo) / 1e3, (e - s) / 1e3) for s, e in interval_union(spans)]

    return {
        "forward": bars(lambda e: e["name"] == "DistributedDataParallel.forward"),
        "backward": bars(lambda e: is_gradient_compute(e["name"])),
        "all-reduce": bars(lambda e: is_allreduce(e["name"])),
    }


def show_timeline(results: list[dict[str, Any]], step: int = 0) -> Any:
    """Draw forward / backward / all-reduce bars per rank for one step of each phase."""
    import matplotlib.pyplot as plt

    colors = {"forward": "tab:blue", "backward": "tab:green", "all-reduce": "tab:red"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 1.2 + 0.9 * len(results)), sharey=True)
    for ax, phase in zip(axes, ("sync", "no_sync"), strict=True):
        for rank, result in enumerate(results):
            for row, (kind, spans) in enumerate(timeline(result, phase, step).items()):
                y = rank * 4 + row
                ax.broken_barh(spans, (y, 0.8), color=colors[kind])
        ax.set_title(f"{phase}: one step of {results[0]['accum']} micro-batches")
        ax.set_xlabel("ms from the step's first forward")
    labels = [f"rank {r} {k}" for r in range(len(results)) for k in colors]
    ticks = [r * 4 + i + 0.4 for r in range(len(results)) for i in range(len(colors))]
    axes[0].set_yticks(ticks, labels)
    axes[0].invert_yaxis()
    fig.tight_layout()
    plt.show()
    return fig
