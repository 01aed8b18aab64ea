"""Judges for notebook 18 (one operator through every layer); see helpers.exercises.

The truth comes from the installed torch: `native_functions.yaml` through torchgen's parser
(`helpers.operator_path.native_entry`), the dispatcher's live table (`dispatch_table`) and
autograd itself (the gradient of `torch.atan2`). CPU only.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.utils._python_dispatch

from helpers import operator_path
from helpers.exercises import (
    N_,
    Hint,
    Refusal,
    Sealed,
    _refusal,
    choice_set,
    exercise,
    started_process,
    tr,
    watching,
)

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
            "ADInplaceOrView holds a generated kernel for atan_ (as for every public in-place "
            "op with kernels of its own but detach_), which redispatches below itself and then "
            "bumps the version counter of the tensor it wrote",
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
                "{count} of the four are fallthroughs for atan_. A key's backend fallback "
                "serves only the ops with no kernel of their own for that key: which key gets "
                "a generated kernel for in-place ops such as atan_, and which registers kernels "
                "only for the ops on its casting lists (is atan_ on one)?",
                count=len(truth),
            )
        )
    raise Hint(
        tr(
            "the keys are right; the reason is not: what must happen to a tensor that an op "
            "writes into, so that autograd can detect it was modified after being saved?"
        )
    )


#: The ops 18.3's function must not run: the ones that compute the angle, atan2 itself, atan
#: (atan2 is atan(y / x) for x > 0) and angle (`angle(complex(x, y))` is atan2(y, x)).
_REFUSED_OPS = (
    "atan", "atan_", "atan2", "atan2_", "arctan", "arctan_", "arctan2", "arctan2_", "angle",
)  # fmt: skip


#: torch's directory: its Python code runs while the dispatcher holds a mode aside.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class _NoAtan(torch.utils._python_dispatch.TorchDispatchMode):
    """Refuses, inside the reader's function, the ops that compute the angle (the formula needs
    none) and every op on a tensor that requires grad: no autograd graph can be built, so no
    entry point (torch.autograd.grad, the engine's run_backward, ...) has one to differentiate."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0  # how deep in __torch_dispatch__ (where torch stashes the mode)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.inside += 1
        try:
            return self._refuse(func, args, kwargs)
        finally:
            self.inside -= 1

    def lost(self) -> str | None:
        """What took this mode out of play, if anything did (outside its __torch_dispatch__):
        it is no longer on the dispatch mode stack, or the Python dispatch key is excluded."""
        if self.inside:
            return None
        frame = sys._getframe(2)  # the frame of the call that returned (holds <- the profile)
        while frame is not None:  # torch's own code, which stashes the mode while it dispatches
            if frame.f_code.co_filename.startswith(_TORCH_DIR):
                return None
            frame = frame.f_back
        stack = torch.utils._python_dispatch._get_current_dispatch_mode_stack()
        if not any(mode is self for mode in stack):
            return "the dispatch mode stack"
        if torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python):
            return "the Python dispatch key"
        return None

    def _refuse(self, func, args, kwargs):
        if func.name().split("::")[-1].split(".")[0] in _REFUSED_OPS:
            raise _refusal(
                tr(
                    "your function runs {op} itself, so torch computes the angle (and could "
                    "differentiate it for you); write the derivative's formula with y, x and grad "
                    "alone",
                    op=str(func),
                )
            )
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves):
            raise _refusal(
                tr(
                    "your function runs {op} on a tensor that requires grad, so torch records a "
                    "graph to differentiate for you; write the derivative's formula with y, x "
                    "and grad alone",
                    op=str(func),
                )
            )
        return func(*args, **(kwargs or {}))


def _autograd_codes() -> set:
    """The code objects of the Python entry points that ask autograd for a derivative: reverse
    mode (grad, backward; torch.func's grad and vjp call grad) and forward mode (make_dual;
    torch.func's jvp calls it)."""
    import torch.autograd.forward_ad as forward_ad

    return {
        torch.autograd.grad.__code__,
        torch.autograd.backward.__code__,
        forward_ad.make_dual.__code__,
    }


