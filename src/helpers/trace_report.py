"""The compiler's own record of a compile: torch's structured trace (`TORCH_TRACE`) read by tlparse.

Used by: notebooks 02 (frames, graph breaks, guards, recompiles) and 03 (AOT graphs, generated
Inductor code, cache hits). CPU or GPU alike; nothing is downloaded: `tlparse` is the binary
pinned in requirements.txt, found next to `sys.executable` (the environment's `bin/`).

- `record_trace(trace_dir)`: while the block runs, torch's structured trace goes to a fresh
  file in `trace_dir`, through the handler class `TORCH_TRACE` sets up (`LazyTraceHandler`,
  `torch._logging._internal`). torch makes that handler once, from the variable's value when
  `_init_logs` first runs at import (a later `set_logs` runs it again but keeps the handler), so
  setting it in a running process records nothing: the handler is attached to the trace logger
  for the block only and removed afterwards.
- `run_tlparse(log, out_dir)`: runs `tlparse --plain-text` on the file (a `TlparseMissing`
  error, naming where it looked, when the binary is absent).
- `parse_report(out_dir)`: tlparse's output (`raw.jsonl`, one record per trace event, and the
  artifact files it wrote) as plain data: one `CompileEntry` per compile id, and the names of
  the folders tlparse made (one per compile attempt, `-_<frame>_<compile>_<attempt>`, and
  `-_-_-_-` for records outside any compile).
- `trace_report(fn, *args)`: the three in one call, in a temporary folder that is removed.
- `show_trace_report(report)`: prints `report_text(report)` (deterministic: no times, paths or
  addresses) and displays `report_html(report)`, a self-contained HTML view of the same parts.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.compile_tools import generated_kernels, guard_lines, mask_unique_ids

__all__ = [
    "TlparseMissing",
    "GraphBreak",
    "CompileEntry",
    "TraceReport",
    "tlparse_binary",
    "tlparse_version",
    "record_trace",
    "run_tlparse",
    "parse_report",
    "trace_report",
    "aten_ops",
    "report_text",
    "report_html",
    "show_trace_report",
]

# Graphs that AOTAutograd writes to the trace, in the order the report lists them.
AOT_GRAPHS = ("aot_joint_graph", "aot_forward_graph", "aot_backward_graph", "aot_inference_graph")
# Cache events (artifact names) of AOTAutograd's cache and Inductor's FX graph cache.
CACHE_EVENTS = (
    "aotautograd_cache_hit",
    "aotautograd_cache_miss",
    "fx_graph_cache_hit",
    "fx_graph_cache_miss",
)
# Keys of a raw.jsonl record that are bookkeeping, not the event's kind.
_META = {
    "frame_id",
    "frame_compile_id",
    "attempt",
    "has_payload",
    "timestamp",
    "thread",
    "pathname",
    "lineno",
    "payload_filename",
    "rank",
}
_ATEN_CALL = re.compile(r"torch\.ops\.(aten\.\w+\.\w+)\(")
_TRACEBACK_LINE = re.compile(r'^\s*File "[^"]*", line \d+, in (?P<fn>\S+)\n\s+(?P<code>.+)$', re.M)


class TlparseMissing(FileNotFoundError):
    """tlparse is not installed in the environment that runs this Python."""


@dataclass(frozen=True)
class GraphBreak:
    """One graph break as the trace records it (`dynamo_graph_break_reason` artifact)."""

    reason: str  # its gb_type: the line of the message before "Explanation:" ("Data-dependent
    # branching"), not the exception's Python class (Unsupported)
    function: str  # the user function the break is in (innermost frame of the user traceback)
    line: str  # the user's source line that broke


@dataclass
class CompileEntry:
    """Everything the trace holds for one compile id (`frame/compile`, restarts merged)."""

    compile_id: str  # "0/1": frame 0 (a code object), its second compile
    name: str = ""  # co_name of the frame (compilation_metrics)
    attempts: int = 1  # 2 when Dynamo restarted the trace (after a graph break)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompile_reasons: list[str] = field(default_factory=list)  # the failed guards that made it
    guards: list[str] = field(default_factory=list)  # `KIND: expression` lines of its guard tree
    guard_count: int | None = None  # compilation_metrics: len(output.guards), before the tree
    graph_op_count: int | None = None  # compilation_metrics: call nodes of the Dynamo graph
    dynamo_graphs: int = 0  # dynamo_output_graph artifacts (graphs handed to the backend)
    aot_graphs: dict[str, str] = field(default_factory=dict)  # aot_forward_graph -> its code
    inductor_code: list[str] = field(default_factory=list)  # inductor_output_code modules
    cache_events: list[str] = field(default_factory=list)  # fx_graph_cache_hit, ...
    artifacts: list[str] = field(default_factory=list)  # every artifact kind, in trace order

    def aot_ops(self, graph: str) -> Counter[str]:
        """ATen op counts of one AOT graph of this compile (`aten.mm.default`: 3)."""
        return aten_ops(self.aot_graphs.get(graph, ""))

    def kernels(self) -> dict[str, str]:
        """Generated kernels of this compile's Inductor modules: name -> source."""
        out: dict[str, str] = {}
        for code in self.inductor_code:
            out.update(generated_kernels(code))
        return out


