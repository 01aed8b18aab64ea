"""A C++ upsample operator with a deployment board's semantics, carried to ONNX Runtime.

Used by: notebook 12. CPU only: the kernels in `csrc/board_upsample.cpp` are registered for the
CPU dispatch key. Needs a C++ compiler and ninja (`requirements.txt` pins the `ninja` package;
`build()` puts the environment's own `bin/` first on PATH so it is found from a kernel too).

- `build()` compiles the C++ source with `torch.utils.cpp_extension.load_inline` into a build
  folder named after the source's hash, loads it (`torch.ops.board.*`) and registers the Python
  parts: a fake kernel (shapes only, for torch.compile and torch.export) and autograd (the C++
  backward op). Another process building the same source reuses the folder. Builds of one
  folder take turns on an `flock` (`build.flock`), which the kernel drops when its holder dies;
  so on torch 2.13, whose `load_inline` locks with `FileBaton`, a `lock` file left by a build
  killed before its `finally` is removed instead of waited on forever (2.14 and 2.15 lock with
  `FileLock`, an OS lock whose file stays and blocks nobody).
- `reference_upsample` is an independent NumPy version (interpolation matrices), the reference
  every test compares the C++ kernel against.
- ONNX: `export_board_model(model, x, route)` exports with the dynamo exporter into a custom
  domain; route "contrib" emits `ai.onnx.contrib::BoardUpsample`, which ONNX Runtime runs through
  onnxruntime-extensions' Python custom ops (`board_session`); route "function" emits
  `com.example.board::Upsample{Nearest,Bilinear}` and attaches an ONNX function whose body is a
  standard `Resize`, which any ONNX Runtime inlines.
- `resize_row(case, exporter)`: what each exporter emits for `F.interpolate` and whether ONNX
  Runtime agrees with PyTorch (the table of notebook 12's last section).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "SOURCE_PATH",
    "BuildInfo",
    "source_hash",
    "build_directory",
    "build",
    "cpp_source_view",
    "interpolation_matrix",
    "reference_upsample",
    "BoardUpsampler",
    "CONTRIB_DOMAIN",
    "FUNCTION_DOMAIN",
    "register_onnx_schemas",
    "translation_table",
    "export_board_model",
    "board_session",
    "run_board_model",
    "custom_nodes",
    "ResizeCase",
    "RESIZE_CASES",
    "resize_row",
    "resize_input",
    "board_vs_torch",
]

SOURCE_PATH = Path(__file__).with_name("csrc") / "board_upsample.cpp"
MODES = ("nearest", "bilinear")
CONTRIB_DOMAIN = "ai.onnx.contrib"  # the domain onnxruntime-extensions' Python ops live in
FUNCTION_DOMAIN = "com.example.board"


# --------------------------------------------------------------------------------------------
# building and registering the operator
# --------------------------------------------------------------------------------------------


def source_hash() -> str:
    """The first 12 hex digits of the SHA-256 of the C++ source: the build cache key."""
    return hashlib.sha256(SOURCE_PATH.read_bytes()).hexdigest()[:12]


def build_directory() -> Path:
    """Where the build for this source lives: $TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions,
    under one folder per torch version (a library is built against one torch's headers, and the
    version matrix runs 2.13, 2.14 and 2.15 side by side), named after the source's hash."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    return Path(root) / f"torch-{torch.__version__}" / f"board_upsample_{source_hash()}"


@dataclass(frozen=True)
class BuildInfo:
    """How the operator got into this process."""

    name: str  # the extension's name, with the source hash
    how: str  # "compiled", "reused build" (library on disk) or "already loaded"
    seconds: float


_LOADED: BuildInfo | None = None


