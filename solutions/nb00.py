"""Worked solutions to notebook 00's exercises (orientation)."""

import torch
import torch.nn.functional as F

from helpers.source import source_view

# 00.1 What nn.Linear.forward calls.
# show_source(torch.nn.Linear.forward) prints a short method: a docstring, then
#     return F.linear(input, self.weight, self.bias)
# `F` is torch.nn.functional (imported at the top of torch/nn/modules/linear.py), so the answer
# is the function F.linear. It has no Python source either: `F.linear is torch._C._nn.linear`,
# a generated binding like torch.add. Where the matrix product (addmm) comes from is 00.2.
SOLUTION_00_1 = F.linear

# 00.2 Operators without a CPU kernel.
# Section 4's `has_kernel` asks the dispatcher whether a kernel is registered for one key:
#     has = torch._C._dispatch_has_kernel_for_dispatch_key
#     {op: (has(op, "CPU"), has(op, "CompositeImplicitAutograd")) for op in candidates}
# relu, addmm and mul.Tensor answer (True, False): a real CPU kernel. linear and matmul answer
# (False, True): their only kernel is CompositeImplicitAutograd, written in terms of other ATen
# ops, so `F.linear(x, w, b)` reaches the dispatcher as aten::linear and comes apart there into
# aten.t and aten.addmm: with w requiring grad, the result's grad_fn is AddmmBackward0.
SOLUTION_00_2 = {"aten::linear", "aten::matmul"}

# 00.3 The key set of a meta tensor.
# A CPU tensor carries CPU, ADInplaceOrView, AutogradCPU, AutocastCPU (section 4). The backend
# key follows the device: CPU -> Meta, and its autograd key follows too: AutogradCPU ->
# AutogradMeta. ADInplaceOrView is device-independent. Autocast exists for CPU and CUDA (and
# a few others), not for meta, so that key goes. Check: torch._C._dispatch_keys(t).
SOLUTION_00_3 = {"Meta", "ADInplaceOrView", "AutogradMeta"}

# 00.4 A line number read from an excerpt.
# Section 3's header says "lines A-B" for an excerpt cut with before=6: the pattern's line is
# A + 6, and the permalink's #LA-LB range highlights it. The same number, computed:
#     source_view(torch.compile, r"return torch\._dynamo\.optimize\(", before=0).first_line
_PATTERN = r"return torch\._dynamo\.optimize\("
SOLUTION_00_4 = source_view(torch.compile, _PATTERN, before=0, after=0).first_line

SOLUTIONS = {
    "00.1": SOLUTION_00_1,
    "00.2": SOLUTION_00_2,
    "00.3": SOLUTION_00_3,
    "00.4": SOLUTION_00_4,
}

_excerpt = source_view(torch.compile, _PATTERN, before=6, after=7)

WRONG = {
    "00.1": [
        (torch.addmm, "dispatcher"),
        ("torch.matmul", "not in forward's source"),
        (torch.nn.Linear.forward, "the method itself"),
        ("self.weight @ input", "does not name a function"),
    ],
    "00.2": [
        ({"aten::linear", "aten::matmul", "aten::addmm"}, "kernel registered for CPU"),
        ({"aten::linear"}, "one more candidate"),
        ("aten::linear", "set of operator names"),
        ({"aten::softmax"}, "not among the candidates"),
    ],
    "00.3": [
        ({"CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU"}, "CPU tensor's key set"),
        ({"Meta"}, "may require grad too"),
        ({"Meta", "ADInplaceOrView", "AutogradMeta", "AutocastCPU"}, "autocast keys"),
        ({"Meta", "ADInplaceOrView", "AutogradCPU"}, "belong to CPU tensors"),
    ],
    "00.4": [
        (_excerpt.first_line, "where the excerpt starts"),
        (SOLUTION_00_4 - source_view(torch.compile).first_line + 1, "inside the function"),
        (source_view(torch.compile).first_line, "def compile("),
        ("2836", "an int"),
    ],
}
