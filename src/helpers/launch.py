"""Run a function on N ranks inside a real process group, safely, from a notebook.

Used by: 04-08, 13-17 and 19 (every notebook that runs ranks: collectives, all-reduce, DDP, SyncBN,
no_sync, sharded, DDP under compile, tensor, pipeline, context and expert parallelism) and their
tests.
CPU with gloo everywhere; NCCL with one GPU per rank when enough GPUs are visible.

    results = launch(fn, world_size=4, args=(x,))   # fn(rank, world_size, *args) on each rank
    results[rank]         # what rank returned (plain Python data is best)
    results.backend       # "gloo" or "nccl": what backend="auto" chose
    results.outputs[r]    # what rank r printed while fn ran (stdout and stderr, fd level)

`fn` may be typed in a notebook cell: `launch(my_ring, 4, args=(x,))` writes its source, and what
it uses from the notebook, into a module the workers import (below: what is written, what not).

Why it is built this way (each point is a pitfall measured on the pinned stack):
- Workers are fresh Python processes (like `spawn`, never `fork`: the multiprocessing docs
  call forking a multithreaded process, which torch's is, problematic); they import `fn` by
  reference. Unlike multiprocessing's spawn they do not re-import the parent's `__main__`, which
  fails in some kernels and scripts (and would re-run every cell).
- So a function defined in the notebook (`__main__`: a cell, or the script being run) is written
  out instead: every notebook function and class of one launch (`fn`, and those inside `args`,
  a decorated one included) goes into one module, `notebook_<name>.py` (the first one's name),
  in the launch's temporary folder, which the workers import by path; inside the pickled
  payload each is a reference to that module, so `fn` and its arguments share its classes and
  state, as in the notebook. An instance of a notebook class inside `args` pickles its state
  with a reference to the class written there. (`notebook_module(fn)` returns the text written
  for `fn` alone.) The module holds, under a comment naming the cell of each definition:
  - an import for each global the code reads (bytecode LOAD_GLOBAL, through nested code and
    nested classes; a name only stored, `global X; X = 1`, and a class body's own names are
    not globals) that is a module (`import x as name`) or a function or class importable from
    a real module (`from mod import qualname as name`, when that finds the very same object),
    if a fresh interpreter finds the module by name (on sys.path or built in); `import a.b.c`
    for each submodule the code reads through a module global (`xml.etree.ElementTree` with
    only `xml` bound), and an import for the names of a class's annotations where there is
    one (dataclasses looks `ClassVar` and `InitVar` up in the module);
  - `name = <repr>` for plain constants (None, bool, int, float, str, bytes, tuples, lists and
    dicts of them, when the repr reads back equal and has at most 100,000 characters), with
    the values they have at launch time, as the functions see them when called then;
  - the source of each definition (`inspect.getsource`, which reads IPython cells through
    linecache; for a class, the cell its methods were compiled in, or, for a class without
    methods such as a dataclass, the newest cell whose class statement of that name could
    have made the current class: same names, same literal values), each after the
    definitions its statement evaluates (bases, defaults, decorators, class-level values),
    otherwise in the notebook's definition order.
  What runs when: a worker executes each def and class statement when it imports the module,
  so decorators, bases and class bodies run again there; annotations are never evaluated
  (`from __future__ import annotations`). A function's (or method's) default values are not
  taken from a re-run: the ones it has in the notebook (`__defaults__`, `__kwdefaults__`) are
  written after its def when they are plain constants (`_set_defaults`); a default of any
  other kind is refused, naming the parameter, unless its expression reads only builtins,
  modules and importable names (`dtype=torch.float32`), which the worker's def evaluates again
  from the same modules (a call in it, `torch.ones(3)`, runs again). A class-level value (a
  dataclass field's default included) whose expression reads notebook values is refused,
  naming it, unless evaluating it now (names, attributes, arithmetic, no calls) gives the
  value the class holds: a global rebound since the class's cell ran would make the workers'
  class differ; one that reads only builtins and modules runs again in each worker (a call
  such as `torch.randn(3)` gives each its own value). Each definition keeps its source lines, so a
  worker's traceback shows the notebook's code, and WorkerError and LaunchTimeout add to each
  frame of the written module the cell and line it came from; a failure while a worker
  imports the module is an ImportError saying so. The module is compiled in the parent
  before anything starts.
- Refused before anything starts, with a ValueError naming the name: a global of any other kind
  (a tensor, an open file, a model, a lambda, a module a fresh interpreter cannot find by name),
  since its value cannot be rebuilt from source: pass it as an argument, which is pickled; a
  lambda or a nested function as a definition (no source of its own, and it may use its
  enclosing function's variables); a definition used by another one under a name other than
  it was defined with, or whose name now means something else; two different definitions of
  one name in one launch (an old version kept as `saved = ring` next to the redefined `ring`);
  and a decorated definition or method unless the decorator only wraps and registers nowhere
  (`torch.no_grad`, `inference_mode`, `functools.cache`, `dataclass`: the list
  `_HARMLESS_DECORATORS`; on a method also `staticmethod`, `classmethod`, `property` and its
  `.setter`), since re-running any other in the workers might not do what it did; and an
  allowed decorator's argument that reads notebook values (`@lru_cache(maxsize=N)`: the worker
  would read N as it is at launch time; a literal or a module's name is fine). A refused
  launch starts nothing and is not logged.
  Values a notebook function returns should be plain data: an instance of a notebook class
  pickles by reference to the written module, which the parent does not import; that rank's
  result is then a WorkerError saying so.
- Rendezvous is a `file://` store in a fresh temporary folder, removed after every launch with
  the module written there (a TCPStore would listen on every interface), and GLOO_SOCKET_IFNAME
  / NCCL_SOCKET_IFNAME pin the backends to the loopback interface: without the pin gloo listens
  where the host name resolves (loopback if it fails).
  tests/test_collectives.py checks gloo on a host whose name resolves off loopback. A file
  store needs no agreed port, so concurrent launches cannot collide on one.
- Results travel as pickle files renamed into place, never through a pipe: no deadlock for large
  results, and tensors survive their worker (a queue would hand back shared memory that dies).
- Each worker writes its stdout/stderr (file descriptors 1 and 2, so C++ output too) to a file
  per rank; the parent hands it back in rank order. Output from start-up and teardown (before
  `fn` starts, after it returns) is kept apart and only shown when something fails.
- Faults end within `timeout_s` plus a few seconds with an error naming the rank, and no worker
  outlives the call: workers run in their own process groups and are killed on any failure,
  timeout or KeyboardInterrupt (JupyterLab's "Interrupt"), and die with the parent if the
  kernel itself is killed (PR_SET_PDEATHSIG).
- Teardown is a barrier then `destroy_process_group`: without the barrier, rank 0 sometimes
  aborted at exit ("terminate called without an active exception"; 2 of 12 four-rank runs
  measured on torch 2.13 CPU, 0 of 16 with it).
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import enum
import faulthandler
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import io
import json
import linecache
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import types
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from helpers.processes import LOOPBACK_IFNAME, child_env, set_pdeathsig

__all__ = [
    "launch",
    "LaunchResult",
    "LaunchError",
    "WorkerError",
    "LaunchTimeout",
    "choose_backend",
    "current_device",
    "notebook_module",
]

_POLL_S = 0.02
_GRACE_S = 1.0  # after a first failure: time for the other ranks' errors to arrive
_TEARDOWN_S = 15.0  # after every rank returned: time for barrier + destroy_process_group
_TAIL_CHARS = 4000  # how much of a failed rank's captured output goes into the error
# Errors a rank gets only because a peer went away: reported after the peer's own failure.
_KNOCK_ON = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "ECONNRESET")

_device: torch.device | None = None  # set inside a worker
_workdir = Path()  # set inside a worker: its launch's temporary folder


class LaunchError(RuntimeError):
    """Base class: something went wrong on one or more ranks. `pids` lists the workers."""

    def __init__(self, message: str, pids: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.pids = list(pids)


class WorkerError(LaunchError):
    """A rank raised (or died). `rank` is the first to fail; `ranks` every failed rank."""

    def __init__(self, message: str, rank: int, ranks: Sequence[int], pids: Sequence[int]):
        super().__init__(message, pids)
        self.rank = rank
        self.ranks = list(ranks)


class LaunchTimeout(LaunchError, TimeoutError):
    """Some ranks did not return within the timeout. `ranks` lists them."""

    def __init__(self, message: str, ranks: Sequence[int], pids: Sequence[int]):
        super().__init__(message, pids)
        self.ranks = list(ranks)


class LaunchResult(list):
    """Per-rank return values in rank order, plus what the launch chose and captured."""

    def __init__(self, values: Sequence[Any], backend: str, outputs: Sequence[str]):
        super().__init__(values)
        self.backend = backend
        self.world_size = len(values)
        self.outputs = list(outputs)


def choose_backend(world_size: int, backend: str = "auto") -> str:
    """Resolve `backend` for `world_size` ranks on this machine, or raise saying why not.

    "auto" is NCCL with one GPU per rank when NCCL is built in and at least `world_size` GPUs
    are visible, gloo on CPU otherwise.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        if dist.is_nccl_available() and gpus >= world_size:
            return "nccl"
        return "gloo"
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("backend='nccl' asked for, but this torch build has no NCCL")
        if gpus < world_size:
            raise RuntimeError(
                f"backend='nccl' needs one GPU per rank: world_size={world_size} "
                f"but {gpus} CUDA device(s) are visible"
            )
        return "nccl"
    if backend == "gloo":
        return "gloo"
    if backend == "mpi":
        if not dist.is_mpi_available():
            raise RuntimeError("backend='mpi' asked for, but this torch build has no MPI")
        raise RuntimeError("backend='mpi' needs mpirun to start the ranks, not this launcher")
    raise ValueError(f"unknown backend {backend!r}: use 'auto', 'gloo' or 'nccl'")


