"""Checks of slurm/: the batch file and the one-host cluster scripts (cheap, no Slurm needed).

The real run is `make slurm-check` (slurm/check_local.sh: a one-host Slurm cluster runs
slurm/train_ddp.sbatch, requeues it and checks the resume); it needs root and a few minutes,
so it is not part of `make test`. Set RUN_SLURM_CHECK=1 to run it from pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["slurm/train_ddp.sbatch", "slurm/local_cluster.sh", "slurm/check_local.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_are_executable(script: str) -> None:
    path = ROOT / script
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, f"{script}: bash -n says {result.stderr}"
    if script.endswith(".sh"):
        assert os.access(path, os.X_OK), f"{script} is not executable"


def test_batch_file_needs_no_restart_workaround() -> None:
    text = (ROOT / "slurm/train_ddp.sbatch").read_text()
    assert not re.search(r"(?m)^\s*export TORCH_DISABLE_SHARE_RDZV_TCP_STORE", text)
    for option in ("--requeue", "--open-mode=append", "--rdzv-backend=c10d", "--max-restarts"):
        assert option in text, f"train_ddp.sbatch lacks {option}"
    assert '--nnodes="$SLURM_NTASKS"' in text  # one torchrun per task


@pytest.mark.skipif(os.environ.get("RUN_SLURM_CHECK") != "1", reason="set RUN_SLURM_CHECK=1")
def test_local_slurm_runs_and_requeues_the_job() -> None:
    result = subprocess.run(
        [str(ROOT / "slurm/check_local.sh")], capture_output=True, text=True, timeout=1500
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "slurm-check passed" in result.stdout
