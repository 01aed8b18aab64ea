"""Judges for notebook 12 (a C++ operator carried to deployment); see helpers.exercises.

The truth comes from the installed packages: torch's schema parser and dispatcher judge a
schema string (defined in a throwaway namespace, then removed); FakeTensorMode runs the reader's
fake kernel of the backward and the one `board_op` registers (`_upsample_backward_fake`) on the
same FakeTensors, with each case's grad_output shaped by the board's NumPy reference
(`board_op.reference_upsample`); and ONNX Runtime runs `Resize` against the board's rule
(`board_op.interpolation_matrix`). None of them needs the C++ build. CPU only.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import torch
import torch.utils._python_dispatch

from helpers.exercises import (
    N_,
    Hint,
    Refusal,
    Sealed,
    _refusal,
    as_int,
    exercise,
    started_process,
    tr,
    watching,
)

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


@exercise(
    "12.1",
    "the schema string of a new operator",
    look=N_(
        "section 2: the `m.def(...)` lines of the C++ source and the schema printed for "
        "torch.ops.board.upsample (namespace, argument types before names, return type)"
    ),
    reveal=N_("`torch._C.parse_schema(schema)`, then defining it with torch.library"),
)
def blend_schema(answer: Any) -> str:
    """`answer` is the full schema string of board::blend(a, b, alpha) -> Tensor."""
    if not isinstance(answer, str):
        raise Hint(
            tr("give the schema as a string, as str(torch.ops.board.upsample.default._schema)")
        )
    try:
        schema = torch._C.parse_schema(answer)
    except RuntimeError as err:
        if re.search(r"(?<!:):(?!:)", answer.split("(", 1)[0]):  # one colon before the arguments
            raise Hint(
                tr("the namespace separator is two colons, `board::blend`, as in section 2")
            ) from None
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
                "torch's schema parser refused it: {str_err_splitlines_0}",
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
    if schema.overload_name:
        raise Hint(
            tr(
                (
                    "`{schema_name}.{schema_overload_name}` declares the overload "
                    "{schema_overload_name!r}; the op asked for has only the default one "
                    "(`torch.ops.board.blend.default`), whose schema has no overload name"
                ),
                schema_name=schema.name,
                schema_overload_name=schema.overload_name,
            )
        )
    if any(r.alias_info is not None for r in schema.returns) or any(
        a.alias_info is not None for a in schema.arguments
    ):
        raise Hint(
            tr(
                "drop the alias annotations (`(a!)`, `(a)`): blend reads its inputs and "
                "returns a new tensor"
            )
        )
    if [t for _, t in args] != [t for _, t in BLEND_ARGS]:
        types = [_schema_type(t) for _, t in args]
        if len(types) == 3 and types[2] == "int":
            if re.search(r"\bSymInt\b", answer):  # the argument's str(type) is int
                raise Hint(
                    tr(
                        "alpha is a fractional weight: `SymInt` (a symbolic `int`; the "
                        "argument's type prints as `int`) would take only whole numbers"
                    )
                )
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
    if any(a.kwarg_only for a in schema.arguments):
        raise Hint(
            tr(
                "`*` makes the arguments after it keyword-only, so torch.ops.board.blend(a, b, "
                "0.5) would no longer bind; the op takes all three positionally"
            )
        )
    if any(a.default_value is not None for a in schema.arguments):
        raise Hint(
            tr(
                "the op as described has no default value (`=...`): the schema torch prints "
                "would show it, and a caller could then leave alpha out"
            )
        )
    if returns != BLEND_RETURNS:
        raise Hint(
            tr(
                "blend returns one tensor: `-> Tensor` (you declared {returns_or_none})",
                returns_or_none=returns or "none",
            )
        )
    if any(r.name for r in schema.returns):
        raise Hint(
            tr(
                "a named return (`-> Tensor out`) prints differently; section 2's schema "
                "returns an unnamed `Tensor`"
            )
        )
    return tr(
        (
            "torch parses it as {schema} and the dispatcher accepts it; `float` is the "
            "schema type of a C++ double"
        ),
        schema=schema,
    )


def _schema_type(printed: str) -> str:
    """A schema type as the schema string spells it: torch prints Scalar as `number`, `T?` as
    `Optional[T]` and `T[]` as `List[T]`."""
    for wrapper, suffix in (("Optional", "?"), ("List", "[]")):
        if printed.startswith(f"{wrapper}[") and printed.endswith("]"):
            return _schema_type(printed[len(wrapper) + 1 : -1]) + suffix
    return {"number": "Scalar"}.get(printed, printed)


def _watching(fn: Any) -> Any:
    """A block that records each call of `fn` (any alias, any thread: `watching`, its code also
    swapped for a recorder) and any process the block starts."""
    return watching({fn.__code__}, swap=(fn,), processes=True)


def _seen(out: Any, grad: Any) -> Any:
    """Inside the watch and the fake mode: what the judge reads of the answer, as plain values
    (nothing of the reader's runs after the watch): its type's name for a non-tensor, else
    (is a FakeTensor, shape, dtype, device, a view of grad_output). A tensor of a subclass
    (`type(out)` neither FakeTensor nor torch.Tensor) is refused here."""
    import types

    from torch._subclasses.fake_tensor import FakeTensor

    if type(out) not in (FakeTensor, torch.Tensor):
        if isinstance(out, torch.Tensor):
            raise Hint(
                tr(
                    "return a tensor of torch's own classes, found a {found}: a subclass may "
                    "run code of its own after the check",
                    found=type(out).__name__,
                )
            )
        return type(out).__name__
    return types.SimpleNamespace(
        fake=type(out) is FakeTensor,
        shape=tuple(out.shape),
        dtype=out.dtype,
        device=out.device,
        alias=torch._C._is_alias_of(out, grad),
    )


class _NoBoardOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Refuses every board:: op: the fake kernel must not call the op whose fake it is."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "board":
            raise _refusal(
                tr(
                    "your function calls {op}; a fake kernel describes the op's output itself, "
                    "it does not call the op",
                    op=str(func),
                )
            )
        return func(*args, **(kwargs or {}))


#: 12.2's cases: (input shape, dtype, scale, mode); the first is the one the prompt shows. Only the
#: dtypes the C++ kernel takes (`check_4d_float`: float32 or float64), as a fake kernel may refuse
#: what the real one refuses.
_FAKE_CASES = (
    ((2, 3, 4, 5), torch.float64, 3, "nearest"),
    ((1, 2, 6, 7), torch.float32, 2, "bilinear"),
    ((3, 1, 1, 9), torch.float32, 4, "nearest"),
    ((1, 4, 5, 2), torch.float32, 1, "bilinear"),
)


@exercise(
    "12.2",
    "a fake kernel for board::upsample_backward",
    look=N_(
        "section 2 (the schema of upsample_backward: which sizes it is given) and section 3 "
        "(`_backward`, which calls it with the forward input's H and W; `_upsample_fake`)"
    ),
    reveal=N_(
        "`board_op._upsample_backward_fake(grad_output, in_h, in_w, scale, mode)`, the fake "
        "kernel build() registers for board::upsample_backward (`_register_python_parts`, "
        "section 3), on the same FakeTensor; each case's grad_output has the shape "
        "`board_op.reference_upsample(x, scale, mode)` gives an input x of (N, C, in_h, in_w)"
    ),
)
def upsample_backward_fake(answer: Any) -> str:
    """`answer(grad_output, in_h, in_w, scale, mode)` on FakeTensors: the input gradient's shape.

    The truth: the fake kernel board_op registers for board::upsample_backward
    (`_upsample_backward_fake`, registered by `_register_python_parts`), called on the same
    FakeTensor; each case's grad_output has the shape the board's
    NumPy reference gives the forward's output for an input of shape (N, C, in_h, in_w), and the
    judge asserts that the registered kernel returns that input's shape.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    from helpers import board_op
    from helpers.board_op import reference_upsample

    if not callable(answer):
        raise Hint(
            tr("give a function upsample_backward_fake(grad_output, in_h, in_w, scale, mode)")
        )
    # every answer first, each under the watch and the board-op refusal; the truths (the
    # registered kernel's outputs) only after, so that none is in a frame of this judge while
    # the reader's code runs
    # the registered kernel (the truth), frozen before the reader's code runs: refused after
    # each answer if it was rebound or its code replaced, and the truths from the saved one
    seal = Sealed([(board_op, "_upsample_backward_fake")])
    runs = []
    for shape, dtype, scale, mode in _FAKE_CASES:
        out_shape = reference_upsample(np.zeros(shape, dtype=np.float32), scale, mode).shape
        fake = FakeTensorMode()
        with fake:
            grad = torch.empty(out_shape, dtype=dtype)
            before = (tuple(grad.shape), grad.stride(), grad._version)
            with _NoBoardOps(), _watching(board_op._upsample_backward_fake) as called:
                try:
                    out = answer(grad, shape[2], shape[3], scale, mode)
                except Refusal:  # the refusal of a board op: a route refused, as the watch's are
                    raise
                except Exception as e:  # noqa: BLE001 - the reader's error (its own Hint too)
                    out = Hint(
                        tr(
                            "your code raised {error}: {message}",
                            error=type(e).__name__,
                            message=f"{e}",
                        )
                    )
                else:
                    try:  # what the judge reads of it, still inside the watch
                        out = _seen(out, grad)
                    except Hint as e:
                        out = e
        started_process(called)
        if "sys.setprofile" in called:
            raise Hint(
                tr(
                    "your function switches off the check's watch (sys.setprofile): leave the "
                    "profiler in place and write the function yourself from the schema and "
                    "`_backward`"
                )
            )
        if called:
            raise Hint(
                tr(
                    "that is board_op's own fake kernel, the one build() registers: write the "
                    "function yourself from the schema and `_backward`"
                )
            )
        seal.refuse()
        runs.append((fake, grad, before, out))
    kernel = seal.value(board_op, "_upsample_backward_fake")
    for i, ((shape, dtype, scale, mode), (fake, grad, before, out)) in enumerate(
        zip(_FAKE_CASES, runs, strict=True)
    ):
        out_shape = tuple(grad.shape)
        n, c, in_h, in_w = shape
        case = tr(
            "grad_output {grad_shape} {dtype}, in_h={in_h}, in_w={in_w}, scale={scale}, "
            "mode={mode!r}",
            grad_shape=out_shape,
            dtype=str(dtype).removeprefix("torch."),
            in_h=in_h,
            in_w=in_w,
            scale=scale,
            mode=mode,
        )
        if isinstance(out, Exception):
            raise out
        with fake:
            truth = kernel(grad, in_h, in_w, scale, mode)
        assert (tuple(truth.shape), truth.dtype) == (shape, dtype), (
            f"board_op's registered fake kernel should return the input's shape {shape} in "
            f"{dtype}, found {tuple(truth.shape)} in {truth.dtype}"
        )
        if isinstance(out, str):  # not a tensor: its type's name (`_seen`)
            raise Hint(tr("return a tensor (got {type_out___name})", type_out___name=out))
        if (tuple(grad.shape), grad.stride(), grad._version) != before:
            raise Hint(
                tr(
                    "your function modifies grad_output (its shape, strides or version "
                    "changed): a fake kernel only describes a new output, it never writes "
                    "into its inputs"
                )
            )
        if out.alias:
            raise Hint(
                tr(
                    "your result shares grad_output's storage (a view of it); the schema "
                    "declares a new tensor (no alias annotation), so opcheck would refuse it"
                )
            )
        if out.device != truth.device:
            raise Hint(
                tr(
                    "your result is on {out_device}, grad_output on {device}: a fake kernel "
                    "keeps the device of the tensor it is given",
                    out_device=out.device,
                    device=grad.device,
                )
            )
        got = out.shape
        if got != tuple(truth.shape):
            if got == tuple(out_shape):
                raise Hint(
                    tr(
                        "that is grad_output's shape, the upsampled one; the backward returns the "
                        "gradient of which tensor, and which arguments give that tensor's sizes?"
                    )
                )
            if got == (in_h, in_w):
                raise Hint(tr("keep N and C: the gradient is 4-D like the forward's input"))
            if i and len(got) != len(shape):
                raise Hint(
                    tr(
                        "a hidden case ({case}): your shape {got} has {n_got} dimensions; the "
                        "forward's input has {n_dims}",
                        case=case,
                        got=got,
                        n_got=len(got),
                        n_dims=len(shape),
                    )
                )
            if i:
                wrong = [d for d in range(len(got)) if got[d] != shape[d]]
                raise Hint(
                    tr(
                        "a hidden case ({case}): your shape {got} is wrong in the dimensions "
                        "at indices {wrong}; take every size from the arguments, none by heart",
                        case=case,
                        got=got,
                        wrong=wrong,
                    )
                )
            raise Hint(
                tr(
                    "for {case}: your shape is {got}; which sizes does the forward's input have?",
                    case=case,
                    got=got,
                )
            )
        if out.dtype != truth.dtype:
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
        if not out.fake:
            raise Hint(
                tr("return a tensor made inside the fake mode, from grad_output (new_empty)")
            )
    return tr(
        "under FakeTensorMode it returns a new tensor (no view of grad_output) of shape (N, C, "
        "in_h, in_w) in grad_output's dtype and device: what tracing a backward through the C++ "
        "kernel needs. The simplest form takes the sizes from the arguments, as `_upsample_fake` "
        "does: N and C from grad_output, in_h and in_w as given"
    )


#: 12.3's axis: N_IN input pixels upsampled by SCALE (section 6's function body, another size).
N_IN, SCALE = 7, 3


def _resize_columns(nearest_mode: str) -> list[int]:
    """Which input column each output column reads: Resize of an N_IN-wide ramp, in ORT."""
    from helpers.onnx_custom import resize_in_ort

    ramp = torch.arange(float(N_IN)).repeat(N_IN, 1).reshape(1, 1, N_IN, N_IN)  # rows 0..N_IN-1
    out = resize_in_ort(
        ramp,
        N_IN * SCALE,
        mode="nearest",
        coordinate_transformation_mode="align_corners",
        nearest_mode=nearest_mode,
    )
    return [int(v) for v in out[0, 0, 0]]


@exercise(
    "12.3",
    "which pixels move with round_prefer_floor",
    look=N_(
        "section 1 (the board's rule: output pixel d reads input coordinate "
        "d * (in - 1) / (out - 1), rounded half up) and the nearest_mode attribute of Resize"
    ),
    reveal=N_(
        "`resize_in_ort(ramp, 21, mode='nearest', coordinate_transformation_mode="
        "'align_corners', nearest_mode=...)` on a 7x7 ramp against "
        "`board_op.interpolation_matrix(7, 21, 'nearest').argmax(axis=1)`"
    ),
)
def moved_pixels(answer: Any) -> str:
    """`answer` lists the output pixels (7 -> 21) that change if the body rounds half down."""
    from helpers.board_op import interpolation_matrix

    n_out = N_IN * SCALE
    if isinstance(answer, (int, str)) or not isinstance(answer, (list, tuple, set)):
        raise Hint(tr("give a list of output pixel indices, e.g. [0, 8]"))
    ints = [as_int(d) for d in answer]
    if all(isinstance(d, float) for d in answer) and sorted(answer) == [1.5, 4.5]:
        raise Hint(
            tr(
                "1.5 and 4.5 are input coordinates; the question asks for the output pixels d "
                "whose coordinate they are"
            )
        )
    if any(d is None for d in ints):
        raise Hint(tr("pixel indices are whole numbers; give a list of ints"))
    if len(set(ints)) != len(ints):
        raise Hint(tr("each pixel once: your list repeats an index"))
    chosen = sorted(ints)
    board = interpolation_matrix(N_IN, n_out, "nearest").argmax(axis=1).tolist()
    ceil, floor = _resize_columns("round_prefer_ceil"), _resize_columns("round_prefer_floor")
    assert ceil == board, f"the function body's Resize should equal the board: {ceil} vs {board}"
    truth = [d for d in range(n_out) if floor[d] != board[d]]
    step = f"{N_IN - 1} / {n_out - 1}"
    if chosen == truth:
        coords = ", ".join(f"{d} * {step} = {d * (N_IN - 1) / (n_out - 1):g}" for d in truth)
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
    if any(not 0 <= d < n_out for d in chosen):
        raise Hint(tr("output pixels are numbered 0 to {last}", last=n_out - 1))
    torch_nearest = [d * N_IN // n_out for d in range(n_out)]
    if chosen == [d for d in range(n_out) if torch_nearest[d] != board[d]]:
        raise Hint(
            tr(
                "that is where the board differs from PyTorch's nearest (section 1); compare "
                "the board with a Resize that rounds ties down instead"
            )
        )
    if chosen == [d for d in range(n_out) if d % 2 == 1] or chosen == [2, 6]:
        raise Hint(
            tr(
                "that is a pattern from another size; here the coordinate is d * {step}: "
                "for which d is it exactly k + 0.5?",
                step=step,
            )
        )
    if not chosen:
        raise Hint(
            tr(
                "some pixels do move: look for output pixels d whose coordinate d * {step} "
                "lies exactly halfway between two input pixels",
                step=step,
            )
        )
    raise Hint(
        tr(
            "only ties change: the output pixels whose coordinate d * {step} ends in .5; "
            "list each of them, numbered from 0",
            step=step,
        )
    )
