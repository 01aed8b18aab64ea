"""Unit tests of helpers.trace_report: torch's structured trace read back through tlparse.

Reference equivalence: what the report says about a compile is compared with what torch says
by hand about the same compile (`torch._dynamo.explain`, the `guards` and `recompiles` logging
artifacts, the graphs `AotGraphs` kept). Eager and AOT backends only: fast, no C++ build.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._logging import _internal

from helpers.compile_tools import AotGraphs, capture_compile_logs, graph_ops, guard_lines
from helpers.trace_report import (
    TlparseMissing,
    _graph_break,
    _reasons,
    parse_report,
    record_trace,
    report_html,
    report_text,
    run_tlparse,
    tlparse_binary,
    tlparse_version,
    trace_report,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def add_twice(x, y):
    a = x.sin() + y
    return a * 2


def breaks_twice(x):
    x = x.relu() + 1
    print("inside")
    if x.sum() > 0:
        return x.cos()
    return x.sin()


def replay() -> None:
    compiled = torch.compile(add_twice, backend="eager")
    for n, dtype in [(3, torch.float32), (4, torch.float32), (4, torch.float64)]:
        compiled(torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype))
    torch.compile(breaks_twice, backend="eager")(torch.ones(3))


# --------------------------------------------------------------------------------------------
# The binary
# --------------------------------------------------------------------------------------------


def test_tlparse_is_the_pinned_binary_next_to_this_python():
    binary = tlparse_binary()
    assert binary.parent == type(binary)(sys.executable).parent
    assert tlparse_version(binary) == "0.4.3"


def test_missing_tlparse_raises_naming_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(TlparseMissing) as err:
        tlparse_binary()
    assert str(tmp_path / "tlparse") in str(err.value)
    assert "tlparse==0.4.3" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def test_missing_tlparse_fails_before_running_the_block(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    ran = []
    with pytest.raises(TlparseMissing):
        trace_report(lambda: ran.append(1))
    assert ran == []


def test_a_failing_tlparse_raises_with_its_exit_status(tmp_path):
    fake = tmp_path / "tlparse"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    log = tmp_path / "x.log"
    log.write_text("")
    with pytest.raises(RuntimeError, match=r"exited with 3 \(expected 0\): broken"):
        run_tlparse(log, tmp_path / "out", binary=fake)


# --------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------


def test_record_trace_removes_its_handler_even_when_the_block_raises(tmp_path):
    before = list(_internal.trace_log.handlers)
    with pytest.raises(ValueError), record_trace(tmp_path):
        assert len(_internal.trace_log.handlers) == len(before) + 1
        raise ValueError("inside")
    assert _internal.trace_log.handlers == before


def test_record_trace_writes_the_records_torch_trace_would(tmp_path):
    with record_trace(tmp_path):
        torch.compile(add_twice, backend="eager")(torch.randn(3), torch.randn(3))
    logs = list(tmp_path.glob("*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    for kind in ("dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str"):
        assert f'"{kind}"' in text, f"expected a {kind} record in the trace"
    # nothing is recorded once the block is over
    size = logs[0].stat().st_size
    torch.compile(add_twice, backend="eager")(torch.randn(5, 5), torch.randn(5, 5))
    assert logs[0].stat().st_size == size


def test_an_empty_trace_is_a_report_without_compiles(tmp_path):
    report = trace_report(lambda: None)
    assert report.compiles == []
    assert report_text(report) == "trace: no compile recorded"
    assert "no compile recorded" in report_html(report)
    # an empty file through tlparse itself: its output parses to no compiles too
    log = tmp_path / "empty.log"
    log.write_text("")
    assert parse_report(run_tlparse(log, tmp_path / "out")).compiles == []


def test_parse_report_needs_tlparses_output(tmp_path):
    with pytest.raises(FileNotFoundError, match="raw.jsonl"):
        parse_report(tmp_path)


# --------------------------------------------------------------------------------------------
# Reference equivalence: the report against torch's own by-hand records
# --------------------------------------------------------------------------------------------


def test_report_agrees_with_explain_and_the_logs():
    x, y = torch.randn(3), torch.randn(3)
    with capture_compile_logs(guards=True) as log:
        torch.compile(add_twice, backend="eager")(x, y)
    guards = guard_lines("\n".join(log.messages("guards")))
    torch._dynamo.reset()
    with capture_compile_logs(recompiles=True) as log:
        replay()
    failed = [
        [ln.strip().removeprefix("- ") for ln in r.splitlines() if ln.strip().startswith("- ")]
        for r in log.messages("recompiles")
    ]
    explanation = torch._dynamo.explain(breaks_twice)(torch.ones(3))
    add_guards = len(torch._dynamo.explain(add_twice)(x, y).out_guards)

    torch._dynamo.reset()
    report = trace_report(replay)
    assert report.torch_version == torch.__version__
    assert report.tlparse_version == "0.4.3"
    assert report.compile_ids() == ["0/0", "0/1", "0/2", "1/0", "2/0", "3/0"]
    adds = [e for e in report.compiles if e.name == "add_twice"]
    rest = [e for e in report.compiles if e.name != "add_twice"]
    assert [e.recompile_reasons for e in adds] == [[], *failed]
    assert adds[0].guards == guards
    assert adds[0].guard_count == add_guards
    assert sum(e.guard_count for e in rest) == len(explanation.out_guards)
    assert [e.name for e in rest][0] == "breaks_twice"
    assert all(
        n.startswith("torch_dynamo_resume_in_breaks_twice") for n in [e.name for e in rest][1:]
    )
    assert [e.attempts for e in rest] == [2, 1, 1]
    # tlparse's folders: one per compile attempt, and one for records outside any compile
    attempts = [
        f"-_{e.compile_id.replace('/', '_')}_{a}"
        for e in report.compiles
        for a in range(e.attempts)
    ]
    assert report.folders == sorted(["-_-_-_-", *attempts])
    assert "-_1_0_1" in report.folders  # the restarted compile has a folder per attempt
    assert [e.dynamo_graphs for e in rest] == [1, 1, 1]
    assert sum(e.dynamo_graphs for e in rest) == explanation.graph_count == 3
    assert [e.graph_op_count for e in rest] == [
        sum(graph_ops(gm).values()) for gm in explanation.graphs
    ]
    lines = [r.user_stack[-1].line for r in explanation.break_reasons]
    assert (
        [b.line for b in report.graph_breaks()] == lines == ['print("inside")', "if x.sum() > 0:"]
    )
    grouped = {r: len(bs) for r, bs in report.breaks_by_reason().items()}
    assert grouped == {"Failed to trace builtin operator": 1, "Data-dependent branching": 1}
    first = str(explanation.break_reasons[0].reason).splitlines()[0]
    assert report.graph_breaks()[0].reason == first


def test_aot_graphs_are_the_ones_aotautograd_handed_over():
    model = torch.nn.Linear(4, 2)

    def loss_fn(x):
        return F.gelu(model(x)).sum()

    x = torch.randn(3, 4)
    kept = AotGraphs()
    report = trace_report(lambda: torch.compile(loss_fn, backend=kept)(x).backward())
    (entry,) = report.compiles
    assert entry.aot_ops("aot_forward_graph") == graph_ops(kept.forward[0])
    assert entry.aot_ops("aot_backward_graph") == graph_ops(kept.backward[0])
    assert entry.aot_ops("aot_joint_graph") == graph_ops(kept.forward[0]) + graph_ops(
        kept.backward[0]
    )
    assert f"{entry.compile_id} aot_forward_graph: aten.addmm.default x1" in report_text(report)


def test_views_are_the_same_on_every_run_and_hold_no_machine_details():
    first = trace_report(replay)
    torch._dynamo.reset()
    second = trace_report(replay)
    assert report_text(first) == report_text(second)
    assert report_html(first) == report_html(second)
    html = report_html(first)
    for unstable in ("/tmp", "0x", "site-packages", "<script", "href="):
        assert unstable not in html, f"expected no {unstable!r} in the HTML view"
    assert not re.search(r"\d{7,}", html), "expected object ids masked in the HTML view"
    assert "guard tree: 17 lines" in html


# --------------------------------------------------------------------------------------------
# Parsers of single artifacts
# --------------------------------------------------------------------------------------------

BREAK = """Graph break in user code at /somewhere/file.py:12
Graph Break Reason: Encountered graph break when attempting to trace CALL:

Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `print`

