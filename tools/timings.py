"""Wall and CPU time per test file and per notebook (`make timings`).

As a pytest plugin (`pytest -p tools.timings --timings-out=DIR ...`) it measures every test file
from the setup of its first item to the teardown of its last (so module fixtures, nbval's kernel
start and shutdown and the servers a test starts count for the file that uses them) and writes
one JSON file per pytest process into DIR (one per xdist worker). CPU time is user + system of
the whole process tree: the pytest process itself, every child it has waited for
(`resource.getrusage(RUSAGE_CHILDREN)`), and every descendant still alive (or not yet reaped)
when the file starts and ends, read from /proc/<pid>/stat with the children each of them waited
for. So a process that outlives the file (the session's Chromium, a kernel shut down later)
counts for the files during which it ran, not for the one that happens to reap it. A
descendant that is orphaned (re-parented outside the tree) before anyone waits for it is lost
(none of ours is: each launcher waits for its children). Off Linux, the live part is 0.

As a script (`python tools/timings.py DIR [--label TEXT] [--items N]`) it merges those files into
a Markdown table: per file, wall seconds, CPU seconds, CPU/wall, and the worker that ran it;
`--items N` adds the N tests that used the most CPU (per test only the process itself and the
children it waited for count: a fixture's server shows up in its file's figure, not here).
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

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _live_descendants_cpu(root: int) -> float:
    """CPU seconds of every live (or zombie) descendant of `root`, with the children each has
    waited for (utime + stime + cutime + cstime of /proc/<pid>/stat); 0.0 without /proc."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(name)
        parents[pid] = int(fields[1])  # fields after the name: state, ppid, ...
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in parents.items():
        children[ppid].append(pid)
    total, todo = 0, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        total += ticks[pid]
        todo.extend(children.get(pid, ()))
    return total / _TICK


def _waited_cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for (cheap)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_seconds() -> float:
    """User + system CPU of this process, of every child it has waited for, and of every
    descendant still running (see the module docstring)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return waited + _live_descendants_cpu(os.getpid())


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
        self.current: str | None = None  # the file whose items are running
        self.items: dict[str, list[float]] = {}  # nodeid: [wall s, CPU s]
        self.file_wall = self.file_cpu = 0.0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        path = item.nodeid.split("::")[0]
        if self.current != path:  # the file's first item (a worker runs each file whole)
            self.current = path
            self.file_wall, self.file_cpu = time.perf_counter(), _cpu_seconds()
        item_wall, item_cpu = time.perf_counter(), _waited_cpu_seconds()
        yield
        entry = self.files[path]
        entry["items"] += 1
        # per test: the children it waited for itself (a torchrun run, a subprocess), not
        # what a process still running (a fixture's server) will spend later
        self.items[item.nodeid] = [
            round(time.perf_counter() - item_wall, 2),
            round(_waited_cpu_seconds() - item_cpu, 2),
        ]
        if nextitem is None or nextitem.nodeid.split("::")[0] != path:  # its last item
            entry["wall"] += time.perf_counter() - self.file_wall
            entry["cpu"] += _cpu_seconds() - self.file_cpu
            self.current = None
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
            "items": self.items,
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


def item_table(folder: Path, n: int) -> str:
    """The `n` tests that used the most CPU (their own and their waited-for children's)."""
    items: dict[str, list[float]] = {}
    for p in sorted(folder.glob("*.json")):
        items.update(json.loads(p.read_text()).get("items", {}))
    top = sorted(items.items(), key=lambda kv: -kv[1][1])[:n]
    lines = ["", f"| test ({n} most CPU) | wall s | CPU s |", "|---|---:|---:|"]
    lines += [f"| {nodeid} | {wall:.1f} | {cpu:.1f} |" for nodeid, (wall, cpu) in top]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--weights", type=Path, help="also write {file: wall seconds} here (conftest.py's order)"
    )
    parser.add_argument(
        "--items", type=int, default=0, help="also list the N tests that used the most CPU"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(table(args.folder, args.label))
    if args.items:
        sys.stdout.write(item_table(args.folder, args.items))
    if args.weights:
        walls: dict[str, float] = {}
        for p in sorted(args.folder.glob("*.json")):
            for name, f in json.loads(p.read_text())["files"].items():
                walls[name] = round(walls.get(name, 0.0) + f["wall"], 1)
        args.weights.write_text(json.dumps(walls, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
