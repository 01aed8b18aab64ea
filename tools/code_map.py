"""The map of the code, read from the code: notebook sections -> helpers -> tests, judges, catalogs.

    python tools/code_map.py           # write docs/code_map.md (what `make map` runs)
    python tools/code_map.py --check   # exit 1 if docs/code_map.md differs from what the code gives

Nothing here is a hand list. Every fact is found by parsing:

- the notebooks `notebooks/NN_*.ipynb`: each `## ` markdown heading starts a section; the code
  cells are parsed with `ast` (IPython `%` and `!` lines blanked), cell after cell, so that an
  import (`import helpers.allreduce as ar`, `from helpers.ddp import x`, `from helpers import
  sharded`) gives the names of the later cells their meaning. The first argument of
  `show_source(...)` is **shown**; every other reference to a helper's top-level function or
  class (a call, or a name passed on, as to `launch(worker, ...)`) is **used**;
- the tests `tests/test_*.py` and the judges `src/helpers/exercises/nbNN.py` the same way, by
  `ast` names and attributes after their imports (and dotted `"helpers.x.name"` strings);
- the Chinese catalogs `locale/zh/NN_*.po`: their `#:` lines name the English cell of each
  entry (`notebooks/NN_*.ipynb:<cell id>`). Code cells have no entry; the entries listed for a
  definition are the markdown cells just before each code cell that shows it (the prose a change
  of the excerpt would make stale), where the catalog has them;
- everything else that could keep a definition alive (the helper modules themselves, the other
  files of `tests/`, `benchmarks/`, `tools/`, `solutions/`, `book/`), for the "used by nothing"
  list.

The modules mapped are every `.py` of `src/helpers/` except the judges (they are a column).
The summary counts the definitions shown and used, and follows references through the helpers'
own definitions from what runs (notebooks, judges, benchmarks, tools, solutions, the book, and
module-level code): a definition no reference reaches is listed with what keeps it alive (a
registering decorator, or its name in a string of code) or as referenced by nothing at all, and a
definition reached only from tests as such. None of it deletes anything.
`used_by_notebooks(map)` gives, per module, the notebooks that show or use it: what
tests/test_code_map.py holds each docstring's "Used by" line to.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
HELPERS = SRC / "helpers"
OUT = ROOT / "docs" / "code_map.md"
SHOW = ("helpers.source", "show_source")
JUDGE = re.compile(r"nb\d\d\.py")
DOTTED = re.compile(r"helpers(\.\w+)+")
OPENING = "(before the first section)"
# a topic package `helpers/<topic>/`: the lesson (what the notebook shows) and its harness
TOPIC_PARTS = ("lesson", "harness")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_judge(path: Path) -> bool:
    return path.parent == HELPERS / "exercises" and bool(JUDGE.fullmatch(path.name))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    defs: list[str]  # top-level functions and classes, in source order
    reexports: dict[str, str]  # a name imported at top level -> the dotted name it stands for


def load_modules() -> dict[str, Module]:
    modules = {}
    for path in sorted(HELPERS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        defs = [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
        aliases: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                add_import(node, aliases, package)
        modules[name] = Module(name, path, tree, defs, aliases)
    return modules


def add_import(node: ast.Import | ast.ImportFrom, aliases: dict[str, str], package: str) -> None:
    """Record what the names bound by one import statement stand for (helpers names only)."""
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] != "helpers":
                continue
            if a.asname:
                aliases[a.asname] = a.name
            else:
                aliases["helpers"] = "helpers"
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([base] if base else [])])
    if base.split(".")[0] != "helpers":
        return
    for a in node.names:
        if a.name != "*":
            aliases[a.asname or a.name] = f"{base}.{a.name}"


class Resolver:
    def __init__(self, modules: dict[str, Module]):
        self.modules = modules

    def resolve(self, dotted: str, depth: int = 0) -> tuple[str, str | None] | None:
        """(module, definition) for a dotted helpers name; (module, None) for a module itself."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            mod = ".".join(parts[:i])
            if mod not in self.modules:
                continue
            if i == len(parts):
                return mod, None
            name = parts[i]
            m = self.modules[mod]
            if name in m.defs:
                return mod, name
            target = m.reexports.get(name)
            if target and depth < 10:
                return self.resolve(".".join([target, *parts[i + 1 :]]), depth + 1)
            return None
        return None


