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
descendant that is orphaned (re-parented outside the tree: a kernel whose server was killed
first, a browser's helper) takes the CPU it uses afterwards out of the tree, and is never counted
off either (the per-pid accounting of `_Snapshot.since`; before it, such a process made the next
file's CPU negative: test_zh.py -50.9 s in one run). Off Linux, the live part is 0.

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


def _processes() -> dict[int, tuple[int, int]]:
    """pid: (ppid, CPU ticks with the children it waited for) of every process in /proc
    (utime + stime + cutime + cstime of /proc/<pid>/stat); empty without /proc."""
    found: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        # fields after the name: state, ppid, ...
        found[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return found


def _descendants(table: dict[int, tuple[int, int]], root: int) -> set[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    found, todo = set(), list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _waited_cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for (cheap)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class _Snapshot:
    """The CPU of this process tree at one moment: this process with the children it waited
    for, and each live descendant (with its own waited-for children), by pid."""

    def __init__(self) -> None:
        self.waited = _waited_cpu_seconds()
        table = _processes()
        self.tree = {pid: table[pid] for pid in _descendants(table, os.getpid())}

    def since(self, before: _Snapshot) -> float:
        """CPU seconds the tree used from `before` to this snapshot. A descendant that was alive
        then counts with what it used since; one that is gone counts through whoever waited for
        it (its parent's cutime, or this process's RUSAGE_CHILDREN), so what it had used before
        is taken off once, but only when that reaper is still in the tree: a process orphaned
        (re-parented outside the tree, for example a kernel whose server was killed first) takes
        its CPU out of the tree, and counting it off would make a file's CPU negative."""
        ticks = 0
        for pid, (_, now) in self.tree.items():
            ticks += now - before.tree.get(pid, (0, 0))[1]
        for pid, (ppid, then) in before.tree.items():
            if pid in self.tree:
                continue
            if ppid == os.getpid() or ppid in self.tree:  # waited for inside the tree
                ticks -= then
        return self.waited - before.waited + ticks / _TICK


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
        self.started_wall, self.started_cpu = time.perf_counter(), _Snapshot()
        self.current: str | None = None  # the file whose items are running
        self.items: dict[str, list[float]] = {}  # nodeid: [wall s, CPU s]
        self.file_wall, self.file_cpu = 0.0, self.started_cpu

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        path = item.nodeid.split("::")[0]
        if self.current != path:  # the file's first item (a worker runs each file whole)
            self.current = path
            self.file_wall, self.file_cpu = time.perf_counter(), _Snapshot()
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
            entry["cpu"] += _Snapshot().since(self.file_cpu)
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
            "cpu": _Snapshot().since(self.started_cpu),
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
