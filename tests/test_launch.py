"""The launcher: results, capture, and every failure mode (clear error, no process left)."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import launch_workers as w
import pytest
import torch

from helpers.launch import LaunchTimeout, WorkerError, choose_backend, launch, notebook_module
from helpers.processes import alive, is_loopback, wait_gone

HERE = Path(__file__).resolve().parent


def _worker_children(pid: int) -> list[int]:
    """Live launcher workers whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == pid and b"_worker_main" in cmd and alive(int(entry)):
            found.append(int(entry))
    return found


def _assert_no_process_left(err: Exception | None = None) -> None:
    assert _worker_children(os.getpid()) == [], "a launcher worker outlived the call"
    for pid in getattr(err, "pids", []):
        assert not alive(pid), f"worker pid {pid} still alive"


@pytest.fixture(scope="module")
def four_ranks():
    """One 4-rank launch of sum_worker, read by two tests (each launch starts N interpreters
    that import torch: about 1.5 s of CPU each)."""
    return launch(w.sum_worker, 4, args=(3,))


def test_results_in_rank_order_with_outputs_captured(four_ranks) -> None:
    res = four_ranks
    assert [r["rank"] for r in res] == [0, 1, 2, 3]
    assert [r["env_rank"] for r in res] == [0, 1, 2, 3]
    assert all(r["world"] == 4 and r["sum"] == 10.0 for r in res)
    assert res.backend == "gloo" == res[0]["backend"]
    assert all(r["device"] == "cpu" for r in res)
    # stdout and stderr of each rank, in that rank's order, and nothing from set-up (gloo chatter)
    assert res.outputs == [f"rank {r} says hello\nrank {r} second line\n" for r in range(4)]
    _assert_no_process_left()


def test_world_size_one() -> None:
    res = launch(w.sum_worker, 1, args=(2,))
    assert res[0]["sum"] == 1.0 and res.world_size == 1


def test_each_launch_is_logged_where_psr_launch_log_says(monkeypatch, tmp_path: Path) -> None:
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv("PSR_LAUNCH_LOG", str(log))
    launch(w.sum_worker, 1, args=(2,))
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    expected = [{"fn": "sum_worker", "world_size": 1, "asked": "auto", "chosen": "gloo"}]
    assert rows == expected, f"expected {expected}, found {rows}"


def test_results_larger_than_a_pipe_buffer_come_back() -> None:
    n = 2_000_000  # ~16 MB of int64 per rank, far beyond a 64 KB pipe buffer
    res = launch(w.big_worker, 2, args=(n,))
    assert len(res[1]["list"]) == n and res[1]["list"][-1] == n - 1
    # a tensor survives its worker (a multiprocessing queue would hand back dead shared memory)
    assert torch.equal(res[0]["tensor"], torch.arange(n))


def test_what_has_no_source_of_its_own_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="lambda or a function defined inside another"):
        launch(lambda rank, ws: rank, 2)
    # a __main__ function made from another's code object: its source defines another name
    fn = types.FunctionType(w.sum_worker.__code__, {}, "defined_in_notebook")
    fn.__module__ = "__main__"
    with pytest.raises(ValueError, match="'defined_in_notebook'.*does not define it"):
        launch(fn, 2)
    _assert_no_process_left()


# --- functions defined in the notebook (module __main__) ---------------------------------------

NOTEBOOK = """\
import dataclasses
import functools
import torch
import torch.distributed as dist
from helpers.launch import current_device

SCALE = 10
LABELS = ("sum", {"ranks": [0, 1], "unit": None})
TABLE = torch.arange(3)
LOG = open(__file__)


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, t):
        return t * self.factor


@dataclasses.dataclass
class Settings:  # no method of its own: its source is found in the cell
    factor: int = SCALE


def scaled(t):
    return Scaler(Settings().factor)(t)


def ring(rank, world_size, n):
    t = torch.full((n,), float(rank + 1), device=current_device())
    dist.all_reduce(t)
    return {LABELS[0]: scaled(t).tolist(), "ranks": LABELS[1]["ranks"]}


def boom(rank, world_size):
    dist.barrier()
    if rank == 1:
        raise ValueError(f"boom on rank {rank} in the notebook")
    return rank


def uses_a_tensor(rank, world_size):
    return TABLE[rank].item()


def uses_a_file(rank, world_size):
    return LOG.name


alias = scaled


def uses_an_alias(rank, world_size):
    return alias(torch.ones(1)).item()


def traced(fn):
    return fn


@traced
def decorated(rank, world_size):
    return rank


@torch.no_grad()
def no_grad_ring(rank, world_size, n):
    return ring(rank, world_size, n)
"""


