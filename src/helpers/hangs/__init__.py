"""Hung distributed jobs made on purpose, and the tools that find what hangs.

Used by: notebook 19 (when distributed training hangs) and tests/test_hangs.py.
CPU with gloo only: each worker builds a group with a timeout of a few seconds, so every hang
ends by itself; torch's debug worker server listens on 127.0.0.1 only, and the TCPStore
server of `hosted_store` lives for one cell. `lesson` holds the workers the notebook shows,
`harness` what runs around them (torch's Flight Recorder analyzer on the dumps, watchers that
read a hung job from the parent, the exercise's job).
"""

from .harness import (
    MYSTERY,
    analyze_dumps,
    environment,
    error_text,
    fetch,
    fr_entries,
    hosted_store,
    innermost_call,
    mystery_dumps,
    mystery_worker,
    watch_ranks,
)
from .lesson import (
    dead_peer_worker,
    extra_collective_worker,
    fingerprint_worker,
    late_rank_worker,
    outcome,
    rendezvous_worker,
    served_worker,
    wait_timeout_worker,
)

__all__ = [
    "MYSTERY",
    "analyze_dumps",
    "dead_peer_worker",
    "environment",
    "error_text",
    "extra_collective_worker",
    "fetch",
    "fingerprint_worker",
    "fr_entries",
    "hosted_store",
    "innermost_call",
    "late_rank_worker",
    "mystery_dumps",
    "mystery_worker",
    "outcome",
    "rendezvous_worker",
    "served_worker",
    "wait_timeout_worker",
    "watch_ranks",
]
