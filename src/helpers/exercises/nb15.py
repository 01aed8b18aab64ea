"""Judges for notebook 15 (tensor and sequence parallelism): partial gradients, bytes, memory, f/g.

The truths come from `helpers.tensor_parallel`, whose rules notebook 15 asserts against runs on
gloo: the parameters whose gradients the from-scratch sequence-parallel layer leaves partial
(`SEQUENCE_PARTIAL`, summed before `max_errors` compares with one process), `ring_bytes` with the
collectives sections 2 and 4 count, and `korthikanti_bytes`, equal to the bytes autograd saves
(section 5). 15.4 runs the reader's column- then row-parallel MLP through `launch_source` on 2
ranks (the prompt's case) and on 3 (a hidden case), two launches, each rank given w1 and w2 with
the other ranks' rows and columns set to NaN, and compares it with the same MLP computed in one
process by torch.
"""

from __future__ import annotations

import ast
import inspect
import math
import numbers
import textwrap
from typing import Any

from helpers import tensor_parallel as tp
from helpers.exercises import N_, Hint, exercise, launch_source, tr

#: the parameter names of the from-scratch layer (`shard_layer`'s keys)
PARAMS = tuple(tp.shard_layer(tp.make_layer(), 0, 2))
ROW_B, ROW_S, ROW_H, ROW_N, ROW_BYTES = 1, 4096, 8192, 8, 2  # 15.2
#: one layer's collectives per step, as sections 2 and 4 assert them (forward + backward)
LAYER_COLLECTIVES = {
    "tp": {"all_reduce": 2 + 2},
    "sp": {"all_gather": 2 + 4, "reduce_scatter": 2 + 2},
}
MEM_S, MEM_B, MEM_H, MEM_A, MEM_T = 4096, 1, 8192, 64, 4  # 15.3


def _names(answer: Any) -> set[str] | None:
    if isinstance(answer, dict) and not answer:  # `{}` typed for the empty set
        return set()
    if isinstance(answer, (str, bytes)) or not isinstance(answer, (set, frozenset, list, tuple)):
        return None
    return {str(a).strip() for a in answer}


def _torch_fc2_bias() -> str:
    """What torch's sequence-parallel plan (section 7) makes of fc2.bias's gradient, as 2 local
    ranks in this process; empty where a process group already exists here."""
    import torch.distributed as dist

    if dist.is_initialized():
        return ""
    placement = tp.local_tensor_grad_placements(2)["fc2.bias"]
    if placement.startswith("(") and placement.endswith(",)"):  # one mesh dimension
        placement = placement[1:-2]
    return tr(
        "torch's RowwiseParallel (section 7) adds fc2's bias inside the linear, before its "
        "reduce-scatter to the sequence chunks, so there every rank's fc2.bias gradient covers "
        "the whole sequence: it is {placement}, not partial.",
        placement=placement,
    )


