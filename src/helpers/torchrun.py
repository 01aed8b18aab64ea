"""Start torchrun from a notebook (or any Python) so that no worker can outlive the caller.

Used by: notebook 09 (training with torchrun), notebook 04 (`agent_store_rule`), notebook 19
(`run_torchrun`) and tests/test_train_ddp.py. Linux is the target (PR_SET_PDEATHSIG); elsewhere
a polling watchdog stands in. Imports no torch (it is cheap).

    result = run_torchrun(["-m", "helpers.train_ddp", "--epochs", "2"], nproc_per_node=2)
    result.returncode, result.log        # exit code of torchrun, its whole output (both ranks)

The problem: torchrun's agent starts every worker with `start_new_session=True`, so a worker is
in no process group of the caller's. Kill torchrun, or the Jupyter kernel that started it, with
SIGKILL and the workers live on (orphans, still blocked in a collective). Measured on torch
2.13 (tests/test_train_ddp.py): both ranks still run after their torchrun was SIGKILLed, and
none does when torchrun was started here. PR_SET_PDEATHSIG fires when the parent *thread*
exits: call start_torchrun from a thread that outlives the run (a notebook's main thread
does). What this module does:

1. torchrun runs in a session of its own (a kill of its group cannot hit the caller), started
   through a tiny exec wrapper (`python -m helpers.torchrun --exec-with-pdeathsig`) that asks
   Linux for SIGKILL when the caller dies (PR_SET_PDEATHSIG survives exec), then execs torchrun.
2. torchrun's workers are started through the same wrapper (torchrun `--no-python` + wrapper +
   the real command), so each worker gets SIGKILL when torchrun dies: the chain
   caller -> torchrun -> workers is tied at every link, whatever killed the link above.
   The wrapper checks the parent's pid after prctl (the parent may have died in between).
3. Without prctl (macOS), the wrapper does not exec: it runs the command as a child and
   polls its parent every 0.2 s; when the parent is gone it kills the child's process group.
4. `stop()` (JupyterLab's Interrupt, interpreter exit) sends torchrun SIGTERM: its agent stops
   the workers and exits, or SIGKILL follows after `grace_s`. A timeout SIGKILLs the whole tree
   once each worker and the agent printed its Python stack into the error (_stop_with_stacks).

The environment torchrun gets: this process's, plus PYTHONPATH (workers import what the
caller imports), OMP_NUM_THREADS=1 unless set, PYTHONUNBUFFERED=1, PYTHONFAULTHANDLER=1 (the
timeout's stacks), with `loopback=True` GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME set to the
loopback interface unless set, and the wrapper's expected parent pid. Nothing that changes
torchrun's store or restart behaviour: `--max-restarts` works with torchrun's defaults because
helpers.train_ddp builds each worker group's process group on a key space of its own in the
agent's store (09, section 6).

Addresses stay on this machine by default (`loopback=True`): c10d on 127.0.0.1 at a free
port, `--local-addr=127.0.0.1` (the workers' MASTER_ADDR) and gloo/NCCL sockets on `lo` (the
TCPStores themselves listen on every interface, notebook 04).
`rdzv_backend="static"` is the torchrun parser's default rendezvous instead (`--master-addr`,
`--master-port`). Pass `loopback=False` and a real `rdzv_endpoint` for machines that talk over
the network. The launch options are one dataclass, `TorchrunLaunch`; `torchrun_command`,
`start_torchrun` and `run_torchrun` take its fields as keyword arguments.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helpers.processes import LOOPBACK_IFNAME, child_env, free_port, set_pdeathsig, wait_gone

__all__ = [
    "TorchrunResult",
    "TorchrunProcess",
    "TorchrunTimeout",
    "TorchrunLaunch",
    "torchrun_command",
    "start_torchrun",
    "run_torchrun",
    "agent_store_rule",
]

_PARENT_PID_ENV = "HELPERS_TORCHRUN_PARENT_PID"  # the pid the next wrapper must have as parent
_WRAPPER = ["-m", "helpers.torchrun", "--exec-with-pdeathsig"]
_LIVE: weakref.WeakSet[TorchrunProcess] = weakref.WeakSet()


@dataclass
class TorchrunResult:
    """What a finished torchrun left: its exit code, its whole output and the command."""

    returncode: int
    log: str
    command: list[str] = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def lines(self, *prefixes: str) -> list[str]:
        """The log lines that start with one of `prefixes` (all lines without prefixes)."""
        return [line for line in self.log.splitlines() if line.startswith(prefixes or "")]

    def tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the log (what to show when a run failed)."""
        return "\n".join(self.log.splitlines()[-lines:])


