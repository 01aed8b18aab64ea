"""Judges of notebook 00's exercises (orientation: reading source, ATen, the dispatcher).

Every judge computes the right answer from the installed torch (the source of
`nn.Linear.forward`, the dispatcher's kernel table, a meta tensor's key set, the line numbers
`source_view` computes), so the exercises stay true on a newer release.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

from helpers.exercises import Hint, as_int, aten_name, choice_set, exercise, tr

#: The operators exercise 00.2 asks about (the starter cell lists the same ones).
CANDIDATES_00_2 = ["aten::linear", "aten::relu", "aten::matmul", "aten::addmm", "aten::mul.Tensor"]

#: The pattern of exercise 00.4: the line where `torch.compile` hands over to Dynamo.
PATTERN_00_4 = r"return torch\._dynamo\.optimize\("


def _linear_forward_call() -> tuple[str, Any]:
    """(source text, object) of the function `nn.Linear.forward`'s return line calls."""
    import torch.nn.modules.linear as linear_module

    from helpers.source import source_view

    tree = ast.parse(textwrap.dedent(source_view(linear_module.Linear.forward).code))
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    call = returns[0].value
    text = ast.unparse(call.func)
    return text, eval(text, vars(linear_module))  # noqa: S307 - a name read from torch's source


def _resolve(answer: Any) -> Any:
    """The object a string answer names ("F.linear", "torch.nn.functional.linear"), or None."""
    import torch.nn.modules.linear as linear_module

    if not isinstance(answer, str):
        return answer
    text = answer.strip().removesuffix("()")
    try:
        return eval(text, {"torch": __import__("torch"), **vars(linear_module)})  # noqa: S307
    except Exception:
        return None


@exercise("00.1", "What nn.Linear.forward calls")
def linear_forward(answer: Any) -> str:
    import torch

    text, target = _linear_forward_call()
    found = _resolve(answer)
    if found is target:
        return tr(
            (
                "forward's return line calls `{text}`, which is "
                "`{target___module}.{target___name}`: a C++ binding, like torch.add, of the "
                "operator aten::{target___name} (exercise 00.2 follows it into the "
                "dispatcher)"
            ),
            text=text,
            target___module=target.__module__,
            target___name=target.__name__,
        )
    name = str(answer) if isinstance(answer, str) else getattr(found, "__name__", repr(found))
    if found in (torch.addmm, torch.matmul, torch.mm) or re.search(r"addmm|matmul|\bmm\b", name):
        raise Hint(
            tr(
                (
                    "`{name}` is not in forward's source: it is what the dispatcher may end up "
                    "running below it (exercise 00.2). Read the `return` line of "
                    "show_source(torch.nn.Linear.forward)"
                ),
                name=name,
            )
        )
    if found is torch.nn.Linear.forward or found is torch.nn.Linear:
        raise Hint(tr("that is the method itself; the question is what its `return` line calls"))
    if isinstance(answer, str) and found is None:
        raise Hint(
            tr(
                (
                    "{answer!r} does not name a function here: give the function object (e.g. "
                    "torch.add) or its name as forward's source writes it"
                ),
                answer=answer,
            )
        )
    raise Hint(
        tr("not what forward calls: read the `return` line of show_source(torch.nn.Linear.forward)")
    )


def _kernel_table(ops: list[str]) -> dict[str, dict[str, bool]]:
    import torch

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    return {op: {k: has_kernel(op, k) for k in ("CPU", "CompositeImplicitAutograd")} for op in ops}


@exercise("00.2", "Operators without a CPU kernel")
def composite_ops(answer: Any) -> str:
    import torch
    import torch.nn.functional as F

    given = choice_set(answer, CANDIDATES_00_2, tr("operator names"), "{'aten::relu'}", aten_name)
    table = _kernel_table(CANDIDATES_00_2)
    truth = {op for op, k in table.items() if not k["CPU"] and k["CompositeImplicitAutograd"]}
    with_cpu = sorted(op for op in given if table[op]["CPU"])
    if with_cpu:
        raise Hint(
            tr(
                (
                    "{with_cpu} have a kernel registered for CPU: "
                    "torch._C._dispatch_has_kernel_for_dispatch_key(op, 'CPU') is True for them"
                ),
                with_cpu=with_cpu,
            )
        )
    if given != truth:
        raise Hint(
            tr(
                (
                    "one more candidate has no CPU kernel: try has_kernel(op, 'CPU') and "
                    "has_kernel(op, 'CompositeImplicitAutograd') on each of the "
                    "{len_candidates_00_2}"
                ),
                len_candidates_00_2=len(CANDIDATES_00_2),
            )
        )
    x, weight = torch.ones(2, 4), torch.ones(3, 4, requires_grad=True)
    node = F.linear(x, weight, torch.ones(3)).grad_fn.name()
    return tr(
        (
            "{sorted_truth} have no CPU kernel, only a CompositeImplicitAutograd one: it "
            "is written in other ATen ops, so the call comes apart at the dispatcher; "
            "autograd records F.linear(x, weight, bias) as {node}, not as a node of its "
            "own"
        ),
        sorted_truth=sorted(truth),
        node=node,
    )


def _key_names(key_set: Any) -> set[str]:
    inner = re.fullmatch(r"DispatchKeySet\((.*)\)", str(key_set).strip())
    return {k.strip() for k in (inner[1] if inner else "").split(",") if k.strip()}


@exercise("00.3", "The key set of a meta tensor")
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
                "{autocast}: autocast keys come with CPU and CUDA tensors, not with meta ones",
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
                    "carries autograd keys like a CPU tensor does (section 4)"
                ),
                len_missing=len(missing),
            )
        )
    raise Hint(
        tr(
            ("{sorted_given_truth} are not in it: print torch._C._dispatch_keys(...) to see"),
            sorted_given_truth=sorted(given - truth),
        )
    )


@exercise("00.4", "A line number read from an excerpt")
def optimize_line(answer: Any) -> str:
    import torch

    from helpers.source import source_view

    line = source_view(torch.compile, PATTERN_00_4, before=0, after=0).first_line
    shown = source_view(torch.compile, PATTERN_00_4, before=6, after=7)
    whole = source_view(torch.compile)
    if as_int(answer) is None:
        raise Hint(tr("answer with a line number (an int), as the excerpt's header gives it"))
    answer = as_int(answer)
    if answer == line:
        return tr(
            (
                "line {line} of torch/__init__.py: the permalink's "
                "#L{shown_first_line}-L{shown_last_line} range holds it, "
                "{line_shown_first_line} lines below its start (before=6), and the number "
                "was computed from the installed file, never typed"
            ),
            line=line,
            shown_first_line=shown.first_line,
            shown_last_line=shown.last_line,
            line_shown_first_line=line - shown.first_line,
        )
    if answer == shown.first_line:
        raise Hint(
            tr(
                "that is where the excerpt starts: section 3 asked for 6 lines before the "
                "pattern (before=6)"
            )
        )
    if answer == shown.last_line:
        raise Hint(tr("that is where the excerpt ends (after=7 lines below the pattern)"))
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
            "read it from the header of show_source(torch.compile, ...) in section 3: "
            "the excerpt's range starts 6 lines above the pattern"
        )
    )
