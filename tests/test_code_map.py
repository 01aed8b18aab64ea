"""The generated map of the code (docs/code_map.md), the docstrings it checks, and the layering.

- docs/code_map.md is what `python tools/code_map.py` writes today (regenerated in memory);
- the "Used by" line of every module docstring in `src/helpers/` names the notebooks the map
  finds showing or using that module, no more and no fewer. The line is the first sentence of
  the docstring's paragraph that starts `Used by:` (or `Used in:`); its notebooks are the
  two-digit numbers and ranges in it (`05`, `06-08`, `notebooks/04_...`), or every notebook
  when it says "all notebooks"/"every notebook" and names none. A module reached only through
  another helper (the viewers, through the entry points of the harnesses and helpers.tracing)
  names that helper, not the notebooks: the map counts what a notebook's own code cells name;
- `helpers/__init__.py` lists every module (a topic package once, for its lesson and harness);
- the layering: lessons and harness never import the exercises, and import the step viewers
  only inside the entry points written down in `VIEWER_ENTRY_POINTS`;
- the topic packages (`helpers/<topic>/`): the lesson's source imports no harness, every
  top-level definition of a lesson is shown by a notebook or reached from one that is through the
  lesson's own definitions, no definition a notebook shows lives in a harness, and a lesson's
  shown definitions come in the order the notebooks first show them.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest

from tools import code_map

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "src" / "helpers"

# The one way a helper module (a topic's harness, or helpers.tracing) may reach the step viewers
# (helpers.viewers): a function that builds its notebook's viewer from data it computed,
# importing the widget class inside that function (so the module imports without anywidget).
# Measured with `ast` over src/helpers: these five are every import of helpers.viewers outside
# the package, and nothing outside helpers.exercises imports helpers.exercises.
VIEWER_ENTRY_POINTS = {
    ("helpers.allreduce.harness", "ring_step_viewer"),
    ("helpers.context_parallel.harness", "ring_attention_step_viewer"),
    ("helpers.expert_parallel.harness", "exchange_step_viewer"),
    ("helpers.pipeline_parallel.harness", "timeline_step_viewer"),
    ("helpers.tracing", "step_viewer"),
}
GUARDED = ("helpers.exercises", "helpers.viewers")


@pytest.fixture(scope="module")
def cmap() -> code_map.CodeMap:
    return code_map.build()


# ---- the page ----------------------------------------------------------------------------------
def test_page_is_current(cmap):
    want = code_map.render(cmap)
    have = code_map.OUT.read_text(encoding="utf-8") if code_map.OUT.exists() else ""
    diff = "".join(
        list(difflib.unified_diff(have.splitlines(True), want.splitlines(True), n=0))[:40]
    )
    assert have == want, f"docs/code_map.md is stale: run `make map`; first differences:\n{diff}"


def test_page_is_deterministic(cmap):
    assert code_map.render(cmap) == code_map.render(code_map.build()), (
        "two builds of the map should render the same page, found a difference"
    )


def test_refs_resolve_aliases_and_split_shown_from_used():
    modules = code_map.load_modules()
    refs = code_map.Refs(code_map.Resolver(modules), {})
    refs.visit(
        ast.parse(
            "import helpers.allreduce as ar\n"
            "from helpers.source import show_source as ss\n"
            "from helpers import launch\n"
            "ss(ar.ring_allreduce, r'x', until=r'y')\n"
            "launch.launch(ar.naive_allreduce, 2)\n"
            "import helpers.notebook\n"
            "helpers.notebook.setup_notebook()\n"
        )
    )
    # through the topic package's re-export, to the lesson module that defines it
    assert refs.shown == {("helpers.allreduce.lesson", "ring_allreduce")}, (
        f"show_source's first argument must be shown, found {refs.shown}"
    )
    expected = {
        ("helpers.source", "show_source"),
        ("helpers.launch", "launch"),
        ("helpers.allreduce.lesson", "naive_allreduce"),
        ("helpers.notebook", "setup_notebook"),
    }
    assert refs.used == expected, f"used: expected {expected}, found {refs.used}"


# ---- the "Used by" lines -----------------------------------------------------------------------
def used_by_line(doc: str) -> str | None:
    for para in re.split(r"\n\s*\n", doc):
        m = re.search(r"\bUsed (?:by|in):", para)
        if m:
            text = " ".join(para[m.start() :].split())
            return re.split(r"\.(?:\s|$)", text, maxsplit=1)[0]
    return None


def line_notebooks(text: str, every: set[str]) -> set[str]:
    ranges = re.findall(r"(?<![\w-])(\d\d)\s*[-–]\s*(\d\d)(?![\w-])", text)
    found = {f"{i:02d}" for a, b in ranges for i in range(int(a), int(b) + 1)}
    rest = re.sub(r"(?<![\w-])\d\d\s*[-–]\s*\d\d(?![\w-])", " ", text)
    found |= set(re.findall(r"(?<![\w/-])(\d\d)(?![\w-])", rest))
    found |= set(re.findall(r"notebooks/(\d\d)_", text))
    if not found and re.search(r"\b(all|every) notebooks?\b", text):
        found = set(every)
    return found


def test_line_notebooks_reads_numbers_ranges_paths_and_every():
    every = {f"{i:02d}" for i in range(19)}
    line = used_by_line("Title.\n\nUsed by: 04 (x), 06-08 and\nnotebooks/13_a.ipynb. Not 17.")
    assert line == "Used by: 04 (x), 06-08 and notebooks/13_a.ipynb", f"first sentence: {line!r}"
    assert line_notebooks(line, every) == {"04", "06", "07", "08", "13"}, (
        f"numbers, ranges and paths should count, found {line_notebooks(line, every)}"
    )
    assert line_notebooks("Used by: all notebooks", every) == every, "'all notebooks' is all"
    assert line_notebooks("Used by: helpers.exercises.nb16, 2 and 4 ranks", every) == set(), (
        "a judge's name or a one-digit count must not read as a notebook"
    )


def test_used_by_lines_agree_with_the_map(cmap):
    every = {nb.number for nb in cmap.notebooks}
    by_map = code_map.used_by_notebooks(cmap)
    wrong = []
    for name in cmap.mapped():
        doc = ast.get_docstring(cmap.modules[name].tree) or ""
        line = used_by_line(doc)
        if line is None:
            continue
        says = line_notebooks(line, every)
        if says != by_map[name]:
            wrong.append(
                f"{name}: the line names {sorted(says)}, the map finds {sorted(by_map[name])}"
                f" ({line!r})"
            )
    assert not wrong, "'Used by' lines that disagree with docs/code_map.md (should agree):\n" + (
        "\n".join(wrong)
    )


def test_package_docstring_lists_every_module(cmap):
    doc = ast.get_docstring(cmap.modules["helpers"].tree) or ""
    listed = set(re.findall(r"^\s{4}([\w.]+)\s{2,}", doc, re.M))
    # a topic package's lesson and harness are covered by the package's line
    expected = {
        m.removeprefix("helpers.")
        for m in cmap.mapped()
        if m != "helpers" and m.rpartition(".")[2] not in code_map.TOPIC_PARTS
    }
    assert listed == expected, (
        f"helpers/__init__.py should list every module: missing {sorted(expected - listed)},"
        f" listed but absent {sorted(listed - expected)}"
    )


# ---- the layering ------------------------------------------------------------------------------
def guarded_imports(module: str, tree: ast.Module) -> list[tuple[str, str, str]]:
    """(top-level definition or "<module>", imported name) of each import of GUARDED."""
    package = module.rpartition(".")[0]
    found = []
    for top in tree.body:
        where = getattr(top, "name", "<module>")
        for node in ast.walk(top):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                hit = next((g for g in GUARDED if n == g or n.startswith(g + ".")), None)
                if hit:
                    found.append((where, n, hit))
                    break
    return found


def layering_violations(module: str, tree: ast.Module) -> list[str]:
    out = []
    for where, name, guarded in guarded_imports(module, tree):
        if module == guarded or module.startswith(guarded + "."):
            continue
        if guarded == "helpers.viewers" and (module, where) in VIEWER_ENTRY_POINTS:
            continue
        out.append(f"{module}.{where} imports {name}")
    return out


def test_layering_rule_catches_what_it_forbids():
    bad = ast.parse(
        "from helpers.exercises import check\n"
        "def step_viewer():\n    from helpers import viewers\n"
        "def other():\n    import helpers.viewers\n"
    )
    found = layering_violations("helpers.tracing", bad)
    assert found == [
        "helpers.tracing.<module> imports helpers.exercises",
        "helpers.tracing.other imports helpers.viewers",
    ], f"expected the exercises import and the viewer import outside the entry point, found {found}"
    rel = ast.parse("from ..exercises import tr\n")
    assert layering_violations("helpers.viewers.x", rel) == [
        "helpers.viewers.x.<module> imports helpers.exercises"
    ], "a relative import of the exercises should count too"


def test_lessons_and_harness_do_not_depend_on_exercises_or_viewers(cmap):
    found = [
        v for name, mod in sorted(cmap.modules.items()) for v in layering_violations(name, mod.tree)
    ]
    assert not found, (
        "src/helpers imports outside the layering (the exercises only from themselves, the "
        "viewers only inside VIEWER_ENTRY_POINTS):\n" + "\n".join(found)
    )


def test_every_viewer_entry_point_exists_and_imports_the_viewers(cmap):
    missing = [
        f"{mod}.{fn}"
        for mod, fn in sorted(VIEWER_ENTRY_POINTS)
        if not any(
            w == fn and g == "helpers.viewers"
            for w, _, g in guarded_imports(mod, cmap.modules[mod].tree)
        )
    ]
    assert not missing, f"entry points that should import helpers.viewers and do not: {missing}"


def test_viewers_import_no_other_helpers(cmap):
    tree = cmap.modules["helpers.viewers"].tree
    found = sorted(
        ast.unparse(n)
        for n in ast.walk(tree)
        if (isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("helpers")))
        or (isinstance(n, ast.Import) and any(a.name.startswith("helpers") for a in n.names))
    )
    assert not found, f"helpers.viewers should be a leaf (it replays data), found imports {found}"


# ---- the topic packages: the lesson apart from its harness -------------------------------------
def lessons(cmap) -> list[str]:
    return sorted(m for m in cmap.mapped() if m.endswith(".lesson"))


def test_topic_packages_have_lessons(cmap):
    found = {m.removesuffix(".lesson") for m in lessons(cmap)}
    expected = {
        "helpers.allreduce", "helpers.ddp", "helpers.syncbn", "helpers.sharded",
        "helpers.tensor_parallel", "helpers.pipeline_parallel", "helpers.context_parallel",
        "helpers.expert_parallel", "helpers.hangs",
    }  # fmt: skip
    assert found == expected, f"topic packages with a lesson: expected {expected}, found {found}"


def lesson_imports_harness(module: str, tree: ast.Module) -> list[str]:
    """Imports of a lesson that reach a harness: its own (`.harness`) or any topic's, or a topic
    package (whose `__init__` imports its harness)."""
    package = module.rpartition(".")[0]
    bad = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        hit = next((n for n in names if n.endswith(".harness") or n in TOPICS), None)
        if hit:
            bad.append(f"{module} imports {hit}")
    return bad


TOPICS = {f"helpers.{p.name}" for p in HELPERS.iterdir() if (p / "lesson.py").exists()}


def test_lesson_rule_catches_a_lesson_importing_its_harness():
    tree = ast.parse("from .harness import x\ndef f():\n    from helpers.ddp import make_mlp\n")
    found = lesson_imports_harness("helpers.allreduce.lesson", tree)
    assert found == [
        "helpers.allreduce.lesson imports helpers.allreduce.harness",
        "helpers.allreduce.lesson imports helpers.ddp",
    ], f"expected the relative harness import and the package import, found {found}"


def test_lessons_import_no_harness(cmap):
    found = [v for m in lessons(cmap) for v in lesson_imports_harness(m, cmap.modules[m].tree)]
    assert not found, (
        "a lesson's own imports reach no harness (nor a topic package, whose __init__ imports "
        "its harness):\n" + "\n".join(found)
    )


def unshown_lesson_definitions(cmap, module: str) -> list[str]:
    """Top-level definitions of a lesson neither shown by a notebook nor reached, through the
    lesson's own definitions, from one that is."""
    mod = cmap.modules[module]
    seen = {d for d in mod.defs if (module, d) in cmap.shown}
    todo = list(seen)
    while todo:
        for m, d in cmap.edges.get((module, todo.pop()), ()):
            if m == module and d and d not in seen:
                seen.add(d)
                todo.append(d)
    return [d for d in mod.defs if d not in seen]


