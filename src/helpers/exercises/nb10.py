"""Judges for notebook 10 (ONNX export, old and new); see helpers.exercises.

The truth comes from the installed packages: the dynamo exporter and ONNX Runtime decide
whether a `dynamic_shapes` spec gives a file that runs batch 3, the TorchScript exporter's
registry says which ops it lacks, and the TorchScript exporter plus ONNX Runtime say whether a
branch-free `Branchy` survives export. CPU only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from helpers.exercises import Hint, aten_name, choice_set, exercise, tr

#: The ops exercise 10.2 asks about (ATen names, as the TorchScript registry keys them).
CANDIDATE_OPS = (
    "aten::gelu",
    "aten::sinc",
    "aten::asinh",
    "aten::silu",
    "aten::log1p",
    "aten::expm1",
)


class _SmallCNN(nn.Module):
    """The notebook's SmallCNN (same layers, same forward signature `x: (B, 1, 8, 8)`)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 1, 8, 8)
        x = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)  # (B, 4, 4, 4)
        return self.fc(x.flatten(1))  # (B, 10)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


@exercise("10.1", "a dynamic batch for the new exporter")
def dynamic_batch(answer: Any) -> str:
    """`answer` is the `dynamic_shapes=` argument; export SmallCNN with it and run batch 3."""
    from helpers.onnx_tools import export_onnx, run_ort

    if answer is None:
        raise Hint(
            tr(
                "None leaves every dimension static: the file then fixes the batch to the "
                "example's 2 and ONNX Runtime refuses batch 3 (section 3's second cell)"
            )
        )
    if isinstance(answer, (tuple, list)) and len(answer) == 1:
        # torch.export also takes one spec per positional input, in order: forward(self, x)
        answer = {"x": answer[0]}
    if not isinstance(answer, dict):
        raise Hint(
            tr(
                "pass a dict keyed by the names of forward's parameters, one spec per input: "
                "SmallCNN.forward(self, x) takes `x`"
            )
        )
    if "logits" in answer or "output" in answer:
        raise Hint(
            tr(
                "dynamic_shapes describes the inputs only; the output's batch follows from "
                "x. It was `dynamic_axes` (the old exporter's argument) that named outputs "
                "too"
            )
        )
    if set(answer) != {"x"}:
        raise Hint(
            tr(
                (
                    "the keys are the names of forward's parameters: SmallCNN.forward takes `x`, "
                    "you gave {sorted_map_str_answer}"
                ),
                sorted_map_str_answer=sorted(map(str, answer)),
            )
        )
    spec = answer["x"]
    if isinstance(spec, (list, tuple)) and all(isinstance(d, int) for d in spec):
        raise Hint(
            tr(
                "a list of dimension numbers is the `dynamic_axes` format; in dynamic_shapes "
                "a list holds one entry per dimension of x (four of them). Map dimension "
                "numbers to a torch.export.Dim in a dict instead"
            )
        )
    if isinstance(spec, dict):
        if 0 not in spec:
            raise Hint(
                tr(
                    (
                        "x is (B, 1, 8, 8): the batch is dimension 0, your spec makes dimension(s) "
                        "{sorted_spec} dynamic"
                    ),
                    sorted_spec=sorted(spec),
                )
            )
        top = getattr(spec[0], "max", None)
        if isinstance(top, int) and top < 3:
            raise Hint(
                tr("the Dim declares max={top}: batch 3 is outside the range you declared", top=top)
            )
    model = _SmallCNN().eval()
    try:
        m = export_onnx(model, (torch.randn(2, 1, 8, 8),), dynamic_shapes=answer)
    except Exception as err:  # the exporter's refusal is the feedback
        raise Hint(
            tr(
                "torch.onnx.export refused this spec: {first_line_err}",
                first_line_err=_first_line(err),
            )
        ) from None
    try:
        out = run_ort(m, torch.randn(3, 1, 8, 8))[0]
    except Exception as err:
        raise Hint(
            tr(
                (
                    "the file exports but ONNX Runtime refuses batch 3, so dimension 0 is still "
                    "fixed: {first_line_err}"
                ),
                first_line_err=_first_line(err),
            )
        ) from None
    dim0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    name = dim0.dim_param or dim0.dim_value
    return tr(
        (
            "the file's input x has dimension 0 = {name!r}, a symbolic name, and ONNX "
            "Runtime returns {tuple_out_shape} for batch 3"
        ),
        name=name,
        tuple_out_shape=tuple(out.shape),
    )


