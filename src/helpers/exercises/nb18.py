"""Judges for notebook 18 (one operator through every layer); see helpers.exercises.

The truth comes from the installed torch: `native_functions.yaml` through torchgen's parser
(`helpers.operator_path.native_entry`), the dispatcher's live table (`dispatch_table`) and
autograd itself (the gradient of `torch.atan`). CPU only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._python_dispatch

from helpers import operator_path
from helpers.exercises import N_, Hint, choice_set, exercise, tr

#: The ops exercise 18.1 asks about.
CANDIDATES = ("atan", "asinh", "abs", "logit", "silu", "hardswish")
#: The keys of a CPU tensor, with or without requires_grad (exercise 18.2).
TENSOR_KEYS = ("CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU")
#: Exercise 18.2's reasons, by key (msgids).
REASONS = {
    "version": N_(
        "an op that writes into its input must bump the tensor's version counter, work the "
        "ADInplaceOrView key does (for view ops it also ties the output to its base)"
    ),
    "no_grad": N_("an in-place op has no gradient, so autograd's slot is skipped"),
    "autocast": N_("autocast must cast the inputs of an in-place op, so its slot holds a kernel"),
    "functional": N_("the CPU kernel of an in-place op falls through to the functional one"),
}


def delegating_ops() -> set[str]:
    """The candidates declared with a `structured_delegate` in native_functions.yaml."""
    return {n for n in CANDIDATES if operator_path.native_entry(n)["structured_delegate"]}


def fallthrough_keys(op: str = "aten::atan") -> set[str]:
    """The keys of TENSOR_KEYS whose slot in the table of `op` is a fallthrough."""
    table = operator_path.dispatch_table(op)
    return {k for k in TENSOR_KEYS if table[k].fallthrough}


@exercise(
    "18.1",
    "which ops delegate to a structured kernel",
    look=N_(
        "section 3 (native_functions.yaml): the `structured_delegate:` line of each candidate's "
        "entry in torchgen/packaged/ATen/native/native_functions.yaml"
    ),
    reveal=N_("`operator_path.native_entry(name)['structured_delegate']` for each candidate"),
)
def structured_delegates(answer: Any) -> str:
    given = choice_set(answer, CANDIDATES, tr("op names"), "{'atan'}")
    truth = delegating_ops()
    if given == truth:
        return tr(
            "{names} are declared with `structured_delegate: <name>.out`; the others have "
            "kernels of their own (or a composite implementation) in their dispatch entries",
            names=sorted(truth),
        )
    if given == {"atan", "asinh"} and given < truth:
        raise Hint(
            tr(
                "not only the inverse trigonometric and hyperbolic ones: read the entry of every "
                "candidate"
            )
        )
    extra, missing = sorted(given - truth), sorted(truth - given)
    if extra:
        raise Hint(
            tr(
                "{extra} have no `structured_delegate` line: their functional form names "
                "kernels of its own under `dispatch:` (or is composite)",
                extra=extra,
            )
        )
    raise Hint(
        tr(
            "{missing} also delegate: their functional form is generated from a structured "
            "out overload",
            missing=missing,
        )
    )


@exercise(
    "18.2",
    "the slots the dispatcher skips for an in-place op",
    look=N_(
        "section 4 (the dispatcher's table): the `fallthrough` field of each key, and the file "
        "that registers the ADInplaceOrView kernels (generated ADInplaceOrViewType_*.cpp)"
    ),
    reveal=N_(
        "`operator_path.dispatch_table('aten::atan_')`, each key's Registration, against the "
        "table of aten::atan"
    ),
)
def skipped_keys(answer: Any) -> str:
    if isinstance(answer, list) and len(answer) == 2:
        answer = tuple(answer)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise Hint(
            tr(
                "give a pair (set of key names, reason key), e.g. ({{'CPU'}}, 'no_grad'); the "
                "reason keys are {reasons}",
                reasons=sorted(REASONS),
            )
        )
    keys, reason = answer
    given = choice_set(keys, TENSOR_KEYS, tr("key names"), "{'CPU'}")
    truth = fallthrough_keys("aten::atan_")
    functional = fallthrough_keys("aten::atan")
    if reason not in REASONS:
        raise Hint(
            tr(
                "{reason!r} is not a reason key; choose one of {reasons}",
                reason=reason,
                reasons=sorted(REASONS),
            )
        )
    # the reason that holds: the slot atan skips and atan_ does not is ADInplaceOrView's
    right_reason = "version" if "ADInplaceOrView" in functional - truth else None
    if given == truth and reason == right_reason:
        return tr(
            "for atan_ only {keys} falls through; atan's table skips {functional}: "
            "ADInplaceOrView holds a generated kernel for every in-place and out= op, which "
            "redispatches below itself and then bumps the version counter of the tensor it "
            "wrote",
            keys=sorted(truth),
            functional=sorted(functional),
        )
    if given == functional:
        raise Hint(
            tr(
                "that is the table of the functional atan, which writes into nothing; an "
                "in-place op modifies its input: which key's job is that bookkeeping?"
            )
        )
    if "AutogradCPU" in given or "CPU" in given:
        raise Hint(
            tr(
                "AutogradCPU and CPU hold real kernels for atan_ too: atan_ is differentiable "
                "(it records AtanBackward0) and computes on the CPU"
            )
        )
    if given != truth:
        raise Hint(
            tr(
                "{count} of the four are fallthroughs for atan_: which backend fallback is "
                "registered for every op alike (every op not on autocast's lists), and which key "
                "has per-op kernels for in-place ops?",
                count=len(truth),
            )
        )
    raise Hint(
        tr(
            "the keys are right; the reason is not: what must happen to a tensor that an op "
            "writes into, so that autograd can detect it was modified after being saved?"
        )
    )


class _NoAtan(torch.utils._python_dispatch.TorchDispatchMode):
    """Refuses atan (and its backward) inside the reader's function: the formula needs neither."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name().split("::")[-1].split(".")[0] in ("atan", "atan_", "atan_backward"):
            raise Hint(
                tr(
                    "your function runs atan itself ({op}), so torch differentiates it for you; "
                    "write the derivative's formula with x and grad alone",
                    op=str(func),
                )
            )
        return func(*args, **(kwargs or {}))


