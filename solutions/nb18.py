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
# fallbacks (section 4): a backend fallback serves only the ops with no kernel of their own for
# the key. The in-place atan_ writes into its input: the generated ADInplaceOrViewType_*.cpp
# registers a kernel for it (as for the other in-place ops that are not CompositeImplicitAutograd)
# that redispatches below the key and then bumps the version counter of the tensor it wrote (for
# a view op it also ties the output to its base). Autocast registers kernels only for the ops on
# its casting lists (autocast_mode.cpp: mm, conv2d, ...; atan_ is on none:
# torch._C._dispatch_has_kernel_for_dispatch_key("aten::atan_", "AutocastCPU") is False), so for
# atan_ only AutocastCPU falls through: dispatch_table("aten::atan_")[key].fallthrough.
SOLUTIONS["18.2"] = ({"AutocastCPU"}, "version")


# 18.3 Where x > 0, atan2(y, x) = atan(y / x), and section 5's formula gives
# d atan(u) / du = 1 / (1 + u**2). The chain rule through u = y / x:
#   d/dy = 1 / (1 + (y/x)**2) * (1 / x)      = x / (x**2 + y**2)
#   d/dx = 1 / (1 + (y/x)**2) * (-y / x**2)  = -y / (x**2 + y**2)
# Where x < 0, atan2 differs from atan(y / x) by a constant (+-pi), so the derivatives are the
# same; at x = 0 (y != 0) atan(y / x) is undefined but atan2 is smooth, and the simplified form
# (which divides only by x**2 + y**2, zero at the origin alone) holds there too: the unsimplified
# one gives nan (the hidden case with x = 0). The backward multiplies by the incoming grad.
# torch's derivatives.yaml calls atan2_backward(grad, self, other, grad_input_mask), a C++
# function (FunctionsManual.h), so the notebook prints no formula to copy.
def atan2_backward(y, x, grad):
    r2 = x * x + y * y
    return grad * x / r2, -grad * y / r2


SOLUTIONS["18.3"] = atan2_backward


def _by_heart(y, x, grad):
    """Right for the shown 16 values only: a fixed float64 formula of flattened inputs."""
    yf, xf, gf = (t.reshape(-1)[:16].double() for t in (y, x, grad))
    r2 = xf * xf + yf * yf
    return gf * xf / r2, -gf * yf / r2


def _float64_denominator(y, x, grad):
    """A plausible bug: casting the denominator to float64 promotes a float32 input's gradient."""
    import torch

    r2 = (x * x + y * y).to(torch.float64)
    return grad * x / r2, -grad * y / r2


def _unsimplified(y, x, grad):
    """The chain rule on atan(y / x), not simplified: nan where x = 0."""
    d = grad / (1 + (y / x) ** 2)
    return d / x, d * (-y / x**2)


def _by_autograd(y, x, grad):
    """Autograd does the work: refused (atan2 runs inside the function)."""
    import torch

    yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
    return torch.autograd.grad(torch.atan2(yl, xl), (yl, xl), grad)


def _by_autograd_elsewhere(y, x, grad):
    """Autograd through another expression of the angle (asin): refused, torch differentiates."""
    import torch

    yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
    angle = torch.asin(yl / torch.sqrt(xl * xl + yl * yl))
    return torch.autograd.grad(angle, (yl, xl), grad)


def _in_place(y, x, grad):
    """The right values, but x and y are squared in place: the saved inputs are overwritten."""
    x2, y2 = x.clone(), y.clone()
    r2 = x.mul_(x).add_(y.mul_(y))
    return grad * x2 / r2, -grad * y2 / r2


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
        (lambda y, x, grad: (x / (x * x + y * y), -y / (x * x + y * y)), "chain rule"),
        (
            lambda y, x, grad: (-grad * y / (x * x + y * y), grad * x / (x * x + y * y)),
            "the order",
        ),
        (
            lambda y, x, grad: (grad * x / (x * x + y * y), grad * y / (x * x + y * y)),
            "sign of grad_x",
        ),
        (
            lambda y, x, grad: (-grad * x / (x * x + y * y), -grad * y / (x * x + y * y)),
            "sign of grad_y",
        ),
        (lambda y, x, grad: (grad / (1 + y * y), grad / (1 + x * x)), "derivative of y / x"),
        (lambda y, x, grad: (grad * x, grad * y), "differs from yours in grad_y and grad_x"),
        (lambda y, x, grad: grad / (x * x + y * y), "a pair"),
        (lambda y, x, grad: (3.0, 4.0), "two tensors"),
        (5, "atan2_backward(y, x, grad)"),
        (_by_autograd, "runs aten.atan2"),
        (_by_autograd_elsewhere, "asks torch for a gradient"),
        (_in_place, "writes into y, x or grad"),
        (_by_heart, "a hidden case"),
        (_float64_denominator, "a hidden case"),
        (_unsimplified, "divide by x"),
    ],
}
