"""Live source display: read code from the installed packages, never from pasted copies.

Used by: every notebook (00-19). CPU or GPU alike.

`source_view(obj)` returns a `SourceView` (data, testable); `show_source(obj)` displays it as a
highlighted block headed by the dotted name, the path inside the package and a permalink pinned
to the installed build (torch: `torch.version.git_version`; other packages: their release tag).
Long functions can be cut to the lines around a pattern, so a notebook never types a line number:
if a torch upgrade removes the pattern, the cell fails loudly instead of showing the wrong lines.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "SourceView",
    "source_view",
    "show_source",
    "permalink",
    "resolve",
    "package_root",
    "file_view",
    "header_view",
    "PatternMissing",
    "SourceFileMissing",
]

# package -> (repository, how to name the installed revision)
_REPOS: dict[str, tuple[str, str]] = {
    "torch": ("https://github.com/pytorch/pytorch", "git"),
    "onnxscript": ("https://github.com/microsoft/onnxscript", "v{version}"),
    "onnx": ("https://github.com/onnx/onnx", "v{version}"),
    "onnxruntime": ("https://github.com/microsoft/onnxruntime", "v{version}"),
    "onnxruntime_extensions": ("https://github.com/microsoft/onnxruntime-extensions", "v{version}"),
    "netron": ("https://github.com/lutzroeder/netron", "v{version}"),
    "nbval": ("https://github.com/computationalmodelling/nbval", "{version}"),
}


@dataclass(frozen=True)
class SourceView:
    """A piece of installed source: what it is, where it lives, and the lines themselves."""

    name: str  # dotted name, e.g. "torch._dynamo.eval_frame.optimize"
    package: str  # top-level package, e.g. "torch"
    relpath: str  # path inside the repository, e.g. "torch/_dynamo/eval_frame.py"
    first_line: int  # 1-based, of the installed file (computed, never typed)
    last_line: int
    code: str
    url: str | None  # permalink pinned to the installed revision, None for local code
    excerpt: bool = False  # True when cut to the lines around a pattern

    @property
    def header(self) -> str:
        what = "excerpt of " if self.excerpt else ""
        lines = f"lines {self.first_line}-{self.last_line}"
        return f"{what}{self.name}  ({self.relpath}, {lines})"

    def _repr_markdown_(self) -> str:
        link = f" · [permalink]({self.url})" if self.url else ""
        what = "excerpt of " if self.excerpt else ""
        head = (
            f"{what}**`{self.name}`** · `{self.relpath}` "
            f"lines {self.first_line}-{self.last_line}{link}"
        )
        return f"{head}\n\n```python\n{self.code}\n```"

    def __repr__(self) -> str:  # what a terminal and nbval's text/plain see
        link = f"\n{self.url}" if self.url else ""
        return f"{self.header}{link}\n{self.code}"


class PatternMissing(ValueError, AssertionError):
    """A pattern a cell cuts the source by is not in the installed source (a ValueError, and an
    AssertionError because it is a failed claim: `pytest --nbval-lax` reports its message)."""


class SourceFileMissing(FileNotFoundError, AssertionError):
    """A file a cell reads (a header in the wheel, our C++) is not installed where expected;
    the message names it and the nearest files that are there."""


def resolve(dotted: str) -> Any:
    """Import `a.b.C.meth` from its dotted name (modules first, then attributes)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot import any prefix of {dotted!r}")


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, str):
        obj = resolve(obj)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    # functools.partial and onnxscript's traced/ONNX functions keep the Python function inside
    if not (inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj)):
        for attr in ("func", "function"):
            inner = getattr(obj, attr, None)
            if inspect.isroutine(inner):
                return inner
    return obj


