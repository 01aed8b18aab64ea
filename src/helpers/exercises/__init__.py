"""Exercises a reader can check: a starter cell, then a check cell that says "correct" or hints.

Used by: the `## Exercises` section of every notebook; tests/test_exercises.py; solutions/.

    # starter cell (the reader replaces the `...`)
    answer = ...  # TODO: which rank sends chunk 2 at step 1?

    # check cell
    check("05.1", answer)      # prints "✓ 05.1 correct: ..." or "✗ 05.1 not yet: <a hint>"

An exercise is a *judge*: a function that takes the reader's answer and returns the text to show
when it is right, or raises `Hint("...")` naming what is wrong. Judges live in one module per
notebook (`helpers.exercises.nb05`, ...), registered with `@exercise("05.1", "title", look=...,
reveal=...)`; worked solutions live outside the notebooks, in `solutions/nb05.py` (`SOLUTIONS`
and the typical wrong answers `WRONG` that the test suite feeds to every judge).

Hints come in steps, so a first wrong answer does not receive the solution:
1. the first wrong try shows the judge's hint for that mistake: what to think about;
2. the second adds `look`, where in the notebook (or torch) to look;
3. the third and later add `reveal`, the helper or call that computes the answer.
A right answer's verdict ends with `reveal` too, so the student sees what checked it. A `Hint`
may carry its own `look`/`reveal` (for one mistake); otherwise the exercise's are used. The
prompt never names what `reveal` names (tests/test_exercises.py checks it).

Why it is built this way:
- `check` never raises: a notebook ships with its starters untouched, and nbval re-executes it,
  so the stored output of every check cell is the "not yet" line for the starter (an untouched
  starter is not a try: it does not move the hints on).
- The verdict starts with a mark (✓ or ✗) and is wrapped at words (`verdict`), so it reads at a
  glance in JupyterLab, the book and the Chinese edition, as plain text that needs no trust.
- Answers that are functions are called by the judge, and whatever they raise becomes a hint
  naming the exception (a student's bug is feedback, not a crashed cell). A coding exercise's
  judge also runs hidden cases (other sizes, uneven splits, another world size), so a function
  that returns the prompt's case by heart fails with "a hidden case". The judges of 12.2, 13.2,
  14.1, 14.4 and 18.3 run the reader's function on every case first and compute the truths only
  after (`run_answer` names the case an error came from), so that no truth lies in a judge's
  frame while the reader's code runs; what those truths are computed from is saved before
  (`Sealed`: refused if the reader's code rebinds or recodes it, or leaves a trace function, a
  profiler or a thread running), and each answer is read as plain values inside the watch (exact
  types: a subclass is refused), so that nothing of the reader's runs after it. The refusals
  (`watching`, `Sealed`) are the exercise's rules, and worded as such: an in-process check
  cannot see a process or a thread of the reader's own code started before it, a foreign
  function (ctypes), code that reaches into the check's own record, nor a judge module patched
  in the kernel. A `Hint` the reader's code raises is the reader's error (`run_answer`: "your
  code raised Hint: ..."), and graded mode's half points are decided from the judge's msgids
  (`tr` returns a `Message`), never from the text.
- Exercises that need several ranks run the reader's function through `launch` like the rest of
  the notebook. A function typed in a notebook lives in `__main__`, which spawned workers cannot
  import, so `launch` writes its source (and what it uses from the notebook) to a module in a
  temporary folder and the workers import it from there (`inspect.getsource` reads notebook
  cells too); `launch_source` adds `torch` and `dist` for a reader who did not import them.
- Graded assignments (tools/assign.py, nbgrader) ask the same judges: `score(key, answer)`
  gives the fraction of the points (`HIDDEN_ONLY` for an answer that fails only a hidden case)
  and the first-try verdict, and `grade(key, answer, points)`, an nbgrader test cell's hidden
  part, the points, which nbgrader reads as the cell's partial score (`POINTS`: per exercise).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import math
import numbers
import os
import re
import sys
import sysconfig
import textwrap
import unicodedata
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.exercises.i18n import N_, Message, current_language, language, tr

__all__ = [
    "Hint",
    "Refusal",
    "exercise",
    "check",
    "judge",
    "score",
    "grade",
    "POINTS",
    "HIDDEN_ONLY",
    "exercises",
    "launch_source",
    "as_int",
    "called_names",
    "binds",
    "run_answer",
    "watching",
    "STARTED_PROCESS",
    "started_process",
    "Sealed",
    "collective_guard",
    "COLLECTIVE_NAMESPACES",
    "verdict",
    "wrap",
    "NOT_STARTED",
    "tr",
    "N_",
    "language",
    "current_language",
]

#: What `check` says about an untouched starter (an answer that is still `...`).
NOT_STARTED = N_("replace the starter's `...` with your answer, then run this cell")


class Hint(Exception):
    """Raised by a judge: the answer is not right yet; the message says what to think about.

    `look` and `reveal` (already translated text) replace the exercise's second and third steps
    for this one mistake. `counts=False` says the check itself could not run (a launch that
    failed before the reader's code ran): that is not a wrong try, so the hints do not step on.
    `message` is kept as given: a `tr` result carries its msgids, which `score` reads.
    """

    def __init__(
        self,
        message: str,
        *,
        look: str | None = None,
        reveal: str | None = None,
        counts: bool = True,
    ):
        super().__init__(message)
        self.message = message
        self.look = look
        self.reveal = reveal
        self.counts = counts


class Refusal(Hint):
    """A judge's refusal raised inside the reader's call (a dispatch mode's, a board op's): the
    one kind of `Hint` that `run_answer` and the judges let through from the reader's code; any
    other `Hint` raised there is the reader's own error. A judge makes it with `_refusal`, which
    records it: `run_answer` and the judges let through only a recorded one, with the fields it
    was made with (`_recorded`). A `Refusal` the reader makes, whatever its text and whatever
    traceback it is given (`with_traceback`), is the reader's own error."""


#: Every `Refusal` a judge made (`_refusal`), with the fields it was made with: weakly, so that
#: a refusal no longer referenced goes. Reaching into it from the reader's code is an
#: in-process limit, like patching a judge.
_REFUSALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fields(refusal: Hint) -> tuple:
    message = refusal.message
    return (message, str(message), getattr(message, "msgids", None), refusal.look,
            refusal.reveal, refusal.counts)  # fmt: skip


def _refusal(message: str, **kwargs: Any) -> Refusal:
    """A judge's `Refusal` of `message` (`look`, `reveal`, `counts` as `Hint`), recorded."""
    refusal = Refusal(message, **kwargs)
    _REFUSALS[refusal] = _fields(refusal)
    return refusal


def _recorded(hint: BaseException) -> bool:
    """Whether `hint` is a `Refusal` a judge made (`_refusal`), its fields unchanged since."""
    try:
        return isinstance(hint, Refusal) and _REFUSALS.get(hint) == _fields(hint)
    except TypeError:  # an unhashable subclass: not one a judge made
        return False


@dataclass(frozen=True)
class Exercise:
    key: str
    title: str
    judge: Callable[[Any], str]
    #: msgid: where to look (the second step of the hints)
    look: str | None = None
    #: msgid: the helper or call that computes the answer (third step; in the right verdict)
    reveal: str | None = None


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    key: str, title: str, *, look: str | None = None, reveal: str | None = None
) -> Callable[[Callable[[Any], str]], Callable[[Any], str]]:
    """Register `fn(answer) -> explanation` (raising `Hint`) as the judge of exercise `key`.

    `look` (where to look) and `reveal` (what computes the answer) are the hints' second and
    third steps, English msgids marked with `N_` (translated when shown).
    """

    def register(fn: Callable[[Any], str]) -> Callable[[Any], str]:
        if key in _REGISTRY and _REGISTRY[key].judge is not fn:
            raise ValueError(f"exercise {key!r} is registered twice")
        _REGISTRY[key] = Exercise(key, title, fn, look, reveal)
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


