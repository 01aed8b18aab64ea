"""Worked solutions to notebook 10's exercises (ONNX export, old and new)."""

import torch
from torch.export import Dim

# 10.1 The new exporter's dynamic_shapes is keyed like forward's parameters
# (SmallCNN.forward(self, x)), one spec per input. For a tensor the spec maps a dimension
# number to a torch.export.Dim: x is (B, 1, 8, 8), so the batch is dimension 0. Outputs are
# not named: torch.export derives the output's batch from x (section 2's graph shows
# `float[batch,1,8,8] x` and the Reshape's constant [-1, 64] that keeps the batch free).
# Without the spec the file fixes the batch to the example's 2 (section 3's refusal).
SOLUTIONS = {"10.1": {"x": {0: Dim("batch")}}}

# 10.2 Ask the registry, op by op, as section 6 does for asinh:
#   locate_translation("aten::gelu")["torchscript"]  -> symbolic_opset9.gelu (has one)
#   locate_translation("aten::sinc")["torchscript"]  -> None
#   locate_translation("aten::expm1")["torchscript"] -> None
# gelu, silu and log1p have symbolics; sinc, asinh and expm1 have none at any opset from 7 to
# 20 (for asinh ONNX even has a single standard op, Asinh, since opset 9: section 6).
SOLUTIONS["10.2"] = {"aten::sinc", "aten::asinh", "aten::expm1"}


# 10.3 Branchy's `if x.sum() > 0` is a Python bool: the TorchScript tracer records only the
# branch the example took. Compute both results and select with torch.where: the condition
# becomes a graph value (a 0-d bool tensor that broadcasts over x), so the ONNX file holds
# a Where node and is right for every input. The condition stays x.sum() > 0 (one decision
# for the whole tensor), not x > 0 (one per element, a different function).
def branchless(x):
    return torch.where(x.sum() > 0, x * 2, -x)


SOLUTIONS["10.3"] = branchless


def _branchy_as_written(x):
    if x.sum() > 0:
        return x * 2
    return -x


WRONG = {
    "10.1": [
        (None, "static"),
        ({"x": {1: Dim("batch")}}, "dimension 0"),
        ({"input": {0: Dim("batch")}}, "parameter"),
        ({"x": {0: Dim("batch")}, "logits": {0: Dim("batch")}}, "inputs only"),
        ({"x": [0]}, "dynamic_axes"),
        ({"x": {0: Dim("batch", max=2)}}, "max=2"),
    ],
    "10.2": [
        ({"aten::asinh"}, "not the only one"),
        ({"aten::sinc", "aten::asinh", "aten::expm1", "aten::gelu"}, "aten::gelu has a symbolic"),
        ("aten::asinh", "set"),
    ],
    "10.3": [
        (lambda x: torch.where(x > 0, x * 2, -x), "each element"),
        (_branchy_as_written, "kept only the branch"),
        (lambda x: x * 2, "differs from Branchy on the negative"),
    ],
}
