"""Judges for notebook 10 (ONNX export, old and new); see helpers.exercises.

The truth comes from the installed packages: the dynamo exporter and ONNX Runtime decide
whether a `dynamic_shapes` spec gives a file that runs batch 3, the TorchScript exporter's
registry says which ops it lacks, and the TorchScript exporter plus ONNX Runtime say whether a
branch-free `Branchy` survives export. CPU only.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from helpers.exercises import N_, Hint, aten_name, exercise, tr

#: The ops exercise 10.2 asks about (ATen names, as the TorchScript registry keys them).
CANDIDATE_OPS = (
    "aten::gelu",
    "aten::sinc",
    "aten::asinh",
    "aten::celu",
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
    """The line of an export error that names the cause (ANSI colours stripped)."""
    text = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(err)).splitlines()]
    text = [ln for ln in text if ln]
    for marker in ("Constraints violated", "UserError", "Error:"):
        for ln in text:
            if marker in ln:
                return ln[:300]
    return text[0][:300] if text else type(err).__name__


class _Scaled(nn.Module):
    """Exercise 10.1's model: SmallCNN's logits times a per-sample scale."""

    def __init__(self) -> None:
        super().__init__()
        self.cnn = _SmallCNN()

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.cnn(x) * scale  # x: (B, 1, 8, 8), scale: (B, 10) -> (B, 10)


def _is_inferring_hint(spec: Any) -> bool:
    """Dim.AUTO or Dim.DYNAMIC (with or without a range): a hint that leaves the relations
    between dimensions to torch.export, not a named Dim. Dim.STATIC is not one."""
    from torch.export import Dim

    return isinstance(spec, type(Dim.AUTO)) and spec.type != Dim.STATIC.type


@exercise(
    "10.1",
    "a dynamic batch for the new exporter",
    look=N_(
        "section 1's export of SmallCNN (its dynamic_shapes argument) and the docstring's "
        "paragraph on dynamic_shapes"
    ),
    reveal=N_(
        "section 1's spec, one entry per input of forward: `{{'x': {{0: batch}}, 'scale': "
        "{{0: batch}}}}` with one `batch = Dim('batch')`"
    ),
)
def dynamic_batch(answer: Any) -> str:
    """`answer` is the `dynamic_shapes=` argument; export Scaled with it and run batch 3."""
    from helpers.onnx_tools import export_onnx, run_ort

    if answer is None:
        raise Hint(
            tr(
                "None leaves every dimension static: the file then fixes the batch to the "
                "example's 2 and ONNX Runtime refuses batch 3 (section 3's second cell)"
            )
        )
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        # torch.export also takes one spec per positional input, in order: forward(self, x, scale)
        answer = {"x": answer[0], "scale": answer[1]}
    if not isinstance(answer, dict):
        raise Hint(
            tr(
                "pass a dict keyed by the names of forward's parameters, one spec per input: "
                "Scaled.forward(self, x, scale) takes `x` and `scale`"
            )
        )
    if "logits" in answer or "output" in answer:
        raise Hint(
            tr(
                "dynamic_shapes describes the inputs only; the output's batch follows from "
                "the inputs. It was `dynamic_axes` (the old exporter's argument) that named "
                "outputs too"
            )
        )
    if set(answer) == {"x"}:
        raise Hint(
            tr(
                "a dict spec names every parameter of forward (None for one that stays "
                "static), and scale cannot stay static here: forward multiplies the logits by "
                "scale, so scale's dimension 0 is the same batch, and a static scale of batch "
                "2 pins x's too"
            )
        )
    if set(answer) != {"x", "scale"}:
        raise Hint(
            tr(
                (
                    "the keys are the names of forward's parameters: Scaled.forward takes `x` "
                    "and `scale`, you gave {sorted_map_str_answer}"
                ),
                sorted_map_str_answer=sorted(map(str, answer)),
            )
        )
    for key in ("x", "scale"):
        spec = answer[key]
        if isinstance(spec, (list, tuple)) and all(isinstance(d, int) for d in spec):
            raise Hint(
                tr(
                    "a list of dimension numbers is the `dynamic_axes` format; in "
                    "dynamic_shapes a list holds one entry per dimension of the input. Map "
                    "dimension numbers to a torch.export.Dim in a dict instead"
                )
            )
        batch_spec = (
            spec.get(0)
            if isinstance(spec, dict)
            else (spec[0] if isinstance(spec, (list, tuple)) and spec else None)
        )
        if _is_inferring_hint(batch_spec):
            raise Hint(
                tr(
                    "{batch_spec!r} is a hint: with it torch.export infers by itself how the "
                    "batch of x relates to the batch of scale (Dim's docstring: export will "
                    '"infer the remaining constraints on min/max ranges and relationships '
                    'between dimensions"). The exercise is to state that relation in your '
                    "spec: mark dimension 0 with named torch.export.Dim objects",
                    batch_spec=batch_spec,
                )
            )
        if isinstance(spec, dict):
            if 0 not in spec:
                raise Hint(
                    tr(
                        (
                            "the batch is dimension 0 of {key}; your spec makes dimension(s) "
                            "{sorted_spec} dynamic"
                        ),
                        key=key,
                        sorted_spec=sorted(spec),
                    )
                )
            top = getattr(spec[0], "max", None)
            if isinstance(top, int) and top < 3:
                raise Hint(
                    tr(
                        "the Dim declares max={top}: batch 3 is outside the range you declared",
                        top=top,
                    )
                )
    model = _Scaled().eval()
    example = (torch.randn(2, 1, 8, 8), torch.randn(2, 10))
    try:
        m = export_onnx(model, example, dynamic_shapes=answer)
    except Exception as err:  # the exporter's refusal is the feedback
        raise Hint(
            tr(
                "torch.onnx.export refused this spec: {first_line_err}",
                first_line_err=_first_line(err),
            )
        ) from None
    try:
        out = run_ort(m, torch.randn(3, 1, 8, 8), torch.randn(3, 10))[0]
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
    # torch.onnx.export retries a capture torch.export refuses, first with the fix torch.export
    # suggests (refine_dynamic_shapes_from_suggested_fixes, _capture_strategies.py): two Dims
    # for the one batch export there. The spec asked for is one torch.export takes as written.
    try:
        torch.export.export(model, example, dynamic_shapes=answer)
    except Exception as err:
        raise Hint(
            tr(
                (
                    "the file runs batch 3, but torch.export refuses your spec as written "
                    "({first_line_err}); torch.onnx.export got past that by retrying with the fix "
                    "torch.export suggests. Make your spec itself say what forward implies about "
                    "the batch of x and the batch of scale"
                ),
                first_line_err=_first_line(err),
            )
        ) from None
    dim0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    name = dim0.dim_param or dim0.dim_value
    return tr(
        (
            "torch.export takes the spec as written; the file's input x has dimension 0 = "
            "{name!r}, a symbolic name, and ONNX Runtime returns {tuple_out_shape} for batch 3"
        ),
        name=name,
        tuple_out_shape=tuple(out.shape),
    )


def _first_opsets() -> dict[str, int | None]:
    """10.2's truth: per candidate, the lowest opset with a TorchScript symbolic, or None."""
    from helpers.onnx_custom import legacy_symbolic_opsets

    return {op: (legacy_symbolic_opsets(op) or [None])[0] for op in CANDIDATE_OPS}


