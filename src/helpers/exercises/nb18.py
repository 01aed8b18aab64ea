"""Judges for notebook 18 (one operator through every layer); see helpers.exercises.

The truth comes from the installed torch: `native_functions.yaml` through torchgen's parser
(`helpers.operator_path.native_entry`), the dispatcher's live table (`dispatch_table`) and
autograd itself (the gradient of `torch.atan`). CPU only.
"""

from __future__ import annotations

from typing import Any

import torch

from helpers import operator_path
from helpers.exercises import Hint, choice_set, exercise, tr

#: The ops exercise 18.1 asks about.
CANDIDATES = ("atan", "asinh", "abs", "logit", "silu", "hardswish")
#: The keys of a CPU tensor that requires grad (exercise 18.2).
TENSOR_KEYS = ("CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU")


def delegating_ops() -> set[str]:
    """The candidates declared with a `structured_delegate` in native_functions.yaml."""
    return {n for n in CANDIDATES if operator_path.native_entry(n)["structured_delegate"]}


def fallthrough_keys() -> set[str]:
    """The keys of TENSOR_KEYS whose slot in the table of aten::atan is a fallthrough."""
    table = operator_path.dispatch_table("aten::atan")
    return {k for k in TENSOR_KEYS if table[k].fallthrough}


@exercise("18.1", "which ops delegate to a structured kernel")
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
        raise Hint(tr("not only the inverse trigonometric ones: read the entry of every candidate"))
    extra, missing = sorted(given - truth), sorted(truth - given)
    if extra:
        raise Hint(
            tr(
                "{extra} have no `structured_delegate` (native_entry(name)"
                "['structured_delegate'] is None)",
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


@exercise("18.2", "the slots the dispatcher skips")
def skipped_keys(answer: Any) -> str:
    given = choice_set(answer, TENSOR_KEYS, tr("key names"), "{'CPU'}")
    truth = fallthrough_keys()
    if given == truth:
        return tr(
            "{keys} hold fallthroughs: the dispatcher goes on to the next key, so a CPU call "
            "runs the autograd kernel and then the CPU kernel",
            keys=sorted(truth),
        )
    if "AutogradCPU" in given or "CPU" in given:
        raise Hint(
            tr(
                "AutogradCPU and CPU hold real kernels (kinds 'autograd kernel' and 'kernel'); "
                "look at the `fallthrough` field of each Registration"
            )
        )
    raise Hint(
        tr(
            "compare each key's `fallthrough` field: {count} of the four are fallthroughs",
            count=len(truth),
        )
    )


@exercise("18.3", "the backward of atan by hand")
def atan_backward(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function atan_backward(x, grad) that returns a tensor"))
    gen = torch.Generator().manual_seed(18)
    x = torch.randn(16, dtype=torch.float64, generator=gen) * 3
    grad = torch.randn(16, dtype=torch.float64, generator=gen)
    leaf = x.clone().requires_grad_(True)
    (truth,) = torch.autograd.grad(torch.atan(leaf), leaf, grad)
    found = answer(x.clone(), grad.clone())
    if not isinstance(found, torch.Tensor) or found.shape != truth.shape:
        raise Hint(tr("return a tensor shaped like x, found {found}", found=type(found).__name__))
    if torch.allclose(found, truth):
        return tr(
            "grad / (x * x + 1): the formula of derivatives.yaml, which AtanBackward0 computes"
        )
    if torch.allclose(found, 1 / (x * x + 1)):
        raise Hint(tr("multiply by the incoming gradient `grad` (the chain rule)"))
    if torch.allclose(found, -truth):
        raise Hint(tr("the sign: atan is increasing, so its derivative is positive"))
    if torch.allclose(found, grad / (1 - x * x)) or torch.allclose(found, grad / (x * x - 1)):
        raise Hint(tr("d/dx atan(x) = 1 / (1 + x**2): a plus, not a minus"))
    raise Hint(tr("d/dx atan(x) = 1 / (1 + x**2); section 5 prints the formula"))
