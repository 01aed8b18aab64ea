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
# defaults give (3.5 * 5 / 8) - 0.5 = 1.6875 -> round -> 2.
SOLUTIONS = {
    "11.1": {
        "mode": "nearest",
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
    }
}

# 11.2 In float32: x*x = 1e8 exactly, and 1e8 + 1 rounds back to 1e8 (float32 has 24
# significand bits; near 1e8 its spacing is 8). sqrt(1e8) = 1e4 exactly, so
# x + sqrt(x*x + 1) = -1e4 + 1e4 = 0, and log(0) = -inf. The standard Asinh gives -9.9035.
SOLUTIONS["11.2"] = float("-inf")

# 11.3 Run the composite on all four and compare with torch.asinh:
#   -1e4 -> -inf      (vs -9.9035): the cancellation is total (11.2)
#   -1e3 -> -7.6246   (vs -7.6009): x*x + 1 = 1000001 is exact, but sqrt rounds to a float32
#                                   near 1000 (spacing 6e-5) and x + sqrt is about 5e-4:
#                                   a few percent of it is rounding error
#   -10  -> -2.9982   (exact to 1e-3): sqrt(101) is not close to 10 in relative terms
#    1e4 ->  9.9035   (exact): a sum of two positives, no cancellation
SOLUTIONS["11.3"] = {-1e4, -1e3}

# 11.4 align_corners=True maps output pixel i to i * (in - 1) / (out - 1): the corner pixels
# line up, ONNX's "align_corners". align_corners=False is the half-pixel rule
# (i + 0.5) * in / out - 0.5: ONNX's "half_pixel", and "pytorch_half_pixel", which differs only
# for an output of size 1 (so both reproduce 5 -> 8; either is accepted).
SOLUTIONS["11.4"] = {True: "align_corners", False: "half_pixel"}


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
    assert matching_resize_attrs("nearest") == [SOLUTIONS["11.1"]]
    img = torch.arange(25.0).reshape(1, 1, 5, 5)
    linear_corners = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    assert interpolate_matches(img, 8, "bilinear", True, **linear_corners)


WRONG = {
    "11.1": [
        (
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "half_pixel",
                "nearest_mode": "round_prefer_floor",
            },
            "defaults",
        ),
        (
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "asymmetric",
                "nearest_mode": "round_prefer_floor",
            },
            "'asymmetric' is right",
        ),
        (
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "half_pixel",
                "nearest_mode": "floor",
            },
            "'floor' is right",
        ),
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, "nearest_mode"),
        ({"mode": "linear"}, "mode 'nearest'"),
    ],
    "11.2": [
        (-9.9035, "exact asinh"),
        (float("nan"), "log of exactly 0"),
        ("minus infinity", "one number"),
    ],
    "11.3": [
        ({-1e4}, "more input"),
        ({-1e4, -1e3, 1e4}, "positive"),
        ({-1e4, -1e3, -10.0}, "within 1e-3"),
    ],
    "11.4": [
        ({True: "half_pixel", False: "align_corners"}, "swapped"),
        ({True: "align_corners", False: "asymmetric"}, "i + 0.5"),
        ({True: "asymmetric", False: "half_pixel"}, "corner"),
    ],
}
