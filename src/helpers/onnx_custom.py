"""Custom operators in ONNX export: one op (asinh) added every way the installed torch allows.

Used by: notebooks 11 (ONNX custom operators) and 10 (`legacy_symbolic_opsets`,
`onnx_schema_since`). CPU only; ONNX Runtime runs on its CPU provider.

The running example is `torch.asinh`, the operator of the well-known OpenMMLab/mmdeploy
deployment tutorial: ONNX has had a standard `Asinh` op since opset 9, yet the TorchScript
exporter (`dynamo=False`) never got a symbolic function for `aten::asinh`, so it fails at every
opset. The routes gathered here:

- old exporter: `torch.onnx.register_custom_op_symbolic` with `g.op()` emitting a standard op
  (`asinh_symbolic_standard`), a chain of standard ops (`asinh_symbolic_composite`) or a
  custom-domain op (`asinh_symbolic_custom_domain`, `asinh_symbolic_contrib`);
  `torch.autograd.Function.symbolic` (`AsinhFunction`);
- new exporter (`dynamo=True`): `custom_translation_table` with plain functions over onnxscript
  ops (`asinh_translation*`), `torch.onnx.ops.symbolic` inside `forward`
  (`SymbolicAsinhModel`), and a `torch.library.custom_op` with a fake implementation
  (`asinh_op`, `CustomOpAsinhModel`, `CUSTOM_OP_TABLE`).

Custom-domain nodes run in ONNX Runtime two ways: a Python kernel registered through
onnxruntime-extensions (`ort_extensions_library`; its Python ops live in the domain
`ai.onnx.contrib`, so those models are exported into that domain), or an ONNX function body of
standard ops stored in the model (`attach_function_body`).

Exports go through `helpers.onnx_tools.export_onnx` (quiet). The TorchScript exporter also
writes "Torch IR graph at exception" from C++ straight to file descriptor 1 when an export fails:
its `setup_onnx_logging` tests the function `_C._jit_is_onnx_log_enabled` instead of calling
it, so every export switches that log on and none switches it off. A notebook would show the
graph as cell output: `legacy_export_error` silences that descriptor around the call.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper
from onnxscript import opset18 as op

from helpers.claims import present
from helpers.onnx_tools import _session, as_model_proto, export_onnx, quiet_onnx, run_ort

__all__ = [
    "CUSTOM_DOMAIN",
    "CONTRIB_DOMAIN",
    "AsinhModel",
    "stub_signatures",
    "sample_input",
    "legacy_export",
    "legacy_export_error",
    "native_warnings",
    "legacy_symbolic_opsets",
    "registered_symbolic",
    "forget_custom_symbolic",
    "asinh_symbolic_standard",
    "asinh_symbolic_composite",
    "asinh_symbolic_custom_domain",
    "asinh_symbolic_contrib",
    "asinh_symbolic_untyped",
    "AsinhFunction",
    "AsinhFunctionModel",
    "asinh_translation",
    "asinh_translation_composite",
    "SymbolicAsinhModel",
    "asinh_op",
    "asinh_op_fake_calls",
    "CustomOpAsinhModel",
    "CUSTOM_OP_TABLE",
    "dynamo_export_error",
    "node_schema",
    "ort_error",
    "ort_extensions_library",
    "contrib_kernel_calls",
    "attach_function_body",
    "onnx_schema_since",
    "THEN_VS_NOW",
    "api_present",
    "then_vs_now_rows",
    "then_vs_now_expected",
    "show_then_vs_now",
    "resize_in_ort",
    "interpolate_matches",
    "matching_resize_attrs",
]

CUSTOM_DOMAIN = "custom_domain"
# the domain onnxruntime-extensions registers its Python kernels in (its C++ library fixes it:
# `onnxruntime_extensions.default_opset_domain()`; `Opdef.create` takes no domain)
CONTRIB_DOMAIN = "ai.onnx.contrib"
# an attribute the custom node carries to its kernel (a string, as plugin versions often are)
PLUGIN_VERSION = "1"


class _InferenceModule(torch.nn.Module):
    """Starts in eval mode: the dynamo exporter warns about exporting in training mode."""

    def __init__(self) -> None:
        super().__init__()
        self.eval()


class AsinhModel(_InferenceModule):
    """y = asinh(x): the one-op model every route exports."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.asinh(x)


