"""The generated map of the code (docs/code_map.md), the docstrings it checks, and the layering.

- docs/code_map.md is what `python tools/code_map.py` writes today (regenerated in memory);
- the "Used by" line of every module docstring in `src/helpers/` names the notebooks the map
  finds showing or using that module, no more and no fewer. The line is the first sentence of
  the docstring's paragraph that starts `Used by:` (or `Used in:`); its notebooks are the
  two-digit numbers and ranges in it (`05`, `06-08`, `notebooks/04_...`), or every notebook
  when it says "all notebooks"/"every notebook" and names none. A module reached only through
  another helper (the viewers through the lessons' entry points) names that helper, not the
  notebooks: the map counts what a notebook's own code cells name;
- `helpers/__init__.py` lists every module;
- the layering: lessons and harness never import the exercises, and import the step viewers
  only inside the entry points written down in `VIEWER_ENTRY_POINTS`.
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

# The one way a lesson module may reach the step viewers (helpers.viewers): a function that
# builds its notebook's viewer from data it computed, importing the widget class inside that
# function (so the lesson imports without anywidget). Measured with `ast` over src/helpers:
# these five are every import of helpers.viewers outside the package, and nothing outside
# helpers.exercises imports helpers.exercises.
VIEWER_ENTRY_POINTS = {
    ("helpers.allreduce", "ring_step_viewer"),
    ("helpers.context_parallel", "ring_attention_step_viewer"),
    ("helpers.expert_parallel", "exchange_step_viewer"),
    ("helpers.pipeline_parallel", "timeline_step_viewer"),
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
    assert refs.shown == {("helpers.allreduce", "ring_allreduce")}, (
        f"show_source's first argument must be shown, found {refs.shown}"
    )
    expected = {
        ("helpers.source", "show_source"),
        ("helpers.launch", "launch"),
        ("helpers.allreduce", "naive_allreduce"),
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
    expected = {m.removeprefix("helpers.") for m in cmap.mapped() if m != "helpers"}
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
