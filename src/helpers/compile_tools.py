"""Plumbing for reading torch.compile from the inside: bytecode, guards, AOT graphs, Inductor.

Used by: notebooks 01 (bytecode capture, `graph_ops`), 02 (Dynamo bytecode, guards, graph
breaks), 03 (AOTAutograd and Inductor) and 18 (`generated_kernels`), benchmarks/compile_speedup.py,
and `helpers.tracing` (`graph_ops`). The timings assume the CPU:
every tensor here is created on the CPU, so a GPU on the machine is simply not used.

- `capture_bytecode()` records the original and the transformed code object of every frame
  Dynamo converts, through Dynamo's own hook (`convert_frame.register_bytecode_hook`);
  `dis_text` prints either one without offsets, line numbers, uuids or Dynamo's name counters
  (`mask_unique_ids`); `pregraph_call_order` lists, in bytecode order, where the transformed
  code calls the two "Pregraph bytecode" profiler markers and its graph (notebooks 01 and 02).
- `capture_compile_logs(guards=True, ...)` turns on `torch._logging` artifacts, takes their
  records in-process instead of letting them reach stderr, and returns them sanitized (no
  timestamps, pids, cell file names, object ids, addresses, latencies).
- `AotGraphs` is a backend that runs AOTAutograd and keeps the forward and backward graphs.
- `explain_summary` reduces `torch._dynamo.explain(...)` to counts and short reasons.
- `pointwise_chain`, `make_timing_mlp`, `time_alternating`, `compile_cost_in_subprocess`: the
  measurements of notebook 03 and the benchmark.
"""

from __future__ import annotations

import contextlib
import dis
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CapturedCode",
    "capture_bytecode",
    "dis_text",
    "mask_unique_ids",
    "pregraph_call_order",
    "pregraph_markers_gated",
    "CompileLog",
    "capture_compile_logs",
    "sanitize_log",
    "guard_lines",
    "AotGraphs",
    "graph_ops",
    "explain_summary",
    "generated_kernels",
    "pointwise_chain",
    "make_timing_mlp",
    "mlp_loss",
    "time_alternating",
    "compile_cost_in_subprocess",
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

# Dynamo names its compiled functions `__compiled_fn_1_<uuid with underscores>`.
_UUID = re.compile(r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}")

# Dynamo's `unique_id(name)` appends a process-wide counter: `__compiled_fn_26`,
# `__builtins_dict___25`, `__resume_at_76_27` (76 is a bytecode offset, kept).
_UNIQUE_ID = re.compile(r"\b(__[A-Za-z]\w*?)_\d+\b")


# --------------------------------------------------------------------------------------------
# Bytecode
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapturedCode:
    """One frame Dynamo converted: the code it was given and the code it installed instead."""

    name: str  # co_name of the original code object
    original: types.CodeType
    transformed: types.CodeType


@contextlib.contextmanager
def capture_bytecode() -> Iterator[list[CapturedCode]]:
    """Record (original, transformed) code objects of every frame Dynamo converts inside.

    Uses Dynamo's own hook: `torch._dynamo.convert_frame.register_bytecode_hook`. The hook
    returns None, so Dynamo installs its own transformed code unchanged.
    """
    from torch._dynamo.convert_frame import register_bytecode_hook

    captured: list[CapturedCode] = []

    def hook(code: types.CodeType, new_code: types.CodeType) -> None:
        captured.append(CapturedCode(code.co_name, code, new_code))

    handle = register_bytecode_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def mask_unique_ids(text: str) -> str:
    """Replace the counter Dynamo's `unique_id` appends to a global's name with `N`.

    `__compiled_fn_26` -> `__compiled_fn_N`, `__resume_at_76_27` -> `__resume_at_76_N`; the
    uuid after a `__compiled_fn_` counter is dropped first. The counter grows with every
    compile in the process, so a cell run twice in one kernel would print other numbers.
    """
    return _UNIQUE_ID.sub(r"\1_N", _UUID.sub("", text))


def dis_text(code: types.CodeType, *, width: int = 22) -> str:
    """Instructions of `code`, one per line as `OPNAME  argument`, stable across runs.

    Offsets and source line numbers are left out (they move with any edit), and the counter
    and uuid Dynamo appends to `__compiled_fn_` are masked (`mask_unique_ids`): the call reads
    `__compiled_fn_N`. Jump targets still name offsets. An opcode name as long as `width` or
    longer (`POP_JUMP_FORWARD_IF_FALSE`, which 2.15's transformed code holds) still gets one
    space before its argument.
    """
    lines = []
    for ins in dis.get_instructions(code):
        arg = mask_unique_ids(ins.argrepr)
        lines.append(f"{ins.opname:<{width - 1}} {arg}".rstrip())
    return "\n".join(lines)