def sample_input() -> torch.Tensor:
    """A fixed (3, 4) input spanning negative and positive values (no randomness)."""
    return torch.linspace(-6.0, 6.0, 12).reshape(3, 4)


def stub_signatures(name: str) -> list[tuple[str, str]]:
    """Every `def name(` line in the installed torch's generated stubs (`torch/_C/*.pyi`,
    `torch/_VF.pyi`): (path inside the package, the line). The stubs are generated at build
    time by `tools/pyi/gen_pyi.py` (their first line says so); `_VariableFunctions.pyi` holds
    the `torch.*` functions, `_C/__init__.pyi` the `TensorBase` methods."""
    root = Path(torch.__file__).parent
    files = sorted((root / "_C").glob("*.pyi")) + [root / "_VF.pyi"]
    pattern = re.compile(rf"^\s*def {re.escape(name)}\(")
    found = []
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if pattern.match(line):
                found.append((path.relative_to(root.parent).as_posix(), line.strip()))
    return found


# --------------------------------------------------------------------------- old exporter


@contextlib.contextmanager
def _fd1_silenced() -> Iterator[None]:
    """Point file descriptor 1 at /dev/null: C++ writes there, bypassing `sys.stdout`."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


# c10's log prefix: severity + date, time, source file and line ("[W1201 02:45:24.83 x.cpp:12] ")
_NATIVE_PREFIX = re.compile(r"^\[[WEIF]\d{4} [\d:.]+ [\w./-]+:\d+\] ")
_NATIVE_LINES: list[str] = []


@contextlib.contextmanager
def _fd2_captured(sink: list[str]) -> Iterator[None]:
    """Point file descriptor 2 at a temporary file; afterwards append its lines to `sink`.

    C++ warnings (c10's `TORCH_WARN` without a Python handler) go to descriptor 2 with a
    timestamp, which nbval could never compare; the caller gets them as data instead.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.extend(tmp.read().decode(errors="replace").splitlines())


def legacy_export(
    model: torch.nn.Module,
    args: Any,
    *,
    opset_version: int = 17,
    custom_opsets: dict[str, int] | None = None,
    **kwargs: Any,
) -> onnx.ModelProto:
    """Export with the TorchScript exporter (`dynamo=False`), quietly; return the ModelProto.

    Other keyword arguments (`input_names`, `output_names`, ...) go to `torch.onnx.export`.
    What its C++ side wrote to descriptor 2 is kept for `native_warnings()`.
    """
    if custom_opsets:
        kwargs["custom_opsets"] = custom_opsets
    _NATIVE_LINES.clear()
    with _fd1_silenced(), _fd2_captured(_NATIVE_LINES):
        return export_onnx(model, args, dynamo=False, opset_version=opset_version, **kwargs)


def native_warnings() -> list[str]:
    """What the last `legacy_export` wrote to descriptor 2, without c10's timestamp prefix."""
    return [_NATIVE_PREFIX.sub("", line) for line in _NATIVE_LINES if line.strip()]


def legacy_export_error(
    model: torch.nn.Module, args: Any, opset_version: int
) -> BaseException | None:
    """The exception the TorchScript exporter raises for `model(*args)`, or None if it exports."""
    try:
        legacy_export(model, args, opset_version=opset_version)
    except Exception as err:  # the error is the result
        return err
    return None


def _legacy_opsets() -> range:
    """The opsets the TorchScript exporter accepts (`torch.onnx._constants`)."""
    from torch.onnx import _constants

    return range(_constants.ONNX_MIN_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET + 1)


def _legacy_registry():
    from torch.onnx._internal.torchscript_exporter import registration

    for version in _legacy_opsets():  # each symbolic_opsetN module registers on import
        with contextlib.suppress(ImportError):
            importlib.import_module(
                f"torch.onnx._internal.torchscript_exporter.symbolic_opset{version}"
            )
    return registration.registry


def legacy_symbolic_opsets(name: str, opsets: range | None = None) -> list[int]:
    """The opsets (default: all the TorchScript exporter accepts) at which its registry finds a
    symbolic function for `name` (`registry.is_registered_op`, which dispatches by opset)."""
    registry = _legacy_registry()
    return [v for v in (opsets or _legacy_opsets()) if registry.is_registered_op(name, v)]


def forget_custom_symbolic(name: str) -> bool:
    """Drop the empty function group `unregister_custom_op_symbolic` leaves behind.

    After register + unregister, the group for `name` stays in the registry with no function,
    and the next failing export raises `ValueError: min() arg is an empty sequence` instead of
    `UnsupportedOperatorError`. Returns True if an empty group was removed.
    """
    registry = _legacy_registry()
    group = registry.get_function_group(name)
    if group is not None and len(group._functions) == 0:
        del registry._registry[name]
        return True
    return False


@contextlib.contextmanager
def registered_symbolic(name: str, fn: Callable, opset_version: int = 9) -> Iterator[None]:
    """`register_custom_op_symbolic` for the duration of a `with` block, then clean up fully."""
    with quiet_onnx():
        torch.onnx.register_custom_op_symbolic(name, fn, opset_version)
    try:
        yield
    finally:
        with quiet_onnx():
            torch.onnx.unregister_custom_op_symbolic(name, opset_version)
        forget_custom_symbolic(name)


def asinh_symbolic_standard(g, x):
    """aten::asinh -> the standard ONNX `Asinh` op (defined since opset 9)."""
    return g.op("Asinh", x)


def asinh_symbolic_composite(g, x):
    """aten::asinh -> log(x + sqrt(x*x + 1)) from standard ops (loses digits for x << 0)."""
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Log", g.op("Add", x, root))


def asinh_symbolic_custom_domain(g, x, domain: str = CUSTOM_DOMAIN):
    """aten::asinh -> `custom_domain::Asinh`: a node a runtime must supply a kernel for."""
    # ONNX shape inference knows nothing of a custom op: without setType the output keeps
    # only the traced dtype and rank; copying the input's type keeps the static shape too
    return g.op(f"{domain}::Asinh", x, plugin_version_s=PLUGIN_VERSION).setType(x.type())


def asinh_symbolic_contrib(g, x):
    """aten::asinh -> `ai.onnx.contrib::Asinh`: the domain onnxruntime-extensions serves."""
    return asinh_symbolic_custom_domain(g, x, domain=CONTRIB_DOMAIN)


def asinh_symbolic_untyped(g, x):
    """`custom_domain::Asinh` without `setType`: what the exporter infers on its own."""
    return g.op(f"{CUSTOM_DOMAIN}::Asinh", x, plugin_version_s=PLUGIN_VERSION)


class AsinhFunction(torch.autograd.Function):
    """asinh with its own backward and an ONNX `symbolic` (used by the old exporter only)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.asinh(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.rsqrt(x * x + 1)  # d/dx asinh(x) = 1 / sqrt(x^2 + 1)

    @staticmethod
    def symbolic(g, x):
        # a chain of standard ops, so the exported graph shows which translation was used
        return asinh_symbolic_composite(g, x)


class AsinhFunctionModel(_InferenceModule):
    """y = AsinhFunction.apply(x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return AsinhFunction.apply(x)


# --------------------------------------------------------------------------- new exporter


def asinh_translation(x):
    """aten.asinh -> ONNX `Asinh`, written over onnxscript ops (a plain function, no @script)."""
    return op.Asinh(x)


def asinh_translation_composite(x):
    """aten.asinh -> log(x + sqrt(x*x + 1)) over onnxscript ops (visibly not the default)."""
    one = op.CastLike(1.0, x)
    return op.Log(op.Add(x, op.Sqrt(op.Add(op.Mul(x, x), one))))


class SymbolicAsinhModel(_InferenceModule):
    """asinh in eager mode; a `<domain>::Asinh` node when exported (dynamo exporter)."""

    def __init__(self, domain: str = CUSTOM_DOMAIN) -> None:
        super().__init__()
        self.domain = domain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.onnx.is_in_onnx_export():
            # eager `torch.onnx.ops.symbolic` returns zeros of the given shape: export only
            return torch.onnx.ops.symbolic(
                f"{self.domain}::Asinh",
                (x,),
                {"plugin_version": PLUGIN_VERSION},
                dtype=x.dtype,
                shape=x.shape,
                version=1,
            )
        return torch.asinh(x)


@torch.library.custom_op("nb11::asinh", mutates_args=())
def asinh_op(x: torch.Tensor) -> torch.Tensor:
    """A custom operator `nb11::asinh` (an opaque kernel to torch.export)."""
    return torch.asinh(x)


_FAKE_CALLS = [0]


@asinh_op.register_fake
def _asinh_op_fake(x: torch.Tensor) -> torch.Tensor:
    # shapes and dtypes only: what torch.export traces with
    _FAKE_CALLS[0] += 1
    return torch.empty_like(x)


def asinh_op_fake_calls() -> int:
    """How often the fake implementation of `nb11::asinh` has run in this process."""
    return _FAKE_CALLS[0]


class CustomOpAsinhModel(_InferenceModule):
    """y = torch.ops.nb11.asinh(x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return asinh_op(x)


CUSTOM_OP_TABLE: dict[Callable, Callable] = {torch.ops.nb11.asinh.default: asinh_translation}


def dynamo_export_error(model: torch.nn.Module, args: Any, **kwargs: Any) -> BaseException | None:
    """The exception the dynamo exporter raises for `model(*args)`, or None if it exports."""
    try:
        export_onnx(model, args, dynamo=True, **kwargs)
    except Exception as err:  # the error is the result
        return err
    return None


# --------------------------------------------------------------------------- checking


def node_schema(model: Any, *, custom_only: bool = False) -> list[dict[str, Any]]:
    """Each node's domain, op_type, version of its domain, input/output counts and attributes."""
    model_proto = as_model_proto(model)
    versions = {o.domain: o.version for o in model_proto.opset_import}
    rows = []
    for node in model_proto.graph.node:
        if custom_only and node.domain in ("", "ai.onnx"):
            continue
        attrs = {}
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            attrs[attr.name] = value.decode() if isinstance(value, bytes) else value
        rows.append(
            {
                "domain": node.domain or "ai.onnx",
                "op_type": node.op_type,
                "domain_version": versions.get(node.domain),
                "inputs": len(node.input),
                "outputs": len(node.output),
                "attributes": attrs,
            }
        )
    return rows


def ort_error(model: Any, *inputs: Any, custom_ops_library: str | None = None) -> str | None:
    """What ONNX Runtime says when it loads and runs `model`, or None when it runs.

    Without inputs it only builds the session (where unknown ops are refused).
    """
    try:
        if inputs:
            run_ort(model, *inputs, custom_ops_library=custom_ops_library)
        else:
            _session(model, custom_ops_library)
    except Exception as err:  # the message is the result
        return f"{type(err).__name__}: {err}"
    return None


_CONTRIB_CALLS = [0]


def _asinh_kernel(x: np.ndarray, plugin_version: str = PLUGIN_VERSION) -> np.ndarray:
    """The Python kernel behind `ai.onnx.contrib::Asinh` (float32 in, float32 out)."""
    _CONTRIB_CALLS[0] += 1
    return np.arcsinh(x)


@functools.cache
def ort_extensions_library() -> str:
    """Register the Python kernel for `ai.onnx.contrib::Asinh` (once per process) and return
    the onnxruntime-extensions library a session must load (`register_custom_ops_library`)."""
    from onnxruntime_extensions import PyOp, default_opset_domain, get_library_path, onnx_op

    if default_opset_domain() != CONTRIB_DOMAIN:
        raise RuntimeError(
            f"onnxruntime-extensions serves Python ops in {default_opset_domain()!r}, "
            f"this module exports into {CONTRIB_DOMAIN!r}"
        )
    onnx_op(
        op_type="Asinh",
        inputs=[PyOp.dt_float],
        outputs=[PyOp.dt_float],
        attrs={"plugin_version": PyOp.dt_string},
    )(_asinh_kernel)
    return get_library_path()


def contrib_kernel_calls() -> int:
    """How often ONNX Runtime has called the Python `ai.onnx.contrib::Asinh` kernel."""
    return _CONTRIB_CALLS[0]


def attach_function_body(
    model: Any, op_type: str = "Asinh", domain: str = CUSTOM_DOMAIN, body_op: str = "Asinh"
) -> onnx.ModelProto:
    """A copy of `model` that defines `domain::op_type` as a model-local ONNX function.

    The body is one standard op (`body_op`) over the default domain: a runtime without a
    kernel of its own for `domain::op_type` runs the body (notebook 11 checks both cases).
    """
    model_proto = onnx.ModelProto()
    model_proto.CopyFrom(as_model_proto(model))
    default = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
    attrs = sorted({a.name for n in model_proto.graph.node for a in n.attribute})
    body = [helper.make_node(body_op, ["X"], ["Y"])]
    fn = helper.make_function(
        domain, op_type, ["X"], ["Y"], body, [helper.make_opsetid("", default)], attributes=attrs
    )
    model_proto.functions.append(fn)
    return model_proto


def onnx_schema_since(op_type: str, domain: str = "") -> int | None:
    """The opset version that introduced `op_type` in ONNX, or None if ONNX has no such op."""
    versions = [
        s.since_version
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and s.domain == domain
    ]
    return min(versions, default=None)


# --------------------------------------------------------------------------- then vs now

# (old API, its probe, the probe's expected result, replacement, its probe). The expected results
# are the same in 2.13.0, 2.14.1 and 2.15.0 (notebook 11 asserts them on the installed release).
# A probe is a dotted name ("torch.onnx.dynamo_export": does it import / exist?), a parameter of
# torch.onnx.export ("export(fallback=)": does export still take it?) or "-" (nothing to probe).
THEN_VS_NOW: list[tuple[str, str, str, str, str]] = [
    (
        "torch.onnx.register_custom_op_symbolic",
        "torch.onnx.register_custom_op_symbolic",
        "present",
        "custom_translation_table={aten op: fn}",
        "export(custom_translation_table=)",
    ),
    (
        "torch.onnx.symbolic_helper.parse_args",
        "torch.onnx.symbolic_helper.parse_args",
        "present",
        "onnxscript function, attributes as arguments",
        "onnxscript.script",
    ),
    (
        "autograd.Function.symbolic",
        "-",
        "-",
        "torch.library.custom_op or torch.onnx.ops.symbolic",
        "torch.library.custom_op",
    ),
    (
        "export(custom_opsets=)",
        "export(custom_opsets=)",
        "present",
        "torch.onnx.ops.symbolic(version=)",
        "torch.onnx.ops.symbolic",
    ),
    (
        "export(operator_export_type=)",
        "export(operator_export_type=)",
        "present",
        "ignored by dynamo=True",
        "-",
    ),
    ("export(fallback=)", "export(fallback=)", "gone", "none: retry with dynamo=False", "-"),
    (
        "torch.onnx.dynamo_export",
        "torch.onnx.dynamo_export",
        "gone",
        "torch.onnx.export (dynamo=True default)",
        "torch.onnx.export",
    ),
    (
        "torch.onnx.OnnxRegistry",
        "torch.onnx.OnnxRegistry",
        "gone",
        "custom_translation_table=",
        "export(custom_translation_table=)",
    ),
    (
        "torch.onnx.ExportOptions",
        "torch.onnx.ExportOptions",
        "gone",
        "keyword arguments of export",
        "-",
    ),
    (
        "torch.onnx.enable_fake_mode",
        "torch.onnx.enable_fake_mode",
        "gone",
        "ONNXProgram.apply_weights(state_dict)",
        "torch.onnx.ONNXProgram.apply_weights",
    ),
    (
        "torch.onnx.symbolic_opset11",
        "torch.onnx.symbolic_opset11",
        "present",
        "compat module; new: onnxscript torch_lib",
        "onnxscript.function_libs.torch_lib.ops",
    ),
    (
        "torch.onnx.is_in_onnx_export",
        "torch.onnx.is_in_onnx_export",
        "present",
        "same, dynamo exports included",
        "torch.onnx.is_in_onnx_export",
    ),
]


def api_present(probe: str) -> bool:
    """Whether a dotted name exists (submodules imported: `helpers.claims.present`), or whether
    `torch.onnx.export` takes `export(name=)`."""
    param = re.fullmatch(r"export\((\w+)=\)", probe)
    if param:
        return param.group(1) in inspect.signature(torch.onnx.export).parameters
    if "." not in probe:
        raise ValueError(f"not a dotted name or export parameter: {probe!r}")
    return present(probe)


def _status(probe: str) -> str:
    return "-" if probe == "-" else ("present" if api_present(probe) else "gone")


def then_vs_now_rows() -> list[tuple[str, str, str, str]]:
    """THEN_VS_NOW probed live: (old API, its status, replacement, the replacement's status);
    a status is 'present', 'gone' or '-' (nothing to probe)."""
    return [(old, _status(p), new, _status(q)) for old, p, _, new, q in THEN_VS_NOW]


def then_vs_now_expected() -> dict[str, tuple[str, str]]:
    """Per old API: (its expected status, 'present' or '-' for the replacement)."""
    return {old: (exp, "-" if q == "-" else "present") for old, _, exp, _, q in THEN_VS_NOW}


def show_then_vs_now() -> None:
    """Print the then-vs-now table with the installed packages' status columns (headed
    "installed": the same table prints on every release, its statuses probed in this one)."""
    rows = [("then (old API)", "installed", "now", "installed"), *then_vs_now_rows()]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    w2 = max(len(r[2]) for r in rows)
    for old, status, new, new_status in rows:
        print(f"{old:<{w0}}  {status:<{w1}}  {new:<{w2}}  {new_status}")


# --------------------------------------------------------------------------- exercise: Resize


def resize_in_ort(
    x: torch.Tensor,
    size: int,
    *,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
) -> np.ndarray:
    """ONNX `Resize` of an (N, C, H, W) tensor to (size, size), run in ONNX Runtime.

    Defaults are ONNX's own defaults, i.e. what a runtime does when an exporter leaves the
    attributes out. `mode` is ONNX's: "nearest", "linear" or "cubic".
    """
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinate_transformation_mode}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    n, c = x.shape[:2]
    node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], **attrs)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor("sizes", onnx.TensorProto.INT64, [4], [n, c, size, size])],
    )
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return run_ort(model_proto, x)[0]


