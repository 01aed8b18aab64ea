"""Worked solutions to notebook 03's exercises (AOTAutograd, decompositions, Inductor)."""

import torch
import torch.nn.functional as F

# 03.1 Saved for backward by the min-cut partitioner.
# Section 1's default partitioner saved t_1, the transposed weight of the second Linear (an
# output of aten.t in the forward). min-cut counts a parameter as free to save
# (torch._functorch.config.treat_parameters_as_free_to_save = True: it lives for the whole step
# anyway; partitioners.get_node_weight gives it weight 0), so it saves primals_4, the weight
# itself, and redoes the transpose (no arithmetic) in the backward; the rest (x, y, both addmm
# outputs, gelu) is saved as before. With the flag False it would save t_2 instead. Checked with
#     aot_mc = AotGraphs(partition_fn=min_cut_rematerialization_partition)
#     torch.compile(loss_fn, backend=aot_mc)(x, y).backward(); aot_mc.saved_for_backward()
SOLUTION_03_1 = ("t_1", "primals_4")


# 03.2 Write silu's decomposition.
# silu(x) = x * sigmoid(x); sigmoid is core ATen (torch.Tag.core in its tags), so the core
# table's entry (torch._decomp.decompositions.silu: `return self * torch.sigmoid(self)`) stops
# there instead of writing exp, add and div. torch.sigmoid and `*` keep the shape and dtype.
# (Inductor's own entry, torch/_inductor/decomposition.py, does write x / (1 + exp(-x)) to
# match eager more exactly; the exercise asks for the core table's form.)
def silu_decomp(x):
    return x * torch.sigmoid(x)


# 03.3 Lowered directly or decomposed first.
# compile_fx hands AOTAutograd select_decomp_table() (section 3): the module's `decompositions`
# (the core table merged with Inductor's list inductor_decompositions, minus decomps_to_exclude,
# plus the @register_decomposition functions further down decomposition.py: section 2's three
# excerpts) and, since config.fallback_random is False by default, the random ops'
# decompositions extra_random_decomps (none of the candidates is one).
# mse_loss is not core and keeps its core entry. silu's core entry is excluded (the list says
# "inductor uses exact eager decomposition"), but decomposition.py then registers its own,
# x / (1 + exp(-x)): decomposed. gelu is core, yet inductor_decompositions has an entry for it
# (an entry may also decline for some inputs, which `op in table` cannot see).
# glu and clamp_min have core decompositions, but the exclusion list removes them: Inductor
# lowers them itself. sigmoid is core with no decomposition anywhere: lowered directly.
SOLUTION_03_3 = {
    "mse_loss": "decomposed",
    "gelu": "decomposed",
    "glu": "excluded",
    "sigmoid": "no entry",
    "clamp_min": "excluded",
    "silu": "decomposed",
}

# 03.4 Which gradients are None.
# The backward returns one gradient per input of the Dynamo graph, in order: Linear 1 weight,
# bias, x, Linear 2 weight, bias, y (section 1 found x and y at 2 and 5). x now requires grad
# and gets a real gradient; the frozen weight of the second Linear is still an input (it is a
# primal), but needs no gradient: None at 3; y still none: None at 5.
#     model[2].weight.requires_grad_(False); torch._dynamo.reset(); aot_x = AotGraphs()
#     torch.compile(loss_fn, backend=aot_x)(x.clone().requires_grad_(), y).backward()
#     print(aot_x.backward[0].code)   # ... return (..., None, ..., None)
SOLUTION_03_4 = [3, 5]

SOLUTIONS = {
    "03.1": SOLUTION_03_1,
    "03.2": silu_decomp,
    "03.3": SOLUTION_03_3,
    "03.4": SOLUTION_03_4,
}


# typical wrong answers (the hint must contain the words given)


def _flattened(x):
    # right on the prompt's 1-d input, wrong shape on a 2-d one
    return x.flatten() * torch.sigmoid(x.flatten())


def _upcast(x):
    # right on float32, wrong dtype for float64 and bfloat16
    return x.float() * torch.sigmoid(x.float())


def _core_entry(x):
    # the table's own entry under another name: the judge watches its code object
    from torch._decomp import core_aten_decompositions

    entry = core_aten_decompositions()[torch.ops.aten.silu.default]
    return entry.__wrapped__(x) if hasattr(entry, "__wrapped__") else entry(x)


def _opmath_form(x):
    # right: the core entry's own bfloat16 form (pw_cast_for_opmath: compute in float32, cast
    # back); the judge does not count the casts. Not in WRONG: it passes.
    y = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    return (y * torch.sigmoid(y)).to(x.dtype)


def _exp_form(x):
    # the right values, but it takes the core op sigmoid apart
    return x / (1 + torch.exp(-x))


WRONG = {
    "03.1": [
        (("primals_4", "t_1"), "swapped"),
        (("t_1", "t"), "input of the forward graph"),
        (("gelu", "primals_4"), "free to save"),
        ("primals_4", "pair"),
    ],
    "03.2": [
        (lambda x: F.silu(x), "calls silu itself"),
        (_flattened, "a hidden case"),
        (_upcast, "a hidden case"),
        (_exp_form, "does the work"),
        (_core_entry, "a decomposition table's entry"),
        (lambda x: x * torch.sigmoid(x) if x.dim() == 1 else F.silu(x), "calls silu itself"),
        (torch.sigmoid, "differ from silu"),
        (F.silu(torch.ones(3)), "function itself"),
    ],
    "03.3": [
        ({**SOLUTION_03_3, "silu": "excluded"}, "not the last word"),
        (
            {**SOLUTION_03_3, "gelu": "no entry"},
            "being core does not keep",
        ),
        (
            {**SOLUTION_03_3, "glu": "decomposed", "clamp_min": "decomposed"},
            "takes some entries out again",
        ),
        ({**SOLUTION_03_3, "sigmoid": "excluded"}, "only be excluded"),
        ({"glu", "sigmoid", "clamp_min"}, "dict"),
        ({**SOLUTION_03_3, "gelu": "lowered"}, "not among the reasons"),
    ],
    "03.4": [
        ([2, 5], "section 1's answer"),
        ([], "y still does not require grad"),
        ([5], "still an input"),
        ([3], "y still does not require grad"),
        ([3, 5.0], "each position is an int"),
        ([2, 3, 5], "which of them now require grad"),
        (5, "list of positions"),
    ],
}
