"""helpers.operator_path against PyTorch's own sources of truth (notebook 18).

The YAML readers are checked against a plain YAML load of the same packaged files, the
dispatch-table parser against the dispatcher's own queries, the derivative entry against the
grad_fn autograd builds, the Inductor route against Inductor's tables; plus the error cases:
missing YAMLs, an unknown operator, a dump line the parser does not understand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from helpers import operator_path
from helpers.operator_path import PACKAGED_YAMLS, PackagedYamlMissing

try:
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader


def _yaml(rel: str) -> list[dict]:
    return yaml.load(operator_path.packaged_yamls()[rel].read_text(), Loader=_Loader)


def test_packaged_yamls_are_found_in_the_wheel() -> None:
    paths = operator_path.packaged_yamls()
    assert sorted(paths) == sorted(PACKAGED_YAMLS)
    assert all(p.is_file() and p.parent.parent.name in ("ATen", "packaged") for p in paths.values())


def test_missing_yamls_are_named(tmp_path: Path) -> None:
    root = tmp_path / "packaged"
    (root / "ATen/native").mkdir(parents=True)
    shutil.copy(operator_path.packaged_yamls()["ATen/native/tags.yaml"], root / "ATen/native")
    with pytest.raises(PackagedYamlMissing) as info:
        operator_path.packaged_yamls(root)
    message = str(info.value)
    assert isinstance(info.value, AssertionError) and isinstance(info.value, FileNotFoundError)
    assert "ATen/native/native_functions.yaml" in message and "autograd/derivatives.yaml" in message
    assert "missing ['ATen/native/native_functions.yaml', 'autograd/derivatives.yaml']" in message
    assert "holds ['ATen/native/tags.yaml']" in message  # what is there instead
    assert torch.__version__ in message and str(tmp_path) not in message


def test_an_empty_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(PackagedYamlMissing, match="no YAML files"):
        operator_path.packaged_yamls(tmp_path)


def test_native_entry_matches_the_yaml_text() -> None:
    entries = {e["func"].split("(")[0]: e for e in _yaml("ATen/native/native_functions.yaml")}
    entry = operator_path.native_entry("atan")
    assert entries["atan"]["structured_delegate"] == entry["structured_delegate"] == "atan.out"
    out = entries["atan.out"]
    assert out["structured"] is True and out["structured_inherits"] == "TensorIteratorBase"
    delegate = entry["delegate"]
    assert (delegate["structured"], delegate["structured_inherits"]) == (True, "TensorIteratorBase")
    # the YAML's dispatch: section, keys split on commas, is what torchgen's backend indices hold
    raw = {}
    for keys, kernel in out["dispatch"].items():
        for key in keys.split(","):
            raw[key.strip()] = kernel
    assert {k: v["kernel"] for k, v in delegate["dispatch"].items()} == raw
    assert delegate["dispatch"]["CPU"] == {"kernel": "atan_out", "structured": True}


def test_native_entry_of_an_op_without_delegate() -> None:
    entry = operator_path.native_entry("logit")
    assert entry["structured_delegate"] is None and entry["delegate"] is None
    assert entry["dispatch"]["CPU"]["kernel"] == "logit"


def test_unknown_operator_names_the_closest() -> None:
    with pytest.raises(LookupError, match=r"'atann'.*closest: \[.*'atan'"):
        operator_path.native_entry("atann")


def test_derivative_entry_matches_yaml_and_autograd() -> None:
    raw = {e["name"]: e for e in _yaml("autograd/derivatives.yaml")}
    entry = operator_path.derivative_entry("atan")
    assert entry["formulas"] == {"self": raw["atan(Tensor self) -> Tensor"]["self"]}
    x = torch.randn(3, requires_grad=True)
    assert type(torch.atan(x).grad_fn).__name__ == entry["node"] == "AtanBackward0"
    assert entry["saved"] == ["self"]
    # an op whose formula uses the result saves `result`, not the input
    tanh = operator_path.derivative_entry("tanh")
    assert tanh["saved"] == [] and "result" in tanh["formulas"]["self"]
    assert type(torch.tanh(x).grad_fn).__name__ == tanh["node"]


def test_dispatch_table_agrees_with_the_dispatcher() -> None:
    table = operator_path.dispatch_table("aten::atan")
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for key in ("CPU", "Meta", "FuncTorchBatched"):
        assert table[key].kind == "kernel" and has_kernel("aten::atan", key)
    assert not has_kernel("aten::atan", "CompositeImplicitAutograd")
    assert table["ADInplaceOrView"].fallthrough and table["AutocastCPU"].fallthrough
    assert not table["CPU"].fallthrough
    assert table["CPU"].generated and table["CPU"].file.startswith(
        "build/aten/src/ATen/RegisterCPU"
    )
    assert table["Meta"].file == "torch/_meta_registrations.py" and not table["Meta"].generated
    assert all(not r.file.startswith("/") for r in table.values()), "a machine path leaked"


def test_registration_links_are_pinned_and_skip_generated_files() -> None:
    table = operator_path.dispatch_table("aten::atan")
    assert operator_path.registration_link(table["CPU"]) is None
    link = operator_path.registration_link(table["FuncTorchBatched"])
    line = table["FuncTorchBatched"].line
    assert link == (
        f"https://github.com/pytorch/pytorch/blob/{torch.version.git_version}/"
        f"aten/src/ATen/functorch/BatchRulesUnaryOps.cpp#L{line}-L{line}"
    )


def test_a_line_the_parser_does_not_know_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch._C, "_dispatch_dump_table", lambda op: "CPU: somewhere else\n")
    with pytest.raises(ValueError, match="found 'CPU: somewhere else'"):
        operator_path.dispatch_table("aten::atan")
    monkeypatch.setattr(torch._C, "_dispatch_dump_table", lambda op: "\n")
    with pytest.raises(ValueError, match="empty dump"):
        operator_path.dispatch_table("aten::atan")


def test_call_path_follows_the_include_and_exclude_sets() -> None:
    x = torch.ones(2, requires_grad=True)
    path = operator_path.call_path("aten::atan", x)
    keys = [key for key, _ in path]
    # BackendSelect is in no tensor's key set: it comes from the thread-local include set
    assert "BackendSelect" not in str(torch._C._dispatch_keys(x))
    assert keys == ["AutogradCPU", "ADInplaceOrView", "BackendSelect", "CPU"]
    assert [r.fallthrough for _, r in path] == [False, True, True, False]
    with torch.autocast(device_type="cpu"):  # autocast on: its key leaves the exclude set
        keys = [key for key, _ in operator_path.call_path("aten::atan", x)]
    assert keys == ["AutocastCPU", "AutogradCPU", "ADInplaceOrView", "BackendSelect", "CPU"]
    # the dispatcher's own choice: the highest non-fallthrough key of the same set
    table = operator_path.dispatch_table("aten::atan")
    first = next(key for key, r in path if not table[key].fallthrough)
    assert first == "AutogradCPU"


def test_inductor_route_against_inductor_tables() -> None:
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import lowerings

    atan = operator_path.inductor_route(torch.ops.aten.atan.default)
    assert atan == {
        "decomposed": False,
        "lowered": True,
        "in_decomposition_table": True,
        "scalar": "std::atan(tmp0)",
        "vector": "tmp0.atan()",
    }
    silu = torch.ops.aten.silu.default
    route = operator_path.inductor_route(silu)
    assert route["decomposed"] == (silu in select_decomp_table()) is True
    assert route["lowered"] == (silu in lowerings)


def test_computing_lines_finds_both_forms() -> None:
    route = operator_path.inductor_route(torch.ops.aten.atan.default)
    kernel = "auto tmp0 = in_ptr0[x0];\nauto tmp1 = std::atan(tmp0);\nauto tmp7 = tmp3.atan();\n"
    assert operator_path.computing_lines(kernel, route) == [
        "auto tmp1 = std::atan(tmp0);",
        "auto tmp7 = tmp3.atan();",
    ]
    assert operator_path.computing_lines("auto tmp1 = std::atanh(tmp0);", route) == []
    with pytest.raises(ValueError, match="neither"):
        operator_path.computing_lines(kernel, {"scalar": None, "vector": None})


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="a torch built without MKL")
def test_mkl_atan_is_what_eager_atan_runs_and_refuses_other_inputs() -> None:
    import math

    x = torch.linspace(-10, 10, 1 << 16)
    mkl = operator_path.mkl_atan(x)
    # eager's float kernel calls vml::vatan, which an MKL build specialises to vmsAtan
    assert torch.equal(mkl, torch.atan(x))
    assert abs(mkl[-1].item() - math.atan(10.0)) < 1e-6
    # the wrong world: another libm's atan differs from MKL's in the last bit somewhere
    import numpy as np

    assert not np.array_equal(mkl.numpy(), np.arctan(x.numpy()))
    for bad in (x.double(), x[::2], x.to(torch.float16)):
        with pytest.raises(ValueError, match="contiguous float32 CPU tensor"):
            operator_path.mkl_atan(bad)


def test_mkl_atan_names_a_library_without_the_symbol(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    class NoSymbols:
        def __init__(self, name: str) -> None:
            pass

        def __getattr__(self, name: str) -> None:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoSymbols)
    with pytest.raises(LookupError, match="vsAtan"):
        operator_path.mkl_atan(torch.ones(3))


def test_layers_svg_is_deterministic_and_escaped() -> None:
    layers = [("a <b>", "x & y"), ("c", "d")]
    svg = operator_path.layers_svg(layers, title="t")
    assert svg == operator_path.layers_svg(layers, title="t")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "a &lt;b&gt;" in svg and "x &amp; y" in svg and svg.count("<rect") == 3
    with pytest.raises(ValueError, match="at least one"):
        operator_path.layers_svg([])
