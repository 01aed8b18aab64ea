"""Every custom-op route of helpers.onnx_custom exports and, where ONNX Runtime can run the
result, matches torch.asinh; custom-domain nodes carry the expected schema and ORT's error."""

from __future__ import annotations

import io
import warnings

import pytest
import torch

from helpers import onnx_custom as oc
from helpers.onnx_tools import export_onnx, list_ops, verify_with_ort

X = oc.sample_input()
ORT_NO_KERNEL = "custom_domain:Asinh(-1) is not a registered function/op"
EXPECTED_SCHEMA = [
    {
        "domain": "custom_domain",
        "op_type": "Asinh",
        "domain_version": 1,
        "inputs": 1,
        "outputs": 1,
        "attributes": {"plugin_version": "1"},
    }
]


def _assert_matches_asinh(model_proto, torch_model=torch.asinh) -> None:
    report = verify_with_ort(model_proto, torch_model, X)
    assert report.passed, str(report)


# --------------------------------------------------------------------------- old exporter


@pytest.mark.parametrize("opset", [9, 11, 17])
def test_old_exporter_has_no_asinh(opset: int) -> None:
    err = oc.legacy_export_error(oc.AsinhModel(), (X,), opset)
    assert isinstance(err, torch.onnx.errors.UnsupportedOperatorError), repr(err)
    assert str(err) == (
        f"Exporting the operator 'aten::asinh' to ONNX opset version {opset} is not supported"
    )


def test_the_gap_is_the_exporters_not_onnxs() -> None:
    assert oc.onnx_schema_since("Asinh") == 9
    assert oc.onnx_schema_since("NoSuchOp") is None
    assert oc.legacy_symbolic_opsets("aten::asinh") == []
    assert oc.legacy_symbolic_opsets("aten::asin")[0] == 7


def test_failing_legacy_export_writes_nothing_to_fd1(capfd) -> None:
    # without the silencer, torch's C++ logger writes the graph to file descriptor 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(torch.onnx.errors.UnsupportedOperatorError):
            torch.onnx.export(oc.AsinhModel(), (X,), io.BytesIO(), dynamo=False)
    assert "Torch IR graph at exception" in capfd.readouterr().out
    assert oc.legacy_export_error(oc.AsinhModel(), (X,), 17) is not None
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


@pytest.mark.parametrize("opset", [9, 17])
def test_register_custom_op_symbolic_standard_op(opset: int) -> None:
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_standard, 9):
        model_proto = oc.legacy_export(oc.AsinhModel(), (X,), opset_version=opset)
    assert list_ops(model_proto) == {"Asinh": 1}
    _assert_matches_asinh(model_proto)
    # the context manager leaves the registry as it found it
    err = oc.legacy_export_error(oc.AsinhModel(), (X,), opset)
    assert isinstance(err, torch.onnx.errors.UnsupportedOperatorError)


def test_register_custom_op_symbolic_composite() -> None:
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_composite, 9):
        model_proto = oc.legacy_export(oc.AsinhModel(), (X,))
    assert set(list_ops(model_proto)) == {"Constant", "Mul", "Add", "Sqrt", "Log"}
    _assert_matches_asinh(model_proto)


def test_unregister_leaves_an_entry_that_breaks_the_next_error() -> None:
    torch.onnx.register_custom_op_symbolic("aten::asinh", oc.asinh_symbolic_standard, 9)
    torch.onnx.unregister_custom_op_symbolic("aten::asinh", 9)
    try:
        err = oc.legacy_export_error(oc.AsinhModel(), (X,), 17)
        assert isinstance(err, ValueError) and "empty sequence" in str(err)
    finally:
        assert oc.forget_custom_symbolic("aten::asinh")
    assert not oc.forget_custom_symbolic("aten::asinh")  # nothing left to remove
    err = oc.legacy_export_error(oc.AsinhModel(), (X,), 17)
    assert isinstance(err, torch.onnx.errors.UnsupportedOperatorError)


