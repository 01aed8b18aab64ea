"""The student environment (issue 37): the dev container and `requirements-student.txt`.

What can be checked without a container runtime: the definition is valid JSON with the fields
the dev container spec defines, its commands are this Makefile's targets, the student set pins
exactly what requirements.txt pins, and every package the notebooks and the helpers import comes
with it. `make student-check` (CI) builds the environment from nothing and runs two notebooks.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

import nbformat
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DEVCONTAINER = ROOT / ".devcontainer" / "devcontainer.json"
STUDENT = ROOT / "requirements-student.txt"
#: imported by a helper that no notebook runs, with the reason
NOT_FOR_NOTEBOOKS = {
    "yaml": "helpers.dryrun reads torchgen's yaml for the GPU dry run (tests only)"
}


def _pins(path: Path) -> dict[str, str]:
    lines = [ln.strip() for ln in path.read_text().splitlines()]
    return {
        Requirement(ln).name.lower(): ln for ln in lines if ln and not ln.startswith(("#", "-"))
    }


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.M))


def test_devcontainer_is_valid_and_runs_the_makefiles_targets() -> None:
    spec = json.loads(DEVCONTAINER.read_text())
    assert (
        spec["image"].startswith("mcr.microsoft.com/devcontainers/python:")
        and "3.11" in spec["image"]
    ), f"the container's Python must be the project's 3.11: {spec['image']}"
    # Codespaces' smallest machine: 2 cores, 8 GB (the sizing in docs/teaching.md)
    assert spec["hostRequirements"] == {"cpus": 2, "memory": "8gb", "storage": "32gb"}
    assert spec["containerEnv"]["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"
    targets = _make_targets()
    for key in ("postCreateCommand", "postAttachCommand"):
        words = spec[key].split()
        assert words[0] == "make" and set(words[1:]) <= targets, (
            f"{key} must run this Makefile's targets, not its own commands: {spec[key]!r}"
        )
    assert spec["postCreateCommand"] == "make student"
    assert spec["forwardPorts"] == [8888]


def test_student_set_pins_what_requirements_pins_and_no_developer_tool() -> None:
    full, student = _pins(ROOT / "requirements.txt"), _pins(STUDENT)
    differ = {n: (line, full.get(n)) for n, line in student.items() if full.get(n) != line}
    assert not differ, f"requirements-student.txt must repeat requirements.txt's pins: {differ}"
    for tool in ("pytest", "nbval", "ruff", "sphinx", "playwright", "pytest-xdist", "myst-nb"):
        assert tool not in student, f"{tool} is a developer tool, not for students"
    assert student["torch"] == "torch==2.13.0"


def _closure(names: set[str]) -> set[str]:
    """The distributions `names` pull in (installed metadata, markers for this Python)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        for req in distribution(name).requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return seen


def _third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def scan(source: str, where: str) -> None:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top != "helpers":
                    found.setdefault(top, set()).add(where)

    for path in (ROOT / "src" / "helpers").rglob("*.py"):
        scan(path.read_text(), str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, 4).cells:
            if cell.cell_type == "code":
                code = "\n".join(
                    ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))
                )
                scan(code, path.name)
    return found


def test_every_import_of_the_notebooks_and_helpers_comes_with_the_student_set() -> None:
    provided = _closure(set(_pins(STUDENT)))
    by_module = packages_distributions()
    missing = {}
    for module, where in _third_party_imports().items():
        dists = {d.lower().replace("_", "-") for d in by_module.get(module, [])}
        if not dists & provided:
            missing[module] = sorted(where)[:3]
    assert not missing, f"imported but not in requirements-student.txt's closure: {missing}"


def test_a_cpu_wheel_is_what_pip_picks_for_the_exact_pin() -> None:
    # the Makefile's TORCH_INDEX comment: `==2.13.0` admits the local version `2.13.0+cpu`, and
    # pip takes the highest candidate of all indexes, which the local label makes the CPU wheel
    assert SpecifierSet("==2.13.0").contains("2.13.0+cpu")
    assert Version("2.13.0+cpu") > Version("2.13.0")