def current_device() -> torch.device:
    """The device this rank should use: `cuda:<rank>` under NCCL, else CPU."""
    return _device if _device is not None else torch.device("cpu")


def _check_fn(fn: Any) -> Any:
    """Refuse what workers cannot run; return the `__main__` function to write out, or None."""
    if not callable(fn):
        raise TypeError(f"launch() needs a callable fn(rank, world_size, ...), got {fn!r}")
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(
            f"launch() cannot run {qualname!r}: a lambda or a function defined inside another "
            "function has no source of its own and may use that function's variables, so "
            "workers can neither import it nor have it written out for them; define it with "
            "def at the top level of a module or of a notebook cell."
        )
    if getattr(target, "__module__", None) != "__main__":
        return None
    if _notebook_definition(target) is None or isinstance(target, type):
        raise ValueError(
            f"launch() cannot run {target!r}: from the notebook (module __main__) it runs "
            "functions defined with def, whose source it writes out for the workers, not "
            f"a {type(target).__name__}; wrap the call in a function."
        )
    return target


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies (a killed kernel)."""
    if set_pdeathsig(signal.SIGKILL) and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect


def _redirect(path: Path) -> None:
    """Point fds 1 and 2 (and sys.stdout/err) at `path`, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _write_result(workdir: Path, rank: int, payload: tuple) -> None:
    tmp = workdir / f"result{rank}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, workdir / f"result{rank}.pkl")  # atomic: the parent never reads half


def _worker_main(rank: int, workdir: str) -> None:
    """Entry point of a worker process: set up the process group, run fn, report, tear down.

    Started by `launch` as `python -c ...` with stdout/stderr already going to the rank's
    set-up log; reads what to run from `workdir/payload.pkl`.
    """
    global _device, _workdir
    work = _workdir = Path(workdir)
    with open(work / "payload.pkl", "rb") as f:
        world_size, backend, deadline, parent_pid, payload = pickle.load(f)
    _die_with_parent(parent_pid)
    setup_log = work / f"rank{rank}.setup.log"
    fn_log = work / f"rank{rank}.log"
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
    faulthandler.enable(file=sys.stderr)  # a C++ abort still shows the Python stack
    # At the deadline, dump every thread's stack: the parent quotes it in LaunchTimeout.
    faulthandler.dump_traceback_later(max(deadline - time.time(), 0.1), file=sys.stderr)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        GLOO_SOCKET_IFNAME=LOOPBACK_IFNAME,
        NCCL_SOCKET_IFNAME=LOOPBACK_IFNAME,
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        fn, args = pickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(rank)
            _device = torch.device("cuda", rank)
        else:
            _device = torch.device("cpu")
        dist.init_process_group(
            backend,
            init_method=(work / "store").as_uri(),
            rank=rank,
            world_size=world_size,
            # longer than the launch deadline, so the parent's clearer timeout comes first
            timeout=timedelta(seconds=max(deadline - time.time(), 1.0) + 30),
        )
        _redirect(fn_log)
        value = fn(rank, world_size, *args)
        _redirect(setup_log)
        _write_result(work, rank, ("ok", value))
    except BaseException as err:  # noqa: BLE001 - everything is reported to the parent
        tb = traceback.format_exc()
        try:
            _write_result(work, rank, ("error", f"{type(err).__name__}: {err}", tb))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)  # peers may be blocked in a collective: do not wait for them
    dist.barrier()  # every rank is done with collectives before any tears down
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.flush()
    sys.stderr.flush()


# The death signal comes first, before `helpers.launch` imports torch (a second or more of CPU):
# a parent killed while its workers still import torch takes them along at once, not after the
# import (helpers.processes imports no torch). _worker_main sets it again, harmlessly.
_BOOT = (
    "import os, signal; from helpers.processes import set_pdeathsig; "
    "set_pdeathsig(signal.SIGKILL) and os.getppid() != {parent} and os._exit(1); "
    "from helpers.launch import _worker_main; _worker_main({rank}, {workdir!r})"
)


