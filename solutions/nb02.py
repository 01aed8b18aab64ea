"""Worked solutions to notebook 02's exercises (Dynamo: breaks, recompiles, guards, fullgraph)."""

import torch

# 02.1 Graphs and breaks of a .tolist().
# `a = x.sin() + y` traces into a graph. `a.tolist()` makes a Python list of the numbers in a
# float tensor, which Dynamo does not trace (the reason: 'Tensor.tolist() with non-integer
# tensor'; on an integer tensor it would trace one `.item()` per element, which breaks too
# unless capture_scalar_outputs is set), so Dynamo breaks there:
# it compiles graph 1 (sin, add), runs `tolist` in plain Python, and resumes in
# `torch_dynamo_resume_in_f_tolist_at_...`, whose `a * 2` becomes graph 2. explain counts
# 2 graphs and graph_count - 1 = 1 break:
#     e = torch._dynamo.explain(f_tolist)(torch.randn(3), torch.randn(3))
#     (e.graph_count, e.graph_break_count)
SOLUTION_02_1 = (2, 1)

# 02.2 Compilations for five shapes.
# (3,): the first call compiles (1). (4,): size=[3] in TENSOR_MATCH fails; automatic dynamic
# shapes recompile with dim 0 symbolic (2). (1,): sizes 0 and 1 stay specialized (section 5),
# so neither entry serves it: a third compile (3). (7,): the dynamic entry stands for "a 1-d
# tensor of length at least 2": it passes (3). (5, 1): a 2-d tensor fails every entry, so
# Dynamo compiles a fourth time (4). Automatic dynamic makes sizes symbolic, never the number
# of dimensions.
SOLUTION_02_2 = [1, 2, 3, 3, 4]

# 02.3 Which changes recompile.
# TENSOR_MATCH (section 3) checks type, dispatch keys, dtype, device, requires_grad, size and
# stride; GLOBAL_STATE checks process state, grad_mode among it.
#   values         same dtype/size/stride: passes, no recompile
#   requires_grad  requires_grad=False in the guard: recompiles
#   dtype          float64 vs float32: recompiles (as in section 4)
#   stride         randn(6)[::2] has size [3] but stride [2], the guard says stride=[1]
#   view           randn(2, 3)[0] has size [3], stride [1]: it passes (views are not guarded)
#   no_grad        grad_mode changes: GLOBAL_STATE fails, recompiles
SOLUTION_02_3 = {"requires_grad", "dtype", "stride", "no_grad"}


# 02.4 Make g compile with fullgraph=True.
# g breaks twice: at `print` (Dynamo does not trace it) and at `if x.sum() > 0` (a Python branch
# on a tensor's value: generic_jump). Drop the print, and compute both branches in the graph,
# picking one with torch.where. (relu(x) + 1 >= 1, so the sum is positive for a non-empty x
# without NaN; but a NaN makes the sum NaN and `x.sum() > 0` false, so g takes the sin branch:
# `(x.relu() + 1).cos()` fails that hidden case.) The judge checks it on the prompt's
# torch.ones(3) and on hidden inputs: other values, another length, a 2-d float64 tensor, an
# empty one (shape and dtype only), one holding a NaN; and that the input is left unchanged.
def g_fullgraph(x):
    x = x.relu() + 1
    return torch.where(x.sum() > 0, x.cos(), x.sin())


SOLUTIONS = {
    "02.1": SOLUTION_02_1,
    "02.2": SOLUTION_02_2,
    "02.3": SOLUTION_02_3,
    "02.4": g_fullgraph,
}


def _g_with_print(x):  # the notebook's g: both breaks still there
    x = x.relu() + 1
    print("inside g")
    if x.sum() > 0:
        return x.cos()
    return x.sin()


def _g_with_if(x):  # the print dropped, the branch kept
    x = x.relu() + 1
    if x.sum() > 0:
        return x.cos()
    return x.sin()


def _g_wrong_branch(x):  # one graph, but the branch g does not take
    return (x.relu() + 1).sin()


def _g_by_heart(x):  # the shown case's result, typed in: cos(2.0) three times
    return torch.full((3,), -0.4161468365471424)


def _g_always_cos(x):  # "the sum is always positive": not with a NaN in x
    return (x.relu() + 1).cos()


def _g_in_place(x):  # right result, but changes the caller's tensor
    y = x.relu_().add_(1)
    return torch.where(y.sum() > 0, y.cos(), y.sin())


def _g_float32(x):  # right values, but always float32
    x = x.relu().float() + 1
    return torch.where(x.sum() > 0, x.cos(), x.sin())


WRONG = {
    "02.1": [
        ((2, 2), "graph count"),
        ((1, 0), "does not know"),
        ((3, 2), "resume function"),
        (1, "pair"),
        ((2.0, True), "whole numbers"),
        (("2", "1"), "whole numbers"),
    ],
    "02.2": [
        ([1, 2, 3, 3, 3], "not the number of dimensions"),
        ([1, 2, 3, 4, 5], "size 7"),
        ([1, 2, 2, 2, 3], "size of 1"),
        ([1, 2, 2, 3, 4], "size of 1"),
        ([True, 2, 3, 3, 4], "whole numbers"),
        ([1, 1, 1, 1, 1], "size=[3]"),
        ([1, 2, 1, 2, 3], "never go down"),
        ((1, 2, 3), "5 counts"),
    ],
    "02.3": [
        ({"values", "requires_grad", "dtype", "stride", "no_grad"}, "values"),
        ({"requires_grad", "dtype", "stride", "view", "no_grad"}, "being a view"),
        ({"requires_grad", "dtype", "stride"}, "grad_mode"),
        ({"requires_grad", "dtype", "no_grad"}, "stride"),
        ({"dtype", "size"}, "not among the candidates"),
    ],
    "02.4": [
        (_g_with_print, "print"),
        (_g_with_if, "data-dependent"),
        (_g_wrong_branch, "other values"),
        (_g_by_heart, "a hidden case"),
        (_g_float32, "another dtype"),
        (_g_always_cos, "a hidden case"),
        (_g_in_place, "does not change its input"),
        ("g", "function of one tensor"),
    ],
}
