"""Worked solutions to notebook 18's exercises (one operator through every layer)."""

# 18.1 native_entry(name)["structured_delegate"] for each candidate (torchgen's parser):
#   atan -> "atan.out", asinh -> "asinh.out", silu -> "silu.out": their functional forms are
#   generated from the structured out overload.
#   abs -> None (its functional form has a kernel of its own, `abs`, under
#   CompositeExplicitAutograd, plus NestedTensor kernels), logit -> None (its own kernels per
#   backend: CPU, CUDA, MPS, MTIA, and XPU from 2.14), hardswish -> None (its own kernels per
#   backend).
SOLUTIONS: dict = {"18.1": {"atan", "asinh", "silu"}}

# 18.2 For the functional atan, ADInplaceOrView and AutocastCPU are fallthrough backend
# fallbacks (section 4). The in-place atan_ writes into its input: the generated
# ADInplaceOrViewType_*.cpp registers a kernel for it (and for every in-place and out= op) that
# redispatches below the key and then bumps the version counter of the tensor it wrote (for a
# view op it also ties the output to its base). So only AutocastCPU, a fallthrough for every op,
# is skipped: dispatch_table("aten::atan_")[key].fallthrough.
SOLUTIONS["18.2"] = ({"AutocastCPU"}, "version")


# 18.3 derivatives.yaml: `self: grad / (self * self + 1).conj()`; for real x the conj() is the
# identity, so the gradient is the incoming grad times d/dx atan(x) = 1 / (1 + x**2). Written
# with x's own operations it keeps x's shape and dtype (the hidden cases: a (3, 5) float32 x,
# and x with 0, +-1e3 and a zero grad entry).
def atan_backward(x, grad):
    return grad / (x * x + 1)


SOLUTIONS["18.3"] = atan_backward


def _by_heart(x, grad):
    """Right for the shown 16 values only: a fixed float64 formula of a flattened x."""
    flat = x.reshape(16) if x.numel() == 16 else x.reshape(-1)[:16]
    return grad.reshape(-1)[:16].double() / (flat.double() ** 2 + 1)


def _float64_denominator(x, grad):
    """A plausible bug: casting the denominator to float64 promotes a float32 x's gradient."""
    import torch

    return grad / (x * x + 1).to(torch.float64)


def _by_autograd(x, grad):
    """Autograd does the work: refused (atan runs inside the function)."""
    import torch

    leaf = x.detach().requires_grad_()
    return torch.autograd.grad(torch.atan(leaf), leaf, grad)[0]


def _in_place(x, grad):
    """The right values, but written into x and grad: the saved input is overwritten."""
    return grad.div_(x.mul_(x).add_(1))


WRONG = {
    "18.1": [
        ({"atan"}, "also delegate"),
        ({"atan", "asinh"}, "every candidate"),
        ({"atan", "asinh", "silu", "abs"}, "no `structured_delegate`"),
        ("atan", "set of"),
        ({"atan", "tanh"}, "not among the candidates"),
    ],
    "18.2": [
        (({"ADInplaceOrView", "AutocastCPU"}, "version"), "functional atan"),
        (({"AutogradCPU", "AutocastCPU"}, "version"), "real kernels"),
        (({"AutocastCPU"}, "no_grad"), "the reason is not"),
        (({"ADInplaceOrView"}, "version"), "1 of the four"),
        (({"AutocastCPU"}, "because"), "not a reason key"),
        ({"AutocastCPU"}, "a pair"),
    ],
    "18.3": [
        (lambda x, grad: 1 / (x * x + 1), "chain rule"),
        (lambda x, grad: -grad / (x * x + 1), "sign"),
        (lambda x, grad: grad / (1 - x * x), "a plus"),
        (lambda x, grad: grad * x, "1 / (1 + x**2)"),
        (lambda x, grad: 3.0, "return a tensor"),
        (5, "atan_backward(x, grad)"),
        (_by_autograd, "runs atan"),
        (_in_place, "writes into x"),
        (_by_heart, "a hidden case"),
        (_float64_denominator, "a hidden case"),
    ],
}