def _notebook(code: str = NOTEBOOK, cell: str = "<ipython-input-3-0123456789ab>") -> dict:
    """Run `code` as IPython runs a cell: compiled under the cell's name, with the source in
    linecache (where inspect.getsource finds it), in a namespace whose __name__ is __main__."""
    import linecache

    linecache.cache[cell] = (len(code), None, code.splitlines(keepends=True), cell)
    namespace = {"__name__": "__main__", "__file__": __file__}
    exec(compile(code, cell, "exec"), namespace)
    return namespace


@pytest.fixture()
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The launch's temporary folder (and the module written in it) is made under tmp_path."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_notebook_function_runs_with_what_it_uses(own_tempdir: Path) -> None:
    nb = _notebook()
    source = notebook_module(nb["ring"])
    ring_line = NOTEBOOK.splitlines().index("def ring(rank, world_size, n):") + 1
    for line in (
        "from helpers.launch import current_device",
        "import torch.distributed as dist",
        "SCALE = 10",
        "LABELS = ('sum', {'ranks': [0, 1], 'unit': None})",
        "class Scaler:",
        "@dataclasses.dataclass\nclass Settings:",
        "def scaled(t):",
        f"# ring, from notebook cell <ipython-input-3-0123456789ab>, line {ring_line}",
    ):
        assert line in source, f"expected {line!r} in the written module, found:\n{source}"
    assert "TABLE" not in source and "LOG" not in source, "only what ring uses is written"
    # definition order: the class, then the function using it, then ring
    assert source.index("class Scaler") < source.index("def scaled") < source.index("def ring")
    res = launch(nb["ring"], 2, args=(3,))
    assert list(res) == [{"sum": [30.0] * 3, "ranks": [0, 1]}] * 2, f"found {list(res)}"
    # a partial, and a harmless decorator (torch.no_grad) re-applied in the workers
    res = launch(functools.partial(nb["no_grad_ring"], n=2), 2)
    assert [r["sum"] for r in res] == [[30.0] * 2] * 2, f"found {list(res)}"
    # a module's worker given the notebook's function as an argument (pickled as a reference to
    # the module written for it)
    res = launch(w.apply_worker, 2, args=(nb["ring"], 1))
    assert [r["sum"] for r in res] == [[30.0]] * 2, f"found {list(res)}"
    assert list(own_tempdir.iterdir()) == [], "the launch left its temporary folder behind"
    _assert_no_process_left()


def test_a_notebook_global_that_cannot_be_written_is_refused_naming_it(own_tempdir: Path) -> None:
    nb = _notebook()
    for fn, name, kind in [("uses_a_tensor", "TABLE", "Tensor"), ("uses_a_file", "LOG", "")]:
        with pytest.raises(ValueError, match=rf"global {name!r} \(a {kind}.*as an argument"):
            launch(nb[fn], 2)
    with pytest.raises(ValueError, match=r"decorator @traced may do something"):
        launch(nb["decorated"], 2)
    with pytest.raises(ValueError, match=r"function 'alias' \(used by 'uses_an_alias'\) is bound"):
        launch(nb["uses_an_alias"], 2)
    assert list(own_tempdir.iterdir()) == [], "a refused launch made a temporary folder"
    _assert_no_process_left()


