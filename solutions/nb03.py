"""Worked solutions to notebook 03's exercises (AOTAutograd, decompositions, Inductor)."""

# 03.1 Saved for backward by the min-cut partitioner.
# Compile section 1's loss_fn with a fresh backend after torch._dynamo.reset():
#     from torch._functorch.partitioners import min_cut_rematerialization_partition
#     aot_mc = AotGraphs(partition_fn=min_cut_rematerialization_partition)
#     torch.compile(loss_fn, backend=aot_mc)(x, y).backward()
#     aot_mc.saved_for_backward()
# The default partitioner saved t_1, the transposed weight of the second Linear (an output of
# aten.t in the forward). Min-cut saves primals_4, the weight itself, and redoes the cheap
# transpose in the backward: the rest (x, y, both addmm outputs, gelu) is saved as before.
SOLUTION_03_1 = ["primals_3", "primals_4", "primals_6", "addmm", "gelu", "addmm_1"]

# 03.2 What silu decomposes into.
#     show_source(torch._decomp.decompositions.silu)   ->  return self * torch.sigmoid(self)
#     gm = make_fx(lambda a: F.silu(a), decomposition_table=core_aten_decompositions())(x)
#     gm.code  ->  sigmoid = aten.sigmoid.default(a_1); mul = aten.mul.Tensor(a_1, sigmoid)
# sigmoid is core ATen, so the table does not take it apart further (into exp, add, div).
SOLUTION_03_2 = {"aten.sigmoid.default", "aten.mul.Tensor"}

# 03.3 Lowered directly or decomposed first.
# compile_fx hands AOTAutograd select_decomp_table() (section 3): the core table merged with
# Inductor's own decompositions, minus decomps_to_exclude (section 2's excerpt). Test each:
#     table = select_decomp_table()
#     {n for n in candidates if getattr(aten, n).default not in table}
# mse_loss and silu are not core and have entries. gelu is core, yet Inductor's own table has
# an entry for it too (an entry may also decline for some inputs, which `op in table` cannot
# see). glu and clamp_min have core decompositions, but the exclusion list removes
# them: Inductor lowers them itself. sigmoid is core with no decomposition: lowered directly.
SOLUTION_03_3 = {"glu", "sigmoid", "clamp_min"}

# 03.4 Which gradients are None.
# The backward returns one gradient per primal, in the order of the Dynamo graph's inputs:
# Linear 1 weight, bias, x, Linear 2 weight, bias, y (section 1 found x and y at 2 and 5). With
# x.requires_grad_() x gets a real gradient (dloss/dx); y does
# not require grad, so position 5 still holds None:
#     torch._dynamo.reset(); aot_x = AotGraphs()
#     torch.compile(loss_fn, backend=aot_x)(x.clone().requires_grad_(), y).backward()
#     print(aot_x.backward[0].code)   # ... return (..., None)
SOLUTION_03_4 = [5]

SOLUTIONS = {
    "03.1": SOLUTION_03_1,
    "03.2": SOLUTION_03_2,
    "03.3": SOLUTION_03_3,
    "03.4": SOLUTION_03_4,
}

WRONG = {
    "03.1": [
        (["primals_3", "primals_6", "addmm", "gelu", "t_1", "addmm_1"], "default partitioner"),
        (["primals_3", "primals_6", "addmm", "gelu", "addmm_1"], "missing"),
        ("primals_4", "list of names"),
    ],
    "03.2": [
        ({"aten.silu.default"}, "decomposition_table"),
        ({"mul", "exp", "add", "div", "neg"}, "sigmoid is core"),
        ({"sigmoid"}, "missing"),
        ("sigmoid, mul", "set of ATen op names"),
    ],
    "03.3": [
        ({"gelu", "sigmoid"}, "being core does not decide"),
        ({"glu", "sigmoid", "clamp_min", "gelu"}, "gelu (core) has an entry"),
        ({"sigmoid", "clamp_min"}, "glu is missing"),
        ({"glu", "sigmoid", "clamp_min", "addmm"}, "not among the candidates"),
    ],
    "03.4": [
        ([2, 5], "section 1's answer"),
        ([], "y still does not require grad"),
        ([2], "order of the Dynamo graph's placeholders"),
        (5, "list of positions"),
    ],
}
