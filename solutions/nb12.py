"""Worked solutions to notebook 12's exercises (a C++ operator carried to deployment)."""

import torch

# 12.1 Section 2's schema, board::upsample(Tensor input, int scale, str mode) -> Tensor, shows
# the grammar: namespace::name, then (type name, ...), then -> return type. The types are
# TorchScript's: Tensor, int (a C++ int64_t), float (a C++ double: torch.library refuses
# `double` and says to use `float`), str (a c10::string_view), bool. blend reads two tensors
# and a fractional weight and returns a new tensor, so no alias annotation such as (a!).
SOLUTIONS = {"12.1": "board::blend(Tensor a, Tensor b, float alpha) -> Tensor"}


# 12.2 The schema (section 2) is
#   upsample_backward(Tensor grad_output, int in_h, int in_w, int scale, str mode) -> Tensor
# and section 3's _backward calls it with the forward input's H and W: it returns the gradient
# of the forward's input, so its shape is that input's, (N, C, in_h, in_w). N and C come from
# grad_output (N, C, in_h * scale, in_w * scale); in_h and in_w are given as ints, so the fake
# kernel needs no division. A fake kernel computes no data: grad_output.new_empty keeps the
# dtype and device and, under FakeTensorMode, returns a FakeTensor.
def upsample_backward_fake(grad_output, in_h, in_w, scale, mode):
    n, c = grad_output.shape[:2]
    return grad_output.new_empty(n, c, in_h, in_w)


SOLUTIONS["12.2"] = upsample_backward_fake

# 12.3 The function body's Resize uses coordinate_transformation_mode="align_corners":
# output pixel d of 9 reads input coordinate d * (3 - 1) / (9 - 1) = d / 4:
#   d:          0  1     2    3     4  5     6    7     8
#   coordinate: 0  0.25  0.5  0.75  1  1.25  1.5  1.75  2
# The board rounds half up: pixels 0 0 1 1 1 1 2 2 2. Only ties (coordinate k + 0.5) depend on
# the tie rule: d = 2 (0.5) and d = 6 (1.5). round_prefer_floor sends them down, to 0 and 1:
#   pixels      0 0 0 1 1 1 1 2 2.
# (PyTorch's nearest, floor(d * 3 / 9), differs from the board only at d = 2: a different
# question.)
SOLUTIONS["12.3"] = [2, 6]

WRONG = {
    "12.1": [
        ("board::blend(Tensor a, Tensor b, double alpha) -> Tensor", "float"),
        ("board::blend(a: Tensor, b: Tensor, alpha: float) -> Tensor", "type first"),
        ("blend(Tensor a, Tensor b, float alpha) -> Tensor", "namespace"),
        ("board::blend(Tensor a, Tensor b, float alpha)", "return type"),
        ("board::blend(Tensor a, Tensor b, int alpha) -> Tensor", "fractional"),
        ("board::blend(Tensor x, Tensor y, float w) -> Tensor", "name the arguments"),
        ("board::blend(Tensor(a!) a, Tensor b, float alpha) -> Tensor(a!)", "alias"),
    ],
    "12.2": [
        (lambda g, in_h, in_w, scale, mode: g.new_empty(g.shape), "grad_output's shape"),
        (lambda g, in_h, in_w, scale, mode: g.new_empty(in_h, in_w), "keep N and C"),
        (
            lambda g, in_h, in_w, scale, mode: torch.empty(g.shape[0], g.shape[1], in_h, in_w),
            "dtype",
        ),
    ],
    "12.3": [
        ([2], "differs from PyTorch"),
        ([], "halfway"),
        ([2, 6, 10], "0 to 8"),
        ([6], "only ties"),
    ],
}