def test_a_notebook_function_that_raises_names_the_rank_and_its_line(own_tempdir: Path) -> None:
    nb = _notebook()
    with pytest.raises(WorkerError) as info:
        launch(nb["boom"], 2, timeout_s=300)  # a bound: it raises long before
    err = info.value
    text = str(err)
    assert err.rank == 1 and text.startswith("rank 1 failed"), f"expected rank 1, found {text}"
    assert "rank 1 raised ValueError: boom on rank 1 in the notebook" in text
    # the traceback names the written module and shows the notebook's own line
    raise_line = 1 + NOTEBOOK.splitlines().index(
        '        raise ValueError(f"boom on rank {rank} in the notebook")'
    )
    cell = f"notebook cell <ipython-input-3-0123456789ab>, line {raise_line}"
    assert re.search(rf'notebook_boom\.py", line \d+, in boom \(from {re.escape(cell)}\)', text), (
        f"expected the frame to name the written module and {cell}, found:\n{text}"
    )
    assert 'raise ValueError(f"boom on rank {rank} in the notebook")' in text, text
    assert list(own_tempdir.iterdir()) == [], "a failed launch left its temporary folder behind"
    _assert_no_process_left(err)


_IPYTHON_CELL = """\
import json, torch, torch.distributed as dist
from helpers.launch import launch
OFFSET = 0.5
class Box:
    def __init__(self, v):
        self.v = v
def worker(rank, world_size):
    t = torch.tensor([rank + OFFSET])
    dist.all_reduce(t)
    return Box(t.item()).v
print("RESULT", json.dumps(list(launch(worker, 2))))
"""


def test_a_function_typed_in_ipython_runs(tmp_path: Path) -> None:
    """The real path: IPython compiles each cell under its own name and keeps its source in
    linecache; Python 3.11's inspect cannot find a class typed there, the launcher can."""
    ipython = Path(sys.executable).with_name("ipython")
    if not ipython.exists():
        pytest.skip("IPython is not installed in this environment")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src"), "IPYTHONDIR": str(tmp_path)}
    done = subprocess.run(
        [str(ipython), "--no-banner", "-c", _IPYTHON_CELL],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a bound: it takes seconds
    )
    found = re.search(r"RESULT (.*)", done.stdout)
    assert found and json.loads(found.group(1)) == [2.0, 2.0], (
        f"expected RESULT [2.0, 2.0] from IPython, found:\n{done.stdout}\n{done.stderr}"
    )


_IPYTHON_EDITED = [
    "import dataclasses, json\nfrom helpers.launch import launch\n",
    "@dataclasses.dataclass\nclass Cfg:\n    n: int = 2\n",
    "def cfg_worker(rank, world_size):\n    return Cfg().n\n",
    "first = list(launch(cfg_worker, 2))\n",
    "@dataclasses.dataclass\nclass Cfg:  # the cell above, edited and rerun\n    n: int = 3\n",
    'print("RESULT", json.dumps([first, list(launch(cfg_worker, 2))]))\n',
]


def test_a_dataclass_edited_in_ipython_runs_as_edited(tmp_path: Path) -> None:
    """Real IPython cells (InteractiveShell.run_cell, as a kernel runs them): IPython keeps the
    old cell's text in linecache too; the launch writes the class that is defined now."""
    pytest.importorskip("IPython")
    script = (
        "import json, sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "for cell in json.loads(sys.argv[1]):\n"
        "    shell.run_cell(cell).raise_error()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src"), "IPYTHONDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(_IPYTHON_EDITED)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a bound: it takes seconds
    )
    found = re.search(r"RESULT (.*)", done.stdout)
    assert found and json.loads(found.group(1)) == [[2, 2], [3, 3]], (
        f"expected RESULT [[2, 2], [3, 3]] (before and after the edit), found:\n"
        f"{done.stdout}\n{done.stderr}"
    )


# --- edit-and-rerun: several cells, redefinitions, values that changed since a def ran ---------

_CELL_NUMBERS = iter(range(100, 10_000))


