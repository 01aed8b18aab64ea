"""Worked solutions to notebook 18's exercises (one operator through every layer)."""

# 18.1 native_entry(name)["structured_delegate"] for each candidate (torchgen's parser):
#   atan -> "atan.out", asinh -> "asinh.out", silu -> "silu.out": their functional forms are
#   generated from the structured out overload.
#   abs -> None (its functional form has a kernel of its own, `abs`, under
#   CompositeExplicitAutograd, plus NestedTensor kernels), logit -> None (its own kernels per
#   backend: CPU, CUDA, MPS, MTIA, and XPU from 2.14), hardswish -> None (its own kernels per
#   backend).
SOLUTIONS: dict = {"18.1": {"atan", "asinh", "silu"}}

# 18.2 dispatch_table("aten::atan")[key].fallthrough for the four keys of a CPU tensor that
# requires grad: ADInplaceOrView (VariableFallbackKernel.cpp) and AutocastCPU
# (autocast_mode.cpp) are fallthrough backend fallbacks; AutogradCPU (generated VariableType)
# and CPU (generated RegisterCPU) hold kernels. AutocastCPU is also in the thread-local exclude
# set while autocast is off, so a call never reaches its slot anyway.
SOLUTIONS["18.2"] = {"ADInplaceOrView", "AutocastCPU"}


# 18.3 derivatives.yaml: `self: grad / (self * self + 1).conj()`; for real x the conj() is the
# identity, so the gradient is the incoming grad times d/dx atan(x) = 1 / (1 + x**2).
def atan_backward(x, grad):
    return grad / (x * x + 1)


SOLUTIONS["18.3"] = atan_backward

WRONG = {
    "18.1": [
        ({"atan"}, "also delegate"),
        ({"atan", "asinh"}, "every candidate"),
        ({"atan", "asinh", "silu", "abs"}, "no `structured_delegate`"),
        ("atan", "set of"),
        ({"atan", "tanh"}, "not among the candidates"),
    ],
    "18.2": [
        ({"AutogradCPU"}, "real kernels"),
        ({"ADInplaceOrView"}, "2 of the four"),
        (["CPU", "AutocastCPU"], "real kernels"),
    ],
    "18.3": [
        (lambda x, grad: 1 / (x * x + 1), "chain rule"),
        (lambda x, grad: -grad / (x * x + 1), "sign"),
        (lambda x, grad: grad / (1 - x * x), "a plus"),
        (lambda x, grad: grad * x, "1 / (1 + x**2)"),
        (lambda x, grad: 3.0, "return a tensor"),
        (5, "atan_backward(x, grad)"),
    ],
}