def build(verbose: bool = False) -> BuildInfo:
    """Compile (or reuse) the C++ operator, load it and register its fake kernel and autograd."""
    global _LOADED
    if _LOADED is not None:
        return BuildInfo(_LOADED.name, "already loaded", 0.0)
    import torch.utils.cpp_extension as cpp_extension

    name = f"board_upsample_{source_hash()}"
    folder = build_directory()
    reused = (folder / f"{name}.so").exists()
    folder.mkdir(parents=True, exist_ok=True)
    # ninja from the environment's own bin/ (a kernel's PATH may not include it)
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    start = time.perf_counter()
    with _build_turn(folder, baton="FileBaton" in vars(cpp_extension)):
        cpp_extension.load_inline(
            name,
            cpp_sources=[SOURCE_PATH.read_text()],
            extra_cflags=["-O2"],
            build_directory=str(folder),
            is_python_module=False,  # TORCH_LIBRARY registers the ops; no Python module to import
            verbose=verbose,
        )
    seconds = time.perf_counter() - start
    _register_python_parts()
    _LOADED = BuildInfo(name, "reused build" if reused else "compiled", seconds)
    return _LOADED


@contextlib.contextmanager
def _build_turn(folder: Path, baton: bool):
    """Hold `folder`'s build turn: an exclusive `flock` on `folder/build.flock`.

    torch 2.13's `_jit_compile` locks a build folder with `FileBaton`: it creates `lock` with
    O_EXCL and removes it in a `finally`; the file names no owner, so when its builder is killed
    (SIGKILL, a cell timeout) the file stays and every later `load_inline` into the folder spins
    in `FileBaton.wait()` forever. Every build of this folder goes through here, and the kernel
    releases an `flock` when its holder dies: whoever holds the turn is the only builder, so with
    `baton` (the installed `cpp_extension` uses `FileBaton`) a `lock` it finds is a dead build's.
    2.14.1 and 2.15.0 hold `FileLock` (an OS lock, released with its holder) on the same path;
    its file stays after every build and is left alone."""
    with open(folder / "build.flock", "w") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)  # waits for a live build of this folder to finish
        try:
            if baton:
                (folder / "lock").unlink(missing_ok=True)  # a dead builder's FileBaton
            yield
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)


def _upsample_fake(input, scale: int, mode: str):  # noqa: A002 (the schema's name)
    """Shapes only: what torch.compile and torch.export trace with (no data, no C++)."""
    torch._check(input.dim() == 4, lambda: f"board::upsample: expected 4-D, got {input.dim()}-D")
    n, c, h, w = input.shape
    return input.new_empty(n, c, h * scale, w * scale)


def _upsample_backward_fake(grad_output, in_h: int, in_w: int, scale: int, mode: str):
    n, c = grad_output.shape[:2]
    return grad_output.new_empty(n, c, in_h, in_w)


def _setup_context(ctx, inputs, output) -> None:
    input, scale, mode = inputs  # noqa: A001
    ctx.in_hw, ctx.scale, ctx.mode = tuple(input.shape[-2:]), scale, mode


def _backward(ctx, grad_output):
    h, w = ctx.in_hw
    grad_input = torch.ops.board.upsample_backward(grad_output, h, w, ctx.scale, ctx.mode)
    return grad_input, None, None  # no gradient for scale and mode


def _register_python_parts() -> None:
    torch.library.register_fake("board::upsample", _upsample_fake)
    torch.library.register_fake("board::upsample_backward", _upsample_backward_fake)
    torch.library.register_autograd("board::upsample", _backward, setup_context=_setup_context)


def cpp_source_view(pattern: str | None = None, *, before: int = 0, until: str | None = None):
    """A SourceView of (part of) the C++ source, from `pattern` to the first line matching
    `until` after it (the whole file without a pattern)."""
    from helpers.source import file_view

    relpath = f"src/helpers/csrc/{SOURCE_PATH.name}"
    return file_view(SOURCE_PATH, relpath, "helpers", pattern, before=before, until=until)


# --------------------------------------------------------------------------------------------
# the reference: the same rule as matrices, in NumPy
# --------------------------------------------------------------------------------------------


