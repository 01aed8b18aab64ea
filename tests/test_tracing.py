"""Tests of helpers.tracing: call-path recorder, stepper, recording backend.

No Inductor compile here (tests/test_landmarks.py has the one); eager and aot_eager only.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch._dynamo
from compile_fixtures import ADDRESS, X, pointwise, shifted_cos

from helpers.compile_tools import graph_ops
from helpers.pictures import compile_stages_svg
from helpers.source import resolve
from helpers.tracing import (
    Recording,
    RecordingBackend,
    record_calls,
    record_compile,
    step_data,
    step_source,
    step_text,
    step_viewer,
)


def test_recorder_tree_on_compiled_function(eager_recording: Recording) -> None:
    rec = eager_recording
    assert len(rec) > 50 and rec.error is None
    torch.testing.assert_close(rec.result, shifted_cos(X))
    assert rec[0].name.startswith("torch._dynamo.eval_frame._TorchDynamoContext.__call__")
    assert rec[0].depth == 0 and rec[0].parent is None
    for step in rec:  # names and locations are computed from the code objects
        assert step.relpath.startswith("torch/") and step.relpath.endswith(".py")
        assert step.line == step.code.co_firstlineno
        if step.parent is not None:
            assert step.depth == rec[step.parent].depth + 1
    compile_step = rec.first("torch._dynamo.convert_frame._compile")
    assert resolve(compile_step.name).__code__ is compile_step.code
    assert rec.find("transform_code_object") and not rec.find("GraphLowering")
    text = rec.tree(max_depth=2)
    assert text.splitlines()[0].startswith("torch._dynamo.eval_frame.")
    assert max(len(line) - len(line.lstrip()) for line in text.splitlines()) <= 4
    assert not ADDRESS.search(rec.tree())
    folded = rec.tree(collapse=["torch._dynamo.convert_frame.CatchErrorsWrapper"])
    assert "callees]" in folded and len(folded) < len(rec.tree())


def test_record_calls_max_depth_and_second_call_is_quiet() -> None:
    def h(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    compiled = torch.compile(h, backend="eager")
    x = torch.randn(4)
    first = record_calls(compiled, x)
    second = record_calls(compiled, x)  # cached path: no convert_frame, no tracing
    assert first.find("convert_frame._compile") and not second.find("convert_frame._compile")
    assert len(second) < len(first) / 10
    torch.testing.assert_close(second.result, x * 3)
    shallow = record_compile(h, x, backend="eager", max_depth=1)
    assert shallow and max(s.depth for s in shallow) == 1


def test_error_path_reraises_with_partial_recording() -> None:
    def broken_backend(gm: torch.fx.GraphModule, example_inputs: list) -> None:
        raise RuntimeError("backend refuses")

    def k(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    compiled = torch.compile(k, backend=broken_backend)
    with pytest.raises(Exception, match="backend refuses") as info:
        record_calls(compiled, torch.randn(3))
    rec = info.value.recording
    assert rec.error is info.value and len(rec) > 0
    assert rec.find("call_user_compiler")  # the path up to the error is kept
    assert not rec.find("CheckFunctionManager")  # guards are never built
    assert any("record_calls" in note for note in getattr(info.value, "__notes__", []))
    assert sys.getprofile() is None  # the profiler is removed on the error path too


def test_plain_exception_in_fn_is_reraised() -> None:
    def fails() -> None:
        torch.fx.symbolic_trace(lambda x: x + 1)  # runs some torch.fx first
        raise KeyError("boom")

    with pytest.raises(KeyError) as info:
        record_calls(fails, packages=("torch.fx",))
    assert info.value.recording.find("symbolic_trace")


def test_package_not_imported_or_missing() -> None:
    if "tabnanny" in sys.modules:
        pytest.skip("tabnanny happens to be imported")
    with pytest.raises(ImportError, match="'tabnanny' is not imported"):
        record_calls(lambda: None, packages=("tabnanny",))
    with pytest.raises(ModuleNotFoundError, match="no package named 'torch._no_such'"):
        record_calls(lambda: None, packages=("torch._no_such",))


def test_stepper_on_empty_recording() -> None:
    empty = Recording(steps=[], packages=("torch._dynamo",))
    with pytest.raises(ValueError, match="recording is empty"):
        step_text(empty, 0)
    with pytest.raises(ValueError, match="recording is empty"):
        step_viewer(empty)


def test_step_text_is_pure_and_viewer_uses_it(eager_recording: Recording) -> None:
    rec = eager_recording
    i = rec.first("convert_frame._compile").index
    text = step_text(rec, i)
    assert text == step_text(rec, i)  # pure: same input, same text
    head = text.splitlines()
    assert head[0] == "torch._dynamo.convert_frame._compile"
    assert head[1] == f"  step {i + 1} of {len(rec)}"
    assert step_text(rec, i, numbered=False).splitlines()[1].startswith("  defined at torch/")
    assert "https://github.com/pytorch/pytorch/blob/" in text and "#L" in text
    assert "def _compile(" in text and not ADDRESS.search(text)
    with pytest.raises(IndexError, match="does not exist"):
        step_text(rec, len(rec))
    guards = rec.first("CheckFunctionManager.__init__").index
    viewer = step_viewer(rec, start=i, steps=[0, i, guards])
    assert [s["index"] for s in viewer.steps] == [0, i, guards] and viewer.step == 1
    assert viewer.steps[1] == step_data(rec, i) and viewer.steps[1]["name"] == head[0]
    assert viewer.steps[1]["svg"] == compile_stages_svg(rec.path_to(i))  # the picture of that step
    assert 'data-active-stage="Dynamo frame hook"' in viewer.steps[1]["svg"]  # convert_frame
    assert 'data-active-stage="guards"' in viewer.steps[2]["svg"]
    assert text == f"{head[0]}\n{viewer.steps[1]['head']}\n\n{viewer.steps[1]['body']}"
    assert viewer.steps[1]["url"] in text and viewer.steps[0]["name"] == rec[0].name
    data, _ = viewer._repr_mimebundle_()
    assert data["text/plain"] == text  # the text twin: step_text of the start
    with pytest.raises(ValueError, match="not among the viewer's steps"):
        step_viewer(rec, start=i, steps=[0, guards])
    with pytest.raises(IndexError, match="does not exist"):
        step_viewer(rec, steps=[0, len(rec)])
    assert len(step_viewer(rec).steps) == len(rec)  # default: every step


def test_recording_backend_summary() -> None:
    backend = RecordingBackend()
    compiled = torch.compile(pointwise, backend=backend)
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), pointwise(x))
    compiled(x)  # cached: the backend is not called again
    assert len(backend.graphs) == 1 and backend.inputs[0] == ["float32[8]"]
    counts = backend.op_counts(0)
    assert counts == {"torch.sin": 1, "operator.mul": 1, "operator.add": 1}
    # the same counts as compile_tools.graph_ops (one counter), only the names may differ
    raw = graph_ops(backend.graphs[0])
    assert list(raw.values()) == list(counts.values())
    text = backend.summary()
    assert text.startswith("1 graph(s) received") and "def forward" in text
    assert not ADDRESS.search(text)
    torch._dynamo.reset()


def test_recording_backend_with_inner_aot_eager_sees_aten_names() -> None:
    inner_graphs = RecordingBackend()

    def aot_recorder(gm: torch.fx.GraphModule, example_inputs: list):
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=inner_graphs)(gm, example_inputs)

    outer = RecordingBackend(inner=aot_recorder)

    def m(x: torch.Tensor) -> torch.Tensor:
        return (x * x).relu()

    x = torch.randn(5)
    torch.testing.assert_close(torch.compile(m, backend=outer)(x), m(x))
    assert len(outer) == 1 and len(inner_graphs) == 1
    assert inner_graphs.op_counts() == {"aten.mul.Tensor": 1, "aten.relu.default": 1}
    assert inner_graphs.op_counts() == dict(graph_ops(inner_graphs.graphs[-1]))  # ATen: same
    # Dynamo hands its backend the real tensors; AOTAutograd hands its compilers fake ones
    assert outer.input_types == [["Tensor"]] and inner_graphs.input_types == [["FakeTensor"]]
    assert not ADDRESS.search(inner_graphs.summary())
    by_name = RecordingBackend(inner="aot_eager")
    torch.testing.assert_close(torch.compile(m, backend=by_name)(x + 1), m(x + 1))
    torch._dynamo.reset()


def test_op_counts_names_method_calls() -> None:
    backend = RecordingBackend()

    def m(x: torch.Tensor) -> torch.Tensor:
        return x.relu().sum()

    torch.compile(m, backend=backend)(torch.randn(4))
    assert backend.op_counts() == {".relu()": 1, ".sum()": 1}
    assert sum(graph_ops(backend.graphs[0]).values()) == 2
    torch._dynamo.reset()


def test_step_source_is_the_data_behind_step_text(eager_recording: Recording) -> None:
    rec = eager_recording
    i = rec.first("convert_frame._compile").index
    view = step_source(rec, i, lines=5)
    assert view is not None and view.name == rec[i].name and view.excerpt
    assert len(view.code.splitlines()) == 5 and view.first_line == rec[i].line
    assert view.url in step_text(rec, i, lines=5) and view.code in step_text(rec, i, lines=5)