def _start(rank: int, workdir: Path) -> subprocess.Popen:
    env = child_env()  # the worker imports fn by reference: it needs our import path
    env["PYTHONUNBUFFERED"] = "1"
    boot = _BOOT.format(parent=os.getpid(), rank=rank, workdir=str(workdir))
    with open(workdir / f"rank{rank}.setup.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", boot],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=os.getcwd(),
            start_new_session=True,  # own process group: a kill reaches its children too
        )


def _kill(procs: Sequence[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and anything it started
        except (ProcessLookupError, PermissionError):
            pass
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL_CHARS else "...\n" + text[-_TAIL_CHARS:]


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _log_launch(fn: Callable[..., Any], world_size: int, asked: str, chosen: str) -> None:
    """Append one JSON line per launch to the file named by PSR_LAUNCH_LOG, if set: the worker,
    the world size, the backend asked for and the one chosen. `make test-gpu` (tools/gpu_check.py)
    sets it per notebook, so its report says which launches took NCCL and which ran on gloo."""
    path = os.environ.get("PSR_LAUNCH_LOG")
    if not path:
        return
    row = {"fn": getattr(fn, "__qualname__", repr(fn)), "world_size": world_size}
    row.update(asked=asked, chosen=chosen)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


# --- a function defined in the notebook ---------------------------------------------------------

# Decorators that mean the same when the written module re-runs them in a worker (they wrap or
# mark the function and register it nowhere). Any other decorator is refused.
_HARMLESS_DECORATORS = (
    "torch.no_grad",
    "torch.enable_grad",
    "torch.inference_mode",
    "functools.cache",
    "functools.lru_cache",
    "dataclasses.dataclass",
)
# On a method, these too (they make a descriptor of the class, registering nothing elsewhere).
_HARMLESS_METHOD_DECORATORS = (
    "builtins.staticmethod",
    "builtins.classmethod",
    "builtins.property",
    "functools.cached_property",
)
_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME"}  # a name only stored (`global X; X = 1`) is not needed
_PASS_IT = "pass it to the worker as an argument (launch(fn, n, args=(...))) instead"
_MAX_CONSTANT_CHARS = 100_000  # a bigger constant is refused: args are pickled once, not compiled
# Expressions checked by evaluating them in the notebook (names, attributes, arithmetic: no call).
_SAFE_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.BinOp,
    ast.UnaryOp,
    ast.operator,
    ast.unaryop,
    ast.Tuple,
    ast.List,
    ast.Dict,
    ast.Subscript,
    ast.Slice,
)


def _code_globals(code: types.CodeType) -> list[str]:
    """Global names the code (and the functions, comprehensions and classes in it) reads. In a
    class body (LOAD_NAME) a name the body itself stores is the class's own, not a global."""
    names: list[str] = []
    ins = list(dis.get_instructions(code))
    local = {i.argval for i in ins if i.opname == "STORE_NAME"}
    for i in ins:
        if i.opname in _GLOBAL_OPS and i.argval not in names:
            if i.opname == "LOAD_NAME" and i.argval in local:
                continue
            names.append(i.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [n for n in _code_globals(const) if n not in names]
    return names


def _stored_names(stmt: ast.stmt) -> set[str]:
    """Names a class-body statement binds in the class."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).partition(".")[0] for a in stmt.names}
    found: set[str] = set()
    stack: list[ast.AST] = [stmt]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            continue  # their own scope: `[j for j in ...]` binds no j in the class
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            found.add(n.id)
        stack += list(ast.iter_child_nodes(n))
    return found


def _def_time_names(node: ast.AST) -> list[str]:
    """Names a def or class statement evaluates when it runs: decorators, default values (a
    lambda's body included), bases, class-level statements (less the names the class body
    itself bound before; not function bodies: their code objects say what they use; not
    annotations: the written module has `from __future__ import annotations`)."""
    found: list[str] = []

    def visit(n: ast.AST, local: frozenset = frozenset()) -> None:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            parts = [*n.args.defaults, *[d for d in n.args.kw_defaults if d is not None]]
            parts += getattr(n, "decorator_list", [])
            for p in parts:
                visit(p, local)
            if isinstance(n, ast.Lambda):  # its body runs in the module's globals
                params = {a.arg for a in ast.walk(n.args) if isinstance(a, ast.arg)}
                visit(n.body, local | params)
            return
        if isinstance(n, ast.ClassDef):
            for child in [*n.decorator_list, *n.bases, *n.keywords]:
                visit(child, local)
            own: set[str] = set()
            for stmt in n.body:
                visit(stmt, local | own)
                own |= _stored_names(stmt)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            if n.id not in found and n.id not in local:
                found.append(n.id)
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.arg, ast.arguments)) and not (
                isinstance(n, (ast.AnnAssign, ast.arg)) and child is n.annotation
            ):
                visit(child, local)

    visit(node)
    return found


def _evaluated_names(expr: ast.AST) -> set[str]:
    """Names an expression reads when it is evaluated (a lambda's body reads its names later,
    when called: in the notebook and in a worker alike, the globals of that time)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Lambda):
            stack += [*n.args.defaults, *[d for d in n.args.kw_defaults if d is not None]]
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            found.add(n.id)
        stack += list(ast.iter_child_nodes(n))
    return found


def _is_literal(expr: ast.AST) -> bool:
    try:
        ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _annotation_names(node: ast.ClassDef) -> list[str]:
    """Names in a class body's annotations (dataclasses reads `ClassVar`/`InitVar` there)."""
    found: list[str] = []
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.AnnAssign):
            for n in ast.walk(stmt.annotation):
                if isinstance(n, ast.Name) and n.id not in found:
                    found.append(n.id)
    return found


def _dotted(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ['a', 'b', 'c'], or None if it is not a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _class_top_level(text: str, name: str) -> list[ast.ClassDef]:
    try:
        tree = ast.parse(text) if text else None
    except SyntaxError:
        return []
    return [
        n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef) and n.name == name
    ]


def _class_in(filename: str, name: str, line: int | None) -> tuple[str, str, int] | None:
    """The source of class `name` in a linecache file (containing `line`, if given)."""
    text = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(text) if text else None
    except SyntaxError:
        return None
    for node in ast.walk(tree) if tree else ():
        if (
            isinstance(node, ast.ClassDef)
            and node.name == name
            and (line is None or node.lineno <= line <= node.end_lineno)
        ):
            return _class_text(text, filename, node)
    return None


def _class_text(text: str, filename: str, node: ast.ClassDef) -> tuple[str, str, int]:
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = text.splitlines(keepends=True)[first - 1 : node.end_lineno]
    return "".join(lines), filename, first


def _class_matches(cls: type, node: ast.ClassDef) -> bool:
    """Whether a class statement could have made `cls`: the same names in its body, and the
    same value for each name bound to a literal (an edited `n: int = 2` -> `3` differs)."""
    own = {k for k in vars(cls) if not (k.startswith("__") and k.endswith("__"))}
    own |= set(vars(cls).get("__annotations__", {}))
    body: set[str] = set()
    for stmt in node.body:
        body |= _stored_names(stmt)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            body.add(stmt.target.id)
    public = {n for n in own if not n.startswith("_")}  # an Enum adds _member_map_ & co.
    if not body <= own or {n for n in body if not n.startswith("_")} != public:
        return False
    fields = getattr(cls, "__dataclass_fields__", {})
    for stmt in node.body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            continue
        target = getattr(stmt, "target", None) or (getattr(stmt, "targets", None) or [None])[0]
        value = stmt.value
        if not isinstance(target, ast.Name) or value is None:
            continue
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        field = fields.get(target.id)
        has = field.default if field is not None else vars(cls).get(target.id, _MISSING)
        if isinstance(cls, enum.EnumMeta) and target.id in cls.__members__:
            has = cls.__members__[target.id].value
        if type(has) is not type(literal) or has != literal:
            return False
    return True