@exercise("10.2", "which ops the TorchScript exporter cannot translate")
def lacking_symbolics(answer: Any) -> str:
    """`answer` is the set of CANDIDATE_OPS with no TorchScript symbolic at any opset."""
    from helpers.onnx_custom import legacy_symbolic_opsets

    chosen = choice_set(
        answer, CANDIDATE_OPS, tr("op names"), tr('{{"aten::gelu"}} (or set())'), aten_name
    )
    opsets = {op: legacy_symbolic_opsets(op) for op in CANDIDATE_OPS}
    truth = {op for op, found in opsets.items() if not found}
    extra = sorted(chosen - truth)
    if extra:
        op = extra[0]
        raise Hint(
            tr(
                (
                    "{op} has a symbolic (from opset {opsets_op_0} on): the TorchScript exporter "
                    "translates it. Ask `locate_translation({op!r})['torchscript']` (section 6)"
                ),
                op=op,
                opsets_op_0=opsets[op][0],
            )
        )
    missing = sorted(truth - chosen)
    if missing:
        raise Hint(
            tr(
                (
                    "{len_missing} more of the six have no symbolic at any opset (asinh, section "
                    "6, is not the only one): ask `locate_translation(op)['torchscript']` for "
                    "each op; None means the TorchScript exporter has none"
                ),
                len_missing=len(missing),
            )
        )
    from torch.onnx import _constants

    lowest, highest = _constants.ONNX_MIN_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
    return tr(
        (
            "{sorted_truth} have no symbolic function in the TorchScript exporter's "
            "registry at any opset it accepts ({lowest} to {highest})"
        ),
        sorted_truth=sorted(truth),
        lowest=lowest,
        highest=highest,
    )


class _Branchy(nn.Module):
    """The notebook's Branchy: 2 * x when x.sum() > 0, else -x."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return -x


class _Wrap(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _cases() -> dict[str, torch.Tensor]:
    """Inputs that tell the whole-tensor condition from an element-wise one."""
    mixed = torch.tensor([[3.0, -1.0, 2.0], [1.0, -0.5, 4.0]])  # sum > 0, some elements < 0
    return {
        "positive": torch.ones(2, 3),
        "negative": -torch.ones(2, 3),
        "mixed, positive sum": mixed,
        "mixed, negative sum": -mixed,
    }


@exercise("10.3", "Branchy without Python control flow")
def branchless(answer: Any) -> str:
    """`answer(x)` must equal Branchy in eager and after the TorchScript exporter, on all inputs."""
    from helpers.onnx_tools import export_onnx, run_ort

    if not callable(answer):
        raise Hint(tr("give a function `branchless(x)` that returns a tensor"))
    reference = _Branchy()
    for name, x in _cases().items():
        got = answer(x.clone())
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise Hint(
                tr(
                    "on the {name} input: expected a tensor of shape {tuple_x_shape}",
                    name=name,
                    tuple_x_shape=tuple(x.shape),
                )
            )
        if not torch.equal(got, reference(x)):
            if name.startswith("mixed"):
                raise Hint(
                    tr(
                        (
                            "eager PyTorch already differs from Branchy on the {name} input: "
                            "Branchy tests x.sum(), one condition for the whole tensor, not each "
                            "element"
                        ),
                        name=name,
                    )
                )
            raise Hint(
                tr("eager PyTorch already differs from Branchy on the {name} input", name=name)
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TracerWarning of an `if` is the hint below
        m = export_onnx(_Wrap(answer).eval(), (torch.ones(2, 3),), dynamo=False)
    wrong = [
        name
        for name, x in _cases().items()
        if not torch.equal(torch.from_numpy(run_ort(m, x)[0]), reference(x))
    ]
    if wrong:
        raise Hint(
            tr(
                (
                    "eager is right, but the ONNX file is wrong on the {join_wrong} input(s): "
                    "the TorchScript exporter kept only the branch the example took (section 5). "
                    "Compute both results and select with torch.where, so the graph holds the "
                    "condition"
                ),
                join_wrong=", ".join(wrong),
            )
        )
    return tr(
        "ONNX Runtime matches Branchy on all four inputs: the condition and both "
        "results are graph nodes (a Where), so no branch is frozen at trace time"
    )