@exercise(
    "10.2",
    "which ops the TorchScript exporter cannot translate",
    look=N_(
        "section 6: the TorchScript exporter's registry, filled from the symbolic_opsetN.py "
        "files, and how it picks an opset for a target (_dispatch_opset_version in "
        "torch/onnx/_internal/torchscript_exporter/registration.py)"
    ),
    reveal=N_("`legacy_symbolic_opsets(op)` and `locate_translation(op)['torchscript']`"),
)
def lacking_symbolics(answer: Any) -> str:
    """`answer` maps each of CANDIDATE_OPS to its lowest opset with a symbolic, or None."""
    from torch.onnx import _constants

    if not isinstance(answer, dict):
        raise Hint(
            tr(
                "answer with a dict {{op: lowest opset or None}} for all six ops, like "
                '{{"aten::<name>": <opset or None>, ...}}'
            )
        )
    given = {aten_name(k): v for k, v in answer.items()}
    if set(given) != set(CANDIDATE_OPS):
        raise Hint(
            tr(
                "give one entry for each of the six ops {ops}; yours covers {names}",
                ops=list(CANDIDATE_OPS),
                names=sorted(given),
            )
        )
    truth = _first_opsets()
    lowest, highest = _constants.ONNX_MIN_OPSET, _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
    norm = {}
    for op, v in given.items():
        if v is None:
            norm[op] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise Hint(tr("each value is an opset (an int) or None, found {v!r}", v=v))
        norm[op] = v
    if norm == truth:
        from helpers.onnx_custom import onnx_schema_since

        lacking = sorted(op for op, v in truth.items() if v is None)
        erf_since = onnx_schema_since("Erf")
        return tr(
            (
                "{truth}: {lacking} have no symbolic function in the TorchScript exporter's "
                "registry at any opset it accepts ({lowest} to {highest}); a symbolic in "
                "symbolic_opsetN.py serves N and later, and targets 7 and 8 search up to "
                "opset 9, so the opset-9 symbolics of gelu and log1p serve 7. Finding a "
                "symbolic is not making a valid file: gelu's writes an Erf node, an ONNX "
                "operator only since opset {erf_since}, so at 7 and 8 onnx.checker rejects "
                "the file"
            ),
            truth=truth,
            lacking=lacking,
            lowest=lowest,
            highest=highest,
            erf_since=erf_since,
        )
    wrong = [op for op in CANDIDATE_OPS if norm[op] != truth[op]]
    count = tr("{n} of the 6 entries are wrong", n=len(wrong))
    if any(norm[op] is None for op in wrong):
        raise Hint(
            count
            + tr(
                "; an op you marked None has a symbolic: asinh (section 6) has none, but "
                "half of these have one"
            )
        )
    if any(truth[op] is None for op in wrong):
        raise Hint(
            count
            + tr(
                "; an op you gave an opset has no symbolic at any opset: having an ONNX "
                "operator of its own (Asinh, section 6) does not mean the exporter has a "
                "symbolic for it"
            )
        )
    raise Hint(
        count
        + tr(
            "; the ops are right, an opset is not: a symbolic in symbolic_opsetN.py serves N "
            "and later, and the legacy targets 7 and 8 search upward to opset 9, so a "
            "symbolic from symbolic_opset8.py or symbolic_opset9.py serves them too ({lowest} "
            "is the lowest target it accepts)",
            lowest=lowest,
        )
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
        N_("positive"): torch.ones(2, 3),
        N_("negative"): -torch.ones(2, 3),
        N_("mixed, positive sum"): mixed,
        N_("mixed, negative sum"): -mixed,
    }


