"""The version matrix (tools/matrix.py, `make test-torch` / `make test-matrix`), without torch:
the environment's stamp and install command, and the published report generated from a
synthetic JUnit record (a failing notebook cell as nbval reports it, a failing unit test)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tools import matrix

ROOT = Path(__file__).resolve().parents[1]

# nbval's report of a failing cell, as pytest's junitxml stores it (ESC written as #x1B)
NBVAL_FAILURE = (
    "#x1B[91mNotebook cell execution failed#x1B[0m\n#x1B[94mCell 1: Cell execution caused an "
    'exception\n\nInput:\n#x1B[0massert found == expected, f"expected {expected}, found '
    '{found}"\n\n#x1B[94mTraceback:#x1B[0m\n\n#x1B[31m-----------#x1B[39m\n'
    "#x1B[31mAssertionError#x1B[39m                            Traceback (most recent call last)\n"
    "#x1B[32m---> #x1B[39m#x1B[32m1#x1B[39m assert found == expected\n\n"
    "#x1B[31mAssertionError#x1B[39m: reduce_scatter_tensor: expected a FutureWarning,\n"
    "found none\n"
)


def _junit(cases: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
        '<testsuite name="pytest" errors="0" failures="2" skipped="1" tests="6" time="9.0" '
        f'timestamp="2026-12-01T09:00:00.000000+00:00">{cases}</testsuite></testsuites>'
    )


CASES = f"""
<testcase classname="notebooks.99_synthetic.ipynb" name="Cell 0" time="0.1"/>
<testcase classname="notebooks.99_synthetic.ipynb" name="Cell 1" time="0.2">
  <failure message="Notebook cell execution failed">{NBVAL_FAILURE}</failure></testcase>
<testcase classname="notebooks.98_other.ipynb" name="Cell 0" time="0.1"/>
<testcase classname="tests.test_claims" name="test_present" time="0.1"/>
<testcase classname="tests.test_claims" name="test_default" time="0.1">
  <failure message="AssertionError: torch.compile(fullgraph=...): expected default False, found
 True">def test_default():
&gt;   assert False
E   AssertionError: torch.compile(fullgraph=...): expected default False, found True</failure>
</testcase>
<testcase classname="tests.test_claims" name="test_skip" time="0.0">
  <skipped message="no GPU">no GPU</skipped></testcase>
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """_build/matrix after two runs: 2.14.1 clean, 2.15.0 with one failing cell and test."""
    out = tmp_path / "matrix"
    out.mkdir()
    clean = (
        '<testcase classname="notebooks.98_other.ipynb" name="Cell 0" time="0.1"/>'
        '<testcase classname="notebooks.98_other.ipynb" name="Cell 1" time="0.1"/>'
        '<testcase classname="tests.test_claims" name="test_present" time="0.1"/>'
    )
    (out / "torch-2.14.1.xml").write_text(_junit(clean))
    (out / "torch-2.15.0.xml").write_text(_junit(CASES))
    for version, local in (("2.14.1", "cu130"), ("2.15.0", "cu132")):
        meta = {
            "torch": version,
            "installed": f"{version}+{local}",
            "python": "3.11.7",
            "started": f"2026-12-0{1 if version == '2.14.1' else 2}T09:30:00+00:00",
            "seconds": 600.0,
        }
        (out / f"torch-{version}.json").write_text(json.dumps(meta))
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cells = [
        {"cell_type": "markdown", "id": "intro", "source": "# 99"},
        {"cell_type": "code", "id": "setup", "source": "x = 1"},
        {"cell_type": "code", "id": "the-check", "source": "assert x"},
    ]
    (notebooks / "99_synthetic.ipynb").write_text(json.dumps({"cells": cells}))
    return out


def test_a_failing_cell_is_recorded_with_its_assert_message(run_dir: Path) -> None:
    record = matrix.collect(run_dir, run_dir.parent / "notebooks")
    assert list(record["versions"]) == ["2.14.1", "2.15.0"], record["versions"].keys()
    assert record["date"] == "2026-12-02", record["date"]
    new = record["versions"]["2.15.0"]
    assert new["installed"] == "2.15.0+cu132" and new["python"] == "3.11.7"
    nb = new["notebooks"]["99_synthetic"]
    assert (nb["passed"], nb["failed"]) == (1, 1), nb
    assert nb["failures"] == [
        {
            "test": "Cell 1",
            "exception": "AssertionError",
            "message": "reduce_scatter_tensor: expected a FutureWarning,\nfound none",
            "code_cell": 1,
            "cell_id": "the-check",  # nbval counts code cells only
        }
    ], nb["failures"]
    unit = new["unit"]["tests/test_claims.py"]
    assert (unit["passed"], unit["failed"], unit["skipped"]) == (1, 1, 1), unit
    assert unit["failures"][0]["message"].startswith(
        "torch.compile(fullgraph=...): expected default False, found"
    ), unit["failures"]
    assert matrix.totals(new) == {
        "passed": 3,
        "failed": 2,
        "skipped": 1,
        "notebooks": 2,
        "notebooks_failing": 1,
    }
    old = record["versions"]["2.14.1"]
    assert matrix.totals(old)["failed"] == 0 and old["notebooks"]["98_other"]["passed"] == 2


