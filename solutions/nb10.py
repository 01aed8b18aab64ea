"""Worked solutions to notebook 10's exercises (ONNX export, old and new)."""

import torch
from torch.export import Dim

# 10.1 The new exporter's dynamic_shapes is keyed like forward's parameters
# (Scaled.forward(self, x, scale)), one spec per input. For a tensor the spec maps a dimension
# number to a torch.export.Dim: x is (B, 1, 8, 8) and scale (B, 10), so the batch is dimension
# 0 of both. Both must be declared: logits * scale ties x's batch to scale's, and a static
# scale pins the batch to the example's 2. One Dim object says they are the same size; two
# Dims give a file that runs, but only through torch.onnx.export's retry with the fix
# torch.export suggests: torch.export alone refuses them ("Constraints violated").
# Outputs are not named: torch.export derives the output's batch from the inputs. The hints
# Dim.AUTO and Dim.DYNAMIC would also export (torch.export infers the tie between the two
# batches), but they leave the tie unstated: the judge asks for named Dims, as the prompt says.
_batch = Dim("batch")
SOLUTIONS = {"10.1": {"x": {0: _batch}, "scale": {0: _batch}}}

# 10.2 The TorchScript registry is filled from symbolic_opset7.py ... symbolic_opset20.py.
# A symbolic defined in symbolic_opsetN.py serves opset N and later; for the legacy targets 7
# and 8, registration._dispatch_opset_version searches upward to opset 9, so a symbolic from
# symbolic_opset8.py or symbolic_opset9.py serves 7 and 8 as well. gelu and log1p are defined
# in symbolic_opset9.py, so the registry finds them from opset 7 (gelu's then writes an Erf,
# an ONNX operator only since opset 9: the opset-7 file fails onnx.checker); celu first from
# symbolic_opset12.py; sinc, asinh and expm1 have none at any opset from 7 to 20 (asinh even
# has an ONNX op, Asinh, since opset 9):
#   {op: (legacy_symbolic_opsets(op) or [None])[0] for op in ops}
SOLUTIONS["10.2"] = {
    "aten::gelu": 7,
    "aten::sinc": None,
    "aten::asinh": None,
    "aten::celu": 12,
    "aten::log1p": 7,
    "aten::expm1": None,
}


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


def _per_row(x):
    # one condition per row: right on the prompt's inputs (their rows agree), wrong otherwise
    return torch.where(x.sum(-1, keepdim=True) > 0, x * 2, -x)


def _at_least(x):
    # >= instead of >: right unless the sum is exactly 0
    return torch.where(x.sum() >= 0, x * 2, -x)


WRONG = {
    "10.1": [
        (None, "static"),
        ({"x": {0: Dim("batch")}}, "names every parameter"),
        ({"x": {1: Dim("batch")}, "scale": {1: Dim("batch")}}, "dimension 0"),
        ({"input": {0: Dim("batch")}, "scale": {0: Dim("batch")}}, "parameter"),
        ({"x": {0: _batch}, "scale": {0: _batch}, "logits": {0: _batch}}, "inputs only"),
        ({"x": [0], "scale": [0]}, "dynamic_axes"),
        ({"x": {0: Dim("batch", max=2)}, "scale": {0: Dim("batch", max=2)}}, "max=2"),
        ({"x": {0: _batch}, "scale": None}, "refuses batch 3"),
        # the hints: torch.export would accept them and infer the tie itself; the exercise asks
        # the spec to state it, with one named Dim
        ({"x": {0: Dim.AUTO}, "scale": {0: Dim.AUTO}}, "is a hint"),
        ({"x": {0: Dim.DYNAMIC}, "scale": {0: Dim.DYNAMIC}}, "named torch.export.Dim"),
        ({"x": (Dim.DYNAMIC(min=1), None, None, None), "scale": (_batch, None)}, "is a hint"),
        # two Dims: the file runs (torch.onnx.export merges them), torch.export refuses them
        (
            {"x": {0: Dim("batch_x")}, "scale": {0: Dim("batch_scale")}},
            "refuses your spec as written",
        ),
    ],
    "10.2": [
        ({**SOLUTIONS["10.2"], "aten::sinc": 7, "aten::expm1": 7}, "no symbolic at any opset"),
        ({**SOLUTIONS["10.2"], "aten::gelu": None}, "marked None has a symbolic"),
        ({**SOLUTIONS["10.2"], "aten::celu": 7}, "an opset is not"),
        ({**SOLUTIONS["10.2"], "aten::gelu": 9, "aten::log1p": 9}, "search upward to opset 9"),
        ({"aten::sinc", "aten::asinh", "aten::expm1"}, "a dict"),
    ],
    "10.3": [
        (lambda x: torch.where(x > 0, x * 2, -x), "each element"),
        (_branchy_as_written, "kept only the branch"),
        (lambda x: x * 2, "differs from Branchy on the negative"),
        (_per_row, "a hidden case"),
        (_at_least, "a hidden case"),
    ],
}