_MISSING = object()


def _class_source(cls: type) -> tuple[str, str, int]:
    """A class's source, its file and first line, found where its methods were compiled (a
    cell: linecache), as Python 3.13 does; 3.11's `inspect.getsource` looks in
    `__main__.__file__`, which a notebook lacks and which, elsewhere, may hold another class of
    that name. A class without methods of its own (a dataclass): the newest cell whose
    top-level class statement of that name could have made this very class (same names, same
    literal values), since an edited and rerun cell leaves its old text in linecache too."""
    for value in vars(cls).values():
        func = getattr(value, "__func__", getattr(value, "fget", value))
        code = getattr(func, "__code__", None)
        if code is not None and not code.co_filename.startswith("<string"):
            found = _class_in(code.co_filename, cls.__name__, code.co_firstlineno)
            if found:
                return found
    cells = [f for f in list(linecache.cache) if f.startswith("<") or "ipykernel" in f]

    def cell_order(filename: str) -> tuple[int, int]:  # <ipython-input-N-...>: by N
        found = re.match(r"<ipython-input-(\d+)-", filename)
        return (int(found.group(1)) if found else -1, cells.index(filename))

    for filename in sorted(cells, key=cell_order, reverse=True):  # newest first
        text = "".join(linecache.getlines(filename))
        for node in reversed(_class_top_level(text, cls.__name__)):
            if _class_matches(cls, node):
                return _class_text(text, filename, node)
    if any(_class_top_level("".join(linecache.getlines(f)), cls.__name__) for f in cells):
        raise OSError(f"no cell's class {cls.__name__!r} matches the class defined now")
    lines, first = inspect.getsourcelines(cls)
    return "".join(lines), inspect.getsourcefile(cls) or "?", first


def _is_constant(value: Any) -> bool:
    if value is None or type(value) in (bool, int, float, str, bytes):
        return True
    if type(value) in (tuple, list):
        return all(_is_constant(v) for v in value)
    if type(value) is dict:
        return all(_is_constant(k) and _is_constant(v) for k, v in value.items())
    return False


def _constant_text(value: Any) -> str | None:
    """`repr(value)` if it is a plain constant whose repr reads back equal, else None."""
    if not _is_constant(value):
        return None
    try:
        text = repr(value)  # inside the try: a huge int's repr raises ValueError
        same = eval(text, {}) == value  # noqa: S307 - the repr of plain data
    except Exception:  # noqa: BLE001 - nan, inf: their repr does not read back
        return None
    return text if same else None


def _findable(modname: str) -> bool:
    """Whether a fresh interpreter finds module `modname` by name (on sys.path or built in)."""
    top = modname.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _import_line(name: str, value: Any) -> str | None:
    """`import ...` / `from ... import ...` that binds `name` to `value` in a worker, or None."""
    if isinstance(value, types.ModuleType):
        mod = value.__name__
        if mod == "__main__" or sys.modules.get(mod) is not value or not _findable(mod):
            return None
        return f"import {mod}" if mod == name else f"import {mod} as {name}"
    mod = getattr(value, "__module__", None)
    if not isinstance(mod, str) or mod == "__main__" or mod.startswith("notebook_"):
        return None
    if not _findable(mod):
        return None
    try:
        module = importlib.import_module(mod)
    except Exception:  # noqa: BLE001 - then it cannot be imported by name either
        return None
    for attr in (getattr(value, "__qualname__", None), getattr(value, "__name__", None), name):
        if not isinstance(attr, str) or not attr.isidentifier():
            continue  # dotted (a method, a nested class) or <lambda>, <locals>
        if getattr(module, attr, None) is value:
            return f"from {mod} import {attr}" + (f" as {name}" if attr != name else "")
    return None


def _decorator_problem(node: ast.AST, namespace: dict, allowed: tuple = ()) -> str | None:
    """Why a decorator of a written function or class is refused, or None if it is harmless."""
    for dec in node.decorator_list:
        head = dec.func if isinstance(dec, ast.Call) else dec
        ok = False
        chain = _dotted(head)
        if allowed and chain and len(chain) == 2 and chain[1] in ("setter", "getter", "deleter"):
            ok = True  # @prop.setter on a method: property's own
        elif isinstance(head, (ast.Name, ast.Attribute)):
            try:  # a dotted name, evaluated in the notebook's namespace; nothing is called
                code = compile(ast.Expression(head), "<decorator>", "eval")
                target = eval(code, {"__builtins__": __builtins__, **namespace})  # noqa: S307
                ok = any(target is _resolve(p) for p in (*_HARMLESS_DECORATORS, *allowed))
            except Exception:  # noqa: BLE001 - an unknown decorator is refused
                ok = False
        if not ok:
            return (
                f"its decorator @{ast.unparse(dec)} may do something when it runs (register, "
                "wrap, rewrite) that a worker re-running the source would not reproduce, so "
                "only "
                + ", ".join(f"@{p}" for p in _HARMLESS_DECORATORS)
                + (" (and on a method @staticmethod, @classmethod, @property)" if allowed else "")
                + " are written out; apply it inside the function, or put the function in a "
                "module"
            )
    return None


def _resolve(path: str) -> Any:
    mod, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(mod), attr)


def _notebook_definition(value: Any) -> Any:
    """`value` unwrapped (a decorated function) if it is a function or class of `__main__`."""
    try:
        inner = inspect.unwrap(value) if callable(value) and not isinstance(value, type) else value
    except ValueError:  # a __wrapped__ cycle
        return None
    if isinstance(inner, (types.FunctionType, type)) and inner.__module__ == "__main__":
        return inner
    return None


def _method_function(value: Any) -> Any:
    """The function a class attribute holds (a method, static/class method, property getter)."""
    func = getattr(value, "__func__", getattr(value, "fget", getattr(value, "func", value)))
    try:
        func = inspect.unwrap(func)
    except ValueError:
        return None
    return func if isinstance(func, types.FunctionType) else None


