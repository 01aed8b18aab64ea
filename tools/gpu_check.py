"""`make test-gpu`: the notebooks and the audited workers on a machine with NVIDIA GPUs.

On a machine with CUDA: every notebook under `pytest --nbval-lax` (the GPU-designed ones, whose
launches take NCCL with one GPU per rank, only where at least two GPUs are visible; with fewer
they would run on gloo again and are reported skipped; a launch with more ranks than the machine
has GPUs still runs on gloo (`helpers.launch.choose_backend`: NCCL only when `gpus >= world_size`),
so "passed" covers NCCL only for the launches that fit; each notebook's row counts its launches
per backend, from the lines `helpers.launch` appends to PSR_LAUNCH_LOG), then every worker of
tests/dryrun_audit.py launched for real with `backend="auto"` (NCCL where the machine has a GPU
per rank, else skipped), and a report, `_build/gpu-report.md`: per notebook and per worker,
passed, failed with the message, or skipped for too few GPUs; and, on any number of GPUs, the
dry run's rules calibrated against the real device: the toy workers of tests/dryrun_workers.py
at world size 1 on NCCL, each expected to pass or fail as the dry run says (`CALIBRATION`). With
one GPU no NCCL launch of two or more ranks is possible, and the report says so first. Budget:
about ten minutes on one GPU (`--budget-s`); what did not start in time is reported as not run.

torch: the project's pin is a CPU build on CPU machines; when the venv's torch has no CUDA but
the machine has GPUs, the same pinned version with CUDA is installed into
`~/.cache/pytorch-source-reading/torch-<version>-cuda` (pip, PyPI's default wheel for Linux is
the CUDA build; `TORCH_INDEX_URL` picks another index) and the checks run there.

Without a GPU it stops at once, saying what it needs, with exit status 2.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "_build" / "gpu-report.md"
CACHE = Path(os.environ.get("MATRIX_CACHE", Path.home() / ".cache" / "pytorch-source-reading"))
NEEDS = (
    "make test-gpu needs a machine with at least one NVIDIA GPU and its driver "
    "(nvidia-smi lists the GPUs) and a CUDA build of the pinned torch (installed by this "
    "command into {cache} when the venv's torch is a CPU build); two or more GPUs for the "
    "NCCL notebooks (04-09, 13, 14), and one GPU per rank for a launch to take NCCL (some "
    "launch 4 ranks; with fewer GPUs those run on gloo). Found: {found}."
)


def visible_gpus() -> tuple[int, str]:
    """How many NVIDIA GPUs the driver lists, and what was found (for the message)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, "no nvidia-smi (no NVIDIA driver)"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 0, f"nvidia-smi failed ({err})"
    gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    return len(gpus), f"{len(gpus)} GPU(s) listed by nvidia-smi"


def torch_facts(python: str) -> dict:
    """torch's version and CUDA view in the environment of `python`."""
    code = (
        "import json, torch; print(json.dumps({'version': torch.__version__, "
        "'cuda': torch.cuda.is_available(), 'count': torch.cuda.device_count() "
        "if torch.cuda.is_available() else 0}))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return {"version": "?", "cuda": False, "count": 0, "error": out.stderr[-500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cuda_python(version: str) -> str:
    """A python with torch==`version` built with CUDA and the project's requirements."""
    env_dir = CACHE / f"torch-{version}-cuda"
    python = env_dir / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    if not torch_facts(str(python)).get("cuda"):
        env = dict(os.environ, PIP_CONSTRAINT="/dev/null")
        index = os.environ.get("TORCH_INDEX_URL")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, f"torch=={version}", *(["--index-url", index] if index else [])],
            check=True,
            env=env,
        )
        reqs = [
            line
            for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith(("#", "torch=="))
        ]
        subprocess.run([*pip, *reqs], check=True, env=env)
    return str(python)


def gpu_designed() -> set[str]:
    """Notebook numbers ("04") that course.toml marks GPU-designed."""
    course = tomllib.loads((ROOT / "notebooks" / "course.toml").read_text(encoding="utf-8"))
    return {f"{n['number']:02d}" for n in course["notebook"] if n["runs_on"] == "gpu-designed"}