def _dotted_name(obj: Any) -> str:
    if isinstance(obj, ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
    return f"{module}.{qual}"


def package_root(path: str | Path) -> tuple[str, str]:
    """(top-level package, path relative to the folder holding it) for an installed file."""
    path = Path(path).resolve()
    for entry in sorted({Path(p).resolve() for p in sys.path if p}, key=lambda p: -len(p.parts)):
        try:
            rel = path.relative_to(entry)
        except ValueError:
            continue
        if len(rel.parts) > 1 or rel.suffix == ".py":
            top = rel.parts[0].removesuffix(".py")
            if top == "helpers":  # our own package: show it as it sits in this repository
                return "helpers", str(Path("src") / rel)
            return top, rel.as_posix()
    return path.stem, path.name


def _revision(package: str) -> str | None:
    repo = _REPOS.get(package)
    if repo is None:
        return None
    if repo[1] == "git":
        import torch

        return torch.version.git_version
    module = sys.modules.get(package) or importlib.import_module(package)
    version = getattr(module, "__version__", None)
    if version is None:
        return None
    return repo[1].format(version=version.split("+")[0])


def permalink(relpath: str, package: str, first: int, last: int) -> str | None:
    """A link to lines `first`-`last` of `relpath` at the installed revision of `package`."""
    rev = _revision(package)
    if rev is None:
        return None
    return f"{_REPOS[package][0]}/blob/{rev}/{relpath}#L{first}-L{last}"


def _literal(pattern: str) -> str:
    """A regex read as the text it looks for (escapes and anchors dropped), to compare lines."""
    text = re.sub(r"\\[sSdDwWbB][*+?]?|[\^$]|\(\?[:!=]", " ", pattern)
    return re.sub(r"\\(.)", r"\1", text).strip()


def _closest_lines(lines: list[str], pattern: str, count: int = 3) -> list[str]:
    """The installed lines most like `pattern`: what the source says instead."""
    stripped = [line.strip() for line in lines if line.strip()]
    return difflib.get_close_matches(_literal(pattern), stripped, n=count, cutoff=0.3)


def _excerpt_bounds(
    lines: list[str],
    pattern: str | None,
    before: int,
    after: int,
    until: str | None,
    occurrence: int,
    where: str,
) -> tuple[int, int]:
    """[first, last) line indices of an excerpt: all lines without `pattern`; else `before`
    lines before its `occurrence`-th match to `after` lines after it, or to the first later line
    matching `until`. A pattern that is not there raises PatternMissing (a ValueError and an
    AssertionError) naming it, `where`, and the installed lines closest to it."""
    if pattern is None:
        return 0, len(lines)
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    if len(hits) < occurrence:
        closest = _closest_lines(lines, pattern)
        found = f"closest installed lines: {closest}" if closest else "no similar line"
        raise PatternMissing(
            f"pattern {pattern!r} occurs {len(hits)} time(s) in {where}, occurrence "
            f"{occurrence} was asked for: the installed source differs from what this cell "
            f"expects ({len(lines)} lines searched; {found})"
        )
    hit = hits[occurrence - 1]
    if until is None:
        return max(hit - before, 0), min(hit + after + 1, len(lines))
    ends = [i for i in range(hit + 1, len(lines)) if re.search(until, lines[i])]
    if not ends:
        closest = _closest_lines(lines[hit + 1 :], until)
        found = f"closest later lines: {closest}" if closest else "no similar later line"
        raise PatternMissing(
            f"pattern {until!r} not found after {pattern!r} in {where}: the excerpt was to end "
            f"there ({len(lines) - hit - 1} lines after the match searched; {found})"
        )
    return max(hit - before, 0), ends[0] + 1


def source_view(
    obj: Any,
    pattern: str | None = None,
    *,
    before: int = 2,
    after: int = 12,
    until: str | None = None,
    occurrence: int = 1,
) -> SourceView:
    """The source of `obj` (function, method, class, module or dotted name) as a SourceView.

    With `pattern` (a regex), keep only `before` lines before its `occurrence`-th match and
    `after` lines after it, or, with `until` (a regex), up to and including the first line after
    the match that matches `until`. A pattern that is not found raises ValueError naming it.
    """
    # follow functools.wraps chains to the function the code is in: inspect.getsourcelines
    # does, inspect.getsourcefile does not, and the path and permalink must match the lines
    target = inspect.unwrap(_unwrap(obj))
    try:
        lines, start = inspect.getsourcelines(target)
        path = inspect.getsourcefile(target)
    except (TypeError, OSError) as err:
        raise TypeError(
            f"{_dotted_name(target)} has no Python source (it is implemented in C/C++ or "
            f"was created at run time): {err}"
        ) from None
    start = max(start, 1)  # modules report line 0
    name = _dotted_name(target)
    package, relpath = package_root(path)
    where = f"{name} ({relpath})"
    first, last = _excerpt_bounds(lines, pattern, before, after, until, occurrence, where)
    code = textwrap.dedent("".join(lines[first:last])).rstrip("\n")
    first_line, last_line = start + first, start + last - 1
    return SourceView(
        name=name,
        package=package,
        relpath=relpath,
        first_line=first_line,
        last_line=last_line,
        code=code,
        url=permalink(relpath, package, first_line, last_line),
        excerpt=pattern is not None,
    )


def show_source(obj: Any, pattern: str | None = None, **kwargs: Any) -> None:
    """Display `source_view(obj, pattern, **kwargs)`: highlighted in Jupyter, text elsewhere."""
    view = source_view(obj, pattern, **kwargs)
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(view)
            return
    except ImportError:
        pass
    print(repr(view))


def file_view(
    path: str | Path,
    relpath: str,
    package: str,
    pattern: str | None = None,
    *,
    before: int = 2,
    after: int = 12,
    until: str | None = None,
) -> SourceView:
    """A SourceView of (an excerpt of) a non-Python file: a C++ header in the wheel, our C++.

    `relpath` is the file's path in its repository (the permalink's path); `package` picks the
    revision as for `source_view` (no permalink for a package without a repository entry).
    """
    path = Path(path)
    if not path.is_file():
        raise _missing(path, relpath, "file_view")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first, last = _excerpt_bounds(lines, pattern, before, after, until, 1, relpath)
    return SourceView(
        name=relpath.rsplit("/", 1)[-1],
        package=package,
        relpath=relpath,
        first_line=first + 1,
        last_line=last,
        code=textwrap.dedent("".join(lines[first:last])).rstrip("\n"),
        url=permalink(relpath, package, first + 1, last),
        excerpt=pattern is not None,
    )


def header_view(
    relpath: str, pattern: str, before: int = 2, after: int = 6, until: str | None = None
) -> SourceView:
    """Lines around the first match of `pattern` in a C++ header shipped inside the torch wheel,
    down to the first line after it matching `until` when given (as `file_view`).

    `relpath` is the path in the PyTorch repository (`torch/csrc/...`); the wheel keeps the same
    file under `torch/include/`, so the permalink points at the lines shown.
    """
    import torch

    include = Path(torch.__file__).parent / "include"
    path = include / relpath
    if not path.is_file():
        raise _missing(path, relpath, f"header_view (torch {torch.__version__} wheel)", include)
    return file_view(path, relpath, "torch", pattern, before=before, after=after, until=until)


def _missing(path: Path, relpath: str, who: str, root: Path | None = None) -> SourceFileMissing:
    """The error for a file that is not there: what was expected, and the nearest files that
    are: the same name anywhere under `root` (a header moved inside the wheel) and close names
    in the deepest folder of its path that exists, named by their paths relative to `root`
    (default: the folder `relpath` is relative to; then only that deepest folder is searched)."""
    search = root is not None
    if root is None:
        n = len(Path(relpath).parts)
        inside = path.as_posix().endswith("/" + Path(relpath).as_posix())
        root = path.parents[n - 1] if inside else path.parent
    folder = path.parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent

    def shown(p: Path) -> str:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return p.as_posix()

    found = []
    same_name = sorted(shown(p) for p in (root.rglob(path.name) if search else []))
    if same_name:
        found.append(f"the same name at {same_name[:5]}")
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    nearby = [shown(folder / n) for n in difflib.get_close_matches(path.name, names, 5, 0.5)]
    if nearby:
        found.append(f"close names in {shown(folder)}/: {nearby}")
    if not found:
        found.append(f"nothing with a similar name in {shown(folder)}/")
    return SourceFileMissing(
        f"{who}: expected the file {relpath!r}, it is not installed; found {'; '.join(found)}"
    )
