"""Run a function on N ranks inside a real process group, safely, from a notebook.

Used by: 04-08 and 13-17 (every notebook that runs ranks: collectives, all-reduce, DDP, SyncBN,
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
  out instead: `notebook_module(fn)` builds a module `notebook_<fn>.py` in the launch's temporary
  folder, which the workers import by path. It holds, under a comment naming the cell:
  an import for each global the code uses (bytecode LOAD_GLOBAL, through nested code) that is a
  module (`import x as name`) or a function or class importable from a real module (`from mod
  import qualname as name`, when that finds the very same object); `name = <repr>` for plain
  constants (None, bool, int, float, str, bytes, tuples, lists and dicts of them, when the repr
  reads back equal); and the source (`inspect.getsource`, which reads IPython cells through
  linecache; for a class, the cell that defines it, which 3.11's inspect cannot find) of `fn`
  and of every notebook function and class it uses, followed recursively, in
  the notebook's definition order. Builtins are left alone; annotations are never evaluated
  (`from __future__ import annotations`). Each definition keeps its source lines, so a worker's
  traceback shows the notebook's code, and WorkerError adds to each of its frames the cell and
  line it came from.
  A notebook function inside `args` is written out the same way and pickled as a reference to
  its module, so a module's worker can run the reader's version of an algorithm it takes.
- Refused before anything starts, with a ValueError naming the name: a global of any other kind
  (a tensor, an open file, a model, a lambda), since its value cannot be rebuilt from source:
  pass it as an argument, which is pickled; a lambda or a nested function (no source of its own,
  and it may use its enclosing function's variables); a definition bound under another name or
  whose name was since rebound; and a decorated definition unless the decorator only wraps and
  registers nowhere (`torch.no_grad`, `inference_mode`, `functools.cache`, `dataclass`: the list
  `_HARMLESS_DECORATORS`), since re-running any other in the workers might not do what it did.
  Values a notebook function returns should be plain data: an instance of a notebook class
  pickles by reference to the written module, which the parent cannot import.
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
import dis
import faulthandler
import functools
import importlib
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
_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}
_PASS_IT = "pass it to the worker as an argument (launch(fn, n, args=(...))) instead"


def _code_globals(code: types.CodeType) -> list[str]:
    """Global names the code (and the functions, comprehensions and classes in it) uses."""
    names: list[str] = []
    for ins in dis.get_instructions(code):
        if ins.opname in _GLOBAL_OPS and ins.argval not in names:
            names.append(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [n for n in _code_globals(const) if n not in names]
    return names


def _def_time_names(node: ast.AST) -> list[str]:
    """Names a def or class statement evaluates when it runs: decorators, default values, bases,
    class-level statements (not function bodies: their code objects say what they use; not
    annotations: the written module has `from __future__ import annotations`)."""
    found: list[str] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            parts = [*n.args.defaults, *[d for d in n.args.kw_defaults if d is not None]]
            parts += getattr(n, "decorator_list", [])
            for p in parts:
                visit(p)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in found:
            found.append(n.id)
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.arg, ast.arguments)) and not (
                isinstance(n, (ast.AnnAssign, ast.arg)) and child is n.annotation
            ):
                visit(child)

    if isinstance(node, ast.ClassDef):
        for child in [*node.decorator_list, *node.bases, *node.keywords, *node.body]:
            visit(child)
    else:
        visit(node)
    return found


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
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            lines = text.splitlines(keepends=True)[first - 1 : node.end_lineno]
            return "".join(lines), filename, first
    return None


def _class_source(cls: type) -> tuple[str, str, int]:
    """A class's source, its file and first line, found where its methods were compiled (a
    cell: linecache), as Python 3.13 does; 3.11's `inspect.getsource` looks in
    `__main__.__file__`, which a notebook lacks and which, elsewhere, may hold another class of
    that name. A class without methods of its own (a dataclass): the one cell defining it."""
    for value in vars(cls).values():
        func = getattr(value, "__func__", getattr(value, "fget", value))
        code = getattr(func, "__code__", None)
        if code is not None and not code.co_filename.startswith("<string"):
            found = _class_in(code.co_filename, cls.__name__, code.co_firstlineno)
            if found:
                return found
    cells = [f for f in list(linecache.cache) if f.startswith("<") or "ipykernel" in f]
    found = {r[0]: r for r in (_class_in(f, cls.__name__, None) for f in cells) if r}
    if len(found) == 1:
        return next(iter(found.values()))
    if len(found) > 1:
        raise OSError(f"{len(found)} cells define a class {cls.__name__!r}, with different code")
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


def _import_line(name: str, value: Any) -> str | None:
    """`import ...` / `from ... import ...` that binds `name` to `value` in a worker, or None."""
    if isinstance(value, types.ModuleType):
        mod = value.__name__
        if mod == "__main__" or sys.modules.get(mod) is not value:
            return None
        return f"import {mod}" if mod == name else f"import {mod} as {name}"
    mod = getattr(value, "__module__", None)
    if not isinstance(mod, str) or mod == "__main__" or mod.startswith("notebook_"):
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


def _decorator_problem(node: ast.AST, namespace: dict) -> str | None:
    """Why a decorator of a written function or class is refused, or None if it is harmless."""
    for dec in node.decorator_list:
        head = dec.func if isinstance(dec, ast.Call) else dec
        ok = False
        if isinstance(head, (ast.Name, ast.Attribute)):
            try:  # a dotted name, evaluated in the notebook's namespace; nothing is called
                target = eval(compile(ast.Expression(head), "<decorator>", "eval"), namespace)  # noqa: S307
                ok = any(target is _resolve(path) for path in _HARMLESS_DECORATORS)
            except Exception:  # noqa: BLE001 - an unknown decorator is refused
                ok = False
        if not ok:
            return (
                f"its decorator @{ast.unparse(dec)} may do something when it runs (register, "
                "wrap, rewrite) that a worker re-running the source would not reproduce, so "
                "only "
                + ", ".join(f"@{p}" for p in _HARMLESS_DECORATORS)
                + " are written out; apply it inside the function, or put the function in a "
                "module"
            )
    return None


def _resolve(path: str) -> Any:
    mod, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(mod), attr)


def _notebook_definition(value: Any) -> Any:
    """`value` unwrapped (a decorated function) if it is a function or class of `__main__`."""
    inner = inspect.unwrap(value) if callable(value) and not isinstance(value, type) else value
    if isinstance(inner, (types.FunctionType, type)) and inner.__module__ == "__main__":
        return inner
    return None


class _ModuleWriter:
    """Collects what a `__main__` function needs, then writes it as one module's source."""

    def __init__(self, fn: Callable[..., Any], prelude: str) -> None:
        self.root = fn.__name__
        self.namespace = inspect.unwrap(fn).__globals__
        self.prelude = prelude
        self.imports: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.sources: dict[str, str] = {}  # name -> source, for functions and classes
        self.origins: dict[str, tuple[str, int]] = {}  # name -> (file or cell, first line)
        self.lines: list[tuple[int, int, str, int]] = []  # set by text(): see where()
        self._add_definition(fn.__name__, fn, used_by=None)

    def _refuse(self, message: str) -> NoReturn:
        raise ValueError(f"launch() cannot run {self.root!r} from the notebook: {message}")

    def _add_definition(self, name: str, obj: Any, used_by: str | None) -> None:
        inner = _notebook_definition(obj) or inspect.unwrap(obj)  # the root may be importable
        kind = "class" if isinstance(inner, type) else "function"
        where = f"{kind} {name!r}" + (f" (used by {used_by!r})" if used_by else "")
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
        if problem:
            self._refuse(f"{where}: {problem}")
        self.sources[name] = ""  # placeholder: a recursive use is not followed twice
        needs = _def_time_names(node)
        codes = [inner.__code__] if kind == "function" else []
        for value in vars(inner).values() if kind == "class" else ():
            func = getattr(value, "__func__", getattr(value, "fget", value))
            if isinstance(func, types.FunctionType):
                codes.append(func.__code__)
        for code in codes:
            needs += [n for n in _code_globals(code) if n not in needs]
        for needed in needs:
            self._add_global(needed, used_by=name)
        self.sources[name] = f"# {name}, from {_origin(filename, first)}\n{source.rstrip()}\n"
        self.origins[name] = (filename, first)

    def _add_global(self, name: str, used_by: str) -> None:
        if name in self.sources or name in self.imports or name in self.constants:
            return
        if name not in self.namespace or (name.startswith("__") and name.endswith("__")):
            return  # a builtin, a name the prelude or the code itself binds, or __name__ & co.
        value = self.namespace[name]
        if _notebook_definition(value) is not None:
            self._add_definition(name, value, used_by)
            return
        line = _import_line(name, value)
        if line is not None:
            self.imports[name] = line
            return
        if _is_constant(value):
            text = repr(value)
            try:
                same = eval(text, {}) == value  # noqa: S307 - the repr of plain data
            except Exception:  # noqa: BLE001 - nan, inf: their repr does not read back
                same = False
            if same:
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

    def text(self) -> str:
        order = list(self.namespace)  # the notebook's definition order (first binding)

        def rank(name: str) -> int:
            return order.index(name) if name in order else len(order)

        defs = sorted(self.sources, key=rank)
        head = [
            f"# Written by helpers.launch for {self.root!r}, defined in the notebook "
            f"({_origin(*self.origins[self.root])}):",
            "# its source and what it uses from the notebook, for the workers to import.",
            "from __future__ import annotations",
            "",
            *([self.prelude.rstrip()] if self.prelude.strip() else []),
            *(self.imports[n] for n in sorted(self.imports, key=rank)),
            *(self.constants[n] for n in sorted(self.constants, key=rank)),
        ]
        text = "\n".join(head) + "\n\n\n"
        self.lines = []
        for name in defs:
            start = text.count("\n") + 2  # the line after the "# name, from ..." comment
            text += self.sources[name] + ("\n\n" if name != defs[-1] else "")
            end = start + self.sources[name].count("\n") - 2
            self.lines.append((start, end, *self.origins[name]))
        return text

    def where(self, line: int) -> str | None:
        """The notebook cell (or script) and line that the written module's `line` came from."""
        for start, end, filename, first in self.lines:
            if start <= line <= end:
                return _origin(filename, first + line - start)
        return None


