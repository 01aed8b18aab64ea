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
  frame while the reader's code runs. The refusals (`watching`) are the exercise's rules, and
  worded as such: an in-process check cannot see a process or a thread of the reader's own code
  started before it, nor a judge module patched in the kernel.
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
import re
import string
import sys
import textwrap
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.exercises.i18n import N_, current_language, language, tr

__all__ = [
    "Hint",
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
        self.look = look
        self.reveal = reveal
        self.counts = counts


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
    """`fn(*args)`, the reader's function on one case; whatever it raises (but a judge's own
    `Hint`, such as a dispatch mode's refusal) becomes the hint "{where}: your code raised
    {error}", naming the case."""
    try:
        return fn(*args)
    except Hint:
        raise
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

    What no in-process watch sees: a process started before the block, or a thread started
    before it that runs code of its own rather than a swapped function (a copy of the library,
    function objects made beforehand from its code objects), and a judge module patched in the
    kernel."""
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
    ok, message, _ = _judge(key, answer, attempt)
    return ok, message


def _judge(key: str, answer: Any, attempt: int) -> tuple[bool, str, bool]:
    """`judge`, and whether this answer counts as a try (False: untouched, or not checked)."""
    ex = _load(key)
    try:
        untouched = _untouched(answer)
    except Exception:  # an answer that cannot be inspected is judged as it is
        untouched = False
    if untouched:
        return False, tr(NOT_STARTED), False
    look = tr(ex.look) if ex.look else None
    reveal = tr(ex.reveal) if ex.reveal else None
    counts = True
    try:
        message = ex.judge(answer)
    except Hint as hint:
        parts = [str(hint)]
        look = hint.look or look
        reveal = hint.reveal or reveal
        counts = hint.counts
    except Exception as e:  # the reader's function raised: that is feedback too
        parts = [tr("your code raised {error}: {message}", error=type(e).__name__, message=e)]
    else:
        lines = [message] + ([tr(CHECKED, reveal=reveal)] if reveal else [])
        return True, "\n".join(lines), True
    if counts and attempt >= 2 and look:
        parts.append(tr(LOOK, look=look))
    if counts and attempt >= 3 and reveal:
        parts.append(tr(REVEAL, reveal=reveal))
    return False, "\n".join(parts), counts


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
    ok, message, counts = _judge(key, answer, attempt)
    if not ok and counts:
        _attempts[key] = attempt
    print(verdict(key, ok, message))


# --- graded assignments (tools/assign.py: nbgrader test cells) ---------------------------------

#: Points per exercise in a graded assignment, the one place they are decided (tools/assign.py
#: writes them into each test cell's nbgrader metadata): a coding exercise (the answer is a
#: function the student writes, whose judge runs hidden cases) is worth 2, any other 1.
POINTS = {"code": 2, "answer": 1}
#: The share of an exercise's points that a wrong answer earns when the judge's hint says it
#: fails "a hidden case": by the judges' convention it then passed the shown case (the judge
#: runs the prompt's case first), so it is half right. Any other wrong answer earns nothing.
HIDDEN_ONLY = 0.5
#: The msgid a hidden case's hint contains (in a judge's own message, or as a value filled in).
HIDDEN_CASE = N_("a hidden case")


def _field_pattern(template: str) -> re.Pattern:
    """A message template ("a hidden case ({case}): {problem}") as a pattern that finds it in a
    message made from it, whatever its fields were filled with."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(".*?")
    return re.compile("".join(parts), re.I | re.S)


def _hidden_case(message: str) -> bool:
    """Whether a wrong answer's hint is a hidden case's, in either language: the msgids that
    contain "a hidden case", as the current language writes them (an untranslated one stays
    English)."""
    templates = {HIDDEN_CASE}
    if current_language() == "zh":
        from helpers.exercises import i18n

        catalog = i18n._translations()
        templates |= {catalog[m] for m in catalog if HIDDEN_CASE in m.lower()}
    return any(_field_pattern(t).search(message) for t in templates)


def score(key: str, answer: Any) -> tuple[float, str]:
    """(fraction of the exercise's points, verdict) for `answer`: 1.0 when the judge says right,
    HIDDEN_ONLY when its hint says the answer fails only a hidden case, 0.0 otherwise (the
    untouched starter, any other wrong answer). The verdict is what `check` prints at a first
    try (the judge's hint, without the `look` and `reveal` steps); nothing is printed, and the
    hints of `check` do not step on. A judge whose own part could not run
    (`Hint(counts=False)`: a setup launch that failed) gives no score: RuntimeError, with its
    message, so that the grader runs it again."""
    ok, message, counts = _judge(key, answer, 1)
    if ok:
        fraction = 1.0
    elif not counts and message != tr(NOT_STARTED):
        raise RuntimeError(f"{key}: the check could not run, grade it again: {message}")
    else:
        fraction = HIDDEN_ONLY if counts and _hidden_case(message) else 0.0
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