PREGRAPH_MARKERS = ("record_pregraph_bytecode_enter", "record_pregraph_bytecode_exit")


def pregraph_markers_gated() -> bool:
    """Whether the installed codegen makes the transformed code test the profiler flag itself.

    True where `torch._dynamo.codegen` has the template that wraps each marker call in
    `if torch.autograd.profiler._is_profiler_enabled:` (2.15), False where the markers are called
    on every run (2.13, 2.14). Notebooks 01 and 02 both ask this one function.
    """
    import torch._dynamo.codegen

    return hasattr(torch._dynamo.codegen, "_pregraph_marker_enter_template")


def pregraph_call_order(code: types.CodeType) -> list[str]:
    """Where Dynamo's transformed `code` loads the profiler markers and calls its graph.

    Returns the names in `PREGRAPH_MARKERS` in the order the code loads them, with `"graph"`
    at the place of the graph call: the last `CALL` before the code first stores a
    `graph_out_*` local (the name `codegen` gives the graph's result). On 2.13 and 2.14 the
    markers are called unconditionally; on 2.15 each call sits behind a test of the profiler
    flag, but the order of the loads is still the order of the calls. A code object with no
    `graph_out_*` store gives no `"graph"` entry.
    """
    events: list[tuple[int, str]] = []
    last_call = graph_call = None
    for i, ins in enumerate(dis.get_instructions(code)):
        if ins.argval in PREGRAPH_MARKERS:
            events.append((i, ins.argval))
        elif ins.opname == "CALL":
            last_call = i
        elif ins.opname == "STORE_FAST" and str(ins.argval).startswith("graph_out_"):
            if graph_call is None and last_call is not None:
                graph_call = last_call
    if graph_call is not None:
        events.append((graph_call, "graph"))
    return [name for _, name in sorted(events)]


# --------------------------------------------------------------------------------------------
# torch._logging, captured in-process
# --------------------------------------------------------------------------------------------

_SANITIZE: list[tuple[re.Pattern[str], str]] = [
    # glog prefix "V1129 22:50:36.123456 1234 torch/_dynamo/x.py:12] [0/0] " if one slips in
    (re.compile(r"(?m)^[IWEVD]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ \S+:\d+\] (\[[^\]]*\] )*"), ""),
    (re.compile(r"/tmp/ipykernel_\d+/\d+\.py|<ipython-input-\d+-[0-9a-f]+>"), "<cell>"),
    (re.compile(r"\bipykernel_\d+/\d+\.py"), "<cell>"),
    (re.compile(r"(/[^\s'\":]+/)+(?=[^\s/'\":]+\.py\b)"), ""),  # absolute dirs of a .py file
    (re.compile(r"0x[0-9a-fA-F]+"), "0xADDR"),
    (re.compile(r"\b\d{9,}\b"), "<id>"),  # id() of guarded objects
    (_UUID, ""),
]
_DROP = re.compile(r"latency|Guard eval|took \d|seconds", re.IGNORECASE)


def sanitize_log(text: str) -> str:
    """Remove what changes between runs from torch log text: stamps, pids, paths, ids, timings."""
    for pattern, repl in _SANITIZE:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.splitlines() if not _DROP.search(line))


@dataclass
class CompileLog:
    """Records taken from torch._logging: (artifact or logger name, message) pairs."""

    records: list[tuple[str, str]] = field(default_factory=list)

    def messages(self, artifact: str | None = None) -> list[str]:
        """Sanitized messages, optionally only those of one artifact ("guards", "recompiles")."""
        return [sanitize_log(m) for a, m in self.records if artifact is None or a == artifact]

    @property
    def text(self) -> str:
        """All messages, sanitized, each line prefixed with its artifact in brackets."""
        out = []
        for artifact, message in self.records:
            out += [f"[{artifact}] {line}" for line in sanitize_log(message).splitlines()]
        return "\n".join(out)

    def artifacts(self) -> Counter[str]:
        """How many records each artifact produced."""
        return Counter(a for a, _ in self.records)