def interpolation_matrix(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """(n_out, n_in) weights: output index d reads input coordinate d*(n_in-1)/(n_out-1)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    m = np.zeros((n_out, n_in))
    step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    for d in range(n_out):
        pos = d * step
        if mode == "nearest":
            m[d, min(int(np.floor(pos + 0.5)), n_in - 1)] = 1.0  # round half up
        else:
            i0 = min(int(np.floor(pos)), n_in - 1)
            i1 = min(i0 + 1, n_in - 1)
            m[d, i0] += 1.0 - (pos - i0)
            m[d, i1] += pos - i0
    return m


def reference_upsample(x: np.ndarray, scale: int, mode: str) -> np.ndarray:
    """The board's upsample of an (N, C, H, W) array, as A_h @ x @ A_w.T per plane."""
    h, w = x.shape[-2:]
    a_h = interpolation_matrix(h, h * scale, mode)  # (OH, H)
    a_w = interpolation_matrix(w, w * scale, mode)  # (OW, W)
    return np.einsum("oh,nchw,pw->ncop", a_h, x.astype(np.float64), a_w).astype(x.dtype)


# --------------------------------------------------------------------------------------------
# a model that uses it, and the way to ONNX
# --------------------------------------------------------------------------------------------


class BoardUpsampler(torch.nn.Module):
    """conv -> ReLU -> board::upsample -> conv: a decoder stage as a detector neck has it."""

    def __init__(self, scale: int = 2, mode: str = "bilinear", channels: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.scale, self.mode = scale, mode
        self.conv1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv1(x))  # (N, C, H, W)
        y = torch.ops.board.upsample(y, self.scale, self.mode)  # (N, C, H*s, W*s)
        return self.conv2(y)


_SCHEMAS_REGISTERED = False


def register_onnx_schemas() -> None:
    """Declare the custom-domain ONNX ops, so onnxscript can emit nodes for them."""
    global _SCHEMAS_REGISTERED
    if _SCHEMAS_REGISTERED:
        return
    import onnx
    from onnx.defs import OpSchema

    def schema(name: str, domain: str, attrs: dict[str, Any]) -> OpSchema:
        return OpSchema(
            name,
            domain,
            1,
            doc=f"{name}: the board's upsample (see helpers.board_op)",
            inputs=[OpSchema.FormalParameter("X", "T")],
            outputs=[OpSchema.FormalParameter("Y", "T")],
            type_constraints=[("T", ["tensor(float)"], "float32 only, as on the board")],
            attributes=[OpSchema.Attribute(n, t, n) for n, t in attrs.items()],
        )

    int_attr, str_attr = OpSchema.AttrType.INT, OpSchema.AttrType.STRING
    for s in (
        schema("BoardUpsample", CONTRIB_DOMAIN, {"scale": int_attr, "mode": str_attr}),
        *(schema(_op(mode), FUNCTION_DOMAIN, {"scale": int_attr}) for mode in MODES),
    ):
        if not onnx.defs.has(s.name, s.domain):
            onnx.defs.register_schema(s)
    _SCHEMAS_REGISTERED = True


def _contrib_translation(x, scale: int, mode: str):
    """board::upsample -> one ai.onnx.contrib::BoardUpsample node, scale and mode as attributes."""
    import onnxscript

    return onnxscript.values.Opset(CONTRIB_DOMAIN, 1).BoardUpsample(x, scale=scale, mode=mode)


def _function_translation(x, scale: int, mode: str):
    """board::upsample -> com.example.board::Upsample{Nearest,Bilinear}, scale as attribute."""
    import onnxscript

    return getattr(onnxscript.values.Opset(FUNCTION_DOMAIN, 1), _op(mode))(x, scale=scale)


def translation_table(route: str) -> dict[Callable, Callable]:
    """{torch.ops.board.upsample.default: translation} for route "contrib" or "function"."""
    build()
    register_onnx_schemas()
    fn = {"contrib": _contrib_translation, "function": _function_translation}[route]
    return {torch.ops.board.upsample.default: fn}


def _board_function(mode: str, opset: int):
    """com.example.board::Upsample<mode>: ONNX Resize with the board's coordinate rule.

    `scale` is a function attribute; the body reads it through an attribute reference.
    """
    import onnx
    from onnx import helper

    scale = onnx.AttributeProto(
        name="value_int", ref_attr_name="scale", type=onnx.AttributeProto.INT
    )
    const_scale = helper.make_node("Constant", [], ["s_int"])
    const_scale.attribute.append(scale)
    resize_attrs = {"coordinate_transformation_mode": "align_corners"}
    if mode == "nearest":
        resize_attrs |= {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}  # half up
    else:
        resize_attrs |= {"mode": "linear"}
    body = [
        const_scale,
        helper.make_node("Cast", ["s_int"], ["s"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Constant", [], ["axes"], value_ints=[0]),
        helper.make_node("Unsqueeze", ["s", "axes"], ["s1"]),
        helper.make_node("Constant", [], ["ones"], value_floats=[1.0, 1.0]),
        helper.make_node("Concat", ["ones", "s1", "s1"], ["scales"], axis=0),  # [1, 1, s, s]
        helper.make_node("Resize", ["X", "", "scales"], ["Y"], **resize_attrs),
    ]
    return helper.make_function(
        FUNCTION_DOMAIN, _op(mode), ["X"], ["Y"], body, [helper.make_opsetid("", opset)], ["scale"]
    )


def export_board_model(model: Any, x: Any, route: str):
    """Export `model(x)` with the dynamo exporter, board::upsample going by `route`."""
    from helpers.onnx_tools import export_onnx

    model_proto = export_onnx(model, (x,), custom_translation_table=translation_table(route))
    if route == "function":
        opset = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
        used = {n.op_type for n in model_proto.graph.node if n.domain == FUNCTION_DOMAIN}
        model_proto.functions.extend(_board_function(m, opset) for m in MODES if _op(m) in used)
    return model_proto


def _op(mode: str) -> str:
    """The function-route op type for a mode: UpsampleNearest or UpsampleBilinear."""
    return "UpsampleNearest" if mode == "nearest" else "UpsampleBilinear"


def custom_nodes(model_proto) -> list[tuple[str, str, dict[str, Any]]]:
    """(domain, op_type, attributes) of every graph node outside the standard ONNX domain."""
    from onnx import helper

    return [
        (n.domain, n.op_type, {a.name: _plain(helper.get_attribute_value(a)) for a in n.attribute})
        for n in model_proto.graph.node
        if n.domain not in ("", "ai.onnx")
    ]


def _plain(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


_PY_OP_REGISTERED = False


def _register_py_op() -> None:
    """ai.onnx.contrib::BoardUpsample for onnxruntime-extensions (the NumPy reference computes)."""
    global _PY_OP_REGISTERED
    if _PY_OP_REGISTERED:
        return
    from onnxruntime_extensions import PyOp, onnx_op

    @onnx_op(
        op_type="BoardUpsample",
        inputs=[PyOp.dt_float],
        outputs=[PyOp.dt_float],
        attrs={"scale": PyOp.dt_int64, "mode": PyOp.dt_string},
    )
    def board_upsample(x: np.ndarray, **attrs: Any) -> np.ndarray:
        return reference_upsample(x, int(attrs["scale"]), attrs["mode"])

    _PY_OP_REGISTERED = True


def board_session(model_proto, route: str):
    """An ONNX Runtime session for an exported board model; route "contrib" loads the
    onnxruntime-extensions library (where the Python op runs), "function" needs nothing."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    if route == "contrib":
        from onnxruntime_extensions import get_library_path

        _register_py_op()
        options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(
        model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run_board_model(model_proto, route: str, x: Any) -> np.ndarray:
    """ONNX Runtime's output for input `x` (a tensor or array)."""
    session = board_session(model_proto, route)
    array = x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)
    return session.run(None, {session.get_inputs()[0].name: array})[0]


# --------------------------------------------------------------------------------------------
# Resize semantics: what the exporters emit for F.interpolate, and whether ORT agrees
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResizeCase:
    """One F.interpolate call on a (1, 1, 5, 5) input."""

    label: str
    mode: str
    size: int | None = None
    scale_factor: float | None = None
    align_corners: bool | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode}
        if self.size is not None:
            out["size"] = (self.size, self.size)
        else:
            out["scale_factor"] = self.scale_factor
        if self.align_corners is not None:
            out["align_corners"] = self.align_corners
        return out


RESIZE_CASES = (
    ResizeCase("nearest x2", "nearest", scale_factor=2.0),
    ResizeCase("nearest 5->8", "nearest", size=8),
    ResizeCase("nearest-exact 5->8", "nearest-exact", size=8),
    ResizeCase("bilinear x2", "bilinear", scale_factor=2.0, align_corners=False),
    ResizeCase("bilinear x2 align_corners", "bilinear", scale_factor=2.0, align_corners=True),
    ResizeCase("bilinear 5->8", "bilinear", size=8, align_corners=False),
)


class _Interpolate(torch.nn.Module):
    def __init__(self, case: ResizeCase) -> None:
        super().__init__()
        self.case = case

    def forward(self, x):
        return torch.nn.functional.interpolate(x, **self.case.kwargs())


def resize_input():
    """A (1, 1, 5, 5) input with distinct values (i ** 1.5), so a wrong source pixel shows."""
    return (torch.arange(25.0) ** 1.5).reshape(1, 1, 5, 5)


def resize_row(case: ResizeCase, dynamo: bool = True, opset: int | None = None) -> dict[str, Any]:
    """Export `case` with one exporter: what it emits, what it warned, and ORT vs PyTorch.

    An export the exporter refuses is a row too (`node` is "refused", `error` says why).
    `node` is the graph's Resize/Upsample op, or the sorted set of its op types if it has none;
    `ops` lists every node's op type in graph order, `constant_shapes` the initializers' shapes.
    """
    import warnings

    from onnx import helper

    from helpers.onnx_custom import legacy_export
    from helpers.onnx_tools import export_onnx, run_ort

    x = resize_input()
    model = _Interpolate(case).eval()
    exporter = "dynamo" if dynamo else f"torchscript opset {opset}"
    row: dict[str, Any] = {"case": case.label, "exporter": exporter}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            if dynamo:
                model_proto = export_onnx(model, (x,), opset_version=opset)
            else:  # legacy_export keeps what the C++ side prints on a refusal off stdout
                model_proto = legacy_export(model, (x,), opset_version=opset)
        except Exception as err:  # the refusal is the result
            return row | {"node": "refused", "error": str(err).splitlines()[0]}
    resize = [n for n in model_proto.graph.node if n.op_type in ("Resize", "Upsample")]
    attrs = {a.name: _plain(helper.get_attribute_value(a)) for r in resize for a in r.attribute}
    expected = model(x).numpy()
    actual = run_ort(model_proto, x)[0]
    return row | {
        "node": resize[0].op_type
        if resize
        else "+".join(sorted({n.op_type for n in model_proto.graph.node})),
        "ops": [n.op_type for n in model_proto.graph.node],  # the whole graph, in order
        "constant_shapes": [list(t.dims) for t in model_proto.graph.initializer],
        "coordinate_transformation_mode": attrs.get("coordinate_transformation_mode", "-"),
        "onnx_mode": attrs.get("mode", "-"),
        "nearest_mode": attrs.get("nearest_mode", "-") if "nearest" in case.mode else "-",
        "warned": any("results to not match" in str(w.message) for w in caught),
        "max_diff": float(np.abs(actual - expected).max()),
    }


def board_vs_torch(scale: int) -> dict[str, float]:
    """Max |board - F.interpolate| for each PyTorch mode, on the 5x5 input upsampled by `scale`."""
    x = resize_input()
    out = {}
    for board_mode, torch_kwargs in (
        ("nearest", {"mode": "nearest"}),
        ("nearest", {"mode": "nearest-exact"}),
        ("bilinear", {"mode": "bilinear", "align_corners": False}),
        ("bilinear", {"mode": "bilinear", "align_corners": True}),
    ):
        board = torch.from_numpy(reference_upsample(x.numpy(), scale, board_mode))
        ours = torch.nn.functional.interpolate(x, scale_factor=float(scale), **torch_kwargs)
        label = torch_kwargs["mode"] + (
            f", align_corners={torch_kwargs['align_corners']}"
            if "align_corners" in torch_kwargs
            else ""
        )
        out[f"board {board_mode} vs {label}"] = float((board - ours).abs().max())
    return out
