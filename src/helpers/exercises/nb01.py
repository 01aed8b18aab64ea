"""Judges for notebook 01's exercises (torch.compile from the entry point).

The judges compute the right answer from the installed torch: 01.1 and 01.2 compile small
functions (fresh code objects, a `RecordingBackend`) and count cache entries and backend calls,
once per process; 01.3 reads the installed source of `OutputGraph` for the method that calls
the backend. Worked solutions: solutions/nb01.py.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

from helpers.exercises import Hint, as_int, exercise, tr
from helpers.source import resolve
from helpers.tracing import RecordingBackend

_SOURCE = """\
def h(x):
    return torch.tanh(x) * x


def k(x):
    return torch.sin(x) + 1


def outer(x):
    return k(x) * 2
"""


@functools.cache
def _experiment() -> dict[str, int]:
    """Notebook 01's experiments on fresh code objects (compiled again: new cache entries)."""
    ns: dict[str, Any] = {"torch": torch}
    exec(compile(_SOURCE, "<exercise 01>", "exec"), ns)  # new code objects, no old entries
    x = torch.linspace(-1, 1, 8)
    backend = RecordingBackend()
    compiled_h = torch.compile(ns["h"], backend=backend)
    compiled_h(x)
    compiled_h(torch.ones(3))
    helper = RecordingBackend()
    torch.compile(ns["outer"], backend=helper)(x)
    return {
        "h_entries": len(_debug_get_cache_entry_list(ns["h"].__code__)),
        "h_graphs": len(backend.graphs),
        "k_entries": len(_debug_get_cache_entry_list(ns["k"].__code__)),
        "outer_entries": len(_debug_get_cache_entry_list(ns["outer"].__code__)),
        "outer_graphs": len(helper.graphs),
    }


def _pair(answer: Any) -> tuple[int, int]:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Hint(tr("give a pair: (cache entries of h.__code__, graphs the backend received)"))
    return int(answer[0]), int(answer[1])


@exercise("01.1", "A call with a new shape")
def new_shape(answer: Any) -> str:
    entries, graphs = _pair(answer)
    truth = _experiment()
    want = (truth["h_entries"], truth["h_graphs"])
    if (entries, graphs) == want:
        return tr(
            (
                "{want_0} cache entries and {want_1} graphs: the first entry's guards check "
                "the input's shape, torch.ones(3) fails them, so Dynamo compiles again and "
                "adds an entry to the same code object"
            ),
            want_0=want[0],
            want_1=want[1],
        )
    if entries == 1:
        raise Hint(
            tr(
                "a new shape fails the guards of the first entry (they check the input's "
                "size), so the call does not reuse it: count "
                "`_debug_get_cache_entry_list(h.__code__)`"
            )
        )
    if graphs == 1:
        raise Hint(
            tr(
                "each new compile hands the backend a graph: count `len(backend.graphs)` "
                "after the call"
            )
        )
    raise Hint(
        tr(
            "call compiled_h(torch.ones(3)) and count both; found {found}",
            found=(entries, graphs),
        )
    )


@exercise("01.2", "Does an inlined helper get a cache entry")
def inlined_helper(answer: Any) -> str:
    if as_int(answer) is None:
        raise Hint(
            tr("give the number of cache entries of k.__code__, found {answer!r}", answer=answer)
        )
    answer = as_int(answer)
    truth = _experiment()
    if answer == truth["k_entries"]:
        return tr(
            (
                "{truth_k_entries} entries on k.__code__ ({truth_outer_entries} on the outer "
                "function's, {truth_outer_graphs} graph): Dynamo inlines k into the outer "
                "function's graph, so k's own frame never runs under the hook"
            ),
            truth_k_entries=truth["k_entries"],
            truth_outer_entries=truth["outer_entries"],
            truth_outer_graphs=truth["outer_graphs"],
        )
    if answer == truth["outer_entries"]:
        raise Hint(
            tr(
                "that is the outer function's count; Dynamo inlines calls it can trace, so "
                "k's frame is never evaluated on its own: look at "
                "`_debug_get_cache_entry_list(k.__code__)`"
            )
        )
    raise Hint(tr("compile a function that calls k, call it once, then count k's cache entries"))


def _callers_of_backend() -> list[str]:
    """Methods of OutputGraph whose installed source calls `self.call_user_compiler(`."""
    og = torch._dynamo.output_graph.OutputGraph
    found = []
    for _, fn in inspect.getmembers(og, inspect.isfunction):
        try:
            if "self.call_user_compiler(" in inspect.getsource(fn):
                found.append(f"{fn.__module__}.{fn.__qualname__}")
        except (OSError, TypeError):
            continue
    return found


@exercise("01.3", "Who calls the backend")
def backend_caller(answer: Any) -> str:
    if not isinstance(answer, str):
        raise Hint(
            tr(
                "give a dotted name (a str), found {found_type}",
                found_type=type(answer).__name__,
            )
        )
    callers = _callers_of_backend()
    answer = answer.strip()
    if "OutputGraph." in answer:  # a short name, "OutputGraph.method", names the same method
        answer = next((c for c in callers if c == answer or c.endswith("." + answer)), answer)
    if answer in callers:
        return tr(
            (
                "{answer} calls `self.call_user_compiler(gm, ...)`, which calls the backend "
                "with the GraphModule and example inputs; on the recorded path it is the "
                "parent of call_user_compiler"
            ),
            answer=answer,
        )
    if answer.endswith("call_user_compiler"):
        raise Hint(tr("that is the callee; give the function that calls it (its recorded parent)"))
    if answer.endswith("compile_subgraph"):
        raise Hint(
            tr(
                "compile_subgraph is one level further up: read `rec.path_to(...)` of the "
                "call_user_compiler step and take the step just before it"
            )
        )
    try:
        resolve(answer)
    except (ImportError, AttributeError) as e:
        raise Hint(
            tr(
                "{answer!r} does not import ({e}); copy the dotted name from the tree",
                answer=answer,
                e=e,
            )
        ) from e
    raise Hint(
        tr(
            (
                "{answer} does not call call_user_compiler; find its step with "
                "`rec.first('call_user_compiler')` and read its parent"
            ),
            answer=answer,
        )
    )