def chain(node: ast.AST) -> list[str] | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(names)]
    return None


class Refs(ast.NodeVisitor):
    """Collect the helpers definitions a piece of code shows and uses, given its aliases."""

    def __init__(self, resolver: Resolver, aliases: dict[str, str], package: str = ""):
        self.resolver = resolver
        self.aliases = aliases
        self.package = package
        self.shown: set[tuple[str, str | None]] = set()
        self.used: set[tuple[str, str | None]] = set()

    def target(self, node: ast.AST) -> tuple[str, str | None] | None:
        names = chain(node)
        if not names or names[0] not in self.aliases:
            return None
        return self.resolver.resolve(".".join([self.aliases[names[0]], *names[1:]]))

    def visit_Import(self, node: ast.Import) -> None:
        add_import(node, self.aliases, self.package)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        add_import(node, self.aliases, self.package)

    def visit_Call(self, node: ast.Call) -> None:
        if node.args and self.target(node.func) == SHOW:
            first = self.target(node.args[0])
            if first:
                self.shown.add(first)
                self.visit(node.func)
                for arg in node.args[1:]:
                    self.visit(arg)
                for kw in node.keywords:
                    self.visit(kw)
                return
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        found = self.target(node)
        if found:
            self.used.add(found)
        else:
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        found = self.target(node)
        if found:
            self.used.add(found)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            found = self.resolver.resolve(node.value)
            if found:
                self.used.add(found)


def file_refs(resolver: Resolver, path: Path) -> Refs:
    refs = Refs(resolver, {})
    refs.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return refs


def own_refs(module: Module) -> set[str]:
    """The module's definitions referred to by its own code outside their own bodies."""
    found = set()
    for stmt in module.tree.body:
        own = getattr(stmt, "name", None)
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in module.defs and node.id != own:
                found.add(node.id)
    return found


def cell_code(cell: dict) -> str:
    src = "".join(cell["source"])
    return "\n".join("" if line.lstrip()[:1] in ("%", "!") else line for line in src.splitlines())


@dataclass
class Section:
    title: str
    shown: set[tuple[str, str | None]] = field(default_factory=set)
    used: set[tuple[str, str | None]] = field(default_factory=set)


@dataclass
class Notebook:
    number: str
    path: Path
    title: str
    sections: list[Section]
    # (module, definition) -> the markdown cell ids just before the cells that show it
    shown_after: dict[tuple[str, str | None], set[str]]


def read_notebook(resolver: Resolver, path: Path) -> Notebook:
    nb = json.loads(path.read_text(encoding="utf-8"))
    title = path.stem
    sections = [Section(OPENING)]
    aliases: dict[str, str] = {}
    shown_after: dict[tuple[str, str | None], set[str]] = {}
    last_markdown = None
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            last_markdown = cell["id"]
            for line in src.splitlines():
                if line.startswith("# ") and title == path.stem:
                    title = line[2:].strip()
                if line.startswith("## "):
                    sections.append(Section(line[3:].strip()))
                    break
            continue
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse(cell_code(cell), filename=f"{rel(path)}:{cell['id']}")
        except SyntaxError as exc:
            raise SystemExit(f"{rel(path)} cell {cell['id']}: not Python: {exc}") from exc
        refs = Refs(resolver, aliases)
        refs.visit(tree)
        sections[-1].shown |= refs.shown
        sections[-1].used |= refs.used
        for key in refs.shown:
            if last_markdown is not None:
                shown_after.setdefault(key, set()).add(last_markdown)
    if not sections[0].shown and not sections[0].used:
        sections.pop(0)
    return Notebook(path.name[:2], path, title, sections, shown_after)


