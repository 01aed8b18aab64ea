"""Conventions every notebook keeps (see shared CONVENTIONS.md): read, not executed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_CODE_LINES = 40
# absolute paths of this machine that must never reach a stored output
MACHINE_PATH = re.compile(r"(/root/|/home/\w+/|/work/|/tmp/(?!ipykernel)|site-packages/)")
ADDRESS = re.compile(r"0x[0-9a-fA-F]{8,}")


def _cells(nb: Path) -> list[dict]:
    return json.loads(nb.read_text())["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


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
    code = [c for c in _cells(nb) if c["cell_type"] == "code"]
    first = _src(code[0])
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
    for i, c in enumerate(_cells(nb)):
        src = _src(c)
        if c["cell_type"] != "code":
            continue
        lines = src.splitlines()
        assert len(lines) <= MAX_CODE_LINES, f"{nb.name} cell {i}: {len(lines)} lines (max 40)"
        assert not src.rstrip().endswith(";"), f"{nb.name} cell {i}: use `_ = expr`, not `;`"
        assert "weights_only=False" not in src, f"{nb.name} cell {i}: weights_only=False"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_typed_line_numbers(nb: Path) -> None:
    """Source is shown live; prose never points at a line number of torch's files."""
    for c in _cells(nb):
        src = _src(c)
        assert not re.search(r"\.py[:#]L?\d+|\bline \d{2,}\b|#L\d+", src), (
            f"{nb.name}: typed line number in {src[:80]!r}"
        )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_every_section_checks_something(nb: Path) -> None:
    """Each numbered section ends in a check: an assert (or a 'match: True' line)."""
    cells = _cells(nb)
    section, has_check = None, True
    for c in cells + [{"cell_type": "markdown", "source": ["## end"]}]:
        src = _src(c)
        if c["cell_type"] == "markdown" and src.startswith("## "):
            assert has_check, f"{nb.name}: section {section!r} has no assert"
            section = src.splitlines()[0]
            has_check = not re.match(r"## \d+\. ", section)
        elif c["cell_type"] == "code" and ("assert" in src or "match:" in src):
            has_check = True