@pytest.fixture(scope="module")
def legacy_custom_domain():
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_custom_domain, 9):
        return oc.legacy_export(oc.AsinhModel(), (X,), custom_opsets={oc.CUSTOM_DOMAIN: 1})


def test_custom_domain_node_schema(legacy_custom_domain) -> None:
    assert oc.node_schema(legacy_custom_domain) == EXPECTED_SCHEMA
    assert oc.node_schema(legacy_custom_domain, custom_only=True) == EXPECTED_SCHEMA
    assert list_ops(legacy_custom_domain) == {"custom_domain::Asinh": 1}


def test_ort_has_no_kernel_for_custom_domain(legacy_custom_domain) -> None:
    err = oc.ort_error(legacy_custom_domain, X)
    assert err is not None and ORT_NO_KERNEL in err


def test_function_body_makes_custom_domain_run(legacy_custom_domain) -> None:
    with_body = oc.attach_function_body(legacy_custom_domain)
    assert [f"{f.domain}::{f.name}" for f in with_body.functions] == ["custom_domain::Asinh"]
    assert not legacy_custom_domain.functions  # the original is not modified
    assert oc.ort_error(with_body, X) is None
    _assert_matches_asinh(with_body)


def test_legacy_export_custom_opsets_version_and_names() -> None:
    """custom_opsets sets the domain's version; extra keywords (input_names) reach the exporter."""
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_custom_domain, 9):
        model_proto = oc.legacy_export(
            oc.AsinhModel(),
            (X,),
            custom_opsets={oc.CUSTOM_DOMAIN: 2},
            input_names=["x"],
            output_names=["y"],
        )
    versions = {o.domain: o.version for o in model_proto.opset_import}
    assert versions == {"": 17, oc.CUSTOM_DOMAIN: 2}
    assert [i.name for i in model_proto.graph.input] == ["x"]
    assert [o.name for o in model_proto.graph.output] == ["y"]
    _assert_matches_asinh(oc.attach_function_body(model_proto))


def test_autograd_function_forward_backward_and_old_export() -> None:
    x = X.double().requires_grad_()
    assert torch.autograd.gradcheck(oc.AsinhFunction.apply, (x,))
    torch.testing.assert_close(oc.AsinhFunctionModel()(X), torch.asinh(X))
    model_proto = oc.legacy_export(oc.AsinhFunctionModel(), (X,))
    assert "Log" in list_ops(model_proto) and "Asinh" not in list_ops(model_proto)
    _assert_matches_asinh(model_proto)


# --------------------------------------------------------------------------- new exporter


def test_dynamo_ignores_autograd_function_symbolic() -> None:
    model_proto = export_onnx(oc.AsinhFunctionModel(), (X,))
    assert list_ops(model_proto) == {"Asinh": 1}  # traced forward, default translation
    _assert_matches_asinh(model_proto)


def test_custom_translation_table() -> None:
    table = {torch.ops.aten.asinh.default: oc.asinh_translation_composite}
    model_proto = export_onnx(oc.AsinhModel(), (X,), custom_translation_table=table)
    assert set(list_ops(model_proto)) == {"Mul", "Add", "Sqrt", "Log"}
    _assert_matches_asinh(model_proto)


@pytest.fixture(scope="module")
def symbolic_export():
    return export_onnx(oc.SymbolicAsinhModel(), (X,))


def test_onnx_ops_symbolic_node(symbolic_export) -> None:
    torch.testing.assert_close(oc.SymbolicAsinhModel()(X), torch.asinh(X))  # eager branch
    assert oc.node_schema(symbolic_export) == EXPECTED_SCHEMA
    err = oc.ort_error(symbolic_export, X)
    assert err is not None and ORT_NO_KERNEL in err
    _assert_matches_asinh(oc.attach_function_body(symbolic_export))


