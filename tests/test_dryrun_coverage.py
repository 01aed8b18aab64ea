"""What the device dry run audits, against what the notebooks and the exercises launch.

tests/dryrun_audit.py is a hand-written list; this test reads every `launch(...)` call of the
notebooks' code cells and of the exercise checkers (`src/helpers/exercises/*.py`) and fails when a
launch that can take NCCL (backend "auto", the default) runs a worker the audit does not run, or
at a world size the audit does not use, unless `NOT_AUDITED` below names it with the reason. A
launch that asks for gloo in a GPU-designed notebook must be in the audit's `GLOO_ONLY`. An entry
of `NOT_AUDITED` that the audit now covers fails too, so the list stays the list of what the dry
run did not check (the notebooks' runs-on sentences and the closing notes cite it).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import dryrun_audit  # noqa: E402

# ("NN <cell id>" or "exercises nbNN", worker, world size as written) -> why the dry run does
# not run it
NOT_AUDITED = {
    ("05 17", "algorithms_vs_library_worker", "n"): (
        "launched at n = 2, 3 and 4 (cell 17); audited at 2 and at 3 with the extra cases: "
        "the 4-rank launch is not"
    ),
    ("05 a05r0002", "algorithms_vs_library_worker", "n"): (
        "the edit-and-rerun cell's launches at n = 2, 3 and 4 run the reader's own copy of the "
        "ring, which the dry run never sees (the audit runs the helper's)"
    ),
    ("13 571a9f27", "sharding_worker", "n"): (
        "launched at n = 2 and 4; audited at 2: the 4-rank run is not"
    ),
}


def _design() -> dict[str, str]:
    course = tomllib.loads((ROOT / "notebooks" / "course.toml").read_text(encoding="utf-8"))
    return {f"{nb['number']:02d}": nb["runs_on"] for nb in course["notebook"]}


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else ast.unparse(node)


def _jobs(tree: ast.AST) -> list[str]:
    """The workers of a `jobs = [(worker, args), ...]` list (what `jobs_worker` runs)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "jobs" for t in node.targets
        ):
            return [_name(e.elts[0]) for e in node.value.elts if isinstance(e, ast.Tuple)]
    return []


def launches(where: str, source: str) -> list[tuple[str, str, str, str]]:
    """(where, worker, world size as written, backend) for every launch(...) in `source`."""
    code = "\n".join(line for line in source.splitlines() if not line.startswith(("%", "!")))
    tree = ast.parse(code)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) == "launch" and node.args):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        size = node.args[1] if len(node.args) > 1 else kw.get("world_size")
        backend = kw.get("backend")
        b = ast.literal_eval(backend) if isinstance(backend, ast.Constant) else "auto"
        if backend is not None and not isinstance(backend, ast.Constant):
            b = ast.unparse(backend)
        worker = _name(node.args[0])
        n = ast.unparse(size) if size is not None else "?"
        names = _jobs(tree) if worker == "jobs_worker" else [worker]
        found += [(where, name, n, b) for name in names]
    return found


def every_launch() -> list[tuple[str, str, str, str]]:
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                found += launches(f"{path.name[:2]} {cell.id}", cell.source)
    for path in sorted((ROOT / "src" / "helpers" / "exercises").glob("nb*.py")):
        found += launches(f"exercises {path.stem}", path.read_text(encoding="utf-8"))
    return found


def helper_launches() -> list[tuple[str, str, str, str]]:
    """The launches helper modules make themselves (a notebook calls the helper, not launch)."""
    found = []
    helpers = ROOT / "src" / "helpers"
    for path in sorted(helpers.rglob("*.py")):  # the modules and the topic packages' files
        module = ".".join(path.relative_to(helpers).with_suffix("").parts)
        if module not in ("launch", "dryrun") and not module.startswith("exercises"):
            found += launches(f"helpers {module}", path.read_text(encoding="utf-8"))
    return found


