"""Judges of notebook 03's exercises (AOTAutograd's partition, decompositions, Inductor's route).

Every judge finds the truth in the installed torch: it partitions a training step with
`AotGraphs` (no code generation), traces with `make_fx` and the core ATen table, and reads
Inductor's decomposition table (`select_decomp_table`) and lowerings. No judge runs Inductor's
code generation (a cold compile takes seconds). 03.2 is code: the reader's decomposition of
silu runs on the prompt's input and on hidden ones (other shapes and dtypes, 0-d, empty,
extreme values), and its traced ops are compared with the core table's entry's on the same
inputs (dtype casts aside).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from helpers.exercises import N_, Hint, exercise, tr, watching

#: Exercise 03.3: the ATen ops asked about (all `.default` overloads).
CANDIDATES_03_3 = ["mse_loss", "gelu", "glu", "sigmoid", "clamp_min", "silu"]
#: Exercise 03.3: the reasons a reader may give for each op.
REASONS_03_3 = ("decomposed", "excluded", "no entry")
#: Exercise 03.4: the parameter frozen (requires_grad=False) in the step asked about.
FROZEN_03_4 = "2.weight"


@functools.cache
def _step(
    min_cut: bool, x_requires_grad: bool = False, frozen: str | None = None
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """One step of notebook 03's loss_fn through AotGraphs: (names the backward receives from
    the forward, positions of None among the gradients the backward returns).

    `frozen` names a parameter of the model ("2.weight") set to requires_grad=False first.
    Cached: a few small compiles per process, however many answers are judged.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from helpers.compile_tools import AotGraphs

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    if frozen:
        dict(model.named_parameters())[frozen].requires_grad_(False)

    def loss_fn(x: Any, y: Any) -> Any:
        return F.mse_loss(model(x), y)

    torch._dynamo.reset()
    aot = AotGraphs(partition_fn=min_cut_rematerialization_partition if min_cut else None)
    x = torch.randn(5, 4, requires_grad=x_requires_grad)
    torch.compile(loss_fn, backend=aot)(x, torch.randn(5, 1)).backward()
    grads = aot.backward[0].graph.find_nodes(op="output")[0].args[0]
    return tuple(aot.saved_for_backward()), tuple(i for i, g in enumerate(grads) if g is None)


def _names(value: Any) -> set[str]:
    """'t_1' or {'t_1'} or ['t_1'] -> {'t_1'}."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, (list, tuple, set, frozenset)):
        return {str(v) for v in value}
    return {str(value)}


@exercise(
    "03.1",
    "Saved for backward by the min-cut partitioner",
    look=N_(
        "section 1's list of saved values and its forward graph (which op made each one), and "
        "section 3 (the partitioner Inductor uses)"
    ),
    reveal=N_(
        "`aot.saved_for_backward()` of a fresh "
        "`AotGraphs(partition_fn=min_cut_rematerialization_partition)`"
    ),
)
def min_cut_saved(answer: Any) -> str:
    if isinstance(answer, str) or not isinstance(answer, (list, tuple)) or len(answer) != 2:
        raise Hint(
            tr(
                "answer with a pair (dropped, added): the name section 1's list loses and the "
                "name it gains"
            )
        )
    default, truth = _step(False)[0], _step(True)[0]
    dropped, added = set(default) - set(truth), set(truth) - set(default)
    given_dropped, given_added = _names(answer[0]), _names(answer[1])
    if (given_dropped, given_added) == (dropped, added):
        return tr(
            (
                "min-cut saves {truth}: it drops {dropped} and saves {added} instead. A "
                "parameter lives for the whole step anyway, so min-cut counts saving it as free "
                "(treat_parameters_as_free_to_save in torch/_functorch/config.py), and the "
                "transpose, no arithmetic, is redone in the backward from it. Inductor's "
                "partitioner (section 3) does the same with the transpose; its list differs "
                "because gelu and mse_loss are decomposed first"
            ),
            truth=list(truth),
            dropped=sorted(dropped),
            added=sorted(added),
        )
    if (given_dropped, given_added) == (added, dropped):
        raise Hint(tr("the two names are swapped: which one was in section 1's list?"))
    if given_dropped == dropped:
        raise Hint(
            tr(
                "the dropped name is right; to redo that op in the backward, the backward needs "
                "the op's input instead: an input of the forward graph, one min-cut counts as "
                "free to save"
            )
        )
    if given_dropped - set(default):
        raise Hint(
            tr(
                "{names} is not in section 1's list: the first name is one the default "
                "partitioner saved",
                names=sorted(given_dropped - set(default)),
            )
        )
    raise Hint(
        tr(
            "what does min-cut count as free to save, and which of section 1's saved values "
            "could the backward rebuild from such a value alone?"
        )
    )


def _packet(op: Any) -> str:
    """'mul' for aten.mul.Tensor, aten.mul, 'aten.mul.Tensor', 'torch.ops.aten.mul' or 'mul'."""
    text = str(op).removeprefix("torch.ops.").removeprefix("aten::").removeprefix("aten.")
    return text.split(".")[0]


def _silu_cases() -> list[tuple[str, Any]]:
    """(description, input) of 03.2: the prompt's input first, then the hidden ones."""
    import torch

    g = torch.Generator().manual_seed(3)
    return [
        ("torch.linspace(-3, 3, 7)", torch.linspace(-3, 3, 7)),
        (N_("float64, shape (3, 5)"), torch.randn(3, 5, generator=g, dtype=torch.float64)),
        (N_("bfloat16, shape (8,)"), torch.randn(8, generator=g).to(torch.bfloat16)),
        (N_("a 0-d tensor"), torch.tensor(-1.5)),
        (N_("an empty tensor of shape (0, 3)"), torch.empty(0, 3)),
        (N_("float32 with -1e4, -30, 0, 30, 1e4"), torch.tensor([-1e4, -30.0, 0.0, 30.0, 1e4])),
    ]