def _cells(*codes: str, namespace: dict | None = None) -> dict:
    """Run `codes` as successive IPython cells (each its own <ipython-input-N-...>, N rising)
    in one `__main__` namespace, as a reader who edits and reruns cells does."""
    import linecache

    ns = namespace if namespace is not None else {"__name__": "__main__", "__file__": __file__}
    for code in codes:
        cell = f"<ipython-input-{next(_CELL_NUMBERS)}-0123456789ab>"
        linecache.cache[cell] = (len(code), None, code.splitlines(keepends=True), cell)
        exec(compile(code, cell, "exec", dont_inherit=True), ns)  # not this file's __future__
    return ns


_EDITED = [
    """\
import dataclasses
import functools
import xml.etree.ElementTree
from typing import ClassVar

import torch

N = 2
SCALE = 3
G = 4


def dflt(rank, world_size, n=N, *, k=N + 1):
    return n * 10 + k
""",
    "N = 5\n",  # rebound after dflt's def ran: dflt keeps n=2, k=3
    "class Model:\n    pass\n",  # first bound here, before Base
    "class Base:\n    tag = 'base'\n",
    "class Model(Base):  # redefined: needs Base above it\n    pass\n",
    """\
@dataclasses.dataclass
class Cfg:
    n: int = 2
    registry: ClassVar[int] = 5
""",
    """\
@dataclasses.dataclass
class Cfg:  # the same cell, edited and rerun
    n: int = 3
    registry: ClassVar[int] = 5
""",
    """\
class Box:
    def __init__(self, v):
        self.v = v


def make(rank):
    return Box(rank)


class A:
    class B:
        def m(self):
            return G


class L:
    f = staticmethod(lambda x: SCALE * x)


y = torch.ones(1)  # a tensor global: K's own y and OUT's store do not read it
OUT = torch.zeros(1)


class K:
    y = 1
    z = y + 1


def local_class():
    class Local:  # its body's LOAD_NAME y is its own y, not the tensor
        y = 3
        m = y + 1

    return Local.m


@functools.cache
def driver(rank, world_size, step, box):
    global OUT
    OUT = rank
    return {
        "defaults": dflt(rank, world_size),
        "shared class": isinstance(step(rank), Box),
        "box arg": [type(box).__name__, box.v],
        "base": Model.tag,
        "fields": [f.name for f in dataclasses.fields(Cfg)],
        "edited": Cfg().n,
        "nested": A.B().m(),
        "class lambda": L.f(2),
        "submodule": xml.etree.ElementTree.fromstring("<a/>").tag,
        "class local": [K.z, local_class()],
    }
""",
]


def test_edited_cells_run_what_the_notebook_has(own_tempdir: Path) -> None:
    """Each key is a world where the written module re-ran something differently from the
    notebook: re-evaluated defaults, a class per function, a ClassVar made a field, ..."""
    nb = _cells(*_EDITED)
    args = (nb["make"], nb["Box"](7))
    expected = [nb["driver"](rank, 2, *args) for rank in range(2)]
    assert expected[0]["defaults"] == 23 and expected[0]["edited"] == 3, expected  # the notebook
    assert expected[0]["fields"] == ["n"], f"expected ClassVar not a field, found {expected}"
    source = notebook_module(nb["driver"])
    assert source.index("class Base") < source.index("class Model(Base)"), source
    res = launch(nb["driver"], 2, args=args)
    assert list(res) == expected, f"expected what the notebook returns, {expected}; found {res}"
    assert list(own_tempdir.iterdir()) == [], "the launch left its temporary folder behind"