def test_report_writes_the_record_the_book_page_and_the_readme_line(
    run_dir: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    readme = tmp_path / "README.md"
    original = (ROOT / "README.md").read_text()
    readme.write_text(original)
    args = ["report", "--out", str(run_dir), "--docs", str(docs), "--readme", str(readme)]
    args += ["--notebooks", str(run_dir.parent / "notebooks")]
    code = matrix.main(args)
    assert code == 0
    saved = json.loads((docs / "compatibility.json").read_text())
    assert saved["versions"]["2.15.0"]["installed"] == "2.15.0+cu132", saved
    page = (docs / "compatibility.md").read_text()
    assert page.startswith("# Compatibility"), page[:80]
    for expected in (
        "| 2.14.1 | `2.14.1+cu130` | 3.11.7 | 2026-12-01 09:30 |",
        "| 2.15.0 | `2.15.0+cu132` | 3.11.7 | 2026-12-02 09:30 | 3 | 2 | 10.0 |",
        "| notebook | torch 2.14.1 | torch 2.15.0 |",
        "| `99_synthetic` | not run | 1 / 1 |",
        "| `98_other` | 2 / 0 | 1 / 0 |",
        "**torch 2.15.0, 99_synthetic, code cell 1 (id the-check)**: `AssertionError`",
        "reduce_scatter_tensor: expected a FutureWarning,\nfound none",
        "| `tests/test_claims.py` | 1 / 0 | 1 / 1 |",
        "(2026-12-02); do not edit by hand",
    ):
        assert expected in page, f"compatibility.md lacks {expected!r}:\n{page}"
    text = readme.read_text()
    lines = [line for line in text.splitlines() if line.startswith(matrix.TESTED_ON)]
    assert lines == [
        "**Tested on** (2026-12-02, `make test-matrix`, asserts only): torch 2.14.1 (1/1 "
        "notebooks pass); torch 2.15.0 (1/2 notebooks pass, 2 cells or tests fail); torch "
        "2.13.0, the pin, by `make test`. Per notebook: "
        "[docs/compatibility.md](docs/compatibility.md)."
    ], lines
    section = text.split("## Two ways to check the notebooks", 1)[1].split("\n## ", 1)[0]
    assert lines[0] in section, "the line belongs to the section on checking the notebooks"
    # everything else in README.md is untouched, and a second report replaces the line
    without = [line for line in text.splitlines() if not line.startswith(matrix.TESTED_ON)]
    theirs = [line for line in original.splitlines() if not line.startswith(matrix.TESTED_ON)]
    assert [line for line in without if line] == [line for line in theirs if line]
    matrix.main(args)
    assert readme.read_text() == text, "a second report changed README.md"


def test_an_empty_record_says_so_and_writes_nothing(tmp_path: Path) -> None:
    code = matrix.main(["report", "--out", str(tmp_path), "--docs", str(tmp_path / "docs")])
    assert code == 1 and not (tmp_path / "docs").exists()


def test_failure_messages_from_the_forms_pytest_writes() -> None:
    assert matrix.failure_message(NBVAL_FAILURE) == (
        "AssertionError",
        "reduce_scatter_tensor: expected a FutureWarning,\nfound none",
    )
    unit = "def test():\n>   assert x\nE   AssertionError: expected 1, found 2\nE   assert 2 == 1"
    assert matrix.failure_message(unit) == ("AssertionError", "expected 1, found 2\nassert 2 == 1")
    error = "\x1b[31mFileNotFoundError\x1b[39m: [Errno 2] No such file: 'x.hpp'"
    assert matrix.failure_message(error) == ("FileNotFoundError", "[Errno 2] No such file: 'x.hpp'")
    gone = "Traceback:\n---> 3 show_source(f)\n\nPatternMissing: pattern 'x' occurs 0 time(s)"
    assert matrix.failure_message(gone) == ("PatternMissing", "pattern 'x' occurs 0 time(s)")
    moved = "E   helpers.source.SourceFileMissing: header_view: expected the file 'a.hpp'"
    assert matrix.failure_message(moved) == (
        "helpers.source.SourceFileMissing",
        "header_view: expected the file 'a.hpp'",
    )
    bare = "E       assert False\nE        +  where False = all(...)"
    assert matrix.failure_message(bare) == (
        "AssertionError",
        "assert False\n+  where False = all(...)",
    )
    assert matrix.failure_message("Timeout (600 s) waiting for the kernel") == (
        "Error",
        "Timeout (600 s) waiting for the kernel",
    )


def test_the_environment_is_built_from_requirements_without_their_torch_pin() -> None:
    text = "# pins\ntorch==2.13.0\ntorchvision==0.29.0\nnumpy==2.4.6\n"
    assert matrix.requirements_without_torch(text) == "# pins\ntorchvision==0.29.0\nnumpy==2.4.6\n"
    before = matrix.stamp_for("2.15.0", "numpy==2.4.6\n")
    after = matrix.stamp_for("2.15.0", "numpy==2.4.6\npytest-xdist==3.8.0\n")
    assert before["requirements_sha256"] != after["requirements_sha256"], "a new package reinstalls"
    assert matrix.same_release("2.15.0+cu132", "2.15.0")
    assert not matrix.same_release("2.14.1+cu130", "2.15.0")
    assert not matrix.same_release("2.15.0a0", "2.15.0") and not matrix.same_release(None, "2.15")


def _fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "torch-2.15.0"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    return venv


def test_a_current_stamp_skips_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_venv(tmp_path)
    requirements = matrix.requirements_without_torch((ROOT / "requirements.txt").read_text())
    (venv / matrix.STAMP).write_text(json.dumps(matrix.stamp_for("2.15.0", requirements)))

    def no_pip(*args, **kwargs):
        raise AssertionError(f"expected no command with a current stamp, found {args}")

    monkeypatch.setattr(matrix.subprocess, "run", no_pip)
    assert matrix.ensure_venv("2.15.0", venv) == 0.0


def test_install_overrides_the_machine_constraint_and_checks_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale stamp (requirements changed) installs again, with PIP_CONSTRAINT for that one pip
    command; a torch other than the one asked for after install is an error naming both."""
    venv = _fake_venv(tmp_path)
    (venv / matrix.STAMP).write_text(json.dumps(matrix.stamp_for("2.15.0", "old\n")))
    calls: list[tuple[list[str], dict | None]] = []
    installed = {"version": "2.14.1+cu130"}  # what a capped pip would have left

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs.get("env")))
        out = installed["version"] + "\n" if "-c" in cmd else ""
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(matrix.subprocess, "run", fake_run)
    with pytest.raises(SystemExit, match=r"asked for torch 2\.15\.0 .* found 2\.14\.1\+cu130"):
        matrix.ensure_venv("2.15.0", venv)
    pip, env = calls[0]
    assert pip[:6] == [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "torch==2.15.0"]
    assert env is not None and env["PIP_CONSTRAINT"] == "/dev/null", env
    assert "PIP_CONSTRAINT" not in (calls[1][1] or {}), "only the pip command gets the override"
    calls.clear()
    installed["version"] = "2.15.0+cu132"
    matrix.ensure_venv("2.15.0", venv)
    stamp = json.loads((venv / matrix.STAMP).read_text())
    assert stamp["installed"] == "2.15.0+cu132" and stamp["torch"] == "2.15.0", stamp
    assert matrix.ensure_venv("2.15.0", venv) == 0.0, "the new stamp is current"


def test_the_make_targets_run_the_matrix() -> None:
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "test-torch", "TORCH=2.15.0", "MATRIX_CACHE=/cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "tools/matrix.py test --cache /cache --out _build/matrix" in dry and "2.15.0" in dry
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "test-matrix"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert dry.rstrip().endswith("--newest 2.14.1 2.15.0"), dry
    listed_only = subprocess.run(
        ["make", "--no-print-directory", "-n", "test-matrix", "MATRIX_NEWEST="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--newest" not in listed_only, listed_only
    usage = subprocess.run(
        ["make", "--no-print-directory", "-s", "test-torch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert usage.returncode != 0 and "usage: make test-torch TORCH=" in usage.stdout


PIP_INDEX = """torch (2.16.0)
Available versions: 2.16.0, 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.12.1
  INSTALLED: 2.13.0+cpu
  LATEST:    2.16.0
"""


def test_the_newest_final_release_joins_the_listed_versions() -> None:
    assert matrix.newest_in(PIP_INDEX) == "2.16.0"
    # a local build (+cpu) and a pre-release are not releases; 2.10 sorts above 2.9
    local = "Available versions: 2.13.0+cpu, 2.16.0rc1, 2.15.0, 2.9.1, 2.10.0\n"
    assert matrix.newest_in(local) == "2.15.0"
    assert matrix.newest_in("Available versions: 2.9.1, 2.10.0\n") == "2.10.0"
    assert matrix.newest_in("ERROR: No matching distribution found for torch\n") is None
    assert matrix.with_newest(["2.14.1", "2.15.0"], "2.16.0") == ["2.14.1", "2.15.0", "2.16.0"]
    assert matrix.with_newest(["2.14.1", "2.15.0"], "2.15.0") == ["2.14.1", "2.15.0"]


def test_asking_the_index_lifts_the_constraint_and_fails_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[list[str], dict]] = []
    answer = {"code": 0, "stdout": PIP_INDEX, "stderr": ""}

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs["env"]))
        return subprocess.CompletedProcess(cmd, answer["code"], answer["stdout"], answer["stderr"])

    monkeypatch.setattr(matrix.subprocess, "run", fake_run)
    assert matrix.newest_release("python3") == "2.16.0"
    cmd, env = calls[0]
    assert cmd[:6] == ["python3", "-m", "pip", "index", "versions", "torch"], cmd
    assert env["PIP_CONSTRAINT"] == "/dev/null", "the machine's torch cap must not hide a release"
    answer.update(code=1, stdout="", stderr="ERROR: Could not reach the index")
    with pytest.raises(SystemExit, match=r"could not ask the package index.*Could not reach"):
        matrix.newest_release("python3")
