"""Unit tests of helpers.onnx_tools and helpers.netron_view (CPU, offline).

Exports are slow-ish (the dynamo exporter builds its registry), so one tiny model is exported
once per exporter per module; the op-listing and Netron tests use hand-built ONNX graphs.
"""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from helpers.netron_view import NetronView
from helpers.onnx_tools import (
    dispatched_translations,
    export_onnx,
    graph_text,
    list_ops,
    locate_translation,
    model_summary,
    op_table,
    quiet_onnx,
    run_ort,
    traced_translations,
    translation_file,
    verify_with_ort,
)
from helpers.processes import listening_sockets
from helpers.source import source_view


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2.0  # (B, 3)


@pytest.fixture(scope="module")
def tiny() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet().eval()


@pytest.fixture(scope="module")
def exported(tiny: TinyNet) -> dict[str, onnx.ModelProto]:
    """Both exporters, dynamic batch, with every warning recorded."""
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        models = {
            "dynamo": export_onnx(tiny, (x,), dynamic_batch=True),
            "torchscript": export_onnx(tiny, (x,), dynamo=False, dynamic_batch=True),
        }
    models["warnings"] = caught  # type: ignore[assignment]
    return models


def _handmade(domain_op: bool = True) -> onnx.ModelProto:
    """x -> Relu -> If(cond){Neg}{Abs} -> (custom Foo) -> y, built by hand (no exporter)."""
    then_g = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["r"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("If", ["cond"], ["i"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["i"], ["j"]),
    ]
    opsets = [helper.make_opsetid("", 20)]
    if domain_op:
        nodes.append(helper.make_node("Foo", ["j"], ["y"], domain="custom"))
        opsets.append(helper.make_opsetid("custom", 1))
    else:
        nodes.append(helper.make_node("Identity", ["j"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=opsets)


# ------------------------------------------------------------------------------ export


def test_export_is_quiet(exported: dict) -> None:
    kinds = {type(w.message).__name__ for w in exported["warnings"]}
    assert not kinds & {"FutureWarning", "DeprecationWarning"}, kinds


def test_export_both_exporters_dynamic_batch(exported: dict) -> None:
    for kind in ("dynamo", "torchscript"):
        model = exported[kind]
        onnx.checker.check_model(model)
        summary = model_summary(model)
        (shape,) = summary["inputs"].values()
        assert shape == ("batch", 4), (kind, summary)
        (out_shape,) = summary["outputs"].values()
        assert out_shape == ("batch", 3), (kind, summary)
        for batch in (1, 5):  # one graph, two batch sizes
            (y,) = run_ort(model, torch.ones(batch, 4))
            assert y.shape == (batch, 3)


def test_export_saves_to_path(tiny: TinyNet, tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    model = export_onnx(tiny, torch.randn(1, 4), path, dynamo=False)
    assert onnx.load(str(path)) == model


# ------------------------------------------------------------------------------ parity


def test_parity_passes_for_both_exporters(exported: dict, tiny: TinyNet) -> None:
    x = torch.randn(3, 4)
    for kind in ("dynamo", "torchscript"):
        report = verify_with_ort(exported[kind], tiny, (x,))
        assert report.passed, str(report)
        assert report.max_abs <= 1e-5
        np.testing.assert_allclose(report.actual[0], tiny(x).detach().numpy(), rtol=1e-5)


def test_parity_report_detects_a_different_model(exported: dict, tiny: TinyNet) -> None:
    other = TinyNet().eval()
    with torch.no_grad():
        other.fc.bias += 1.0  # every output moves by 2 where the ReLU is active
    report = verify_with_ort(exported["dynamo"], other, torch.ones(2, 4) * 5)
    assert not report.passed
    assert report.outputs[0].max_abs > 1.0
    text = str(report)
    assert "max_abs <= 1e-05: False" in text and text.endswith("passed: False")


def test_parity_report_prints_no_raw_floats(exported: dict, tiny: TinyNet) -> None:
    text = str(verify_with_ort(exported["torchscript"], tiny, torch.randn(2, 4)))
    assert "max_abs <= 1e-05: True" in text and "passed: True" in text
    # only thresholds like 1e-05 and shapes: no long decimals that change between machines
    assert not re.search(r"\d\.\d{3,}", text), text


def test_parity_report_shape_mismatch(exported: dict) -> None:
    report = verify_with_ort(exported["dynamo"], lambda x: torch.zeros(2, 7), torch.ones(2, 4))
    assert not report.passed
    assert "shape (2, 3) == (2, 7): False" in str(report)


# ------------------------------------------------------------------------------ reading


def test_list_ops_counts_subgraphs_and_domains() -> None:
    ops = list_ops(_handmade())
    assert ops == {"Relu": 2, "If": 1, "Neg": 1, "Abs": 1, "custom::Foo": 1}


def test_op_table_sorted_by_domain() -> None:
    table = op_table(_handmade()).splitlines()
    assert table[0].split() == ["domain", "op", "count"]
    rows = [line.split() for line in table[1:]]
    assert [r[1] for r in rows] == ["Abs", "If", "Neg", "Relu", "Foo"]
    assert rows[-1] == ["custom", "Foo", "1"] and rows[3] == ["ai.onnx", "Relu", "2"]


def test_list_ops_of_exports(exported: dict) -> None:
    assert list_ops(exported["torchscript"])["Gemm"] == 1
    ops = list_ops(exported["dynamo"])
    assert ops["Relu"] == 1 and ops["Mul"] == 1


def test_graph_text_is_sanitized(exported: dict) -> None:
    raw = exported["dynamo"]
    # the dynamo exporter records stack traces with this machine's paths in node metadata
    assert any(
        p.key == "pkg.torch.onnx.stack_trace" for n in raw.graph.node for p in n.metadata_props
    )
    text = graph_text(raw)
    assert "Gemm" in text and "float[batch,4] x" in text
    for bad in ("stack_trace", "site-packages", "/work/", "+cpu", "doc_string", "0x"):
        assert bad not in text, bad
    assert '"fc.weight" =  {...}' in text or '"fc.weight" = {...}' in text
    assert "{...}" not in graph_text(raw, initializer_values=True)


# ------------------------------------------------------------------------------ mapping


def test_locate_translation_relu_in_both() -> None:
    found = locate_translation("aten::relu")
    assert set(found) == {"torchscript", "dynamo"}
    old_file = translation_file(found["torchscript"])
    new_file = translation_file(found["dynamo"])
    assert re.fullmatch(
        r"torch/onnx/_internal/torchscript_exporter/symbolic_opset\d+\.py", old_file
    )
    assert new_file.startswith("onnxscript/function_libs/torch_lib/ops/"), new_file
    view = source_view(found["dynamo"], r"op\.Relu", before=0, after=0)
    assert "Relu" in view.code and view.url and "#L" in view.url


def test_locate_translation_asinh_only_in_dynamo() -> None:
    for name in ("aten::asinh", "asinh", torch.ops.aten.asinh.default):
        found = locate_translation(name)
        assert found["torchscript"] is None
        assert found["dynamo"].__name__ == "aten_asinh"
    assert "Asinh" in source_view(locate_translation("asinh")["dynamo"]).code


def test_traced_translations_of_the_torchscript_exporter(tiny: TinyNet) -> None:
    found = traced_translations(tiny, torch.randn(2, 4))
    assert "aten::relu" in found and "aten::linear" in found, list(found)
    assert found["aten::relu"] is locate_translation("aten::relu")["torchscript"]


def test_dispatched_translations_of_the_dynamo_exporter(tiny: TinyNet) -> None:
    with quiet_onnx():
        onnx_program = torch.onnx.export(tiny, (torch.randn(2, 4),), dynamo=True, verbose=False)
    found = dispatched_translations(onnx_program)
    assert {"aten::relu", "aten::linear"} <= set(found), list(found)
    assert found["aten::relu"] is locate_translation("aten::relu")["dynamo"]


def test_failed_dynamo_export_is_quiet_and_keeps_its_stderr(capfd) -> None:
    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else -x

    with pytest.raises(Exception, match="data-dependent") as info:
        export_onnx(Branchy().eval(), torch.ones(2))
    assert "def forward" in info.value.captured_stderr  # torch.export's partial graph
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)


def test_locate_translation_overload_and_unknown() -> None:
    found = locate_translation(torch.ops.aten.add.Tensor)
    assert found["torchscript"] is not None and found["dynamo"] is not None
    assert locate_translation("aten::no_such_op_anywhere") == {"torchscript": None, "dynamo": None}


# ------------------------------------------------------------------------------ Netron


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # UDP connect sends nothing; picks the source
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def test_netron_serves_copy_on_loopback_only_and_stops(tmp_path: Path) -> None:
    model = _handmade()
    path = tmp_path / "original.onnx"
    onnx.save(model, str(path))
    (tmp_path / "secret.txt").write_text("not for the browser")  # beside the original model
    with NetronView(path, name="tiny.onnx") as view:
        host, port = view.address
        assert host == "127.0.0.1" and view.alive
        # bound to loopback only: one LISTEN socket on 127.0.0.1, none on 0.0.0.0 or ::
        if Path("/proc/net/tcp").exists():
            assert listening_sockets(port) == ["127.0.0.1"], listening_sockets(port)
        other = _non_loopback_address()
        if other is not None:
            with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
                pass
        # serves the page and exactly the copied model, nothing beside it
        assert sorted(p.name for p in view.folder.iterdir()) == ["tiny.onnx"]
        assert view.folder != tmp_path
        status, page = _get(view.url)
        assert status == 200 and b'content="/data/tiny.onnx"' in page
        status, data = _get(view.data_url)
        assert status == 200 and onnx.load_from_string(data) == model
        for outside in ("secret.txt", "original.onnx", "..%2Fsecret.txt", "%2Fetc%2Fpasswd"):
            assert _get(f"{view.url}data/{outside}")[0] == 404, outside
        assert "http://127.0.0.1:" in view.iframe()._repr_html_()
        folder = view.folder
    assert not view.alive
    assert not folder.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert listening_sockets(port) == []


def test_netron_text_view_is_static() -> None:
    view = NetronView(_handmade(domain_op=False), name="m.onnx")
    text = view.text()
    assert text.splitlines()[0] == "m.onnx: 4 nodes, opsets {'ai.onnx': 20}"
    assert "  input  x: [2]" in text and "Identity" in text
    assert repr(view) == "NetronView('m.onnx', stopped)"
    with pytest.raises(RuntimeError):
        _ = view.url
    view.stop()  # stopping a view that never started is a no-op


def test_netron_stops_when_the_body_raises() -> None:
    with pytest.raises(KeyError), NetronView(_handmade(), name="x.onnx") as view:
        port = view.address[1]
        raise KeyError("boom")
    assert not view.alive
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_netron_view_rejects_paths_as_names() -> None:
    with pytest.raises(ValueError):
        NetronView(_handmade(), name="../x.onnx")
