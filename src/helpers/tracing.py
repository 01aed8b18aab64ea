"""Source tracing for torch.compile: record the real call path and step through it.

Used by: notebook 01 (torch.compile entry); `helpers.landmarks` checks the stages of a recording.
CPU or GPU alike; Python 3.11+ (uses `code.co_qualname`). The recorder is `sys.setprofile`, which
watches only the calling thread: work done in other threads or processes (the C++ compiler
Inductor runs, or its pool of compile workers) is not recorded, only the Python calls in this
thread that start it or wait for it.

- `record_calls(fn, *args)` runs `fn` once and records which Python functions of chosen packages
  ran, as a tree of first entries (caller -> callee) with dotted names and source locations
  computed from the code objects (never typed). `record_compile(fn, *args, backend=...)` does
  the same for the first call of `torch.compile(fn)`: it drops Dynamo's cache entries for `fn`
  and turns off Inductor's FX graph cache and AOTAutograd's cache, so tracing, the backend,
  lowering and code generation run even after an earlier compile (a compiled C++ library that is
  already on disk may still be reused).
- `step_text(recording, i)` (pure, printable), `step_source(recording, i)` (the data) and
  `step_viewer(recording)` (a slider drawn in the browser by `helpers.viewers`, fed with
  `step_data`) show one step: dotted name, location, permalink and the first lines of its
  installed source; the viewer also draws where the step sits among the compile stages
  (`helpers.pictures.compile_stages_svg`).
- `RecordingBackend`: a `torch.compile` backend that keeps every FX `GraphModule` it receives;
  `op_counts` counts a graph's ops with `helpers.compile_tools.graph_ops`, named without memory
  addresses.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from types import CodeType, SimpleNamespace
from typing import Any

from helpers.compile_tools import graph_ops
from helpers.pictures import compile_stages_svg
from helpers.source import SourceView, package_root, permalink, source_view

__all__ = [
    "DEFAULT_PACKAGES",
    "Recording",
    "RecordingBackend",
    "Step",
    "record_calls",
    "record_compile",
    "step_source",
    "step_data",
    "step_text",
    "step_viewer",
]

DEFAULT_PACKAGES = ("torch._dynamo", "torch._functorch", "torch._inductor", "torch.fx")

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


# --------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """A function of the watched packages at its first entry from one chain of callers."""

    index: int  # position in first-entry (chronological) order
    name: str  # dotted: module + qualname, e.g. "torch._dynamo.convert_frame._compile"
    module: str
    qualname: str
    relpath: str  # path inside its repository, e.g. "torch/_dynamo/convert_frame.py"
    line: int  # first line of the definition in the installed file (from the code object)
    depth: int  # 0 for a step with no watched caller
    parent: int | None  # index of the watched caller at first entry
    code: CodeType = field(repr=False, compare=False)
    calls: int = field(default=1, repr=False, compare=False)  # entries during the recording

    @property
    def location(self) -> str:
        return f"{self.relpath}:{self.line}"


@dataclass
class Recording:
    """What `record_calls` saw: `steps` in first-entry order, printable as a tree."""

    steps: list[Step]
    packages: tuple[str, ...]
    result: Any = None  # what fn returned
    error: BaseException | None = None  # what fn raised (the recording stops there)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __getitem__(self, i: int) -> Step:
        return self.steps[i]

    def __repr__(self) -> str:
        err = f", error={type(self.error).__name__}" if self.error is not None else ""
        return f"Recording({len(self.steps)} steps of {', '.join(self.packages)}{err})"

    @property
    def names(self) -> list[str]:
        """Dotted names in first-entry order."""
        return [s.name for s in self.steps]

    def find(self, name_substring: str) -> list[Step]:
        """Every step whose dotted name contains `name_substring` (first-entry order)."""
        return [s for s in self.steps if name_substring in s.name]

    def first(self, name_substring: str) -> Step:
        """The first step whose dotted name contains `name_substring`; LookupError if none."""
        hits = self.find(name_substring)
        if not hits:
            raise LookupError(f"no recorded step's name contains {name_substring!r}")
        return hits[0]

    def children(self, i: int | None) -> list[Step]:
        """Steps first entered from step `i` (None: the roots)."""
        return [s for s in self.steps if s.parent == i]

    def path_to(self, i: int) -> list[Step]:
        """Step `i` and its watched callers, outermost first."""
        out = []
        j: int | None = i
        while j is not None:
            out.append(self.steps[j])
            j = self.steps[j].parent
        return out[::-1]

    def tree(
        self,
        max_depth: int | None = None,
        collapse: Iterable[str] = (),
        keep: str | Iterable[str | int] | None = None,
        locations: bool = True,
        marks: dict[int, str] | None = None,
    ) -> str:
        """The call tree as text (no addresses, no timings).

        max_depth: hide steps deeper than this. collapse: dotted-name prefixes whose callees are
        hidden (the line says how many). keep: regexes (searched in the dotted name) or step
        indices selecting the steps to show, together with their callers; others are hidden.
        marks: step index -> label appended to that line (e.g. a landmark stage).
        """
        collapse = tuple(collapse)
        marks = marks or {}
        shown: set[int] | None = None
        if keep is not None:
            wanted = [keep] if isinstance(keep, str) else list(keep)
            shown = set()
            for s in self.steps:
                if any(
                    s.index == w if isinstance(w, int) else re.search(w, s.name) for w in wanted
                ):
                    shown.update(p.index for p in self.path_to(s.index))
        children_of: dict[int | None, list[Step]] = {}
        for s in self.steps:
            children_of.setdefault(s.parent, []).append(s)

        def descendants(i: int) -> int:
            return sum(1 + descendants(c.index) for c in children_of.get(i, []))

        lines: list[str] = []

        def walk(parent: int | None) -> None:
            for s in children_of.get(parent, []):
                if shown is not None and s.index not in shown:
                    continue
                if max_depth is not None and s.depth > max_depth:
                    continue
                where = f"  ({s.location})" if locations else ""
                folded = s.name.startswith(collapse) if collapse else False
                hidden = descendants(s.index) if folded else 0
                more = f"  [+{hidden} callees]" if hidden else ""
                mark = f"  <- {marks[s.index]}" if s.index in marks else ""
                lines.append(f"{'  ' * s.depth}{s.name}{where}{more}{mark}")
                if not folded:
                    walk(s.index)

        walk(None)
        return "\n".join(lines)


def _watched_paths(packages: Sequence[str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """(folder prefixes, single files) of the watched packages; clear errors for missing ones."""
    dirs, files = [], set()
    for name in packages:
        module = sys.modules.get(name)
        if module is None:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                raise ModuleNotFoundError(
                    f"record_calls: there is no package named {name!r} to watch"
                )
            raise ImportError(
                f"record_calls: package {name!r} is not imported, so none of its functions can "
                f"run: `import {name}` first, or leave it out of packages="
            )
        path = getattr(module, "__file__", None)
        if path is None:
            raise ImportError(f"record_calls: {name!r} has no source files to watch")
        if hasattr(module, "__path__"):  # a package: every file under its folder
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
        else:
            files.add(os.path.abspath(path))
    return tuple(dirs), frozenset(files)


def record_calls(
    fn: Callable[..., Any],
    *args: Any,
    packages: Sequence[str] = DEFAULT_PACKAGES,
    max_depth: int | None = None,
    **kwargs: Any,
) -> Recording:
    """Run `fn(*args, **kwargs)` once and record the functions of `packages` that ran.

    A step is a function at its first entry from a given chain of watched callers (a calling
    context tree: later entries along the same chain only count in `Step.calls`); frames of
    other packages are transparent (a step's parent is its nearest watched caller), and imports
    triggered during the call (module bodies and all they run) are left out. If `fn` raises, the
    exception is re-raised carrying the partial recording as `err.recording`.
    """
    if isinstance(packages, str):
        packages = (packages,)
    watched_dirs, watched_files = _watched_paths(packages)
    steps: list[Step] = []
    step_of: dict[tuple[int | None, CodeType], int] = {}  # (caller step, code) -> step index
    is_watched: dict[CodeType, bool] = {}  # code object -> belongs to a watched package
    relpaths: dict[str, str] = {}
    # one entry per live Python frame: (index of the nearest watched step, suppressed?)
    stack: list[tuple[int | None, bool]] = []

    def profile_hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            parent, suppressed = stack[-1] if stack else (None, False)
            if suppressed:
                stack.append((parent, True))
                return
            if code.co_name == "<module>":  # an import: not part of the path being read
                stack.append((parent, True))
                return
            watched = is_watched.get(code)
            if watched is None:
                filename = code.co_filename
                watched = is_watched[code] = (
                    filename.startswith(watched_dirs) or filename in watched_files
                )
            if not watched:
                stack.append((parent, False))
                return
            key = (parent, code)
            index = step_of.get(key)
            if index is None:
                depth = 0 if parent is None else steps[parent].depth + 1
                if max_depth is not None and depth > max_depth:
                    stack.append((parent, True))
                    return
                index = step_of[key] = len(steps)
                filename = code.co_filename
                relpath = relpaths.get(filename)
                if relpath is None:
                    relpath = relpaths[filename] = package_root(filename)[1]
                module = frame.f_globals.get("__name__", "?")
                steps.append(
                    Step(
                        index=index,
                        name=f"{module}.{code.co_qualname}",
                        module=module,
                        qualname=code.co_qualname,
                        relpath=relpath,
                        line=code.co_firstlineno,
                        depth=depth,
                        parent=parent,
                        code=code,
                    )
                )
            else:
                steps[index].calls += 1
            stack.append((index, False))
        elif event == "return":
            if stack:  # frames that started before the recording return without a push
                stack.pop()

    recording = Recording(steps=steps, packages=tuple(packages))
    previous = sys.getprofile()
    sys.setprofile(profile_hook)
    try:
        recording.result = fn(*args, **kwargs)
    except BaseException as err:
        sys.setprofile(previous)
        recording.error = err
        try:
            err.recording = recording  # type: ignore[attr-defined]
            err.add_note(
                f"record_calls: {len(steps)} steps were recorded before the error "
                "(see err.recording)"
            )
        except (AttributeError, TypeError):
            pass
        raise
    finally:
        sys.setprofile(previous)
    return recording


def record_compile(
    fn: Callable[..., Any],
    *args: Any,
    backend: Any = "inductor",
    packages: Sequence[str] = DEFAULT_PACKAGES,
    max_depth: int | None = None,
    **compile_kwargs: Any,
) -> Recording:
    """Record the first call of `torch.compile(fn, backend=backend, **compile_kwargs)(*args)`.

    Dynamo's cache entries for `fn`'s code object (or a module's `forward`) are dropped first,
    and Inductor's FX graph cache and AOTAutograd's cache are off during the call, so tracing,
    the backend, lowering and code generation run even after an earlier compile warmed those
    caches (a compiled C++ library already on disk may still be loaded instead of rebuilt).
    """
    import torch
    import torch._dynamo
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "forward", None), "__code__", None)
    if code is not None:
        torch._dynamo.eval_frame.reset_code(code)
    compiled = torch.compile(fn, backend=backend, **compile_kwargs)
    with ExitStack() as stack:
        stack.enter_context(inductor_config.patch(fx_graph_cache=False))
        stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
        return record_calls(compiled, *args, packages=packages, max_depth=max_depth)


# --------------------------------------------------------------------------------------------
# Stepper
# --------------------------------------------------------------------------------------------


def _require_step(recording: Recording, i: int) -> Step:
    if len(recording) == 0:
        raise ValueError(
            "the recording is empty: no function of "
            f"{', '.join(recording.packages) or 'the watched packages'} ran during the call "
            "(a compiled function's second call takes the cached path; record its first call, "
            "e.g. after torch._dynamo.reset())"
        )
    if not -len(recording) <= i < len(recording):
        raise IndexError(f"step {i} does not exist: the recording has {len(recording)} steps")
    return recording[i]


def step_source(recording: Recording, i: int, lines: int = 15) -> SourceView | None:
    """The first `lines` lines of step `i`'s installed source; None if it has no source file."""
    step = _require_step(recording, i)
    try:
        view = source_view(step.code)
    except (TypeError, OSError):
        return None
    kept = view.code.splitlines()[:lines]
    last = view.first_line + len(kept) - 1
    return replace(
        view,
        name=step.name,
        code="\n".join(kept),
        last_line=last,
        url=permalink(view.relpath, view.package, view.first_line, last),
        excerpt=len(kept) < view.last_line - view.first_line + 1,
    )


def step_text(recording: Recording, i: int, lines: int = 15, numbered: bool = True) -> str:
    """Step `i` as text: dotted name, location, caller, permalink and start of its source.

    numbered=False leaves out the step's position in the recording (which depends on how much
    ran before it, e.g. a warm or cold on-disk cache), for output compared across runs.
    """
    step = _require_step(recording, i)
    i = step.index
    caller = recording[step.parent].name if step.parent is not None else "(no watched caller)"
    head = [step.name]
    if numbered:
        head.append(f"  step {i + 1} of {len(recording)}")
    head += [
        f"  defined at {step.location}, depth {step.depth}",
        f"  called from {caller}",
    ]
    view = step_source(recording, i, lines)
    if view is None:
        return "\n".join(head + ["  (no Python source: created at run time)"])
    return "\n".join(head + [f"  {view.url}", "", view.code])


def step_data(recording: Recording, i: int, lines: int = 15) -> dict[str, Any]:
    """What `step_viewer` shows at step `i`, as plain JSON: `index`, `name`, `url` (the
    permalink, "" without source), `head` (location and caller: `step_text`'s lines after the
    name), `body` (the start of its source) and `svg` (`helpers.pictures.compile_stages_svg` of
    its call path)."""
    step = _require_step(recording, i)
    view = step_source(recording, step.index, lines)
    head, _, body = step_text(recording, step.index, lines).partition("\n\n")
    head = head.partition("\n")[2]  # the name is the title already
    return {
        "index": step.index,
        "name": step.name,
        "url": view.url if view else "",
        "head": head,
        "body": body,
        "svg": compile_stages_svg(recording.path_to(step.index)),
    }


def step_viewer(
    recording: Recording, start: int = 0, lines: int = 15, steps: Sequence[int] | None = None
) -> Any:
    """A slider over steps of the recording, drawn in the browser
    (`helpers.viewers.CallPathViewer`): each step's `step_data` (its `step_text` under the
    diagram of the compile stages, `helpers.pictures.compile_stages_svg`, its stage
    highlighted), computed here.

    `steps`: the step indices the slider walks, in order (default: every step; a long recording
    is better cut, e.g. to the call paths of its landmarks: every step's data travels with the
    widget); `start` is a step index among them. It moves in JupyterLab and in the static book
    alike; its plain-text twin is `step_text` of `start`. Its DOM hooks for browser tests:
    `CallPathViewer.hooks`.
    """
    from helpers.viewers import CallPathViewer

    _require_step(recording, start)
    chosen = list(range(len(recording))) if steps is None else [int(i) for i in steps]
    for i in chosen:
        _require_step(recording, i)
    if start not in chosen:
        raise ValueError(f"start {start} is not among the viewer's steps")
    data = [step_data(recording, i, lines) for i in chosen]
    text = step_text(recording, start, lines)
    return CallPathViewer(data, start=chosen.index(start), text=text)


# --------------------------------------------------------------------------------------------
# Recording backend
# --------------------------------------------------------------------------------------------


def _target_name(target: Any) -> str:
    """A stable name for an FX node target: torch.sin, operator.add, aten.mul.Tensor."""
    import torch
    from torch.fx.node import _get_qualified_name

    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    try:
        name = _get_qualified_name(target)
    except Exception:  # noqa: BLE001 - any odd callable still gets a readable name
        module = getattr(target, "__module__", None) or "?"
        name = f"{module}.{getattr(target, '__qualname__', type(target).__name__)}"
    if name.startswith("_operator."):  # operator.add is _operator.add underneath
        name = name[1:]
    return _ADDRESS.sub("<address>", name)


def _describe_input(x: Any) -> str:
    import torch

    if isinstance(x, torch.Tensor):
        dtype = str(x.dtype).removeprefix("torch.")
        return f"{dtype}[{', '.join(str(d) for d in x.shape)}]"
    if isinstance(x, torch.SymInt | int):
        return f"int {x}"
    return type(x).__name__


class RecordingBackend:
    """A torch.compile backend that keeps each FX GraphModule it is handed.

    `RecordingBackend()` runs the graph as it is (like backend="eager");
    `RecordingBackend(inner="aot_eager")` (a name or a backend callable) delegates to it.
    """

    def __init__(self, inner: str | Callable[..., Any] | None = None) -> None:
        self.inner = inner
        self.graphs: list[Any] = []  # torch.fx.GraphModule, one per backend call
        self.inputs: list[list[str]] = []  # per call: "float32[8]"-style descriptions
        # per call: the class name of each example input ("Tensor", "FakeTensor", "SymInt")
        self.input_types: list[list[str]] = []

    def __call__(self, gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        self.inputs.append([_describe_input(x) for x in example_inputs])
        self.input_types.append([type(x).__name__ for x in example_inputs])
        if self.inner is None:
            return gm.forward
        inner = self.inner
        if isinstance(inner, str):
            from torch._dynamo.backends.registry import lookup_backend

            inner = lookup_backend(inner)
        return inner(gm, example_inputs)

    def __len__(self) -> int:
        return len(self.graphs)

    def reset(self) -> None:
        """Forget the graphs received so far."""
        self.graphs.clear()
        self.inputs.clear()
        self.input_types.clear()

    def op_counts(self, i: int = -1) -> dict[str, int]:
        """`helpers.compile_tools.graph_ops` of graph `i`, in graph order, with readable names.

        graph_ops counts the `call_function` and `call_method` nodes, naming each op from
        `str(node.target)`; for a Python callable in a Dynamo graph that is its repr
        (`<built-in method sin of type object ...>`), so here such a key becomes the callable's
        dotted name (`torch.sin`, `operator.mul`) and a method call `.name()`. ATen graphs keep
        graph_ops' names (`aten.mul.Tensor`).
        """
        gm = self.graphs[i]
        readable: dict[str, str] = {}
        for node in gm.graph.nodes:
            if node.op not in ("call_function", "call_method"):
                continue
            # the key graph_ops gives this node, asked of graph_ops itself (one node, one key)
            (key,) = graph_ops(SimpleNamespace(graph=SimpleNamespace(nodes=[node])))
            call_method = node.op == "call_method"
            readable[key] = f".{node.target}()" if call_method else _target_name(node.target)
        return {readable.get(op, op): n for op, n in graph_ops(gm).items()}

    def summary(self, code: bool = True) -> str:
        """Graph count, inputs, op counts and (optionally) gm.code of each graph; no addresses."""
        out = [f"{len(self.graphs)} graph(s) received"]
        for i, gm in enumerate(self.graphs):
            ops = ", ".join(f"{name} x{n}" for name, n in self.op_counts(i).items())
            out.append(f"graph {i}: inputs [{', '.join(self.inputs[i])}]")
            out.append(f"  ops: {ops or '(none)'}")
            if code:
                out.append(gm.code.strip("\n"))
        return _ADDRESS.sub("<address>", "\n".join(out))