def run_notebooks(python: str, gpus: int, budget_s: float) -> list[tuple[str, str, str]]:
    """(notebook, outcome, message) per notebook."""
    designed = gpu_designed()
    rows, todo = [], []
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if nb.name[:2] in designed and gpus < 2:
            rows.append((nb.name, "skipped", f"too few GPUs: NCCL needs 2, found {gpus}"))
        else:
            todo.append(nb)
    if not todo:
        return rows
    out_dir = ROOT / "_build" / "gpu-junit"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    deadline = time.time() + budget_s
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))

    def one(nb: Path) -> tuple[str, str]:
        """One notebook in its own pytest (a budget overrun then loses only the unfinished)."""
        xml = out_dir / f"{nb.stem}.xml"
        cmd = [python, "-m", "pytest", "--nbval-lax", "-q", f"--junitxml={xml}",
               str(nb.relative_to(ROOT))]  # fmt: skip
        left = deadline - time.time()
        if left < 20:
            return ("not run", f"the budget ({budget_s:.0f} s) ran out before it started")
        log = out_dir / f"{nb.stem}.launches.jsonl"
        try:
            subprocess.run(cmd, cwd=ROOT, env=dict(env, PSR_LAUNCH_LOG=str(log)), timeout=left,
                           capture_output=True)  # fmt: skip
        except subprocess.TimeoutExpired:
            return ("not run", f"the budget ({budget_s:.0f} s) ran out while it ran")
        outcome, message = outcomes_from_junit(xml, [nb.name]).get(
            nb.name, ("failed", "no junit report")
        )
        backends = launch_summary(log)
        return (outcome, f"{message}; {backends}" if message and backends else message or backends)

    workers = max(1, min(len(todo), (os.cpu_count() or 2) // 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for nb, outcome in zip(todo, pool.map(one, todo), strict=True):
            rows.append((nb.name, *outcome))
    return sorted(rows)


def launch_summary(log: Path) -> str:
    """What the notebook's launches took, from helpers.launch's PSR_LAUNCH_LOG lines: "launches:
    3 on nccl, 2 on gloo (asked auto: 4 ranks x2 with N GPUs)", or "" when it launched nothing."""
    if not log.exists():
        return ""
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]
    chosen = {b: sum(r["chosen"] == b for r in rows) for b in sorted({r["chosen"] for r in rows})}
    text = "launches: " + ", ".join(f"{k} on {b}" for b, k in chosen.items())
    fell = sorted(r["world_size"] for r in rows if r["asked"] == "auto" and r["chosen"] != "nccl")
    if fell:
        sizes = ", ".join(f"{n} ranks x{fell.count(n)}" for n in sorted(set(fell)))
        text += f" (backend='auto' but too few GPUs for NCCL: {sizes})"
    return text


ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # pytest writes ESC as "#x1B" in junit
ERROR_LINE = re.compile(r"^\w*(Error|Exception|Timeout)\b.*$", re.M)


def outcomes_from_junit(xml: Path, notebooks: list[str]) -> dict[str, tuple[str, str]]:
    """notebook name -> ("passed", "") or ("failed", "Cell N: <the error line>"), from junit."""
    if not xml.exists():
        return {}
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        where = case.get("classname") or ""
        name = next((nb for nb in notebooks if Path(nb).stem in where), None)
        if name is None:
            continue
        bad = [*case.iter("failure"), *case.iter("error")]
        if not bad:
            found.setdefault(name, ("passed", ""))
            continue
        text = ANSI.sub("", bad[0].text or bad[0].get("message") or "")
        errors = [m.group(0) for m in ERROR_LINE.finditer(text)]
        first = text.strip().splitlines()[0] if text.strip() else "?"
        line = errors[-1] if errors else first
        if found.get(name, ("",))[0] != "failed":  # the first failing cell says the most
            found[name] = ("failed", f"{case.get('name')}: {line.strip()[:240]}")
    return found


WORKER_RUN = """
import json, sys
sys.path[:0] = [{tests!r}, {src!r}]
import dryrun_audit
from helpers.launch import launch
fn, n, args = dryrun_audit.audit()[{name!r}]
res = launch(fn, n, args=args, backend="auto", timeout_s=240)
print(json.dumps({{"backend": res.backend}}))
"""


def run_snippet(
    python: str, code: str, deadline: float, floor: float, cap: float
) -> subprocess.CompletedProcess | tuple[str, str]:
    """Run `python -c code` within what is left of the budget (at most `cap` s): the finished
    process, or the report row's (outcome, message) when it could not start or timed out."""
    left = deadline - time.time()
    if left < floor:
        return ("not run", "the budget ran out")
    try:
        return subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              timeout=min(left, cap))  # fmt: skip
    except subprocess.TimeoutExpired:
        return ("failed", "timed out")


def calibration_outcome(returncode: int, stderr: str) -> str:
    """ "passes"; "fails" when a rank raised (`launch`'s WorkerError names it); "error" for
    anything else, such as an import failing before the launch: not the device refusing the toy."""
    if returncode == 0:
        return "passes"
    return "fails" if "WorkerError" in stderr else "error"