def _table_entries() -> set[Any]:
    """The code objects of the core table's and Inductor's decompositions of silu."""
    import torch
    from torch._decomp import core_aten_decompositions
    from torch._inductor.decomposition import select_decomp_table

    op = torch.ops.aten.silu.default
    fns = [
        table[op] for table in (core_aten_decompositions(), select_decomp_table()) if op in table
    ]
    return {inspect.unwrap(f).__code__ for f in fns}


def _reaches(fn: Any, x: Any, codes: set[Any]) -> bool:
    """Whether calling fn(x) runs a function whose code object is in `codes` (any alias)."""
    with watching(codes) as hits:
        fn(x)
    return bool(hits)


#: 03.2: dtype casts, not counted among a decomposition's ops (the core entry casts bfloat16 to
#: float32 and back, `pw_cast_for_opmath`; a student may write the same casts or leave them out)
_CASTS = {"_to_copy"}


def _traced_ops(fn: Any, x: Any, table: Any = None) -> set[Any]:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, decomposition_table=table)(x)
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


@exercise(
    "03.2",
    "Write silu's decomposition",
    look=N_(
        "section 2: how the core ATen table rewrites a non-core op, and which ops carry "
        "torch.Tag.core"
    ),
    reveal=N_(
        "the core table's own entry: `show_source(table[op])` with "
        "`table = core_aten_decompositions()`"
    ),
)
def silu_decomposition(answer: Any) -> str:
    import torch
    import torch.nn.functional as F
    from torch._decomp import core_aten_decompositions

    if not callable(answer):
        raise Hint(tr("give the function itself, `silu_decomp`, not its result"))
    try:
        params = list(inspect.signature(answer).parameters)
    except (TypeError, ValueError):
        params = ["x"]
    if len(params) != 1:
        raise Hint(tr("the function takes one tensor x; yours takes {params}", params=params))
    cases = _silu_cases()
    targets = set()
    for _what, x in cases:
        targets |= _traced_ops(answer, x.clone())
    names = {_packet(t) for t in targets}
    if "silu" in names:
        raise Hint(
            tr(
                "your function still calls silu itself: a decomposition writes the op with "
                "other, simpler ops"
            )
        )
    not_core = sorted(str(t) for t in targets if torch.Tag.core not in t.tags)
    if not_core:
        raise Hint(
            tr(
                "{ops} are not core ATen ops (torch.Tag.core is not in their tags): a "
                "decomposition table's result holds core ops only",
                ops=not_core,
            )
        )
    if _reaches(answer, cases[0][1].clone(), _table_entries()):
        raise Hint(
            tr(
                "your function calls a decomposition table's entry for silu: write the "
                "decomposition yourself, with torch functions"
            )
        )
    for i, (what, x) in enumerate(cases):
        got, want = answer(x.clone()), F.silu(x)
        problem = None
        if not isinstance(got, torch.Tensor):
            problem = tr("it returned {type}, not a tensor", type=type(got).__name__)
        elif got.shape != want.shape:
            problem = tr(
                "the shape is {got}, silu keeps {want}",
                got=tuple(got.shape),
                want=tuple(want.shape),
            )
        elif got.dtype != want.dtype:
            problem = tr("the dtype is {got}, silu keeps {want}", got=got.dtype, want=want.dtype)
        else:
            try:
                torch.testing.assert_close(got, want, equal_nan=True)
            except AssertionError:
                bad = int((~torch.isclose(got, want, equal_nan=True)).sum())
                problem = tr("{bad} value(s) differ from silu's", bad=bad)
        if problem:
            if i == 0:
                raise Hint(tr("on {what}: {problem}", what=tr(what), problem=problem))
            raise Hint(
                tr(
                    "the prompt's input passes, but a hidden case ({what}) fails: {problem}",
                    what=tr(what),
                    problem=problem,
                )
            )
    # The entry's ops on every case, as the student's are collected: on bfloat16 it also casts
    # (pw_cast_for_opmath computes in float32), so casts are compared on neither side.
    core = core_aten_decompositions()
    table_ops = set()
    for _what, x in cases:
        table_ops |= {_packet(t) for t in _traced_ops(lambda a: F.silu(a), x.clone(), core)}
    work, table_work = names - _CASTS, table_ops - _CASTS
    if work != table_work:
        raise Hint(
            tr(
                "the values are right and every op is core, but the core table's entry uses "
                "{n} op(s) besides dtype casts, you use {ops}: the core table's entry stops at "
                "a core op that does the work, and this exercise asks for that form (Inductor's "
                "own entry, in torch/_inductor/decomposition.py, does take it apart, to match "
                "eager more exactly)",
                n=len(table_work),
                ops=sorted(work),
            )
        )
    return tr(
        (
            "{ops}: silu(x) = x * sigmoid(x), both core ATen ops (torch.Tag.core in their "
            "tags), the ops the core table's entry traces to on float32 (for bfloat16 the "
            "entry also computes in float32, pw_cast_for_opmath); it matches F.silu on {n} "
            "inputs (shapes, dtypes, 0-d, empty, extreme values)"
        ),
        ops=sorted(work),
        n=len(cases),
    )


