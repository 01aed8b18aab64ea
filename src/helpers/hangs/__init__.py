"""Hung distributed jobs made on purpose, and the tools that find what hangs.

Used by: notebook 19 (when distributed training hangs) and tests/test_hangs.py.
CPU with gloo only: each worker builds a group with a timeout of a few seconds, so every hang
ends by itself; torch's debug worker server listens on 127.0.0.1 only, and the TCPStore
server of `hosted_store` lives for one cell. `lesson` holds what the notebook shows (the
workers, the call of torch's Flight Recorder analyzer, the watchers that read a hung job from
the parent, the store it hosts); `harness` what runs around them unshown (the readers of
messages, stacks, dumps and torchrun's summary, the exercise's job).
"""

from .harness import (
    _LOCATION,
    _PEER,
    MYSTERY,
    error_text,
    fr_entries,
    innermost_call,
    mystery_dumps,
    mystery_worker,
    torchrun_failures,
)
from .lesson import (
    _Capture,
    _fr_log,
    analyze_dumps,
    dead_peer_worker,
    environment,
    extra_collective_worker,
    fetch,
    fingerprint_worker,
    hosted_store,
    late_rank_worker,
    outcome,
    rendezvous_worker,
    served_worker,
    torchrun_job,
    wait_timeout_worker,
    watch_ranks,
)