@dataclass
class TraceReport:
    """tlparse's report of one recorded block, as plain data."""

    compiles: list[CompileEntry]
    torch_version: str | None = None  # from the trace's torch_version record
    tlparse_version: str | None = None
    folders: list[str] = field(default_factory=list)  # tlparse's subfolders, sorted by name

    def by_id(self, compile_id: str) -> CompileEntry:
        """The entry of one compile id ("0/0"); KeyError naming the ids present."""
        for entry in self.compiles:
            if entry.compile_id == compile_id:
                return entry
        raise KeyError(f"no compile {compile_id} in the trace; present: {self.compile_ids()}")

    def compile_ids(self) -> list[str]:
        """Compile ids in the order the trace first mentions them."""
        return [entry.compile_id for entry in self.compiles]

    def graph_breaks(self) -> list[GraphBreak]:
        """Every graph break of the block, in trace order."""
        return [b for entry in self.compiles for b in entry.graph_breaks]

    def breaks_by_reason(self) -> dict[str, list[GraphBreak]]:
        """Graph breaks grouped by reason, reasons in order of first appearance."""
        grouped: dict[str, list[GraphBreak]] = {}
        for b in self.graph_breaks():
            grouped.setdefault(b.reason, []).append(b)
        return grouped


# --------------------------------------------------------------------------------------------
# Recording, tlparse, parsing
# --------------------------------------------------------------------------------------------


def tlparse_binary() -> Path:
    """The tlparse executable next to `sys.executable`; `TlparseMissing` if it is not there."""
    folder = Path(sys.executable).parent
    for name in ("tlparse", "tlparse.exe"):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise TlparseMissing(
        f"tlparse is not installed next to this Python ({folder / 'tlparse'} is missing): "
        "install the pinned version from requirements.txt (tlparse==0.4.3) into this "
        "environment; nothing is downloaded at run time"
    )


