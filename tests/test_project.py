"""The project's front door: pins agree, the two commands exist, CI calls the README's command."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> dict[str, str]:
    reqs = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, op, version = re.match(r"([A-Za-z0-9_.-]+)\s*(==|>=)\s*(\S+)", line).groups()
            reqs[name.lower()] = op + version
    return reqs


def test_torch_is_pinned_exactly() -> None:
    # a looser requirement pulls a multi-GB CUDA build instead of the local CPU wheel
    assert _requirements()["torch"] == "==2.13.0"


def test_everything_is_pinned_exactly_except_netron() -> None:
    loose = {name: spec for name, spec in _requirements().items() if not spec.startswith("==")}
    # Netron's viewer refuses to render ~180 days after its build: it must be allowed to move.
    assert loose == {"netron": ">=9.3.3"}


def test_environment_yml_agrees_with_requirements() -> None:
    """No conda channel is reachable here, so this check stands in for `conda env create`."""
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*- python=3\.11\s*$", text, re.M)
    assert re.search(r"^\s*- pip\s*$", text, re.M)
    assert re.search(r"^\s*- -r requirements\.txt\s*$", text, re.M)
    assert re.search(r"^\s*- -e \.\s*$", text, re.M)
    # and it pins nothing of its own that could disagree with requirements.txt
    deps = text.split("dependencies:", 1)[1]
    conda_deps = re.findall(r"^  - ([A-Za-z][\w.-]*)", deps, re.M)
    assert sorted(set(conda_deps)) == ["pip", "python"]  # "- pip" and "- pip:"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"


def test_readme_has_exactly_two_quick_start_commands_and_ci_runs_test_then_matrix() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)\s*$", quick, re.M)
    assert commands == ["make lab", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    # the README's test command, the student environment built from nothing (issue 37), then the
    # version matrix (the notebooks' asserts on every torch release it lists): nothing else
    ci_commands = [line for line in ci.splitlines() if line.startswith("make")]
    assert ci_commands == ["make test", "make student-check", "make test-matrix"], (
        f"expected make test, make student-check, make test-matrix; .ci/run runs {ci_commands}"
    )
    makefile = (ROOT / "Makefile").read_text()
    for target in ("help", "lab", "test", "execute", "lint", "bench", "test-torch", "test-matrix"):
        assert re.search(rf"^{target}:", makefile, re.M), target
    # JupyterLab listens on 127.0.0.1 unless the dev container (which forwards the port) says so
    assert "LAB_IP ?= 127.0.0.1" in makefile and "--ip=$(LAB_IP)" in makefile
    assert "--allow-root" in makefile