def called_names(fn: Any, referenced: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """The names a function's source calls (`f(...)` -> "f", `x.f(...)` -> "f"), and those of
    `referenced` it names at all (`cls = DDPOptimizer`); empty when its source cannot be read. For
    a judge's first, static refusal of a library call; the run-time refusal (a watch on the
    library's code objects) catches aliases this cannot see."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
        elif isinstance(node, ast.Name) and node.id in referenced:
            names.add(node.id)
    return names


def binds(fn: Any, args: tuple) -> bool:
    """Whether `fn(*args)` binds: extra defaulted parameters, *args and partials are fine; a
    callable without a readable signature (a builtin) is left to the call to decide."""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def run_answer(where: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, the reader's function on one case; whatever it raises (but a judge's
    `Refusal`, such as a dispatch mode's, made by `_refusal`) becomes the hint "{where}: your
    code raised {error}", naming the case: a `Hint` or a `Refusal` the reader's code raises
    too, and it counts as a try."""
    try:
        return fn(*args)
    except Refusal as e:
        if _recorded(e):  # a judge's, raised inside the reader's call
            raise
        raise Hint(  # the reader's own Refusal: its error, like any other
            tr("{where}: your code raised {error}", where=where, error=f"{type(e).__name__}: {e}")
        ) from None
    except Exception as e:  # noqa: BLE001 - the reader's code: its error is the hint
        raise Hint(
            tr("{where}: your code raised {error}", where=where, error=f"{type(e).__name__}: {e}")
        ) from None


#: How `watching(..., processes=True)` records a C call that starts a process (a fork, a spawn,
#: a shell), before the function's name: what runs there, the check cannot see.
STARTED_PROCESS = "process: "
#: The message a judge gives for it (one msgid for every judge).
PROCESS_REFUSAL = N_(
    "your function starts a process ({call}), where the check cannot see what runs: compute the "
    "answer in your function itself"
)


def _process_starts() -> set[int]:
    """The ids of the C functions that start a process: os.fork and its kin, the spawns, the
    shell, and subprocess's and multiprocessing's `_posixsubprocess.fork_exec`."""
    import os

    found = [getattr(os, n, None) for n in ("fork", "forkpty", "posix_spawn", "posix_spawnp",
                                            "system", "spawnv", "spawnve")]  # fmt: skip
    try:
        import _posixsubprocess

        found.append(_posixsubprocess.fork_exec)
    except ImportError:  # not on POSIX
        pass
    return {id(f) for f in found if f is not None}


_GATE = "the gate"  # the constant of `_RECORDER`'s code that `_gated` replaces by the recorder
_RECORDER = compile(
    f"def recorder(*args, **kwargs):\n    gate = {_GATE!r}\n    return gate(args, kwargs)\n",
    "<watching>",
    "exec",
).co_consts[0]


def _gated(fn: Any, hits: list) -> tuple[Any, Any]:
    """(the code `fn` runs now, a code for it that records its name in `hits`, from any thread,
    then runs the saved code): what `watching(swap=...)` puts in `fn.__code__` for the block."""
    import types

    saved = fn.__code__
    if saved.co_freevars:
        raise ValueError(f"watching(swap=...): {fn.__qualname__} is a closure, its code stays")
    original = types.FunctionType(saved, fn.__globals__, fn.__name__, fn.__defaults__)
    original.__kwdefaults__ = fn.__kwdefaults__
    name = saved.co_name

    def record(args: tuple, kwargs: dict) -> Any:
        hits.append(name)
        return original(*args, **kwargs)

    consts = tuple(record if c == _GATE else c for c in _RECORDER.co_consts)
    # the saved code's name, file and first line: `inspect.getsource` still reads its source
    return saved, _RECORDER.replace(
        co_consts=consts,
        co_name=saved.co_name,
        co_qualname=saved.co_qualname,
        co_filename=saved.co_filename,
        co_firstlineno=saved.co_firstlineno,
    )


@contextlib.contextmanager
def watching(
    codes: set,
    builtins: set = frozenset(),
    same_code: bool = False,
    bound: tuple = (),
    holds: Callable[[], str | None] | None = None,
    swap: Sequence[Callable[..., Any]] = (),
    processes: bool = False,
) -> Iterator[list]:
    """Record, while the block runs, every call of a Python function whose code object is in
    `codes` (its name) or of a builtin whose id is in `builtins`. At run time (`sys.setprofile`,
    the previous profiler restored after; threads started in the block are watched too), so that
    an alias or a helper defined elsewhere is seen as well as a call by name: a judge's refusal
    of the library call its exercise replaces.

    `same_code`: a copy of a watched function (its source compiled again, its code replaced)
    counts too: a called code with the same bytecode, names and constants. Every watched code is
    fingerprinted, so a judge passes it only where the watched functions are large: a short one
    can be the reader's own right answer, written the same way. A copy edited by one statement
    has another fingerprint: this refuses a verbatim copy only. `bound`: objects whose C methods
    count when called (a bound method is built afresh at each access, so its id cannot be
    watched). `holds`: asked after each C call returns and once more at the end; a name it
    returns is recorded (a judge's state that must stay, such as a dispatch mode on its stack).
    `swap`: plain functions (no closure) whose `__code__` is replaced for the block by one that
    records the function's name and then runs it as before: the function object is shared by
    every thread, so a call from a thread that was running before the block (which the profiler
    does not see) is recorded too; the code is put back at the end. `processes`: a C call that
    starts a process (`os.fork`, a spawn, `os.system`, subprocess) is recorded as
    `STARTED_PROCESS` and its name (`started_process` raises the hint for it).
    Switching the watch off (`sys.setprofile` or `threading.setprofile` called in the block,
    another profiler left in place at its end, or a swapped function's code replaced) is
    recorded as "sys.setprofile", whatever the judge watches.

    Any thread's call of a swapped function counts, the kernel's own included (a background
    compile, a training thread): the block is for the reader's function alone.

    What no in-process watch sees: a process started before the block, or one started through
    a foreign function (ctypes, cffi: no `c_call` event), a thread started before it that runs
    code of its own rather than a swapped function (a copy of the library, function objects
    made beforehand from its code objects), code that reaches into the watch's own record (the
    list of hits is reachable from the recorder's constants and the profiler's closure), and a
    judge module patched in the kernel, or a library function replaced before the check by one
    that names the library's file. What a judge computes its truths from after the block is
    frozen by `Sealed`, with its own limits."""
    import threading

    hits: list = []
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    active = True

    def fingerprint(code: Any) -> Any:
        consts = tuple(
            fingerprint(c) if inspect.iscode(c) else (type(c).__name__, repr(c))
            for c in code.co_consts
        )
        return code.co_code, code.co_names, consts

    prints = {fingerprint(c) for c in codes} if same_code else set()
    names = {c.co_names for c in codes} if same_code else set()
    switches = {threading.setprofile.__code__}
    switches |= {f.__code__ for f in [getattr(threading, "setprofile_all_threads", None)] if f}
    off = {id(sys.setprofile), *(id(f) for f in [getattr(sys, "_setprofileallthreads", None)] if f)}
    starts = _process_starts() if processes else set()
    gates = [(fn, *_gated(fn, hits)) for fn in swap]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if not active:
            return
        if event == "call":
            code = frame.f_code
            if code in codes:
                hits.append(code.co_name)
            elif code in switches:
                hits.append("sys.setprofile")
            elif code.co_names in names and fingerprint(code) in prints:
                hits.append(code.co_name)
        elif event == "c_call":
            if id(arg) in builtins:
                hits.append(getattr(arg, "__name__", "?"))
            elif id(arg) in off:
                hits.append("sys.setprofile")
            elif id(arg) in starts:
                hits.append(STARTED_PROCESS + getattr(arg, "__name__", "?"))
            elif bound and any(getattr(arg, "__self__", None) is b for b in bound):
                hits.append(getattr(arg, "__name__", "?"))
        elif event == "c_return" and holds is not None:
            lost = holds()
            if lost is not None and lost not in hits:
                hits.append(lost)

    threading.setprofile(profile)  # before the watch starts: not a call it records
    sys.setprofile(profile)
    for fn, _, gated in gates:
        fn.__code__ = gated
    try:
        yield hits
    finally:
        active = False
        for fn, saved, gated in gates:
            if fn.__code__ is not gated:
                hits.append("sys.setprofile")
            fn.__code__ = saved
        if sys.getprofile() is not profile:
            hits.append("sys.setprofile")
        lost = holds() if holds is not None else None
        if lost is not None and lost not in hits:
            hits.append(lost)
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


class Sealed:
    """What a judge computes its truths from, saved before the reader's function runs, to refuse
    an answer that moved it: `bindings` ((module or class, attribute name) pairs: the object
    bound there now, and its `__code__` when it has one), `functions` (their `__code__`, such as
    each case's), and the interpreter's hooks (`sys.gettrace()`, `sys.getprofile()`, the
    threads alive, torch's dispatch and function mode stacks' depth). The judge computes its
    truths from `value(owner, name)` (the saved object) and `code(fn)` only, after
    `broken()` has found nothing.

    What it does not see: a change inside an object that stays bound (a list is compared by the
    judge itself), a binding outside those named (a module the truth's path reaches further
    down), a hook it does not know (`gc.callbacks`, an audit hook), a foreign function
    (ctypes), and code that reaches the check's own objects (its record, this seal)."""

    def __init__(self, bindings: Sequence[tuple[Any, str]] = (), functions: Sequence[Any] = ()):
        import threading

        self.bound = {(id(o), n): (o, n, getattr(o, n)) for o, n in bindings}
        self.codes = {(id(o), n): getattr(v, "__code__", None) for (o, n, v) in self.bound.values()}
        self.functions = [(fn, fn.__code__) for fn in functions]
        self.hooks = self._hooks()
        self.threads = set(threading.enumerate())

    @staticmethod
    def _hooks() -> tuple:
        torch = sys.modules.get("torch")
        modes = ()
        if torch is not None:
            modes = (torch._C._len_torch_dispatch_stack(), torch._C._len_torch_function_stack())
        return sys.gettrace(), sys.getprofile(), modes

    def value(self, owner: Any, name: str) -> Any:
        """The object that was bound at `owner.name` when the seal was made."""
        return self.bound[(id(owner), name)][2]

    def code(self, fn: Any) -> Any:
        """`fn.__code__` as it was when the seal was made."""
        return next(code for f, code in self.functions if f is fn)

    def broken(self) -> str | None:
        """What the reader's code changed (for the hint, naming no function the third step
        reveals), or None."""
        import threading

        for key, (owner, name, value) in self.bound.items():
            now = getattr(owner, name, None)
            if now is not value or getattr(now, "__code__", None) is not self.codes[key]:
                return "a function or value the check reads, rebound or recoded"
        for fn, code in self.functions:
            if fn.__code__ is not code:
                return "the code of a function it was given"
        trace, profile, modes = self._hooks()
        if trace is not self.hooks[0]:
            return "sys.settrace"
        if profile is not self.hooks[1]:
            return "sys.setprofile"
        if modes != self.hooks[2]:
            return "a torch mode left on its stack"
        alive = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        if alive:
            return f"a thread still running ({alive[0].name})"
        return None

    def refuse(self) -> None:
        """Raise the hint for `broken()`, if it found something, after putting back the
        bindings, code and hooks it saved (a thread left running is the reader's to stop)."""
        what = self.broken()
        if what is None:
            return
        for key, (owner, name, value) in self.bound.items():
            with contextlib.suppress(Exception):
                if getattr(owner, name, None) is not value:
                    setattr(owner, name, value)
                if self.codes[key] is not None and value.__code__ is not self.codes[key]:
                    value.__code__ = self.codes[key]
        for fn, code in self.functions:
            with contextlib.suppress(Exception):
                fn.__code__ = code
        trace, profile, _ = self._hooks()
        if trace is not self.hooks[0]:
            sys.settrace(self.hooks[0])
        if profile is not self.hooks[1]:
            sys.setprofile(self.hooks[1])
        raise Hint(tr(SEAL_REFUSAL, what=what))


#: The message for what `Sealed.broken` finds (one msgid for every judge).
SEAL_REFUSAL = N_(
    "your function changed what the check computes its answer from, or left something running "
    "({what}): return your answer and change nothing else; restart the kernel and run this cell "
    "again"
)


def started_process(hits: Sequence[str]) -> None:
    """Raise the hint for a process started in a watched block (`watching(processes=True)`)."""
    for hit in hits:
        if hit.startswith(STARTED_PROCESS):
            raise Hint(tr(PROCESS_REFUSAL, call=hit.removeprefix(STARTED_PROCESS) + "()"))


#: The steps' labels (msgids).
LOOK = N_("Where to look: {look}")
REVEAL = N_("What computes it: {reveal}")
CHECKED = N_("Checked against: {reveal}")
#: How wide a verdict line may be (display columns; a CJK character counts two).
WIDTH = 88

_attempts: dict[str, int] = {}


def judge(key: str, answer: Any, attempt: int = 1) -> tuple[bool, str]:
    """(correct, message) for `answer` to exercise `key` at the `attempt`-th wrong try.

    What `check` prints, for tests. The message of a wrong answer is the judge's hint, with the
    exercise's `look` from the second try and its `reveal` from the third; a right answer's ends
    with `reveal`. Paragraphs are separated by newlines (`verdict` wraps them).
    """
    ok, message, _, _ = _judge(key, answer, attempt)
    return ok, message


#: The folder of the helpers (src/helpers): a Hint raised by code there is a judge's.
_HELPERS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: Where the Python installation's own code lives (the standard library, site-packages): a frame
#: there is neither the judge's nor the reader's (a `contextlib` frame between a judge's lines).
_INSTALLED = tuple(
    os.path.abspath(sysconfig.get_paths()[k]) + os.sep
    for k in ("stdlib", "platstdlib", "purelib", "platlib")
)


def _judges_own(hint: Hint, judge: Any) -> bool:
    """Whether `hint` is the judge's, not the reader's (a function defined in a notebook or a
    solutions file). A `Refusal` is the judge's only when a judge made it (`_recorded`): it is
    raised inside the reader's call, so its traceback runs through the reader's code. Any other
    `Hint` is the judge's when no frame of its traceback is the reader's: every frame from where
    it was caught down to where it was raised is code of `src/helpers` (a judge, a helper it
    calls), of the judge's own file or of the Python installation. A traceback the reader
    attaches (`with_traceback`) keeps the frame the reader raised it in, so it cannot pass for
    the judge's. Code compiled under a helper's file name passes for the judge's: a limit, as a
    patched judge is."""
    if isinstance(hint, Refusal):
        return _recorded(hint)
    own = getattr(getattr(judge, "__code__", None), "co_filename", None)
    own = os.path.abspath(own) if own is not None else None
    tb = hint.__traceback__
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not (path.startswith(_HELPERS + os.sep) or path == own or path.startswith(_INSTALLED)):
            return False
        tb = tb.tb_next
    return True


def _judge(key: str, answer: Any, attempt: int) -> tuple[bool, str, bool, bool]:
    """`judge`, whether this answer counts as a try (False: untouched, or not checked), and
    whether the judge's hint is a hidden case's (`_hidden_case`)."""
    ex = _load(key)
    try:
        untouched = _untouched(answer)
    except Exception:  # an answer that cannot be inspected is judged as it is
        untouched = False
    if untouched:
        return False, tr(NOT_STARTED), False, False
    look = tr(ex.look) if ex.look else None
    reveal = tr(ex.reveal) if ex.reveal else None
    counts = True
    try:
        message = ex.judge(answer)
    except Hint as hint:
        if _judges_own(hint, ex.judge):
            parts = [hint.message]
            look = hint.look or look
            reveal = hint.reveal or reveal
            counts = hint.counts
        else:  # a Hint the reader's code raised: the reader's error, a try like any other
            parts = [tr("your code raised {error}: {message}", error="Hint", message=f"{hint}")]
    except Exception as e:  # the reader's function raised: that is feedback too
        parts = [tr("your code raised {error}: {message}", error=type(e).__name__, message=f"{e}")]
    else:
        lines = [message] + ([tr(CHECKED, reveal=reveal)] if reveal else [])
        return True, "\n".join(lines), True, False
    if counts and attempt >= 2 and look:
        parts.append(tr(LOOK, look=look))
    if counts and attempt >= 3 and reveal:
        parts.append(tr(REVEAL, reveal=reveal))
    return False, "\n".join(parts), counts, _hidden_case(parts[0])


#: CJK ideographs, punctuation and full-width forms: a line may break before or after each one.
_CJK = "\u2e80-\u9fff\uff00-\uffef\u3000-\u303f"


def _width(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def wrap(text: str, width: int = WIDTH, indent: str = "  ", first: str = "") -> list[str]:
    """`text` in lines of at most `width` columns, broken at spaces or between CJK characters,
    never inside a word or an identifier (one longer than a line gets a line of its own); the
    first line starts with `first`, the others with `indent`."""
    tokens = re.findall(rf"\s+|[{_CJK}]|[^\s{_CJK}]+", text)
    lines: list[str] = []
    line, used = first, len(first)
    for tok in tokens:
        if tok.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        w = sum(_width(c) for c in tok)
        if line.strip() and used + w > width:
            lines.append(line.rstrip())
            line, used = indent, len(indent)
        line, used = line + tok, used + w
    if line.strip():
        lines.append(line.rstrip())
    return lines


def verdict(key: str, ok: bool, message: str) -> str:
    """The lines `check` prints: a mark, the key and the label, then the message, wrapped."""
    label = N_("{key} correct: {message}") if ok else N_("{key} not yet: {message}")
    first, *more = message.split("\n")
    lines = wrap(("✓ " if ok else "✗ ") + tr(label, key=key, message=first))
    for paragraph in more:
        lines += wrap(paragraph, first="  ", indent="    ")
    return "\n".join(lines)


def check(key: str, answer: Any) -> None:
    """Print "✓ KEY correct: why" or "✗ KEY not yet: hint" for the reader's `answer`; never raises.

    Each wrong try (not the untouched starter) moves this exercise's hints one step on, for as
    long as the kernel runs. In a Chinese notebook (helpers.exercises.i18n) the labels and the
    judge's message are Chinese.
    """
    attempt = _attempts.get(key, 0) + 1
    ok, message, counts, _ = _judge(key, answer, attempt)
    if not ok and counts:
        _attempts[key] = attempt
    print(verdict(key, ok, message))


# --- graded assignments (tools/assign.py: nbgrader test cells) ---------------------------------

#: Points per exercise in a graded assignment, the one place they are decided (tools/assign.py
#: writes them into each test cell's nbgrader metadata): a coding exercise (the answer is a
#: function the student writes, whose judge runs hidden cases) is worth 2, any other 1.
POINTS = {"code": 2, "answer": 1}
#: The share of an exercise's points that a wrong answer earns when the judge's hint is made
#: from a msgid that says "a hidden case" (`_hidden_case`): by the judges' convention it then
#: passed the shown case (the judge runs the prompt's case first), so it is half right. Any
#: other wrong answer earns nothing.
HIDDEN_ONLY = 0.5
#: What a hidden case's msgid contains (a judge's own message, or a `tr` value filled in).
HIDDEN_CASE = N_("a hidden case")


def _hidden_case(message: Any) -> bool:
    """Whether a wrong answer's hint is a hidden case's: one of the English msgids it was made
    from (`Message.msgids`: the judge's `tr` calls, never a plain string such as the reader's
    own exception text) contains "a hidden case". A hint that is a plain str is not."""
    return type(message) is Message and any(HIDDEN_CASE in m.lower() for m in message.msgids)


def score(key: str, answer: Any) -> tuple[float, str]:
    """(fraction of the exercise's points, verdict) for `answer`: 1.0 when the judge says right,
    HIDDEN_ONLY when its hint is a hidden case's (the judge's msgids, not the text), 0.0
    otherwise (the untouched starter, any other wrong answer). The verdict is what `check`
    prints at a first try (the judge's hint, without the `look` and `reveal` steps); nothing is
    printed, and the hints of `check` do not step on. A judge whose own part could not run
    (`Hint(counts=False)`: a setup launch that failed) gives no score: RuntimeError, with its
    message, so that the grader runs it again."""
    ok, message, counts, hidden = _judge(key, answer, 1)
    if ok:
        fraction = 1.0
    elif not counts and message != tr(NOT_STARTED):
        raise RuntimeError(f"{key}: the check could not run, grade it again: {message}")
    else:
        fraction = HIDDEN_ONLY if counts and hidden else 0.0
    return fraction, verdict(key, ok, message)


def grade(key: str, answer: Any, points: float) -> float:
    """The points `answer` earns out of `points` (`score`): an nbgrader test cell's result.

    nbgrader (`nbgrader autograde`, utils.determine_grade) takes a test cell's result, when it
    reads as a number between 0 and the cell's points, as the cell's partial score; an error or
    any stderr output in the cell scores 0, and a cell with no result scores full marks. So this
    always returns a number (or raises `score`'s RuntimeError: 0, and the autograded notebook
    shows why) and keeps what the judge and the student's code write (stdout, stderr, warnings)
    out of the cell: the hint is the visible `check` line above it in the test cell.
    """
    import io
    import warnings

    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        fraction, _ = score(key, answer)
    return round(fraction * float(points), 4)


# --- several ranks ------------------------------------------------------------------------------

#: The dispatcher's namespaces of collective and point-to-point ops (`collective_guard`).
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")


def collective_guard(decide: Callable[[str, Any, tuple, dict], str | None]) -> None:
    """In a worker (a rank a judge launched): push a dispatch mode that sees every collective
    and point-to-point op, whatever Python called it (torch.distributed's functions, a
    ProcessGroup's own method, torch.ops.c10d, the functional collectives), and asks
    `decide("namespace.op", func, args, kwargs)` for each: None lets the op run, a string
    refuses it (a RuntimeError with that message, which the judge turns into its hint).
    Wrapping torch.distributed's functions alone misses `_get_default_group().allreduce(...)`.
    The launcher's teardown runs `c10d.barrier` after the worker returns: `decide` lets it by."""
    from torch.utils._python_dispatch import TorchDispatchMode, _push_mode

    class CollectiveGuard(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func.namespace in COLLECTIVE_NAMESPACES:
                refused = decide(f"{func.namespace}.{func._opname}", func, args, kwargs)
                if refused is not None:
                    raise RuntimeError(refused)
            return func(*args, **kwargs)

    _push_mode(CollectiveGuard())


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
    `dist` without importing them. The backend is gloo unless `backend=` says otherwise: a judge
    checks on the CPU, on any machine. Returns what `launch` returns; raises its ValueError for
    a global that cannot be written out.
    """
    from helpers.launch import launch

    launch_kwargs.setdefault("backend", "gloo")  # a judge's ranks run on the CPU, GPU or not
    return launch(fn, world_size, args, prelude=_PRELUDE, **launch_kwargs)
