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
# kernel needs no division. Like _upsample_fake (section 3), it takes its sizes from the
# arguments: grad_output.new_empty keeps the dtype and device and, under FakeTensorMode, returns a
# FakeTensor. (A copy such as grad_output[..., ::scale, ::scale].clone() also has the right shape:
# under FakeTensorMode no check sees data computed, so the prompt asks for sizes from the
# arguments and the check compares shape, dtype and device.)
# The check compares the result's shape, dtype and device with those of the fake kernel that
# build() registers for upsample_backward, called on the same FakeTensor; each case's
# grad_output is shaped as the board's NumPy reference upsamples an (N, C, in_h, in_w) input.
# The hidden cases have other N, C, H, W, scales (4, 1) and the other dtype the C++ kernel takes
# (float32; its check_4d_float refuses any but float32 and float64, and so may a fake kernel).
def upsample_backward_fake(grad_output, in_h, in_w, scale, mode):
    n, c = grad_output.shape[:2]
    return grad_output.new_empty(n, c, in_h, in_w)


SOLUTIONS["12.2"] = upsample_backward_fake

# 12.3 The function body's Resize uses coordinate_transformation_mode="align_corners": output
# pixel d of 21 reads input coordinate d * (7 - 1) / (21 - 1) = 0.3 * d. Only ties (a
# coordinate k + 0.5) depend on the tie rule: 0.3 * d = k + 0.5 <=> 3d = 10k + 5 <=> d = 5
# (1.5) and d = 15 (4.5) for d <= 20. The board rounds half up (pixels 2 and 5),
# round_prefer_floor down (1 and 4). (3 -> 9, section 1's axis, would give [2, 6]; PyTorch's
# nearest, floor(d * 7 / 21), differs from the board elsewhere: a different question.)
SOLUTIONS["12.3"] = [5, 15]


def _unwatched_fake(grad_output, in_h, in_w, scale, mode):
    # board_op's own fake kernel with the profiler switched off around it, then put back
    import sys

    from helpers import board_op

    watch = sys.getprofile()
    sys.setprofile(None)
    try:
        return board_op._upsample_backward_fake(grad_output, in_h, in_w, scale, mode)
    finally:
        sys.setprofile(watch)


def _shown_fake(grad_output, in_h, in_w, scale, mode):
    """board_op's registered fake kernel, which section 3 names: refused by identity."""
    from helpers import board_op

    return board_op._upsample_backward_fake(grad_output, in_h, in_w, scale, mode)


def _by_heart_fake(grad_output, in_h, in_w, scale, mode):
    """Passes the shown case only: (N, C) from grad_output, (4, 5) typed in."""
    n, c = grad_output.shape[:2]
    return grad_output.new_empty(n, c, 4, 5)


