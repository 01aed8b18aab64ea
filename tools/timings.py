"""Wall and CPU time per test file and per notebook (`make timings`).

As a pytest plugin (`pytest -p tools.timings --timings-out=DIR ...`) it measures every test item
from its setup to its teardown (so module fixtures, nbval's kernel start and shutdown and the
servers a test starts count for the file that uses them) and writes one JSON file per pytest
process into DIR (one per xdist worker). CPU time is user + system of the pytest process itself
plus every child process it has waited for (`resource.getrusage(RUSAGE_CHILDREN)`: kernels,
spawned ranks, torchrun and its workers, Chromium, JupyterLab, compilers), which is what the
machine spent on the file, whatever it was waiting on. A descendant that is orphaned and never
waited for by anyone in the tree is not counted (none of ours is: each launcher waits for its
children).

As a script (`python tools/timings.py DIR [--label TEXT]`) it merges those files into a Markdown
table: per file, wall seconds, CPU seconds, CPU/wall, and the worker that ran it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest


def _cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# --- pytest plugin -------------------------------------------------------------------------------


def pytest_addoption(parser) -> None:
    parser.getgroup("timings").addoption(
        "--timings-out",
        default=None,
        help="folder for per-file wall/CPU JSON (tools/timings.py merges it into a table)",
    )


class _Recorder:
    def __init__(self, out: Path, worker: str) -> None:
        self.out, self.worker = out, worker
        self.files: dict[str, dict] = defaultdict(
            lambda: {"wall": 0.0, "cpu": 0.0, "items": 0, "failed": 0, "worker": worker}
        )
        self.started_wall, self.started_cpu = time.perf_counter(), _cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        wall, cpu = time.perf_counter(), _cpu_seconds()
        yield
        entry = self.files[item.nodeid.split("::")[0]]
        entry["wall"] += time.perf_counter() - wall
        entry["cpu"] += _cpu_seconds() - cpu
        entry["items"] += 1
        if nextitem is None or nextitem.nodeid.split("::")[0] != item.nodeid.split("::")[0]:
            self.write()  # after each file: an interrupted run still leaves its table

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.files[report.nodeid.split("::")[0]]["failed"] += 1

    def pytest_sessionfinish(self, session) -> None:  # noqa: ARG002
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        record = {
            "worker": self.worker,
            "wall": time.perf_counter() - self.started_wall,
            "cpu": _cpu_seconds() - self.started_cpu,
            "files": dict(self.files),
        }
        (self.out / f"{self.worker}-{os.getpid()}.json").write_text(json.dumps(record, indent=1))


def pytest_configure(config) -> None:
    out = config.getoption("--timings-out")
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker == "main" and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no tests; its workers record
    config.pluginmanager.register(_Recorder(Path(out), worker), "timings-recorder")


# --- the table -----------------------------------------------------------------------------------


def table(folder: Path, label: str = "") -> str:
    """A Markdown table of the JSON files in folder: notebooks first, then test files."""
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    files: dict[str, dict] = {}
    for record in records:  # a file split across workers (it should not be) adds up
        for name, f in record["files"].items():
            if name in files:
                merged = files[name]
                for key in ("wall", "cpu", "items", "failed"):
                    merged[key] += f[key]
                merged["worker"] += "+" + f["worker"]
            else:
                files[name] = dict(f)
    lines = [f"### {label}" if label else "### timings", ""]
    for record in records:
        lines.append(
            f"- worker {record['worker']}: wall {record['wall']:.1f} s, "
            f"CPU {record['cpu']:.1f} s (children included)"
        )
    lines += ["", "| file | items | failed | wall s | CPU s | CPU/wall | worker |"]
    lines.append("|---|---:|---:|---:|---:|---:|---|")

    def rows(names: list[str]) -> tuple[float, float]:
        wall_sum = cpu_sum = 0.0
        for name in names:
            f = files[name]
            ratio = f["cpu"] / f["wall"] if f["wall"] else 0.0
            lines.append(
                f"| {name} | {f['items']} | {f['failed']} | {f['wall']:.1f} | {f['cpu']:.1f} "
                f"| {ratio:.2f} | {f['worker']} |"
            )
            wall_sum, cpu_sum = wall_sum + f["wall"], cpu_sum + f["cpu"]
        return wall_sum, cpu_sum

    notebooks = sorted(n for n in files if n.endswith(".ipynb"))
    tests = sorted((n for n in files if not n.endswith(".ipynb")), key=lambda n: -files[n]["wall"])
    nb_wall, nb_cpu = rows(notebooks)
    lines.append(
        f"| **notebooks ({len(notebooks)})** | | | **{nb_wall:.1f}** | **{nb_cpu:.1f}** |||"
    )
    t_wall, t_cpu = rows(tests)
    lines.append(f"| **test files ({len(tests)})** | | | **{t_wall:.1f}** | **{t_cpu:.1f}** | | |")
    lines.append(f"| **all** | | | **{nb_wall + t_wall:.1f}** | **{nb_cpu + t_cpu:.1f}** | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--weights", type=Path, help="also write {file: wall seconds} here (conftest.py's order)"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(table(args.folder, args.label))
    if args.weights:
        walls: dict[str, float] = {}
        for p in sorted(args.folder.glob("*.json")):
            for name, f in json.loads(p.read_text())["files"].items():
                walls[name] = round(walls.get(name, 0.0) + f["wall"], 1)
        args.weights.write_text(json.dumps(walls, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