def _autograd_builtins() -> set:
    """The ids of the C functions behind those entry points that a reader could call directly:
    `torch._make_dual` (forward mode); and of those that take a dispatch mode off its stack.
    The engine's run_backward (a bound method: `_ENGINE`) needs a graph, which `_NoAtan`
    refuses to build while it stays in play."""
    return {
        id(torch._C._VariableFunctions._make_dual),
        *(id(getattr(torch._C, n)) for n in _MODE_BUILTINS if hasattr(torch._C, n)),
    }


#: The C functions that take a dispatch mode off its stack or swap one in.
_MODE_BUILTINS = ("_pop_torch_dispatch_stack", "_set_dispatch_mode", "_unset_dispatch_mode")


def _mode_codes() -> set:
    """The code objects of the Python helpers that take the current dispatch modes away."""
    import inspect

    import torch.utils._python_dispatch as dispatch

    names = ("_disable_current_modes", "_pop_mode", "_pop_mode_temporarily")
    return {inspect.unwrap(getattr(dispatch, n)).__code__ for n in names}


#: Hits that mean the reader's function took the check's watch out of play.
_SWITCHED_OFF = ("sys.setprofile", "the dispatch mode stack", "the Python dispatch key")


#: 18.3's cases: (name, y, x, grad); the first is the one the prompt shows.
def _atan2_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(18)
    y = torch.randn(16, dtype=torch.float64, generator=gen) * 3
    x = torch.randn(16, dtype=torch.float64, generator=gen) * 3
    grad = torch.randn(16, dtype=torch.float64, generator=gen)
    y2, x2 = torch.randn(3, 5, generator=gen) * 10, torch.randn(3, 5, generator=gen) * 10
    g2 = torch.randn(3, 5, generator=gen)  # float32, 2-D
    y3 = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0, -1e3], dtype=torch.float64)
    x3 = torch.tensor([0.0, 0.0, -2.0, -1.0, -1e-4, 1e3], dtype=torch.float64)
    g3 = torch.tensor([1.0, 2.0, -1.0, 0.5, 0.5, 1.0], dtype=torch.float64)
    return [
        (N_("y, x = 3 * randn(16) float64 (the shown case)"), y, x, grad),
        (N_("y and x of shape (3, 5), float32"), y2, x2, g2),
        (N_("x = [0, 0, -2, -1, -1e-4, 1e3], y = [1, -2, 0.5, 0, 3, -1e3] float64"), y3, x3, g3),
    ]


def _raised(e: Exception) -> str:
    """The hint for an error of the reader's function (a `Hint` it raises included)."""
    return tr("your code raised {error}: {message}", error=type(e).__name__, message=f"{e}")


def _plain_pair(found: Any) -> Any:
    """Inside the watch: the answer as plain values, so that nothing of the reader's runs after
    it: a pair (list or tuple, by exact type) of plain tensors, copied (`type(t) is
    torch.Tensor`: a subclass is refused), any other element by its type's name; anything that
    is not a pair by its type's name. A result with a grad_fn is refused here too."""
    if type(found) not in (tuple, list) or len(found) != 2:
        return type(found).__name__
    pair: list = []
    for t in found:
        if type(t) is torch.Tensor:
            if t.grad_fn is not None:
                raise Hint(
                    tr("your result carries a grad_fn: compute it from y, x and grad directly")
                )
            pair.append(t.detach().clone())
        elif isinstance(t, torch.Tensor):
            raise Hint(
                tr(
                    "return plain tensors (torch.Tensor), found a {found}: a subclass may run "
                    "code of its own after the check",
                    found=type(t).__name__,
                )
            )
        else:
            pair.append(type(t).__name__)
    return tuple(pair)


def atan2_truth(y: torch.Tensor, x: torch.Tensor, grad: torch.Tensor) -> tuple:
    """(grad_y, grad_x): autograd's vector-Jacobian product of torch.atan2 at (y, x) with grad."""
    _, grads = torch.autograd.functional.vjp(torch.atan2, (y, x), grad)
    return grads


