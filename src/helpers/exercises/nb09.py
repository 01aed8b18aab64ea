"""Judges for notebook 09 (training with torchrun: environment, restarts, checkpoints).

The truths come from the installed torch and the project's script: the names `env://` reads are
found by running `torch.distributed.rendezvous.rendezvous` in an emptied environment, the
restart arithmetic is checked against the elastic agent's source, a killed run is replayed with
`helpers.train_ddp._kill_step`, and `torch.load(weights_only=True)` is tried on each candidate.
No judge starts torchrun.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import io
import os
import pathlib
import re
from typing import Any
from unittest import mock

import numpy as np
import torch

from helpers import train_ddp
from helpers.exercises import N_, Hint, as_int, choice_set, exercise, tr
from helpers.source import source_view

# 09.2: the scenario (epochs, kill spec rank:epoch with 1-based epochs)
EPOCHS, KILL_AT = 4, "0:3"
MAX_RESTARTS = 3  # 09.3


RANK_PASSED = 0  # 09.1: init_process_group("gloo", init_method="env://", rank=0)


def env_names_read(rank: int = RANK_PASSED, world_size: int = -1) -> set[str]:
    """The environment variables `init_process_group(init_method="env://", rank=rank,
    world_size=world_size)` requires (-1: not passed), found by running torch's rendezvous
    in an empty environment, adding each variable its error names (no store is built)."""
    module = importlib.import_module("torch.distributed.rendezvous")  # the package's
    env: dict[str, str] = {}  # `rendezvous` is also a function
    with mock.patch.object(module, "_create_c10d_store", lambda *a, **k: None):
        for _ in range(10):
            with mock.patch.dict(os.environ, env, clear=True):
                try:
                    next(module.rendezvous("env://", rank, world_size))
                    return set(env)
                except ValueError as e:
                    found = re.search(r"environment variable (\w+) expected", str(e))
                    if found is None:
                        raise
                    env[found.group(1)] = "1"
    raise AssertionError(f"env:// kept asking: {sorted(env)}")


_SET_BY_TORCHRUN_FOR_THE_SCRIPT = {
    "LOCAL_RANK": N_(
        "LOCAL_RANK picks this process's GPU (the script reads it); env:// never does"
    ),
    "TORCHELASTIC_RESTART_COUNT": N_(
        "the script reads TORCHELASTIC_RESTART_COUNT to decide whether to resume; env:// does not"
    ),
    "TORCHELASTIC_USE_AGENT_STORE": N_(
        "TORCHELASTIC_USE_AGENT_STORE is optional: the store env:// builds "
        "(`_create_c10d_store`) only looks whether it is the string `True` (torchrun sets it to "
        "`True` or `False`), to decide who hosts the store; "
        "`_get_env_or_raise` never asks for it"
    ),
    "LOCAL_WORLD_SIZE": N_("LOCAL_WORLD_SIZE is set by torchrun, but env:// does not read it"),
    "GROUP_RANK": N_(
        "GROUP_RANK (the node's rank) is set by torchrun, but env:// does not read it"
    ),
}


@exercise(
    "09.1",
    "The environment variables env:// reads when the rank is passed",
    look=N_(
        "the handler `init_process_group` dispatches `env://` to: every `_get_env_or_raise(...)` "
        "in it, and what decides whether it is reached"
    ),
    reveal=N_("`torch.distributed.rendezvous._env_rendezvous_handler`, read with `show_source`"),
)
def env_variables(answer: Any) -> str:
    if isinstance(answer, str) or not isinstance(answer, (set, list, tuple, frozenset)):
        raise Hint(tr("give a set of names, e.g. {{'NAME_A', 'NAME_B'}}"))
    given = {str(a) for a in answer}
    truth = env_names_read()
    if any(a != a.upper() and a.upper() in truth for a in given):
        raise Hint(
            tr(
                "environment variable names are case-sensitive: write each name exactly as "
                "the handler asks for it"
            )
        )
    extra = given - truth
    if len(extra) > 1:  # name none of them: which ones to drop is the question
        raise Hint(
            tr(
                "{count} of your names are not read by the env:// handler here (torchrun sets more "
                "variables than env:// needs): keep only those that `_get_env_or_raise` is "
                "asked for",
                count=len(extra),
            )
        )
    if extra:
        (name,) = extra
        if name == "RANK":
            raise Hint(
                tr(
                    "one of your names is passed to `init_process_group` here as an argument: "
                    "it travels in the URL's query, and the handler looks there before it asks "
                    "the environment"
                )
            )
        if name in _SET_BY_TORCHRUN_FOR_THE_SCRIPT:
            raise Hint(tr(_SET_BY_TORCHRUN_FOR_THE_SCRIPT[name]))
        raise Hint(tr("{sorted_extra}: not read by the env:// handler", sorted_extra=[name]))
    missing = truth - given
    if missing & {"MASTER_ADDR", "MASTER_PORT"}:
        raise Hint(
            tr(
                "the ranks meet at a TCPStore: env:// also needs to know where it listens "
                "(an address and a port)"
            )
        )
    if missing:
        raise Hint(
            tr(
                (
                    "{len_missing} name(s) missing: what `init_process_group` is not given as an "
                    "argument, env:// reads from the environment"
                ),
                len_missing=len(missing),
            )
        )
    return tr(
        (
            "{sorted_truth}: rank=0 travels in the URL's query (env://?rank=0), so the handler "
            "skips RANK and raises if one of these is unset. torchrun sets them all and RANK "
            "(section 5's `worker_env`), plus others (LOCAL_RANK, GROUP_RANK, "
            "LOCAL_WORLD_SIZE, ..., TORCHELASTIC_*); the script reads LOCAL_RANK and "
            "TORCHELASTIC_RESTART_COUNT."
        ),
        sorted_truth=sorted(truth),
    )


def replay_attempts(epochs: int = EPOCHS, kill_at: str = KILL_AT) -> list[int]:
    """The `attempt` of each history record after one kill, replayed with `_kill_step`.

    A group runs epochs from the checkpoint's count on; an epoch in which `_kill_step` fires
    dies before its checkpoint, and torchrun starts the next attempt (one restart allowed).
    """
    rank = int(kill_at.split(":")[0])
    history: list[int] = []
    with mock.patch.dict(os.environ, {train_ddp.KILL_ENV: kill_at}):
        for attempt in range(2):
            info = train_ddp.RankInfo(rank, 2, rank, torch.device("cpu"), "gloo", True, attempt)
            for epoch in range(len(history), epochs):  # resume: epochs done = records saved
                if train_ddp._kill_step(info, epoch + 1, steps=10) is not None:
                    break  # SIGKILL halfway: no record, no checkpoint for this epoch
                history.append(attempt)
            else:
                return history
    raise AssertionError(f"the replay did not finish: {history}")


@exercise(
    "09.2",
    "The attempt of each epoch after a kill",
    look=N_("section 4's killed run and its history, and when `_save` writes last.pt (section 3)"),
    reveal=N_(
        "`replay_attempts(4, '0:3')` in helpers/exercises/nb09.py, which replays the test "
        "hook's rule epoch by epoch"
    ),
)
def attempts_after_kill(answer: Any) -> str:
    if not isinstance(answer, (list, tuple)) or any(as_int(a) is None for a in answer):
        raise Hint(tr("give a list of whole numbers, one `attempt` per history record"))
    truth = replay_attempts()
    answer = [as_int(a) for a in answer]
    if len(answer) != len(truth):
        raise Hint(
            tr(
                (
                    "the history holds one record per finished epoch ({epochs}): the interrupted "
                    "epoch left no record, and its rerun is recorded once"
                ),
                epochs=EPOCHS,
            )
        )
    if max(answer) > max(truth):
        raise Hint(
            tr(
                "one kill costs one restart: the test hook fires only on attempt 0 "
                "(`_kill_step` returns None once `info.attempt != 0`)"
            )
        )
    if answer.count(0) > truth.count(0):
        raise Hint(
            tr(
                "the killed epoch died halfway, before its checkpoint: the restarted group "
                "resumes from the epochs saved before it and runs the killed epoch again"
            )
        )
    if answer.count(0) < truth.count(0):
        raise Hint(tr("the epochs finished before the kill ran on attempt 0 and were checkpointed"))
    if answer != truth:
        raise Hint(tr("the records are in epoch order: attempt 0 first, then the restart"))
    return tr(
        (
            "{truth}: epochs 1-{truth_count_0} ran and were saved on attempt 0; rank "
            "{kill_at_split_0} died in epoch {truth_count_0_1}, and the restarted group "
            "(TORCHELASTIC_RESTART_COUNT=1) resumed from last.pt and ran it again, to "
            "the end."
        ),
        truth=truth,
        truth_count_0=truth.count(0),
        kill_at_split_0=KILL_AT.split(":")[0],
        truth_count_0_1=truth.count(0) + 1,
    )


def restart_arithmetic(max_restarts: int = MAX_RESTARTS) -> tuple[int, int]:
    """(worker groups started, last TORCHELASTIC_RESTART_COUNT) if every group fails.

    Replays `_invoke_run`'s bookkeeping after checking that the installed agent still has it.
    """
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    invoke = source_view(SimpleElasticAgent._invoke_run).code
    start = source_view(LocalElasticAgent._start_workers).code
    for code, line in [
        (invoke, "self._remaining_restarts -= 1"),
        (start, "restart_count = spec.max_restarts - self._remaining_restarts"),
    ]:
        assert line in code, f"the elastic agent changed: expected {line!r}"
    remaining, counts = max_restarts, [max_restarts - max_restarts]  # first group
    while remaining > 0:  # the group failed and restarts are left
        remaining -= 1
        counts.append(max_restarts - remaining)
    return len(counts), counts[-1]


@exercise(
    "09.3",
    "How many worker groups --max-restarts=3 starts",
    look=N_("section 5: the branch of `_invoke_run` that decides, and `_start_workers`"),
    reveal=N_("`restart_arithmetic(3)` in helpers/exercises/nb09.py (the agent's bookkeeping)"),
)
def max_restarts(answer: Any) -> str:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Hint(tr("give a pair: (worker groups started, the last TORCHELASTIC_RESTART_COUNT)"))
    groups, last = answer
    truth = restart_arithmetic()
    if groups == MAX_RESTARTS:
        raise Hint(
            tr(
                "the first group is not a restart: groups started = 1 + the restarts allowed "
                "(`_remaining_restarts` starts at max_restarts and only a failure spends one)"
            )
        )
    if last == MAX_RESTARTS + 1 or last == groups:
        raise Hint(
            tr(
                "the first group sees TORCHELASTIC_RESTART_COUNT=0 (`max_restarts - "
                "_remaining_restarts` in `_start_workers`)"
            )
        )
    if (groups, last) != truth:
        raise Hint(
            tr(
                (
                    "--max-restarts={max_restarts} lets a failed group be replaced "
                    "{max_restarts} times; read `_invoke_run` (section 5)"
                ),
                max_restarts=MAX_RESTARTS,
            )
        )
    return tr(
        (
            "{truth}: {max_restarts} restarts after the first group, counts {counts}; "
            "failure {last} finds `_remaining_restarts == 0`, stops the workers and "
            "torchrun exits non-zero."
        ),
        truth=truth,
        max_restarts=MAX_RESTARTS,
        counts=", ".join(str(i) for i in range(truth[0])),
        last=truth[0],
    )


CANDIDATES: dict[str, Any] = {
    "tensor": torch.zeros(2),
    "dict_of_tensors": {"w": torch.ones(2)},
    "ordered_dict": collections.OrderedDict(w=torch.ones(2)),
    "torch_size": torch.Size([2, 3]),
    "python_set": {1, 2},
    "argparse_namespace": argparse.Namespace(lr=0.1),
    "numpy_array": np.zeros(2),
    "pathlib_path": pathlib.Path("runs"),
}


def refused_by_weights_only() -> set[str]:
    """The CANDIDATES that `torch.load(weights_only=True)` refuses, by trying each."""
    refused = set()
    for name, obj in CANDIDATES.items():
        buf = io.BytesIO()
        torch.save(obj, buf)
        buf.seek(0)
        try:
            torch.load(buf, weights_only=True)
        except Exception:  # UnpicklingError: a global not on the allowlist
            refused.add(name)
    return refused


@exercise(
    "09.4",
    "What weights_only refuses",
    look=N_("section 7, and the weights-only unpickler's allowlist (`torch.serialization`)"),
    reveal=N_(
        "`torch.save(obj, buf)` to an `io.BytesIO`, then `torch.load(buf, weights_only=True)`, "
        "for each candidate"
    ),
)
def weights_only_refuses(answer: Any) -> str:
    given = choice_set(answer, sorted(CANDIDATES), tr("names from CANDIDATES"), "{'tensor'}")
    truth = refused_by_weights_only()
    if "numpy_array" in truth - given:
        raise Hint(
            tr(
                "numpy arrays are refused: that is why the script's `_rng_state` stores "
                "numpy's RNG keys as a torch tensor"
            )
        )
    if given - truth:  # how many, not which: the allowlist is the thing to read
        raise Hint(
            tr(
                (
                    "{count} of your names pass weights_only=True: a global is allowed when it "
                    "is in the unpickler's allowlist (`_get_allowed_globals` in "
                    "`torch/_weights_only_unpickler.py`), which holds some torch types and "
                    "`collections` and `builtins` containers. Which of your classes are in it?"
                ),
                count=len(given - truth),
            )
        )
    if truth - given:
        raise Hint(
            tr(
                "more are refused: any class outside torch's allowlist needs its global, "
                "which weights_only does not import"
            )
        )
    return tr(
        (
            "{sorted_truth}: each needs a global outside the allowlist (a class to "
            "import), so `load_checkpoint` would report them as one line, like section "
            "7's evil.pt."
        ),
        sorted_truth=sorted(truth),
    )


# 09.5: where a (re)started worker group continues from, judged on checkpoint folders built here
def _history(epochs: int) -> list[dict]:
    return [{"epoch": e, "loss": round(2.0 / e, 4), "attempt": 0} for e in range(1, epochs + 1)]


def _write_case(out_dir: pathlib.Path, epochs: int | None, stray_tmp: bool) -> None:
    """`out_dir/last.pt` holding `epochs` epochs (None: no file) and, with `stray_tmp`, the temp
    file a rank-0 killed inside `save_checkpoint` leaves: a truncated torch.save."""
    if epochs is not None:
        train_ddp.save_checkpoint(
            {
                "format": train_ddp.CHECKPOINT_FORMAT,
                "epoch": epochs,
                "model": {"w": torch.full((2,), float(epochs))},
                "optimizer": {},
                "scheduler": {},
                "rng": [],
                "history": _history(epochs),
            },
            out_dir / "last.pt",
        )
    if stray_tmp:
        buf = io.BytesIO()
        torch.save({"epoch": 99, "history": _history(99)}, buf)
        (out_dir / ".last.pt.4242.tmp").write_bytes(buf.getvalue()[:200])  # cut mid-write


#: (label, epochs in last.pt or None, a stray temp file, attempt): the shown case first
RESUME_CASES = [
    (N_("restart 1, last.pt after 2 epochs"), 2, False, 1),
    (N_("a first launch (attempt 0) finding an old last.pt"), 3, False, 0),
    (N_("restart 1 before any epoch finished, a truncated temp file left"), None, True, 1),
    (N_("restart 2, last.pt after 3 epochs and a truncated temp file beside it"), 3, True, 2),
]


def _resume_truth(out_dir: pathlib.Path, attempt: int) -> tuple[int, list[dict]]:
    """What `_resume` returns without --resume: last.pt's (epoch, history) on a restart."""
    path = out_dir / "last.pt"
    if attempt > 0 and path.is_file():
        ckpt = train_ddp.load_checkpoint(path)
        return int(ckpt["epoch"]), list(ckpt["history"])
    return 0, []