def _origin(filename: str, line: int) -> str:
    """Where a notebook definition was typed: the cell (IPython's name for it) or the script."""
    if filename.startswith("<") or "ipykernel" in filename:
        return f"notebook cell {filename}, line {line}"
    return f"{filename}, line {line} (run as __main__)"


def _in_the_notebook(err: WorkerError, writers: dict[str, _ModuleWriter]) -> WorkerError:
    """`err` with each frame of a written module followed by the cell and line it came from."""
    text = str(err)
    for filename, writer in writers.items():
        frame = re.compile(rf'(File "[^"]*/{re.escape(filename)}", line (\d+), in \w+)')

        def name_it(found: re.Match, writer: _ModuleWriter = writer) -> str:
            where = writer.where(int(found.group(2)))
            return found.group(1) + (f" (from {where})" if where else "")

        text = frame.sub(name_it, text)
    return WorkerError(text, err.rank, err.ranks, err.pids)


def notebook_module(fn: Callable[..., Any], prelude: str = "") -> str:
    """The source of the module `launch` writes for `fn`, a function defined in `__main__` (a
    notebook cell or the script being run); raises ValueError naming what cannot be written.
    `prelude` goes first (lines the function may rely on without writing them, such as imports)."""
    return _ModuleWriter(fn, prelude).text()