def audited() -> dict[str, set[int]]:
    """worker name -> the world sizes the audit runs it at."""
    sizes: dict[str, set[int]] = {}
    for name, (fn, n, _) in dryrun_audit.audit().items():
        sizes.setdefault(name.split()[1], set()).add(n)
        sizes.setdefault(getattr(fn, "__name__", ""), set()).add(n)
    return sizes


def test_the_scan_finds_the_launches_it_must() -> None:
    """The scanner itself: known launches of 04, 06 (through jobs_worker) and 14 are found."""
    found = {(w[:2], name, b) for w, name, _, b in every_launch()}
    for expected in [("04", "collectives_worker", "auto"), ("06", "rebuild_worker", "auto"),
                     ("14", "profile_worker", "gloo")]:  # fmt: skip
        assert expected in found, f"expected the scan to find {expected}, found {sorted(found)}"


def test_every_launch_that_can_take_nccl_is_audited_or_named() -> None:
    design, sizes = _design(), audited()
    missing, stale = [], []
    for where, worker, n, backend in every_launch():
        nb = where[:2] if not where.startswith("exercises") else where[-2:]
        if backend != "auto" or design.get(nb) == "cpu":
            continue
        key = (where, worker, n)
        covered = worker in sizes and (n.isdigit() and int(n) in sizes[worker])
        if key in NOT_AUDITED:
            if covered:
                stale.append(f"{key}: the audit runs it now; drop it from NOT_AUDITED")
            continue
        if not covered:
            at = sorted(sizes.get(worker, ()))
            missing.append(f"{where}: {worker} at world size {n} (audited at {at or 'none'})")
    assert not missing, "launches the dry run does not run and NOT_AUDITED does not name:\n" + (
        "\n".join(missing)
    )
    assert not stale, "\n".join(stale)


def test_every_gloo_launch_of_a_gpu_designed_notebook_is_listed_as_gloo_only() -> None:
    design = _design()
    listed = {(nb, target.split(".")[-1]) for nb, target in (
        (v[0][:2], v[1]) for v in dryrun_audit.GLOO_ONLY.values())}  # fmt: skip
    unlisted = sorted(
        (where[:2], worker)
        for where, worker, _, backend in every_launch()
        if backend == "gloo" and design.get(where[:2]) == "gpu-designed"
        and (where[:2], worker) not in listed
    )  # fmt: skip
    assert not unlisted, f"gloo launches missing from dryrun_audit.GLOO_ONLY: {unlisted}"


def test_a_cpu_designed_notebook_asks_for_gloo_in_every_launch() -> None:
    """Its "CPU" label rests on that: a launch left to choose could take NCCL on a GPU machine."""
    design = _design()
    loose = sorted(
        (where, worker, n, backend)
        for where, worker, n, backend in every_launch()
        if not where.startswith("exercises")
        and design.get(where[:2]) == "cpu"
        and backend != "gloo"
    )
    assert not loose, f"launches of cpu-designed notebooks that do not ask for gloo: {loose}"


def test_a_helper_that_launches_asks_for_gloo_or_is_audited() -> None:
    """A notebook may call a helper that launches (04's `buffer_sync_facts`): the scan of the
    notebooks cannot see that launch, so the helper's own must ask for gloo or be audited."""
    sizes = audited()
    found = helper_launches()
    assert found, "expected at least one helper launch (helpers.ddp.buffer_sync_facts)"
    loose = [
        (where, worker, n)
        for where, worker, n, backend in found
        if backend != "gloo" and not (n.isdigit() and int(n) in sizes.get(worker, ()))
    ]
    assert not loose, f"helper launches that can take NCCL and are not audited: {loose}"


@pytest.mark.parametrize("key", sorted(NOT_AUDITED))
def test_each_unaudited_launch_is_still_in_its_notebook(key: tuple[str, str, str]) -> None:
    found = {(w, name, n) for w, name, n, _ in every_launch()}
    assert key in found, f"NOT_AUDITED names {key}, which no notebook launches any more"