@exercise(
    "15.1",
    "Which gradients are partial sums",
    look=N_(
        "section 2's `mlp_block` and `attention_block`, and section 4's `GatherColumnLinear` and "
        "`ReduceScatterToSequence`: where each parameter meets a sequence chunk"
    ),
    reveal=N_("`tp.SEQUENCE_PARTIAL`, which `tp.max_errors` sums over ranks before it compares"),
)
def partial_grads(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"tp", "sp"}:
        raise Hint(tr('give a dict {{"tp": set of names, "sp": set of names}}'))
    got = {k: _names(answer[k]) for k in ("tp", "sp")}
    for k, names in got.items():
        if names is None:
            raise Hint(tr('{k}: give a set of parameter names such as {{"ln1.weight"}}', k=k))
        unknown = sorted(names - set(PARAMS))
        if unknown:
            raise Hint(
                tr(
                    "{unknown} are not parameters of the layer: {params}",
                    unknown=unknown,
                    params=list(PARAMS),
                )
            )
    # tensor parallelism alone: every gradient is complete (section 2 compares them unsummed)
    truth = {"tp": set(), "sp": set(tp.SEQUENCE_PARTIAL)}
    if got == truth:
        note = _torch_fc2_bias()
        main = tr(
            (
                "{sp}: under sequence parallelism these act on the rank's sequence chunk only "
                "(the LayerNorms, and the row-parallel biases added after the reduce-scatter), so "
                "each rank's gradient is one term of a sum over chunks, all-reduced before the "
                "optimizer step. Under tensor parallelism alone none is partial: `f` all-reduces "
                "the input gradient before it reaches the LayerNorms, and every rank sees the "
                "whole output."
            ),
            sp=sorted(truth["sp"]),
        )
        return "\n".join([main, note] if note else [main])
    if got["tp"]:
        raise Hint(
            tr(
                "tp: without sequence parallelism every rank runs the LayerNorms and adds the "
                "biases on the whole sequence, and `f` has summed the input gradient: which "
                "gradient could still be missing terms?"
            )
        )
    sp = got["sp"]
    ln = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"}
    if not ln <= sp:
        raise Hint(
            tr(
                "sp: each rank normalises only its chunk of the sequence, so what does its "
                "LayerNorm parameters' gradient cover? (a LayerNorm has a weight and a bias)"
            )
        )
    weights = sp & {"qkv.weight", "fc1.weight", "o.weight", "fc2.weight"}
    if weights:
        raise Hint(
            tr(
                "sp: {weights}: the linears work on the whole sequence: the column-parallel ones "
                "all-gather their input (again in backward), the row-parallel ones get the "
                "all-gathered output gradient",
                weights=sorted(weights),
            )
        )
    if sp & {"qkv.bias", "fc1.bias"}:
        raise Hint(
            tr(
                "sp: a column-parallel bias is added after the all-gather, on the whole "
                "sequence, so its gradient is complete for its slice"
            )
        )
    raise Hint(
        tr(
            "sp: look at where the row-parallel biases are added in the from-scratch layer: "
            "before or after the reduce-scatter to the sequence chunks? (torch's RowwiseParallel, "
            "section 7, differs)"
        )
    )


def _num(a: Any) -> bool:
    return isinstance(a, numbers.Real) and not isinstance(a, bool)


def _close(a: Any, b: float) -> bool:
    return _num(a) and abs(a - b) <= 1e-6 * abs(b)


def layer_bytes(message: float = ROW_B * ROW_S * ROW_H * ROW_BYTES, n: int = ROW_N) -> dict:
    """Bytes one rank sends per layer per step (forward and backward) by the ring formula."""
    return {
        plan: sum(count * tp.ring_bytes(kind, message, n) for kind, count in kinds.items())
        for plan, kinds in LAYER_COLLECTIVES.items()
    }


