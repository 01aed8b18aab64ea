"""Judges for notebook 01's exercises (torch.compile from the entry point).

The judges compute the right answer from the installed torch: 01.1 and 01.2 compile small
functions (fresh code objects, a `RecordingBackend`) and count cache entries and backend calls,
once per process; 01.3 compiles three small functions with the reader's backend, wrapped by one
that reads the same GraphModules, so the truth is what Dynamo handed over. Worked solutions:
solutions/nb01.py.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

from helpers.exercises import N_, Hint, as_int, exercise, tr
from helpers.tracing import RecordingBackend

_SOURCE = """\
def h(x):
    return torch.tanh(x) * x


def k(x):
    return torch.sin(x) + 1


def outer(x):
    return k(x) * 2


def k2(x):
    print("inside k2")
    return torch.sin(x) + 1


def outer2(x):
    return k2(x) * 2
"""

#: Exercise 01.1: the shapes of the calls after the first one (of shape (8,)).
SHAPES_01_1 = [(3,), (5,)]


@functools.cache
def _experiment() -> dict[str, int]:
    """Notebook 01's experiments on fresh code objects (compiled again: new cache entries)."""
    import contextlib
    import io

    ns: dict[str, Any] = {"torch": torch}
    exec(compile(_SOURCE, "<exercise 01>", "exec"), ns)  # new code objects, no old entries
    x = torch.linspace(-1, 1, 8)
    backend = RecordingBackend()
    compiled_h = torch.compile(ns["h"], backend=backend)
    compiled_h(x)
    counts = []
    for shape in SHAPES_01_1:
        compiled_h(torch.ones(shape))
        counts.append((len(_debug_get_cache_entry_list(ns["h"].__code__)), len(backend.graphs)))
    torch.compile(ns["outer"], backend="eager")(x)
    with contextlib.redirect_stdout(io.StringIO()):  # k2's print is not the judge's output
        torch.compile(ns["outer2"], backend="eager")(x)
    return {
        "h_entries": counts[-1][0],
        "h_graphs": counts[-1][1],
        "h_entries_first": counts[0][0],
        "k_entries": len(_debug_get_cache_entry_list(ns["k"].__code__)),
        "k2_entries": len(_debug_get_cache_entry_list(ns["k2"].__code__)),
        "outer2_entries": len(_debug_get_cache_entry_list(ns["outer2"].__code__)),
    }


def _pair(answer: Any, what: str) -> tuple[int, int]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair: {what}", what=what))
    first, second = as_int(answer[0]), as_int(answer[1])
    if first is None or second is None:
        raise Hint(tr("give a pair of whole numbers: {what}", what=what))
    return first, second


@exercise(
    "01.1",
    "Two calls with new shapes",
    look=N_(
        "section 6, where `q` is called with a second size: what does the second compile make "
        "of the size?"
    ),
    reveal=N_(
        "`_debug_get_cache_entry_list` on h's code object and the recording backend's list of "
        "graphs, read after both calls"
    ),
)
def new_shape(answer: Any) -> str:
    entries, graphs = _pair(answer, tr("(cache entries of h's code object, graphs received)"))
    truth = _experiment()
    want = (truth["h_entries"], truth["h_graphs"])
    if (entries, graphs) == want:
        return tr(
            (
                "{want_0} cache entries and {want_1} graphs: torch.ones(3) fails the first "
                "entry's size guard, so Dynamo compiles again, this time with a dynamic size; "
                "torch.ones(5) passes that entry's guards and runs without a compile"
            ),
            want_0=want[0],
            want_1=want[1],
        )
    if entries != graphs:
        raise Hint(
            tr(
                "each compile of h adds one cache entry and hands the backend one graph (h "
                "has no graph break): the two counts move together"
            )
        )
    if entries < want[0]:
        raise Hint(
            tr(
                "the first entry was compiled for size 8 and its guards check the input's "
                "size: does torch.ones(3) pass them?"
            )
        )
    raise Hint(
        tr(
            "after a size changes once, Dynamo compiles the frame again with that size as a "
            "symbol: does a third size still fail the guards?"
        )
    )


