"""Worked solutions to notebook 09's exercises (training with torchrun)."""

# 09.1 The environment variables `init_process_group(init_method="env://")` reads.
# show_source(torch.distributed.rendezvous._env_rendezvous_handler) calls
# `_get_env_or_raise(...)` for RANK and WORLD_SIZE (unless they were passed as arguments), then
# MASTER_ADDR and MASTER_PORT: where the store listens (rank 0's without torchrun, the agent's under
# torchrun, 09 section 6). torchrun sets more (section 5's
# `worker_env`): LOCAL_RANK and TORCHELASTIC_RESTART_COUNT are for the script (device choice,
# resume), not for env://.
ENV_NAMES = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

# 09.2 --epochs 4, TRAIN_DDP_KILL_AT=0:3, --max-restarts=1: the `attempt` of each record.
# Attempt 0 runs epochs 1 and 2 and saves last.pt after each (2 records, attempt 0). In epoch 3
# rank 0 SIGKILLs itself halfway (`_kill_step` fires for attempt 0 only): no record, no
# checkpoint. torchrun restarts the group with TORCHELASTIC_RESTART_COUNT=1; `_resume` loads
# last.pt, which holds 2 epochs, so the loop starts at epoch 3 and runs 3 and 4 (attempt 1).
ATTEMPTS = [0, 0, 1, 1]

# 09.3 --max-restarts=2 and a worker that dies in every group.
# `_remaining_restarts` starts at 2. Group 1 (count 0) fails: 2 > 0, spend one, restart.
# Group 2 (count 2 - 1 = 1) fails: 1 > 0, spend one, restart. Group 3 (count 2 - 0 = 2) fails:
# 0 left, stop, torchrun exits non-zero. Three groups; the last saw TORCHELASTIC_RESTART_COUNT=2.
RESTARTS = (3, 2)

# 09.4 Which CANDIDATES does torch.load(weights_only=True) refuse?
# The weights-only unpickler builds tensors, torch types on its allowlist (torch.Size) and
# plain containers (dict, OrderedDict, list, set); any other global is refused. An
# argparse.Namespace, a numpy array and a pathlib.Path each need their class: refused.
# (Try it: torch.save(obj, buf); torch.load(buf, weights_only=True) raises UnpicklingError.)
REFUSED = {"argparse_namespace", "numpy_array", "pathlib_path"}

SOLUTIONS = {"09.1": ENV_NAMES, "09.2": ATTEMPTS, "09.3": RESTARTS, "09.4": REFUSED}

WRONG = {
    "09.1": [
        ({"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}, "LOCAL_RANK"),
        ({"RANK", "WORLD_SIZE"}, "TCPStore"),
        ({"MASTER_ADDR", "MASTER_PORT"}, "missing"),
        ("RANK", "set of names"),
    ],
    "09.2": [
        ([0, 0, 0, 1], "before its checkpoint"),
        ([0, 0, 1, 2], "one restart"),
        ([0, 0, 0, 1, 1], "one record per finished epoch"),
        ([0, 1, 1, 1], "attempt 0"),
    ],
    "09.3": [((2, 2), "first group is not a restart"), ((3, 3), "RESTART_COUNT=0")],
    "09.4": [
        ({"argparse_namespace", "pathlib_path"}, "_rng_state"),
        ({"argparse_namespace", "numpy_array", "pathlib_path", "python_set"}, "allowlist"),
        ({"numpy_array"}, "2 more refused"),
        ({"pickle"}, "not among the candidates"),
    ],
}