def test_every_lesson_definition_is_shown_or_called_by_one_that_is(cmap):
    found = {m: unshown_lesson_definitions(cmap, m) for m in lessons(cmap)}
    found = {m: d for m, d in found.items() if d}
    assert not found, (
        "lesson definitions no notebook shows, nor calls from a shown one (move them to the "
        f"harness): {found}"
    )


def test_what_a_notebook_shows_of_a_topic_lives_in_its_lesson(cmap):
    found = sorted(
        f"{m}.{d} (shown by {', '.join(sorted(nbs))})"
        for (m, d), nbs in cmap.shown.items()
        if m.endswith(".harness")
    )
    assert not found, f"shown definitions in a harness (move them to the lesson): {found}"


def test_a_lesson_reads_in_the_order_the_notebooks_show_it(cmap):
    """A reader who opens lesson.py meets the shown definitions in the order the notebooks first
    show them; what only a shown definition calls sits just before its first caller."""
    order = code_map.show_order(cmap.notebooks)
    wrong = {}
    for module in lessons(cmap):
        shown = [d for m, d in order if m == module]
        in_file = [d for d in cmap.modules[module].defs if d in shown]
        if in_file != shown:
            wrong[module] = {"file": in_file, "notebooks": shown}
    assert not wrong, f"lessons out of the notebooks' order (move the definitions): {wrong}"
