"""Worked solutions to notebook 11's exercises (ONNX custom operators)."""

import torch

# 11.1 PyTorch's "nearest" reads input pixel floor(i * in / out) for output pixel i.
# ONNX Resize splits that into two attributes:
# - coordinate_transformation_mode: the input coordinate of output pixel i.
#     half_pixel (the default):  (i + 0.5) * in / out - 0.5
#     pytorch_half_pixel:        the same, except 0 for an output of size 1
#     align_corners:             i * (in - 1) / (out - 1)
#     asymmetric:                i * in / out            <- PyTorch's coordinate
# - nearest_mode: how the coordinate becomes a pixel index.
#     round_prefer_floor (the default), round_prefer_ceil, floor, ceil
#     PyTorch takes floor.
# For 5 -> 8: output pixel 3 has coordinate 3 * 5 / 8 = 1.875; PyTorch reads pixel 1, the
# defaults give (3.5 * 5 / 8) - 0.5 = 1.6875 -> round -> 2. The answer is the pair
# (attributes, the pixel the defaults read).
_NEAREST = {
    "mode": "nearest",
    "coordinate_transformation_mode": "asymmetric",
    "nearest_mode": "floor",
}
SOLUTIONS = {"11.1": (_NEAREST, 2)}

# 11.2 x = -2**k: x*x = 2**(2k) exactly. float32 has 24 significand bits, so below 2**24 every
# integer is a float32 and x*x + 1 is exact: for k <= 11 (2**22 + 1) the sqrt is a little above
# 2**k and x + sqrt is tiny but positive (finite log). At k = 12, 2**24 + 1 lies halfway between
# 2**24 and 2**24 + 2 (the spacing there) and rounds to even, 2**24: sqrt is 2**12 exactly,
# x + sqrt = 0 and log(0) = -inf. For larger k the +1 is lost even more.
SOLUTIONS["11.2"] = 12

# 11.3 For x < 0, x + sqrt(x*x + 1) is about 1 / (2|x|); sqrt's float32 rounding error near |x|
# is about |x| * 6e-8 (half a unit in the last place). The relative error of the difference is
# then about 1.2e-7 * x**2, and log passes it on as an absolute error:
#   -5e3 -> -inf      (x*x + 1 = 25000001 > 2**24 rounds to 2.5e7: total cancellation)
#   -3e3 -> -8.3178   (vs -8.6995): 1.2e-7 * 9e6 ~ 1: no digit left
#   -300 -> -6.3899   (vs -6.3969): 1.2e-7 * 9e4 ~ 1e-2: off by 7e-3
#   -30  -> -4.09459  (vs -4.09462): ~1e-4 relative: within 1e-3
#   -3   -> exact to 1e-6
#   3e3  -> exact: a sum of two positives, no cancellation
SOLUTIONS["11.3"] = {-5e3, -3e3, -300.0}

# 11.4 align_corners=True maps output pixel i to i * (in - 1) / (out - 1): the corner pixels
# line up, ONNX's "align_corners"; pixel 3 of 5 -> 8 reads 3 * 4 / 7 = 1.7143.
# align_corners=False is the half-pixel rule (i + 0.5) * in / out - 0.5: ONNX's "half_pixel",
# and "pytorch_half_pixel", which differs only for an output of size 1 (so both reproduce
# 5 -> 8; either is accepted); pixel 3 reads 3.5 * 5 / 8 - 0.5 = 1.6875.
SOLUTIONS["11.4"] = {True: ("align_corners", 12 / 7), False: ("half_pixel", 1.6875)}


# 11.5 The composite loses digits only for x < 0, where x + sqrt(x*x + 1) cancels (11.2, 11.3).
# asinh is odd, so compute it for |x|, where the sum adds two positives, and put the sign back:
# asinh(x) = sign(x) * log(|x| + sqrt(x*x + 1)). Sign (opset 9), Abs, Mul, Add, Sqrt and Log
# are standard ops; sign(0) = 0 gives asinh(0) = 0. (x*x overflows float32 above about 1.8e19,
# beyond the inputs checked; a symbolic for huge |x| would use log(2|x|) there.)
def asinh_symbolic_stable(g, x):
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    ax = g.op("Abs", x)
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Mul", g.op("Sign", x), g.op("Log", g.op("Add", ax, root)))


SOLUTIONS["11.5"] = asinh_symbolic_stable


def _composite_by_heart(g, x):
    """Section 3's composite: right on the shown input (|x| <= 6), wrong for x << 0."""
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Log", g.op("Add", x, root))


