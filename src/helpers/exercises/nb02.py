"""Judges of notebook 02's exercises (Dynamo: graph breaks, recompiles, guards, fullgraph).

Every judge finds the truth by running Dynamo on the installed torch, with cheap backends
(`torch._dynamo.explain`, `CompileCounter`, `"eager"`): no code generation. Each judge starts
with `torch._dynamo.reset()`, so it forgets what the notebook compiled before.
"""

from __future__ import annotations

import functools
from typing import Any

from helpers.exercises import N_, Hint, as_int, choice_set, exercise, tr


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


#: Exercise 02.2: the shapes of the five calls, in order.
SHAPES_02_2 = [(3,), (4,), (1,), (7,), (5, 1)]


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


@exercise(
    "02.1",
    "Graphs and breaks of a .tolist()",
    look=N_(
        "section 6: what a graph break splits a frame into, and how the break count follows "
        "from the graph count in the source shown there"
    ),
    reveal=N_("`torch._dynamo.explain` on f_tolist: its graph_count and graph_break_count"),
)
def tolist_breaks(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("answer with a pair: (graphs, graph breaks)"))
    answer = tuple(as_int(a) for a in answer)
    if None in answer:
        raise Hint(tr("answer with a pair of whole numbers: (graphs, graph breaks)"))
    graphs, breaks, reason = _explain_tolist()
    if answer == (graphs, breaks):
        return tr(
            (
                "{graphs} graphs, {breaks} break ({reason!r}): on a float tensor (the reason "
                "says so) Dynamo does not trace `.tolist()`; on an integer one it would turn "
                "each element into `.item()`, which also breaks unless capture_scalar_outputs "
                "is set. The graph before it is compiled, the list is made in Python, and "
                "`a * 2` is traced again in the resume function"
            ),
            graphs=graphs,
            breaks=breaks,
            reason=reason,
        )
    given_graphs, given_breaks = answer
    if given_breaks == given_graphs and given_graphs:
        raise Hint(
            tr(
                "graphs and breaks cannot be equal: the break count is the graph count "
                "minus 1 (the source in section 6)"
            )
        )
    if given_breaks == 0:
        raise Hint(
            tr(
                "a Python list of the numbers in `a`, made while Dynamo traces with tensors "
                "whose values it does not know: can that list be part of a graph of tensor "
                "operations?"
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
        tr(
            "count the pieces: the code before `.tolist()`, the call itself (in Python), and "
            "the code after it"
        )
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


@exercise(
    "02.2",
    "Compilations for five shapes",
    look=N_(
        "sections 4 and 5: which guard a size change fails, what the second compile makes "
        "symbolic, and which sizes stay constants"
    ),
    reveal=N_("a fresh `CompileCounter()` as the backend: its frame_count after each call"),
)
def shape_recompiles(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or len(answer) != len(SHAPES_02_2):
        raise Hint(
            tr(
                "answer with a list of {n} counts: the compilations so far, after each call",
                n=len(SHAPES_02_2),
            )
        )
    truth = list(_frame_counts())
    answer = [as_int(a) for a in answer]
    if None in answer:
        raise Hint(tr("the counts are whole numbers: compilations so far, after each call"))
    if answer == truth:
        return tr(
            (
                "{truth}: (4,) fails size=[3] and recompiles with a dynamic size; (1,) is not "
                "served by it (sizes 0 and 1 stay constants) and compiles once more; (7,) "
                "passes the dynamic entry; (5, 1) has two dimensions, which no symbolic size "
                "stands for"
            ),
            truth=truth,
        )
    if any(b < a for a, b in zip(answer, answer[1:], strict=False)):
        raise Hint(tr("the counts are compilations so far: they never go down"))
    if answer[:2] != truth[:2]:
        raise Hint(
            tr(
                "look at section 4 again: the first call compiles, and a size change from 3 "
                "to 4 fails TENSOR_MATCH's size=[3]"
            )
        )
    if answer[2] != truth[2]:
        raise Hint(
            tr(
                "a symbolic size stands for sizes of at least 2 (section 5): what about a size "
                "of 1?"
            )
        )
    if answer[3] != truth[3]:
        raise Hint(
            tr(
                "after the second compile the size is a symbol: does a 1-d tensor of size 7 "
                "fail the guards of every entry?"
            )
        )
    raise Hint(
        tr(
            "automatic dynamic shapes make a size symbolic, not the number of dimensions: "
            "the guards still expect one-dimensional tensors"
        )
    )


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


@exercise(
    "02.3",
    "Which changes recompile",
    look=N_(
        "section 3: the fields of TENSOR_MATCH's line and the GLOBAL_STATE guard; section 4 "
        "for a recompile seen happen"
    ),
    reveal=N_(
        "after `torch._dynamo.reset()`, a fresh `CompileCounter()` as the backend: its "
        "frame_count after each second call"
    ),
)
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


#: Exercise 02.4: (how the case is written, a function making the input, shown in the prompt?)
CASES_02_4 = [
    ("torch.ones(3)", lambda torch: torch.ones(3), True),
    ("torch.tensor([-3.0, 0.5, 2.0])", lambda torch: torch.tensor([-3.0, 0.5, 2.0]), False),
    ("torch.linspace(-2, 1, 4)", lambda torch: torch.linspace(-2, 1, 4), False),
    (
        "a 2-d float64 tensor of shape (2, 3)",
        lambda torch: torch.arange(-3.0, 3.0, dtype=torch.float64).reshape(2, 3),
        False,
    ),
    ("an empty tensor, torch.ones(0)", lambda torch: torch.ones(0), False),
    (
        "a tensor holding a NaN, torch.tensor([nan, 0.5])",
        lambda torch: torch.tensor([float("nan"), 0.5]),
        False,
    ),
]


@exercise(
    "02.4",
    "Make g compile with fullgraph=True",
    look=N_(
        "section 6's two break reasons for g: one is a call Dynamo does not trace, the other "
        "a Python branch on a tensor's value"
    ),
    reveal=N_(
        "`torch.where(x.sum() > 0, x.cos(), x.sin())` after `x = x.relu() + 1`, and no print"
    ),
)
def fullgraph_g(answer: Any) -> str:
    import torch

    if not callable(answer):
        raise Hint(tr("answer with a function of one tensor, like g"))
    torch._dynamo.reset()
    compiled = torch.compile(answer, backend="eager", fullgraph=True)
    for written, make, shown in CASES_02_4:
        where = tr("the shown case") if shown else tr("a hidden case")
        x = make(torch)
        arg = x.clone()
        try:
            got = compiled(arg)
        except torch._dynamo.exc.Unsupported as err:
            first = str(err).splitlines()[0]
            if "print" in str(err):
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
                            "compute both branches in the graph and pick one with a tensor "
                            "operation"
                        ),
                        first=first,
                    )
                ) from None
            raise Hint(tr("fullgraph=True raised Unsupported: {first}", first=first)) from None
        except Exception as e:  # noqa: BLE001 - the reader's code: its error is the hint
            raise Hint(
                tr(
                    "{where}, x = {written}: your function raised {error}",
                    where=where,
                    written=written,
                    error=type(e).__name__,
                )
            ) from None
        want = g_reference(x)
        if arg.shape != x.shape or not torch.allclose(arg, x, rtol=0, atol=0, equal_nan=True):
            raise Hint(
                tr(
                    (
                        "{where}, x = {written}: your function changed its input in place; g "
                        "does not change its input"
                    ),
                    where=where,
                    written=written,
                )
            )
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape):
            raise Hint(
                tr(
                    (
                        "{where}, x = {written}: g returns a tensor of the input's shape "
                        "{shape}; yours returns {found}"
                    ),
                    where=where,
                    written=written,
                    shape=tuple(want.shape),
                    found=tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__,
                )
            )
        if got.dtype != want.dtype or not torch.allclose(got, want, equal_nan=True):
            raise Hint(
                tr(
                    (
                        "{where}, x = {written}: your function returns other values (or "
                        "another dtype) than g; compute them from x, as g does"
                    ),
                    where=where,
                    written=written,
                )
            )
    torch._dynamo.reset()
    return tr(
        (
            "one graph, same results as g on {len_inputs} inputs: without the print and "
            "without a Python branch on a tensor's value, nothing is left for fullgraph=True "
            "to refuse"
        ),
        len_inputs=len(CASES_02_4),
    )