def run_workers(python: str, gpus: int, deadline: float) -> list[tuple[str, str, str]]:
    """(worker, outcome, message) for every audited worker, run for real."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]
    import dryrun_audit  # noqa: PLC0415 - needs the paths above

    rows = []
    for name, (_, n, _) in dryrun_audit.audit().items():
        if gpus < n:
            rows.append((name, "skipped", f"too few GPUs: {n} ranks need {n}, found {gpus}"))
            continue
        code = WORKER_RUN.format(tests=str(ROOT / "tests"), src=str(ROOT / "src"), name=name)
        out = run_snippet(python, code, deadline, floor=30, cap=300)
        if isinstance(out, tuple):
            rows.append((name, *out))
            continue
        if out.returncode == 0:
            rows.append((name, "passed", out.stdout.strip().splitlines()[-1]))
        else:
            rows.append((name, "failed", out.stderr.strip()[-300:].replace("\n", " ")))
    return rows


# The dry run's rules against the real thing: toy workers of tests/dryrun_workers.py at world
# size 1 on NCCL (one GPU is enough), each with the verdict kind tests/test_dryrun.py expects of
# it. A "fails" toy must raise on the real device too, a "passes" toy must not; a disagreement
# means the dry run's rule is not CUDA's or NCCL's.
CALIBRATION = {
    "right_worker": "passes",
    "cpu_tensor_to_all_reduce_worker": "fails",
    "cpu_module_worker": "fails",
    "funcol_cpu_worker": "fails",
    "cpu_scalar_index_worker": "fails",
    "gloo_group_worker": "passes",
}

TOY_RUN = """
import sys
sys.path[:0] = [{tests!r}, {src!r}]
import dryrun_workers as toy
from helpers.launch import launch
launch(getattr(toy, {name!r}), 1, backend="nccl", timeout_s=120)
"""


def run_calibration(python: str, deadline: float) -> list[tuple[str, str, str]]:
    """(toy, outcome, message): "agrees" when the real device did what the dry run says."""
    rows = []
    for name, expected in CALIBRATION.items():
        code = TOY_RUN.format(tests=str(ROOT / "tests"), src=str(ROOT / "src"), name=name)
        out = run_snippet(python, code, deadline, floor=20, cap=150)
        if isinstance(out, tuple):
            rows.append((name, *out))
            continue
        found = calibration_outcome(out.returncode, out.stderr)
        tail = out.stderr.strip().splitlines()[-1][:200] if out.stderr.strip() else ""
        outcome = "agrees" if found == expected else "failed"
        rows.append((name, outcome, f"dry run: {expected}; on the GPU: {found}. {tail}".strip()))
    return rows


def report(facts: dict, gpus: int, notebooks: list, workers: list, toys: list = ()) -> str:
    nccl_ran = any(b == "passed" and "nccl" in c for a, b, c in notebooks) or any(
        b == "passed" for a, b, c in workers
    )
    lines = [
        "# GPU check (`make test-gpu`)",
        "",
        *(
            []
            if nccl_ran
            else [
                f"**No NCCL launch of two or more ranks ran** ({gpus} GPU(s)): the GPU-designed "
                "notebooks and the audited workers were skipped; only the CPU notebooks on a "
                "CUDA build and the toy calibration below ran.",
                "",
            ]
        ),
        f"torch {facts['version']}, {gpus} GPU(s); notebooks under `pytest --nbval-lax`, "
        "workers launched with backend='auto'. A launch takes NCCL only with one GPU per rank: "
        f"with {gpus} GPU(s), a launch of more ranks ran on gloo, so a notebook's 'passed' covers "
        "NCCL only for its launches of at most that many ranks.",
        "",
        "| notebook | outcome | message |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in notebooks],
        "",
        "| worker | outcome | message |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in workers],
        "",
        "The dry run's rules against CUDA and NCCL (toy workers at world size 1 on NCCL):",
        "",
        "| toy | outcome | message |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in toys],
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args(argv)
    start = time.time()
    gpus, found = visible_gpus()
    if gpus == 0:
        print(NEEDS.format(cache=CACHE, found=found), file=sys.stderr)
        return 2
    facts = torch_facts(args.python)
    python = args.python
    if not facts.get("cuda"):
        python = cuda_python(facts["version"].split("+")[0])
        facts = torch_facts(python)
        if not facts.get("cuda"):
            print(NEEDS.format(cache=CACHE, found=f"{found}, torch {facts['version']} without "
                               "CUDA even after the install"), file=sys.stderr)  # fmt: skip
            return 2
    gpus = facts["count"]
    left = args.budget_s - (time.time() - start)
    notebooks = run_notebooks(python, gpus, left * 0.75)
    toys = run_calibration(python, start + args.budget_s * 0.85)
    workers = run_workers(python, gpus, start + args.budget_s)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(report(facts, gpus, notebooks, workers, toys), encoding="utf-8")
    print(REPORT.read_text(encoding="utf-8"))
    bad = [r for r in notebooks + workers + toys if r[1] in ("failed", "not run")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
