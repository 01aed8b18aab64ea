"""Worked solutions to notebook 09's exercises (training with torchrun)."""

# 09.1 The environment variables `init_process_group("gloo", init_method="env://", rank=0)`
# requires. `rendezvous` appends rank=0 to the URL's query (env://?rank=0);
# show_source(torch.distributed.rendezvous._env_rendezvous_handler) takes the rank from the query
# and so never calls `_get_env_or_raise("RANK")`; world_size is not in the query, so it reads
# WORLD_SIZE, then MASTER_ADDR and MASTER_PORT: where the store listens (rank 0's without
# torchrun, the agent's under torchrun, 09 section 6). torchrun sets more (section 5's
# `worker_env`): LOCAL_RANK and TORCHELASTIC_RESTART_COUNT are for the script (device choice,
# resume), not for env://.
ENV_NAMES = {"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

# 09.2 --epochs 4, TRAIN_DDP_KILL_AT=0:3, --max-restarts=1: the `attempt` of each record.
# Attempt 0 runs epochs 1 and 2 and saves last.pt after each (2 records, attempt 0). In epoch 3
# rank 0 SIGKILLs itself halfway (`_kill_step` fires for attempt 0 only): no record, no
# checkpoint. torchrun restarts the group with TORCHELASTIC_RESTART_COUNT=1; `_resume` loads
# last.pt, which holds 2 epochs, so the loop starts at epoch 3 and runs 3 and 4 (attempt 1).
ATTEMPTS = [0, 0, 1, 1]

# 09.3 --max-restarts=3 and a worker that dies in every group.
# `_remaining_restarts` starts at 3. Groups with counts 0, 1, 2 fail with restarts left (3, 2, 1
# > 0): spend one each time. The fourth group (count 3 - 0 = 3) fails with 0 left: stop,
# torchrun exits non-zero. Four groups; the last saw TORCHELASTIC_RESTART_COUNT=3.
RESTARTS = (4, 3)

# 09.4 Which CANDIDATES does torch.load(weights_only=True) refuse?
# The weights-only unpickler builds tensors, torch types on its allowlist (torch.Size) and
# plain containers (dict, OrderedDict, list, set); any other global is refused. An
# argparse.Namespace, a numpy array and a pathlib.Path each need their class: refused.
# (Try it: torch.save(obj, buf); torch.load(buf, weights_only=True) raises UnpicklingError.)
REFUSED = {"argparse_namespace", "numpy_array", "pathlib_path"}

SOLUTIONS = {"09.1": ENV_NAMES, "09.2": ATTEMPTS, "09.3": RESTARTS, "09.4": REFUSED}

WRONG = {
    "09.1": [
        ({"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}, "URL's query"),  # section 1's 4
        ({"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}, "LOCAL_RANK"),
        ({"WORLD_SIZE"}, "TCPStore"),
        ({"MASTER_ADDR", "MASTER_PORT"}, "missing"),
        ("WORLD_SIZE", "set of names"),
        (
            {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"},
            "2 of your names",
        ),  # more than one extra: none is named
        ({"world_size", "master_addr", "master_port"}, "case-sensitive"),
    ],
    "09.2": [
        ([0, 0, 0, 1], "before its checkpoint"),
        ([0, 0, 1, 2], "one restart"),
        ([0, 0, 0, 1, 1], "one record per finished epoch"),
        ([0, 1, 1, 1], "attempt 0"),
    ],
    "09.4": [
        ({"argparse_namespace", "pathlib_path"}, "_rng_state"),
        (
            {"argparse_namespace", "numpy_array", "pathlib_path", "python_set"},
            "1 of your names pass",
        ),
        (
            {"tensor", "dict_of_tensors", "ordered_dict", "torch_size", "python_set"}
            | {"argparse_namespace", "numpy_array", "pathlib_path"},
            "5 of your names pass",
        ),  # all eight: the hint does not say which
        ({"numpy_array"}, "more are refused"),
        ({"pickle"}, "not among the candidates"),
    ],
}

WRONG["09.3"] = [((3, 3), "first group is not a restart"), ((4, 4), "RESTART_COUNT=0")]


# 09.5 Where a restarted group continues (the script's `_resume` without --resume).
# A restart (attempt > 0) continues from out_dir/last.pt if it exists; a first launch starts
# over. save_checkpoint writes a temp file and renames it over last.pt, so last.pt is always a
# complete checkpoint; a `.last.pt.<pid>.tmp` beside it is a save that was killed: never read.
def my_resume(out_dir, attempt):
    """Return (epochs done, history) this worker group continues from: out_dir / "last.pt"
    on a restart (attempt > 0) if it exists, else (0, [])."""
    import torch

    path = out_dir / "last.pt"
    if attempt == 0 or not path.is_file():
        return 0, []
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    return int(ckpt["epoch"]), list(ckpt["history"])


def _by_heart(out_dir, attempt):
    import torch

    ckpt = torch.load(out_dir / "last.pt", weights_only=True)
    return 2, ckpt["history"]  # the shown case's 2 epochs, typed in


def _ignores_attempt(out_dir, attempt):
    import torch

    path = out_dir / "last.pt"
    if not path.is_file():
        return 0, []
    ckpt = torch.load(path, weights_only=True)  # also on a first launch: resumes an old run
    return int(ckpt["epoch"]), list(ckpt["history"])


def _newest_file(out_dir, attempt):
    import torch

    if attempt == 0:
        return 0, []
    files = sorted(out_dir.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    if not files:
        return 0, []
    ckpt = torch.load(files[-1], weights_only=True)  # may be the killed save's temp file
    return int(ckpt["epoch"]), list(ckpt["history"])


SOLUTIONS["09.5"] = my_resume
WRONG["09.5"] = [
    (_by_heart, "a hidden case"),
    (_ignores_attempt, "a hidden case (a first launch"),
    (_newest_file, "a hidden case (restart 1 before any epoch finished"),
]