@exercise(
    "01.2",
    "Does a called helper get a cache entry",
    look=N_(
        "the prompt's sentence on inlining, and section 3: which frames the hook's callback "
        "sees (a frame that runs as a real call is one); notebook 02, section 6, shows a break"
    ),
    reveal=N_(
        "`_debug_get_cache_entry_list` on the code object of k and of k2, each after one call "
        "of its compiled outer function"
    ),
)
def inlined_helper(answer: Any) -> str:
    k_entries, k2_entries = _pair(answer, tr("(cache entries of k's code, of k2's code)"))
    truth = _experiment()
    want = (truth["k_entries"], truth["k2_entries"])
    if (k_entries, k2_entries) == want:
        return tr(
            (
                "{k} and {k2}: Dynamo inlines k into outer's graph, so k's own frame never "
                "runs under the hook; k2's print is a graph break inside the inlined call, so "
                "Dynamo gives up inlining it, k2 runs as a frame of its own, and the hook "
                "compiles it and stores an entry on its code"
            ),
            k=want[0],
            k2=want[1],
        )
    if k_entries != want[0]:
        raise Hint(
            tr(
                "a helper that Dynamo can trace does not run as a frame of its own: its "
                "bytecode is traced into the caller's graph (it inlines it)"
            )
        )
    raise Hint(
        tr(
            "Dynamo cannot trace the print inside k2: when the inlined call breaks, does "
            "k2's frame run under the hook by itself?"
        )
    )


def _f_shown(x):
    return torch.sin(x) * 2


def _f_methods(x):
    return x.cos().sum() + 1


def _f_break(x):
    y = torch.relu(x)
    torch._dynamo.graph_break()
    return y.exp()


#: Exercise 01.3: (how the prompt writes the case, the function, shown in the prompt?)
CASES_01_3 = [
    ("f(x) = torch.sin(x) * 2", _f_shown, True),
    ("f(x) = x.cos().sum() + 1", _f_methods, False),
    ("f(x) = torch.relu(x), a graph break, then .exp()", _f_break, False),
]


def _op_name(node: Any) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def _ops(gm: Any) -> list[str]:
    return [_op_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]


