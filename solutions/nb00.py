"""Worked solutions to notebook 00's exercises (orientation)."""

import inspect
import sys
from pathlib import Path

import torch

from helpers.source import source_view


# 00.1 Where a callable's source lives.
# A Python function's code object names its file; inspect.getsourcefile reads it (and finds a
# class through its module). A decorator made with functools.wraps leaves the wrapped function
# as `__wrapped__`: inspect.unwrap follows the chain (Optimizer.zero_grad is wrapped by
# torch/_compile.py's disable wrapper, its code is in torch/optim/optimizer.py). A C++ binding
# (torch.add, F.linear, Tensor.add) has no code object: inspect raises TypeError, so None.
# The path is made relative to the folder that holds the torch package, as show_source's
# header writes it.
def source_file(obj):
    try:
        path = inspect.getsourcefile(inspect.unwrap(obj))
    except TypeError:
        return None
    root = Path(torch.__file__).resolve().parent.parent
    return Path(path).resolve().relative_to(root).as_posix()


# 00.2 Operators without a CPU kernel.
# addmm, mm and _softmax do the arithmetic: a CPU kernel each. linear (t + addmm), matmul (mm,
# bmm, ... by the shapes), softmax.int (_softmax after a dtype cast) and square (pow or mul) are
# recipes of other ATen ops: their only kernel is CompositeImplicitAutograd, so a call comes
# apart at the dispatcher. aten::t has no CPU kernel either, but it is CompositeExplicitAutograd
# (a kernel for every backend with an autograd formula of its own): not in the answer.
# Section 4's `has_kernel(op, key)` checks each.
SOLUTION_00_2 = {"aten::linear", "aten::matmul", "aten::softmax.int", "aten::square"}

# 00.3 The key set of a meta tensor.
# A CPU tensor carries CPU, ADInplaceOrView, AutogradCPU, AutocastCPU (section 4). The backend
# key follows the device: CPU -> Meta, and its autograd key follows too: AutogradCPU ->
# AutogradMeta. ADInplaceOrView is device-independent. Autocast exists for CPU and CUDA (and
# a few others), not for meta, so that key goes. Check: torch._C._dispatch_keys(t).
SOLUTION_00_3 = {"Meta", "ADInplaceOrView", "AutogradMeta"}

# 00.4 A line number read from an excerpt.
# Section 3's first excerpt starts at `if backend == "inductor":` (before=0), and its header says
# "lines A-B": A is that first line, and the `return` is 8 lines further down (A + 8; the empty
# line counts). The permalink's #LA-LB range highlights it. The same number, computed:
#     source_view(torch.compile, r"return torch\._dynamo\.optimize\(", before=0).first_line
_PATTERN = r"return torch\._dynamo\.optimize\("
SOLUTION_00_4 = source_view(torch.compile, _PATTERN, before=0, after=0).first_line

SOLUTIONS = {
    "00.1": source_file,
    "00.2": SOLUTION_00_2,
    "00.3": SOLUTION_00_3,
    "00.4": SOLUTION_00_4,
}

_excerpt = source_view(torch.compile, r'if backend == "inductor":', before=0, until=r"\)\(model\)")


def _by_heart(obj):  # the two shown cases, typed in
    return "torch/nn/modules/linear.py" if obj is torch.nn.Linear.forward else None


def _no_unwrap(obj):  # the wrapper's file for a decorated function
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return None
    return Path(path).resolve().relative_to(Path(torch.__file__).resolve().parent.parent).as_posix()


def _raises_on_builtins(obj):
    path = inspect.getsourcefile(inspect.unwrap(obj))
    return Path(path).resolve().relative_to(Path(torch.__file__).resolve().parent.parent).as_posix()


def _absolute(obj):
    try:
        return inspect.getsourcefile(inspect.unwrap(obj))
    except TypeError:
        return None


def _by_module(obj):  # the module __module__ names: where it is exported, not its file
    if inspect.isbuiltin(obj) or inspect.ismethoddescriptor(obj):
        return None
    path = sys.modules[obj.__module__].__file__
    return Path(path).resolve().relative_to(Path(torch.__file__).resolve().parent.parent).as_posix()


def _relative_to_torch(obj):  # relative to the torch package, not to the folder holding it
    try:
        path = inspect.getsourcefile(inspect.unwrap(obj))
    except TypeError:
        return None
    return Path(path).resolve().relative_to(Path(torch.__file__).resolve().parent).as_posix()


def _code_only(obj):  # a class has no __code__: AttributeError on torch.nn.Linear
    if inspect.isbuiltin(obj) or inspect.ismethoddescriptor(obj):
        return None
    path = inspect.unwrap(obj).__code__.co_filename
    return Path(path).resolve().relative_to(Path(torch.__file__).resolve().parent.parent).as_posix()


_view = getattr(sys.modules["helpers.source"], "source_" + "view")


def _helper_by_alias(obj):
    try:
        return _view(obj).relpath
    except TypeError:
        return None


def _uses_the_helper(obj):
    try:
        return source_view(obj).relpath
    except TypeError:
        return None


WRONG = {
    "00.1": [
        (_by_heart, "a hidden case"),
        (_no_unwrap, "__wrapped__"),
        (_raises_on_builtins, "return None"),
        (_absolute, "absolute path"),
        (_uses_the_helper, "inspect module yourself"),
        (_helper_by_alias, "inspect module yourself"),
        (_by_module, "__module__"),
        (_relative_to_torch, "starts with torch/"),
        (_code_only, "written in Python"),
        ("torch/nn/modules/linear.py", "function source_file"),
    ],
    "00.2": [
        ({"aten::linear", "aten::matmul", "aten::addmm"}, "kernel of its own"),
        (
            {"aten::linear", "aten::matmul", "aten::softmax.int", "aten::square", "aten::t"},
            "CompositeExplicitAutograd",
        ),
        ({"aten::linear"}, "more candidate"),
        ("aten::linear", "set of operator names"),
        ({"aten::softmax"}, "not among the candidates"),
    ],
    "00.3": [
        ({"CPU", "ADInplaceOrView", "AutogradCPU", "AutocastCPU"}, "CPU tensor's key set"),
        ({"Meta"}, "may require grad too"),
        ({"Meta", "ADInplaceOrView", "AutogradMeta", "AutocastCPU"}, "autocast keys"),
        ({"Meta", "ADInplaceOrView", "AutogradCPU"}, "belong to CPU tensors"),
        ({"Meta", "ADInplaceOrView", "AutogradMeta", "Python"}, "replace what depends"),
    ],
    "00.4": [
        (_excerpt.first_line, "where the excerpt starts"),
        (SOLUTION_00_4 - 1, "one off"),
        (SOLUTION_00_4 + 1, "one off"),
        (_excerpt.first_line + 6, "count down"),
        (SOLUTION_00_4 - source_view(torch.compile).first_line + 1, "inside the function"),
        (source_view(torch.compile).first_line, "def compile("),
        ("2836", "an int"),
    ],
}