#: 18.3's cases: (name, x, grad); the first is the one the prompt shows.
def _atan_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(18)
    x = torch.randn(16, dtype=torch.float64, generator=gen) * 3
    grad = torch.randn(16, dtype=torch.float64, generator=gen)
    x2 = torch.randn(3, 5, generator=gen) * 10  # float32, 2-D
    g2 = torch.randn(3, 5, generator=gen)
    x3 = torch.tensor([0.0, -1e3, 1e3, 1e-4, -2.5], dtype=torch.float64)
    g3 = torch.tensor([1.0, 2.0, -1.0, 0.5, 0.0], dtype=torch.float64)
    return [
        (N_("x = 3 * randn(16) float64 (the shown case)"), x, grad),
        (N_("x of shape (3, 5), float32"), x2, g2),
        (N_("x = [0, -1e3, 1e3, 1e-4, -2.5] float64 with a zero grad entry"), x3, g3),
    ]


@exercise(
    "18.3",
    "the backward of atan by hand",
    look=N_(
        "section 5 (derivatives.yaml): the `self:` formula of the atan entry, and the chain "
        "rule: a backward multiplies the incoming gradient"
    ),
    reveal=N_("`torch.autograd.functional.vjp` of atan at `x` with `grad`"),
)
def atan_backward(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function atan_backward(x, grad) that returns a tensor"))
    for i, (name, x, grad) in enumerate(_atan_cases()):
        leaf = x.clone().requires_grad_(True)
        (truth,) = torch.autograd.grad(torch.atan(leaf), leaf, grad)
        x_in, grad_in = x.clone(), grad.clone()
        with _NoAtan():
            found = answer(x_in, grad_in)
        if not (torch.equal(x_in, x) and torch.equal(grad_in, grad)):
            raise Hint(
                tr(
                    "your function writes into x or grad (an in-place op such as mul_ or div_): "
                    "in a real backward x is the saved input, and changing it corrupts the graph"
                )
            )
        if isinstance(found, torch.Tensor) and found.grad_fn is not None:
            raise Hint(tr("your result carries a grad_fn: compute it from x and grad directly"))
        if not isinstance(found, torch.Tensor) or found.shape != truth.shape:
            shown = tuple(found.shape) if isinstance(found, torch.Tensor) else type(found).__name__
            if i == 0:
                raise Hint(
                    tr(
                        "return a tensor shaped like x {shape}, found {found}",
                        shape=tuple(x.shape),
                        found=shown,
                    )
                )
            raise Hint(
                tr(
                    "a hidden case ({case}): return a tensor shaped like x {shape}, found "
                    "{found}; does your function assume 16 values?",
                    case=tr(name),
                    shape=tuple(x.shape),
                    found=shown,
                )
            )
        if i == 0:
            if torch.allclose(found, 1 / (x * x + 1)):
                raise Hint(tr("multiply by the incoming gradient `grad` (the chain rule)"))
            if torch.allclose(found, -truth):
                raise Hint(tr("the sign: atan is increasing, so its derivative is positive"))
            if torch.allclose(found, grad / (1 - x * x)) or torch.allclose(
                found, grad / (x * x - 1)
            ):
                raise Hint(tr("d/dx atan(x) = 1 / (1 + x**2): a plus, not a minus"))
            if not torch.allclose(found, truth):
                raise Hint(tr("d/dx atan(x) = 1 / (1 + x**2); section 5 prints the formula"))
            continue
        if found.dtype != truth.dtype:
            raise Hint(
                tr(
                    "a hidden case ({case}): your gradient is {found}, the input is {dtype}; "
                    "compute in x's dtype, with no fixed dtype or constant tensor",
                    case=tr(name),
                    found=found.dtype,
                    dtype=truth.dtype,
                )
            )
        if not torch.allclose(found, truth, rtol=1e-5, atol=1e-12):
            bad = (found - truth).abs().argmax().item()
            raise Hint(
                tr(
                    "a hidden case ({case}) differs at flat index {index}: does your formula "
                    "hold for every value, shape and dtype, not only the shown 16 values?",
                    case=tr(name),
                    index=bad,
                )
            )
    return tr("grad / (x * x + 1): the formula of derivatives.yaml, which AtanBackward0 computes")