@exercise(
    "01.3",
    "A backend that records its graphs",
    look=N_(
        "section 6: what a backend is handed (a GraphModule and example inputs), what it must "
        "return, and how a GraphModule's graph lists its nodes with their op and target"
    ),
    reveal=N_(
        "`_ops(gm)` in src/helpers/exercises/nb01.py, the truth: a loop over the call_function "
        "and call_method nodes, a function target by its name, a method target as the string "
        "it is, one list appended per graph"
    ),
)
def recording_backend(answer: Any) -> str:
    if not callable(answer) or inspect.isclass(answer):
        raise Hint(
            tr("give the function make_backend(log) itself, found {answer!r}", answer=answer)
        )
    try:
        params = list(inspect.signature(answer).parameters)
    except (TypeError, ValueError):
        params = ["log"]
    if len(params) != 1:
        raise Hint(tr("make_backend takes one argument, log; yours takes {params}", params=params))
    shown_log: list[list[str]] = []
    for written, fn, shown in CASES_01_3:
        where = tr("the shown case") if shown else tr("a hidden case")
        log: list[Any] = []
        backend = answer(log)
        if not callable(backend):
            raise Hint(
                tr("make_backend(log) must return the backend, a callable (gm, example_inputs)")
            )
        truth: list[list[str]] = []
        returned: list[Any] = []
        methods: set[str] = set()

        def wrapper(
            gm, example_inputs, backend=backend, truth=truth, returned=returned, methods=methods
        ):
            truth.append(_ops(gm))
            methods.update(n.target for n in gm.graph.nodes if n.op == "call_method")
            out = backend(gm, example_inputs)
            returned.append(out)
            return out

        torch._dynamo.reset()
        x = torch.linspace(-1.0, 1.0, 6)
        try:
            compiled = torch.compile(fn, backend=wrapper)
            got = compiled(x)
            compiled(x)  # a second call runs the cached graphs: the backend is not called again
        except Exception as e:  # noqa: BLE001 - the reader's backend: its error is the hint
            if returned and not callable(returned[-1]):
                raise Hint(
                    tr(
                        (
                            "{where} ({written}): the backend returned {found!r}; Dynamo runs "
                            "what the backend returns, so return a callable that runs the graph"
                        ),
                        where=where,
                        written=written,
                        found=returned[-1],
                    )
                ) from None
            raise Hint(
                tr(
                    "{where} ({written}): compiling with your backend raised {error}: {message}",
                    where=where,
                    written=written,
                    error=type(e).__name__,
                    message=str(e).splitlines()[0] if str(e) else "",
                )
            ) from None
        if not torch.allclose(got, fn(x)):
            raise Hint(
                tr(
                    (
                        "{where} ({written}): the compiled function returned other values "
                        "than the function itself; return a callable that runs the graph as it is"
                    ),
                    where=where,
                    written=written,
                )
            )
        log = [list(entry) if isinstance(entry, (list, tuple)) else entry for entry in log]
        if log == truth:
            if shown:
                shown_log = truth
            continue
        if len(log) > len(truth) and len(log) % len(truth) == 0:
            raise Hint(
                tr(
                    (
                        "{where} ({written}): Dynamo called the backend {calls} time(s), and "
                        "after the compiled function ran twice your log holds {entries} "
                        "entries; append when the backend is handed the graph, not when the "
                        "graph runs"
                    ),
                    where=where,
                    written=written,
                    calls=len(truth),
                    entries=len(log),
                )
            )
        if len(log) != len(truth):
            raise Hint(
                tr(
                    (
                        "{where} ({written}): Dynamo called the backend {calls} time(s), your "
                        "log holds {entries} entries; append one list per call"
                    ),
                    where=where,
                    written=written,
                    calls=len(truth),
                    entries=len(log),
                )
            )
        flat = [op for entry in log for op in (entry if isinstance(entry, list) else [entry])]
        if {"x", "output", "l_x_"} & set(map(str, flat)):
            raise Hint(
                tr(
                    (
                        "{where} ({written}): your log holds the graph's inputs and output "
                        "too; keep only the nodes that call something"
                    ),
                    where=where,
                    written=written,
                )
            )
        if not shown and log == shown_log:
            raise Hint(
                tr(
                    (
                        "{where} ({written}): your log is the shown case's, whatever graph "
                        "arrives; read the names from the GraphModule the backend is handed"
                    ),
                    where=where,
                    written=written,
                )
            )
        missing = sorted({op for entry in truth for op in entry} - set(map(str, flat)))
        lengths = [len(e) if isinstance(e, list) else -1 for e in log]
        if lengths == [len(e) for e in truth] and {"sum_1", "mul_1", "add_1"} & set(map(str, flat)):
            raise Hint(
                tr(
                    (
                        "{where} ({written}): one entry per node, but some are node names: log "
                        "what the node calls (its target), not the node's name (sum_1 is a "
                        "name)"
                    ),
                    where=where,
                    written=written,
                )
            )
        if set(missing) & methods:
            raise Hint(
                tr(
                    (
                        "{where} ({written}): {count} op name(s) of the graphs Dynamo handed "
                        "over are not in your log; a method call such as x.cos() is a node "
                        "too, and its target is a string"
                    ),
                    where=where,
                    written=written,
                    count=len(missing),
                )
            )
        raise Hint(
            tr(
                (
                    "{where} ({written}): your log differs from the graphs Dynamo handed over: "
                    "one name per node that calls something, in the graph's order"
                ),
                where=where,
                written=written,
            )
        )
    torch._dynamo.reset()
    return tr(
        (
            "your backend logged what Dynamo handed it in all {count} cases: one GraphModule "
            "per graph (two around a graph break), functions and method calls as nodes, and "
            "what it returned is what ran"
        ),
        count=len(CASES_01_3),
    )
