"""Start torchrun from a notebook (or any Python) so that no worker can outlive the caller.

Used by: notebook 09 (training with torchrun) and tests/test_train_ddp.py. Linux is the target
(PR_SET_PDEATHSIG); elsewhere a polling watchdog stands in. Imports no torch (it is cheap).

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
4. A normal stop (`stop()`, KeyboardInterrupt from JupyterLab's Interrupt, the timeout,
   interpreter exit) sends torchrun SIGTERM: its agent stops the workers itself and exits; if it
   has not exited within `grace_s`, SIGKILL follows and step 2 takes the workers down.

The environment torchrun gets: this process's, plus PYTHONPATH (workers import what the
caller imports) and OMP_NUM_THREADS=1 unless set. Nothing else: `--max-restarts` works with
torchrun's defaults because helpers.train_ddp builds each worker group's process group on a
key space of its own in the agent's shared store (notebook 09, section 6).

Rendezvous stays on this machine by default (`loopback=True`): c10d on 127.0.0.1 at a free
port, `--local-addr=127.0.0.1` (the workers' MASTER_ADDR) and gloo/NCCL sockets on `lo`.
`rdzv_backend="static"` is torchrun's default rendezvous instead (`--master-addr`,
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

from helpers.processes import LOOPBACK_IFNAME, child_env, free_port, set_pdeathsig

__all__ = [
    "TorchrunResult",
    "TorchrunProcess",
    "TorchrunTimeout",
    "TorchrunLaunch",
    "torchrun_command",
    "start_torchrun",
    "run_torchrun",
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
    "c10d" passes --rdzv-backend/--rdzv-endpoint/--rdzv-id; "static" (torchrun's default)
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
            self.stop()
            result = self._result()
            raise TorchrunTimeout(
                f"torchrun did not finish within {timeout_s} s; it and its workers were "
                f"stopped. Last lines:\n{result.tail()}",
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
    full_env["PYTHONUNBUFFERED"] = "1"
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