def catalog_cells(number: str) -> set[str]:
    ids = set()
    for po in sorted((ROOT / "locale" / "zh").glob(f"{number}_*.po")):
        for m in re.finditer(r"^#: .*$", po.read_text(encoding="utf-8"), re.M):
            for ref in m.group(0)[3:].split():
                path, _, cell = ref.rpartition(":")
                if re.fullmatch(rf"notebooks/{number}_[^/]*\.ipynb", path):
                    ids.add(cell)
    return ids


@dataclass
class CodeMap:
    modules: dict[str, Module]
    notebooks: list[Notebook]
    # (module, definition or None) -> sets of names
    shown: dict[tuple[str, str | None], set[str]]
    used: dict[tuple[str, str | None], set[str]]
    tests: dict[tuple[str, str | None], set[str]]
    judges: dict[tuple[str, str | None], set[str]]
    zh: dict[tuple[str, str | None], set[str]]
    other: dict[tuple[str, str | None], set[str]]
    # definition -> the definitions its body names; and what module-level code names
    edges: dict[tuple[str, str], set[tuple[str, str | None]]] = field(default_factory=dict)
    module_level: set[tuple[str, str | None]] = field(default_factory=set)

    def mapped(self) -> list[str]:
        return sorted(m for m, mod in self.modules.items() if not is_judge(mod.path))


def build() -> CodeMap:
    modules = load_modules()
    resolver = Resolver(modules)
    shown: dict = {}
    used: dict = {}
    tests: dict = {}
    judges: dict = {}
    zh: dict = {}
    other: dict = {}

    def add(table: dict, keys, who: str) -> None:
        for key in keys:
            table.setdefault(key, set()).add(who)

    notebooks = [
        read_notebook(resolver, p) for p in sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    ]
    for nb in notebooks:
        cells = catalog_cells(nb.number)
        for section in nb.sections:
            add(shown, section.shown, nb.number)
            add(used, section.used, nb.number)
        for key, ids in nb.shown_after.items():
            entries = {f"{nb.number}:{i}" for i in ids & cells}
            if entries:
                zh.setdefault(key, set()).update(entries)
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        refs = file_refs(resolver, path)
        add(tests, refs.used | refs.shown, path.stem)
    for name, mod in sorted(modules.items()):
        if is_judge(mod.path):
            refs = file_refs(resolver, mod.path)
            add(judges, refs.used | refs.shown, mod.path.stem)
        else:
            package = name if mod.path.name == "__init__.py" else name.rpartition(".")[0]
            refs = Refs(resolver, {}, package)
            refs.visit(mod.tree)
            add(other, {k for k in refs.used | refs.shown if k[0] != name}, name)
            add(other, {(name, d) for d in own_refs(mod)}, name)
    for folder, pattern in (
        ("tests", "*.py"),
        ("benchmarks", "*.py"),
        ("tools", "*.py"),
        ("solutions", "*.py"),
        ("book", "*.py"),
    ):
        for path in sorted((ROOT / folder).rglob(pattern)):
            if folder == "tests" and path.name.startswith("test_"):
                continue
            if path == Path(__file__).resolve():
                continue
            refs = file_refs(resolver, path)
            add(other, refs.used | refs.shown, rel(path))
    edges: dict = {}
    module_level: set = set()
    for name, mod in sorted(modules.items()):
        if is_judge(mod.path):
            continue
        package = name if mod.path.name == "__init__.py" else name.rpartition(".")[0]
        base = {**mod.reexports, **{d: f"{name}.{d}" for d in mod.defs}}
        for stmt in mod.tree.body:
            refs = Refs(resolver, dict(base), package)
            refs.visit(stmt)
            found = refs.used | refs.shown
            if getattr(stmt, "name", None) in mod.defs:
                edges[(name, stmt.name)] = found
            else:
                module_level |= found
    return CodeMap(modules, notebooks, shown, used, tests, judges, zh, other, edges, module_level)