def tlparse_version(binary: Path | None = None) -> str:
    """`tlparse --version` of the binary used (e.g. "0.4.3")."""
    out = subprocess.run(
        [str(binary or tlparse_binary()), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip().split()[-1]


@contextlib.contextmanager
def record_trace(trace_dir: str | Path) -> Iterator[Path]:
    """Record torch's structured trace into a new file in `trace_dir` while the block runs.

    The same handler `TORCH_TRACE=<dir>` installs at import (`LazyTraceHandler`, which opens
    its file at the first record), with the same formatter, attached to torch's trace logger
    for the block only. Yields `trace_dir`; the file exists only if something was traced.
    """
    from torch._logging import _internal

    trace_dir = Path(trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    handler = _internal.LazyTraceHandler(str(trace_dir))
    handler.setFormatter(_internal.TorchLogsFormatter(trace=True))
    _internal.trace_log.addHandler(handler)
    try:
        yield trace_dir
    finally:
        _internal.trace_log.removeHandler(handler)
        handler.close()


def run_tlparse(log: str | Path, out_dir: str | Path, binary: Path | None = None) -> Path:
    """Run tlparse on one trace file into `out_dir` (plain-text artifacts); returns `out_dir`."""
    binary = binary or tlparse_binary()
    cmd = [str(binary), str(log), "-o", str(out_dir), "--overwrite", "--no-browser", "-p"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(
            f"tlparse exited with {done.returncode} (expected 0): {done.stderr.strip()[-2000:]}"
        )
    return Path(out_dir)


def _compile_id(record: dict[str, Any]) -> str | None:
    frame, compile_ = record.get("frame_id"), record.get("frame_compile_id")
    if frame is None or compile_ is None:
        return None
    return f"{frame}/{compile_}"


def _kind(record: dict[str, Any]) -> str:
    if "artifact" in record:
        return str(record["artifact"].get("name", "artifact"))
    keys = [k for k in record if k not in _META]
    return keys[0] if keys else ""


def _graph_break(payload: str) -> GraphBreak:
    """Reason, function and line of a `dynamo_graph_break_reason` payload."""
    lines = payload.splitlines()
    reason = ""
    for i, line in enumerate(lines):
        if line.strip().startswith("Explanation:"):
            reason = next((p.strip() for p in reversed(lines[:i]) if p.strip()), "")
            reason = reason.removeprefix("Graph Break Reason: ")
            break
    if not reason:  # no explanation block: the header line says it
        header = next((ln for ln in lines if ln.startswith("Graph Break Reason: ")), "")
        reason = header.removeprefix("Graph Break Reason: ").strip()
    user = payload.split("User code traceback:", 1)[-1].split("Traceback (most recent", 1)[0]
    frames = list(_TRACEBACK_LINE.finditer(user))
    function, code = (frames[-1]["fn"], frames[-1]["code"].strip()) if frames else ("", "")
    return GraphBreak(reason=reason, function=function, line=code)


def _reasons(payload: str) -> list[str]:
    """The failed guards of a `recompile_reasons` artifact: torch logs one reason as a JSON
    string and several as a JSON list; tlparse writes a single string out as plain text."""
    try:
        value = json.loads(payload)
    except json.JSONDecodeError:
        return [line.strip() for line in payload.splitlines() if line.strip()]
    return [str(r) for r in value] if isinstance(value, list) else [str(value)]


def aten_ops(code: str) -> Counter[str]:
    """How often each ATen op is called in a graph's printed code (`torch.ops.aten.x.y(`)."""
    return Counter(_ATEN_CALL.findall(code))


def parse_report(out_dir: str | Path) -> TraceReport:
    """Read tlparse's output folder (`raw.jsonl` and the artifact files) into a `TraceReport`."""
    out_dir = Path(out_dir)
    raw = out_dir / "raw.jsonl"
    if not raw.is_file():
        raise FileNotFoundError("expected tlparse's raw.jsonl in its output folder, found none")
    entries: dict[str, CompileEntry] = {}
    torch_version = None
    for text in raw.read_text().splitlines():
        if not text.strip():
            continue
        record = json.loads(text)
        kind = _kind(record)
        payload = ""
        if record.get("payload_filename"):
            payload = (out_dir / record["payload_filename"]).read_text()
        if kind == "torch_version" and payload:
            torch_version = json.loads(payload).get("pytorch_version")
        cid = _compile_id(record)
        if cid is None:
            continue
        entry = entries.setdefault(cid, CompileEntry(compile_id=cid))
        entry.attempts = max(entry.attempts, int(record.get("attempt") or 0) + 1)
        if kind in ("describe_storage", "describe_tensor", "describe_source", "create_symbol"):
            continue  # fake-tensor bookkeeping: not artifacts
        entry.artifacts.append(kind)
        if kind == "compilation_metrics":
            metrics = record["compilation_metrics"]
            entry.name = metrics.get("co_name") or entry.name
            entry.guard_count = metrics.get("guard_count")
            entry.graph_op_count = metrics.get("graph_op_count")
        elif kind == "dynamo_graph_break_reason":
            entry.graph_breaks.append(_graph_break(payload))
        elif kind == "recompile_reasons":
            entry.recompile_reasons.extend(_reasons(payload))
        elif kind == "dynamo_cpp_guards_str":
            entry.guards = guard_lines(payload)
        elif kind == "dynamo_output_graph":
            entry.dynamo_graphs += 1
        elif kind in AOT_GRAPHS:
            entry.aot_graphs[kind] = payload
        elif kind == "inductor_output_code":
            entry.inductor_code.append(payload)
        elif kind in CACHE_EVENTS:
            entry.cache_events.append(kind)
    folders = sorted(p.name for p in out_dir.iterdir() if p.is_dir())
    return TraceReport(
        compiles=list(entries.values()), torch_version=torch_version, folders=folders
    )


def trace_report(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> TraceReport:
    """Run `fn(*args, **kwargs)` with the trace recorded, run tlparse, return the report.

    Everything goes to a temporary folder that is removed afterwards. A block that compiled
    nothing leaves no trace file: its report has no compiles (tlparse is still looked up, so a
    missing binary fails the same way whatever the block does).
    """
    binary = tlparse_binary()
    with tempfile.TemporaryDirectory(prefix="torch_trace_") as tmp:
        with record_trace(Path(tmp) / "trace"):
            fn(*args, **kwargs)
        logs = sorted((Path(tmp) / "trace").glob("*.log"))
        if not logs:
            return TraceReport(compiles=[], tlparse_version=tlparse_version(binary))
        if len(logs) != 1:
            names = [p.name for p in logs]
            raise RuntimeError(f"expected one trace file, found {len(logs)}: {names}")
        report = parse_report(run_tlparse(logs[0], Path(tmp) / "report", binary))
        report.tlparse_version = tlparse_version(binary)
        shutil.rmtree(Path(tmp) / "report", ignore_errors=True)
    return report


# --------------------------------------------------------------------------------------------
# Views: a deterministic text summary and a self-contained HTML view
# --------------------------------------------------------------------------------------------


_OBJECT_ID = re.compile(r"(___check_(?:obj|type)_id\(.*?), \d+\)")


def _stable(text: str) -> str:
    """A guard line without what changes between runs: object ids, Dynamo's name counters."""
    return mask_unique_ids(_OBJECT_ID.sub(r"\1, ID)", text))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ops_text(ops: Counter[str]) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))


def _row_note(entry: CompileEntry) -> str:
    notes = [f"break: {b.reason}" for b in entry.graph_breaks]
    notes += [f"recompile: {r}" for r in entry.recompile_reasons]
    notes += entry.cache_events
    return "; ".join(notes)


def report_text(report: TraceReport) -> str:
    """A compact summary of the report, the same on every run of the same compiles."""
    if not report.compiles:
        return "trace: no compile recorded"
    names = {e.name for e in report.compiles}
    lines = [
        f"trace: {_count(len(report.compiles), 'compile')} of {_count(len(names), 'frame')}",
        f"{'compile':<8} {'frame':<32} {'graphs':>6} {'ops':>4} {'guards':>6}  notes",
    ]
    for e in report.compiles:
        ops = "-" if e.graph_op_count is None else str(e.graph_op_count)
        guards = "-" if e.guard_count is None else str(e.guard_count)
        attempt = f" ({e.attempts} attempts)" if e.attempts > 1 else ""
        lines.append(
            f"{e.compile_id:<8} {e.name + attempt:<32} {e.dynamo_graphs:>6} {ops:>4} "
            f"{guards:>6}  {_row_note(e)}".rstrip()
        )
    grouped = report.breaks_by_reason()
    if grouped:
        lines.append("graph breaks by reason:")
        for reason, breaks in grouped.items():
            where = ", ".join(f"{b.line} (in {b.function})" for b in breaks)
            lines.append(f"  {len(breaks)} x {reason}: {where}")
    for e in report.compiles:
        for graph in AOT_GRAPHS:
            if graph in e.aot_graphs:
                lines.append(f"{e.compile_id} {graph}: {_ops_text(e.aot_ops(graph))}")
        if e.inductor_code:
            lines.append(f"{e.compile_id} inductor kernels: {', '.join(e.kernels()) or '-'}")
    return "\n".join(lines)


_STYLE = (
    "<style>.tlr{font-family:sans-serif;font-size:13px;border-collapse:collapse}"
    ".tlr td,.tlr th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    ".tlr th{background:#f3f3f3}.tlr code{font-size:12px}</style>"
)


def _cell(text: Any) -> str:
    return f"<td>{html.escape(str(text))}</td>"


def _code_list(items: list[str]) -> str:
    return "<br>".join(f"<code>{html.escape(i)}</code>" for i in items) or "-"


def report_html(report: TraceReport) -> str:
    """A self-contained HTML view (inline style, no script, no links) of the same parts."""
    if not report.compiles:
        return "<p><b>trace:</b> no compile recorded</p>"
    head = ("compile", "frame", "attempts", "graphs", "ops", "guards", "breaks / recompiles")
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for e in report.compiles:
        notes = [f"{b.reason}: {b.line}" for b in e.graph_breaks]
        notes += [f"recompile: {r}" for r in e.recompile_reasons] + e.cache_events
        cells = (e.compile_id, e.name, e.attempts, e.dynamo_graphs, e.graph_op_count, e.guard_count)
        rows.append(
            "<tr>"
            + "".join(_cell("-" if c is None else c) for c in cells)
            + f"<td>{_code_list(notes)}</td></tr>"
        )
    parts = [_STYLE, f'<table class="tlr">{"".join(rows)}</table>']
    for e in report.compiles:
        body = []
        if e.guards:
            kinds = Counter(g.split(":", 1)[0] for g in e.guards)
            summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            body.append(
                f"<details><summary>guard tree: {len(e.guards)} lines ({html.escape(summary)})"
                f"</summary>{_code_list([_stable(g) for g in e.guards])}</details>"
            )
        for graph in AOT_GRAPHS:
            if graph in e.aot_graphs:
                ops = [f"{op} x{n}" for op, n in sorted(e.aot_ops(graph).items())]
                body.append(f"<details><summary>{graph}</summary>{_code_list(ops)}</details>")
        if e.inductor_code:
            body.append(f"<p>Inductor kernels: {_code_list(list(e.kernels()))}</p>")
        if body:
            title = html.escape(f"{e.compile_id} {e.name}")
            parts.append(f"<details><summary><b>{title}</b></summary>{''.join(body)}</details>")
    return "".join(parts)


def show_trace_report(report: TraceReport) -> None:
    """Print the text summary; in a notebook, also display the HTML view."""
    print(report_text(report))
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return
    if get_ipython() is not None:
        display(HTML(report_html(report)))
