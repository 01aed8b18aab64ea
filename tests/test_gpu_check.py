"""tools/gpu_check.py (`make test-gpu`): on a machine without a GPU it stops at once, saying why."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import gpu_check  # noqa: E402


def test_without_gpu_it_stops_with_status_2_naming_what_it_needs(tmp_path: Path) -> None:
    if gpu_check.visible_gpus()[0]:
        pytest.skip("this machine has a GPU: make test-gpu runs instead of stopping")
    start_report = gpu_check.REPORT.read_text() if gpu_check.REPORT.exists() else None
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, f"expected exit status 2, found {out.returncode}: {out.stderr}"
    for words in ("needs a machine with at least one NVIDIA GPU", "nvidia-smi", "CUDA build",
                  "two or more GPUs", "Found: no nvidia-smi"):  # fmt: skip
        assert words in out.stderr, f"expected {words!r} in the message, found {out.stderr!r}"
    assert out.stdout == "", f"expected nothing on stdout, found {out.stdout!r}"
    now = gpu_check.REPORT.read_text() if gpu_check.REPORT.exists() else None
    assert now == start_report, "without a GPU no report should be written"


def test_a_driver_that_lists_no_gpu_counts_as_none(monkeypatch, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert gpu_check.visible_gpus() == (0, "0 GPU(s) listed by nvidia-smi")
    assert gpu_check.main([]) == 2, "a driver without GPUs should stop the check with status 2"


def test_gpu_designed_notebooks_come_from_course_toml() -> None:
    designed = gpu_check.gpu_designed()
    assert {"04", "05", "06", "07", "08"} <= designed, f"expected 04-08 among {designed}"
    assert "00" not in designed, f"00 runs on CPU only, found {designed}"


def test_junit_outcomes_name_the_failing_cell_and_its_error(tmp_path: Path) -> None:
    # the shape pytest --nbval-lax writes (measured on a two-cell notebook): ESC as "#x1B"
    failure = (
        "#x1B[91mNotebook cell execution failed#x1B[0m\n#x1B[94mCell 1: Cell execution caused "
        "an exception\n\nInput:\n#x1B[0massert False, 'boom'\n\n#x1B[31mAssertionError#x1B[39m"
        "    Traceback (most recent call last)\n#x1B[31mAssertionError#x1B[39m: boom: expected 1"
    )
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.04_tiny.ipynb" name="Cell 0" />'
        f'<testcase classname="notebooks.04_tiny.ipynb" name="Cell 1"><failure message="x">'
        f"{failure}</failure></testcase>"
        '<testcase classname="notebooks.05_fine.ipynb" name="Cell 0" />'
        "</testsuite></testsuites>"
    )
    found = gpu_check.outcomes_from_junit(xml, ["04_tiny.ipynb", "05_fine.ipynb", "06.ipynb"])
    assert found == {
        "04_tiny.ipynb": ("failed", "Cell 1: AssertionError: boom: expected 1"),
        "05_fine.ipynb": ("passed", ""),
    }, f"expected 04 failed at its cell 1 with the assert's words and 05 passed, found {found}"


def test_the_report_counts_each_notebook_launch_per_backend(monkeypatch, tmp_path: Path) -> None:
    """helpers.launch appends a line per launch to PSR_LAUNCH_LOG; the report row counts them."""
    sys.path.insert(0, str(ROOT / "src"))
    from helpers.launch import _log_launch  # noqa: PLC0415 - after the path

    log = tmp_path / "nb.launches.jsonl"
    monkeypatch.setenv("PSR_LAUNCH_LOG", str(log))
    for n, asked, chosen in [(2, "auto", "nccl"), (4, "auto", "gloo"), (4, "auto", "gloo"),
                             (2, "gloo", "gloo")]:  # fmt: skip
        _log_launch(test_the_report_counts_each_notebook_launch_per_backend, n, asked, chosen)
    found = gpu_check.launch_summary(log)
    expected = (
        "launches: 3 on gloo, 1 on nccl (backend='auto' but too few GPUs for NCCL: 4 ranks x2)"
    )
    assert found == expected, f"expected {expected!r}, found {found!r}"
    assert gpu_check.launch_summary(tmp_path / "none.jsonl") == "", "no launch: nothing to say"


def test_every_calibration_toy_exists_and_the_report_says_when_no_nccl_ran() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import dryrun_workers  # noqa: PLC0415 - after the path

    missing = [name for name in gpu_check.CALIBRATION if not hasattr(dryrun_workers, name)]
    assert not missing, f"CALIBRATION names toys tests/dryrun_workers.py lacks: {missing}"
    skipped = [("04_x.ipynb", "skipped", "too few GPUs: NCCL needs 2, found 1")]
    text = gpu_check.report({"version": "2.13.0+cu"}, 1, skipped, [], [("t", "agrees", "m")])
    assert "**No NCCL launch of two or more ranks ran** (1 GPU(s))" in text, text
    assert "| t | agrees | m |" in text, f"expected the toy row in the report, found {text}"


def test_a_snippet_runs_within_the_budget_or_says_why_not() -> None:
    done = gpu_check.run_snippet(sys.executable, "print('ok')", time.time() + 60, floor=5, cap=30)
    assert done.returncode == 0 and done.stdout.strip() == "ok", f"expected 'ok', found {done}"
    late = gpu_check.run_snippet(sys.executable, "print('ok')", time.time() + 1, floor=5, cap=30)
    assert late == ("not run", "the budget ran out"), f"expected not run, found {late}"
    slow = gpu_check.run_snippet(
        sys.executable, "import time; time.sleep(5)", time.time() + 60, floor=0, cap=0.5
    )
    assert slow == ("failed", "timed out"), f"expected a timeout, found {slow}"


def test_a_calibration_toy_fails_only_when_a_rank_raised() -> None:
    rank = "helpers.launch.WorkerError: rank 0 failed: ValueError: Tensors must be CUDA and dense"
    cases = [
        (0, "", "passes"),
        (1, rank, "fails"),
        (1, "ModuleNotFoundError: dryrun_workers", "error"),
    ]
    found = [gpu_check.calibration_outcome(code, err) for code, err, _ in cases]
    expected = [want for _, _, want in cases]
    assert found == expected, f"expected {expected}, found {found}"
