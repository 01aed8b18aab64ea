#!/bin/bash
# `make slurm-check`: run slurm/train_ddp.sbatch on a one-host Slurm cluster, requeue it while it
# trains, and check that the requeued job resumed from its checkpoint with every epoch once.
#
# 1 node x 2 tasks (two torchruns, one worker each, gloo on CPU), everything on 127.0.0.1.
# Needs root the first time (apt-get install slurm-wlm munge; munged and slurmd run as root).
# Prints the job's log, the epochs and the time it took; exit code 0 when every check held.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EPOCHS=${EPOCHS:-8}
START=$(date +%s)

slurm/local_cluster.sh start
eval "$(slurm/local_cluster.sh env)"
WORK=$(mktemp -d /tmp/slurm-check.XXXXXX)
PORT=$(.venv/bin/python -c "from helpers.processes import free_port; print(free_port())")

JOB=$(sbatch --parsable --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 \
    --output="$WORK/%x-%j.out" \
    --export=ALL,OUT_DIR="$WORK/out",EPOCHS="$EPOCHS",HEAD_NODE=127.0.0.1,RDZV_PORT="$PORT",GLOO_SOCKET_IFNAME=lo,OMP_NUM_THREADS=1,EXTRA_TORCHRUN_ARGS=--local-addr=127.0.0.1 \
    slurm/train_ddp.sbatch)
LOG=$WORK/digits-ddp-$JOB.out
echo "submitted job $JOB (1 node x 2 tasks); log $LOG"

state() { scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
epochs_done() {  # epochs rank 0 logged as saved (the log line follows the checkpoint write)
    grep -c "^epoch [0-9]*/$EPOCHS  loss" "$LOG" 2>/dev/null || true
}
wait_for() {  # wait_for SECONDS COMMAND...: poll until COMMAND succeeds
    local deadline=$(($(date +%s) + $1)); shift
    until "$@"; do
        if (($(date +%s) > deadline)); then
            echo "error: timed out waiting for: $*" >&2
            scontrol show job "$JOB" >&2 || true; cat "$LOG" >&2 || true; exit 1
        fi
        sleep 0.2
    done
}

has_checkpoint() { [[ $(state) == RUNNING && $(epochs_done) -ge 1 && -f $WORK/out/last.pt ]]; }
wait_for 600 has_checkpoint
DONE_BEFORE=$(epochs_done)
echo "job $JOB is running with $DONE_BEFORE epoch(s) in last.pt: scontrol requeue $JOB"
scontrol requeue "$JOB"
# a requeued job waits about two minutes before it may start again (measured on 22.05):
# once it is pending, let it start now
pending() { [[ $(state) == PENDING ]]; }
wait_for 120 pending
scontrol update JobId="$JOB" StartTime=now

finished() { [[ $(state) == COMPLETED || $(state) == FAILED || $(state) == CANCELLED ]]; }
wait_for 900 finished
echo "job $JOB: $(state) after $(($(date +%s) - START)) s"
echo "----- $LOG"
grep -v '^W[0-9]\{4\} \|^I[0-9]\{4\} ' "$LOG" || true
echo "-----"
[[ $(state) == COMPLETED ]] || { echo "error: the job did not complete" >&2; exit 1; }

.venv/bin/python - "$WORK/out/last.pt" "$LOG" "$EPOCHS" <<'PY'
import re, sys
from helpers.train_ddp import load_checkpoint
ckpt, log, epochs = load_checkpoint(sys.argv[1]), open(sys.argv[2]).read(), int(sys.argv[3])
history = ckpt["history"]
print("epochs in the checkpoint:", [h["epoch"] for h in history])
print("world size per epoch:", [h["world_size"] for h in history])
assert [h["epoch"] for h in history] == list(range(1, epochs + 1)), history
assert {h["world_size"] for h in history} == {2}, history
resumed = re.findall(r"(?m)^resume: .* holds (\d+) epoch\(s\); continuing$", log)
assert len(resumed) == 1, f"expected one resume line in the job log, found {resumed}"
assert 1 <= int(resumed[0]) < epochs, f"the requeue came after epoch {resumed[0]} of {epochs}"
assert re.search(r"(?m)^job \d+: restart 1, 2 torchrun\(s\)", log), "no requeued run in the log"
print(f"requeued run resumed after epoch {resumed[0]}; final accuracy {history[-1]['accuracy']:.4f}")
PY
echo "slurm-check passed in $(($(date +%s) - START)) s (work folder $WORK)"
rm -rf "$WORK"