#: How close a gradient must be to torch's, by dtype: (rtol, atol). The formula evaluated
#: directly differs from torch's by a few units in the last place (at most 4e-16 relative in
#: float64 for the forms in solutions/nb18.py); a difference quotient of any expression of the
#: angle agrees to about 1e-8 (one-sided) or 1e-10 (central) in float64, so float64 refuses it.
_TOLERANCE = {torch.float64: (1e-12, 1e-15), torch.float32: (1e-5, 1e-12)}


def _close(a: torch.Tensor, b: torch.Tensor, rough: bool = False) -> bool:
    """a is b within the tolerance of b's dtype (`rough`: float32's, for any dtype)."""
    rtol, atol = _TOLERANCE[torch.float32 if rough else b.dtype]
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def _digits(a: torch.Tensor, b: torch.Tensor) -> int:
    """About how many significant digits a and b share, at the worst element."""
    rel = ((a - b).abs() / b.abs().clamp_min(1e-300)).max().item()
    return max(0, min(16, math.floor(-math.log10(rel)))) if rel > 0 else 16


@exercise(
    "18.3",
    "atan2's backward, read and checked",
    look=N_(
        "atan2's entry in derivatives.yaml (torchgen/packaged/autograd/derivatives.yaml): the "
        "coefficients of `self_t` and `other_t` on its `result:` line (`self_p` and `other_p` "
        "are y and x themselves); then section 5's formula for atan and the chain rule through "
        "y / x, once for y and once for x, to check them where x > 0"
    ),
    reveal=N_("`torch.autograd.functional.vjp` of atan2 at `(y, x)` with `grad`"),
)
def atan2_backward(answer: Any) -> str:
    import torch.autograd.forward_ad as forward_ad

    if not callable(answer):
        raise Hint(
            tr("give a function atan2_backward(y, x, grad) that returns a pair (grad_y, grad_x)")
        )
    cases = _atan2_cases()
    # the Python entry points into autograd, their code swapped for a recorder while the reader's
    # function runs (a thread that was running before the check calls them too)
    entries = (torch.autograd.grad, torch.autograd.backward, forward_ad.make_dual)
    # every answer first, each under the dispatch mode and the watch; the truths (autograd's)
    # only after, so that none is in a frame of this judge while the reader's code runs
    import torch.autograd.functional as functional

    # what the truths are computed from, frozen before the reader's code runs (atan2_truth, the
    # autograd functions on its path, their code, the interpreter's hooks): refused after each
    # answer if one moved, and the truths computed with the saved atan2_truth
    module = sys.modules[__name__]
    seal = Sealed(
        [(module, "atan2_truth"), (module, "_close"), (torch, "atan2"), (torch, "allclose"),
         (torch.autograd, "grad"), (torch.autograd, "backward")]
        + [(functional, n) for n in vars(functional) if not n.startswith("__")]
    )  # fmt: skip
    results = []
    for _, y, x, grad in cases:
        y_in, x_in, grad_in = y.clone(), x.clone(), grad.clone()
        mode = _NoAtan()
        watched = _autograd_codes() | _mode_codes()
        engine = (torch.autograd.Variable._execution_engine,)
        with (
            mode,
            watching(
                watched,
                _autograd_builtins(),
                bound=engine,
                holds=mode.lost,
                swap=entries,
                processes=True,
            ) as asked,
        ):
            try:
                found = answer(y_in, x_in, grad_in)
            except Refusal:  # the dispatch mode's refusal: a route refused, as the watch's are
                raise
            except Exception as e:  # noqa: BLE001 - the reader's error (a Hint of its own too)
                found = Hint(_raised(e))
            else:
                try:  # the answer as plain values, still inside the watch
                    found = _plain_pair(found)
                except Hint as e:  # its refusal, in order
                    found = e
        started_process(asked)
        mode_names = {c.co_name for c in _mode_codes()} | set(_MODE_BUILTINS)
        switched = [a for a in asked if a in _SWITCHED_OFF or a in mode_names]
        if switched:
            raise Hint(
                tr(
                    "your function takes the check's watch out of play ({what}): leave the "
                    "dispatch mode and the profiler in place and write the derivative's formula "
                    "with y, x and grad alone",
                    what=switched[0],
                )
            )
        if asked:
            raise Hint(
                tr(
                    "your function asks torch for a derivative (it calls {called}); write the "
                    "derivative's formula with y, x and grad alone",
                    called=f"{asked[0]}()",
                )
            )
        if not (torch.equal(y_in, y) and torch.equal(x_in, x) and torch.equal(grad_in, grad)):
            raise Hint(
                tr(
                    "your function writes into y, x or grad (an in-place op such as mul_ or "
                    "div_): in a real backward y and x are the saved inputs, and changing them "
                    "corrupts the graph"
                )
            )
        seal.refuse()
        results.append(found)
    truth_of = seal.value(module, "atan2_truth")
    for i, ((name, y, x, grad), found) in enumerate(zip(cases, results, strict=True)):
        if isinstance(found, Exception):
            raise found
        truth = truth_of(y, x, grad)
        if isinstance(found, str):  # not a pair: its type's name (`_plain_pair`)
            raise Hint(
                tr(
                    "return a pair (grad_y, grad_x), one gradient per input of atan2(y, x); "
                    "found a {found}",
                    found=found,
                )
            )
        if not all(isinstance(t, torch.Tensor) and t.shape == y.shape for t in found):
            shown = [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in found]
            if i == 0:
                raise Hint(
                    tr(
                        "return two tensors shaped like y and x {shape}, found {found}",
                        shape=tuple(y.shape),
                        found=shown,
                    )
                )
            raise Hint(
                tr(
                    "a hidden case ({case}): return two tensors shaped like y and x {shape}, "
                    "found {found}; does your function assume 16 values?",
                    case=tr(name),
                    shape=tuple(y.shape),
                    found=shown,
                )
            )
        grad_y, grad_x = found
        if i == 0:
            if _close(grad_y, truth[1]) and _close(grad_x, truth[0]):
                raise Hint(
                    tr(
                        "the order: the first gradient is for y, atan2's first argument, the "
                        "second for x"
                    )
                )
            if _close(grad_y * grad, truth[0]) and _close(grad_x * grad, truth[1]):
                raise Hint(tr("multiply by the incoming gradient `grad` (the chain rule)"))
            if _close(grad_y, truth[0]) and _close(grad_x, -truth[1]):
                raise Hint(
                    tr(
                        "the sign of grad_x: for a point with y > 0, does its angle grow or "
                        "shrink as x grows?"
                    )
                )
            if _close(grad_y, -truth[0]) and _close(grad_x, truth[1]):
                raise Hint(
                    tr(
                        "the sign of grad_y: for a point with x > 0, does its angle grow or "
                        "shrink as y grows?"
                    )
                )
            if _close(grad_y, grad / (1 + y * y)) or _close(grad_x, grad / (1 + x * x)):
                raise Hint(
                    tr(
                        "that is atan's derivative at y or at x alone; atan2(y, x) is atan of "
                        "y / x (for x > 0): the chain rule also multiplies by the derivative of "
                        "y / x"
                    )
                )
            if not (_close(grad_y, truth[0]) and _close(grad_x, truth[1])) and (
                _close(grad_y, truth[0], rough=True) and _close(grad_x, truth[1], rough=True)
            ):
                raise Hint(
                    tr(
                        "your gradients agree with torch's to only about {digits} significant "
                        "digits, where a formula evaluated in float64 agrees to about 15: are "
                        "you approximating the derivative (a difference quotient) instead of "
                        "writing its formula?",
                        digits=min(_digits(grad_y, truth[0]), _digits(grad_x, truth[1])),
                    )
                )
            if not (_close(grad_y, truth[0]) and _close(grad_x, truth[1])):
                wrong = [
                    n
                    for n, f, t in (("grad_y", grad_y, truth[0]), ("grad_x", grad_x, truth[1]))
                    if not _close(f, t)
                ]
                raise Hint(
                    tr(
                        "torch's gradient differs from yours in {wrong}: which coefficient of "
                        "the `result:` line belongs to which input, and what do `self_p` and "
                        "`other_p` stand for? Where x > 0, atan2(y, x) = atan(y / x): the chain "
                        "rule checks each one",
                        wrong=tr("grad_y and grad_x") if len(wrong) == 2 else wrong[0],
                    )
                )
            continue
        if (grad_y.dtype, grad_x.dtype) != (y.dtype, y.dtype):
            raise Hint(
                tr(
                    "a hidden case ({case}): your gradients are {found}, the inputs {dtype}; "
                    "compute in the inputs' dtype, with no fixed dtype or constant tensor",
                    case=tr(name),
                    found=[grad_y.dtype, grad_x.dtype],
                    dtype=y.dtype,
                )
            )
        for got, want in ((grad_y, truth[0]), (grad_x, truth[1])):
            if _close(got, want):
                continue
            bad = (got - want).abs().nan_to_num(float("inf")).argmax().item()
            at = f"y = {y.flatten()[bad].item():g}, x = {x.flatten()[bad].item():g}"
            if not torch.isfinite(got.flatten()[bad]):
                raise Hint(
                    tr(
                        "a hidden case ({case}): your gradient is {value} at {at}, where atan2 "
                        "is differentiable; does your formula divide by x somewhere? Simplify it "
                        "until it divides only by a quantity that is zero at (0, 0) alone",
                        case=tr(name),
                        value=got.flatten()[bad].item(),
                        at=at,
                    )
                )
            if _close(got, want, rough=True):
                raise Hint(
                    tr(
                        "a hidden case ({case}): your gradient agrees with torch's to only "
                        "about {digits} significant digits at {at}, where a formula evaluated "
                        "in float64 agrees to about 15: are you approximating the derivative "
                        "(a difference quotient) instead of writing its formula?",
                        case=tr(name),
                        digits=_digits(got, want),
                        at=at,
                    )
                )
            raise Hint(
                tr(
                    "a hidden case ({case}) differs at {at}: does your formula hold for every "
                    "point, also where x <= 0, and for every shape and dtype?",
                    case=tr(name),
                    at=at,
                )
            )
    formula = operator_path.derivative_entry("atan2")["formulas"]["self"]
    header = Path(torch.__file__).parent / "include/torch/csrc/autograd/FunctionsManual.h"
    assert formula.startswith("atan2_backward(") and "atan2_backward(" in header.read_text(), (
        f"derivatives.yaml's atan2 entry: expected a call of atan2_backward, declared in "
        f"FunctionsManual.h, found {formula!r}"
    )
    forward = forward_formula("atan2")
    assert "self_t" in forward and "other_t" in forward, (
        f"derivatives.yaml's atan2 entry: expected a forward-mode result: line in self_t and "
        f"other_t, found {forward!r}"
    )
    return tr(
        (
            "grad_y = grad * x / (x*x + y*y), grad_x = -grad * y / (x*x + y*y): the coefficients "
            "of self_t (y's tangent) and other_t (x's) on the forward-mode "
            "`result:` line of derivatives.yaml's atan2 entry, {forward} (self_p and other_p "
            "are y and x), times grad. The chain rule on atan(y / x), simplified, gives the "
            "same, and holds at every point but (0, 0) off the branch cut (y = 0, x < 0); on "
            "the cut atan2 jumps by 2π and has no derivative in y, and torch returns the same "
            "expression there. The backward entry itself calls {formula}, a C++ function that "
            "torch/csrc/autograd/FunctionsManual.h declares"
        ),
        formula=formula,
        forward=forward,
    )


def forward_formula(name: str) -> str:
    """The forward-mode (`result:`) formula of `name`'s entry in derivatives.yaml, as torchgen's
    `load_derivatives` reads it ('' if the entry has none)."""
    schema = operator_path.derivative_entry(name)["schema"]
    info = operator_path._derivatives(None)[schema]["Default"]
    return " ".join(f.formula for f in info.forward_derivatives)
