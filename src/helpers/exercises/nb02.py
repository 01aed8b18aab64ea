"""Judges of notebook 02's exercises (Dynamo: graph breaks, recompiles, guards, fullgraph).

Every judge finds the truth by running Dynamo on the installed torch, with cheap backends
(`torch._dynamo.explain`, `CompileCounter`, `"eager"`): no code generation. Each judge starts
with `torch._dynamo.reset()`, so it forgets what the notebook compiled before.
"""

from __future__ import annotations

import functools
from typing import Any

from helpers.exercises import Hint, choice_set, exercise, tr


def f_tolist(x: Any, y: Any) -> Any:
    """Notebook 02's `f` with a `.tolist()` between its two lines (exercise 02.1)."""
    a = x.sin() + y
    z = a.tolist()
    return a * 2, z


def f(x: Any, y: Any) -> Any:
    """Notebook 02's `f` (exercise 02.2)."""
    a = x.sin() + y
    return a * 2


def h(x: Any) -> Any:
    """The function exercise 02.3 compiles once, then calls with each variant."""
    return x.sin() * 2


def g_reference(x: Any) -> Any:
    """What notebook 02's `g` returns, without its print (exercise 02.4)."""
    x = x.relu() + 1
    if x.sum() > 0:
        return x.cos()
    return x.sin()


#: Exercise 02.2: the shapes of the three calls, in order.
SHAPES_02_2 = [(3,), (4,), (5, 1)]


def _variants() -> dict[str, Any]:
    """Exercise 02.3: name -> a function that makes the argument of the second call."""
    import torch

    return {
        "values": lambda: torch.randn(3),
        "requires_grad": lambda: torch.randn(3, requires_grad=True),
        "dtype": lambda: torch.randn(3, dtype=torch.float64),
        "stride": lambda: torch.randn(6)[::2],
        "view": lambda: torch.randn(2, 3)[0],
        "no_grad": lambda: torch.randn(3),  # called under torch.no_grad()
    }


VARIANTS_02_3 = ["values", "requires_grad", "dtype", "stride", "view", "no_grad"]


@functools.cache
def _explain_tolist() -> tuple[int, int, str]:
    """(graph_count, graph_break_count, first break reason) of explain(f_tolist), once."""
    import torch

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(f_tolist)(torch.randn(3), torch.randn(3))
    graphs, breaks = explanation.graph_count, explanation.graph_break_count
    reason = str(explanation.break_reasons[0].reason).splitlines()[0] if breaks else ""
    return graphs, breaks, reason