ROOT_FOLDERS = ("benchmarks/", "tools/", "solutions/", "book/")


def reached(cmap: CodeMap, alive: dict) -> set[tuple[str, str | None]]:
    """What runs when the notebooks, judges, benchmarks, tools, solutions and book run: their
    references, followed through the helpers' own code (module-level code counted as run, and
    definitions kept alive by a registration or a string)."""
    todo = set(cmap.shown) | set(cmap.used) | set(cmap.judges) | cmap.module_level | set(alive)
    todo |= {k for k, who in cmap.other.items() if any(w.startswith(ROOT_FOLDERS) for w in who)}
    seen: set = set()
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        todo |= cmap.edges.get(key, set()) - seen
    return seen


def used_by_notebooks(cmap: CodeMap) -> dict[str, set[str]]:
    """Per mapped module: the notebooks that show or use it (a definition, or the module); a
    topic package counts what its lesson and harness count."""
    out: dict[str, set[str]] = {m: set() for m in cmap.mapped()}
    for table in (cmap.shown, cmap.used):
        for (mod, _), nbs in table.items():
            if mod in out:
                out[mod] |= nbs
            package, _, part = mod.rpartition(".")
            if part in TOPIC_PARTS and package in out:
                out[package] |= nbs
    return out


def natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def fmt(names) -> str:
    return ", ".join(sorted(names, key=natural)) if names else "·"


def label(key: tuple[str, str | None]) -> str:
    mod, name = key
    short = mod.removeprefix("helpers.") if mod != "helpers" else mod
    return f"`{short}.{name}`" if name else f"`{short}` (the module)"