@exercise(
    "15.2",
    "Bytes a layer sends per step, with and without sequence parallelism",
    look=N_(
        'section 6, "Bytes per collective, per layer, per rank", and the counts of sections 2 and 4'
    ),
    reveal=N_(
        "`tp.ring_bytes(kind, 1 * 4096 * 8192 * 2, 8)` times the count of each collective of a "
        "layer, forward and backward"
    ),
)
def row_bytes(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"tp", "sp"}:
        raise Hint(tr('give a dict {{"tp": bytes, "sp": bytes}} per rank for one layer\'s step'))
    message = ROW_B * ROW_S * ROW_H * ROW_BYTES
    truth = layer_bytes()
    got = answer
    if all(_close(got[k], truth[k]) for k in truth):
        return tr(
            (
                "{truth}: the message is b·s·h·2 = {message} B; tensor parallelism sends 4 "
                "all-reduces of 2(N-1)/N of it, sequence parallelism 6 all-gathers and 4 "
                "reduce-scatters of (N-1)/N: 10/8 as much, the two all-gathers backward that "
                "recompute the column-parallel inputs."
            ),
            truth={k: f"{v:.0f}" for k, v in truth.items()},
            message=message,
        )
    for k in truth:
        if not _num(got[k]):
            raise Hint(tr("{k}: give a number of bytes", k=k))
    forward = {"tp": truth["tp"] / 2, "sp": 4 * tp.ring_bytes("all_gather", message, ROW_N)}
    if _close(got["tp"], truth["tp"] / 2) and _close(got["sp"], truth["sp"]):
        raise Hint(
            tr("tp: an all-reduce is a reduce-scatter and an all-gather: 2(N-1)/N, not (N-1)/N")
        )
    if _close(got["sp"], forward["sp"]):
        raise Hint(tr("a step has a forward and a backward: count the collectives of both"))
    if _close(got["tp"], 2 * truth["tp"]) or _close(got["sp"], 2 * truth["sp"]):
        raise Hint(tr("bfloat16 is 2 bytes per value, not 4"))
    if _close(got["tp"], truth["tp"] * ROW_N / (ROW_N - 1)):
        raise Hint(
            tr("tp: that counts the whole message; a ring all-reduce sends 2(N-1)/N of it per rank")
        )
    if _close(got["tp"], truth["tp"]) and _close(got["sp"], truth["tp"]):
        raise Hint(
            tr(
                "sp: the forwards match, but backward `GatherColumnLinear` all-gathers its input "
                "again: count the backward collectives of section 4"
            )
        )
    raise Hint(
        tr(
            "count one layer's collectives forward and backward for each plan (sections 2 and "
            "4), then what one rank sends for each under the ring algorithm"
        )
    )


@exercise(
    "15.3",
    "Activation memory of a 64-head layer",
    look=N_("section 5, the formulas of Korthikanti et al. and what each term counts"),
    reveal=N_("`tp.korthikanti_bytes(4096, 1, 8192, 64, 4, sequence=False)` and `sequence=True`"),
)
def gpt_memory(answer: Any) -> str:
    if not isinstance(answer, dict) or set(answer) != {"tp", "sp"}:
        raise Hint(tr('give a dict {{"tp": ..., "sp": ...}} of bytes per layer per rank'))
    args = (MEM_S, MEM_B, MEM_H, MEM_A, MEM_T)
    truth = {"tp": tp.korthikanti_bytes(*args), "sp": tp.korthikanti_bytes(*args, sequence=True)}
    sbh = MEM_S * MEM_B * MEM_H
    one = tp.korthikanti_bytes(MEM_S, MEM_B, MEM_H, MEM_A)
    scores = 5 * MEM_A * MEM_S * sbh / MEM_H / MEM_T
    for k in ("tp", "sp"):
        a = answer[k]
        if _close(a, truth[k]):
            continue
        if not _num(a):
            raise Hint(tr("{k}: give a number of bytes", k=k))
        if _close(a, one):
            raise Hint(tr("{k}: that is one process; divide by t where the formula says so", k=k))
        if k == "tp" and _close(a, truth["sp"]):
            raise Hint(tr("tp: without sequence parallelism 10·s·b·h stay on every rank"))
        if k == "sp" and _close(a, truth["tp"]):
            raise Hint(tr("sp: sequence parallelism shards the 10·s·b·h part too: 34/t"))
        if _close(a, truth[k] - scores):
            raise Hint(
                tr(
                    "{k}: the softmax and dropout term 5·a·s/(h·t) (the attention probabilities, "
                    "their dropout mask and the dropout's output) is missing",
                    k=k,
                )
            )
        if _close(a, truth[k] - scores + scores * MEM_T):
            raise Hint(
                tr("{k}: the softmax and dropout term is split by heads too: 5·a·s/(h·t)", k=k)
            )
        raise Hint(tr("{k} is off: s·b·h·(... ) with the formulas of section 5", k=k))
    gib = {k: f"{v / 2**30:.3f} GiB" for k, v in truth.items()}
    return tr(
        (
            "{gib} per layer: 5·a·s/(h·t) = {scores:g}, so the softmax and dropout term "
            "({scores:g}·s·b·h: the attention probabilities, their dropout mask and output) "
            "outweighs the rest at these sizes; sequence parallelism saves only the "
            "10 - 10/t = 7.5·s·b·h that tensor parallelism replicates."
        ),
        gib=gib,
        scores=5 * MEM_A * MEM_S / (MEM_H * MEM_T),
    )


