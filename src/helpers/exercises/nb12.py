"""Judges for notebook 12 (a C++ operator carried to deployment); see helpers.exercises.

The truth comes from the installed packages: torch's schema parser and dispatcher judge a
schema string (defined in a throwaway namespace, then removed), FakeTensorMode runs a fake
kernel of the backward against the board's NumPy reference (`board_op.reference_upsample`), and
ONNX Runtime runs `Resize` against the board's rule (`board_op.interpolation_matrix`). None of
them needs the C++ build. CPU only.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import torch

from helpers.exercises import Hint, exercise, tr

#: What exercise 12.1's schema must declare: (name, type) of each argument, and the returns.
BLEND_ARGS = [("a", "Tensor"), ("b", "Tensor"), ("alpha", "float")]
BLEND_RETURNS = ["Tensor"]

_NAMESPACES = itertools.count()


def _define(schema_without_namespace: str) -> str:
    """'' if the dispatcher accepts the schema (in a fresh namespace, removed again), else why."""
    lib = torch.library.Library(f"nb12_exercise_{next(_NAMESPACES)}", "FRAGMENT")
    try:
        lib.define(schema_without_namespace)
    except Exception as err:  # the dispatcher's refusal is the hint
        lines = [line for line in str(err).splitlines() if line.strip()]
        return lines[0] if lines else type(err).__name__
    finally:
        lib._destroy()
    return ""


@exercise("12.1", "the schema string of a new operator")
def blend_schema(answer: Any) -> str:
    """`answer` is the full schema string of board::blend(a, b, alpha) -> Tensor."""
    if not isinstance(answer, str):
        raise Hint(
            tr("give the schema as a string, as str(torch.ops.board.upsample.default._schema)")
        )
    try:
        schema = torch._C.parse_schema(answer)
    except RuntimeError as err:
        if re.search(r"\w+\s*:\s*\w+", answer):
            raise Hint(
                tr(
                    "that is Python's annotation order (name: type); a schema writes the type "
                    "first: `Tensor input` (section 2's schema)"
                )
            ) from None
        if "->" not in answer:
            raise Hint(tr("a schema ends with the return type: `... -> Tensor`")) from None
        raise Hint(
            tr(
                "torch._C.parse_schema refused it: {str_err_splitlines_0}",
                str_err_splitlines_0=str(err).splitlines()[0],
            )
        ) from None
    if schema.overload_name and "::" not in answer:
        raise Hint(
            tr(
                (
                    "`{schema_name}.{schema_overload_name}` reads as op {schema_name!r} with "
                    "overload {schema_overload_name!r}: the namespace separator is `::`"
                ),
                schema_name=schema.name,
                schema_overload_name=schema.overload_name,
            )
        )
    if "::" not in schema.name:
        raise Hint(
            tr(
                "m.def inside TORCH_LIBRARY(board, m) may leave the namespace out, but the "
                "schema torch reports (`._schema`) carries it: `board::...`"
            )
        )
    if schema.name != "board::blend":
        raise Hint(tr("the operator is board::blend, not {schema_name}", schema_name=schema.name))
    refusal = _define(answer.split("::", 1)[1])
    if "double" in refusal or re.search(r"\bdouble\b", answer):
        raise Hint(
            tr(
                (
                    "torch.library refuses `double` when it defines the op: schema types are "
                    "TorchScript's, and a C++ double is `float` there (torch says: {refusal})"
                ),
                refusal=refusal,
            )
        )
    if refusal:
        raise Hint(tr("torch.library refused to define it: {refusal}", refusal=refusal))
    args = [(a.name, str(a.type)) for a in schema.arguments]
    returns = [str(r.type) for r in schema.returns]
    if any(a.alias_info is not None for a in schema.arguments):
        raise Hint(
            tr(
                "drop the alias annotations (`(a!)`, `(a)`): blend reads its inputs and "
                "returns a new tensor"
            )
        )
    if [t for _, t in args] != [t for _, t in BLEND_ARGS]:
        types = [t for _, t in args]
        if len(types) == 3 and types[2] == "int":
            raise Hint(tr("alpha is a fractional weight: `int` would take only whole numbers"))
        raise Hint(
            tr("the argument types are {types}; blend takes two tensors and one float", types=types)
        )
    if args != BLEND_ARGS:
        raise Hint(
            tr(
                (
                    "name the arguments a, b and alpha, as asked (you wrote "
                    "{n_for_n___in_args}): the names become Python keywords, "
                    "torch.ops.board.blend(a=..., b=..., alpha=...)"
                ),
                n_for_n___in_args=[n for n, _ in args],
            )
        )
    if returns != BLEND_RETURNS:
        raise Hint(
            tr(
                "blend returns one tensor: `-> Tensor` (you declared {returns_or_none})",
                returns_or_none=returns or "none",
            )
        )
    return tr(
        (
            "torch parses it as {schema} and the dispatcher accepts it; `float` is the "
            "schema type of a C++ double"
        ),
        schema=schema,
    )


_FAKE_CASES = (
    ((2, 3, 4, 5), torch.float64, 3, "nearest"),
    ((1, 2, 6, 7), torch.float32, 2, "bilinear"),
)


@exercise("12.2", "a fake kernel for board::upsample_backward")
def upsample_backward_fake(answer: Any) -> str:
    """`answer(grad_output, in_h, in_w, scale, mode)` on FakeTensors: the input gradient's shape.

    The truth: for an input of shape (N, C, in_h, in_w), the board's NumPy reference gives the
    forward output's shape, which is grad_output's; the gradient has the input's shape and
    grad_output's dtype.
    """
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from helpers.board_op import reference_upsample

    if not callable(answer):
        raise Hint(
            tr("give a function upsample_backward_fake(grad_output, in_h, in_w, scale, mode)")
        )
    for shape, dtype, scale, mode in _FAKE_CASES:
        out_shape = reference_upsample(np.zeros(shape, dtype=np.float32), scale, mode).shape
        n, c, in_h, in_w = shape
        with FakeTensorMode():
            out = answer(torch.empty(out_shape, dtype=dtype), in_h, in_w, scale, mode)
        if not isinstance(out, torch.Tensor):
            raise Hint(
                tr("return a tensor (got {type_out___name})", type_out___name=type(out).__name__)
            )
        got = tuple(out.shape)
        if got != shape:
            if got == tuple(out_shape):
                raise Hint(
                    tr(
                        "that is grad_output's shape, the upsampled one; the backward returns the "
                        "gradient of the forward's input: (N, C, in_h, in_w)"
                    )
                )
            if got == (in_h, in_w):
                raise Hint(tr("keep N and C: the gradient is 4-D like the forward's input"))
            raise Hint(
                tr(
                    (
                        "for grad_output {tuple_out_shape}, in_h={in_h}, in_w={in_w}: expected "
                        "shape {shape}, got {got}"
                    ),
                    tuple_out_shape=tuple(out_shape),
                    in_h=in_h,
                    in_w=in_w,
                    shape=shape,
                    got=got,
                )
            )
        if out.dtype != dtype:
            raise Hint(
                tr(
                    (
                        "for a {dtype} grad_output your gradient is {out_dtype}: it keeps "
                        "grad_output's dtype (grad_output.new_empty keeps it)"
                    ),
                    dtype=dtype,
                    out_dtype=out.dtype,
                )
            )
        if not isinstance(out, FakeTensor):
            raise Hint(
                tr("return a tensor made inside the fake mode, from grad_output (new_empty)")
            )
    return tr(
        "under FakeTensorMode it returns (N, C, in_h, in_w) in grad_output's dtype, "
        "with no data: what tracing a backward through the C++ kernel needs"
    )


def _resize_columns(nearest_mode: str) -> list[int]:
    """Which input column each of 9 output columns reads: Resize of a 3-wide ramp, in ORT."""
    from helpers.onnx_custom import resize_in_ort

    ramp = torch.arange(3.0).repeat(3, 1).reshape(1, 1, 3, 3)  # every row is [0, 1, 2]
    out = resize_in_ort(
        ramp,
        9,
        mode="nearest",
        coordinate_transformation_mode="align_corners",
        nearest_mode=nearest_mode,
    )
    return [int(v) for v in out[0, 0, 0]]


@exercise("12.3", "which pixels move with round_prefer_floor")
def moved_pixels(answer: Any) -> str:
    """`answer` lists the output pixels (3 -> 9) that change if the body rounds half down."""
    from helpers.board_op import interpolation_matrix

    if isinstance(answer, (int, str)) or not isinstance(answer, (list, tuple, set)):
        raise Hint(tr("give a list of output pixel indices, e.g. [0, 8]"))
    chosen = sorted(int(d) for d in answer)
    board = interpolation_matrix(3, 9, "nearest").argmax(axis=1).tolist()
    ceil, floor = _resize_columns("round_prefer_ceil"), _resize_columns("round_prefer_floor")
    assert ceil == board, f"the function body's Resize should equal the board: {ceil} vs {board}"
    truth = [d for d in range(9) if floor[d] != board[d]]
    if chosen == truth:
        coords = ", ".join(f"{d} * 2 / 8 = {d / 4:g}" for d in truth)
        return tr(
            (
                "output pixels {truth} sit exactly halfway between two input pixels "
                "({coords}): the board rounds them up, round_prefer_floor down ({board} vs "
                "{floor})"
            ),
            truth=truth,
            coords=coords,
            board=board,
            floor=floor,
        )
    torch_nearest = [d * 3 // 9 for d in range(9)]
    if chosen == [d for d in range(9) if torch_nearest[d] != board[d]]:
        raise Hint(
            tr(
                "that is where the board differs from PyTorch's nearest (section 1); compare "
                "the board with a Resize that rounds ties down instead"
            )
        )
    if not chosen:
        raise Hint(
            tr(
                "some pixels do move: look for output pixels d whose coordinate d * (3 - 1) "
                "/ (9 - 1) lies exactly halfway between two input pixels"
            )
        )
    if any(not 0 <= d < 9 for d in chosen):
        raise Hint(tr("output pixels are numbered 0 to 8"))
    raise Hint(
        tr(
            "only ties change: the output pixels whose coordinate d * 2 / 8 ends in .5; "
            "list each of them, numbered from 0"
        )
    )
