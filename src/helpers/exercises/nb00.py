"""Judges of notebook 00's exercises (orientation: reading source, ATen, the dispatcher).

Every judge computes the right answer from the installed torch (the file `source_view` finds
for a callable, the dispatcher's kernel table, a meta tensor's key set, the line numbers
`source_view` computes), so the exercises stay true on a newer release.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import PurePath
from typing import Any

from helpers.exercises import (
    N_,
    Hint,
    as_int,
    aten_name,
    called_names,
    choice_set,
    exercise,
    tr,
    watching,
)

#: The operators exercise 00.2 asks about (the starter cell lists the same ones).
CANDIDATES_00_2 = [
    "aten::linear",
    "aten::addmm",
    "aten::matmul",
    "aten::mm",
    "aten::softmax.int",
    "aten::_softmax",
    "aten::square",
    "aten::t",
]

#: The pattern of exercise 00.4: the line where `torch.compile` hands over to Dynamo.
PATTERN_00_4 = r"return torch\._dynamo\.optimize\("
#: The first excerpt of notebook 00's section 3 (cell `8`), which exercise 00.4 reads.
EXCERPT_00_4 = {"pattern": r'if backend == "inductor":', "before": 0, "until": r"\)\(model\)"}


def _cases_00_1() -> list[tuple[str, Any, bool]]:
    """(how the case is written, the object, shown in the prompt?) for exercise 00.1."""
    import torch
    import torch.nn.functional as F

    return [
        ("torch.nn.Linear.forward", torch.nn.Linear.forward, True),
        ("torch.add", torch.add, True),
        ("torch.nn.functional.relu", F.relu, False),
        ("torch.compile", torch.compile, False),
        ("torch.nn.functional.linear", F.linear, False),
        ("torch.nn.Linear", torch.nn.Linear, False),
        ("torch.Tensor.add", torch.Tensor.add, False),
        ("torch.optim.Optimizer.zero_grad", torch.optim.Optimizer.zero_grad, False),
        ("torch.vmap", torch.vmap, False),
    ]


def _truth_00_1(obj: Any) -> str | None:
    from helpers.source import source_view

    try:
        return source_view(obj).relpath
    except TypeError:
        return None


_called_names = called_names


def _module_file(obj: Any) -> str | None:
    """The file of the module `obj.__module__` names, relative as the truth is (or None)."""
    from helpers.source import package_root

    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    return package_root(path)[1] if path else None


def _forbidden_codes() -> set[Any]:
    import helpers.source as source

    names = ("source_view", "show_source", "file_view", "package_root")
    return {getattr(source, n).__code__ for n in names if hasattr(getattr(source, n), "__code__")}


def _run_watched(fn: Any, arg: Any, codes: set[Any]) -> tuple[Any, bool]:
    """fn(arg), and whether it called one of `codes` (under any name), seen at run time."""
    with watching(codes) as hits:
        got = fn(arg)
    return got, bool(hits)


def _as_path(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, PurePath)):
        return PurePath(value).as_posix()
    return repr(value)


@exercise(
    "00.1",
    "Where a callable's source lives",
    look=N_(
        "section 3, `show_source`: its header names the file; the `inspect` module, and how a "
        "decorator made with functools.wraps leaves the wrapped function reachable"
    ),
    reveal=N_(
        "`inspect.getsourcefile(inspect.unwrap(obj))` relative to the folder holding torch, as "
        "`source_view(obj).relpath` gives it; None where inspect raises TypeError"
    ),
)
def source_file_of(answer: Any) -> str:
    if not callable(answer) or inspect.isclass(answer):
        raise Hint(tr("give the function source_file(obj) itself, found {answer!r}", answer=answer))
    try:
        params = list(inspect.signature(answer).parameters)
    except (TypeError, ValueError):
        params = ["obj"]
    if len(params) != 1:
        raise Hint(tr("source_file takes one argument, obj; yours takes {params}", params=params))
    helpers_hint = tr(
        "write it with the inspect module yourself: the helpers of section 3 are what it is "
        "checked against"
    )
    if _called_names(answer) & {"source_view", "show_source", "file_view", "package_root"}:
        raise Hint(helpers_hint)
    codes = _forbidden_codes()
    for written, obj, shown in _cases_00_1():
        truth = _truth_00_1(obj)
        where = tr("the shown case") if shown else tr("a hidden case")
        try:
            got, used_helpers = _run_watched(answer, obj, codes)
        except Exception as e:  # noqa: BLE001 - the reader's code: its error is the hint
            if truth is None:
                raise Hint(
                    tr(
                        (
                            "{where}, source_file({written}), raised {error}: a callable made "
                            "in C++ has no Python source; return None for it"
                        ),
                        where=where,
                        written=written,
                        error=type(e).__name__,
                    )
                ) from None
            raise Hint(
                tr(
                    (
                        "{where}, source_file({written}), raised {error}, but it is written in "
                        "Python: a class, for one, has no code object of its own"
                    ),
                    where=where,
                    written=written,
                    error=type(e).__name__,
                )
            ) from None
        if used_helpers:
            raise Hint(helpers_hint)
        given = _as_path(got)
        if given is not None and truth is not None:
            if PurePath(given).is_absolute():
                raise Hint(
                    tr(
                        (
                            "{where}, source_file({written}): an absolute path differs from "
                            "machine to machine; give it relative to the folder that holds the "
                            "torch package, as the header of show_source does"
                        ),
                        where=where,
                        written=written,
                    )
                )
            if given == truth.removeprefix("torch/"):
                raise Hint(
                    tr(
                        (
                            "{where}, source_file({written}): that path is relative to the "
                            "torch package itself; give it relative to the folder that holds "
                            "torch, so it starts with torch/"
                        ),
                        where=where,
                        written=written,
                    )
                )
        if given == truth:
            continue
        if truth is None:
            raise Hint(
                tr(
                    (
                        "{where}, source_file({written}), returned a path; it is a C++ "
                        "binding with no Python source: return None"
                    ),
                    where=where,
                    written=written,
                )
            )
        if given is None:
            raise Hint(
                tr(
                    (
                        "{where}, source_file({written}), returned None, but it is written in "
                        "Python: find the file its code object (or its class) was defined in"
                    ),
                    where=where,
                    written=written,
                )
            )
        if given == _module_file(obj):
            raise Hint(
                tr(
                    (
                        "{where}, source_file({written}), gave the file of the module "
                        "`__module__` names: that is where the callable is exported from, not "
                        "always the file its code is in"
                    ),
                    where=where,
                    written=written,
                )
            )
        if given.endswith("torch/_compile.py"):
            raise Hint(
                tr(
                    (
                        "{where}, source_file({written}), gave the file of the decorator's "
                        "wrapper: the function is decorated; follow `__wrapped__` to the code "
                        "it wraps"
                    ),
                    where=where,
                    written=written,
                )
            )
        raise Hint(
            tr(
                (
                    "{where}, source_file({written}), returned {given!r}, not the file it is "
                    "defined in"
                ),
                where=where,
                written=written,
                given=given,
            )
        )
    count = len(_cases_00_1())
    return tr(
        (
            "right on all {count} callables: a Python function's code object names its file, a "
            "class is found through its module, a decorated function through `__wrapped__`, "
            "and a C++ binding (torch.add, F.linear, Tensor.add) has no Python source at all"
        ),
        count=count,
    )


def _kernel_table(ops: list[str]) -> dict[str, dict[str, bool]]:
    import torch

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    keys = ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
    return {op: {k: has_kernel(op, k) for k in keys} for op in ops}


@exercise(
    "00.2",
    "Operators without a CPU kernel",
    look=N_(
        "section 4: the dispatcher's kernel table for one operator, one key at a time; a recipe "
        "of other ATen operators that autograd differentiates through needs no kernel per "
        "backend, and a CompositeExplicitAutograd kernel serves every backend as one node"
    ),
    reveal=N_(
        "`has_kernel(op, 'CPU')` and `has_kernel(op, 'CompositeImplicitAutograd')` (section 4's "
        "`has_kernel`) on each candidate"
    ),
)
def composite_ops(answer: Any) -> str:
    import torch
    import torch.nn.functional as F

    given = choice_set(answer, CANDIDATES_00_2, tr("operator names"), "{'aten::mm'}", aten_name)
    table = _kernel_table(CANDIDATES_00_2)
    truth = {op for op, k in table.items() if not k["CPU"] and k["CompositeImplicitAutograd"]}
    with_cpu = sorted(op for op in given if table[op]["CPU"])
    if with_cpu:
        raise Hint(
            tr(
                (
                    "{with_cpu}: each does real arithmetic on CPU with a kernel of its own; "
                    "which candidates are only a recipe of other operators?"
                ),
                with_cpu=with_cpu,
            )
        )
    explicit = sorted(op for op in given if table[op]["CompositeExplicitAutograd"])
    if explicit:
        raise Hint(
            tr(
                (
                    "{explicit} has no CPU kernel either, but its kernel is registered for "
                    "CompositeExplicitAutograd: it has its own autograd formula, so autograd "
                    "sees it as one node"
                ),
                explicit=explicit,
            )
        )
    if given != truth:
        raise Hint(
            tr(
                (
                    "{count} more candidate(s) are only a recipe of other ATen operators: "
                    "which ones could be written with the others in the list?"
                ),
                count=len(truth - given),
            )
        )
    x, weight = torch.ones(2, 4), torch.ones(3, 4, requires_grad=True)
    node = F.linear(x, weight, torch.ones(3)).grad_fn.name()
    return tr(
        (
            "{sorted_truth} have no kernel registered for CPU: a CPU tensor runs their "
            "CompositeImplicitAutograd kernel, written in other ATen ops, so the call comes "
            "apart at the dispatcher (linear and matmul keep a kernel for nested tensors "
            "only); autograd records F.linear(x, weight, bias) as {node}, not as a node of "
            "its own"
        ),
        sorted_truth=sorted(truth),
        node=node,
    )


def _key_names(key_set: Any) -> set[str]:
    inner = re.fullmatch(r"DispatchKeySet\((.*)\)", str(key_set).strip())
    return {k.strip() for k in (inner[1] if inner else "").split(",") if k.strip()}


@exercise(
    "00.3",
    "The key set of a meta tensor",
    look=N_(
        "section 4, the key set of a CPU tensor: which of its keys name the device, and which "
        "would a meta tensor carry too?"
    ),
    reveal=N_("`torch._C._dispatch_keys` on the meta tensor"),
)
def meta_key_set(answer: Any) -> str:
    import torch

    truth = _key_names(torch._C._dispatch_keys(torch.ones(2, device="meta")))
    cpu = _key_names(torch._C._dispatch_keys(torch.ones(2)))
    if isinstance(answer, torch._C.DispatchKeySet):
        given = _key_names(answer)
    elif isinstance(answer, (set, list, tuple, frozenset)):
        given = {str(a).removeprefix("DispatchKey.") for a in answer}  # names or DispatchKeys
    else:
        raise Hint(tr("answer with a set of key names, e.g. {{'CPU', 'AutogradCPU'}}"))
    if given == truth:
        return tr(
            (
                "{sorted_truth}: the backend key follows the device (Meta in place of CPU), "
                "its autograd key with it (AutogradMeta), ADInplaceOrView stays; there is no "
                "autocast key for meta"
            ),
            sorted_truth=sorted(truth),
        )
    if given == cpu:
        raise Hint(
            tr(
                "that is a CPU tensor's key set (section 4); the backend key follows the "
                "device, and so does the autograd key"
            )
        )
    autocast = sorted(k for k in given - truth if k.startswith("Autocast"))
    if autocast:
        raise Hint(
            tr(
                (
                    "{autocast}: autocast keys exist for CPU, CUDA and a few other backends, "
                    "not for meta"
                ),
                autocast=autocast,
            )
        )
    cpu_only = sorted(k for k in given - truth if k in cpu)
    if cpu_only:
        raise Hint(
            tr(
                "{cpu_only} belong to CPU tensors: which key replaces each for device='meta'?",
                cpu_only=cpu_only,
            )
        )
    missing = truth - given
    if missing and given <= truth:
        raise Hint(
            tr(
                (
                    "{len_missing} key(s) missing: a meta tensor may require grad too, so it "
                    "carries autograd keys as a CPU tensor does (section 4)"
                ),
                len_missing=len(missing),
            )
        )
    raise Hint(
        tr(
            (
                "{sorted_given_truth} are not in it: start from the CPU tensor's keys of "
                "section 4 and replace what depends on the device"
            ),
            sorted_given_truth=sorted(given - truth),
        )
    )


def _views_00_4() -> tuple[int, Any, Any]:
    """(the pattern's line, section 3's first excerpt, the whole of torch.compile)."""
    import torch

    from helpers.source import source_view

    line = source_view(torch.compile, PATTERN_00_4, before=0, after=0).first_line
    shown = source_view(torch.compile, **EXCERPT_00_4)
    return line, shown, source_view(torch.compile)


@exercise(
    "00.4",
    "A line number read from an excerpt",
    look=N_(
        "section 3's header format: `lines A-B` count from the top of the file, and A is the "
        "excerpt's first line as it is shown"
    ),
    reveal=N_("`source_view(fn, pattern, before=0, after=0).first_line` for the same pattern"),
)
def optimize_line(answer: Any) -> str:
    line, shown, whole = _views_00_4()
    offset = line - shown.first_line
    if as_int(answer) is None:
        raise Hint(tr("answer with a line number (an int), worked out from the header's range"))
    answer = as_int(answer)
    if answer == line:
        return tr(
            (
                "line {line} of torch/__init__.py: the excerpt's lines "
                "{shown_first_line}-{shown_last_line} start {offset} lines above it, and the "
                "number was computed from the installed file, never typed"
            ),
            line=line,
            shown_first_line=shown.first_line,
            shown_last_line=shown.last_line,
            offset=offset,
        )
    if answer == shown.first_line:
        raise Hint(
            tr(
                "that is where the excerpt starts, at the `if backend` line: count down from it "
                "to the `return` line"
            )
        )
    if answer == shown.last_line:
        raise Hint(tr("that is where the excerpt ends, a few lines below the pattern"))
    if answer in (line - 1, line + 1):
        raise Hint(
            tr(
                "one off: the excerpt's first line is line A itself (A + 0), and an empty "
                "line counts too"
            )
        )
    if answer == whole.first_line:
        raise Hint(tr("that is where `def compile(` starts, not the `return` line"))
    if 0 < answer < whole.last_line - whole.first_line + 1:
        raise Hint(
            tr(
                "a line number inside the function? The header and permalink count from the "
                "top of torch/__init__.py"
            )
        )
    raise Hint(
        tr(
            "read the range in the header of section 3's first excerpt, then count down the "
            "lines it shows to the `return` line"
        )
    )