# --- 15.4: a column-parallel then row-parallel MLP, written by the reader ----------------------

SHOWN = dict(world_size=2, x_shape=(4, 6), ffn=8)  # the prompt's case
HIDDEN = dict(world_size=3, x_shape=(3, 2, 4), ffn=15)  # a hidden case: 3 ranks, 3-D input
_LIBRARY = {"parallelize_module", "ColwiseParallel", "RowwiseParallel", "mlp_block",
            "tp_layer", "CopyToParallel", "ReduceFromParallel", "distribute_tensor"}  # fmt: skip


def _source_names(fn: Any, seen: set | None = None) -> tuple[set[str], set[str]]:
    """(names called or attributes read, names used) in `fn` and in the notebook functions and
    classes it uses."""
    seen = set() if seen is None else seen
    seen.add(fn)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set(), set()
    calls = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    calls |= {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    module = getattr(fn, "__module__", None)
    for name in list(names):
        obj = getattr(fn, "__globals__", {}).get(name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj not in seen:
            if getattr(obj, "__module__", None) == module:
                c, u = _source_names(obj, seen)
                calls |= c
                names |= u
    return calls, names


def mlp_case(world_size: int, x_shape: tuple, ffn: int) -> tuple:
    """The inputs of one case (float64, seeded) and one process's (y, x_grad)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(15 + world_size)
    h = x_shape[-1]
    x = torch.randn(x_shape, generator=g, dtype=torch.float64)
    w1 = torch.randn(ffn, h, generator=g, dtype=torch.float64) / h**0.5
    w2 = torch.randn(h, ffn, generator=g, dtype=torch.float64) / ffn**0.5
    xg = x.clone().requires_grad_()
    y = F.linear(F.gelu(F.linear(xg, w1)), w2)
    (y**2).sum().backward()
    return (x, w1, w2), y.detach(), xg.grad


def own_block(rank: int, world_size: int, fn: Any, x: Any, w1: Any, w2: Any) -> Any:
    """Run the reader's `fn` on a rank with the other ranks' rows of w1 and columns of w2 NaN."""
    import torch

    rows = w1.shape[0] // world_size
    other = torch.ones(w1.shape[0], dtype=torch.bool)
    other[rank * rows : (rank + 1) * rows] = False
    w1, w2 = w1.clone(), w2.clone()
    w1[other] = float("nan")
    w2[:, other] = float("nan")
    return fn(rank, world_size, x, w1, w2)


def _error(a: Any, b: Any) -> float:
    e = float((a - b).abs().max())
    return math.inf if math.isnan(e) else e


def _run_case(answer: Any, case: dict, hidden: bool = False) -> tuple[float, float, list]:
    """Largest |y - truth| and |x_grad - truth| over the ranks (inf for a NaN), and the results."""
    import torch

    args, y, x_grad = mlp_case(**case)
    found = launch_source(own_block, case["world_size"], (answer, *args), timeout_s=120)
    errors_y, errors_g = [], []
    for result in found:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Hint(tr("return a pair (y, x_grad), as lists (y.tolist(), x_grad.tolist())"))
        try:
            ry, rg = (torch.as_tensor(v, dtype=torch.float64) for v in result)
        except (TypeError, ValueError, RuntimeError) as e:
            raise Hint(tr("y and x_grad must be numbers in lists or tensors: {e}", e=e)) from e
        if ry.shape != y.shape or rg.shape != x_grad.shape:
            raise Hint(
                tr(
                    "on {n} ranks y has shape {ys} and x_grad {gs}; both must have x's shape "
                    "{shape} (the whole output, not this rank's slice)",
                    n=case["world_size"],
                    ys=tuple(ry.shape),
                    gs=tuple(rg.shape),
                    shape=tuple(y.shape),
                )
            )
        if bool(ry.isnan().any() or rg.isnan().any()):
            if hidden:
                raise Hint(
                    tr(
                        "a hidden case holds NaN: world size 3, x of shape (3, 2, 4), w1 (15, "
                        "4): does your rank's block follow world_size and the shapes? The other "
                        "ranks' rows of w1 and columns of w2 are NaN there"
                    )
                )
            raise Hint(
                tr(
                    "on {n} ranks your result holds NaN: on rank r the other ranks' rows of w1 "
                    "and columns of w2 are NaN, so compute with the rank's own block only and "
                    "combine the partial results across the ranks",
                    n=case["world_size"],
                )
            )
        errors_y.append(_error(ry, y))
        errors_g.append(_error(rg, x_grad))
    return max(errors_y), max(errors_g), found


@exercise(
    "15.4",
    "A column-parallel then row-parallel MLP with f and g",
    look=N_(
        "section 1 (`shard_layer`: which rows of fc1 and columns of fc2 a rank keeps, and `f` "
        "and `g`) and section 2's `mlp_block`"
    ),
    reveal=N_(
        "`tp.mlp_block`'s f and g, `tp.CopyToParallel` and `tp.ReduceFromParallel`; the truth is "
        "the same MLP in one process"
    ),
)
def mlp_fg(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                "give a function tp_mlp(rank, world_size, x, w1, w2), found {answer!r}",
                answer=answer,
            )
        )
    try:
        inspect.signature(answer).bind(0, 1, None, None, None)
    except (TypeError, ValueError):
        raise Hint(
            tr(
                "the function takes (rank, world_size, x, w1, w2); yours takes {params}",
                params=list(inspect.signature(answer).parameters),
            )
        ) from None
    calls, _ = _source_names(answer)
    if calls & _LIBRARY:
        raise Hint(
            tr(
                "write the slices and the collectives yourself with dist, without the notebook's "
                "or torch's tensor-parallel helpers"
            )
        )
    err_y, err_g, _ = _run_case(answer, SHOWN)
    if err_y > 1e-9:
        raise Hint(
            tr(
                "on 2 ranks y differs from one process (largest error {err:.2g}): is each rank's "
                "slice of w1 its rows and of w2 the matching columns, and are the partial results "
                "summed over the ranks (g) before they are returned?",
                err=err_y,
            )
        )
    if err_g > 1e-9:
        raise Hint(
            tr(
                "on 2 ranks y is right but x_grad is not (largest error {err:.2g}): each rank's "
                "slice gives only part of the input's gradient; what does f do in backward?",
                err=err_g,
            )
        )
    try:
        err_y, err_g, _ = _run_case(answer, HIDDEN, hidden=True)
    except Hint:
        raise
    except Exception as e:  # the reader's code failed on the hidden case only
        raise Hint(
            tr(
                "a hidden case failed: world size 3, x of shape (3, 2, 4), w1 (15, 4): your code "
                "raised {error}: {message}",
                error=type(e).__name__,
                message=str(e).strip().splitlines()[-1][:200] if str(e).strip() else "",
            )
        ) from e
    if err_y > 1e-9 or err_g > 1e-9:
        what = "y" if err_y > 1e-9 else "x_grad"
        raise Hint(
            tr(
                "a hidden case differs: world size 3, x of shape (3, 2, 4), w1 (15, 4): {what} is "
                "off by up to {err:.2g}. Does your slicing follow world_size and the shapes?",
                what=what,
                err=max(err_y, err_g),
            )
        )
    return tr(
        "one process's y and input gradient on 2 ranks and on a hidden case (3 ranks, a 3-D "
        "input): f (identity forward, all-reduce backward) and g (all-reduce forward, identity "
        "backward) around the column- and row-parallel linears, one all-reduce each way."
    )
