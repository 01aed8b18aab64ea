"""Worked solutions to notebook 02's exercises (Dynamo: breaks, recompiles, guards, fullgraph)."""

import torch

# 02.1 Graphs and breaks of a .tolist().
# `a = x.sin() + y` traces into a graph. `a.tolist()` needs the numbers inside `a`, and a graph
# being traced has none (fake tensors only carry shapes and dtypes), so Dynamo breaks there:
# it compiles graph 1 (sin, add), runs `tolist` in plain Python, and resumes in
# `torch_dynamo_resume_in_f_tolist_at_...`, whose `a * 2` becomes graph 2. explain counts
# 2 graphs and graph_count - 1 = 1 break:
#     e = torch._dynamo.explain(f_tolist)(torch.randn(3), torch.randn(3))
#     (e.graph_count, e.graph_break_count)
SOLUTION_02_1 = (2, 1)

# 02.2 Compilations for three shapes.
# (3,): the first call compiles (1). (4,): size=[3] in TENSOR_MATCH fails; automatic dynamic
# shapes recompile with dim 0 symbolic (2). (5, 1): the dynamic entry stands for "a 1-d tensor
# of length at least 2" (sizes 0 and 1 stay specialized, section 5); a 2-d tensor fails it
# (and the first entry), so Dynamo compiles a third time (3). Automatic dynamic makes sizes
# symbolic, never the number of dimensions.
SOLUTION_02_2 = [1, 2, 3]

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
# picking one with torch.where. (Noticing that relu(x) + 1 >= 1, so the sum is always positive
# for a non-empty x, and returning `(x.relu() + 1).cos()` passes too.)
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


WRONG = {
    "02.1": [
        ((2, 2), "graph_count - 1"),
        ((1, 0), "does not know"),
        ((3, 2), "resume function"),
        (1, "pair"),
    ],
    "02.2": [
        ([1, 2, 2], "not the number of dimensions"),
        ([1, 1, 1], "size=[3]"),
        ((1, 2), "three counts"),
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
        (_g_wrong_branch, "your function returns"),
        ("g", "function of one tensor"),
    ],
}