def docstring_nodes(tree: ast.Module) -> set[int]:
    """The string constants that are docstrings or `__all__` entries."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
        # `__all__` names what a module exports, not what runs
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                ids |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Constant)}
    return ids


def kept_alive(cmap: CodeMap, key: tuple[str, str]) -> str | None:
    """Why a definition no reference reaches still runs: a registering decorator, or a string."""
    mod, name = key
    node = next(n for n in cmap.modules[mod].tree.body if getattr(n, "name", None) == name)
    for dec in getattr(node, "decorator_list", []):
        text = ast.unparse(dec)
        if "register" in text:
            return f"registered by `@{text}`"
    word = re.compile(rf"\b{re.escape(name)}\b")
    trees = [(m.name, m.tree) for m in cmap.modules.values()]
    trees += [
        (rel(p), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(ROOT.glob("tests/*.py"))
    ]
    for where, tree in trees:
        skip = docstring_nodes(tree)
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and id(n) not in skip
                and word.search(n.value)
            ):
                return f"named in a string (not a docstring, not `__all__`) in `{where}`"
    return None


def summary(cmap: CodeMap) -> tuple[list, dict, dict, list]:
    defs = [(m, d) for m in cmap.mapped() for d in cmap.modules[m].defs]
    tables = (cmap.shown, cmap.used, cmap.tests, cmap.judges, cmap.other)
    unreferenced = [k for k in defs if not any(k in t for t in tables)]
    alive = {k: why for k in unreferenced if (why := kept_alive(cmap, k))}
    unused = sorted(k for k in unreferenced if k not in alive)
    live = reached(cmap, alive)
    tests_only = sorted(k for k in defs if k not in live and k not in unused)
    figures = {
        "modules": len(cmap.mapped()),
        "definitions": len(defs),
        "shown": sum(k in cmap.shown for k in defs),
        "used": sum(k in cmap.used for k in defs),
        "reached": sum(k in cmap.shown or k in cmap.used for k in defs),
        "tested": sum(k in cmap.tests for k in defs),
        "alive": len(alive),
        "unused": len(unused),
        "tests_only": len(tests_only),
    }
    return unused, alive, figures, tests_only


EXCERPT_HEADER = re.compile(r"\((src/helpers/[\w/]+\.py), lines (\d+)-(\d+)\)")


def shown_lines(notebooks: list[Notebook]) -> dict[str, set[int]]:
    """Per file of ours: the line numbers the notebooks' stored excerpts show, read from the
    excerpt headers (`(src/helpers/x/lesson.py, lines a-b)`) in their outputs' text."""
    out: dict[str, set[int]] = {}
    for nb in notebooks:
        cells = json.loads(nb.path.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            for output in cell.get("outputs", []):
                texts = [output.get("text", "")]
                texts += [v for k, v in output.get("data", {}).items() if k == "text/plain"]
                for text in texts:
                    text = "".join(text) if isinstance(text, list) else text
                    for path, a, b in EXCERPT_HEADER.findall(text):
                        out.setdefault(path, set()).update(range(int(a), int(b) + 1))
    return out


EXCERPT_NAME = re.compile(r"(helpers\.[\w.]+)  \(src/helpers/[\w/]+\.py, lines \d+-\d+\)")


def show_order(notebooks: list[Notebook]) -> list[tuple[str, str]]:
    """(module, top-level definition) in the order the notebooks first show them: the stored
    excerpts' headers (`helpers.x.lesson.name  (src/..., lines a-b)`), notebook by notebook,
    cell by cell, output by output. A method's excerpt counts for its class."""
    seen: list[tuple[str, str]] = []
    for nb in notebooks:
        for cell in json.loads(nb.path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                text = output.get("text", "") or output.get("data", {}).get("text/plain", "")
                text = "".join(text) if isinstance(text, list) else text
                for dotted in EXCERPT_NAME.findall(text):
                    module, _, rest = dotted.partition(".lesson.")
                    if rest:
                        key = (f"{module}.lesson", rest.split(".")[0])
                        if key not in seen:
                            seen.append(key)
    return seen


def lesson_rows(cmap: CodeMap) -> list[tuple[str, int, int, int, int]]:
    """(file, lines, definitions, defined lines shown by some excerpt, those definitions' lines)
    per lesson: how much of what a reader opens the notebooks really show."""
    seen = shown_lines(cmap.notebooks)
    rows = []
    for name in cmap.mapped():
        if not name.endswith(".lesson"):
            continue
        mod = cmap.modules[name]
        path = rel(mod.path)
        body = set()
        for stmt in mod.tree.body:
            if getattr(stmt, "name", None) in mod.defs:
                first = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
                body.update(range(first, stmt.end_lineno + 1))
        total = len(mod.path.read_text(encoding="utf-8").splitlines())
        rows.append((path, total, len(mod.defs), len(body & seen.get(path, set())), len(body)))
    return rows


def render(cmap: CodeMap) -> str:
    unused, alive, f, tests_only = summary(cmap)
    lines = [
        "# Map of the code",
        "",
        "<!-- Generated by `python tools/code_map.py` (`make map`): do not edit. -->",
        "",
        "Generated from the code by `python tools/code_map.py` (`make map`); do not edit it by",
        "hand: tests/test_code_map.py fails when it is stale. How each column is found is in",
        "that file's docstring: **shown** is the first argument of `show_source(...)` in a",
        "notebook's code cell, **used** any other reference in a code cell (a call, or a name",
        "passed on, as a worker to `launch`); **tests** are `tests/test_*.py`, **judges**",
        "`src/helpers/exercises/nbNN.py`; **zh** lists `NN:<cell id>` of the catalog entries",
        "(`locale/zh/NN_*.po`) of the markdown cell just before each cell that shows the",
        "definition; **other** is the rest of the code that names it (the module itself, other",
        "helper modules, the other files of `tests/`, `benchmarks/`, `tools/`, `solutions/`,",
        "`book/`).",
        "",
        "## Summary",
        "",
        f"- modules mapped (`src/helpers/`, the judges excepted): {f['modules']}",
        f"- top-level functions and classes: {f['definitions']}",
        f"- shown by some notebook: {f['shown']}",
        f"- used by some notebook: {f['used']}",
        f"- shown or used by some notebook: {f['reached']}",
        f"- named by some test (`tests/test_*.py`): {f['tested']}",
        f"- reached by no name `ast` can follow, kept alive otherwise: {f['alive']}",
    ]
    lines += [f"  - {label(k)}: {why}" for k, why in sorted(alive.items())]
    lines += [f"- referenced by nothing at all (candidates for dead code): {f['unused']}"]
    lines += [f"  - {label(k)}" for k in unused]
    lines += [
        "- run by no notebook, judge, benchmark, tool or solution, even through other helpers"
        f" (reached only from tests and test workers, or from nothing that runs): {f['tests_only']}"
    ]
    for k in tests_only:
        who = sorted(cmap.tests.get(k, set()) | cmap.other.get(k, set()), key=natural)
        lines.append(f"  - {label(k)}: {fmt(who)}")
    lines.append("")
    rows = lesson_rows(cmap)
    lines += [
        "## Lessons",
        "",
        "A topic package's `lesson.py` is what its notebook shows (CONTRIBUTING, \"Helper",
        'modules"). **lines shown** counts the lines of its definitions that some stored excerpt',
        "shows (the excerpts' `lines a-b` headers in the notebooks' outputs), out of all the",
        "lines of its definitions; the rest are in definitions the notebook names without",
        "showing every line (an excerpt cut at a pattern) or that a shown one calls.",
        "",
        "| lesson | lines | definitions | lines shown |",
        "|---|---|---|---|",
    ]
    for path, total, defs, seen, body in rows:
        lines.append(f"| `{path}` | {total} | {defs} | {seen} of {body} ({seen / body:.0%}) |")
    if rows:
        seen_all, body_all = sum(r[3] for r in rows), sum(r[4] for r in rows)
        lines.append(
            f"| all {len(rows)} | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | "
            f"{seen_all} of {body_all} ({seen_all / body_all:.0%}) |"
        )
    lines.append("")
    lines += ["## Notebooks", ""]
    for nb in cmap.notebooks:
        lines += [f"### {nb.title}", "", f"`{rel(nb.path)}`", ""]
        for s in nb.sections:
            parts = []
            if s.shown:
                parts.append("shown " + ", ".join(sorted(label(k) for k in s.shown)))
            if s.used - s.shown:
                parts.append("used " + ", ".join(sorted(label(k) for k in s.used - s.shown)))
            lines.append(f"- **{s.title}**: " + ("; ".join(parts) if parts else "·"))
        lines.append("")
    lines += ["## Modules", ""]
    by_nb = used_by_notebooks(cmap)
    for name in cmap.mapped():
        mod = cmap.modules[name]
        lines += [
            f"### `{name}`",
            "",
            f"`{rel(mod.path)}`; shown or used by notebooks: {fmt(by_nb[name])}",
            "",
        ]
        whole = (name, None)
        if whole in cmap.shown or whole in cmap.used:
            lines += [
                f"The module itself: shown by {fmt(cmap.shown.get(whole, ()))}, "
                f"used by {fmt(cmap.used.get(whole, ()))}.",
                "",
            ]
        if not mod.defs:
            lines += ["No top-level functions or classes.", ""]
            continue
        lines += [
            "| definition | shown | used | tests | judges | zh | other |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in mod.defs:
            k = (name, d)
            cols = [
                fmt(t.get(k, ()))
                for t in (cmap.shown, cmap.used, cmap.tests, cmap.judges, cmap.zh, cmap.other)
            ]
            lines.append(f"| `{d}` | " + " | ".join(cols) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = render(build())
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{rel(OUT)} is stale: run `make map`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {rel(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