class TorchrunTimeout(TimeoutError):
    """torchrun did not finish in time; it and its workers were stopped. `.result` has the log."""

    def __init__(self, message: str, result: TorchrunResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class TorchrunLaunch:
    """torchrun's launch options (one node's view); `command()` builds the full command line.

    Without `rdzv_endpoint`, the rendezvous is on 127.0.0.1 at a free port. `rdzv_backend`
    "c10d" passes --rdzv-backend/--rdzv-endpoint/--rdzv-id; "static" (the torchrun parser's default)
    passes --master-addr/--master-port taken from the endpoint.
    """

    nproc_per_node: int = 2
    nnodes: int | str = 1
    node_rank: int | None = None
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str | None = None
    rdzv_id: str = "helpers"
    max_restarts: int = 0
    launcher_args: Sequence[str] = ()
    loopback: bool = True
    python: str = sys.executable

    def command(self, script_args: Sequence[str]) -> list[str]:
        """wrapper -> torchrun -> wrapper -> python `script_args` (what follows `python`)."""
        if self.rdzv_backend not in ("c10d", "static"):
            raise ValueError(
                f"rdzv_backend: expected 'c10d' or 'static', got {self.rdzv_backend!r}"
            )
        endpoint = self.rdzv_endpoint or f"127.0.0.1:{free_port()}"
        launcher = [f"--nnodes={self.nnodes}", f"--nproc-per-node={self.nproc_per_node}"]
        if self.rdzv_backend == "c10d":
            launcher += [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}",
                f"--rdzv-id={self.rdzv_id}",
            ]
        else:
            host, port = endpoint.rsplit(":", 1)
            launcher += [f"--master-addr={host}", f"--master-port={port}"]
        launcher.append(f"--max-restarts={self.max_restarts}")
        if self.node_rank is not None:
            launcher.append(f"--node-rank={self.node_rank}")
        if self.loopback:
            launcher.append("--local-addr=127.0.0.1")
        launcher += list(self.launcher_args)
        py = self.python
        worker = [py, *_WRAPPER, "--", py, "-u", *script_args]
        return [py, *_WRAPPER, "--", py, "-m", "torch.distributed.run", *launcher,
                "--no-python", *worker]  # fmt: skip


def torchrun_command(script_args: Sequence[str], **launch) -> list[str]:
    """The full command line for `script_args`; keyword arguments: TorchrunLaunch's fields.

    `script_args` is what would follow `python` (`["-m", "pkg.mod", "--flag"]` or a script
    path and its arguments).
    """
    return TorchrunLaunch(**launch).command(script_args)


