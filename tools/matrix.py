"""The version matrix: the notebooks and the torch-fact unit tests on newer torch.

    python3 tools/matrix.py test 2.14.1 2.15.0 [--newest] [--cache DIR] [--out _build/matrix]
    python3 tools/matrix.py report [--out _build/matrix]

`test` (what `make test-torch` and `make test-matrix` run), for each version:

1. an environment per version outside the working tree, `<cache>/torch-<version>`
   (default `~/.cache/pytorch-source-reading`), shared by every clone and reused between runs.
   It holds `torch==<version>` and the rest of `requirements.txt` (its torch pin left out),
   installed by `PIP_CONSTRAINT=/dev/null <venv>/bin/python -m pip install -q torch==<version>
   -r <requirements without torch>`: the variable, for that one command, replaces a machine-wide
   pip constraint (this machine caps torch in /etc/xdg/pip/constraints.txt, set through pip's
   config; an environment variable overrides the config file's value) without changing the
   machine. The installed torch is checked afterwards and a different one is an error. A stamp
   (`<venv>/.matrix-stamp`) records the version and the hash of the requirements it was built
   from: when requirements.txt gains or changes a package, the next run installs again.
   The project is not installed there: the run puts this clone's `src/` on PYTHONPATH, so the
   environment serves any clone in any folder. C++ extensions are built under
   `<venv>/torch_extensions` (TORCH_EXTENSIONS_DIR), once per torch.
2. `pytest --nbval-lax` over `notebooks/` (the English ones: conftest.py ignores notebooks/zh)
   and UNIT_TESTS (the unit tests that state facts about torch), with a JUnit XML record
   `<out>/torch-<version>.xml` and `<out>/torch-<version>.json` (installed version, date, time).
3. a summary per notebook on stdout; the exit status is 1 when any cell or test failed.

With `--newest` (what `make test-matrix` passes), the newest final torch release the package
index serves (`pip index versions torch`) is tested too when it is not among the listed versions,
so the first run after a release tests it; when it fails, the fix is the notebooks' story of what
changed. A run that cannot ask the index stops with an error rather than skip it.

`report` turns the last run of each version found in `<out>` into the published pages:
docs/compatibility.json (the record), docs/compatibility.md (a page of the book: tools/book.py
stages docs/*.md into both editions) and the "Tested on" line of README.md. Standard library
only: it runs with any Python 3.11, inside or outside the project's environments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("2.14.1", "2.15.0")
CACHE = Path.home() / ".cache" / "pytorch-source-reading"
OUT = ROOT / "_build" / "matrix"
STAMP = ".matrix-stamp"
# The unit tests whose claims are facts about the installed torch (a source pattern, a header in
# the wheel, a signature, a presence probe, a graph's ops), so a newer torch can break them:
# - test_claims.py: helpers.claims' presence/signature probes against torch's API;
# - test_source.py: show_source/header_view cut torch's files (patterns, headers in the wheel);
# - test_compile_tools.py: the eager/aot_eager graphs, guards and graph breaks of torch.compile.
# The rest test our own plumbing (launchers, pictures, the book, translations) or are slow
# end-to-end runs whose torch facts the notebooks assert already.
UNIT_TESTS = ("tests/test_claims.py", "tests/test_source.py", "tests/test_compile_tools.py")
MESSAGE_LIMIT = 2000  # characters of a failure's message kept in the record
TESTED_ON = "**Tested on**"  # how README.md's generated line starts


# --------------------------------------------------------------------------------------------
# the environments
# --------------------------------------------------------------------------------------------


def requirements_without_torch(text: str) -> str:
    """requirements.txt with its torch pin removed (the version comes from the command line)."""
    keep = [line for line in text.splitlines() if not re.match(r"\s*torch\s*(==|>=|<=|~=|$)", line)]
    return "\n".join(keep) + "\n"


def stamp_for(version: str, requirements: str) -> dict:
    """What an environment built for `version` from `requirements` (torch left out) records."""
    digest = hashlib.sha256(requirements.encode()).hexdigest()
    return {"torch": version, "requirements_sha256": digest}


def _installed_torch(python: Path) -> str | None:
    probe = subprocess.run(
        [str(python), "-c", "import torch, nbval; print(torch.__version__)"],
        capture_output=True,
        text=True,
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def same_release(installed: str | None, version: str) -> bool:
    """2.15.0+cu132 is 2.15.0 (a local build tag); 2.15.0a0 or 2.14.1 is not."""
    return installed is not None and installed.split("+")[0] == version


def ensure_venv(version: str, venv: Path, python: str = sys.executable) -> float:
    """Make `venv` hold torch `version` and the project's other requirements; returns seconds
    spent installing (0 when its stamp says it is current). Raises SystemExit on a wrong torch."""
    requirements = requirements_without_torch((ROOT / "requirements.txt").read_text())
    wanted = stamp_for(version, requirements)
    stamp = venv / STAMP
    bin_python = venv / "bin" / "python"
    if stamp.exists() and bin_python.exists():
        try:
            if (
                json.loads(stamp.read_text()).get("requirements_sha256")
                == wanted["requirements_sha256"]
                and json.loads(stamp.read_text()).get("torch") == version
            ):
                return 0.0
        except json.JSONDecodeError:
            pass
    start = time.monotonic()
    if not bin_python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    with tempfile.NamedTemporaryFile("w", suffix="-requirements.txt", delete=False) as req:
        req.write(requirements)
    # PIP_CONSTRAINT for this command only: a machine-wide constraint (pip config) may cap torch
    env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    cmd = [str(bin_python), "-m", "pip", "install", "-q", f"torch=={version}", "-r", req.name]
    print(f"matrix: installing torch {version} into {venv} (CUDA wheels: minutes)", flush=True)
    try:
        subprocess.run(cmd, check=True, env=env)
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"matrix: pip install failed in {venv} (exit {err.returncode})") from None
    finally:
        os.unlink(req.name)
    installed = _installed_torch(bin_python)
    if not same_release(installed, version):
        raise SystemExit(
            f"matrix: asked for torch {version} in {venv}, found {installed or 'no torch/nbval'} "
            "after pip install: a pip constraint or index still decides the version"
        )
    stamp.write_text(json.dumps({**wanted, "installed": installed}, indent=1) + "\n")
    return time.monotonic() - start


FINAL_RELEASE = re.compile(r"\d+(\.\d+)*")  # 2.15.0; not 2.16.0rc1, 2.13.0+cpu (a local build)


def newest_release(python: str = sys.executable) -> str:
    """The newest final torch release the package index serves, asked the way pip installs
    (`pip index versions torch`, with the machine-wide constraint lifted for that one command, as
    for the install): so the first matrix run after a release tests it. Raises SystemExit when
    the index cannot be asked: a matrix that silently skipped the newest release would say less
    than it seems to."""
    env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    cmd = [python, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    versions = newest_in(result.stdout)
    if result.returncode or versions is None:
        detail = (result.stderr.strip().splitlines() or ["no 'Available versions' line"])[-1]
        raise SystemExit(
            f"matrix: could not ask the package index for torch's releases ({detail}); "
            "`make test-matrix MATRIX_NEWEST=` tests only the listed versions"
        )
    return versions


def newest_in(pip_output: str) -> str | None:
    """The highest final release in the 'Available versions:' line of `pip index versions`."""
    for line in pip_output.splitlines():
        if line.startswith("Available versions:"):
            found = [v.strip() for v in line.partition(":")[2].split(",")]
            final = [v for v in found if FINAL_RELEASE.fullmatch(v)]
            return max(final, key=_version_key) if final else None
    return None


def with_newest(versions: list[str], newest: str) -> list[str]:
    """The versions to test: the listed ones, and the newest release when it is not among them."""
    return versions if newest in versions else [*versions, newest]


# --------------------------------------------------------------------------------------------
# a run
# --------------------------------------------------------------------------------------------


def pytest_command(bin_python: Path, junit: Path, extra: list[str]) -> list[str]:
    return [
        str(bin_python),
        "-m",
        "pytest",
        "--nbval-lax",
        "-q",
        f"--junitxml={junit}",
        *extra,
        *UNIT_TESTS,
        "notebooks",
    ]


def run_version(version: str, venv: Path, out: Path, extra: list[str]) -> int:
    """Install if needed, run the matrix's tests on `version`, print the summary; pytest's code."""
    install_s = ensure_venv(version, venv)
    out.mkdir(parents=True, exist_ok=True)
    junit = out / f"torch-{version}.xml"
    bin_python = venv / "bin" / "python"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    # C++ extensions (notebook 12's operator) are built per torch: a build folder shared with
    # another torch would be rebuilt on every switch and could load a library built for it
    env["TORCH_EXTENSIONS_DIR"] = str(venv / "torch_extensions")
    cmd = pytest_command(bin_python, junit, extra)
    print(f"matrix: torch {version}: {' '.join(cmd[1:])}", flush=True)
    started = dt.datetime.now(dt.UTC)
    start = time.monotonic()
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    seconds = time.monotonic() - start
    meta = {
        "torch": version,
        "installed": _installed_torch(bin_python),
        "python": subprocess.run(
            [str(bin_python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "install_seconds": round(install_s, 1),
        "pytest_exit": code,
    }
    (out / f"torch-{version}.json").write_text(json.dumps(meta, indent=1) + "\n")
    if junit.exists():
        print(summary(version_record(junit, meta)))
    return code


# --------------------------------------------------------------------------------------------
# the record: JUnit XML -> per notebook and version, passed / failed and each failure's message
# --------------------------------------------------------------------------------------------

ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*[A-Za-z]")
# an exception's type at the start of a line: builtin names and ours (PatternMissing, ...)
EXCEPTION_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Missing|Failed|Timeout))(?::|$)"
)


def failure_message(text: str) -> tuple[str, str]:
    """(exception name, message) from a failure's text: for a notebook cell nbval's report
    (the cell's input, then the kernel's traceback, ANSI colours escaped as #x1B by junitxml),
    for a unit test pytest's "E   AssertionError: ..." lines or its one-line crash message."""
    text = ANSI.sub("", text)
    body = text.split("Traceback:", 1)[-1]
    lines = body.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = EXCEPTION_LINE.match(lines[i])
        if match:
            first = lines[i][match.end() :].strip()
            rest = "\n".join(lines[i + 1 :]).rstrip()
            message = (first + ("\n" + rest if rest else "")).strip()
            return match.group(1), message[:MESSAGE_LIMIT]
    e_lines = [line[1:].strip() for line in lines if line.startswith("E ")]
    if e_lines:
        match = EXCEPTION_LINE.match(e_lines[0])
        name = match.group(1) if match else "Error"
        if not match and e_lines[0].startswith("assert "):  # pytest's rewritten bare assert
            name = "AssertionError"
        first = e_lines[0][match.end() :].strip() if match else e_lines[0]
        return name, "\n".join([first, *e_lines[1:]]).strip()[:MESSAGE_LIMIT]
    stripped = text.strip()
    return "Error", (stripped.splitlines()[-1] if stripped else "")[:MESSAGE_LIMIT]


def _cell_ids(notebook: Path) -> list[str]:
    """The ids of a notebook's code cells, in nbval's numbering ("Cell N" counts code cells)."""
    try:
        cells = json.loads(notebook.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return []
    return [c.get("id", "") for c in cells if c.get("cell_type") == "code"]


def version_record(junit: Path, meta: dict, notebooks: Path = ROOT / "notebooks") -> dict:
    """One version's results from its JUnit XML: notebooks and unit-test files, each with its
    passed / failed / skipped counts and its failures (cell or test, exception, message)."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    groups: dict[str, dict] = {}
    timestamp = suites[0].get("timestamp", "") if suites else ""
    for case in (c for s in suites for c in s.iter("testcase")):
        classname, name = case.get("classname", ""), case.get("name", "")
        if classname.endswith(".ipynb"):  # notebooks.00_orientation.ipynb
            key, kind = classname.removeprefix("notebooks.").removesuffix(".ipynb"), "notebook"
        else:  # tests.test_source
            key, kind = classname.replace(".", "/") + ".py", "unit"
        group = groups.setdefault(
            key, {"kind": kind, "passed": 0, "failed": 0, "skipped": 0, "failures": []}
        )
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if case.find("skipped") is not None:
            group["skipped"] += 1
        elif bad is None:
            group["passed"] += 1
        else:
            group["failed"] += 1
            # the element's text: nbval's report, or pytest's traceback with its "E   " lines
            # (the message attribute is one line: XML attributes lose their line breaks)
            text = bad.text or bad.get("message", "")
            exc, message = failure_message(text)
            failure = {"test": name, "exception": exc, "message": message}
            if kind == "notebook" and name.startswith("Cell "):
                index = int(name.split()[1])
                ids = _cell_ids(notebooks / f"{key}.ipynb")
                failure["code_cell"] = index
                failure["cell_id"] = ids[index] if index < len(ids) else ""
            group["failures"].append(failure)
    notebooks = {k: v for k, v in sorted(groups.items()) if v.pop("kind") == "notebook"}
    unit = {k: v for k, v in sorted(groups.items()) if k not in notebooks}
    return {
        "torch": meta.get("torch", ""),
        "installed": meta.get("installed") or "",
        "python": meta.get("python", ""),
        "started": meta.get("started") or timestamp,
        "seconds": meta.get("seconds"),
        "notebooks": notebooks,
        "unit": unit,
    }


def totals(version: dict) -> dict:
    groups = list(version["notebooks"].values()) + list(version["unit"].values())
    return {
        "passed": sum(g["passed"] for g in groups),
        "failed": sum(g["failed"] for g in groups),
        "skipped": sum(g["skipped"] for g in groups),
        "notebooks": len(version["notebooks"]),
        "notebooks_failing": sum(1 for g in version["notebooks"].values() if g["failed"]),
    }


def collect(out: Path, notebooks: Path = ROOT / "notebooks") -> dict:
    """The record of the last run of every version with a JUnit XML in `out`."""
    versions = {}
    for junit in sorted(out.glob("torch-*.xml"), key=lambda p: _version_key(p.stem[6:])):
        version = junit.stem.removeprefix("torch-")
        meta_path = junit.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"torch": version}
        versions[version] = version_record(junit, meta, notebooks)
    dates = [v["started"][:10] for v in versions.values() if v["started"]]
    return {"date": max(dates) if dates else "", "versions": versions}


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+]", version))


# --------------------------------------------------------------------------------------------
# what is published
# --------------------------------------------------------------------------------------------


def summary(version: dict) -> str:
    """The per-notebook lines printed after a run (and the failures with their messages)."""
    t = totals(version)
    lines = [
        f"torch {version['installed'] or version['torch']}: {t['passed']} passed, "
        f"{t['failed']} failed, {t['skipped']} skipped"
    ]
    for name, group in {**version["notebooks"], **version["unit"]}.items():
        lines.append(f"  {name}: {group['passed']} passed, {group['failed']} failed")
        for f in group["failures"]:
            lines.append(f"    {_where(f)}: {f['exception']}: {_one_line(f['message'])}")
    return "\n".join(lines)


def _where(failure: dict) -> str:
    if "code_cell" in failure:
        cell_id = f" (id {failure['cell_id']})" if failure.get("cell_id") else ""
        return f"code cell {failure['code_cell']}{cell_id}"
    return failure["test"]


def _one_line(message: str, limit: int = 300) -> str:
    flat = " | ".join(line.strip() for line in message.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def results_table(
    versions: dict, first: str, kind: str, rows: list[str], missing: str = "not run"
) -> list[str]:
    """passed / failed of each row (a notebook or a unit-test file) per version, as Markdown
    lines; names, not links: a notebook of the record may have no page in one edition (yet).
    The Chinese page (tools/zh.py compatibility_page) uses it with its own words."""
    lines = [f"| {first} | " + " | ".join(f"torch {v}" for v in versions) + " |"]
    lines.append("|---|" + "---|" * len(versions))
    for name in rows:
        counts = [v[kind].get(name) for v in versions.values()]
        cells = [f"{g['passed']} / {g['failed']}" if g else missing for g in counts]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def markdown_page(record: dict) -> str:
    """docs/compatibility.md: a page of the book, generated from the record."""
    versions = record["versions"]
    names = sorted({n for v in versions.values() for n in v["notebooks"]})
    out = [
        "# Compatibility: the torch versions the notebooks are tested on",
        "",
        "Generated by `python3 tools/matrix.py report` from the last `make test-matrix` run "
        f"({record['date'] or 'no run recorded'}); do not edit by hand.",
        "",
        "The pinned torch 2.13.0 (`requirements.txt`) is checked by `make test`: every stored "
        "output is compared (strict nbval). The newer releases below are checked by "
        "`make test-matrix`: each in its own environment with the rest of `requirements.txt`, "
        "every notebook under `pytest --nbval-lax` (each cell runs; only its asserts are "
        "compared) and the unit tests that state facts about torch "
        f"({', '.join(f'`{t}`' for t in UNIT_TESTS)}).",
        "",
        "## Runs",
        "",
        "| torch | installed | Python | date (UTC) | cells and tests passed | failed | minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for version, v in versions.items():
        t = totals(v)
        minutes = f"{v['seconds'] / 60:.1f}" if v.get("seconds") else ""
        when = v["started"].replace("T", " ")[:16]
        out.append(
            f"| {version} | `{v['installed']}` | {v['python']} | {when} | {t['passed']} | "
            f"{t['failed']} | {minutes} |"
        )
    out += ["", "## Per notebook", "", "Cells passed / failed under `--nbval-lax`.", ""]

    out += results_table(versions, "notebook", "notebooks", names)
    units = sorted({n for v in versions.values() for n in v["unit"]})
    if units:
        out += ["", "Unit tests passed / failed:", ""]
        out += results_table(versions, "file", "unit", units)
    out += ["", "## Failures", ""]
    any_failure = False
    for version, v in versions.items():
        for name, g in {**v["notebooks"], **v["unit"]}.items():
            for f in g["failures"]:
                any_failure = True
                out += [
                    f"**torch {version}, {name}, {_where(f)}**: `{f['exception']}`",
                    "",
                    "~~~text",
                    f["message"].replace("~~~", "~ ~ ~") or "(empty message)",
                    "~~~",
                    "",
                ]
    if not any_failure:
        out += ["None: every cell and test passed on every version above.", ""]
    return "\n".join(out).rstrip() + "\n"


def readme_line(record: dict) -> str:
    """README.md's one generated line (under "Two ways to check the notebooks")."""
    parts = []
    for version, v in record["versions"].items():
        t = totals(v)
        ok = t["notebooks"] - t["notebooks_failing"]
        state = f"{ok}/{t['notebooks']} notebooks pass"
        if t["failed"]:
            state += f", {t['failed']} cells or tests fail"
        parts.append(f"torch {version} ({state})")
    runs = "; ".join(parts) if parts else "no matrix run recorded"
    return (
        f"{TESTED_ON} ({record['date'] or 'never'}, `make test-matrix`, asserts only): {runs}; "
        "torch 2.13.0, the pin, by `make test`. Per notebook: "
        "[docs/compatibility.md](docs/compatibility.md)."
    )


def update_readme(text: str, line: str) -> str:
    """README.md with its "Tested on" line replaced, or added at the end of the section
    "## Two ways to check the notebooks" (before the next "## " heading)."""
    lines = text.splitlines()
    for i, old in enumerate(lines):
        if old.startswith(TESTED_ON):
            lines[i] = line
            return "\n".join(lines) + "\n"
    start = next(
        (i for i, t in enumerate(lines) if t.startswith("## Two ways to check the notebooks")),
        None,
    )
    if start is None:
        raise ValueError("README.md has no section '## Two ways to check the notebooks'")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    lines[end:end] = ["", line]
    return "\n".join(lines) + "\n"


def publish(record: dict, docs: Path, readme: Path) -> list[Path]:
    """Write docs/compatibility.json and .md and README.md's line; returns the paths written."""
    docs.mkdir(parents=True, exist_ok=True)
    json_path, md_path = docs / "compatibility.json", docs / "compatibility.md"
    json_path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    md_path.write_text(markdown_page(record))
    readme.write_text(update_readme(readme.read_text(), readme_line(record)))
    return [json_path, md_path, readme]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    test = sub.add_parser("test", help="install (if needed) and run the matrix for versions")
    test.add_argument("versions", nargs="*", default=list(VERSIONS))
    test.add_argument("--cache", type=Path, default=Path(os.environ.get("MATRIX_CACHE", CACHE)))
    test.add_argument("--out", type=Path, default=OUT)
    test.add_argument("--pytest-args", default="", help="extra pytest arguments (one string)")
    test.add_argument(
        "--newest",
        action="store_true",
        help="also test the newest torch release the package index serves, if not listed",
    )
    report = sub.add_parser("report", help="publish the last run: docs/compatibility.*, README")
    report.add_argument("--out", type=Path, default=OUT)
    report.add_argument("--docs", type=Path, default=ROOT / "docs")
    report.add_argument("--readme", type=Path, default=ROOT / "README.md")
    report.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="for cell ids")
    args = parser.parse_args(argv)
    if args.command == "test":
        code = 0
        if args.newest:
            newest = newest_release()
            listed = "listed" if newest in args.versions else "not listed: tested too"
            print(f"matrix: the newest torch release on the package index is {newest} ({listed})")
            args.versions = with_newest(args.versions, newest)
        for version in args.versions:
            venv = args.cache / f"torch-{version}"
            result = run_version(version, venv, args.out.resolve(), args.pytest_args.split())
            code = code or (1 if result else 0)
        return code
    record = collect(args.out, args.notebooks)
    if not record["versions"]:
        print(f"matrix: no run recorded in {args.out} (run make test-matrix first)")
        return 1
    for path in publish(record, args.docs, args.readme):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