def _class_functions(cls: type, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path of names, function) for each method of `cls` and of the classes nested in it."""
    found = []
    for key, value in vars(cls).items():
        if isinstance(value, type) and value.__qualname__ == f"{cls.__qualname__}.{key}":
            found += _class_functions(value, (*path, key))
            continue
        func = _method_function(value)
        if (
            func is not None
            and func.__qualname__.startswith(cls.__qualname__ + ".")
            and not func.__code__.co_filename.startswith("<string")  # dataclass's __init__ &co
        ):
            found.append(((*path, key), func))
    return found


def _node_at(node: ast.ClassDef, path: tuple) -> ast.AST | None:
    """The statement of a class body (nested classes followed) that defines `path`."""
    for key in path:
        matches = [
            s
            for s in node.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and s.name == key
        ]
        if not matches:
            return None
        node = matches[0]
    return node


def _set_defaults(owner: Any, path: tuple, defaults: dict, kwdefaults: dict) -> None:
    """Worker: give the written function (or method at `path` of class `owner`) the default
    values the notebook's function has, instead of re-evaluating their expressions now."""
    target = owner
    for key in path:
        target = vars(target)[key]
    func = _method_function(target) if path else inspect.unwrap(target)
    if defaults:
        func.__defaults__ = tuple(defaults.get(i, d) for i, d in enumerate(func.__defaults__))
    if kwdefaults:
        func.__kwdefaults__ = {**(func.__kwdefaults__ or {}), **kwdefaults}


