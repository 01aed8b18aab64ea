"""Process plumbing shared by helpers.launch and helpers.torchrun (imports no torch).

Used by: launch (workers), torchrun (its exec wrapper and environment), collectives (notebook
04's init-method demo) and the tests that check what listens where. Linux for the
parent-death signal and /proc; elsewhere `set_pdeathsig` says it could not.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping

__all__ = [
    "LOOPBACK_IFNAME",
    "set_pdeathsig",
    "child_env",
    "listening_sockets",
    "is_loopback",
    "free_port",
    "alive",
    "wait_gone",
]

# the interface gloo and NCCL should bind to so that nothing listens on the network
LOOPBACK_IFNAME = "lo0" if sys.platform == "darwin" else "lo"

_PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig: int) -> bool:
    """Ask Linux to send `sig` to this process when its parent thread exits; False elsewhere.

    The caller must then check `os.getppid()`: the parent may have died before this call.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default: os.environ) whose PYTHONPATH starts with our sys.path.

    Children import functions and modules by name: they need the import path we have, which
    in a notebook or under pytest holds folders that a fresh interpreter would not.
    """
    env = dict(os.environ if base is None else base)
    paths = [p for p in sys.path if p] + env.get("PYTHONPATH", "").split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return env


def _decode(hex_addr: str) -> tuple[str, int]:
    """'0100007F:1F90' (as /proc/net/tcp shows it) -> ('127.0.0.1', 8080); IPv6 likewise."""
    host_hex, port_hex = hex_addr.split(":")
    host = bytes.fromhex(host_hex)
    # /proc prints each 32-bit word in host (little-endian) byte order
    words = b"".join(host[i : i + 4][::-1] for i in range(0, len(host), 4))
    return str(ipaddress.ip_address(words)), int(port_hex, 16)


def listening_sockets(port: int | None = None) -> list[str]:
    """Addresses this process listens on (TCP, IPv4 and IPv6; only `port` if given), from /proc."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)  # header
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # state 0A = LISTEN
                    address, local_port = _decode(fields[1])
                    if port is None or local_port == port:
                        found.append(address)
    return sorted(set(found))


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8 and ::1 (and IPv4-mapped loopback)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: it runs nothing). Linux /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids: Iterable[int], timeout_s: float = 15) -> list[int]:
    """Wait up to `timeout_s` for every pid to end; return those still running."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]