def _notebook_function(filename: str, name: str) -> Any:
    """Worker: the function `name` of the module `launch` wrote (imported once per worker)."""
    stem = Path(filename).stem
    module = sys.modules.get(stem)
    if module is None:
        spec = importlib.util.spec_from_file_location(stem, str(_workdir / filename))
        module = importlib.util.module_from_spec(spec)
        sys.modules[stem] = module
        spec.loader.exec_module(module)
    return getattr(module, name)


class _NotebookPickler(pickle.Pickler):
    """Pickles a notebook function (fn, or one inside args: a worker may take the reader's
    version of an algorithm as an argument) as a reference to the module written for it."""

    def __init__(self, file: Any, prelude: str | None, forced: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.prelude, self.forced = prelude, forced
        self.writers: dict[str, _ModuleWriter] = {}  # file name -> what it holds
        self.texts: dict[str, str] = {}

    def reducer_override(self, obj: Any) -> Any:
        is_notebook = isinstance(obj, types.FunctionType) and obj.__module__ == "__main__"
        if not is_notebook and obj is not self.forced:
            return NotImplemented
        filename = f"notebook_{obj.__name__}.py"
        if filename not in self.writers:
            prelude = self.prelude if obj is self.forced else None
            self.writers[filename] = writer = _ModuleWriter(obj, prelude or "")
            self.texts[filename] = writer.text()
        return _notebook_function, (filename, obj.__name__)


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
    docstring says what is written and what is refused). So a reader can edit a worker in a
    cell and rerun it like the notebook's own. A `functools.partial` of either works too, and
    a notebook function inside `args` is written out the same way (so a module's worker can run
    the reader's version of an algorithm it is given).
    `prelude`: lines written before that module's code (imports the function relies on without
    writing them); given, `fn` is written out from its source even when it is importable.

    The whole launch, start-up included, must finish within `timeout_s` seconds. Raises
    ValueError before anything starts for what cannot be run (naming it), WorkerError if a rank
    raises or dies (naming it, with its traceback: a notebook function's frames name
    `notebook_<fn>.py` and show its lines), LaunchTimeout naming the ranks that did not finish
    (with where each was stuck), and leaves no worker process or temporary file behind.
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
    _log_launch(fn, world_size, backend, chosen)
    buffer = io.BytesIO()
    pickler = _NotebookPickler(buffer, prelude, forced)
    try:
        pickler.dump((fn, tuple(args)))  # writes the notebook functions' modules' text
    except ValueError:
        raise  # what a notebook function uses cannot be written out: the message says what
    except Exception as err:
        raise TypeError(f"launch() cannot send fn/args to the workers: {err}") from err
    payload = buffer.getvalue()

    workdir = Path(tempfile.mkdtemp(prefix="launch-"))
    procs: list[subprocess.Popen] = []
    try:
        for filename, text in pickler.texts.items():  # the workers import them from here
            (workdir / filename).write_text(text, encoding="utf-8")
        deadline = time.time() + timeout_s
        with open(workdir / "payload.pkl", "wb") as f:
            pickle.dump((world_size, chosen, deadline, os.getpid(), payload), f)
        for rank in range(world_size):
            procs.append(_start(rank, workdir))
        try:
            values = _collect(procs, workdir, deadline)
        except WorkerError as err:
            if not pickler.writers:
                raise
            raise _in_the_notebook(err, pickler.writers) from None
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
                with open(path, "rb") as f:
                    results[rank] = pickle.load(f)
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
