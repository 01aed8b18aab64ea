"""docs/plans.md: a lesson plan per course path, every cell-precise claim of it checked.

Each course path of notebooks/course.toml has a section in docs/plans.md (its heading is the
path's heading) holding one table, a row per time slot: the minutes, the notebook, the section
(the heading of the notebook's `#`/`##` section the row's cells lie in), the cells by id, each
after its mode (`live`: run in class; `show`: taught from its stored output; `aloud`: markdown
the instructor presents; `skim`: markdown the class reads silently), the exercises done in class,
and what to cut when time is short. A cell the plan does not name is skipped in class. Checked
here, without executing anything (a few seconds):

- every cell id exists in its notebook, in the row's section, named once, in notebook order;
- the rows run from minute 0 to the path's length without a gap, and each row's minutes cover
  its cost at the pace docs/plans.md states (the constants below);
- no cell run live loads a name (the AST of the code cells: loaded and not bound before in the
  cell; a function's body counts at its definition) whose last binding before it (an
  assignment, an import, a def, a loop target, a subscript or attribute store, a mutating call
  such as `.append`) is in a cell the plan shows or skips: the NameError an instructor met when
  skipping 16's `a16c0032` cannot happen in any plan, nor with the cuts applied;
- the numbers table says what the plans add up to; docs/zh/plans.md is the same plan (the
  Chinese notebooks' headings) and records the hash of the English page it translates;
- each course path is described by one text (tools/course.py `path_line`) in docs/plans.md,
  docs/teaching.md, README.md and their Chinese twins; the run times in the plans and in the
  guide's path table come from the guide's "Run times" table;
- docs/teaching.md has a question to ask and a struggle for every notebook, each pointing at a
  cell that exists; a struggle's hint is a judge's own words for one of `WRONG`'s answers, and an
  error quoted from a notebook is in that cell's stored output.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tools import course as C

ROOT = Path(__file__).resolve().parents[1]
PLANS = {"en": ROOT / "docs" / "plans.md", "zh": ROOT / "docs" / "zh" / "plans.md"}
TEACHING = {"en": ROOT / "docs" / "teaching.md", "zh": ROOT / "docs" / "zh" / "teaching.md"}
README = {"en": ROOT / "README.md", "zh": ROOT / "README.zh.md"}
COURSE = C.load()

#: the pace the plans are costed at; docs/plans.md "How the minutes are counted" states it
ALOUD_WPM = 130  # words a minute of prose the instructor presents
SKIM_WPM = 200  # words a minute of prose the class reads silently
CELL_MIN = 1.0  # a code cell run live or taught from its stored output, with its output read
EXERCISE_MIN = 8.0  # an exercise in pairs: read, answer, check, one pair says why
CODING_MIN = 15.0  # an exercise whose answer is a function the student writes
SWITCH_MIN = 1.0  # opening a notebook: restart the kernel, run its setup cell
PACE = {
    "en": [
        f"{ALOUD_WPM} words a minute",
        f"{SKIM_WPM} words a minute",
        f"{CELL_MIN:g} minute",
        f"{EXERCISE_MIN:g} minutes",
        f"{CODING_MIN:g} minutes",
    ],
    "zh": [
        f"每分钟 {ALOUD_WPM} 词",
        f"每分钟 {SKIM_WPM} 词",
        f"{CELL_MIN:g} 分钟",
        f"{EXERCISE_MIN:g} 分钟",
        f"{CODING_MIN:g} 分钟",
    ],
}
MODES = {
    "en": {"live": "live", "show": "show", "aloud": "aloud", "skim": "skim"},
    "zh": {"现场": "live", "存储": "show", "讲解": "aloud", "浏览": "skim"},
}
CODE_MODES = ("live", "show")
TEXT_MODES = ("aloud", "skim")
BUILTINS = set(dir(builtins)) | {"display", "get_ipython", "In", "Out"}
MUTATORS = {"append", "extend", "update", "setdefault", "pop", "popitem", "clear", "add", "insert",
            "remove", "discard", "sort", "reverse", "__setitem__"}  # fmt: skip
EXERCISE_KEY = re.compile(r"\b(\d\d\.\d+)\b")
CHECK = re.compile(r"""^check\(\s*["'](\d\d\.\d+)["']""", re.M)


# --------------------------------------------------------------------------------------------
# the notebooks: cells, sections, exercises, and the names each code cell loads and binds
# --------------------------------------------------------------------------------------------


@dataclass
class Cell:
    id: str
    kind: str  # "code" or "markdown"
    source: str
    tags: list[str]
    outputs: str  # the stored outputs' text
    section: str = ""  # the heading of its `#`/`##` section
    index: int = 0


@dataclass
class Exercise:
    key: str
    cells: list[str]  # ids: the prompt, the starters, the check
    words: int  # words of its prompt
    coding: bool  # the answer is a function the student writes


@dataclass
class Notebook:
    number: int
    cells: list[Cell]
    exercises: dict[str, Exercise] = field(default_factory=dict)

    @property
    def by_id(self) -> dict[str, Cell]:
        return {c.id: c for c in self.cells}


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)


def _outputs(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
        else:
            parts.append(_text(out.get("text") or out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def heading_of(source: str) -> str | None:
    """The last `# ...` or `## ...` heading in a markdown cell, or None: the section the cell's
    end, and the cells after it, belong to."""
    found = re.findall(r"^#{1,2} (.+)$", source, re.M)
    return found[-1].strip() if found else None


@cache
def notebook(number: int, lang: str = "en") -> Notebook:
    folder = ROOT / "notebooks" / ("" if lang == "en" else lang)
    (path,) = folder.glob(f"{number:02d}_*.ipynb")
    raw = json.loads(path.read_text())
    cells, section = [], ""
    for i, c in enumerate(raw["cells"]):
        cell = Cell(c["id"], c["cell_type"], _text(c["source"]),
                    c.get("metadata", {}).get("tags", []), _outputs(c), index=i)  # fmt: skip
        if cell.kind == "markdown" and heading_of(cell.source):
            section = heading_of(cell.source)
        cell.section = section
        cells.append(cell)
    nb = Notebook(number, cells)
    since: list[Cell] = []
    for cell in cells:
        if "exercise" not in cell.tags:
            continue
        since.append(cell)
        for key in CHECK.findall(cell.source) if cell.kind == "code" else []:
            starters = [c for c in since if c.kind == "code" and not CHECK.search(c.source)]
            nb.exercises[key] = Exercise(
                key,
                [c.id for c in since],
                sum(words(c.source) for c in since if c.kind == "markdown"),
                any(re.search(r"^\s*def ", c.source, re.M) for c in starters),
            )
            since = []
    return nb


def words(markdown: str) -> int:
    """Words of prose: whitespace-separated tokens holding a letter or digit, link targets and
    HTML comments left out."""
    text = re.sub(r"\]\([^)]*\)", "]", markdown)
    text = re.sub(r"<!--.*?-->|<[^>]+>", " ", text, flags=re.S)
    return sum(1 for t in text.split() if re.search(r"\w", t))


class _Scan:
    """The module-level names one cell binds, and those it loads before binding them, in
    evaluation order; a function body's loads are the cell's too (conservatively: they run when
    the function is called, with whatever the names then hold)."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.free: list[str] = []
        self.binds: set[str] = set()  # bindings and mutations, for "who last changed it"

    def load(self, name: str) -> None:
        if name not in self.bound:
            self.free.append(name)

    def bind(self, name: str) -> None:
        self.bound.add(name)
        self.binds.add(name)

    def expr(self, node: ast.AST | None, local: set[str] | None = None) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and (local is None or node.id not in local):
                self.load(node.id)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = set(local or ())
            for i, gen in enumerate(node.generators):
                self.expr(gen.iter, local if i == 0 else inner)
                inner |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
                for cond in gen.ifs:
                    self.expr(cond, inner)
            for part in [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]:
                self.expr(part, inner)
            return
        if isinstance(node, ast.Lambda):
            for d in [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]:
                self.expr(d, local)
            self.expr(node.body, set(local or ()) | _params(node.args))
            return
        if isinstance(node, ast.NamedExpr):
            self.expr(node.value, local)
            if local is None:
                self.bind(node.target.id)
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child, local)

    def store(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.store(elt)
        elif isinstance(target, ast.Starred):
            self.store(target.value)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            self.expr(target)
            base = target
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                self.binds.add(base.id)

    def body(self, statements: list[ast.stmt]) -> None:
        for s in statements:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            for a in s.names:
                self.bind(a.asname or a.name.split(".")[0])
        elif isinstance(s, ast.Assign):
            self.expr(s.value)
            for t in s.targets:
                self.store(t)
        elif isinstance(s, ast.AnnAssign):
            self.expr(s.value)
            self.store(s.target)
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self.load(s.target.id)
            self.expr(s.value)
            self.store(s.target)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter)
            self.store(s.target)
            self.body(s.body)
            self.body(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.store(item.optional_vars)
            self.body(s.body)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in [*s.decorator_list, *s.args.defaults, *(d for d in s.args.kw_defaults if d)]:
                self.expr(d)
            self.bind(s.name)
            self.function(s.body, _params(s.args))
        elif isinstance(s, ast.ClassDef):
            for d in [*s.decorator_list, *s.bases, *(k.value for k in s.keywords)]:
                self.expr(d)
            self.bind(s.name)
            self.function(s.body, {s.name})
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            self.body(s.body)
            for h in s.handlers:
                self.expr(h.type)
                if h.name:
                    self.bind(h.name)
                self.body(h.body)
            self.body(s.orelse)
            self.body(s.finalbody)
        elif isinstance(s, (ast.If, ast.While)):
            self.expr(s.test)
            self.body(s.body)
            self.body(s.orelse)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self.store(t) if not isinstance(t, ast.Name) else self.load(t.id)
        elif isinstance(s, ast.Expr):
            self.expr(s.value)
            call = s.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in MUTATORS
                and isinstance(call.func.value, ast.Name)
            ):
                self.binds.add(call.func.value.id)
        else:  # return, raise, assert, match, ...: their expressions load
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self.expr(child)
                elif isinstance(child, ast.stmt):
                    self.stmt(child)

    def function(self, statements: list[ast.stmt], local: set[str]) -> None:
        tree = ast.Module(body=statements, type_ignores=[])
        declared = set()
        local = set(local)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                local.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                local.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                local |= {a.asname or a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.arg):
                local.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                local.add(node.name)
            elif isinstance(node, ast.Global):
                declared |= set(node.names)
        local -= declared
        self.binds |= declared
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id not in local and node.id not in self.bound:
                    self.free.append(node.id)


def _params(args: ast.arguments) -> set[str]:
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    return set(names) | {a.arg for a in (args.vararg, args.kwarg) if a}


def scan(source: str) -> _Scan:
    """The names a code cell loads (before binding them) and binds; IPython's `%` and `!` lines
    (unindented, as the notebooks write them) are left out."""
    code = "\n".join("pass" if re.match(r"[%!](?!=)", x) else x for x in source.splitlines())
    found = _Scan()
    found.body(ast.parse(code).body)
    return found


@cache
def last_binders(number: int) -> dict[str, dict[str, str]]:
    """Per code cell id: each name it loads -> the id of the last earlier code cell that binds
    or changes it (names no earlier cell binds, builtins among them, are left out)."""
    last: dict[str, str] = {}
    found = {}
    for cell in notebook(number).cells:
        if cell.kind != "code":
            continue
        s = scan(cell.source)
        found[cell.id] = {n: last[n] for n in dict.fromkeys(s.free) if n in last}
        for n in s.binds:
            last[n] = cell.id
    return found


def name_errors(number: int, modes: dict[str, str]) -> list[str]:
    """Live cells that load a name last bound in a cell the plan does not run live."""
    found = []
    for cid, needs in last_binders(number).items():
        if modes.get(cid) != "live":
            continue
        for name, binder in needs.items():
            if modes.get(binder) != "live":
                how = modes.get(binder, "skip")
                found.append(
                    f"{number:02d}: live cell {cid} uses {name!r}, last bound in {binder}, which "
                    f"the plan does not run live ({how})"
                )
    return found


# --------------------------------------------------------------------------------------------
# the plans: one table per course path
# --------------------------------------------------------------------------------------------


@dataclass
class Row:
    start: int
    end: int
    number: int | None  # None for a row outside the notebooks (questions, homework)
    section: str
    cells: dict[str, str]  # id -> mode
    exercises: list[str]
    cuts: list[str]  # ids and exercise keys
    line: str


@dataclass
class Plan:
    heading: str
    rows: list[Row]


def parse_row(line: str, lang: str) -> Row:
    cols = [c.strip() for c in line.strip().strip("|").split("|")]
    assert len(cols) == 7, f"a plan row has 7 columns, found {len(cols)}: {line}"
    span, nb, section, cells, exercises, cuts, _ = cols
    m = re.fullmatch(r"(\d+)[–-](\d+)", span)
    assert m, f"the minutes of a row are start–end, found {span!r}: {line}"
    num = re.search(r"\b(\d\d)\b", nb)
    modes: dict[str, str] = {}
    for word, ids in re.findall(r"(\S+)((?:\s+`[^`]+`)+)", cells):
        assert word in MODES[lang], f"unknown mode {word!r} (one of {list(MODES[lang])}): {line}"
        for cid in re.findall(r"`([^`]+)`", ids):
            assert cid not in modes, f"cell {cid} named twice in a row: {line}"
            modes[cid] = MODES[lang][word]
    return Row(
        int(m.group(1)),
        int(m.group(2)),
        int(num.group(1)) if num else None,
        section,
        modes,
        EXERCISE_KEY.findall(exercises),
        re.findall(r"`([^`]+)`", cuts) + EXERCISE_KEY.findall(re.sub(r"`[^`]+`", "", cuts)),
        line,
    )


def path_heading(p: C.CoursePath, lang: str) -> str:
    return C.path_heading(COURSE, p, lang)


@cache
def plans(lang: str = "en") -> dict[str, Plan]:
    """Each course path's plan, by its heading, from docs/plans.md (or its Chinese twin)."""
    lines = PLANS[lang].read_text().splitlines()
    wanted = {path_heading(p, lang) for p in COURSE.paths}
    found = {}
    for i, line in enumerate(lines):
        if not line.startswith("## ") or line[3:].strip() not in wanted:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("| "):
            assert not lines[j].startswith("## "), f"no table under {line!r}"
            j += 1
        rows = []
        j += 2  # the header and the separator
        while j < len(lines) and lines[j].startswith("|"):
            rows.append(parse_row(lines[j], lang))
            j += 1
        found[line[3:].strip()] = Plan(line[3:].strip(), rows)
    return found


def modes_of(plan: Plan, number: int, cut: bool = False) -> dict[str, str]:
    """Every cell of one notebook the plan names -> its mode (the cells of an exercise done in
    class run live); with `cut`, as the plan stands with its cuts made."""
    modes: dict[str, str] = {}
    nb = notebook(number)
    for row in plan.rows:
        if row.number != number:
            continue
        for cid, mode in row.cells.items():
            if not (cut and cid in row.cuts):
                modes[cid] = mode
        for key in row.exercises:
            if not (cut and key in row.cuts):
                for cid in [*exercise_setup(nb, key), *nb.exercises[key].cells]:
                    modes[cid] = "live" if nb.by_id[cid].kind == "code" else "exercise"
    return modes


def exercise_setup(nb: Notebook, key: str) -> list[str]:
    """The untagged code cells of the exercises' section before an exercise (the cell that
    imports `check`): they run with the first exercise done in class."""
    first = nb.by_id[nb.exercises[key].cells[0]]
    return [
        c.id
        for c in nb.cells[: first.index]
        if c.kind == "code" and c.section == first.section and "exercise" not in c.tags
    ]


def setup_cell(nb: Notebook) -> str:
    """The notebook's first code cell: opening the notebook (SWITCH_MIN) runs it."""
    return next(c.id for c in nb.cells if c.kind == "code")


@cache
def run_times() -> dict[int, float]:
    """docs/teaching.md's "Run times" table: notebook -> seconds (the one measurement)."""
    text = TEACHING["en"].read_text()
    section = text.split("## Run times", 1)[1].split("\n## ", 1)[0]
    found = {}
    for m in re.finditer(r"^\| \[(\d\d) [^]]*\]\([^)]*\) \| ([\d.]+)(\*?) \|", section, re.M):
        found[int(m.group(1))] = float(m.group(2))
        if m.group(3):
            OTHER_RUN.add(int(m.group(1)))
    return found


#: notebooks whose "Run times" figure is starred: from another run than the table's measurement
OTHER_RUN: set[int] = set()


def row_cost(row: Row, plan: Plan, cut: bool = False) -> float:
    """The minutes a row needs at the stated pace; the first row of a notebook also pays for
    opening it and for running its live cells (at most the notebook's measured run time)."""
    if row.number is None:
        return 0.0
    nb = notebook(row.number)
    cells = {k: v for k, v in row.cells.items() if not (cut and k in row.cuts)}
    cost = 0.0
    for cid, mode in cells.items():
        cell = nb.by_id[cid]
        if mode == "aloud":
            cost += words(cell.source) / ALOUD_WPM
        elif mode == "skim":
            cost += words(cell.source) / SKIM_WPM
        elif cid != setup_cell(nb):
            cost += CELL_MIN
    for key in row.exercises:
        if not (cut and key in row.cuts):
            cost += CODING_MIN if nb.exercises[key].coding else EXERCISE_MIN
    k = plan.rows.index(row)
    if k == 0 or plan.rows[k - 1].number != row.number:
        cost += SWITCH_MIN
    if row is next(r for r in plan.rows if r.number == row.number):
        cost += run_times()[row.number] / 60
    return cost


@dataclass
class Numbers:
    prose: int
    aloud: int
    skim: int
    after: int
    live: int
    shown: int
    in_class: int
    homework: int
    costed: float
    questions: float
    cuts_save: float


def numbers(plan: Plan, p: C.CoursePath) -> Numbers:
    aloud = skim = live = shown = in_class_words = 0
    in_class = []
    for row in plan.rows:
        if row.number is None:
            continue
        nb = notebook(row.number)
        for cid, mode in row.cells.items():
            n = words(nb.by_id[cid].source)
            aloud += n if mode == "aloud" else 0
            skim += n if mode == "skim" else 0
            live += mode == "live"
            shown += mode == "show"
        for key in row.exercises:
            in_class.append(key)
            in_class_words += nb.exercises[key].words
    prose = sum(words(c.source) for n in p.notebooks for c in notebook(n).cells
                if c.kind == "markdown")  # fmt: skip
    every = [k for n in p.notebooks for k in notebook(n).exercises]
    costed = sum(row_cost(r, plan) for r in plan.rows)
    short = sum(row_cost(r, plan, cut=True) for r in plan.rows)
    return Numbers(
        prose, aloud, skim, prose - aloud - skim - in_class_words, live, shown, len(in_class),
        len(every) - len(in_class), costed, p.minutes - costed, costed - short,
    )  # fmt: skip


def numbers_row(n: Numbers, lang: str) -> str:
    """The numbers table's cells for one path, as docs/plans.md writes them."""
    # the path's prose and what is left of it, to the hundred: they move with every edit of any
    # of the path's notebooks, the plan's own counts only when the cells it names change
    return (
        f"≈{round(n.prose, -2)} / {n.aloud} / {n.skim} / ≈{round(n.after, -2)} | "
        f"{n.live} / {n.shown} | "
        f"{n.in_class} / {n.homework} | {n.costed:.1f} / {n.questions:.1f} / {n.cuts_save:.1f}"
    )


# --------------------------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------------------------

PATHS = COURSE.paths
IDS = [p.short["en"] for p in PATHS]


def test_every_course_path_has_a_plan() -> None:
    for lang in ("en", "zh"):
        found = sorted(plans(lang))
        wanted = sorted(path_heading(p, lang) for p in PATHS)
        assert found == wanted, f"{PLANS[lang].name} ({lang}): plans {found}, paths {wanted}"


@pytest.mark.parametrize("p", PATHS, ids=IDS)
def test_cells_exist_in_the_rows_section_in_order(p: C.CoursePath) -> None:
    plan = plans("en")[path_heading(p, "en")]
    problems, seen, last = [], set(), {}
    for row in plan.rows:
        if row.number is None:
            assert not row.cells and not row.exercises, f"a row outside the notebooks: {row.line}"
            continue
        if row.number not in p.notebooks:
            problems.append(f"{row.number:02d} is not on the path: {row.line}")
            continue
        nb = notebook(row.number)
        for cid, mode in row.cells.items():
            cell = nb.by_id.get(cid)
            if cell is None:
                problems.append(f"{row.number:02d} has no cell {cid!r}: {row.line}")
                continue
            if (cell.kind == "code") != (mode in CODE_MODES):
                problems.append(f"{row.number:02d} {cid} is {cell.kind}, not for {mode!r}")
            if cell.section != row.section:
                problems.append(
                    f"{row.number:02d} {cid} lies in section {cell.section!r}, not {row.section!r}"
                )
            if "exercise" in cell.tags:
                problems.append(f"{row.number:02d} {cid}: name its exercise, not its cells")
            if (row.number, cid) in seen:
                problems.append(f"{row.number:02d} {cid} is named twice in the plan")
            if cell.index < last.get(row.number, -1):
                problems.append(f"{row.number:02d} {cid} comes before a cell an earlier row names")
            seen.add((row.number, cid))
            last[row.number] = max(last.get(row.number, -1), cell.index)
        for key in row.exercises:
            if key not in nb.exercises:
                problems.append(f"{row.number:02d} has no exercise {key}: {row.line}")
            elif nb.by_id[nb.exercises[key].cells[0]].section != row.section:
                problems.append(f"exercise {key} is not in section {row.section!r}")
        for cut in row.cuts:
            if cut not in row.cells and cut not in row.exercises:
                problems.append(f"cut {cut} is not one of the row's cells or exercises: {row.line}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("p", PATHS, ids=IDS)
def test_minutes_run_to_the_paths_length_and_cover_each_row(p: C.CoursePath) -> None:
    plan = plans("en")[path_heading(p, "en")]
    spans = [(r.start, r.end) for r in plan.rows]
    assert spans[0][0] == 0 and spans[-1][1] == p.minutes, f"{p.short['en']}: {spans}"
    gaps = [(a, b) for a, b in zip(spans, spans[1:], strict=False) if a[1] != b[0] or a[0] >= a[1]]
    assert not gaps, f"{p.short['en']}: rows that do not follow each other: {gaps}"
    short = [
        f"{r.start}–{r.end} ({r.end - r.start} min) costs {row_cost(r, plan):.1f}: {r.line}"
        for r in plan.rows
        if row_cost(r, plan) > r.end - r.start + 1e-9
    ]
    assert not short, "rows whose minutes do not cover them:\n" + "\n".join(short)


@pytest.mark.parametrize("p", PATHS, ids=IDS)
def test_no_live_cell_needs_a_cell_the_plan_does_not_run(p: C.CoursePath) -> None:
    plan = plans("en")[path_heading(p, "en")]
    found = []
    for n in p.notebooks:
        if any(r.number == n for r in plan.rows):
            found += name_errors(n, modes_of(plan, n))
            found += [f"(with the cuts made) {e}" for e in name_errors(n, modes_of(plan, n, True))]
    assert not found, "\n".join(found)


def test_the_instructors_name_error_is_found() -> None:
    """The case an instructor met: 16's timed library runs (a16c0032) shown from their stored
    output, the cells after them run live."""
    nb = notebook(16)
    modes = {c.id: "live" for c in nb.cells if c.kind == "code"} | {"a16c0032": "show"}
    found = name_errors(16, modes)
    assert any("a16c0034" in e and "'lib'" in e for e in found), found
    assert not name_errors(16, {c.id: "live" for c in nb.cells if c.kind == "code"})


@pytest.mark.parametrize(
    ("source", "loads", "binds"),
    [
        ("x = y + 1", {"y"}, {"x"}),
        ("import a.b as c\nfrom d import e", set(), {"c", "e"}),
        ("for k in ks:\n    t = k", {"ks"}, {"k", "t"}),
        ("def f(a):\n    return a + g\n", {"g"}, {"f"}),
        ("r[0] = v", {"r", "v"}, {"r"}),
        ("log.append(1)", {"log"}, {"log"}),
        ("z = [i for i in it if i > lim]", {"it", "lim"}, {"z"}),
        ("%xmode Minimal\nw = 1", set(), {"w"}),
        ("q = 1\nprint(q)", {"print"}, {"q"}),
    ],
)
def test_scan_reads_loads_and_bindings(source: str, loads: set, binds: set) -> None:
    s = scan(source)
    assert set(s.free) == loads and s.binds == binds, (s.free, s.binds)


def test_numbers_table_says_what_the_plans_add_up_to() -> None:
    for lang in ("en", "zh"):
        text = PLANS[lang].read_text()
        for p in PATHS:
            plan = plans("en")[path_heading(p, "en")]
            want = numbers_row(numbers(plan, p), lang)
            row = re.search(rf"^\| {re.escape(p.short[lang])} \| (.*) \|$", text, re.M)
            assert row, f"{PLANS[lang].name}: no numbers row for {p.short[lang]!r}"
            assert row.group(1) == want, (
                f"{PLANS[lang].name} {p.short[lang]}: the numbers should read {want}, "
                f"found {row.group(1)}"
            )


def test_plans_state_the_pace_they_are_costed_at() -> None:
    for lang in ("en", "zh"):
        text = " ".join(PLANS[lang].read_text().split())
        missing = [x for x in PACE[lang] if x not in text]
        assert not missing, f"{PLANS[lang].name}: the pace should say {missing}"


def test_the_chinese_plans_are_the_same_plans() -> None:
    """docs/zh/plans.md: the same rows (minutes, cells, modes, exercises, cuts), the Chinese
    notebooks' headings, and the hash of the docs/plans.md it translates."""
    problems = []
    for heading_en, plan in plans("en").items():
        p = next(p for p in PATHS if path_heading(p, "en") == heading_en)
        twin = plans("zh")[path_heading(p, "zh")]
        same = [(r.start, r.end, r.number, r.cells, r.exercises, sorted(r.cuts)) for r in plan.rows]
        other = [
            (r.start, r.end, r.number, r.cells, r.exercises, sorted(r.cuts)) for r in twin.rows
        ]
        if same != other:
            first = next(
                (k for k, (a, b) in enumerate(zip(same, other, strict=False)) if a != b),
                min(len(same), len(other)),
            )
            problems.append(
                f"{p.short['zh']}: row {first + 1} differs from docs/plans.md's "
                f"({same[first] if first < len(same) else None} there, "
                f"{other[first] if first < len(other) else None} here)"
            )
        for row in twin.rows:
            if row.number is None:
                continue
            nb = notebook(row.number, "zh")
            sections = {nb.by_id[c].section for c in row.cells if c in nb.by_id} | {
                nb.by_id[nb.exercises[k].cells[0]].section for k in row.exercises
            }
            if sections and sections != {row.section}:
                problems.append(
                    f"zh {row.number:02d}: section {row.section!r}, cells in {sections}"
                )
    page = PLANS["zh"].read_text()
    found = re.search(r"sha256 前 12 位 ([0-9a-f]{12})", page)
    now = hashlib.sha256(PLANS["en"].read_bytes()).hexdigest()[:12]
    if not found or found.group(1) != now:
        problems.append(
            "docs/plans.md changed since docs/zh/plans.md was translated: translate the change "
            f"and update the hash (translated {found and found.group(1)}, now {now})"
        )
    assert not problems, "\n".join(problems)


def test_links_resolve() -> None:
    for path in PLANS.values():
        links = re.findall(r"\]\(([^)#\s]+)", path.read_text())
        missing = [x for x in links if "://" not in x and not (path.parent / x).resolve().exists()]
        assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_path_is_described_by_one_text(lang: str) -> None:
    """tools/course.py's `path_line` of each path, word for word, in the plans, the teaching
    guide and the README (00's table and the book's index are generated from the same fields)."""
    places = [PLANS[lang], TEACHING[lang], README[lang]]
    problems = []
    for place in places:
        text = " ".join(place.read_text().split())
        for p in PATHS:
            line = " ".join(C.path_line(COURSE, p, lang).split())
            if line not in text:
                problems.append(f"{place.relative_to(ROOT)}: lacks {line!r}")
    assert not problems, "\n".join(problems)


def test_paths_have_a_length_and_a_description() -> None:
    """course.toml: each path's `minutes` is in its heading (both languages), and each has the
    description `path_line` ends with."""
    for p in PATHS:
        assert p.minutes and f"{p.minutes} minutes" in path_heading(p, "en"), path_heading(p, "en")
        assert f"{p.minutes} 分钟" in path_heading(p, "zh"), path_heading(p, "zh")
        assert p.description["en"] and p.description["zh"], f"{p.short['en']}: no description"


def test_guide_run_times_come_from_its_table() -> None:
    """The guide's path table adds up the "Run times" figures of each path's notebooks."""
    times = run_times()
    assert sorted(times) == sorted(notebook_numbers()), sorted(times)
    text = TEACHING["en"].read_text()
    problems = []
    for p in PATHS:
        row = re.search(rf"^\| {re.escape(p.short['en'])} \|.*$", text, re.M | re.I)
        if not row:
            problems.append(f"docs/teaching.md: no path row for {p.short['en']!r}")
            continue
        figure = re.findall(r"([\d.]+) s\b", row.group(0))
        want = round(sum(times[n] for n in p.notebooks), 1)
        if not figure or float(figure[0]) != want:
            problems.append(f"{p.short['en']}: run time {figure[:1]}, the table adds up to {want}")
        if p.reading:  # the reading's figures from the same measurement (19's is starred)
            extra = round(sum(times[n] for n in p.reading if n not in OTHER_RUN), 1)
            if f"+ {extra} s" not in row.group(0):
                problems.append(
                    f"{p.short['en']}: the reading's {extra} s is not in {row.group(0)}"
                )
    assert not problems, "\n".join(problems)


def notebook_numbers() -> list[int]:
    return sorted(int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _bullets_by_notebook(section: str) -> dict[int, str]:
    found = {}
    for m in re.finditer(r"^- (\d\d)\b(.*?)(?=^- \d\d\b|\Z)", section, re.M | re.S):
        found[int(m.group(1))] = m.group(2)
    return found


def _cited_cells(number: int, text: str) -> list[str]:
    return [c for c in re.findall(r"`([^`\s]+)`", text) if c in notebook(number).by_id]


def test_a_question_for_every_notebook_at_a_cell() -> None:
    section = _section(TEACHING["en"].read_text(), "Questions to ask")
    found = _bullets_by_notebook(section)
    missing = [n for n in notebook_numbers() if n not in found]
    assert not missing, f"docs/teaching.md: no question to ask for notebooks {missing}"
    nowhere = [n for n, text in found.items() if not _cited_cells(n, text)]
    assert not nowhere, f"questions that name no cell of their notebook: {nowhere}"


@cache
def wrong_words(number: int) -> dict[str, list[str]]:
    """solutions/nbNN.py's `WRONG`, read without importing it: exercise -> the words each typical
    wrong answer's hint must contain (the second item of each `(answer, words)` pair)."""
    tree = ast.parse((ROOT / "solutions" / f"nb{number:02d}.py").read_text())
    found: dict[str, list[str]] = {}

    def add(key: ast.expr, pairs: ast.expr) -> None:
        found[ast.literal_eval(key)] = [ast.literal_eval(p.elts[1]) for p in pairs.elts]

    for n in tree.body:  # WRONG = {...}; WRONG["NN.k"] = [...] after a definition
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        target = n.targets[0]
        if isinstance(target, ast.Name) and target.id == "WRONG":
            for key, pairs in zip(n.value.keys, n.value.values, strict=True):
                add(key, pairs)
        elif isinstance(target, ast.Subscript) and getattr(target.value, "id", "") == "WRONG":
            add(target.slice, n.value)
    for n in tree.body:  # WRONG.update({...}) or WRONG.update(key=[...])
        call = n.value if isinstance(n, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "update"
            and getattr(call.func.value, "id", "") == "WRONG"
        ):
            for arg in call.args:
                for key, pairs in zip(arg.keys, arg.values, strict=True):
                    add(key, pairs)
    return found


@cache
def _judge_messages(number: int) -> list[str]:
    """The English texts (msgids) a notebook's judges give, from the judge module's source."""
    tree = ast.parse((ROOT / "src" / "helpers" / "exercises" / f"nb{number:02d}.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tr" and node.args:
            try:
                found.append(ast.literal_eval(node.args[0]))
            except ValueError:
                pass
    return found


STRUGGLE = re.compile(r"^\| \d\d \| (\d\d\.\d+) \| `([^`]+)` \| (.+?) \| “(.+?)” \|$", re.M)


def test_a_struggle_for_every_notebook_from_its_judge() -> None:
    """Each row of docs/teaching.md's "What students struggle with": an exercise, its prompt's
    cell, the usual wrong answer, and the hint quoted from the judge's own words for an answer
    of solutions/nbNN.py `WRONG` (the words `WRONG` lists for it are in the quote)."""
    section = _section(TEACHING["en"].read_text(), "What students struggle with")
    rows = STRUGGLE.findall(section)
    problems = []
    covered = {int(k[:2]) for k, *_ in rows}
    missing = [n for n in notebook_numbers() if n not in covered]
    if missing:
        problems.append(f"no struggle for notebooks {missing}")
    for key, cid, _answer, hint in rows:
        number = int(key[:2])
        nb = notebook(number)
        if key not in nb.exercises or cid != nb.exercises[key].cells[0]:
            problems.append(f"{key}: its prompt is not cell {cid}")
        wrong = wrong_words(number).get(key, [])
        parts = [x for x in re.split(r"\s*…\s*", hint) if x]
        if not any(all(x in m for x in parts) for m in _judge_messages(number)):
            problems.append(f"{key}: {hint!r} is not a hint of its judge")
        if not any(w.lower() in hint.lower() for w in wrong):
            problems.append(f"{key}: {hint!r} holds none of WRONG's words for {key}")
    assert not problems, "\n".join(problems)


ERROR_ROW = re.compile(r"^\| (\d\d) · `([^`]+)` \| (.+?) \| `(.+?)` \| (.+?) \|$", re.M)


#: the notebooks of 13-19 whose stored outputs show an error a student meets (13, 14 and 18 show
#: none: the guide says so, and their struggles are their exercises)
NOTEBOOK_ERRORS = {15, 16, 17, 19}


def test_errors_quoted_from_a_notebook_are_in_its_stored_output() -> None:
    """A row of the guide's in-notebook errors quotes what the cell named shows: its stored output
    (or, for an edit a markdown cell suggests, the cell's text)."""
    section = _section(TEACHING["en"].read_text(), "Errors students hit")
    rows = ERROR_ROW.findall(section)
    covered = {int(n) for n, *_ in rows}
    assert NOTEBOOK_ERRORS <= covered, f"no notebook error for {NOTEBOOK_ERRORS - covered}"
    problems = []
    for number, cid, _situation, message, _fix in rows:
        cell = notebook(int(number)).by_id.get(cid)
        if cell is None:
            problems.append(f"{number}: no cell {cid}")
            continue
        shown = cell.outputs if cell.kind == "code" else cell.source
        if " ".join(message.split()) not in " ".join(shown.split()):
            problems.append(f"{number} {cid}: {message!r} is not in what the cell shows")
    assert not problems, "\n".join(problems)


def test_guide_run_times_table_shows_what_the_plans_show() -> None:
    """The "Run times" table says, per notebook, which sections and exercises the plans do in
    class and which cells they teach from their stored outputs."""
    text = TEACHING["en"].read_text().split("## Run times", 1)[1].split("\n## ", 1)[0]
    shown: dict[int, set[str]] = {}
    for p in PATHS:
        plan = plans("en")[path_heading(p, "en")]
        for row in plan.rows:
            for cid, mode in row.cells.items():
                if mode == "show":
                    shown.setdefault(row.number, set()).add(cid)
    taught: dict[int, set[str]] = {}  # the sections (numbers) and exercises the plans do
    for p in PATHS:
        for row in plans("en")[path_heading(p, "en")].rows:
            if row.number is not None:
                m = re.match(r"(\d+)\. ", row.section)
                taught.setdefault(row.number, set()).update(
                    ([f"§{m.group(1)}"] if m else []) + row.exercises
                )
    problems = []
    row_re = r"^\| \[(\d\d) [^]]*\]\([^)]*\) \|[^|]*\|([^|]*)\|([^|]*)\|$"
    for m in re.finditer(row_re, text, re.M):
        number, listed = int(m.group(1)), set(re.findall(r"`([^`]+)`", m.group(3)))
        said = set(EXERCISE_KEY.findall(m.group(2)))
        for a, b in re.findall(r"§(\d+)(?:-(\d+))?", m.group(2)):
            said |= {f"§{k}" for k in range(int(a), int(b or a) + 1)}
        if said != taught.get(number, set()):
            problems.append(f"{number:02d}: the table says {sorted(said)} in class, the plans "
                            f"{sorted(taught.get(number, set()))}")  # fmt: skip
        if listed != shown.get(number, set()):
            problems.append(f"{number:02d}: the table shows {sorted(listed)}, the plans "
                            f"{sorted(shown.get(number, set()))}")  # fmt: skip
    assert not problems, "\n".join(problems)


def test_the_guide_links_the_plans() -> None:
    for lang in ("en", "zh"):
        assert "](plans.md)" in TEACHING[lang].read_text(), f"{TEACHING[lang].name}: no link"
    for index in ("index.md", "index.zh.md"):
        assert "](docs/plans.md)" in (ROOT / "book" / index).read_text(), f"book/{index}: no link"


def test_costs_round_as_the_table_prints() -> None:
    """The numbers are printed to a tenth of a minute; a plan with no slack left is flagged by the
    rows, not by rounding."""
    for p in PATHS:
        plan = plans("en")[path_heading(p, "en")]
        n = numbers(plan, p)
        assert math.isclose(n.costed + n.questions, p.minutes), (p.short["en"], n)


def test_a_session_presents_what_the_guide_says() -> None:
    """docs/teaching.md and docs/plans.md say a session presents (aloud or skimmed) between an
    eighth and a quarter of its path's prose, the capstone more than a third."""
    for p in PATHS:
        n = numbers(plans("en")[path_heading(p, "en")], p)
        share = (n.aloud + n.skim) / n.prose
        low, high = (1 / 3, 1) if p.capstone else (1 / 8, 1 / 4)
        assert low <= share <= high, f"{p.short['en']}: the plan presents {share:.2f} of the prose"


def test_chinese_struggles_quote_the_chinese_hints() -> None:
    """docs/zh/teaching.md's struggle rows are the English ones (same exercises and prompts), each
    quoting the Chinese hint that locale/zh/exercises.po gives the English one's message."""
    import polib

    catalog = {e.msgid: e.msgstr for e in polib.pofile(str(ROOT / "locale/zh/exercises.po"))}
    heads = {"en": "What students struggle with", "zh": "学生容易卡住的地方"}
    rows = {lang: STRUGGLE.findall(_section(TEACHING[lang].read_text(), heads[lang]))
            for lang in heads}  # fmt: skip
    assert [r[:2] for r in rows["en"]] == [r[:2] for r in rows["zh"]], "the rows differ"
    problems = []
    for (key, _, _, hint), (_, _, _, hint_zh) in zip(rows["en"], rows["zh"], strict=True):
        parts = [x for x in re.split(r"\s*…\s*", hint) if x]
        parts_zh = [x for x in re.split(r"\s*…\s*", hint_zh) if x]
        msgs = [m for m in _judge_messages(int(key[:2])) if all(x in m for x in parts)]
        if not any(all(x in catalog.get(m, "") for x in parts_zh) for m in msgs):
            problems.append(f"{key}: {hint_zh!r} is not in the translation of {hint!r}")
    assert not problems, "\n".join(problems)
