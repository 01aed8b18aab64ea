"""ONNX export and checking, quiet enough for nbval: both exporters, ONNX Runtime parity, op
tables, printable graphs and where each exporter keeps its ATen-to-ONNX translations.

Used by: notebooks 10 (ONNX export, old and new), 11 (custom operators) and 18 (export and
the translation tables). CPU only: ONNX
Runtime runs with its CPU provider and one thread, so a reduction runs in one fixed order; its
kernels may still round differently on another CPU (vector width), which is why parity is
reported as thresholds, never as raw errors. `custom_ops_library=` registers a custom-op
library (onnxruntime-extensions) with the session.

Assumes the pinned stack (torch 2.13, onnx, onnxscript, onnxruntime; see STACK_NOTES): the
default exporter is the dynamo one (`torch.onnx.export(..., dynamo=True)`, an `ONNXProgram`);
`dynamo=False` is the deprecated TorchScript exporter, whose translations ("symbolic functions")
live in `torch/onnx/_internal/torchscript_exporter/symbolic_opset*.py`, while the dynamo
exporter's live in onnxscript's `function_libs/torch_lib/ops/` (a few in torch's own
`torch/onnx/_internal/exporter/_torchlib/ops/`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import logging
import re
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "quiet_onnx",
    "export_onnx",
    "run_ort",
    "OutputParity",
    "ParityReport",
    "verify_with_ort",
    "list_ops",
    "op_table",
    "model_summary",
    "graph_text",
    "locate_translation",
    "translation_file",
    "dispatched_translations",
    "traced_translations",
    "as_model_proto",
]

EXPORTERS = ("torchscript", "dynamo")


# loggers that speak during an export: the exporter's own, and torch.export's on a failed try
_NOISY_LOGGERS = {
    "torch.onnx": logging.ERROR,
    "torch.export": logging.CRITICAL,
    "torch._export": logging.CRITICAL,
    "torch.fx.experimental.symbolic_shapes": logging.ERROR,
}


@contextlib.contextmanager
def quiet_onnx() -> Iterator[None]:
    """Silence what the pinned exporters print on every call (and every Future/DeprecationWarning).

    Inside: the `torch.onnx` logger at ERROR (the dynamo exporter's registry logs a warning
    per torchvision op when torchvision is not installed: `_registration._get_overload`),
    torch.export's loggers quiet, FutureWarnings and DeprecationWarnings ignored (the
    TorchScript exporter's DeprecationWarning in `torch.onnx.export`, pytree's `LeafSpec`
    notice), and stderr captured: a failed `torch.export` attempt prints its partial graph
    there. On failure the capture is attached to the exception as `captured_stderr`; on
    success it is written back, so other warnings (a TracerWarning about a traced branch)
    still reach the caller.
    """
    loggers = {name: logging.getLogger(name) for name in _NOISY_LOGGERS}
    levels = {name: logger.level for name, logger in loggers.items()}
    for name, logger in loggers.items():
        logger.setLevel(_NOISY_LOGGERS[name])
    captured = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(captured):
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    except BaseException as err:
        with contextlib.suppress(AttributeError):
            err.captured_stderr = captured.getvalue()  # type: ignore[attr-defined]
        raise
    else:
        sys.stderr.write(captured.getvalue())  # a successful call keeps what it had to say
    finally:
        for name, logger in loggers.items():
            logger.setLevel(levels[name])


def _as_tuple(args: Any) -> tuple[Any, ...]:
    return args if isinstance(args, tuple) else (args,)


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def export_onnx(
    model: Any,
    args: Any,
    path: str | Path | None = None,
    *,
    dynamo: bool = True,
    opset_version: int | None = None,
    dynamic_batch: bool = False,
    **kwargs: Any,
):
    """Export `model(*args)` with either exporter, quietly; return the `onnx.ModelProto`.

    `dynamo=True` (the default of `torch.onnx.export` in 2.13) traces with `torch.export`;
    `dynamo=False` uses the deprecated TorchScript exporter. `dynamic_batch=True` makes dim 0 of
    every tensor input (and, for TorchScript, every output) a symbolic `batch` dimension.
    Extra keyword arguments go to `torch.onnx.export` unchanged (`custom_translation_table`,
    `input_names`, `dynamic_shapes`, ...). With `path`, the model is also saved there as a
    single file (initializers inside).
    """
    import onnx
    import torch

    args = _as_tuple(args)
    kwargs.setdefault("verbose", False)
    with quiet_onnx():
        if dynamo:
            if dynamic_batch and "dynamic_shapes" not in kwargs:
                batch = torch.export.Dim("batch")
                kwargs["dynamic_shapes"] = tuple(
                    {0: batch} if isinstance(a, torch.Tensor) else None for a in args
                )
            onnx_program = torch.onnx.export(
                model, args, dynamo=True, opset_version=opset_version, **kwargs
            )
            model_proto = onnx_program.model_proto
        else:
            if dynamic_batch and "dynamic_axes" not in kwargs:
                names = list(inspect.signature(model.forward).parameters)
                input_names = kwargs.setdefault(
                    "input_names",
                    [n for n, a in zip(names, args, strict=False) if isinstance(a, torch.Tensor)],
                )
                if "output_names" not in kwargs:
                    with torch.no_grad():
                        n_out = len(_tensor_leaves(model(*args)))
                    kwargs["output_names"] = [f"output_{i}" for i in range(n_out)]
                kwargs["dynamic_axes"] = {
                    name: {0: "batch"} for name in [*input_names, *kwargs["output_names"]]
                }
            buffer = io.BytesIO()
            torch.onnx.export(
                model, args, buffer, dynamo=False, opset_version=opset_version, **kwargs
            )
            model_proto = onnx.load_from_string(buffer.getvalue())
    if path is not None:
        onnx.save(model_proto, str(path))
    return model_proto


def as_model_proto(model: Any):
    """An `onnx.ModelProto` from a ModelProto, an `ONNXProgram`, bytes or a file path."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if hasattr(model, "model_proto"):  # torch.onnx.ONNXProgram
        return model.model_proto
    if isinstance(model, bytes | bytearray):
        return onnx.load_from_string(bytes(model))
    return onnx.load(str(model))


