"""Judges for notebook 09 (training with torchrun: environment, restarts, checkpoints).

The truths come from the installed torch and the project's script: the names `env://` reads are
parsed from `torch.distributed.rendezvous._env_rendezvous_handler`, the restart arithmetic is
checked against the elastic agent's source, a killed run is replayed with
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
MAX_RESTARTS = 2  # 09.3


def env_names_read() -> set[str]:
    """The environment variables `init_process_group(init_method="env://")` requires."""
    module = importlib.import_module("torch.distributed.rendezvous")  # the package's
    code = source_view(module._env_rendezvous_handler).code  # `rendezvous` is a function
    return set(re.findall(r'_get_env_or_raise\("(\w+)"\)', code))


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


@exercise("09.1", "The environment variables env:// reads")
def env_variables(answer: Any) -> str:
    if isinstance(answer, str) or not isinstance(answer, (set, list, tuple, frozenset)):
        raise Hint(tr("give a set of names, e.g. {{'NAME_A', 'NAME_B'}}"))
    given = {str(a).upper() for a in answer}
    truth = env_names_read()
    for name, why in _SET_BY_TORCHRUN_FOR_THE_SCRIPT.items():
        if name in given and name not in truth:
            raise Hint(tr(why))
    extra = given - truth
    if extra:
        raise Hint(
            tr("{sorted_extra}: not read by `_env_rendezvous_handler`", sorted_extra=sorted(extra))
        )
    missing = truth - given
    if missing & {"MASTER_ADDR", "MASTER_PORT"}:
        raise Hint(
            tr(
                "the ranks meet at a TCPStore: env:// also needs where it listens (look for "
                "every `_get_env_or_raise(...)` in `_env_rendezvous_handler`)"
            )
        )
    if missing:
        raise Hint(
            tr(
                (
                    "{len_missing} name(s) missing: unless rank and world_size are passed to "
                    "`init_process_group`, env:// reads them from the environment too"
                ),
                len_missing=len(missing),
            )
        )
    return tr(
        (
            "{sorted_truth}: `_env_rendezvous_handler` raises if one is unset; torchrun "
            "sets them all (section 5's `worker_env`), plus LOCAL_RANK and "
            "TORCHELASTIC_* for the script."
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


@exercise("09.2", "The attempt of each epoch after a kill")
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


@exercise("09.3", "How many worker groups --max-restarts=2 starts")
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
            "{truth}: {max_restarts} restarts after the first group, counts 0, 1, 2; the "
            "third failure finds `_remaining_restarts == 0`, stops the workers and "
            "torchrun exits non-zero."
        ),
        truth=truth,
        max_restarts=MAX_RESTARTS,
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


@exercise("09.4", "What weights_only refuses")
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
    if given - truth:
        raise Hint(
            tr(
                (
                    "{sorted_given_truth} load fine: tensors, torch.Size and plain containers "
                    "(dict, OrderedDict, set, list) are on the allowlist"
                ),
                sorted_given_truth=sorted(given - truth),
            )
        )
    if truth - given:
        raise Hint(
            tr(
                (
                    "{len_truth_given} more refused: any class outside torch's allowlist needs "
                    "its global, which weights_only does not import"
                ),
                len_truth_given=len(truth - given),
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