def _no_sign(g, x):
    """log(|x| + sqrt(x*x + 1)): stable, but |asinh(x)|."""
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Log", g.op("Add", g.op("Abs", x), root))


def _mirror(g, x):
    """-log(sqrt(x*x + 1) - x): stable for x < 0, but it cancels for large positive x."""
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Neg", g.op("Log", g.op("Sub", root, x)))


def _atanh_form(g, x):
    """atanh(x / sqrt(x*x + 1)): no x + sqrt(...) at all, but x / sqrt(x*x + 1) rounds to -1 in
    float32 for large negative x, and atanh(-1) = -inf."""
    one = g.op("Constant", value_t=torch.tensor(1.0, dtype=torch.float32))
    root = g.op("Sqrt", g.op("Add", g.op("Mul", x, x), one))
    return g.op("Atanh", g.op("Div", x, root))


def _standard(g, x):
    return g.op("Asinh", x)


def explore_resize() -> None:
    """What the notebook's old check cell did: count every matching attribute set."""
    from helpers.onnx_custom import interpolate_matches, matching_resize_attrs

    for torch_mode, align_corners in [
        ("nearest", None),
        ("nearest-exact", None),
        ("bilinear", False),
        ("bilinear", True),
    ]:
        found = matching_resize_attrs(torch_mode, align_corners)
        print(f"{torch_mode:<13} align_corners={align_corners!s:<5}: {len(found)} matching set(s)")
    # "nearest" has exactly one: asymmetric + floor
    assert matching_resize_attrs("nearest") == [_NEAREST]
    img = torch.arange(25.0).reshape(1, 1, 5, 5)
    linear_corners = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    assert interpolate_matches(img, 8, "bilinear", True, **linear_corners)


WRONG = {
    "11.1": [
        (
            (
                {
                    "mode": "nearest",
                    "coordinate_transformation_mode": "half_pixel",
                    "nearest_mode": "round_prefer_floor",
                },
                2,
            ),
            "defaults",
        ),
        (
            (
                {
                    "mode": "nearest",
                    "coordinate_transformation_mode": "asymmetric",
                    "nearest_mode": "round_prefer_floor",
                },
                2,
            ),
            "'asymmetric' is right",
        ),
        (
            (
                {
                    "mode": "nearest",
                    "coordinate_transformation_mode": "half_pixel",
                    "nearest_mode": "floor",
                },
                2,
            ),
            "'floor' is right",
        ),
        (({"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, 2), "nearest_mode"),
        (({"mode": "linear"}, 2), "mode 'nearest'"),
        ((_NEAREST, 1), "PyTorch reads"),
        ((_NEAREST, 3), "not 3"),
        (_NEAREST, "give the pair"),
    ],
    "11.2": [
        (11, "still a float32"),
        (13, "not first"),
        (24, "not first"),
        (64, "between 1 and 24"),
        (5, "finite"),
        ("twelve", "whole number"),
    ],
    "11.3": [
        ({-5e3}, "more input"),
        ({-3e3, -300.0}, "gives -inf"),
        ({-5e3, -3e3, -300.0, 3e3}, "positive"),
        ({-5e3, -3e3, -300.0, -30.0}, "within 1e-3"),
        (-5e3, "a set of"),
    ],
    "11.4": [
        ({True: ("half_pixel", 1.6875), False: ("align_corners", 12 / 7)}, "swapped"),
        ({True: ("align_corners", 12 / 7), False: ("asymmetric", 1.875)}, "i + 0.5"),
        ({True: ("asymmetric", 1.875), False: ("half_pixel", 1.6875)}, "corner"),
        ({True: ("align_corners", 12 / 7), False: ("half_pixel", 1.875)}, "half-pixel shift"),
        ({True: ("align_corners", 1.875), False: ("half_pixel", 1.6875)}, "align_corners=True"),
        ({True: "align_corners", False: "half_pixel"}, "give a dict"),
    ],
    "11.5": [
        (_composite_by_heart, "a hidden case"),
        (_composite_by_heart, "what happens to x + sqrt(x*x + 1)"),  # its own formula's hint
        (_atanh_form, "which of its steps"),  # the hint speaks of its own steps
        (_no_sign, "wrong for x < 0"),
        (_mirror, "large positive x"),
        (_standard, "without an Asinh kernel"),
        (lambda x: x, "takes (g, x)"),
    ],
}
