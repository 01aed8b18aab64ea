"""Exercises a reader can check: a starter cell, then a check cell that says "correct" or hints.

Used by: the `## Exercises` section of every notebook; tests/test_exercises.py; solutions/.

    # starter cell (the reader replaces the `...`)
    answer = ...  # TODO: which rank sends chunk 2 at step 1?

    # check cell
    check("05.1", answer)      # prints "05.1 correct: ..." or "05.1 not yet: <a specific hint>"

An exercise is a *judge*: a function that takes the reader's answer and returns the text to show
when it is right, or raises `Hint("...")` naming what is wrong. Judges live in one module per
notebook (`helpers.exercises.nb05`, ...), registered with `@exercise("05.1", "title")`; worked
solutions live outside the notebooks, in `solutions/nb05.py` (`SOLUTIONS` and the typical wrong
answers `WRONG` that the test suite feeds to every judge).

Why it is built this way:
- `check` never raises: a notebook ships with its starters untouched, and nbval re-executes it,
  so the stored output of every check cell is the "not yet" hint for the starter.
- Answers that are functions are called by the judge, and whatever they raise becomes a hint
  naming the exception (a student's bug is feedback, not a crashed cell).
- Exercises that need several ranks run the reader's function through `launch` like the rest of
  the notebook. A function typed in a notebook lives in `__main__`, which spawned workers cannot
  import, so `launch` writes its source (and what it uses from the notebook) to a module in a
  temporary folder and the workers import it from there (`inspect.getsource` reads notebook
  cells too); `launch_source` adds `torch` and `dist` for a reader who did not import them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import numbers
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.exercises.i18n import N_, current_language, language, tr

__all__ = [
    "Hint",
    "exercise",
    "check",
    "judge",
    "exercises",
    "launch_source",
    "as_int",
    "NOT_STARTED",
    "tr",
    "N_",
    "language",
    "current_language",
]

#: What `check` says about an untouched starter (an answer that is still `...`).
NOT_STARTED = N_("replace the `...` in the starter cell above with your answer, then run this cell")


class Hint(Exception):
    """Raised by a judge: the answer is not right yet; the message says what to look at."""


@dataclass(frozen=True)
class Exercise:
    key: str
    title: str
    judge: Callable[[Any], str]


_REGISTRY: dict[str, Exercise] = {}


def exercise(key: str, title: str) -> Callable[[Callable[[Any], str]], Callable[[Any], str]]:
    """Register `fn(answer) -> explanation` (raising `Hint`) as the judge of exercise `key`."""

    def register(fn: Callable[[Any], str]) -> Callable[[Any], str]:
        if key in _REGISTRY and _REGISTRY[key].judge is not fn:
            raise ValueError(f"exercise {key!r} is registered twice")
        _REGISTRY[key] = Exercise(key, title, fn)
        return fn

    return register


def _load(key: str) -> Exercise:
    module = f"helpers.exercises.nb{key.split('.')[0]}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
    if key not in _REGISTRY:
        raise KeyError(f"no exercise {key!r} (looked in {module})")
    return _REGISTRY[key]


def exercises(notebook: str) -> dict[str, Exercise]:
    """Every exercise of notebook `notebook` ("05"), by key."""
    importlib.import_module(f"helpers.exercises.nb{notebook}")
    return {k: e for k, e in sorted(_REGISTRY.items()) if k.split(".")[0] == notebook}


def choice_set(
    answer: Any, candidates: Any, what: str, example: str, normalise: Callable[[Any], Any] = str
) -> set:
    """The reader's answer as a set of `candidates` (each item passed through `normalise`).

    Raises Hint when the answer is not a collection (a lone name or number) or names something
    that is not a candidate, so a judge only compares sets.
    """
    if isinstance(answer, (str, bytes, numbers.Number)) or not isinstance(
        answer, (set, frozenset, list, tuple)
    ):
        raise Hint(tr("answer with a set of {what}, e.g. {example}", what=what, example=example))
    given = {normalise(a) for a in answer}
    unknown = sorted(given - set(candidates), key=str)
    if unknown:
        raise Hint(
            tr(
                "{unknown} are not among the candidates: {candidates}",
                unknown=unknown,
                candidates=list(candidates),
            )
        )
    return given


def aten_name(op: Any) -> str:
    """ "relu", "aten.relu", torch.ops' "aten.relu.default" and "aten::relu" all as "aten::relu"."""
    op = str(op).strip().removesuffix(".default")
    if op.startswith("aten."):
        op = op[len("aten.") :]
    return op if op.startswith("aten::") else f"aten::{op}"


def as_int(value: Any) -> int | None:
    """`value` as an int when it is a whole number (7, 7.0, numpy.int64(7)); None otherwise.

    A bool is None here: True is an int to Python, but never a count or a line number.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isfinite(f) and f.is_integer():
            return int(f)
    return None


def _empty_function(fn: Any) -> bool:
    """True for a starter like `def f(rank, world_size): ...  # TODO` (docstring allowed)."""
    if not inspect.isfunction(fn):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and hasattr(tree.body[0], "body") else []
    consts = [
        s.value.value for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
    ]
    return len(consts) == len(body) and Ellipsis in consts


def _untouched(answer: Any) -> bool:
    """The starter's `...` is still there: a bare `...`, inside a container, or a function body."""
    if answer is Ellipsis or _empty_function(answer):
        return True
    if isinstance(answer, (list, tuple, set)):
        return any(_untouched(a) for a in answer)
    if isinstance(answer, dict):
        return any(_untouched(a) for a in answer.values())
    return False


def judge(key: str, answer: Any) -> tuple[bool, str]:
    """(correct, message) for `answer` to exercise `key`; what `check` prints, for tests."""
    ex = _load(key)
    if _untouched(answer):
        return False, tr(NOT_STARTED)
    try:
        return True, ex.judge(answer)
    except Hint as hint:
        return False, str(hint)
    except Exception as e:  # the reader's function raised: that is feedback too
        return False, tr("your code raised {error}: {message}", error=type(e).__name__, message=e)


def check(key: str, answer: Any) -> None:
    """Print "KEY correct: why" or "KEY not yet: hint" for the reader's `answer`; never raises.

    In a Chinese notebook (helpers.exercises.i18n) the labels and the judge's message are Chinese.
    """
    ok, message = judge(key, answer)
    if ok:
        print(tr("{key} correct: {message}", key=key, message=message))
    else:
        print(tr("{key} not yet: {message}", key=key, message=message))


# --- several ranks ------------------------------------------------------------------------------


_PRELUDE = """\
import torch
import torch.distributed as dist
"""


def launch_source(
    fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), **launch_kwargs: Any
) -> Any:
    """Run `fn(rank, world_size, *args)` on `world_size` ranks even if `fn` was typed in a notebook.

    `helpers.launch.launch` writes the function's source to a module the workers import, with
    what it uses from the notebook (imports, constants, other functions) and, first, `import
    torch` and `import torch.distributed as dist`, so a reader's function may use `torch` and
    `dist` without importing them. Returns what `launch` returns; raises its ValueError for a
    global that cannot be written out.
    """
    from helpers.launch import launch

    return launch(fn, world_size, args, prelude=_PRELUDE, **launch_kwargs)
