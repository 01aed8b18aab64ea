"""Hung distributed jobs made on purpose, and the tools that find what hangs.

Used by: notebook 19 (when distributed training hangs) and tests/test_hangs.py.
CPU with gloo only: each worker builds a group with a timeout of a few seconds, so every hang
ends by itself; torch's debug worker server listens on 127.0.0.1 only, and the TCPStore
server of `hosted_store` lives for one cell. `lesson` holds the workers the notebook shows,
`harness` what runs around them (torch's Flight Recorder analyzer on the dumps, watchers that
read a hung job from the parent, the exercise's job).
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
    wait_timeout_worker,
    watch_ranks,
)