def test_custom_op_eager_and_fake() -> None:
    torch.testing.assert_close(oc.CustomOpAsinhModel()(X), torch.asinh(X))
    torch.library.opcheck(oc.asinh_op, (X,), test_utils=("test_schema", "test_faketensor"))


def test_custom_op_needs_a_translation() -> None:
    err = oc.dynamo_export_error(oc.CustomOpAsinhModel(), (X,))
    assert err is not None
    assert "No ONNX function found for <OpOverload(op='nb11.asinh'" in str(err)


def test_custom_op_with_translation() -> None:
    model_proto = export_onnx(
        oc.CustomOpAsinhModel(), (X,), custom_translation_table=oc.CUSTOM_OP_TABLE
    )
    assert list_ops(model_proto) == {"Asinh": 1}
    _assert_matches_asinh(model_proto, oc.CustomOpAsinhModel())


# --------------------------------------------------------------------------- then vs now


def test_then_vs_now_probes() -> None:
    assert oc.api_present("torch.onnx.register_custom_op_symbolic")
    assert oc.api_present("torch.onnx.ops.symbolic")
    assert not oc.api_present("torch.onnx.dynamo_export")
    assert not oc.api_present("torch.onnx.OnnxRegistry")
    assert oc.api_present("export(custom_translation_table=)")
    assert not oc.api_present("export(fallback=)")
    assert oc.api_present("torch.onnx.ONNXProgram.apply_weights")  # enable_fake_mode's row
    with pytest.raises(ValueError, match="not a dotted name"):
        oc.api_present("helper")
    rows = oc.then_vs_now_rows()
    assert len(rows) == len(oc.THEN_VS_NOW)
    statuses = {s for _, old, _, new in rows for s in (old, new)}
    assert statuses <= {"present", "gone", "-"}, statuses
    found = {old: (status, new_status) for old, status, _, new_status in rows}
    assert found == oc.then_vs_now_expected()


def test_presence_probe_imports_submodules(monkeypatch) -> None:
    """The bug this replaced: hasattr on a package misses a submodule nobody imported yet."""
    import sys

    import torch.onnx

    monkeypatch.delitem(sys.modules, "torch.onnx.symbolic_opset11", raising=False)
    monkeypatch.delattr(torch.onnx, "symbolic_opset11", raising=False)
    assert not hasattr(torch.onnx, "symbolic_opset11")  # what the old probe saw
    assert oc.api_present("torch.onnx.symbolic_opset11")  # the compatibility module exists


def test_then_vs_now_expected_flags_a_changed_api(monkeypatch) -> None:
    import torch.onnx

    monkeypatch.setattr(torch.onnx, "dynamo_export", lambda *a: None, raising=False)
    found = {old: status for old, status, _, _ in oc.then_vs_now_rows()}
    assert found["torch.onnx.dynamo_export"] == "present"
    assert oc.then_vs_now_expected()["torch.onnx.dynamo_export"][0] == "gone"


def test_show_then_vs_now_prints_a_table(capsys) -> None:
    oc.show_then_vs_now()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("then (old API)") and len(lines) == len(oc.THEN_VS_NOW) + 1


# --------------------------------------------------------------------------- exercise


def test_resize_semantics() -> None:
    img = torch.arange(25.0).reshape(1, 1, 5, 5)
    assert not oc.interpolate_matches(img, 8, "nearest")  # ONNX defaults != torch nearest
    assert oc.interpolate_matches(img, 8, "nearest-exact")
    assert oc.matching_resize_attrs("nearest") == [
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    ]
    assert oc.matching_resize_attrs("bilinear", True) == [
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    ]
    half = {d["coordinate_transformation_mode"] for d in oc.matching_resize_attrs("bilinear")}
    assert half == {"half_pixel", "pytorch_half_pixel"}
    assert oc.resize_in_ort(img, 3, mode="linear").shape == (1, 1, 3, 3)


# ------------------------------------------ stubs, fake kernels, symbolics, onnxruntime-extensions