class _ListHandler(logging.Handler):
    def __init__(self, log: CompileLog) -> None:
        super().__init__(level=logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        name = record.name
        artifact = name.rsplit(".__", 1)[1] if ".__" in name else name
        self.log.records.append((artifact, record.getMessage()))


@contextlib.contextmanager
def capture_compile_logs(**set_logs_kwargs: Any) -> Iterator[CompileLog]:
    """`torch._logging.set_logs(**kwargs)` for the block, records kept here, not on stderr.

    torch installs one stderr handler per registered logger; inside the block those handlers
    are swapped for one that appends to the returned `CompileLog`. On exit the logs are reset
    to torch's defaults with `set_logs()`.
    """
    import torch._logging
    from torch._logging import _internal

    torch._logging.set_logs(**set_logs_kwargs)
    log = CompileLog()
    handler = _ListHandler(log)
    loggers = [logging.getLogger(q) for q in _internal.log_registry.get_log_qnames()]
    removed: list[tuple[logging.Logger, logging.Handler]] = []
    for logger in loggers:
        for h in list(logger.handlers):
            if _internal._is_torch_handler(h):
                logger.removeHandler(h)
                removed.append((logger, h))
        logger.addHandler(handler)
    try:
        yield log
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        torch._logging.set_logs()  # back to defaults: fresh stderr handlers, WARNING level


_GUARD_LINE = re.compile(r"\+- (?P<kind>[A-Z_]+): (?P<body>.*)")
_GUARD_COMMENT = re.compile(r"\s+#\s.*$")


def guard_lines(text: str, kinds: Sequence[str] | None = None) -> list[str]:
    """`KIND: expression` lines of a guard tree (from the `guards` artifact), comments removed.

    The trailing comments name the code line and the file location that made each guard (a user
    line, or a torch line for the ambient guards); they are dropped because file names and line
    numbers in them change between runs and releases.
    """
    out = []
    for line in text.splitlines():
        m = _GUARD_LINE.search(line)
        if m and (kinds is None or m["kind"] in kinds):
            out.append(f"{m['kind']}: {_GUARD_COMMENT.sub('', m['body'])}")
    return out


# --------------------------------------------------------------------------------------------
# AOTAutograd: a backend that keeps the forward and backward graphs
# --------------------------------------------------------------------------------------------


def graph_ops(gm: Any) -> Counter[str]:
    """How often each op is called in an FX graph (`aten.mm.default`: 2), address-free.

    Keys are `str(node.target)` of `call_function` and `call_method` nodes: ATen overloads read
    `aten.mm.default`, builtins `<built-in function add>`, methods `relu`. A Python function's
    str carries its address (`<function mse_loss at 0x7f...>`); the ` at 0x...` part is dropped.
    """
    return Counter(
        _ADDRESS.sub("", str(n.target))
        for n in gm.graph.nodes
        if n.op in ("call_function", "call_method")
    )


class AotGraphs:
    """A torch.compile backend: Dynamo graph -> AOTAutograd -> keep forward and backward.

    `torch.compile(fn, backend=AotGraphs())`. After a call (and a `.backward()`), `.dynamo`
    holds the Dynamo graphs, `.forward` and `.backward` the ATen graphs AOTAutograd produced.
    AOTAutograd usually hands the backward graph over lazily, at the first `.backward()` (see
    "Backward graph lazy lowering" in torch/_functorch/_aot_autograd/runtime_wrappers.py).
    The graphs then run as they are (boxed). With the default `partition_fn` this is, for a
    step without input mutations, what the `aot_eager_default_partitioner` backend does;
    `aot_eager` itself uses the min-cut one. `.input_types["forward"]` and `["backward"]` hold,
    per graph, the class name of each example input a compiler was handed (AOTAutograd traces
    with fake tensors: "FakeTensor").
    """

    def __init__(
        self, decompositions: dict | None = None, partition_fn: Callable | None = None
    ) -> None:
        self.decompositions = decompositions
        self.partition_fn = partition_fn  # None: AOTAutograd's default_partition
        self.dynamo: list[Any] = []
        self.forward: list[Any] = []
        self.backward: list[Any] = []
        self.input_types: dict[str, list[list[str]]] = {"forward": [], "backward": []}

    def _keep(self, where: list[Any], kind: str) -> Callable:
        from torch._functorch.aot_autograd import make_boxed_func

        def compiler(gm: Any, example_inputs: Sequence[Any]) -> Callable:
            where.append(gm)
            self.input_types[kind].append([type(x).__name__ for x in example_inputs])
            return make_boxed_func(gm.forward)

        return compiler

    def __call__(self, gm: Any, example_inputs: Sequence[Any]) -> Callable:
        from torch._functorch.aot_autograd import aot_module_simplified

        self.dynamo.append(gm)
        extra = {} if self.partition_fn is None else {"partition_fn": self.partition_fn}
        return aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=self._keep(self.forward, "forward"),
            bw_compiler=self._keep(self.backward, "backward"),
            decompositions=self.decompositions,
            **extra,
        )

    def saved_for_backward(self, i: int = 0) -> list[str]:
        """Names of the values backward graph `i` receives from its forward (not the tangents).

        The backward graph's inputs are these saved values followed by `tangents_*`.
        """
        inputs = [n.name for n in self.backward[i].graph.find_nodes(op="placeholder")]
        return [name for name in inputs if not name.startswith("tangents")]

    def summary(self) -> str:
        """Graph counts and the ops of each forward and backward graph."""
        lines = [
            f"dynamo graphs: {len(self.dynamo)}, forward graphs: {len(self.forward)}, "
            f"backward graphs: {len(self.backward)}"
        ]
        for kind, gms in (("forward", self.forward), ("backward", self.backward)):
            for i, gm in enumerate(gms):
                ops = ", ".join(f"{op} x{n}" for op, n in sorted(graph_ops(gm).items()))
                lines.append(f"{kind} {i}: {ops}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# torch._dynamo.explain
# --------------------------------------------------------------------------------------------


def explain_summary(explanation: Any) -> dict[str, Any]:
    """Counts and first lines of the break reasons of an `ExplainOutput` (its repr has 0x...)."""
    reasons = []
    for r in explanation.break_reasons:
        first = sanitize_log(str(r.reason)).strip().splitlines()
        reasons.append(first[0] if first else "")
    return {
        "graph_count": explanation.graph_count,
        "graph_break_count": explanation.graph_break_count,
        "op_count": explanation.op_count,
        "break_reasons": reasons,
    }


_KERNEL = re.compile(
    r"^(?P<name>\w+) = async_compile\.cpp\w*\(.*?r'''(?P<src>.*?)'''\)", re.S | re.M
)


def generated_kernels(code: str) -> dict[str, str]:
    """Kernels of an Inductor-generated CPU module: {kernel name: C++ source}.

    The CPU wrapper defines each as `name = async_compile.cpp_pybinding([...], r'''...''')`.
    """
    return {m["name"]: m["src"].strip("\n") for m in _KERNEL.finditer(code)}


# --------------------------------------------------------------------------------------------
# Measurements (notebook 03, benchmarks/compile_speedup.py)
# --------------------------------------------------------------------------------------------


def pointwise_chain(x: Any) -> Any:
    """Eleven elementwise ATen ops of eight kinds; Inductor fuses them into one loop on a CPU.

    Eager runs one kernel per op, each writing a new tensor (ten temporaries and the result).
    """
    y = x.sin() * 2.0 + x.cos()
    y = y.relu() * x.sigmoid()
    return (y - 0.5).tanh() + x * x


def make_timing_mlp(width: int = 256, depth: int = 3, seed: int = 0) -> Any:
    """The train-step benchmark MLP: `depth` x (Linear(width, width), GELU), Linear(width, 1).

    Seeded, so an eager and a compiled copy start from the same weights. (Not `helpers.ddp`'s
    tiny model for the DDP notebooks.)
    """
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def mlp_loss(model: Any, x: Any, y: Any) -> Any:
    """Mean squared error of `model(x)` against `y`: the part of a training step one compiles."""
    import torch.nn.functional as F

    return F.mse_loss(model(x), y)


def time_alternating(
    fns: dict[str, Callable[[], Any]],
    repeats: int = 15,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds per call of each zero-argument callable, run in alternation.

    Alternating (a, b, a, b, ...) instead of all a's then all b's spreads a busy neighbour or a
    frequency change evenly over the contenders; the median ignores the odd slow round.
    `clock` is wall time by default; `time.process_time` counts only the CPU time of this
    process, which a neighbour that takes the core away delays but does not add to.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


_PROBE = """
import json, sys, time
import torch
from torch._dynamo.utils import counters
from helpers.compile_tools import pointwise_chain
torch.set_num_threads(1)
x = torch.randn(1 << 16)
compiled = torch.compile(pointwise_chain, backend="inductor")
t0 = time.perf_counter()
compiled(x)
dt = time.perf_counter() - t0
print(json.dumps({"compile_s": dt,
                  "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
                  "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"]}))
"""


def compile_cost_in_subprocess(cache_dir: str, timeout_s: float = 300) -> dict[str, Any]:
    """Compile `pointwise_chain` with Inductor in a new process using `cache_dir` as its cache.

    Returns {"compile_s": first-call seconds (Dynamo + AOTAutograd + Inductor + C++ build, or
    the cache load), "fxgraph_cache_hit": n, "fxgraph_cache_miss": n}. A new process keeps
    in-memory caches of this one out of the measurement; importing torch is not timed.
    """
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"compile probe failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
