"""Worked solutions to notebook 15's exercises (tensor and sequence parallelism)."""

import torch
import torch.distributed as dist
import torch.nn.functional as F

# 15.1 Which gradients are partial sums on each rank (the from-scratch layer).
# Tensor parallelism alone: every rank runs the LayerNorms, the residual adds and the
# row-parallel biases on the whole (s, b, h) activation, and `f` all-reduces the input gradient
# before it reaches the LayerNorms: no gradient is partial.
# Sequence parallelism: the LayerNorms (weight and bias) see only the rank's sequence chunk, and
# the row-parallel biases (o.bias, fc2.bias) are added after the reduce-scatter, on the chunk:
# their gradients are one term of a sum over chunks. The linears' weights and the column-parallel
# biases work on the whole sequence (all-gathered input, all-gathered output gradient).
PARTIAL = {
    "tp": set(),
    "sp": {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "o.bias", "fc2.bias"},
}

# 15.2 One layer's step (forward and backward), b = 1, s = 4096, h = 8192, bfloat16, N = 8.
# message M = 1·4096·8192·2 = 67,108,864 B. Tensor parallelism: 2 all-reduces forward (g after
# attention and MLP) and 2 backward (f): 4 · 2(N-1)/N · M = 7 M = 469,762,048 B.
# Sequence parallelism: forward 2 all-gathers + 2 reduce-scatters, backward 4 all-gathers
# (two recompute the column-parallel inputs) + 2 reduce-scatters: 10 · (N-1)/N · M = 8.75 M
# = 587,202,560 B.
M = 1 * 4096 * 8192 * 2
BYTES = {"tp": 4 * 2 * 7 / 8 * M, "sp": 10 * 7 / 8 * M}

# 15.3 s = 4096, b = 1, h = 8192, a = 64, t = 4; s·b·h = 33,554,432 and
# 5·a·s/(h·t) = 5·64·4096/(8192·4) = 40.
#   tp: s·b·h·(10 + 24/4 + 40) = 56·s·b·h   = 1,879,048,192 B
#   sp: s·b·h·(34/4 + 40)      = 48.5·s·b·h = 1,627,389,952 B
SBH = 4096 * 1 * 8192
MEMORY = {"tp": 56 * SBH, "sp": 48.5 * SBH}


# 15.4 A column-parallel then row-parallel MLP, y = gelu(x w1ᵀ) w2ᵀ, with Megatron's f and g.
def tp_mlp(rank, world_size, x, w1, w2):
    """Rank `rank`'s part of the MLP; returns (y, gradient of (y**2).sum() w.r.t. x), as lists."""
    cols = w1.shape[0] // world_size
    part = slice(rank * cols, (rank + 1) * cols)
    x = x.clone().requires_grad_()  # f forward: the identity, every rank has the whole x
    partial = F.linear(F.gelu(F.linear(x, w1[part])), w2[:, part])  # this rank's share of y
    y = partial.detach().clone()
    dist.all_reduce(y)  # g forward: sum the partial results
    partial.backward(2 * y)  # g backward: the identity, d(y**2).sum()/dy for every share
    x_grad = x.grad.clone()
    dist.all_reduce(x_grad)  # f backward: sum the slices' shares of the input gradient
    return y.tolist(), x_grad.tolist()


SOLUTIONS = {"15.1": PARTIAL, "15.2": BYTES, "15.3": MEMORY, "15.4": tp_mlp}


# typical wrong answers for 15.4 (the hint must contain the words given)
def _no_f(rank, world_size, x, w1, w2):
    cols = w1.shape[0] // world_size
    part = slice(rank * cols, (rank + 1) * cols)
    x = x.clone().requires_grad_()
    partial = F.linear(F.gelu(F.linear(x, w1[part])), w2[:, part])
    y = partial.detach().clone()
    dist.all_reduce(y)
    partial.backward(2 * y)
    return y.tolist(), x.grad.tolist()  # each rank's share of the input gradient only


def _two_halves(rank, world_size, x, w1, w2):
    """Right on 2 ranks (the prompt's case, 8 rows of w1): 4 rows a rank, whatever the shapes."""
    cols = 4
    part = slice(rank * cols, (rank + 1) * cols)
    x = x.clone().requires_grad_()
    partial = F.linear(F.gelu(F.linear(x, w1[part])), w2[:, part])
    y = partial.detach().clone()
    dist.all_reduce(y)
    partial.backward(2 * y)
    x_grad = x.grad.clone()
    dist.all_reduce(x_grad)
    return y.tolist(), x_grad.tolist()


def _one_process(rank, world_size, x, w1, w2):
    x = x.clone().requires_grad_()
    y = F.linear(F.gelu(F.linear(x, w1)), w2)
    (y**2).sum().backward()
    return y.tolist(), x.grad.tolist()


def _dummy_collective(rank, world_size, x, w1, w2):
    """The whole MLP on every rank, with a collective that changes nothing."""
    dist.all_reduce(torch.zeros(1))
    return _one_process(rank, world_size, x, w1, w2)


def _four_args(rank, world_size, x, w1):
    return [], []


WRONG = {
    "15.1": [
        (
            {"tp": set(), "sp": {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"}},
            "reduce-scatter",
        ),
        (
            {"tp": set(), "sp": {"ln1.weight", "ln2.weight", "o.bias", "fc2.bias"}},
            "weight and a bias",
        ),
        (
            {
                "tp": set(),
                "sp": {
                    "ln1.weight",
                    "ln1.bias",
                    "ln2.weight",
                    "ln2.bias",
                    "o.bias",
                    "fc2.bias",
                    "fc1.weight",
                },
            },
            "whole sequence",
        ),
        ({"tp": {"ln1.weight"}, "sp": PARTIAL["sp"]}, "without sequence parallelism"),
        ({"tp": set(), "sp": PARTIAL["sp"] | {"qkv.bias", "fc1.bias"}}, "column-parallel bias"),
        ({"sp": PARTIAL["sp"]}, "give a dict"),
    ],
    "15.2": [
        ({"tp": 2 * 2 * 7 / 8 * M, "sp": 4 * 7 / 8 * M}, "forward and a backward"),
        ({"tp": BYTES["tp"], "sp": BYTES["tp"]}, "all-gathers its input"),
        ({"tp": 2 * BYTES["tp"], "sp": 2 * BYTES["sp"]}, "2 bytes"),
        ({"tp": 4 * 2 * M, "sp": BYTES["sp"]}, "whole message"),
        ({"tp": 4 * 7 / 8 * M, "sp": BYTES["sp"]}, "reduce-scatter and an all-gather"),
    ],
    "15.3": [
        ({"tp": 48.5 * SBH, "sp": 48.5 * SBH}, "stay on every rank"),
        ({"tp": 56 * SBH, "sp": 56 * SBH}, "34/t"),
        ({"tp": (34 + 160) * SBH, "sp": 48.5 * SBH}, "one process"),
        ({"tp": 16 * SBH, "sp": 48.5 * SBH}, "softmax and dropout term"),
        ({"tp": 56 * SBH, "sp": 168.5 * SBH}, "split by heads"),
    ],
    "15.4": [
        (_no_f, "what does f do in backward"),
        (_two_halves, "a hidden case"),
        (_one_process, "NaN"),
        (_dummy_collective, "NaN"),
        (_four_args, "takes (rank, world_size, x, w1, w2)"),
        (None, "give a function"),
    ],
}
