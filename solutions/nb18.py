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
# registers a kernel for it (as for every public in-place op with kernels of its own but detach_,
# whose ADInplaceOrView slot is the fallthrough fallback; its autograd kernel is hand-written in
# VariableTypeManual.cpp) that redispatches below the key and then bumps the version counter
# of the tensor it wrote (for a view op it also ties the output to its base). Autocast registers
# kernels only for the ops on its casting lists (autocast_mode.cpp: mm, conv2d, ...; atan_ is on
# none:
# torch._C._dispatch_has_kernel_for_dispatch_key("aten::atan_", "AutocastCPU") is False), so for
# atan_ only AutocastCPU falls through: dispatch_table("aten::atan_")[key].fallthrough.
SOLUTIONS["18.2"] = ({"AutocastCPU"}, "version")


# 18.3 A reading exercise: read first, derive to check. derivatives.yaml's atan2 entry
# (torchgen/packaged/autograd/derivatives.yaml) computes the backward in the C++
# atan2_backward(grad, self, other, grad_input_mask) (FunctionsManual.h), and its forward-mode
#   result: (-self_p * other_t + other_p * self_t) / (self_p.pow(2) + other_p.pow(2))
# holds the two partials: self_p and other_p are the inputs' values (y and x), self_t and
# other_t their tangents, so the coefficient of self_t is x / r2 and that of other_t -y / r2,
# with r2 = x**2 + y**2. The backward is each partial times the incoming grad, in (y, x) order.
# The check: where x > 0, atan2(y, x) = atan(y / x), and section 5's formula gives
# d atan(u) / du = 1 / (1 + u**2). The chain rule through u = y / x:
#   d/dy = 1 / (1 + (y/x)**2) * (1 / x)      = x / (x**2 + y**2)
#   d/dx = 1 / (1 + (y/x)**2) * (-y / x**2)  = -y / (x**2 + y**2)
# Where x < 0, atan2 differs from atan(y / x) by a constant (+-pi), so the derivatives are the
# same; at x = 0 (y != 0) atan(y / x) is undefined but atan2 is smooth, and the simplified form
# (which divides only by x**2 + y**2, zero at the origin alone) holds there too: the unsimplified
# one gives nan (the hidden case with x = 0). On the branch cut (y = 0, x < 0) atan2 jumps by
# 2 pi and has no derivative in y; torch returns the same expression there (the hidden case
# y = 0, x = -1). (torch's C++ forms (y*y + x*x).reciprocal() and multiplies by it: the same
# values on the cases, to the last bit here; it overflows sooner near the origin.)
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
    """Autograd through another expression of the angle (asin): refused, a tensor requires grad."""
    import torch

    yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
    angle = torch.asin(yl / torch.sqrt(xl * xl + yl * yl))
    return torch.autograd.grad(angle, (yl, xl), grad)


def _by_angle(y, x, grad):
    """angle(complex(x, y)) is atan2(y, x), differentiated by the engine's run_backward: refused
    (a tensor that requires grad; angle computes the angle)."""
    import torch

    yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
    angle = torch.angle(torch.complex(xl, yl))
    engine = torch.autograd.Variable._execution_engine
    return engine.run_backward((angle,), (grad,), False, False, (yl, xl), False)


def _angle_quotient(y, x, grad):
    """A difference quotient of angle(complex(x, y)), no graph: refused (angle)."""
    import torch

    h, yd, xd = 1e-7, y.double(), x.double()

    def f(a, b):
        return torch.angle(torch.complex(b, a))

    gy, gx = (f(yd + h, xd) - f(yd, xd)) / h, (f(yd, xd + h) - f(yd, xd)) / h
    return (grad * gy).to(y.dtype), (grad * gx).to(y.dtype)


def _difference_quotient(y, x, grad):
    """A central difference quotient of the angle written with acos: about 8 digits, refused."""
    import torch

    h, yd, xd = 6e-6, y.double(), x.double()

    def f(a, b):
        c = torch.acos(b / torch.sqrt(a * a + b * b))
        return torch.where(a >= 0, c, -c)

    gy = (f(yd + h, xd) - f(yd - h, xd)) / (2 * h)
    gx = (f(yd, xd + h) - f(yd, xd - h)) / (2 * h)
    return (grad * gy).to(y.dtype), (grad * gx).to(y.dtype)


def _by_forward_mode(y, x, grad):
    """Forward-mode AD (torch.func.jvp) of the angle written with acos: refused (make_dual)."""
    import torch

    def f(a, b):
        c = torch.acos(b / torch.sqrt(a * a + b * b))
        return torch.where(a >= 0, c, -c)

    one, zero = torch.ones_like(y), torch.zeros_like(y)
    _, ty = torch.func.jvp(f, (y, x), (one, zero))
    _, tx = torch.func.jvp(f, (y, x), (zero, one))
    return grad * ty, grad * tx


def _by_func_grad(y, x, grad):
    """torch.func.grad of the angle written with acos (its tensors are functorch's wrappers, which
    do not show requires_grad below autograd): refused, it calls torch.autograd.grad."""
    import torch

    def f(a, b):
        c = torch.acos(b / torch.sqrt(a * a + b * b))
        return torch.where(a >= 0, c, -c)

    gy, gx = torch.func.vmap(torch.func.grad(f, argnums=(0, 1)))(y.reshape(-1), x.reshape(-1))
    return grad * gy.reshape(y.shape), grad * gx.reshape(x.shape)


