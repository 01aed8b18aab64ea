"""The student environment, checked for real (`make student-check`, run by CI's `.ci/run`).

`make student VENV=_build/student-venv` has just built the student environment from nothing
(requirements-student.txt, the project kernel); this script, run with that environment's Python:

1. checks that none of the developer toolchain came with it (pytest, nbval, ruff, Sphinx,
   Playwright: the student set is what the notebooks need, not what the tests need);
2. executes notebooks 05 (gloo ranks started from the notebook) and 12 (a C++ operator built
   with the environment's ninja and the machine's compiler, run in ONNX Runtime) top to bottom on
   the project kernel, with JupyterLab's own nbconvert: a cell that raises fails the check;
3. prints each notebook's run time, and the environment's size on disk.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("05_allreduce_from_scratch.ipynb", "12_custom_cpp_operator_to_deployment.ipynb")
DEVELOPER_ONLY = ("pytest", "nbval", "ruff", "sphinx", "playwright", "xdist")


def main() -> int:
    present = [m for m in DEVELOPER_ONLY if importlib.util.find_spec(m) is not None]
    if present:
        print(f"student environment carries developer tools: {present}")
        return 1
    print(f"student environment: none of {', '.join(DEVELOPER_ONLY)}")
    out = ROOT / "_build" / "student-check"
    out.mkdir(parents=True, exist_ok=True)
    jupyter = Path(sys.executable).parent / "jupyter"
    for name in NOTEBOOKS:
        start = time.monotonic()
        run = subprocess.run(
            [
                str(jupyter),
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--ExecutePreprocessor.kernel_name=pytorch-source-reading",
                "--ExecutePreprocessor.timeout=600",
                "--output-dir",
                str(out),
                str(ROOT / "notebooks" / name),
            ],
            cwd=ROOT / "notebooks",
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-6000:])
            print(f"{name}: FAILED in the student environment")
            return 1
        print(f"{name}: ran top to bottom in {time.monotonic() - start:.0f} s")
    size = subprocess.run(["du", "-sm", sys.prefix], capture_output=True, text=True).stdout.split()[
        0
    ]
    print(f"student environment: {size} MB on disk ({sys.prefix})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