def _all_defs(node: ast.AST) -> list[ast.AST]:
    """Every def and class statement inside a class body (methods, nested classes)."""
    return [
        n
        for n in ast.walk(node)
        if n is not node and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


class _ModuleWriter:
    """Collects what the `__main__` functions and classes of one launch need, then writes it as
    one module's source (so they share its classes and state, as in the notebook)."""

    def __init__(self, namespace: dict, prelude: str = "") -> None:
        self.root: str | None = None
        self.namespace = namespace
        self.prelude = prelude
        try:  # names the prelude binds: the prelude's meaning wins over a notebook global's
            self.prelude_names = set().union(*map(_stored_names, ast.parse(prelude).body))
        except SyntaxError:
            self.prelude_names = set()
        self.imports: dict[str, str] = {}
        self.submodules: list[str] = []  # `import a.b.c` for a submodule read as a.b.c
        self.constants: dict[str, str] = {}
        self.sources: dict[str, str] = {}  # name -> source, for functions and classes
        self.objects: dict[str, Any] = {}  # name -> the very function or class written
        self.deps: dict[str, list[str]] = {}  # name -> definitions its statement evaluates
        self.origins: dict[str, tuple[str, int]] = {}  # name -> (file or cell, first line)
        self.body_lines: dict[str, int] = {}  # name -> how many lines its source has
        self.lines: list[tuple[int, int, str, int]] = []  # set by text(): see where()

    def add_root(self, obj: Any) -> str:
        """Write `obj` (a function or class given to launch, in fn or args); its name."""
        inner = _notebook_definition(obj) or inspect.unwrap(obj)  # the root may be importable
        self.root = self.root or inner.__name__
        self._add_definition(inner.__name__, obj, used_by=None)
        return inner.__name__

    def _refuse(self, message: str) -> NoReturn:
        raise ValueError(f"launch() cannot run {self.root!r} from the notebook: {message}")

    def _add_definition(self, name: str, obj: Any, used_by: str | None) -> None:
        inner = _notebook_definition(obj) or inspect.unwrap(obj)  # the root may be importable
        kind = "class" if isinstance(inner, type) else "function"
        where = f"{kind} {name!r}" + (f" (used by {used_by!r})" if used_by else "")
        if name in self.objects:
            if self.objects[name] is not inner:
                self._refuse(
                    f"two different notebook definitions named {name!r} take part in one "
                    f"launch (one of them, {where}, from a cell run since the other: an old "
                    "version kept under another name?); the workers' module can hold one; "
                    "rename one of them"
                )
            return
        if inner.__name__ == "<lambda>":
            self._refuse(f"{where} is a lambda, which cannot be written out; write it with def")
        if "<locals>" in inner.__qualname__:
            self._refuse(
                f"{where} is defined inside another function (it may use that function's "
                "variables); define it at the top level of a cell"
            )
        if inner.__name__ != name or (used_by and self.namespace.get(name) is not obj):
            self._refuse(
                f"{where} is bound under another name than the one it was defined with "
                f"({inner.__name__!r}), or that name now means something else; call it by the "
                "name it was defined with"
            )
        try:
            if kind == "class":
                source, filename, first = _class_source(inner)
            else:
                lines, first = inspect.getsourcelines(inner)
                source, filename = "".join(lines), inner.__code__.co_filename
            source = textwrap.dedent(source)
            tree = ast.parse(source)
        except (OSError, TypeError, SyntaxError) as err:
            self._refuse(f"the source of {where} cannot be read ({err}); put it in a module")
        node = tree.body[0] if len(tree.body) == 1 else None
        wanted = ast.ClassDef if kind == "class" else (ast.FunctionDef, ast.AsyncFunctionDef)
        if not isinstance(node, wanted) or node.name != name:
            self._refuse(
                f"the source found for {where} does not define it (was it made by exec, or "
                "renamed?); put it in a module"
            )
        problem = _decorator_problem(node, self.namespace)
        for inside in _all_defs(node) if kind == "class" else ():
            problem = problem or _decorator_problem(
                inside, self.namespace, _HARMLESS_METHOD_DECORATORS
            )
        if problem:
            self._refuse(f"{where}: {problem}")
        for inside in [node, *(_all_defs(node) if kind == "class" else ())]:
            for dec in inside.decorator_list:
                for expr in (
                    [*dec.args, *(k.value for k in dec.keywords)]
                    if isinstance(dec, ast.Call)
                    else ()
                ):
                    if not _is_literal(expr) and not self._stable(expr):
                        self._refuse(
                            f"{where}: the argument {ast.unparse(expr)} of its decorator "
                            f"@{ast.unparse(dec)} reads the notebook's values, which a worker "
                            "re-running the decorator would read again as they are at launch "
                            "time, maybe not as they were when the cell ran; write the value "
                            "itself"
                        )
        self.objects[name] = inner
        self.sources[name] = ""  # placeholder: a recursive use is not followed twice
        def_time = _def_time_names(node)
        needs = list(def_time)
        codes = [inner.__code__] if kind == "function" else []
        methods = _class_functions(inner) if kind == "class" else []
        codes += [func.__code__ for _, func in methods]
        for code in codes:
            needs += [n for n in _code_globals(code) if n not in needs]
        for needed in needs:
            self._add_global(needed, used_by=name)
        for needed in _annotation_names(node) if kind == "class" else ():
            self._add_annotation_name(needed)
        self._add_submodules(node)
        self.deps[name] = [n for n in def_time if _notebook_definition(self.namespace.get(n))]
        after = []
        if kind == "function":
            after += self._default_lines(where, name, (), inner, node)
        else:
            self._check_class_body(where, inner, node)
            for path, func in methods:
                method_node = _node_at(node, path)
                if isinstance(method_node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    after += self._default_lines(where, name, path, func, method_node)
        self.sources[name] = (
            f"# {name}, from {_origin(filename, first)}\n{source.rstrip()}\n" + "".join(after)
        )
        self.origins[name] = (filename, first)
        self.body_lines[name] = source.rstrip().count("\n") + 1  # not the lines after it

    def _stable(self, expr: ast.AST) -> bool:
        """Whether re-evaluating `expr` in a worker gives what it gave in the notebook: it
        reads only builtins, modules and names importable from a module (no notebook value)."""
        for n in ast.walk(expr):
            if isinstance(n, ast.Lambda):
                return False
            if isinstance(n, ast.Name):
                if n.id not in self.namespace:
                    continue  # a builtin
                value = self.namespace[n.id]
                if _notebook_definition(value) is not None or _import_line(n.id, value) is None:
                    return False
        return True

    def _default_lines(
        self, where: str, owner: str, path: tuple, func: Any, node: ast.AST
    ) -> list[str]:
        """A line setting the defaults `func` really has (plain constants), refusing a default
        computed from the notebook that cannot be written."""
        positional = [*node.args.posonlyargs, *node.args.args]
        values = func.__defaults__ or ()
        pairs = list(
            zip(
                positional[len(positional) - len(values) :], values, node.args.defaults, strict=True
            )
        )
        kw = func.__kwdefaults__ or {}
        pairs += [
            (a, kw[a.arg], e)
            for a, e in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
            if e is not None and a.arg in kw
        ]
        fixes: dict[int, str] = {}
        kwfixes: dict[str, str] = {}
        for index, (arg, value, expr) in enumerate(pairs):
            text = _constant_text(value)
            if text is not None and len(text) <= _MAX_CONSTANT_CHARS:
                if index < len(values):
                    fixes[index] = text
                else:
                    kwfixes[arg.arg] = text
            elif not self._stable(expr):
                method = f" (method {'.'.join(path)})" if path else ""
                self._refuse(
                    f"{where}{method}: the default of its parameter {arg.arg!r} "
                    f"({ast.unparse(expr)}) is a {type(value).__name__} computed from the "
                    "notebook when its cell ran, which a worker re-running the def would "
                    "compute again, possibly differently; only plain-constant defaults are "
                    "written as the values the function has; give it no default and "
                    f"{_PASS_IT}"
                )
        if not fixes and not kwfixes:
            return []
        self.imports.setdefault("_psr_set_defaults", _SET_DEFAULTS_IMPORT)
        given = "{" + ", ".join(f"{i}: {t}" for i, t in fixes.items()) + "}"
        kwgiven = "{" + ", ".join(f"{k!r}: {t}" for k, t in kwfixes.items()) + "}"
        return [
            f"_psr_set_defaults({owner}, {path!r}, {given}, {kwgiven})"
            "  # the defaults it has in the notebook\n"
        ]

    def _check_class_body(self, where: str, cls: type, node: ast.ClassDef) -> None:
        """Refuse a class-level value computed from notebook values that give another value
        now than the class holds (a global rebound since its cell ran)."""
        fields = getattr(cls, "__dataclass_fields__", {})
        own: set[str] = set()
        for stmt in node.body:
            target = getattr(stmt, "target", None) or (getattr(stmt, "targets", None) or [None])[0]
            value = getattr(stmt, "value", None)
            checked = isinstance(stmt, (ast.Assign, ast.AnnAssign)) and value is not None
            if checked and isinstance(target, ast.Name):
                reads = {n for n in _evaluated_names(value) if n not in own}
                if not all(self._stable(ast.Name(r, ast.Load())) for r in reads):
                    field = fields.get(target.id)
                    has = vars(cls).get(target.id, _MISSING)
                    if field is not None and field.default is not dataclasses.MISSING:
                        has = field.default
                    same = False
                    if all(isinstance(n, _SAFE_NODES) for n in ast.walk(ast.Expression(value))):
                        try:
                            code = compile(ast.Expression(value), "<class value>", "eval")
                            now = eval(code, {"__builtins__": __builtins__, **self.namespace})  # noqa: S307
                            same = type(now) is type(has) and bool(now == has)
                        except Exception:  # noqa: BLE001 - cannot be checked: refused
                            same = False
                    if not same:
                        self._refuse(
                            f"{where}: its class-level {target.id!r} = {ast.unparse(value)} "
                            "was computed from the notebook's globals when its cell ran, and "
                            "computed again now (as the workers would) it would not be the "
                            f"value the class holds ({_short(has)}); rerun the cell that "
                            f"defines {cls.__name__!r}, or {_PASS_IT}"
                        )
            own |= _stored_names(stmt)

    def _add_annotation_name(self, name: str) -> None:
        """An annotation's name (ClassVar, InitVar, a type): imported where it can be, since
        dataclasses looks `ClassVar` up in the module; otherwise left out (never evaluated)."""
        if name in self.imports or name not in self.namespace:
            return
        line = _import_line(name, self.namespace[name])
        if line is not None:
            self.imports[name] = line

    def _add_submodules(self, node: ast.AST) -> None:
        """`import a.b.c` for each submodule the code reads through a module global (`xml`
        bound, `xml.etree.ElementTree` read: the package need not import it itself)."""
        for n in ast.walk(node):
            chain = _dotted(n) if isinstance(n, ast.Attribute) else None
            if not chain or chain[0] not in self.imports:
                continue
            value = self.namespace.get(chain[0])
            for attr in chain[1:]:
                value = getattr(value, attr, None)
                if not isinstance(value, types.ModuleType):
                    break
                line = f"import {value.__name__}"
                if value.__name__ in sys.modules and _findable(value.__name__):
                    if line not in self.submodules and line not in self.imports.values():
                        self.submodules.append(line)

    def _add_global(self, name: str, used_by: str) -> None:
        if name in self.imports or name in self.constants or name in self.prelude_names:
            return
        if name not in self.namespace or (name.startswith("__") and name.endswith("__")):
            return  # a builtin, a name the prelude or the code itself binds, or __name__ & co.
        value = self.namespace[name]
        if _notebook_definition(value) is not None:
            self._add_definition(name, value, used_by)
            return
        if name in self.sources:  # a root of that name; the notebook's name means other now
            self._refuse(
                f"{used_by!r} uses the notebook's global {name!r}, which is now a "
                f"{type(value).__name__}, not the definition of that name given to launch"
            )
        line = _import_line(name, value)
        if line is not None:
            self.imports[name] = line
            return
        text = _constant_text(value)
        if text is not None and len(text) > _MAX_CONSTANT_CHARS:
            self._refuse(
                f"it uses the notebook's global {name!r} (in {used_by!r}), a constant whose "
                f"repr has {len(text)} characters, too big to write into the workers' module; "
                f"{_PASS_IT}"
            )
        if text is not None:
            self.constants[name] = f"{name} = {text}"
            return
        kind = type(value).__name__
        kind += " whose repr does not read back" if _is_constant(value) else ""
        self._refuse(
            f"it uses the notebook's global {name!r} (a {kind}, in "
            f"{used_by!r}), which cannot be written into the workers' module: only modules, "
            "functions and classes importable from a module or defined in the notebook, and "
            "plain constants (None, bool, int, float, str, bytes, and tuples, lists and dicts "
            f"of them) are; {_PASS_IT}"
        )

    def _order(self) -> list[str]:
        """Definitions in the notebook's order (first binding), each after the definitions its
        own statement evaluates (bases, defaults, decorators, class-level values)."""
        order = list(self.namespace)
        ranked = sorted(self.sources, key=lambda n: order.index(n) if n in order else len(order))
        done: list[str] = []

        def place(name: str, seen: tuple) -> None:
            if name in done or name in seen:
                return
            for dep in self.deps.get(name, []):
                if dep in self.sources:
                    place(dep, (*seen, name))
            done.append(name)

        for name in ranked:
            place(name, ())
        return done

    def text(self) -> str:
        order = list(self.namespace)

        def rank(name: str) -> int:
            return order.index(name) if name in order else len(order)

        defs = self._order()
        head = [
            f"# Written by helpers.launch for {self.root!r}, defined in the notebook "
            f"({_origin(*self.origins[self.root])}):",
            "# its source and what it uses from the notebook, for the workers to import.",
            "from __future__ import annotations",
            "",
            *([self.prelude.rstrip()] if self.prelude.strip() else []),
            *(self.imports[n] for n in sorted(self.imports, key=rank)),
            *self.submodules,
            *(self.constants[n] for n in sorted(self.constants, key=rank)),
        ]
        text = "\n".join(head) + "\n\n\n"
        self.lines = []
        for name in defs:
            start = text.count("\n") + 2  # the line after the "# name, from ..." comment
            text += self.sources[name] + ("\n\n" if name != defs[-1] else "")
            end = start + self.body_lines[name] - 1
            self.lines.append((start, end, *self.origins[name]))
        return text

    def where(self, line: int) -> str | None:
        """The notebook cell (or script) and line that the written module's `line` came from."""
        for start, end, filename, first in self.lines:
            if start <= line <= end:
                return _origin(filename, first + line - start)
        return None


_SET_DEFAULTS_IMPORT = "from helpers.launch import _set_defaults as _psr_set_defaults"


def _short(value: Any) -> str:
    text = repr(value) if value is not _MISSING else "no value"
    return text if len(text) <= 60 else text[:57] + "..."


def _origin(filename: str, line: int) -> str:
    """Where a notebook definition was typed: the cell (IPython's name for it) or the script."""
    if filename.startswith("<") or "ipykernel" in filename:
        return f"notebook cell {filename}, line {line}"
    if filename == getattr(sys.modules.get("__main__"), "__file__", None):
        return f"{filename}, line {line} (run as __main__)"
    return f"{filename}, line {line}"  # a module's function written out (prelude given)


def _in_the_notebook(text: str, writers: dict[str, _ModuleWriter]) -> str:
    """`text` with each frame of a written module followed by the cell and line it came from."""
    for filename, writer in writers.items():
        # a traceback's frame ('", line 9, in f') or faulthandler's at a timeout ('", line 9 in f')
        frame = re.compile(rf'(File "[^"]*/{re.escape(filename)}", line (\d+),? in [\w<>]+)')

        def name_it(found: re.Match, writer: _ModuleWriter = writer) -> str:
            where = writer.where(int(found.group(2)))
            return found.group(1) + (f" (from {where})" if where else "")

        text = frame.sub(name_it, text)
    return text


def notebook_module(fn: Callable[..., Any], prelude: str = "") -> str:
    """The source of the module `launch` writes for `fn`, a function defined in `__main__` (a
    notebook cell or the script being run); raises ValueError naming what cannot be written.
    `prelude` goes first (lines the function may rely on without writing them, such as imports)."""
    writer = _ModuleWriter(inspect.unwrap(fn).__globals__, prelude)
    writer.add_root(fn)
    return writer.text()


def _notebook_function(filename: str, name: str) -> Any:
    """Worker: the function `name` of the module `launch` wrote (imported once per worker)."""
    stem = Path(filename).stem
    module = sys.modules.get(stem)
    if module is None:
        spec = importlib.util.spec_from_file_location(stem, str(_workdir / filename))
        module = importlib.util.module_from_spec(spec)
        sys.modules[stem] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as err:
            del sys.modules[stem]
            raise ImportError(
                f"importing {filename}, the module written for the notebook's definitions, "
                f"failed (before the function ran): {type(err).__name__}: {err}"
            ) from err
    return getattr(module, name)


class _NotebookPickler(pickle.Pickler):
    """Pickles a notebook function or class (fn, or one inside args: a worker may take the
    reader's version of an algorithm as an argument) as a reference to the one module written
    for this launch's notebook definitions."""

    def __init__(self, file: Any, prelude: str | None, forced: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.prelude, self.forced = prelude, forced
        self.writers: dict[str, _ModuleWriter] = {}  # file name -> what it holds
        self._main: str | None = None  # the file name of the __main__ definitions' module
        self._forced_file: str | None = None

    def _writer_for(self, obj: Any, inner: Any) -> str:
        forced = obj is self.forced
        filename = self._forced_file if forced else self._main
        if filename is None:
            if isinstance(inner, types.FunctionType):
                namespace = inner.__globals__
            else:
                funcs = [f for _, f in _class_functions(inner)]
                namespace = funcs[0].__globals__ if funcs else sys.modules["__main__"].__dict__
            filename = f"notebook_{inner.__name__}.py"
            if filename in self.writers:
                filename = f"notebook_{inner.__name__}_{len(self.writers)}.py"
            self.writers[filename] = _ModuleWriter(
                namespace, (self.prelude or "") if forced else ""
            )
            if forced:
                self._forced_file = filename
            if not forced or _notebook_definition(obj) is not None:
                self._main = filename  # a notebook root with a prelude: its args share it
        return filename

    def reducer_override(self, obj: Any) -> Any:
        if obj is not self.forced:
            if getattr(obj, "__module__", None) != "__main__" or not callable(obj):
                return NotImplemented
            if _notebook_definition(obj) is None:
                return NotImplemented
        inner = _notebook_definition(obj) or inspect.unwrap(obj)
        filename = self._writer_for(obj, inner)
        name = self.writers[filename].add_root(obj)
        return _notebook_function, (filename, name)

    def texts(self) -> dict[str, str]:
        """Each written module's source, compiled here first (a SyntaxError before start)."""
        texts = {f: w.text() for f, w in self.writers.items()}
        for filename, text in texts.items():
            compile(text, filename, "exec")
        return texts


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    backend: str = "auto",
    timeout_s: float = 60.0,
    *,
    prelude: str | None = None,
) -> LaunchResult:
    """Run `fn(rank, world_size, *args)` on `world_size` ranks; return their values in order.

    `fn` is a function defined at the top level of a module, which the workers import, or of a
    notebook cell (or of the script run as `__main__`): then its source, and what it uses from
    the notebook, is written to a module `notebook_<fn>.py` that the workers import (the module
    docstring says what is written, what is refused, and what is evaluated when: constants at
    launch time, defaults as the function has them, class bodies again in each worker). So a
    reader can edit a worker in a cell and rerun it like the notebook's own. A
    `functools.partial` of either works too, and notebook functions, classes and instances of
    them inside `args` are written into that same module (so a module's worker can run the
    reader's version of an algorithm it is given, sharing its classes with `fn`).
    `prelude`: lines written before that module's code (imports the function relies on without
    writing them; a name the prelude binds is never written from the notebook's globals);
    given, `fn` is written out from its source even when it is importable.

    The whole launch, start-up included, must finish within `timeout_s` seconds. Raises
    ValueError before anything starts for what cannot be run (naming it), WorkerError if a rank
    raises or dies (naming it, with its traceback: a notebook function's frames name
    `notebook_<fn>.py`, show its lines and the cell they came from; also when importing that
    module fails, or when a returned value cannot be unpickled here), LaunchTimeout naming the
    ranks that did not finish (with where each was stuck), and leaves no worker process or
    temporary file behind.
    """
    _check_fn(fn)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    chosen = choose_backend(world_size, backend)
    forced = None
    if prelude is not None:  # written out even when importable (and the prelude put first)
        forced = fn.func if isinstance(fn, functools.partial) else fn
    buffer = io.BytesIO()
    pickler = _NotebookPickler(buffer, prelude, forced)
    try:
        pickler.dump((fn, tuple(args)))  # collects the notebook definitions to write out
        texts = pickler.texts()
    except ValueError:
        raise  # what a notebook function uses cannot be written out: the message says what
    except Exception as err:
        raise TypeError(f"launch() cannot send fn/args to the workers: {err}") from err
    payload = buffer.getvalue()
    _log_launch(fn, world_size, backend, chosen)  # only launches that start are logged

    workdir = Path(tempfile.mkdtemp(prefix="launch-"))
    procs: list[subprocess.Popen] = []
    try:
        for filename, text in texts.items():  # the workers import them from here
            (workdir / filename).write_text(text, encoding="utf-8")
        deadline = time.time() + timeout_s
        with open(workdir / "payload.pkl", "wb") as f:
            pickle.dump((world_size, chosen, deadline, os.getpid(), payload), f)
        for rank in range(world_size):
            procs.append(_start(rank, workdir))
        try:
            values = _collect(procs, workdir, deadline)
        except (WorkerError, LaunchTimeout) as err:
            if not pickler.writers:
                raise
            text = _in_the_notebook(str(err), pickler.writers)
            if isinstance(err, WorkerError):
                raise WorkerError(text, err.rank, err.ranks, err.pids) from None
            raise LaunchTimeout(text, err.ranks, err.pids) from None
        # every rank returned: give teardown (barrier + destroy) a moment, then make sure
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline + _TEARDOWN_S - time.time()))
            except subprocess.TimeoutExpired:
                pass
        outputs = [_read(workdir / f"rank{r}.log") for r in range(world_size)]
        return LaunchResult(values, chosen, outputs)
    finally:
        _kill(procs)  # no-op when all exited; otherwise nothing outlives the call
        shutil.rmtree(workdir, ignore_errors=True)  # the written module goes with it