class TorchrunProcess:
    """A running torchrun. `wait()` gives a TorchrunResult; `stop()` ends it and its workers."""

    def __init__(
        self,
        command: list[str],
        log_path: Path,
        env: Mapping[str, str],
        cwd: str | None,
        own_log: bool = False,
    ) -> None:
        self.command = command
        self.log_path = log_path
        self._own_log = own_log  # a temporary log: removed once wait() has read it
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,  # its own session: our kill reaches its whole group
            )
        self.pid = self.popen.pid
        _LIVE.add(self)

    def poll(self) -> int | None:
        """torchrun's exit code, or None while it runs."""
        return self.popen.poll()

    def log(self) -> str:
        """Everything torchrun and its workers printed so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait(self, timeout_s: float | None = None) -> TorchrunResult:
        """Wait for torchrun to exit; on timeout or KeyboardInterrupt stop it (and re-raise)."""
        try:
            code = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            report = _stop_with_stacks(self)  # the log's tail, every process's stack; all killed
            result = self._result()
            raise TorchrunTimeout(
                f"torchrun did not finish within {timeout_s} s; it and its workers were "
                f"stopped. Last lines:\n{report}",
                result,
            ) from None
        except BaseException:  # KeyboardInterrupt (JupyterLab's Interrupt) and the like
            self.stop()
            self._result()
            raise
        _LIVE.discard(self)
        return self._result(code)

    def _result(self, code: int | None = None) -> TorchrunResult:
        code = self.popen.returncode if code is None else code
        result = TorchrunResult(code, self.log(), self.command)
        if self._own_log:
            self.log_path.unlink(missing_ok=True)
        return result

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM torchrun (its agent stops the workers), SIGKILL after `grace_s`; exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                # workers die with torchrun (PR_SET_PDEATHSIG set by the wrapper)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait()
        _LIVE.discard(self)
        return self.popen.returncode


def start_torchrun(
    script_args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    log_path: str | Path | None = None,
    cwd: str | Path | None = None,
    **launch,
) -> TorchrunProcess:
    """Start torchrun in the background; returns a TorchrunProcess.

    `launch`: TorchrunLaunch's fields (nproc_per_node, nnodes, node_rank, rdzv_backend,
    rdzv_endpoint, rdzv_id, max_restarts, launcher_args, loopback). `env` adds to (and
    overrides) this process's environment. The log goes to `log_path` (default: a temporary
    file, removed once `wait()` has read it), stdout and stderr of torchrun and every worker.
    """
    options = TorchrunLaunch(**launch)
    command = options.command(script_args)
    # the workers import helpers (and the caller's modules) by name: give them our import path
    full_env = child_env()
    full_env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets anyway, without its banner
    full_env.update(PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")  # faulthandler: see wait()
    if options.loopback:
        full_env.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK_IFNAME)
        full_env.setdefault("NCCL_SOCKET_IFNAME", LOOPBACK_IFNAME)
    full_env[_PARENT_PID_ENV] = str(os.getpid())  # the first wrapper's expected parent
    full_env.update(env or {})
    own_log = log_path is None
    if own_log:
        fd, name = tempfile.mkstemp(prefix="torchrun-", suffix=".log")
        os.close(fd)
        log_path = name
    cwd = str(cwd) if cwd else None
    return TorchrunProcess(command, Path(log_path), full_env, cwd, own_log=own_log)


def run_torchrun(
    script_args: Sequence[str], *, timeout_s: float | None = 600.0, **kwargs
) -> TorchrunResult:
    """Run torchrun to the end (keyword arguments as start_torchrun); return code and log.

    Raises TorchrunTimeout after `timeout_s`; KeyboardInterrupt stops every worker first.
    """
    proc = start_torchrun(script_args, **kwargs)
    return proc.wait(timeout_s)


@atexit.register
def _stop_all() -> None:  # the kernel shuts down normally: stop what is still running
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            proc.stop(grace_s=5.0)


# ----------------------------------------------------------------------------------------------
# the exec wrapper: `python -m helpers.torchrun --exec-with-pdeathsig -- CMD...`
# ----------------------------------------------------------------------------------------------


def _exec_with_pdeathsig(cmd: list[str]) -> int:
    """Die with the parent, then become `cmd` (exec keeps the pid and the death signal)."""
    # start_torchrun names the caller's pid; each wrapper hands its own pid down to the next
    # level (exec keeps it: torchrun's workers see torchrun's pid as their parent's).
    expected = int(os.environ.pop(_PARENT_PID_ENV, "0")) or os.getppid()
    if set_pdeathsig(signal.SIGKILL):
        if os.getppid() != expected:  # the parent died before prctl took effect
            return 1
        os.environ[_PARENT_PID_ENV] = str(os.getpid())
        os.execvp(cmd[0], cmd)  # never returns
    # no prctl: the next wrapper's parent will be our child, which it finds with getppid()
    return _watchdog(cmd, expected)


def _watchdog(cmd: list[str], parent: int) -> int:
    """Fallback without prctl: run `cmd` as a child, kill its group when our parent is gone."""
    if os.getppid() != parent:
        return 1
    child = subprocess.Popen(cmd, start_new_session=True)
    try:
        while child.poll() is None:
            if os.getppid() != parent:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return 1
            time.sleep(0.2)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        raise
    return child.returncode


# ----------------------------------------------------------------------------------------------
# a timeout: every worker's Python stack into the error, then SIGKILL to the whole tree
# ----------------------------------------------------------------------------------------------

_DUMP_WAIT_S = 10.0  # per process: time to write its stacks and exit (a few ms when not loaded)


def _process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, process group)} of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            except OSError:  # gone meanwhile
                continue
            table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def _descendants(root: int, table: Mapping[int, tuple[int, int]]) -> list[int]:
    """Every descendant of `root` in `table`, parents before their children."""
    found, todo = [], [root]
    while todo:
        kids = sorted(pid for pid, (ppid, _) in table.items() if ppid == todo[0])
        found += kids
        todo = todo[1:] + kids
    return found


def _rank_label(pid: int) -> tuple[int, str]:
    """(sort key, label) of a worker, from the RANK torchrun put in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        env = {}
    rank, local = env.get(b"RANK", b"?").decode(), env.get(b"LOCAL_RANK", b"?").decode()
    key = int(rank) if rank.isdigit() else 1 << 30
    return key, f"rank {rank} (local rank {local}, pid {pid})"


def _dump_stack(pid: int, log_path: Path) -> str:
    """Have one stopped process print its Python stacks into the log, and return them.

    PYTHONFAULTHANDLER=1 (start_torchrun sets it) makes every Python process register
    faulthandler for SIGABRT at start-up: the handler, plain C run in the signal, writes
    every thread's Python stack to stderr (the log) even while the process waits inside a C++
    collective, then lets the abort end the process. The others stay stopped meanwhile (SIGSTOP),
    so the log's new bytes are this process's alone; no core file is written (RLIMIT_CORE 0).
    """
    with contextlib.suppress(OSError, ValueError, ImportError):
        import resource

        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    start = log_path.stat().st_size if log_path.exists() else 0
    for sig in (signal.SIGABRT, signal.SIGCONT):  # SIGABRT stays pending until SIGCONT
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    wait_gone([pid], _DUMP_WAIT_S)  # exited (a zombie of its stopped parent counts as gone)
    with contextlib.suppress(OSError), open(log_path, "rb") as log:
        log.seek(start)
        text = log.read().decode("utf-8", errors="replace")
        noise = ("Extension modules:", "Fatal Python error: Aborted")  # the abort's, not news
        lines = [ln for ln in text.splitlines() if not ln.startswith(noise)]
        return "\n".join(lines).strip()
    return ""


