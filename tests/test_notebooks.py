"""Conventions every notebook keeps (CONTRIBUTING.md explains each): read, not executed.

Each rule is a function from a notebook's cells to a list of problems, so the same rule runs
over every notebook in `notebooks/` and over small synthetic notebooks that break it on purpose
(`test_rules_catch_a_broken_notebook`): a rule that cannot fail would prove nothing.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_CODE_LINES = 40
# absolute paths of this machine that must never reach a stored output
MACHINE_PATH = re.compile(r"(/root/|/home/\w+/|/work/|/tmp/(?!ipykernel)|site-packages/)")
ADDRESS = re.compile(r"0x[0-9a-fA-F]{8,}")
LITERAL_BOOL = re.compile(r"\b(True|False)\b")
HARNESS = re.compile(r"#\s*harness\b")

Cells = list[dict]


def _cells(nb: Path) -> Cells:
    return json.loads(nb.read_text())["cells"]


def _src(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _code(cells: Cells) -> list[tuple[int, str]]:
    return [(i, _src(c)) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def _tree(src: str) -> ast.Module | None:
    """The cell parsed as Python, IPython magics and shell lines blanked; None if it isn't."""
    lines = ["" if re.match(r"\s*[%!]", line) else line for line in src.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


# --------------------------------------------------------------------------------------------
# the rules: cells -> problems ("cell N: what is wrong")
# --------------------------------------------------------------------------------------------


def bare_asserts(cells: Cells) -> list[str]:
    """Every assert says what it checks: a fact about the installed packages must say what it
    expected and what it found, so `pytest --nbval-lax` on a newer torch names what changed."""
    problems = []
    for i, src in _code(cells):
        tree = _tree(src)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assert) and node.msg is None:
                problems.append(f"cell {i}: bare `assert {ast.unparse(node.test)[:60]}`")
    return problems


def printed_literal_booleans(cells: Cells) -> list[str]:
    """A reader takes a printed value as measured: `print("match: True")` next to an assert
    shows a constant. Print the computed value (or nothing)."""
    problems = []
    for i, src in _code(cells):
        tree = _tree(src)
        for node in ast.walk(tree) if tree else ():
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"):
                continue
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Constant)
                    and isinstance(sub.value, str)
                    and LITERAL_BOOL.search(sub.value)
                ):
                    problems.append(f"cell {i}: prints the literal {sub.value!r}")
    return problems