def _collect(procs: list[subprocess.Popen], workdir: Path, deadline: float) -> list[Any]:
    """Wait for every rank's result; raise on the first failure or at the deadline."""
    world_size = len(procs)
    results: dict[int, tuple] = {}
    failed: list[int] = []  # in the order the parent saw them fail
    first_failure_at: float | None = None
    pids = [p.pid for p in procs]
    while True:
        for rank, p in enumerate(procs):
            if rank in results:
                continue
            path = workdir / f"result{rank}.pkl"
            if path.exists():
                results[rank] = _load_result(path, rank)
            elif p.poll() is not None:
                time.sleep(_POLL_S)  # it may have exited right after the rename
                if path.exists():
                    continue
                results[rank] = ("died", _exit_reason(p.returncode))
            else:
                continue
            if results[rank][0] != "ok":
                failed.append(rank)
                first_failure_at = first_failure_at or time.time()
        if len(results) == world_size and not failed:
            return [results[r][1] for r in range(world_size)]
        if failed and (len(results) == world_size or time.time() > first_failure_at + _GRACE_S):
            _kill(procs)
            raise _worker_error(failed, results, workdir, pids)
        if time.time() > deadline:
            time.sleep(0.5)  # the workers' faulthandler dumps their stacks at the deadline
            _kill(procs)
            raise _timeout_error(results, workdir, deadline, pids, world_size)
        time.sleep(_POLL_S)


