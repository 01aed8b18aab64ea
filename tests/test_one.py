"""tools/one.py (`make one NB=05`): the contributor's loop runs the notebook, its twin, the tests
of the helpers it uses and its own cases of the per-notebook test files, all of which exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import one

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebook_05_runs_its_notebooks_its_helpers_tests_and_its_cases() -> None:
    first, second = one.commands("05", jobs=2)
    assert "--nbval" in first and "notebooks/05_allreduce_from_scratch.ipynb" in first
    assert "notebooks/zh/05_allreduce_from_scratch.ipynb" in first
    assert "tests/test_allreduce.py" in first, first  # helpers.allreduce: the ring it builds
    assert "tests/test_notebooks.py" not in first  # the whole suite's static rules: -k 05 only
    assert second[-2:] == ["-k", "05"] and "tests/test_exercises.py" in second


@pytest.mark.parametrize("number", NUMBERS)
def test_every_path_it_names_exists(number: str) -> None:
    for cmd in one.commands(number, jobs=2):
        for arg in cmd:
            if arg.startswith(("tests/", "notebooks/")):
                assert (ROOT / arg).exists(), f"make one NB={number} names {arg}, which is missing"
