"""Judges of notebook 03's exercises (AOTAutograd's partition, decompositions, Inductor's route).

Every judge finds the truth in the installed torch: it partitions a training step with
`AotGraphs` (no code generation), traces with `make_fx` and the core ATen table, and reads
Inductor's decomposition table (`select_decomp_table`) and lowerings. No judge runs Inductor's
code generation (a cold compile takes seconds).
"""

from __future__ import annotations

import functools
from typing import Any

from helpers.exercises import Hint, choice_set, exercise, tr

#: Exercise 03.3: the ATen ops asked about (all `.default` overloads).
CANDIDATES_03_3 = ["mse_loss", "gelu", "glu", "sigmoid", "clamp_min", "silu"]


@functools.cache
def _step(min_cut: bool, x_requires_grad: bool = False) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """One step of notebook 03's loss_fn through AotGraphs: (names the backward receives from
    the forward, positions of None among the gradients the backward returns).

    Cached: a few small compiles per process, however many answers are judged.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from helpers.compile_tools import AotGraphs

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))

    def loss_fn(x: Any, y: Any) -> Any:
        return F.mse_loss(model(x), y)

    torch._dynamo.reset()
    aot = AotGraphs(partition_fn=min_cut_rematerialization_partition if min_cut else None)
    x = torch.randn(5, 4, requires_grad=x_requires_grad)
    torch.compile(loss_fn, backend=aot)(x, torch.randn(5, 1)).backward()
    grads = aot.backward[0].graph.find_nodes(op="output")[0].args[0]
    return tuple(aot.saved_for_backward()), tuple(i for i, g in enumerate(grads) if g is None)


def _saved(min_cut: bool) -> tuple[str, ...]:
    return _step(min_cut)[0]


@exercise("03.1", "Saved for backward by the min-cut partitioner")
def min_cut_saved(answer: Any) -> str:
    if isinstance(answer, str) or not isinstance(answer, (list, tuple, set)):
        raise Hint(tr("answer with a list of names, like section 1's aot.saved_for_backward()"))
    truth, default = list(_saved(True)), list(_saved(False))
    given = set(map(str, answer))
    if given == set(truth):
        dropped, added = sorted(set(default) - given), sorted(given - set(default))
        return tr(
            (
                "{truth}: min-cut saves {added} instead of {dropped}; what it drops is cheap "
                "to recompute in the backward from what it keeps, as the Inductor backend's "
                "partitioner (section 3) also does"
            ),
            truth=truth,
            added=added,
            dropped=dropped,
        )
    if given == set(default):
        raise Hint(
            tr(
                "that is the default partitioner's list of section 1; the min-cut partitioner "
                "recomputes cheap ops in the backward when that lets it save fewer or cheaper "
                "values"
            )
        )
    if given < set(truth):
        raise Hint(
            tr(
                (
                    "{n_missing} name(s) missing: the backward still needs every weight "
                    "it multiplies by; read the backward graph's placeholders "
                    "(aot.backward[0].code)"
                ),
                n_missing=len(truth) - len(given),
            )
        )
    raise Hint(
        tr(
            "compile loss_fn with a fresh "
            "AotGraphs(partition_fn=min_cut_rematerialization_partition) after "
            "torch._dynamo.reset(), call .backward(), then read aot.saved_for_backward()"
        )
    )


def _packet(op: Any) -> str:
    """'mul' for aten.mul.Tensor, aten.mul, 'aten.mul.Tensor', 'torch.ops.aten.mul' or 'mul'."""
    text = str(op).removeprefix("torch.ops.").removeprefix("aten::").removeprefix("aten.")
    return text.split(".")[0]


@exercise("03.2", "What silu decomposes into")
def silu_decomposition(answer: Any) -> str:
    import torch
    import torch.nn.functional as F
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    from helpers.compile_tools import graph_ops

    if isinstance(answer, str) or not isinstance(answer, (list, tuple, set)):
        raise Hint(
            tr("answer with a set of ATen op names, e.g. {{'aten.add.Tensor'}} or {{'add'}}")
        )
    table = core_aten_decompositions()
    gm = make_fx(lambda a: F.silu(a), decomposition_table=table)(torch.randn(4))
    ops = graph_ops(gm)
    truth = {_packet(op) for op in ops}
    given = {_packet(op) for op in answer}
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    if given == truth and all(torch.Tag.core in t.tags for t in targets):
        return tr(
            (
                "{sorted_ops}: silu(x) = x * sigmoid(x), and both are core ATen ops "
                "(torch.Tag.core in their tags), so the table stops there"
            ),
            sorted_ops=sorted(ops),
        )
    if "silu" in given:
        raise Hint(
            tr(
                "silu is still there: make_fx keeps it unless you pass "
                "decomposition_table=core_aten_decompositions() (section 2)"
            )
        )
    if given - truth and {"exp", "neg", "add", "div", "reciprocal"} & given:
        raise Hint(
            tr(
                "you went further than the table does: sigmoid is core (torch.Tag.core in "
                "aten.sigmoid.default.tags), and a decomposition stops at core ops"
            )
        )
    if given < truth:
        raise Hint(
            tr(
                "{n_missing} op(s) missing: read gm.code of the make_fx trace",
                n_missing=len(truth - given),
            )
        )
    raise Hint(
        tr(
            "trace it: make_fx(lambda a: F.silu(a), "
            "decomposition_table=core_aten_decompositions())(torch.randn(4)).code"
        )
    )


@exercise("03.3", "Lowered directly or decomposed first")
def inductor_route(answer: Any) -> str:
    import torch
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import lowerings

    given = choice_set(answer, CANDIDATES_03_3, tr("op names"), "{'gelu'}", _packet)
    table = select_decomp_table()
    ops = {name: getattr(torch.ops.aten, name).default for name in CANDIDATES_03_3}
    truth = {name for name, op in ops.items() if op not in table and op in lowerings}
    core = {name for name, op in ops.items() if torch.Tag.core in op.tags}
    if given == truth:
        return tr(
            (
                "{sorted_truth} reach GraphLowering as they are (no entry in "
                "select_decomp_table(), an entry in lowerings); the others have an entry, so "
                "they may be rewritten first (an entry can also decline and leave the op to its "
                "lowering), core or not (core here: {sorted_core})"
            ),
            sorted_truth=sorted(truth),
            sorted_core=sorted(core),
        )
    if given == core:
        raise Hint(
            tr(
                "being core does not decide it: Inductor's table is the core ATen table plus "
                "its own decompositions, minus an exclusion list (section 2); test `op in "
                "select_decomp_table()`"
            )
        )
    extra, missing = sorted(given - truth), sorted(truth - given)
    if extra:
        name = extra[0]
        where = tr("core") if name in core else tr("not core")
        raise Hint(
            tr(
                (
                    "{name} ({where}) has an entry in Inductor's decomposition table: "
                    "torch.ops.aten.{name}.default in select_decomp_table() is True"
                ),
                name=name,
                where=where,
            )
        )
    from torch._decomp import core_aten_decompositions

    name = missing[0]
    if ops[name] in core_aten_decompositions():
        raise Hint(
            tr(
                (
                    "{name} is missing: the core table decomposes it, but Inductor's exclusion "
                    "list (decomps_to_exclude, section 2's excerpt) takes it out again and lowers "
                    "it directly"
                ),
                name=name,
            )
        )
    raise Hint(
        tr(
            (
                "{name} is missing: it has no decomposition in select_decomp_table() and a "
                "lowering in `lowerings` (section 3)"
            ),
            name=name,
        )
    )


@exercise("03.4", "Which gradients are None")
def none_gradients(answer: Any) -> str:
    if isinstance(answer, (str, int)) or not isinstance(answer, (list, tuple, set, frozenset)):
        raise Hint(tr("answer with a list of positions (ints) in the backward's output tuple"))
    _, truth = _step(False, x_requires_grad=True)
    _, before = _step(False)
    given = sorted(answer) if isinstance(answer, (set, frozenset)) else list(answer)
    if given == list(truth):
        return tr(
            (
                "None only at {list_truth}: the backward returns one gradient per primal, in "
                "the order of the graph's inputs; x now requires grad and gets a real "
                "gradient, y still gets None"
            ),
            list_truth=list(truth),
        )
    if given == list(before):
        raise Hint(
            tr(
                "that is section 1's answer, where x did not require grad; here it does, so "
                "its slot holds a gradient"
            )
        )
    if not given:
        raise Hint(tr("y still does not require grad: its slot holds None"))
    raise Hint(
        tr(
            "the slots follow the order of the Dynamo graph's placeholders (section 1 found x "
            "and y there): print aot.backward[0].code and read its return line"
        )
    )