def _load_result(path: Path, rank: int) -> tuple:
    """A rank's result file; an error entry naming the rank when it cannot be unpickled here."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception as err:  # noqa: BLE001 - reported as that rank's failure
        hint = "return plain data (numbers, lists, dicts, tensors) instead"
        if "notebook_" in str(err):  # an instance of a class defined in the notebook
            hint = (
                "it holds an instance of a class defined in the notebook, which pickles as a "
                "reference to the module written for the workers, which the notebook does not "
                "import; return plain data (its fields: a dict, a tuple, a tensor) instead"
            )
        summary = (
            f"a value the notebook cannot unpickle ({type(err).__name__}: {err}): rank {rank} "
            f"returned normally, but {hint}"
        )
        return ("error", summary, "")


def _worker_error(
    failed: list[int], results: dict[int, tuple], workdir: Path, pids: list[int]
) -> WorkerError:
    # Put the cause first: a rank that lost its peer is a consequence, whoever was seen first.
    def knock_on(rank: int) -> bool:
        kind, *info = results[rank]
        return kind == "error" and any(marker in info[0] for marker in _KNOCK_ON)

    failed = sorted(failed, key=knock_on)  # stable: otherwise in the order they were seen
    first = failed[0]
    parts = []
    for rank in failed:
        kind, *info = results[rank]
        if kind == "error":
            summary, tb = info
            if not tb:  # its return value could not be read back
                parts.append(f"rank {rank} returned {summary}")
                continue
            parts.append(f"rank {rank} raised {summary}\n--- traceback of rank {rank} ---\n{tb}")
        else:
            log = _read(workdir / f"rank{rank}.setup.log") + _read(workdir / f"rank{rank}.log")
            parts.append(
                f"rank {rank} died without a result ({info[0]})\n"
                f"--- output of rank {rank} ---\n{_tail(log)}"
            )
    others = f" (then also ranks {failed[1:]})" if len(failed) > 1 else ""
    head = f"rank {first} failed{others}; all workers were stopped.\n"
    return WorkerError(head + "\n".join(parts), first, failed, pids)


def _timeout_error(
    results: dict[int, tuple], workdir: Path, deadline: float, pids: list[int], world_size: int
) -> LaunchTimeout:
    stuck = [r for r in range(world_size) if r not in results]
    done = [r for r in range(world_size) if r in results]
    parts = [
        f"ranks {stuck} did not finish within the timeout"
        + (f" (ranks {done} did)" if done else "")
        + "; all workers were stopped. Where each unfinished rank was:"
    ]
    for rank in stuck:
        log = _read(workdir / f"rank{rank}.setup.log") + _read(workdir / f"rank{rank}.log")
        marker = log.rfind("Thread 0x")
        parts.append(f"--- rank {rank} ---\n{_tail(log[marker:] if marker >= 0 else log)}")
    return LaunchTimeout("\n".join(parts), stuck, pids)
