"""Workers and probes for notebook 04 (process groups and collectives).

Used by: notebook 04 (its workers and probes), notebooks 05, 07, 13 and 15 (the renamed
collectives' status) and tests/test_collectives.py.
`collective_renames` / `renamed_collectives_status` hold one fact that notebooks 04, 05, 07, 13 and
15 assert alike: which old collective names the installed torch marks `@deprecated` in favour of
`reduce_scatter_single` / `all_gather_single` (`expected_renamed_status` writes down what each
release of the matrix does). The workers run under helpers.launch: gloo on CPU, NCCL with one
GPU per rank when present (tensors live on `current_device()`); each returns plain Python data
so the notebook can print and assert it in rank order. `init_method_demo` runs a one-rank gloo
group in the calling process. Linux (/proc) for the socket listing.
"""

from __future__ import annotations

import mmap
import os
import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from helpers.launch import current_device
from helpers.processes import listening_sockets

__all__ = [
    "RENAMED_COLLECTIVES",
    "collective_renames",
    "renamed_collectives_status",
    "expected_renamed_status",
    "identity_worker",
    "collectives_worker",
    "init_method_demo",
    "host_addresses",
    "library_mentions",
]


# ---------------------------------------------------------------------------------------------
# the renamed collectives (one fact for notebooks 04, 05 and 13)

#: old name -> the name the installed docstrings and warnings send readers to
RENAMED_COLLECTIVES = {
    "_reduce_scatter_base": "reduce_scatter_single",
    "reduce_scatter_tensor": "reduce_scatter_single",
    "_all_gather_base": "all_gather_single",
    "all_gather_into_tensor": "all_gather_single",
}


def collective_renames(renamed: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """What the installed `torch.distributed` says about each old name and its replacement.

    Per old name: `present`; `deprecated`, the `__deprecated__` text that `typing_extensions.
    deprecated` leaves on the function (None when it carries none); `names_replacement`,
    whether that text names `torch.distributed.<new>`; `alias_doc`, whether the docstring calls
    it an "Alias of :func:`<new>`" (how 2.15.0 documents the undeprecated public names);
    `replacement`, `replacement_present` and `replacement_deprecated` (its `__deprecated__`).
    """
    out = {}
    for old, new in (renamed or RENAMED_COLLECTIVES).items():
        fn, repl = getattr(dist, old, None), getattr(dist, new, None)
        note = getattr(fn, "__deprecated__", None)
        out[old] = {
            "present": fn is not None,
            "deprecated": note,
            "names_replacement": bool(note) and f"torch.distributed.{new}" in note,
            "alias_doc": f"Alias of :func:`{new}`" in (getattr(fn, "__doc__", None) or ""),
            "replacement": new,
            "replacement_present": repl is not None,
            "replacement_deprecated": getattr(repl, "__deprecated__", None),
        }
    return out


def renamed_collectives_status(renamed: dict[str, str] | None = None) -> dict[str, str]:
    """{old name: "deprecated" | "alias" | "plain" | "absent"} on the installed torch.

    "deprecated": `@deprecated` with a message naming its replacement; "alias": no deprecation,
    the docstring says it is an alias of the replacement; "plain": neither; "absent": not in
    `torch.distributed`. Raises AssertionError (naming it) if a replacement is missing or is
    itself deprecated, since every notebook's story assumes the `*_single` names are current.
    """
    status = {}
    for old, r in collective_renames(renamed).items():
        assert r["replacement_present"], (
            f"torch.distributed.{r['replacement']}: expected (the replacement of {old}), not found"
        )
        assert r["replacement_deprecated"] is None, (
            f"torch.distributed.{r['replacement']}: expected not deprecated, "
            f"found {r['replacement_deprecated']!r}"
        )
        if not r["present"]:
            status[old] = "absent"
        elif r["names_replacement"]:
            status[old] = "deprecated"
        elif r["deprecated"] is None and r["alias_doc"]:
            status[old] = "alias"
        else:
            status[old] = "plain"
    return status


def expected_renamed_status(version: str | None = None) -> dict[str, str]:
    """What each release of the matrix does, written down (read in each release's source).

    2.13.0 and 2.14.1: all four old names are `@deprecated` (FutureWarning) for the `*_single`
    names. 2.15.0: the public `reduce_scatter_tensor` / `all_gather_into_tensor` are plain
    wrappers again, documented "Alias of :func:`..._single`, kept for backward compatibility";
    the private `_reduce_scatter_base` / `_all_gather_base` stay deprecated. `version` defaults
    to the installed torch; a release after 2.15 is expected to behave as 2.15.0 until read.
    """
    from torch.torch_version import TorchVersion

    v = TorchVersion(version or torch.__version__)
    if v < (2, 15):
        return dict.fromkeys(RENAMED_COLLECTIVES, "deprecated")
    return {
        "_reduce_scatter_base": "deprecated",
        "reduce_scatter_tensor": "alias",
        "_all_gather_base": "deprecated",
        "all_gather_into_tensor": "alias",
    }


# ---------------------------------------------------------------------------------------------
# workers


def identity_worker(rank: int, world_size: int) -> dict:
    """Who am I? What the process group and the environment say about this rank."""
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")},
        "backend": dist.get_backend(),
        "device": current_device().type,
    }


