"""Project-wide pytest policy.

nbval policy (`pytest --nbval`, strict; options in pyproject.toml):
- Compared: every output kind nbval knows except images and widget views: stdout, **stderr**,
  text/plain, text/html and text/markdown. Stderr is compared on purpose: a new warning from a
  torch upgrade is news a reader would see, so notebooks keep stderr empty (warnings they
  expect are filtered in the setup cell) and a change shows up as a diff.
- Not compared: image/png and image/jpeg (pixel output depends on fonts and the renderer; the
  cell that draws a plot asserts the numbers it plots) and the widget view itself
  (`application/vnd.jupyter.widget-view+json`, which nbval does not compare). The step viewers'
  model ids are hashes of their data, and the steps' data they display
  (`application/vnd.pytorch-source-reading.widget-state+json`, helpers.viewers) is compared like
  any text output (05's ring viewer, 16's timeline viewer; 01's viewer cell is
  `NBVAL_IGNORE_OUTPUT`).
- Sanitized before comparing: tests/nbval_sanitize.cfg (addresses, ports, pids, temp paths,
  ipykernel file names, site-packages paths, torch log prefixes, tagged timings).
- Cell timeout 600 s: generous, because a timeout marks every later cell of the notebook as
  failed and hides the real cause; the per-notebook budget (~90 s) is watched in the note.
- Cells whose output depends on hardware or timing carry `# NBVAL_IGNORE_OUTPUT` and still
  `assert` their claim; cells that fail on purpose carry `# NBVAL_RAISES_EXCEPTION`.

`pytest --nbval-lax` runs the same notebooks comparing only cells marked `# NBVAL_CHECK_OUTPUT`
(none are: every claim is an assert), so a GPU machine or a newer torch still checks the
teaching without failing on a changed repr.
"""

# The Chinese edition (notebooks/zh) is generated from the English notebooks with identical code
# and outputs (tests/test_zh.py proves it cell by cell), so nbval runs the English ones only.
collect_ignore_glob = ["notebooks/zh/*"]


# --- running on several cores (`make test`: pytest-xdist, `-n N --dist loadfile`) -------------
#
# Each test file and each notebook is one unit of work that runs whole on one worker: a
# notebook's cells share one kernel (nbval), a test file's module fixtures (the book, the slide
# decks, a torchrun reference run) are built once. Files that share a build run on one worker,
# one after the other (TOGETHER). The units are handed out longest first (weights: the seconds
# `make timings` measured, tools/test_weights.json; a file it has not measured yet counts as
# long, so a new notebook starts early), so that the run does not end on one long unit while
# the other worker idles. Each worker gets its own Inductor cache folder.

import getpass  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

WEIGHTS = Path(__file__).parent / "tools" / "test_weights.json"
UNMEASURED_S = 30.0  # the weight of a file tools/test_weights.json does not list yet
# files that must not run at the same time as each other: they build into one folder
# (helpers.board_op's build directory, named after the C++ source's hash), so they run on one
# worker, and whichever runs second reuses the build
TOGETHER = {
    "notebooks/12_custom_cpp_operator_to_deployment.ipynb": "board_op",
    "tests/test_board_op.py": "board_op",
}


def _worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


# Every worker must collect the same test ids, and ids made from sets (test_exercises_forms.py)
# follow the string hash seed: the workers get one seed (set here in the controller, which
# starts them), and give it up at once, so that kernels, ranks and subprocesses still run under
# random seeds, as they do in a plain run.
_SEED_MARK = "PYTORCH_SOURCE_READING_XDIST_HASHSEED"


def pytest_configure(config: pytest.Config) -> None:
    worker = _worker()
    if not worker and getattr(config.option, "numprocesses", None):
        if "PYTHONHASHSEED" not in os.environ:
            os.environ["PYTHONHASHSEED"] = "0"
            os.environ[_SEED_MARK] = "1"
    if worker and os.environ.pop(_SEED_MARK, None):
        os.environ.pop("PYTHONHASHSEED", None)
    if worker and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        # torch's default_cache_dir(), one subfolder per worker (kept between runs: warm)
        user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
        folder = Path(tempfile.gettempdir()) / f"torchinductor_{user}" / f"xdist-{worker}"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)


def unit_of(nodeid: str) -> str:
    """The unit of work an item belongs to: its file, or its TOGETHER group."""
    path = nodeid.split("::")[0]
    return TOGETHER.get(path, path)


@pytest.hookimpl(optionalhook=True)  # environments without pytest-xdist (the torch matrix)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` hands out our units (a file, or a TOGETHER group), in the order the
    workers collected them (conftest's longest-first order; with --no-loadscope-reorder).

    (xdist's own `loadgroup` marks cannot do it on pytest 9: xdist 3.8 renames items through
    `item._nodeid`, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _worker():
        return  # a plain run keeps pytest's order
    weights = json.loads(WEIGHTS.read_text()) if WEIGHTS.exists() else {}
    units: dict[str, float] = {}
    seen: set[str] = set()
    for item in items:
        path, unit = item.nodeid.split("::")[0], unit_of(item.nodeid)
        if path not in seen:
            seen.add(path)
            units[unit] = units.get(unit, 0.0) + float(weights.get(path, UNMEASURED_S))
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-units[unit_of(it.nodeid)], unit_of(it.nodeid), position[id(it)]))
