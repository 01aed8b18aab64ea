"""What one student's run of a notebook costs a hub: peak memory and CPU time (issue 37).

    .venv/bin/python tools/sizing.py notebooks/16_pipeline_parallelism.ipynb ...

Executes each notebook top to bottom (nbclient, the project kernel) in a child process and
samples, every 0.2 s, the resident memory summed over that process and all its descendants (the
kernel, the gloo ranks and torchrun workers it starts, compilers): the peak is what a student's
container must hold at once (shared pages counted once per process, so it errs high). CPU time is
the user + system seconds of the child and the descendants it waited for, read when it ends.
Prints one Markdown row per notebook. Figures, not tests: the wall time depends on the machine
and on what else runs on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = (
    "import sys, nbformat, nbclient; nb = nbformat.read(sys.argv[1], 4); "
    "nbclient.NotebookClient(nb, timeout=900, kernel_name='pytorch-source-reading', "
    "resources={'metadata': {'path': 'notebooks'}}).execute()"
)


def _tree_rss(root: int) -> int:
    """Resident memory of `root` and every process descending from it (parent links in /proc:
    the kernel runs in a session of its own, so a session id would miss it)."""
    parent, rss = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
        except (OSError, IndexError):
            continue
        parent[int(pid)] = int(fields[1])  # field 4 of stat: the parent's pid
        rss[int(pid)] = next(
            (int(ln.split()[1]) * 1024 for ln in status if ln.startswith("VmRSS:")), 0
        )
    total = 0
    for pid in rss:
        p = pid
        while p in parent and p != root and p > 1:
            p = parent[p]
        if p == root:
            total += rss[pid]
    return total


def measure(notebook: str) -> tuple[float, float, float]:
    start = time.monotonic()
    before = os.times()
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, notebook], cwd=ROOT)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.2)
    if proc.returncode:
        raise SystemExit(f"{notebook} failed (exit {proc.returncode})")
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return peak / 2**30, cpu, time.monotonic() - start


def main(notebooks: list[str]) -> int:
    print("| notebook | peak memory (GiB, all its processes) | CPU time (s) | wall (s) |")
    print("|---|---:|---:|---:|")
    for nb in notebooks:
        peak, cpu, wall = measure(nb)
        print(f"| {Path(nb).stem} | {peak:.2f} | {cpu:.0f} | {wall:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