def _stop_with_stacks(proc: TorchrunProcess) -> str:
    """The timeout: the log's last lines, then each worker's and the agent's Python stacks,
    taken one process at a time; then SIGKILL to every process of the tree (each process group
    and each pid: workers sit in sessions of their own, their children in the workers' groups),
    waited for. Returns that report (without /proc it just calls `stop()`)."""
    tail = "\n".join(proc.log().splitlines()[-30:])
    if proc.poll() is not None or not os.path.isdir("/proc"):
        proc.stop()
        return tail
    agent = proc.pid  # the wrapper exec'd torchrun: same pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(agent, signal.SIGSTOP)  # no restart, no reaction while its workers are dumped
    table = _process_table()
    labels = {pid: _rank_label(pid) for pid, (ppid, _) in table.items() if ppid == agent}
    workers = sorted(labels, key=labels.__getitem__)  # in rank order
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    table = _process_table()  # now nothing of the tree starts processes any more
    tree = [agent, *_descendants(agent, table)]
    parts = [tail, "", f"Python stacks at the timeout ({len(workers)} worker(s), then the agent):"]
    for pid in workers:
        stack = _dump_stack(pid, proc.log_path) or "(nothing printed: no faulthandler there?)"
        parts.append(f"--- {labels[pid][1]} ---\n{stack}")
    stack = _dump_stack(agent, proc.log_path) or "(nothing printed)"
    parts.append(f"--- torchrun's agent (pid {agent}) ---\n{stack}")
    groups = {table[pid][1] for pid in tree if pid in table} | {agent}
    for group in sorted(groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.popen.wait()
    _LIVE.discard(proc)
    left = wait_gone(tree, _DUMP_WAIT_S)
    if left:  # not expected: SIGKILL cannot be caught; say so rather than hide it
        parts.append(f"still running after SIGKILL: pids {left}")
    return "\n".join(parts)


def _main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--exec-with-pdeathsig" and argv[1] == "--":
        return _exec_with_pdeathsig(argv[2:])
    print(
        "usage: python -m helpers.torchrun --exec-with-pdeathsig -- CMD [ARGS...]\n"
        "(internal: runs CMD so that it dies with this process's parent; "
        "use run_torchrun()/start_torchrun() from Python)\n"
        f"example command: {shlex.join(torchrun_command(['-m', 'helpers.train_ddp']))}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


# -- a probe of torchrun's agent store, which the training script relies on (notebooks 04, 09) --


def agent_store_rule(timeout_s: float = 0.5) -> dict[str, str]:
    """What `_create_c10d_store` builds for rank 0 when TORCHELASTIC_USE_AGENT_STORE=True.

    Probed live in a child process (the failed client connections log C++ errors there), with
    no store running: rank 0 asks for a store at torchrun's MASTER_ADDR:MASTER_PORT ("agent
    address", what env:// passes) and at another port ("other address", a tcp:// URL
    elsewhere). "client": it only connected as a client, and found nobody (no agent runs
    here); "hosts": rank 0 started the server itself. torch 2.13 decides on the flag alone
    (client at both); 2.14.1 and 2.15.0 also require the address to be the agent's own
    (`_agent_store_serves`), so at any other address rank 0 hosts.
    """
    import json
    import subprocess

    from helpers.processes import child_env

    code = (
        f"import json, helpers.torchrun as t; print(json.dumps(t._agent_store_probe({timeout_s})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"agent_store_rule: the probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _agent_store_probe(timeout_s: float) -> dict[str, str]:
    """`agent_store_rule`'s child: call `_create_c10d_store` as rank 0 at both addresses."""
    import importlib
    from datetime import timedelta

    import torch.distributed as dist

    from helpers.processes import free_port

    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module, not the function
    agent_port, other_port = free_port(), free_port()
    os.environ.update({"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(agent_port)})  # fmt: skip
    found = {}
    for label, port in (("agent address", agent_port), ("other address", other_port)):
        try:
            store = rdzv._create_c10d_store("127.0.0.1", port, 0, 1, timedelta(seconds=timeout_s))
        except (RuntimeError, dist.DistError):  # a client that found no server
            found[label] = "client"
        else:
            store.set("probe", "1")  # it answers with nobody else running: rank 0 hosts it
            found[label] = "hosts"
    return found