def _hidden_cases() -> dict[str, torch.Tensor]:
    """10.3's hidden inputs (ONNX Runtime gets the (2, 3) ones: the file's shape is fixed)."""
    return {
        N_("a zero sum, shape (2, 3)"): torch.tensor([[1.0, -2.0, 1.0], [2.0, -1.0, -1.0]]),
        N_("rows of opposite sums, shape (2, 3)"): torch.tensor(
            [[5.0, 1.0, 1.0], [-1.0, -2.0, -1.0]]
        ),
        N_("a 1-d input of 5, negative sum"): torch.tensor([1.0, -4.0, 2.0, -0.5, 0.25]),
        N_("a 3-d input (2, 2, 2), positive sum"): torch.arange(8.0).reshape(2, 2, 2) - 3.0,
    }


@exercise(
    "10.3",
    "Branchy without Python control flow",
    look=N_("section 5: what the TorchScript tracer records of an `if` on a tensor's value"),
    reveal=N_("`torch.where(cond, a, b)` with `cond` a 0-d tensor computed from the whole input"),
)
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
                    name=tr(name),
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
                        name=tr(name),
                    )
                )
            raise Hint(
                tr("eager PyTorch already differs from Branchy on the {name} input", name=tr(name))
            )
    for name, x in _hidden_cases().items():
        got = answer(x.clone())
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            raise Hint(
                tr(
                    "the four inputs pass, but on a hidden case ({name}) the result is not a "
                    "tensor of shape {tuple_x_shape}",
                    name=tr(name),
                    tuple_x_shape=tuple(x.shape),
                )
            )
        if not torch.equal(got, reference(x)):
            raise Hint(
                tr(
                    "the four inputs pass, but a hidden case ({name}) differs from Branchy in "
                    "eager: read its condition again, for the whole tensor and at the boundary",
                    name=tr(name),
                )
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TracerWarning of an `if` is the hint below
        m = export_onnx(_Wrap(answer).eval(), (torch.ones(2, 3),), dynamo=False)
    ort_cases = {**_cases(), **{k: v for k, v in _hidden_cases().items() if v.shape == (2, 3)}}
    wrong = [
        name
        for name, x in ort_cases.items()
        if not torch.equal(torch.from_numpy(run_ort(m, x)[0]), reference(x))
    ]
    if wrong:
        raise Hint(
            tr(
                (
                    "eager is right, but the ONNX file is wrong on the {join_wrong} input(s): "
                    "the TorchScript exporter kept only the branch the example took (section 5). "
                    "Compute both results and select between them with the condition as a "
                    "tensor, so the graph holds the condition"
                ),
                join_wrong=", ".join(tr(w) for w in wrong),
            )
        )
    return tr(
        "eager matches Branchy on all eight inputs and ONNX Runtime on the six of shape "
        "(2, 3): the condition and both results are graph nodes (a Where, or arithmetic on "
        "the condition), so no branch is frozen at trace time"
    )
