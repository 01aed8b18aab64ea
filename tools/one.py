"""One notebook's loop for a contributor: what `make one NB=05` runs.

    python tools/one.py 05            # run it
    python tools/one.py 05 --list     # only print the two pytest command lines

`make test` stays the whole suite (and CI). After an edit to one notebook, its prose or the
helpers it uses, this runs what can fail because of it, in two pytest runs:

1. strict nbval of the notebook and its Chinese twin (`notebooks/zh`), and the test files that
   name a helper module the notebook shows or uses, read off the code by tools/code_map.py (the
   modules most notebooks use, `helpers.notebook`, `helpers.source`, `helpers.exercises`, ...,
   are left out: their tests are not about this notebook);
2. the notebook's own cases of the suite's per-notebook test files (its exercises both ways, the
   Chinese catalog and twin, the static rules, the slide metadata), selected with `-k NN`.

Whatever it runs, `make test` runs too; it is a subset, never a replacement.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tools import code_map  # noqa: E402

#: The test files with one case (or more) per notebook, whose ids hold the notebook's number.
PER_NOTEBOOK = (
    "tests/test_exercises.py",
    "tests/test_exercises_forms.py",
    "tests/test_zh.py",
    "tests/test_notebooks.py",
    "tests/test_slides.py",
    "tests/test_course.py",
)


def notebook_files(number: str) -> list[str]:
    found = sorted(ROOT.glob(f"notebooks/{number}_*.ipynb"))
    if not found:
        raise SystemExit(f"no notebook notebooks/{number}_*.ipynb")
    twin = ROOT / "notebooks" / "zh" / found[0].name
    return [str(p.relative_to(ROOT)) for p in (found[0], twin) if p.exists()]


@functools.cache
def _map() -> tuple[code_map.CodeMap, dict[str, set[str]]]:
    cmap = code_map.build()
    return cmap, code_map.used_by_notebooks(cmap)


def helper_tests(number: str) -> list[str]:
    """The tests naming a module (or a definition of it) that notebook `number` shows or uses,
    except the modules more than half of the notebooks use."""
    cmap, by = _map()
    half = len(cmap.notebooks) / 2
    own = {m for m, nbs in by.items() if number in nbs and len(nbs) <= half}
    tests: set[str] = set()
    for (module, _), who in cmap.tests.items():
        if any(module == m or module.startswith(m + ".") for m in own):
            tests |= who
    tests.discard("test_code_map")  # about the map of every notebook, not this one
    return [f"tests/{t}.py" for t in sorted(tests)]


def commands(number: str, jobs: int) -> list[list[str]]:
    python = sys.executable
    # as `make test` runs them: each file whole on one of `jobs` workers (tests/conftest.py)
    parallel = ["-n", str(jobs), "--dist", "loadfile", "--no-loadscope-reorder"]
    first = [python, "-m", "pytest", "-q", "-p", "no:randomly", *parallel, "--nbval"]
    first += notebook_files(number) + helper_tests(number)
    second = [python, "-m", "pytest", "-q", "-p", "no:randomly", *PER_NOTEBOOK, "-k", number]
    return [first, second]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("number", help="the notebook: its two digits (05) or its path")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="xdist workers")
    args = parser.parse_args(argv)
    found = re.fullmatch(r"\d{1,2}", args.number) or re.search(r"(?:^|/)(\d\d)_", args.number)
    if not found or "*" in args.number:
        parser.error(f"one notebook, as make one NB=05; found {args.number!r}")
    number = f"{int(found.group(found.lastindex or 0)):02d}"
    runs = commands(number, args.jobs)
    if args.list:
        for cmd in runs:
            print(shlex.join(cmd))
        return 0
    start, rc = time.monotonic(), 0
    for cmd in runs:
        print("+", shlex.join(cmd), flush=True)
        rc = subprocess.call(cmd, cwd=ROOT) or rc
    verdict = "passed" if rc == 0 else "FAILED"
    print(f"notebook {number}: {verdict} in {time.monotonic() - start:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