_REFUSED = [
    """\
import dataclasses
import functools
import torch

SCALE = 10
REG = []


def register(f):
    REG.append(f.__name__)
    return f


@dataclasses.dataclass
class Settings:
    factor: int = SCALE


def uses_settings(rank, world_size):
    return Settings().factor


@functools.lru_cache(maxsize=SCALE)
def cached_by_scale(rank, world_size):
    return rank


class Plain:
    factor = 1


def object_default(rank, world_size, s=Plain()):  # one object, made when the def ran
    return s.factor


class M:
    @register
    def f(self):
        return 1


def registers(rank, world_size):
    return [M().f(), list(REG)]


def ring(rank, world_size):
    return "old"


saved = ring
""",
    "SCALE = 5\n",
    "def ring(rank, world_size):\n    return 'new'\n",
    """\
import sys, types

fakemod = types.ModuleType("fakemod")
sys.modules["fakemod"] = fakemod
BIG = 10**5000
BIGL = list(range(200_000))


def uses_fake(rank, world_size):
    return fakemod.__name__


def uses_big(rank, world_size):
    return BIG


def uses_bigl(rank, world_size):
    return len(BIGL)
""",
]


def test_what_would_run_differently_in_the_workers_is_refused_naming_it(
    own_tempdir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nb = _cells(*_REFUSED)
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv("PSR_LAUNCH_LOG", str(log))
    for call, match in [
        ((nb["uses_settings"], 2), r"class 'Settings'.*'factor' = SCALE.*holds \(10\)"),
        ((nb["cached_by_scale"], 2), r"argument SCALE of its decorator"),
        ((nb["object_default"], 2), r"default of its parameter 's' \(Plain\(\)\)"),
        ((nb["registers"], 2), r"class 'M'.*decorator @register"),
        ((w.apply_worker, 2, (nb["saved"], nb["ring"])), r"two different .* named 'ring'"),
        ((nb["uses_fake"], 2), r"global 'fakemod' \(a module"),
        ((nb["uses_big"], 2), r"global 'BIG' \(a int whose repr"),
        ((nb["uses_bigl"], 2), r"global 'BIGL' .* too big"),
    ]:
        with pytest.raises(ValueError, match=match):
            launch(*call)
    assert list(own_tempdir.iterdir()) == [], "a refused launch made a temporary folder"
    assert not log.exists(), "a refused launch was logged as a launch"
    _assert_no_process_left()


_FAILS_IN_WORKERS = """\
import os


class Box:
    def __init__(self, v):
        self.v = v


def returns_box(rank, world_size):
    return Box(rank)


class AtImport:
    where = {"notebook": 0}[os.environ.get("RANK", "notebook")]  # KeyError on a rank


def fails_at_import(rank, world_size):
    return AtImport.where
"""


def test_what_fails_in_the_workers_says_where_and_why(own_tempdir: Path) -> None:
    nb = _cells(_FAILS_IN_WORKERS)
    with pytest.raises(WorkerError) as info:
        launch(nb["returns_box"], 2, timeout_s=300)  # a bound: it fails long before
    text = str(info.value)
    assert info.value.rank in (0, 1) and re.search(r"rank \d returned a value the notebook", text)
    assert "instance of a class defined in the notebook" in text and "plain data" in text, text
    with pytest.raises(WorkerError) as info:
        launch(nb["fails_at_import"], 2, timeout_s=300)
    text = str(info.value)
    assert re.search(r"rank \d raised ImportError: importing notebook_fails_at_import\.py", text)
    line = 1 + _FAILS_IN_WORKERS.splitlines().index(
        '    where = {"notebook": 0}[os.environ.get("RANK", "notebook")]  # KeyError on a rank'
    )
    assert re.search(
        rf"in AtImport \(from notebook cell <ipython-input-\d+-0123456789ab>, "
        rf"line {line}\)",
        text,
    ), f"expected the cell's line {line}, found:\n{text}"
    assert list(own_tempdir.iterdir()) == [], "a failed launch left its temporary folder behind"
    _assert_no_process_left(info.value)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True])
def test_bad_world_size(bad: object) -> None:
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        launch(w.sum_worker, bad)  # type: ignore[arg-type]