def interpolate_matches(
    x: torch.Tensor,
    size: int,
    torch_mode: str,
    align_corners: bool | None = None,
    **resize_attrs: str,
) -> bool:
    """Whether `F.interpolate(x, size, torch_mode, align_corners)` equals ORT's Resize."""
    expected = torch.nn.functional.interpolate(
        x, size=(size, size), mode=torch_mode, align_corners=align_corners
    ).numpy()
    actual = resize_in_ort(x, size, **resize_attrs)
    return actual.shape == expected.shape and bool(np.allclose(actual, expected, atol=1e-5))


_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def matching_resize_attrs(
    torch_mode: str, align_corners: bool | None = None, in_size: int = 5, out_size: int = 8
) -> list[dict[str, str]]:
    """Every Resize attribute set that reproduces `F.interpolate` on an in_size->out_size image."""
    x = torch.arange(float(in_size * in_size)).reshape(1, 1, in_size, in_size)
    onnx_mode = {"nearest": "nearest", "nearest-exact": "nearest", "bilinear": "linear"}[torch_mode]
    rounding = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
    candidates = [
        {"mode": onnx_mode, "coordinate_transformation_mode": ctm}
        | ({"nearest_mode": nm} if onnx_mode == "nearest" else {})
        for ctm in _MODES
        for nm in (rounding if onnx_mode == "nearest" else ("",))
    ]
    return [
        attrs
        for attrs in candidates
        if interpolate_matches(x, out_size, torch_mode, align_corners, **attrs)
    ]