def _called(fn: Any) -> set[str]:
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
    }


@exercise(
    "09.5",
    "Where a restarted group continues",
    look=N_("section 3 (what `save_checkpoint` leaves on disk) and section 4 (the restart)"),
    reveal=N_(
        "the candidates of `train_ddp._resume` (last.pt only on a restart), read with "
        "`train_ddp.load_checkpoint(path)`"
    ),
)
def resume_point(answer: Any) -> str:
    import tempfile

    if not callable(answer):
        raise Hint(tr("give the function itself, `my_resume`, not its result"))
    if "_resume" in _called(answer):
        raise Hint(tr("write the decision yourself rather than calling the script's function"))
    for i, (label, epochs, stray, attempt) in enumerate(RESUME_CASES):
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = pathlib.Path(tmp)
            _write_case(out_dir, epochs, stray)
            truth = _resume_truth(out_dir, attempt)
            where = tr("a hidden case ({label}): ", label=tr(label)) if i else ""
            try:
                found = answer(out_dir, attempt)
            except Exception as e:
                raise Hint(
                    where
                    + tr(
                        "your function raised {error}: which files can a killed save leave, and "
                        "which one is always complete?",
                        error=type(e).__name__,
                    )
                ) from None
        if not (isinstance(found, (tuple, list)) and len(found) == 2):
            raise Hint(where + tr("return a pair: (epochs done, history list)"))
        done, history = found
        if as_int(done) != truth[0]:
            if truth[0] == 0 and as_int(done):
                why = tr(
                    "this group must start from epoch 1: is it a restart at all, and is there "
                    "a complete checkpoint?"
                )
            else:
                why = tr("the epochs done come from the checkpoint this group must continue from")
            raise Hint(where + tr("epochs done {found}, not right: {why}", found=done, why=why))
        if list(history) != truth[1]:
            raise Hint(
                where
                + tr(
                    "the epochs done are right but the history is not the checkpoint's own "
                    "list of records"
                )
            )
    return tr(
        "only a restart (attempt > 0) continues, and only from last.pt: the atomic writer "
        "renames a complete file over it, so a temp file beside it is a killed save and is "
        "never read; a first launch starts over unless --resume is given"
    )