@exercise("02.1", "Graphs and breaks of a .tolist()")
def tolist_breaks(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(
            tr("answer with a pair: (graph_count, graph_break_count), as explain reports them")
        )
    answer = tuple(answer)
    graphs, breaks, reason = _explain_tolist()
    if answer == (graphs, breaks):
        return tr(
            (
                "{graphs} graphs, {breaks} break ({reason!r}): `.tolist()` needs the values, "
                "which a traced graph does not have; the graph before it is compiled, tolist "
                "runs in Python, and `a * 2` is traced again in the resume function"
            ),
            graphs=graphs,
            breaks=breaks,
            reason=reason,
        )
    given_graphs, given_breaks = answer
    if given_breaks == given_graphs and given_graphs:
        raise Hint(
            tr(
                "graphs and breaks cannot be equal: explain computes graph_break_count as "
                "graph_count - 1 (its source in section 6)"
            )
        )
    if given_breaks == 0:
        raise Hint(
            tr(
                "a graph holds tensor operations on values it does not know; can `.tolist()` "
                "give a Python list without them? Run torch._dynamo.explain(f_tolist)(x, y)"
            )
        )
    if given_graphs > graphs:
        raise Hint(
            tr(
                "too many graphs: the code after the break (a * 2) runs in one resume "
                "function, and `.tolist()` itself runs in plain Python, in no graph"
            )
        )
    raise Hint(
        tr("run torch._dynamo.explain(f_tolist)(x, y) and read graph_count, graph_break_count")
    )


@functools.cache
def _frame_counts() -> tuple[int, ...]:
    """CompileCounter.frame_count after each call of exercise 02.2, measured once."""
    import torch
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(f, backend=counter)
    counts = []
    for shape in SHAPES_02_2:
        compiled(torch.randn(shape), torch.randn(shape))
        counts.append(counter.frame_count)
    return tuple(counts)


@exercise("02.2", "Compilations for three shapes")
def shape_recompiles(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or len(answer) != len(SHAPES_02_2):
        raise Hint(tr("answer with a list of three counts: counter.frame_count after each call"))
    truth = list(_frame_counts())
    if list(answer) == truth:
        return tr(
            (
                "{truth}: (4,) fails size=[3] and recompiles with a dynamic size; (5, 1) has "
                "two dimensions, which no symbolic size stands for, so it fails the guard "
                "again"
            ),
            truth=truth,
        )
    if list(answer[:2]) != truth[:2]:
        raise Hint(
            tr(
                "look at section 4 again: the first call compiles, and a size change from 3 "
                "to 4 fails TENSOR_MATCH's size=[3]"
            )
        )
    if answer[2] == truth[1]:
        raise Hint(
            tr(
                "automatic dynamic shapes make a size symbolic, not the number of dimensions: "
                "the guard still expects one-dimensional tensors after the second compile"
            )
        )
    raise Hint(tr("count compilations, not calls: print counter.frame_count after each call"))


@functools.cache
def _recompiling_variants() -> frozenset[str]:
    """The variants of exercise 02.3 whose second call compiles again, measured once."""
    import torch
    from torch._dynamo.testing import CompileCounter

    recompiled = set()
    for name, make in _variants().items():
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = torch.compile(h, backend=counter)
        compiled(torch.randn(3))
        if name == "no_grad":
            with torch.no_grad():
                compiled(make())
        else:
            compiled(make())
        if counter.frame_count > 1:
            recompiled.add(name)
    return frozenset(recompiled)


@exercise("02.3", "Which changes recompile")
def which_recompile(answer: Any) -> str:
    given = choice_set(answer, VARIANTS_02_3, tr("variant names"), "{'values'}")
    truth = set(_recompiling_variants())
    if given == truth:
        return tr(
            (
                "{sorted_truth} recompile: TENSOR_MATCH checks dtype, requires_grad, size and "
                "stride, and GLOBAL_STATE the grad mode; a tensor's values are never guarded, "
                "and a view with the same size and stride passes"
            ),
            sorted_truth=sorted(truth),
        )
    why = {
        "values": tr(
            "guards never read a tensor's values: TENSOR_MATCH compares type, dispatch "
            "keys, dtype, device, requires_grad, size and stride (section 3)"
        ),
        "view": tr(
            "torch.randn(2, 3)[0] has size [3] and stride [1], like the first argument: "
            "being a view is not in TENSOR_MATCH"
        ),
        "no_grad": tr("GLOBAL_STATE compares grad_mode (section 3): no_grad changes it"),
        "stride": tr(
            "TENSOR_MATCH's line ends with stride=[1]: what is the stride of a [::2] slice?"
        ),
        "requires_grad": tr("TENSOR_MATCH's line carries requires_grad=False"),
        "dtype": tr("a dtype change recompiled in section 4"),
    }
    extra, missing = sorted(given - truth), sorted(truth - given)
    if extra:
        raise Hint(
            tr("{variant} does not recompile: {reason}", variant=extra[0], reason=why[extra[0]])
        )
    raise Hint(
        tr(
            "{count} more recompile(s); one is {variant}: {reason}",
            count=len(missing),
            variant=missing[0],
            reason=why[missing[0]],
        )
    )


@exercise("02.4", "Make g compile with fullgraph=True")
def fullgraph_g(answer: Any) -> str:
    import torch

    if not callable(answer):
        raise Hint(tr("answer with a function of one tensor, like g"))
    inputs = [torch.ones(3), torch.tensor([-3.0, 0.5, 2.0]), torch.linspace(-2, 1, 4)]
    torch._dynamo.reset()
    compiled = torch.compile(answer, backend="eager", fullgraph=True)
    for x in inputs:
        try:
            got = compiled(x.clone())
        except torch._dynamo.exc.Unsupported as err:
            first = str(err).splitlines()[0]
            if "builtin operator" in first or "print" in str(err):
                raise Hint(
                    tr(
                        (
                            "fullgraph=True still meets the print ({first!r}): drop it, it is not "
                            "part of what g returns"
                        ),
                        first=first,
                    )
                ) from None
            if "generic_jump" in str(err) or "Data-dependent" in str(err):
                raise Hint(
                    tr(
                        (
                            "the `if` on x.sum() > 0 is a data-dependent jump ({first!r}): "
                            "compute both branches and pick with torch.where, or decide whether "
                            "the condition can ever be false"
                        ),
                        first=first,
                    )
                ) from None
            raise Hint(tr("fullgraph=True raised Unsupported: {first}", first=first)) from None
        want = g_reference(x)
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape):
            raise Hint(
                tr(
                    "for x = {x} g returns a tensor of shape {shape}",
                    x=x.tolist(),
                    shape=tuple(want.shape),
                )
            )
        if not torch.allclose(got, want):
            mine, theirs = [round(v, 4) for v in got.tolist()], [round(v, 4) for v in want.tolist()]
            raise Hint(
                tr(
                    "for x = {x} your function returns {mine}, g returns {theirs}",
                    x=x.tolist(),
                    mine=mine,
                    theirs=theirs,
                )
            )
    return tr(
        (
            "one graph, same results as g on {len_inputs} inputs: without the print and "
            "without a Python branch on a tensor's value, nothing is left for fullgraph=True "
            "to refuse"
        ),
        len_inputs=len(inputs),
    )