# --------------------------------------------------------------------------- ONNX Runtime


def _session(model: Any, custom_ops_library: str | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: keeps notebook stderr empty
    if custom_ops_library is not None:  # kernels for custom-domain nodes (a shared library)
        options.register_custom_ops_library(custom_ops_library)
    options.intra_op_num_threads = 1  # same reduction order on every machine
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        as_model_proto(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run_ort(model: Any, *inputs: Any, custom_ops_library: str | None = None) -> list[np.ndarray]:
    """Run an ONNX model in ONNX Runtime (CPU) on torch tensors or arrays; return the outputs.

    Inputs are matched to the graph's inputs in order (tensor leaves of `inputs`).
    `custom_ops_library`: path of a custom-op library to register with the session.
    """
    session = _session(model, custom_ops_library)
    names = [i.name for i in session.get_inputs()]
    arrays = [
        x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
        for x in _tensor_leaves(inputs) or list(inputs)
    ]
    if len(arrays) != len(names):
        raise ValueError(
            f"the ONNX graph takes {len(names)} input(s) {names}, {len(arrays)} were given"
        )
    return session.run(None, dict(zip(names, arrays, strict=True)))


@dataclass(frozen=True)
class OutputParity:
    """One output of the model: ONNX Runtime (actual) against eager PyTorch (expected)."""

    name: str
    shape: tuple[int, ...]  # ONNX Runtime's
    expected_shape: tuple[int, ...]  # eager PyTorch's
    max_abs: float  # max |actual - expected|
    max_rel: float  # max |actual - expected| / |expected| over elements with |expected| > atol
    rtol: float
    atol: float
    allclose: bool  # every element: |actual - expected| <= atol + rtol * |expected|

    @property
    def passed(self) -> bool:
        return self.shape == self.expected_shape and self.allclose

    def line(self, index: int) -> str:
        """Printable without raw floats: shapes and thresholded errors only.

        `max_rel` is kept as data but not printed: near-zero outputs make it jump across CPUs.
        """
        return (
            f"output {index} {self.name!r}: shape {self.shape} == {self.expected_shape}: "
            f"{self.shape == self.expected_shape} | max_abs <= {self.atol:.0e}: "
            f"{self.max_abs <= self.atol} | allclose: {self.allclose}"
        )


@dataclass(frozen=True)
class ParityReport:
    """ONNX Runtime vs eager, per output. `print(report)` shows only stable facts."""

    outputs: list[OutputParity]
    rtol: float
    atol: float
    actual: list[np.ndarray] = field(repr=False, compare=False)  # ONNX Runtime's outputs
    expected: list[np.ndarray] = field(repr=False, compare=False)  # eager outputs

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max(o.max_abs for o in self.outputs)

    def __str__(self) -> str:
        lines = [
            f"ONNX Runtime vs eager PyTorch: {len(self.outputs)} output(s), "
            f"rtol={self.rtol:.0e}, atol={self.atol:.0e}"
        ]
        lines += [f"  {o.line(i)}" for i, o in enumerate(self.outputs)]
        lines.append(f"passed: {self.passed}")
        return "\n".join(lines)

    __repr__ = __str__


def _compare(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float):
    shape, expected_shape = tuple(actual.shape), tuple(expected.shape)
    if shape != expected_shape or actual.size == 0:
        inf = float("inf") if shape != expected_shape else 0.0
        return OutputParity(
            name, shape, expected_shape, inf, inf, rtol, atol, shape == expected_shape
        )
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    diff = np.abs(a - e)
    big = np.abs(e) > atol
    max_rel = float((diff[big] / np.abs(e[big])).max()) if big.any() else 0.0
    allclose = bool(np.all(diff <= atol + rtol * np.abs(e)))
    return OutputParity(
        name, shape, expected_shape, float(diff.max()), max_rel, rtol, atol, allclose
    )


def verify_with_ort(
    model_or_path: Any,
    torch_model: Callable[..., Any],
    inputs: Any,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    *,
    custom_ops_library: str | None = None,
) -> ParityReport:
    """Run the ONNX model in ONNX Runtime and eager `torch_model(*inputs)`; compare per output."""
    import torch

    inputs = _as_tuple(inputs)
    model_proto = as_model_proto(model_or_path)
    actual = run_ort(model_proto, *inputs, custom_ops_library=custom_ops_library)
    with torch.no_grad():
        expected = [t.detach().cpu().numpy() for t in _tensor_leaves(torch_model(*inputs))]
    if len(actual) != len(expected):
        raise ValueError(f"ONNX model has {len(actual)} output(s), eager has {len(expected)}")
    names = [o.name for o in model_proto.graph.output]
    outputs = [
        _compare(n, a, e, rtol, atol) for n, a, e in zip(names, actual, expected, strict=True)
    ]
    return ParityReport(outputs, rtol, atol, actual, expected)


# --------------------------------------------------------------------------- reading a model


def _graphs(graph) -> Iterator[Any]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    import onnx

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _op_key(domain: str, op_type: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def list_ops(model: Any, *, functions: bool = False) -> Counter:
    """Count nodes per op: `Conv` for the default domain, `domain::Op` for others.

    Subgraphs (If/Loop bodies) are included; with `functions=True` also the bodies of the
    model-local functions (what a custom-domain call expands to).
    """
    model_proto = as_model_proto(model)
    counts: Counter = Counter()
    for graph in _graphs(model_proto.graph):
        counts.update(_op_key(n.domain, n.op_type) for n in graph.node)
    if functions:
        for fn in model_proto.functions:
            counts.update(_op_key(n.domain, n.op_type) for n in fn.node)
    return counts


def op_table(model: Any, *, functions: bool = False) -> str:
    """`list_ops` as a fixed-width table sorted by domain then op (default domain first)."""
    rows = []
    for key, count in list_ops(model, functions=functions).items():
        domain, _, op = key.rpartition("::")
        rows.append((domain or "ai.onnx", op, count))
    rows.sort(key=lambda r: (r[0] != "ai.onnx", r[0], r[1]))
    width = max([len("domain")] + [len(r[0]) for r in rows])
    op_width = max([len("op")] + [len(r[1]) for r in rows])
    lines = [f"{'domain':<{width}}  {'op':<{op_width}}  count"]
    lines += [f"{d:<{width}}  {o:<{op_width}}  {c:>5}" for d, o, c in rows]
    return "\n".join(lines)


def _shape(value_info) -> tuple[Any, ...]:
    dims = value_info.type.tensor_type.shape.dim
    return tuple(d.dim_param or d.dim_value for d in dims)


def model_summary(model: Any) -> dict[str, Any]:
    """Stable facts of a model: opsets, inputs/outputs with shapes, initializers, node count."""
    import onnx

    model_proto = as_model_proto(model)
    graph = model_proto.graph
    init_names = {i.name for i in graph.initializer}
    return {
        "opset_imports": {(o.domain or "ai.onnx"): o.version for o in model_proto.opset_import},
        "inputs": {i.name: _shape(i) for i in graph.input if i.name not in init_names},
        "outputs": {o.name: _shape(o) for o in graph.output},
        "initializers": {
            i.name: (onnx.TensorProto.DataType.Name(i.data_type), tuple(i.dims))
            for i in graph.initializer
        },
        "nodes": len(graph.node),
        "functions": [f"{f.domain}::{f.name}" for f in model_proto.functions],
    }


def _strip_metadata(model_proto) -> None:
    """Remove doc strings and metadata (stack traces with machine paths) in place."""
    model_proto.ClearField("doc_string")
    del model_proto.metadata_props[:]
    model_proto.producer_version = model_proto.producer_version.split("+")[0]  # cpu/cuda wheel
    items: list[Any] = list(model_proto.functions)
    for graph in _graphs(model_proto.graph):
        items += [graph, *graph.node, *graph.input, *graph.output, *graph.value_info]
        items += list(graph.initializer)
    items += [node for fn in model_proto.functions for node in fn.node]
    for item in items:
        item.ClearField("doc_string")
        del item.metadata_props[:]


_INITIALIZER_VALUES = re.compile(r"(=\s*)\{[^{}]*\}")


def graph_text(model: Any, *, initializer_values: bool = False) -> str:
    """The model in ONNX's textual syntax (`onnx.printer.to_text`), without machine details.

    Doc strings and metadata (the dynamo exporter records stack traces with file paths) are
    removed, the producer version loses its `+cpu`/`+cu126` suffix, and initializer values
    are shown as `{...}` unless `initializer_values=True` (random weights are not invariants).
    """
    import onnx

    model_proto = onnx.ModelProto()
    model_proto.CopyFrom(as_model_proto(model))
    _strip_metadata(model_proto)
    text = onnx.printer.to_text(model_proto)
    if not initializer_values:
        head, sep, body = text.partition("\n{")  # initializers sit between signature and body
        head = _INITIALIZER_VALUES.sub(r"\1{...}", head)
        text = head + sep + body
    return text.rstrip()


# --------------------------------------------------------------------------- the two mappings


def _aten_name(op: Any) -> tuple[str, str]:
    """('aten::asinh', 'default') from 'aten::asinh', 'aten.asinh', 'asinh', 'aten::add.Tensor'
    or an OpOverload / OpOverloadPacket such as `torch.ops.aten.asinh.default`."""
    if not isinstance(op, str):
        name = op.name()  # OpOverload: 'aten::add.Tensor'; packet: 'aten::add'
        op = name
    if "::" not in op:
        op = op.replace(".", "::", 1) if op.startswith("aten.") else f"aten::{op}"
    base, _, overload = op.partition(".")
    return base, overload or "default"


def _torchscript_registry():
    from torch.onnx._internal.torchscript_exporter import registration

    # the symbolic_opsetN modules register their functions on import
    for version in range(7, 21):
        with contextlib.suppress(ImportError):
            importlib.import_module(
                f"torch.onnx._internal.torchscript_exporter.symbolic_opset{version}"
            )
    return registration.registry


@functools.lru_cache(maxsize=1)
def _dynamo_registry():
    from torch.onnx._internal.exporter._registration import ONNXRegistry

    with quiet_onnx():
        return ONNXRegistry.from_torchlib()


def _python_function(fn: Any) -> Any:
    # onnxscript wraps the Python function (TracedOnnxFunction.func / OnnxFunction.function);
    # the TorchScript registry wraps it in decorators that keep __wrapped__.
    for attr in ("func", "function"):
        inner = getattr(fn, attr, None)
        if inspect.isfunction(inner):
            fn = inner
            break
    return inspect.unwrap(fn)


def locate_translation(aten_op: Any, *, opset_version: int = 20) -> dict[str, Any]:
    """Each exporter's translation function for an ATen op in the installed source.

    Returns {"torchscript": fn or None, "dynamo": fn or None}: the plain Python functions (ready
    for `show_source`) that the TorchScript exporter (at `opset_version`) and the dynamo
    exporter (its default registry; the first real-valued entry, as its dispatcher picks) use.
    `aten_op` is 'aten::asinh', 'asinh', 'aten::add.Tensor' or `torch.ops.aten.asinh.default`.
    """
    import torch

    base, overload = _aten_name(aten_op)
    group = _torchscript_registry().get_function_group(base)
    old = group.get(opset_version) if group is not None else None

    new = None
    packet = getattr(torch.ops.aten, base.split("::", 1)[1], None)
    target = getattr(packet, overload, None) if packet is not None else None
    if target is not None:
        decomps = [d for d in _dynamo_registry().get_decomps(target) if not d.is_complex]
        if decomps:
            new = decomps[0].onnx_function
    return {
        "torchscript": _python_function(old) if old is not None else None,
        "dynamo": _python_function(new) if new is not None else None,
    }


def translation_file(fn: Any) -> str | None:
    """Where a translation function lives, relative to site-packages (None for None)."""
    if fn is None:
        return None
    from helpers.source import package_root

    return package_root(inspect.getsourcefile(fn))[1]


def dispatched_translations(onnx_program: Any) -> dict[str, Any]:
    """Dynamo exporter: for each ATen op of an `ONNXProgram`, the function its dispatcher picks.

    Runs the exporter's own `dispatch` over `onnx_program.exported_program` (the decomposed
    graph that was translated) with the default registry; keys like 'aten::conv2d'.
    """
    import torch
    from torch.onnx._internal.exporter import _dispatching

    found: dict[str, Any] = {}
    for node in onnx_program.exported_program.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            fn, _ = _dispatching.dispatch(node, _dynamo_registry())
            name = node.target.name().removesuffix(".default")
            if fn is not None and name not in found:
                found[name] = _python_function(fn)
    return found


def traced_translations(
    model: Any, args: Any, *, opset_version: int | None = None, **kwargs: Any
) -> dict[str, Any]:
    """TorchScript exporter: export under `sys.setprofile`; the symbolic functions that ran.

    Watches the exporter's `_run_symbolic_function` (one call per TorchScript node) and reads,
    as each call returns, the op it looked up (`ns_op_name`) and the function it got from the
    registry (`symbolic_fn`). Returns {'aten::relu': fn, ...} for ATen ops, in first-call order.
    """
    from torch.onnx._internal.torchscript_exporter import utils as ts_utils

    target = ts_utils._run_symbolic_function.__code__
    found: dict[str, Any] = {}

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "return" and frame.f_code is target:
            name, fn = frame.f_locals.get("ns_op_name"), frame.f_locals.get("symbolic_fn")
            if fn is not None and str(name).startswith("aten::") and name not in found:
                found[name] = _python_function(fn)

    sys.setprofile(profile)
    try:
        export_onnx(model, args, dynamo=False, opset_version=opset_version, **kwargs)
    finally:
        sys.setprofile(None)
    return found