def _route(name: str) -> str:
    """03.3's truth for one op: "decomposed", "excluded" or "no entry"."""
    import torch
    from torch._decomp import core_aten_decompositions
    from torch._inductor.decomposition import select_decomp_table

    op = getattr(torch.ops.aten, name).default
    if op in select_decomp_table():
        return "decomposed"
    return "excluded" if op in core_aten_decompositions() else "no entry"


@exercise(
    "03.3",
    "Lowered directly or decomposed first",
    look=N_(
        "section 2's excerpts of torch/_inductor/decomposition.py (the list "
        "inductor_decompositions, the exclusion list decomps_to_exclude, the wrapper "
        "register_decomposition), then the @register_decomposition functions that follow the "
        "wrapper in that file"
    ),
    reveal=N_(
        "`op in core_aten_decompositions()` and `op in select_decomp_table()`, "
        "for each candidate's ATen op"
    ),
)
def inductor_route(answer: Any) -> str:
    import torch

    if not isinstance(answer, dict):
        raise Hint(
            tr(
                "answer with a dict {{name: reason}} for all six candidates, each reason one "
                "of {reasons}",
                reasons=list(REASONS_03_3),
            )
        )
    given = {_packet(k): str(v).strip() for k, v in answer.items()}
    if set(given) != set(CANDIDATES_03_3):
        raise Hint(
            tr(
                "give one reason for each of the six candidates {candidates}; yours covers {names}",
                candidates=CANDIDATES_03_3,
                names=sorted(given),
            )
        )
    odd = sorted({v for v in given.values() if v not in REASONS_03_3})
    if odd:
        raise Hint(
            tr("{odd} are not among the reasons {reasons}", odd=odd, reasons=list(REASONS_03_3))
        )
    truth = {name: _route(name) for name in CANDIDATES_03_3}
    if given == truth:
        core = sorted(
            n
            for n, r in truth.items()
            if r == "decomposed" and torch.Tag.core in getattr(torch.ops.aten, n).default.tags
        )
        direct = sorted(n for n, r in truth.items() if r != "decomposed")
        return tr(
            (
                "{truth}: {direct} reach GraphLowering as they are (no entry in Inductor's "
                "table, a lowering of their own); the others may be rewritten first (an entry "
                "can also decline and leave the op to its lowering), core or not (core here: "
                "{core})"
            ),
            truth=truth,
            direct=direct,
            core=core,
        )
    # No count of the wrong reasons: with it, changing one reason at a time finds the answer.
    pairs = {(given[n], truth[n]) for n in CANDIDATES_03_3 if given[n] != truth[n]}
    if ("excluded", "decomposed") in pairs:
        raise Hint(
            tr(
                "not every reason is right; the exclusion list removes a core entry, but that "
                "is not the last word: further down, decomposition.py registers entries of "
                "Inductor's own, and an op on the list can get one there"
            )
        )
    if ("no entry", "decomposed") in pairs:
        raise Hint(
            tr(
                "not every reason is right; being core does not keep an op out of Inductor's "
                "table: Inductor adds decompositions of its own to the core table's (section 2)"
            )
        )
    if ("decomposed", "excluded") in pairs or ("no entry", "excluded") in pairs:
        raise Hint(
            tr(
                "not every reason is right; an op the core table decomposes can still reach "
                "Inductor whole: Inductor takes some entries out again (section 2's exclusion "
                "list)"
            )
        )
    raise Hint(
        tr(
            "not every reason is right; an op can only be excluded if the core table has an "
            "entry for it, and a core op needs no decomposition to be core"
        )
    )