def _divided_fake(grad_output, in_h, in_w, scale, mode):
    """A plausible bug: H and W divided by 3 (the shown scale), not by `scale`."""
    n, c, h, w = grad_output.shape
    return grad_output.new_empty(n, c, h // 3, w // 3)


def _extra_dim_fake(grad_output, in_h, in_w, scale, mode):
    """Right on the shown case, a trailing dimension of 1 elsewhere (R40L-12-2)."""
    n, c = grad_output.shape[:2]
    extra = () if (in_h, in_w) == (4, 5) else (1,)
    return grad_output.new_empty(n, c, in_h, in_w, *extra)


def _judge_frame_fake(grad_output, in_h, in_w, scale, mode):
    """R40L-14-5: the truth read from the judge's frame; the judge now computes each truth only
    after every answer is in (a KeyError here)."""
    import sys

    return sys._getframe(1).f_locals["truth"]


def _pre_started_game():
    # R40L-14-7's game on 12.2: board_op's kernel asked in a thread started before the check
    # (here, at import), which the profiler does not watch; the kernel's code is swapped for a
    # recorder while the reader's function runs
    import queue
    import threading

    from helpers import board_op

    jobs, answers = queue.Queue(), queue.Queue()

    def worker():
        while True:
            args = jobs.get()
            answers.put(board_op._upsample_backward_fake(*args))

    threading.Thread(target=worker, daemon=True).start()

    def ask(grad_output, in_h, in_w, scale, mode):
        jobs.put((grad_output, in_h, in_w, scale, mode))
        return answers.get()

    return ask


_pre_started_fake = _pre_started_game()


def _fork_fake(grad_output, in_h, in_w, scale, mode):
    """A child process asked for the sizes (never reached: the fork's call is refused)."""
    import os

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    n, c = grad_output.shape[:2]
    return grad_output.new_empty(n, c, in_h, in_w)


def _lazy_fake(g, in_h, in_w, scale, mode):
    # R41S-12-1: a FakeTensor of a subclass whose shape would be asked of board_op's kernel later
    from torch._subclasses.fake_tensor import FakeTensor

    class Later(FakeTensor):
        pass

    out = g.new_empty(g.shape[0], g.shape[1], in_h, in_w)
    out.__class__ = Later
    return out


def _rebind_kernel(g, in_h, in_w, scale, mode):
    # R41L-14-1 (R6): rebind the registered kernel the truth is computed from
    from helpers import board_op

    board_op._upsample_backward_fake = lambda g, *args: g.new_empty(g.shape)
    return g.new_empty(g.shape)


WRONG = {
    "12.1": [
        ("board::blend(Tensor a, Tensor b, double alpha) -> Tensor", "float"),
        ("board::blend(a: Tensor, b: Tensor, alpha: float) -> Tensor", "type first"),
        ("blend(Tensor a, Tensor b, float alpha) -> Tensor", "namespace"),
        ("board::blend(Tensor a, Tensor b, float alpha)", "return type"),
        ("board::blend(Tensor a, Tensor b, int alpha) -> Tensor", "fractional"),
        ("board::blend(Tensor a, Tensor b, SymInt alpha) -> Tensor", "symbolic `int`"),
        ("board::blend(Tensor x, Tensor y, float w) -> Tensor", "name the arguments"),
        ("board::blend(Tensor(a!) a, Tensor b, float alpha) -> Tensor(a!)", "alias"),
        ("board::blend(Tensor a, Tensor b, float alpha) -> Tensor(a)", "alias"),
        ("board::blend.Tensor(Tensor a, Tensor b, float alpha) -> Tensor", "overload"),
        ("board:blend(Tensor a, Tensor b, float alpha) -> Tensor", "two colons"),
        ("board: blend(Tensor a, Tensor b, float alpha) -> Tensor", "two colons"),
        ("board::blend(Tensor a, Tensor b, Scalar alpha) -> Tensor", "'Scalar'"),
        ("board::blend(Tensor a, Tensor b, float? alpha) -> Tensor", "'float?'"),
        ("board::blend(Tensor a, Tensor b, float alpha=0.5) -> Tensor", "default value"),
        ("board::blend(Tensor a, Tensor b, *, float alpha) -> Tensor", "keyword-only"),
        ("board::blend(Tensor a, Tensor b, float alpha) -> Tensor out", "named return"),
    ],
    "12.2": [
        (lambda g, in_h, in_w, scale, mode: g.new_empty(g.shape), "gradient of which tensor"),
        (lambda g, in_h, in_w, scale, mode: g.new_empty(in_h, in_w), "keep N and C"),
        (
            lambda g, in_h, in_w, scale, mode: torch.empty(g.shape[0], g.shape[1], in_h, in_w),
            "dtype",
        ),
        (lambda g, in_h, in_w, scale, mode: g[:, :, :in_h, :in_w], "storage"),
        (
            lambda g, in_h, in_w, scale, mode: g.resize_(g.shape[0], g.shape[1], in_h, in_w),
            "modifies grad_output",
        ),
        (
            lambda g, in_h, in_w, scale, mode: torch.empty(
                g.shape[0], g.shape[1], in_h, in_w, dtype=g.dtype, device="meta"
            ),
            "device",
        ),
        (_shown_fake, "board_op's own"),
        (_unwatched_fake, "switches off the check's watch"),
        (_by_heart_fake, "a hidden case"),
        (_divided_fake, "a hidden case"),
        (_extra_dim_fake, "has 5 dimensions"),
        (_judge_frame_fake, "your code raised"),
        (_lazy_fake, "torch's own classes"),
        (_rebind_kernel, "changed what the check computes"),
        (_pre_started_fake, "board_op's own"),
        (_fork_fake, "starts a process"),
    ],
    "12.3": [
        ([], "halfway"),
        ([2, 6], "another size"),
        ([5, 15, 25], "0 to 20"),
        ([5], "only ties"),
        ([5.0, 10, 15], "only ties"),
        ([5.7, 15.2], "whole numbers"),
        ([1.5, 4.5], "input coordinates"),
        ([5, 5, 15], "repeats"),
    ],
}