def collectives_worker(rank: int, world_size: int) -> dict[str, list]:
    """Run each collective once on small tensors whose results can be worked out by hand."""
    dev = current_device()
    out: dict[str, list] = {}

    t = torch.tensor([float(rank + 1)] * 2, device=dev)  # rank r holds [r+1, r+1]
    dist.broadcast(t, src=0)
    out["broadcast"] = t.tolist()

    t = torch.tensor([float(rank + 1)] * 2, device=dev)
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    out["reduce"] = t.tolist() if rank == 0 else None  # the docs promise a result on dst only
    dist.broadcast(t, src=0)  # then rank 0's result to everyone: reduce + broadcast
    out["reduce_bcast"] = t.tolist()

    t = torch.tensor([float(rank + 1)] * 2, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    out["all_reduce"] = t.tolist()

    t = torch.tensor([float(rank + 1)], device=dev)
    gathered = [torch.zeros(1, device=dev) for _ in range(world_size)]
    dist.all_gather(gathered, t)
    out["all_gather"] = [g.item() for g in gathered]

    # rank r contributes [10r + 0, 10r + 1, ...] (world_size elements); rank i keeps element i
    t = torch.arange(world_size, dtype=torch.float32, device=dev) + 10 * rank
    mine = torch.zeros(1, device=dev)
    dist.reduce_scatter_single(mine, t)
    out["reduce_scatter"] = mine.tolist()

    # the same input two ways: reduce_scatter then all_gather, and one all_reduce
    whole = torch.zeros(world_size, device=dev)
    dist.all_gather_single(whole, mine)
    out["rs_then_ag"] = whole.tolist()
    dist.all_reduce(t)
    out["all_reduce_vec"] = t.tolist()

    # barrier: count arrivals in the group's store; after the barrier every rank sees them all
    store = dist.distributed_c10d._get_default_store()
    store.add("arrived", 1)
    dist.barrier()
    out["barrier"] = [store.add("arrived", 0)]  # add(key, 0) reads the counter
    return out


def init_method_demo(init_method: str, env: dict[str, str] | None = None) -> dict:
    """Initialise a one-rank gloo group with `init_method` in this process, then tear it down.

    `env` is set only while the group is built (for example MASTER_ADDR/MASTER_PORT for
    env://, or GLOO_SOCKET_IFNAME). Returns what the group saw and which addresses this
    process listened on meanwhile (the store's and gloo's sockets together).
    """
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=1)
        t = torch.ones(3)
        dist.all_reduce(t)
        info = {
            "initialized": dist.is_initialized(),
            "world_size": dist.get_world_size(),
            "sum": t.tolist(),
            "listening": listening_sockets(),
        }
        dist.destroy_process_group()
        return info
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def host_addresses(hostname: str | None = None) -> list[str]:
    """The addresses getaddrinfo gives for `hostname` (default: this machine's host name)."""
    name = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({info[4][0] for info in infos})


def library_mentions(*names: str, library: str = "libtorch_cpu") -> dict[str, bool]:
    """Whether each string occurs in the installed torch's shared `library` (its C++ code)."""
    (path,) = (Path(torch.__file__).parent / "lib").glob(f"{library}.*")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return {name: data.find(name.encode()) >= 0 for name in names}