User code traceback:
  File "/somewhere/file.py", line 20, in <module>
    run(x)
  File "/somewhere/file.py", line 12, in fn
    print("hi")

Traceback (most recent call last):
  File "/torch/_dynamo/symbolic_convert.py", line 1, in wrapper
    return inner_fn(self, inst)
"""


def test_graph_break_reason_function_and_line():
    b = _graph_break(BREAK)
    assert (b.reason, b.function, b.line) == (
        "Failed to trace builtin operator",
        "fn",
        'print("hi")',
    )
    header_only = BREAK.replace(
        "Encountered graph break when attempting to trace CALL:\n\n"
        "Failed to trace builtin operator\n"
        "  Explanation: Dynamo does not know how to trace builtin operator `print`\n",
        "Data-dependent branching\n  Explanation: branch on a tensor\n",
    )
    assert _graph_break(header_only).reason == "Data-dependent branching"
    no_explanation = "Graph break in user code at a.py:1\nGraph Break Reason: something odd\n"
    assert _graph_break(no_explanation) == type(b)("something odd", "", "")


def test_recompile_reasons_in_each_form_the_trace_holds():
    one = "0/0: tensor 'x' size mismatch at index 0. expected 3, actual 4"
    assert _reasons(json.dumps(one)) == [one]
    assert _reasons(json.dumps([one, "0/1: other"])) == [one, "0/1: other"]
    assert _reasons(one + "\n") == [one]  # tlparse writes a single reason as plain text