def test_stub_signatures_read_the_installed_stubs() -> None:
    stubs = oc.stub_signatures("asinh")
    assert (
        "torch/_C/_VariableFunctions.pyi",
        "def asinh(input: Tensor, *, out: Tensor | None = None) -> Tensor:",
    ) in stubs
    assert ("torch/_C/__init__.pyi", "def asinh(self) -> Tensor:") in stubs
    assert oc.stub_signatures("no_such_op_anywhere") == []
    assert all(not line.startswith("def asinh_(") for _, line in stubs)  # exact name only


def test_ort_error_without_inputs_builds_the_session_only(legacy_custom_domain) -> None:
    err = oc.ort_error(legacy_custom_domain)
    assert err is not None and ORT_NO_KERNEL in err
    assert oc.ort_error(export_onnx(oc.AsinhModel(), (X,))) is None


def test_custom_op_export_calls_the_fake_implementation() -> None:
    before = oc.asinh_op_fake_calls()
    export_onnx(oc.CustomOpAsinhModel(), (X,), custom_translation_table=oc.CUSTOM_OP_TABLE)
    assert oc.asinh_op_fake_calls() > before


def test_untyped_custom_symbolic_loses_the_static_shape_and_warns() -> None:
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_untyped, 9):
        model_proto = oc.legacy_export(oc.AsinhModel(), (X,))
    dims = model_proto.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in dims] == [True, True]
    assert {o.domain: o.version for o in model_proto.opset_import}[oc.CUSTOM_DOMAIN] == 1
    warnings_ = oc.native_warnings()
    assert any("shape inference of custom_domain::Asinh" in w for w in warnings_), warnings_
    assert not any(w.startswith("[W") for w in warnings_), "c10 prefix not stripped"


@pytest.fixture(scope="module")
def library() -> str:
    return oc.ort_extensions_library()


def test_extensions_library_is_registered_once(library) -> None:
    assert oc.ort_extensions_library() == library
    import onnxruntime_extensions

    assert onnxruntime_extensions.default_opset_domain() == oc.CONTRIB_DOMAIN


def test_old_exporter_contrib_domain_runs_with_extensions(library) -> None:
    with oc.registered_symbolic("aten::asinh", oc.asinh_symbolic_contrib, 9):
        model_proto = oc.legacy_export(oc.AsinhModel(), (X,), custom_opsets={oc.CONTRIB_DOMAIN: 1})
    assert list_ops(model_proto) == {"ai.onnx.contrib::Asinh": 1}
    calls = oc.contrib_kernel_calls()
    report = verify_with_ort(model_proto, torch.asinh, X, custom_ops_library=library)
    assert report.passed, str(report)
    assert oc.contrib_kernel_calls() == calls + 1
    err = oc.ort_error(model_proto, X)  # without the library
    assert err is not None and "ai.onnx.contrib:Asinh(-1) is not a registered" in err


def test_custom_domain_is_refused_even_with_the_extensions_library(
    legacy_custom_domain, library
) -> None:
    err = oc.ort_error(legacy_custom_domain, X, custom_ops_library=library)
    assert err is not None and ORT_NO_KERNEL in err


def test_onnx_ops_symbolic_contrib_runs_with_extensions_or_a_body(library) -> None:
    model_proto = export_onnx(oc.SymbolicAsinhModel(oc.CONTRIB_DOMAIN), (X,))
    assert oc.node_schema(model_proto)[0]["domain"] == oc.CONTRIB_DOMAIN
    report = verify_with_ort(model_proto, torch.asinh, X, custom_ops_library=library)
    assert report.passed, str(report)
    with_body = oc.attach_function_body(model_proto, domain=oc.CONTRIB_DOMAIN)
    _assert_matches_asinh(with_body)  # no library: the body runs
    calls = oc.contrib_kernel_calls()
    report = verify_with_ort(with_body, torch.asinh, X, custom_ops_library=library)
    assert report.passed and oc.contrib_kernel_calls() == calls + 1  # the kernel wins