@exercise(
    "03.4",
    "Which gradients are None",
    look=N_(
        "section 1: the order of the Dynamo graph's inputs (where x and y sit) and the "
        "backward graph's return line"
    ),
    reveal=N_("the return line of the backward graph of a fresh `AotGraphs()`"),
)
def none_gradients(answer: Any) -> str:
    if isinstance(answer, (str, int)) or not isinstance(answer, (list, tuple, set, frozenset)):
        raise Hint(tr("answer with a list of positions (ints) in the backward's output tuple"))
    _, truth = _step(False, x_requires_grad=True, frozen=FROZEN_03_4)
    _, before = _step(False)
    if any(isinstance(a, bool) or not isinstance(a, int) for a in answer):
        raise Hint(
            tr("each position is an int (0 is the first output), found {answer!r}", answer=answer)
        )
    given = sorted(answer)
    if given == list(truth):
        return tr(
            (
                "None at {list_truth}: the backward returns one gradient per input of the "
                "graph, in its order (Linear 1's weight and bias, x, Linear 2's weight and bias, "
                "y); a frozen parameter is still an input, so its slot stays and holds None, "
                "like y's; x now gets a real gradient"
            ),
            list_truth=list(truth),
        )
    if given == list(before):
        raise Hint(
            tr(
                "that is section 1's answer, where x did not require grad and every parameter "
                "did; here both changed"
            )
        )
    if not given:
        raise Hint(tr("y still does not require grad: its slot holds None"))
    if len(given) < len(truth) and set(given) <= set(truth):
        missing = set(truth) - set(given)
        if max(before) in missing:
            raise Hint(tr("one None is missing: y still does not require grad"))
        raise Hint(
            tr(
                "one None is missing: a parameter with requires_grad=False is still an input "
                "of the graph, so it keeps its slot"
            )
        )
    raise Hint(
        tr(
            "the slots follow the order of the graph's inputs (section 1 found x and y "
            "there); which of them now require grad, and which do not?"
        )
    )