def _launched(tree: ast.Module) -> list[str]:
    """Source text of the function handed to each `launch(fn, ...)` call in a cell."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name != "launch":
            continue
        target = node.args[0]
        if isinstance(target, ast.Call) and getattr(target.func, "attr", None) == "partial":
            target = target.args[0] if target.args else target  # functools.partial(fn, ...)
        found.append(ast.unparse(target))
    return found


def _shown(tree: ast.Module) -> set[str]:
    """Source text of the first argument of each show_source/source_view call in a cell."""
    return {
        ast.unparse(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and node.args
        and getattr(node.func, "id", getattr(node.func, "attr", None))
        in ("show_source", "source_view")
    }


def unshown_workers(cells: Cells) -> list[str]:
    """The reader sees the code that runs: a function handed to launch() is shown with
    show_source first, unless the launching cell says `# harness: why` (timing, comparison)."""
    problems, shown = [], set()
    for i, src in _code(cells):
        tree = _tree(src)
        if tree is None:
            continue
        shown |= _shown(tree)
        if HARNESS.search(src):
            continue
        for fn in _launched(tree):
            if fn not in shown and not fn.startswith("lambda"):
                problems.append(f"cell {i}: launch({fn}, ...) before show_source({fn})")
    return problems


def fenced_python(cells: Cells) -> list[str]:
    """Code in prose is an untested copy: show the helper live instead."""
    return [
        f"cell {i}: markdown holds a ```python block"
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and re.search(r"```\s*(python|py)\b", _src(c))
    ]


def sections_without_check(cells: Cells) -> list[str]:
    """Each numbered section ends in a check: some code cell in it holds an assert."""
    problems, section, has_check = [], None, True
    for c in cells + [{"cell_type": "markdown", "source": "## end"}]:
        src = _src(c)
        if c["cell_type"] == "markdown" and src.startswith("## "):
            if not has_check:
                problems.append(f"section {section!r} has no assert")
            section = src.splitlines()[0]
            has_check = not re.match(r"## \d+\. ", section)
        elif c["cell_type"] == "code" and re.search(r"\bassert\b|assert_close\(", src):
            has_check = True
    return problems


def no_then_vs_now(cells: Cells) -> list[str]:
    """Version drift is content: every notebook has a 'Then vs now' table."""
    text = "\n".join(_src(c) for c in cells)
    return [] if re.search(r"then vs\.? now", text, re.IGNORECASE) else ["no 'Then vs now' table"]


# the calls that cut an excerpt (helpers.source), and where header_view takes `after` by position
EXCERPT_CALLS = {"show_source", "source_view", "header_view", "file_view"}
AFTER_POSITION = {"header_view": 3}  # header_view(relpath, pattern, before, after, until)


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def excerpts_cut_by_count(cells: Cells) -> list[str]:
    """Excerpts end at a name, never at a count: `after=N` shows whatever lines follow the
    pattern, so a changed source shifts the window silently; `until=` (or the whole definition)
    fails loudly instead."""
    problems = []
    for i, cell in enumerate(cells):
        tree = _tree(_src(cell)) if cell["cell_type"] == "code" else None
        for node in ast.walk(tree) if tree is not None else ():
            if not isinstance(node, ast.Call) or _callee(node) not in EXCERPT_CALLS:
                continue
            name = _callee(node)
            by_keyword = any(k.arg == "after" for k in node.keywords)
            if by_keyword or len(node.args) > AFTER_POSITION.get(name, len(node.args)):
                problems.append(
                    f"cell {i} (id {cell.get('id', '?')}): {name}(...) cuts with after=; end it "
                    "at a pattern (until=) or show the whole definition"
                )
    return problems


RULES: list[Callable[[Cells], list[str]]] = [
    bare_asserts,
    printed_literal_booleans,
    unshown_workers,
    fenced_python,
    sections_without_check,
    no_then_vs_now,
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_rule(nb: Path, rule: Callable[[Cells], list[str]]) -> None:
    problems = rule(_cells(nb))
    assert not problems, f"{nb.name}: {rule.__doc__.split(':')[0]}\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------------
# the rules fail on a notebook that breaks them
# --------------------------------------------------------------------------------------------


def _md(src: str) -> dict:
    return {"cell_type": "markdown", "source": src}


def _py(src: str) -> dict:
    return {"cell_type": "code", "source": src, "outputs": []}


GOOD = [
    _md("# 99 · Synthetic\n\nThen vs now: a table."),
    _md("## 1. Launch"),
    _py("show_source(helpers.ddp.worker)"),
    _py("out = launch(helpers.ddp.worker, 2)\nassert out == [1], f'expected [1], found {out}'"),
    _py("%time x = 1\nprint(f'match: {x == 1}')"),
    _py("out = launch(timing_worker, 2)  # harness: timing only\nassert out, 'no result'"),
]

BROKEN = {
    bare_asserts: _py("import torch\nassert hasattr(torch, 'compile')"),
    printed_literal_booleans: _py("x = 1\nassert x == 1, 'x'\nprint('match: True')"),
    unshown_workers: _py("out = launch(helpers.ddp.other_worker, 2)\nassert out, 'no result'"),
    fenced_python: _md("Like this:\n\n```python\nfor x in loader:\n    step(x)\n```"),
    sections_without_check: _md("## 2. A section that only prints"),
    excerpts_cut_by_count: _py("show_source(torch.compile, r'return', before=0, after=3)"),
}


def test_rules_pass_a_good_notebook() -> None:
    for rule in RULES:
        assert rule(GOOD) == [], f"{rule.__name__} rejects a notebook that keeps it"


@pytest.mark.parametrize("rule", list(BROKEN), ids=lambda r: r.__name__)
def test_rules_catch_a_broken_notebook(rule: Callable[[Cells], list[str]]) -> None:
    broken = GOOD + [BROKEN[rule]] + [_md("## Summary")]
    problems = rule(broken)
    assert problems, f"{rule.__name__} let a broken cell through"
    assert all(rule is other or other(broken) == [] for other in BROKEN), "one break, one rule"


def test_then_vs_now_rule_catches_a_missing_table() -> None:
    assert no_then_vs_now([_md("# 99 · Synthetic"), _py("x = 1")]) == ["no 'Then vs now' table"]


def test_unshown_worker_names_the_function() -> None:
    cells = [_py("launch(functools.partial(collectives.identity_worker, 3), world_size=2)")]
    assert unshown_workers(cells) == [
        "cell 0: launch(collectives.identity_worker, ...) before show_source("
        "collectives.identity_worker)"
    ]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_excerpts_are_cut_by_name(nb: Path) -> None:
    problems = excerpts_cut_by_count(_cells(nb))
    assert not problems, f"{nb.name}: excerpts cut by a line count\n" + "\n".join(problems)


def test_excerpt_rule_names_the_cell_and_reads_calls_not_text() -> None:
    cells = [
        {**_py('show_source(fn, r"if x", before=0, until=r"return")'), "id": "by-name"},
        _md("`after=3` in prose is not a call"),
        _py('text = "show_source(fn, after=3)"  # a string, not a call'),
        {**_py('v = helpers.source.source_view(\n    fn, r"def",\n    after=2,\n)'), "id": "a"},
        {**_py('header_view("c10d/x.hpp", r"struct", 0, 4)'), "id": "b"},
        {**_py('header_view("c10d/x.hpp", r"struct", 0, until=r"};")'), "id": "c"},
    ]
    assert excerpts_cut_by_count(cells) == [
        "cell 3 (id a): source_view(...) cuts with after=; end it at a pattern (until=) or show "
        "the whole definition",
        "cell 4 (id b): header_view(...) cuts with after=; end it at a pattern (until=) or show "
        "the whole definition",
    ]
    assert excerpts_cut_by_count(GOOD) == [], "the rule rejects a notebook without after= cuts"


# --------------------------------------------------------------------------------------------
# structure and output hygiene of every notebook
# --------------------------------------------------------------------------------------------


def test_notebooks_exist() -> None:
    assert NOTEBOOKS, "no notebooks found"
    names = [nb.name for nb in NOTEBOOKS]
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", n) for n in names), names
    prefixes = [n[:2] for n in names]
    assert len(set(prefixes)) == len(prefixes), f"two notebooks share a number: {names}"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_title_and_sections(nb: Path) -> None:
    cells = _cells(nb)
    first = _src(cells[0])
    assert cells[0]["cell_type"] == "markdown"
    assert re.match(rf"# {nb.name[:2]} · \S", first), f"{nb.name}: title must be '# NN · Title'"
    assert "You will learn" in first, f"{nb.name}: first cell needs 'You will learn'"
    assert "Prerequisites" in first, f"{nb.name}: first cell needs 'Prerequisites'"
    headings = [
        line for c in cells if c["cell_type"] == "markdown" for line in _src(c).splitlines()
    ]
    for section in ("## Exercises", "## Summary", "## Further reading"):
        assert any(h.startswith(section) for h in headings), f"{nb.name}: missing {section}"
    numbered = [h for h in headings if re.match(r"## \d+\. ", h)]
    assert len(numbered) >= 2, f"{nb.name}: needs numbered sections '## 1. ...'"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell(nb: Path) -> None:
    first = _code(_cells(nb))[0][1]
    assert "NBVAL_IGNORE_OUTPUT" in first and "setup_notebook" in first, (
        f"{nb.name}: first code cell must call setup_notebook() under # NBVAL_IGNORE_OUTPUT"
    )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_stored_and_clean(nb: Path) -> None:
    code = [c for c in _cells(nb) if c["cell_type"] == "code" and _src(c).strip()]
    assert any(c.get("outputs") for c in code), f"{nb.name}: stored without outputs"
    for i, c in enumerate(code):
        text = json.dumps(c.get("outputs", []))
        assert not MACHINE_PATH.search(text), f"{nb.name} code cell {i}: machine path in output"
        if "NBVAL_IGNORE_OUTPUT" not in _src(c):
            assert not ADDRESS.search(text), f"{nb.name} code cell {i}: memory address in output"
        errors = [o for o in c.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            assert "NBVAL_RAISES_EXCEPTION" in _src(c), f"{nb.name} code cell {i}: stored error"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_cell_size_and_style(nb: Path) -> None:
    for i, src in _code(_cells(nb)):
        lines = src.splitlines()
        assert len(lines) <= MAX_CODE_LINES, f"{nb.name} cell {i}: {len(lines)} lines (max 40)"
        assert not src.rstrip().endswith(";"), f"{nb.name} cell {i}: use `_ = expr`, not `;`"
        assert "weights_only=False" not in src, f"{nb.name} cell {i}: weights_only=False"
        assert _tree(src) is not None, f"{nb.name} cell {i}: not valid Python"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_typed_line_numbers(nb: Path) -> None:
    """Source is shown live; prose never points at a line number of torch's files."""
    for c in _cells(nb):
        src = _src(c)
        assert not re.search(r"\.py[:#]L?\d+|\bline \d{2,}\b|#L\d+", src), (
            f"{nb.name}: typed line number in {src[:80]!r}"
        )


KERNEL = "pytorch-source-reading"  # the project kernel (Makefile KERNEL, `make execute`)


def kernel_problems(metadata: dict) -> list[str]:
    """The notebook opens with the project's kernel (the venv `make lab` installs), not a generic
    `python3` that may have no torch or another one."""
    spec = metadata.get("kernelspec") or {}
    if spec.get("name") != KERNEL:
        return [f"kernelspec: expected name {KERNEL!r}, found {spec.get('name')!r}"]
    return []


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_kernelspec_is_the_project_kernel(nb: Path) -> None:
    problems = kernel_problems(json.loads(nb.read_text())["metadata"])
    assert not problems, f"{nb.name}: {problems}"


def test_kernelspec_rule_catches_a_generic_kernel() -> None:
    good = {"kernelspec": {"name": KERNEL, "display_name": "Python 3 (PyTorch Source Reading)"}}
    assert kernel_problems(good) == []
    assert kernel_problems({"kernelspec": {"name": "python3"}}) == [
        "kernelspec: expected name 'pytorch-source-reading', found 'python3'"
    ]
    assert kernel_problems({}) == ["kernelspec: expected name 'pytorch-source-reading', found None"]
