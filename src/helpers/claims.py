"""Checks of facts about the installed packages that say what they expected and what they found.

Used by: notebooks 00-17, wherever one asserts an API fact (a module or attribute that exists,
a parameter, a default). CPU or GPU alike; imports nothing heavy itself.

Why a module: on a newer torch, `pytest --nbval-lax` must say *what changed*, not just
`AssertionError`. A bare `assert hasattr(torch.onnx, "symbolic_opset11")` is also wrong in a
quieter way: `hasattr` on a package sees only the submodules somebody already imported, so a
module that exists reads as gone. `present` imports what it probes; `expect_params` and
`expect_default` raise an AssertionError that names the function, what the notebook expected and
what the installed signature says. Plain `assert`s in notebooks follow the same rule by hand:
`assert found == expected, f"...: expected {expected!r}, found {found!r}"`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["present", "lookup", "signature_params", "expect_params", "expect_default"]


def lookup(dotted: str) -> Any:
    """The object named `a.b.c`: the longest importable module prefix, then attributes.

    Raises LookupError naming the first part that is missing.
    """
    parts = dotted.split(".")
    obj: Any = None
    found = 0
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        found = i
        break
    if found == 0:
        raise LookupError(f"{dotted}: no importable module at {parts[0]!r}")
    for j in range(found, len(parts)):
        if not hasattr(obj, parts[j]):
            raise LookupError(f"{dotted}: {'.'.join(parts[:j])} has no {parts[j]!r}")
        obj = getattr(obj, parts[j])
    return obj


def present(dotted: str) -> bool:
    """Whether `a.b.c` exists in the installed packages (importing submodules, unlike hasattr)."""
    try:
        lookup(dotted)
    except LookupError:
        return False
    return True


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def signature_params(fn: Callable[..., Any] | str) -> list[str]:
    """Parameter names of `fn` (or of the object a dotted name points at), in order."""
    if isinstance(fn, str):
        fn = lookup(fn)
    return list(inspect.signature(fn).parameters)


def expect_params(
    fn: Callable[..., Any] | str, present: Iterable[str] = (), absent: Iterable[str] = ()
) -> list[str]:
    """Assert `fn` takes every name in `present` and none in `absent`; return its parameters.

    The AssertionError names the function, the names that broke the expectation and the
    installed parameter list, so a renamed argument in a newer torch reads as exactly that.
    """
    label = fn if isinstance(fn, str) else _name(fn)
    params = signature_params(fn)
    missing = [p for p in present if p not in params]
    unexpected = [p for p in absent if p in params]
    problems = []
    if missing:
        problems.append(f"expected parameter(s) {missing}, not in the installed signature")
    if unexpected:
        problems.append(f"expected {unexpected} to be gone, still in the installed signature")
    assert not problems, f"{label}: {'; '.join(problems)}; found ({', '.join(params)})"
    return params


def expect_default(fn: Callable[..., Any] | str, param: str, expected: Any) -> Any:
    """Assert parameter `param` of `fn` defaults to `expected`; return the installed default."""
    label = fn if isinstance(fn, str) else _name(fn)
    target = lookup(fn) if isinstance(fn, str) else fn
    params = inspect.signature(target).parameters
    assert param in params, f"{label}: expected a parameter {param!r}, found ({', '.join(params)})"
    found = params[param].default
    assert found is not inspect.Parameter.empty, (
        f"{label}({param}=...): expected default {expected!r}, found no default "
        f"(installed signature: ({', '.join(params)}))"
    )
    assert found == expected, (
        f"{label}({param}=...): expected default {expected!r}, found {found!r}"
    )
    return found