def _mode_popped(y, x, grad):
    """The check's dispatch mode taken off its stack, then autograd's engine: refused."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
        out = torch.atan2(yl, xl)
        engine = torch.autograd.Variable._execution_engine
        gy, gx = engine.run_backward((out,), (grad,), False, False, (yl, xl), False)
    return gy.detach(), gx.detach()


def _mode_popped_in_c(y, x, grad):
    """The mode popped by torch._C and pushed back; the gradient from the graph's node itself."""
    import torch

    mode = torch._C._pop_torch_dispatch_stack(None)
    try:
        yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
        gy, gx = (g.detach() for g in torch.atan2(yl, xl).grad_fn(grad))
    finally:
        torch._C._push_on_torch_dispatch_stack(mode)
    return gy, gx


def _dispatch_disabled(y, x, grad):
    """_DisableTorchDispatch (it leaves the modes in play: the mode refuses detach)."""
    import torch

    with torch._C._DisableTorchDispatch():
        yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
        gy, gx = torch.atan2(yl, xl).grad_fn(grad)
    return gy.detach(), gx.detach()


def _unwatched_and_popped(y, x, grad):
    """The profiler switched off, the mode popped, the watch put back: refused."""
    import sys

    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    watch = sys.getprofile()
    sys.setprofile(None)
    try:
        with _disable_current_modes():
            yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
            gy, gx = torch.autograd.grad(torch.atan2(yl, xl), (yl, xl), grad)
    finally:
        sys.setprofile(watch)
    return gy.detach(), gx.detach()


def _in_place(y, x, grad):
    """The right values, but x and y are squared in place: the saved inputs are overwritten."""
    x2, y2 = x.clone(), y.clone()
    r2 = x.mul_(x).add_(y.mul_(y))
    return grad * x2 / r2, -grad * y2 / r2


def _judge_frame(y, x, grad):
    """R40L-14-5 on 18.3: the truth read from the judge's frame; each truth is now computed only
    after every answer is in (a KeyError here)."""
    import sys

    return sys._getframe(1).f_locals["truth"]


def _pre_started_game():
    # R40L-14-7 on 18.3: autograd asked in a thread started before the check (here, at import),
    # where neither the profiler nor the thread-local dispatch mode is in play; torch.autograd's
    # Python entry points are swapped for a recorder while the reader's function runs
    import queue
    import threading

    import torch

    jobs, answers = queue.Queue(), queue.Queue()

    def worker():
        while True:
            y, x, grad = jobs.get()
            yl, xl = y.detach().requires_grad_(), x.detach().requires_grad_()
            answers.put(torch.autograd.grad(torch.atan2(yl, xl), (yl, xl), grad))

    threading.Thread(target=worker, daemon=True).start()

    def ask(y, x, grad):
        jobs.put((y.clone(), x.clone(), grad.clone()))
        return answers.get()

    return ask


_pre_started = _pre_started_game()


def _fork(y, x, grad):
    """A child process asked (never reached: the fork's call is refused)."""
    import os

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return atan2_backward(y, x, grad)


def _lazy_pair(y, x, grad):
    # R41S-18-1: a subclass that would run code of its own when the judge reads it
    import torch

    class Later(torch.Tensor):
        pass

    r = x * x + y * y
    return (grad * x / r).as_subclass(Later), (-grad * y / r).as_subclass(Later)


def _rebind_truth(y, x, grad):
    # R41L-14-1 (R4): rebind autograd.functional.vjp, atan2_truth's route
    import torch
    import torch.autograd.functional as functional

    functional.vjp = lambda f, inputs, v: (None, (torch.zeros_like(y), torch.zeros_like(x)))
    return torch.zeros_like(y), torch.zeros_like(x)


def _own_hint_pair(y, x, grad):
    # R41S-EX-3: the reader's own Hint is the reader's error
    from helpers.exercises import Hint

    raise Hint("a hidden case", counts=False)


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
        (lambda y, x, grad: (grad * x, grad * y), "which coefficient of the `result:` line"),
        (lambda y, x, grad: grad / (x * x + y * y), "a pair"),
        (lambda y, x, grad: (3.0, 4.0), "two tensors"),
        (5, "atan2_backward(y, x, grad)"),
        (_by_autograd, "runs aten.atan2"),
        (_lazy_pair, "return plain tensors"),
        (_rebind_truth, "changed what the check computes"),
        (_own_hint_pair, "your code raised Hint"),
        (_by_autograd_elsewhere, "requires grad"),
        (_by_func_grad, "asks torch for a derivative"),
        (_by_angle, "requires grad"),
        (_angle_quotient, "runs aten.angle"),
        (_difference_quotient, "difference quotient"),
        (_by_forward_mode, "asks torch for a derivative"),
        (_in_place, "writes into y, x or grad"),
        (_mode_popped, "out of play"),
        (_mode_popped_in_c, "out of play"),
        (_dispatch_disabled, "requires grad"),
        (_unwatched_and_popped, "out of play"),
        (_by_heart, "a hidden case"),
        (_float64_denominator, "a hidden case"),
        (_unsimplified, "divide by x"),
        (_judge_frame, "your code raised"),
        (_pre_started, "asks torch for a derivative"),
        (_fork, "starts a process"),
    ],
}
