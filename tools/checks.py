"""Stored outputs of the exercises' check cells, written without running the notebook.

    python tools/checks.py [NN ...]   # every notebook when none is given

A notebook ships with its starters untouched, so each check cell's stored output is the
untouched starter's verdict (`helpers.exercises.verdict` of `NOT_STARTED`), which strict nbval
re-creates on every run. When that line's form changes (the mark, the wrapping) or a new check
cell is added, this writes it into the English notebook (with an execution count, which
nbval needs to compare a cell's outputs); `tools/zh.py build` then gives the twin
its Chinese line. Outputs of a check cell that are not a verdict are kept.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from helpers.exercises import NOT_STARTED, verdict  # noqa: E402
from helpers.exercises.i18n import language  # noqa: E402

CHECK = re.compile(r"""^check\(\s*["'](\d\d\.\d+)["']""", re.M)


def starter_output(keys: list[str]) -> str:
    with language("en"):
        return "".join(verdict(key, False, NOT_STARTED) + "\n" for key in keys)


def refresh(path: Path) -> int:
    """Rewrite the stored verdicts of `path`'s check cells; returns how many cells changed."""
    nb = nbformat.read(path, 4)
    changed = 0
    count = 0  # the execution count of the code cell before (nbval refuses outputs without one)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        count = cell.get("execution_count") or count + 1
        keys = CHECK.findall(cell.source)
        if not keys:
            continue
        if cell.get("execution_count") is None:
            cell.execution_count = count
            changed += 1
        kept = [
            o
            for o in cell.get("outputs", [])
            if not (o.get("output_type") == "stream" and o.get("name") == "stdout")
        ]
        new = [nbformat.v4.new_output("stream", name="stdout", text=starter_output(keys))] + kept
        if new != cell.get("outputs"):
            cell.outputs = new
            changed += 1
    if changed:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str]) -> int:
    picks = argv or [""]
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if any(nb.name.startswith(p) for p in picks):
            print(f"{nb.name}: {refresh(nb)} check cells rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