def test_bad_fn_and_backend() -> None:
    with pytest.raises(TypeError, match="needs a callable"):
        launch(42, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown backend"):
        launch(w.sum_worker, 2, backend="carrier-pigeon")
    too_many = torch.cuda.device_count() + 1
    with pytest.raises(RuntimeError, match="nccl"):
        launch(w.sum_worker, too_many, backend="nccl")


def test_auto_backend_choice() -> None:
    gpus = torch.cuda.device_count()
    expected = "nccl" if gpus >= 2 and torch.distributed.is_nccl_available() else "gloo"
    assert choose_backend(2) == expected
    assert choose_backend(gpus + 1) == "gloo"


def test_a_rank_that_raises_is_named_with_its_traceback() -> None:
    timeout = 300  # only a bound: the raise ends the launch long before (3 starts at any load)
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(w.raise_worker, 3, args=(1,), timeout_s=timeout)
    elapsed = time.monotonic() - start
    err = info.value
    assert err.rank == 1
    text = str(err)
    assert text.startswith("rank 1 failed")
    assert "rank 1 raised ValueError: boom on rank 1" in text
    assert "--- traceback of rank 1 ---" in text and "raise_worker" in text
    # the raise ends the launch before its deadline (a timeout would be a LaunchTimeout); no
    # tighter wall-clock bound: three torch imports on a loaded machine take what they take
    assert elapsed < timeout, (
        f"expected the error before the {timeout} s timeout, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


@pytest.mark.parametrize(
    ("how", "reason"), [("exit", "exit code 3"), ("abort", "killed by SIGABRT")]
)
def test_a_rank_that_dies_is_named(how: str, reason: str) -> None:
    with pytest.raises(WorkerError) as info:
        launch(w.exit_worker, 2, args=(0, how), timeout_s=300)  # a bound: it dies long before
    assert info.value.rank == 0
    assert f"rank 0 died without a result ({reason}" in str(info.value)
    _assert_no_process_left(info.value)


def _hang_until_timeout(tmp_path: Path) -> tuple[LaunchTimeout, int, float]:
    """A launch whose rank 1 hangs, timed out only once both ranks sat where they hang (rank 1
    spinning, rank 0 in the barrier) well before the deadline: their markers say so. A machine
    too loaded for that within the timeout (torch imports; 8 s was not enough at load 15) gets
    a longer one, so the stack dumps always show the hang, never an import."""
    for timeout in (15, 60, 240):
        markers = tmp_path / f"timeout{timeout}"
        markers.mkdir()
        start, start_wall = time.monotonic(), time.time()
        with pytest.raises(LaunchTimeout) as info:
            launch(w.hang_worker, 2, args=(1, str(markers)), timeout_s=timeout)
        elapsed = time.monotonic() - start
        times = [m.stat().st_mtime for m in markers.iterdir()]
        if len(times) == 2 and max(times) < start_wall + timeout - 2:
            return info.value, timeout, elapsed
    raise AssertionError(f"the workers did not reach hang_worker within {timeout} s")


def test_a_hanging_rank_times_out_naming_the_ranks(tmp_path: Path) -> None:
    err, timeout, elapsed = _hang_until_timeout(tmp_path)
    assert isinstance(err, TimeoutError)
    assert err.ranks == [0, 1]  # rank 0 waits in the barrier for rank 1
    text = str(err)
    assert text.startswith("ranks [0, 1] did not finish within the timeout")
    # where each rank was stuck, from the workers' own stack dumps
    assert "--- rank 1 ---" in text and "in hang_worker" in text
    assert "in barrier" in text.split("--- rank 1 ---")[0]
    # not before the deadline (the claim), and bounded after it: launch sleeps 0.5 s for the
    # dumps and waits at most 5 s per killed worker; the bound leaves a loaded machine a minute
    # for that (bounded, not fast: a launch that waited for its hung workers never ends)
    bound = timeout + 60
    assert timeout <= elapsed < bound, (
        f"expected {timeout} s <= elapsed < {bound} s, took {elapsed:.1f} s"
    )
    _assert_no_process_left(err)


def test_nothing_listens_on_a_non_loopback_address(four_ranks) -> None:
    assert any(r["sockets"] for r in four_ranks), "gloo should listen somewhere (on loopback)"
    for rank, r in enumerate(four_ranks):
        for addr in r["sockets"]:
            assert is_loopback(addr), f"rank {rank} listens on {addr}"


_SCRIPT = textwrap.dedent(
    """
    import signal, sys
    # A Jupyter kernel turns SIGINT into KeyboardInterrupt; a process started in the
    # background by a non-interactive shell (as CI may be) inherits SIGINT *ignored*.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {here!r})
    import launch_workers as w
    from helpers.launch import launch
    print("starting", flush=True)
    launch(w.hang_worker, 2, args=(-1, {markers!r}), timeout_s=600)
    """
)


def _start_parent(markers: Path) -> tuple[subprocess.Popen, list[int]]:
    """A parent whose two workers both spin in hang_worker (their markers say so: past the
    process group and the death signal, whatever the load), and the workers' pids."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT.format(here=str(HERE), markers=str(markers))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(markers.iterdir())) < 2:
        time.sleep(0.2)
    workers = _worker_children(parent.pid)
    assert len(workers) == 2 and len(list(markers.iterdir())) == 2, (
        f"expected 2 workers in hang_worker within 300 s, found pids {workers}"
    )
    return parent, workers


def test_interrupt_stops_every_worker(tmp_path: Path) -> None:
    """JupyterLab's Interrupt sends SIGINT to the kernel: the launch stops all workers."""
    parent, workers = _start_parent(tmp_path)
    parent.send_signal(signal.SIGINT)
    _, err = parent.communicate(timeout=120)  # a bound: it stops in well under a second
    assert "KeyboardInterrupt" in err
    assert wait_gone(workers, 5) == [], "workers outlived an interrupted launch"


def test_killed_parent_takes_its_workers_along(tmp_path: Path) -> None:
    """A kernel killed outright (SIGKILL) cannot clean up: the workers die with it anyway."""
    parent, workers = _start_parent(tmp_path)
    parent.kill()
    parent.communicate(timeout=120)
    # PR_SET_PDEATHSIG: the kernel SIGKILLs them as the parent dies (30 s: a bound, not a wait)
    assert wait_gone(workers, 30) == [], "workers outlived a SIGKILLed parent"


def test_a_timeouts_stacks_name_the_cell_too() -> None:
    """faulthandler's frames at a timeout ('line 9 in f', no comma) are mapped like a
    traceback's, so a notebook worker stuck in a collective shows its cell and line."""
    import io

    from helpers.launch import _in_the_notebook, _NotebookPickler

    nb = _cells("def slow(rank, world_size):\n    while True:\n        pass\n")
    pickler = _NotebookPickler(io.BytesIO(), None, None)
    pickler.dump((nb["slow"], ()))
    ((filename, text),) = pickler.texts().items()
    line = 1 + text.splitlines().index("    while True:")
    stack = f'  File "/tmp/launch-x/{filename}", line {line} in slow'
    mapped = _in_the_notebook(stack, pickler.writers)
    assert re.search(
        r"in slow \(from notebook cell <ipython-input-\d+-0123456789ab>, line 2\)", mapped
    ), f"expected the cell's line 2, found {mapped!r}"


def test_a_notebook_root_with_a_prelude_shares_its_module_with_its_args() -> None:
    """launch_source's path (a prelude given): the reader's function and a notebook function
    in its args go into one module, the prelude first, so they share its classes."""
    import io

    from helpers.launch import _NotebookPickler

    nb = _cells(
        "class Tag:\n    pass\n\n\ndef step(rank):\n    return Tag()\n\n\n"
        "def mine(rank, world_size, step):\n    return isinstance(step(rank), Tag)\n"
    )
    pickler = _NotebookPickler(io.BytesIO(), "import torch\n", nb["mine"])
    pickler.dump((nb["mine"], (nb["step"],)))
    texts = pickler.texts()
    assert list(texts) == ["notebook_mine.py"], f"expected one module, found {list(texts)}"
    text = texts["notebook_mine.py"]
    assert text.index("import torch") < text.index("class Tag") < text.index("def step"), text
