"""helpers.collectives: the notebook-04 workers, probes, and who listens where on any host.

The socket tests run the demo on a host whose name resolves to a NON-loopback address: a
private network namespace (`unshare --net`) with its own host name (`--uts`), a veth pair
holding 198.18.0.1 (RFC 2544 benchmarking range) and a test-only /etc/hosts bind-mounted over
the real one (`--mount`). Nothing is routed out of that namespace, so all traffic stays on this
machine. They need root and namespaces, and skip saying so otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers.collectives import (
    RENAMED_COLLECTIVES,
    collective_renames,
    collectives_worker,
    expected_renamed_status,
    host_addresses,
    identity_worker,
    init_method_demo,
    library_mentions,
    renamed_collectives_status,
)
from helpers.launch import launch
from helpers.processes import LOOPBACK_IFNAME, child_env, is_loopback
from helpers.source import header_view

HERE = Path(__file__).resolve().parent
NS_HOST, NS_ADDR = "nshost", "198.18.0.1"


def test_renamed_collectives_status_is_what_this_release_does() -> None:
    """The shared fact of 04, 05 and 13, on whichever torch runs the tests."""
    found, expected = renamed_collectives_status(), expected_renamed_status()
    assert found == expected, f"torch {torch.__version__}: expected {expected}, found {found}"
    for old, r in collective_renames().items():
        if found[old] == "deprecated":  # the message sends the reader to the replacement
            assert f"torch.distributed.{RENAMED_COLLECTIVES[old]}" in r["deprecated"]
        if found[old] == "alias":  # no warning at call time either
            fn = getattr(torch.distributed, old)
            assert not hasattr(fn, "__deprecated__") and r["alias_doc"]


def test_expected_renamed_status_per_release() -> None:
    old = dict.fromkeys(RENAMED_COLLECTIVES, "deprecated")
    assert expected_renamed_status("2.13.0+cpu") == expected_renamed_status("2.14.1") == old
    new = expected_renamed_status("2.15.0+cu132")
    assert {k for k, v in new.items() if v == "alias"} == {
        "reduce_scatter_tensor",
        "all_gather_into_tensor",
    }
    assert {k for k, v in new.items() if v == "deprecated"} == {
        "_reduce_scatter_base",
        "_all_gather_base",
    }


def test_renamed_status_names_a_missing_replacement() -> None:
    with pytest.raises(AssertionError, match="no_such_single: expected"):
        renamed_collectives_status({"all_gather_into_tensor": "no_such_single"})


def test_collectives_worker_results_and_identities() -> None:
    res = launch(collectives_worker, 3)
    assert [r["broadcast"] for r in res] == [[1.0, 1.0]] * 3
    assert res[0]["reduce"] == [6.0, 6.0] and res[1]["reduce"] is None
    assert all(r["reduce_bcast"] == r["all_reduce"] for r in res)
    assert all(r["all_reduce"] == [6.0, 6.0] and r["all_gather"] == [1.0, 2.0, 3.0] for r in res)
    column_sums = [sum(10 * k + i for k in range(3)) for i in range(3)]  # [30, 33, 36]
    assert [r["reduce_scatter"] for r in res] == [[s] for s in column_sums]
    assert all(r["rs_then_ag"] == r["all_reduce_vec"] == column_sums for r in res)
    assert [r["barrier"] for r in res] == [[3]] * 3


def test_identity_worker() -> None:
    res = launch(identity_worker, 2)
    assert [r["rank"] for r in res] == [0, 1] and {r["world_size"] for r in res} == {2}
    assert res[1]["env"] == {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}


def test_init_method_demo_restores_the_environment(tmp_path: Path) -> None:
    before = os.environ.get("GLOO_SOCKET_IFNAME")
    d = init_method_demo(f"file://{tmp_path}/store", env={"GLOO_SOCKET_IFNAME": LOOPBACK_IFNAME})
    assert d["initialized"] and d["sum"] == [1.0] * 3
    assert d["listening"] and all(is_loopback(a) for a in d["listening"]), d["listening"]
    assert os.environ.get("GLOO_SOCKET_IFNAME") == before


def test_unknown_interface_is_refused_naming_it(tmp_path: Path) -> None:
    """gloo reads GLOO_SOCKET_IFNAME when the group is built: a bad name fails right there."""
    with pytest.raises(RuntimeError, match="Unable to find address for: nosuch0"):
        init_method_demo(f"file://{tmp_path}/store", env={"GLOO_SOCKET_IFNAME": "nosuch0"})


def test_probes() -> None:
    assert "127.0.0.1" in host_addresses("localhost")
    assert host_addresses("no-such-host.invalid") == []
    view = header_view("torch/csrc/distributed/c10d/ProcessGroupGloo.hpp", "createDefaultDevice")
    assert (
        "createDefaultDevice" in view.code
        and view.url
        and view.url.endswith(f"#L{view.first_line}-L{view.last_line}")
    )
    with pytest.raises(ValueError, match="occurs 0 time"):
        header_view("torch/csrc/distributed/c10d/ProcessGroupGloo.hpp", "no such text here")
    assert library_mentions("GLOO_SOCKET_IFNAME", "no such string in torch 1b2c") == {
        "GLOO_SOCKET_IFNAME": True,
        "no such string in torch 1b2c": False,
    }


# --- on a host whose name resolves to a non-loopback address -------------------------------

_SETUP = """
set -e
hostname {host}
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add {addr}/24 dev veth0
ip link set veth0 up
ip link set veth1 up
mount --bind {hosts} /etc/hosts
exec {python} {script}
"""

_PROBE = """
import json, sys, tempfile
sys.path[:0] = {paths!r}
import launch_workers as w
from helpers.collectives import host_addresses, init_method_demo
from helpers.launch import launch
from helpers.processes import free_port
d = tempfile.mkdtemp()
pin = {{"GLOO_SOCKET_IFNAME": "lo"}}
env = {{"MASTER_ADDR": "127.0.0.1"}}
print(json.dumps({{
    "resolves_to": host_addresses(),
    "file": init_method_demo(f"file://{{d}}/a")["listening"],
    "file_pinned": init_method_demo(f"file://{{d}}/b", env=pin)["listening"],
    "env_pinned": init_method_demo(
        "env://", env={{**pin, **env, "MASTER_PORT": str(free_port())}})["listening"],
    "launch": list(launch(w.sockets_worker, 2)),
}}))
"""


def _namespace_unavailable() -> str | None:
    if sys.platform != "linux":
        return "needs Linux namespaces"
    if os.geteuid() != 0:
        return "needs root to create network/UTS/mount namespaces"
    missing = [tool for tool in ("unshare", "ip", "mount") if shutil.which(tool) is None]
    if missing:
        return f"needs {missing} on PATH"
    probe = subprocess.run(
        ["unshare", "--uts", "--mount", "--net", "sh", "-c",
         "ip link add veth0 type veth peer name veth1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"cannot create namespaces with a veth pair here: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def non_loopback_host(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run the probe in a namespace whose host name resolves to 198.18.0.1; its JSON result."""
    reason = _namespace_unavailable()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("netns")
    (tmp / "hosts").write_text(f"127.0.0.1 localhost\n{NS_ADDR} {NS_HOST}\n")
    paths = [str(HERE), *sys.path]
    (tmp / "probe.py").write_text(textwrap.dedent(_PROBE.format(paths=paths)))
    setup = _SETUP.format(
        host=NS_HOST, addr=NS_ADDR, hosts=tmp / "hosts", python=sys.executable,
        script=tmp / "probe.py",
    )  # fmt: skip
    done = subprocess.run(
        ["unshare", "--uts", "--mount", "--net", "sh", "-c", setup],
        capture_output=True, text=True, timeout=240, env=child_env(), cwd=HERE.parent,
    )  # fmt: skip
    assert done.returncode == 0, f"namespace probe failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_namespace_host_name_resolves_off_loopback(non_loopback_host: dict) -> None:
    assert non_loopback_host["resolves_to"] == [NS_ADDR]


def test_without_the_pin_gloo_listens_where_the_host_name_resolves(
    non_loopback_host: dict,
) -> None:
    """createDefaultDevice: a file:// group (no store socket) still listens on 198.18.0.1."""
    assert non_loopback_host["file"] == [NS_ADDR]


def test_with_the_pin_gloo_listens_only_on_loopback(non_loopback_host: dict) -> None:
    assert non_loopback_host["file_pinned"] == ["127.0.0.1"]


def test_the_tcp_store_listens_on_every_interface_even_pinned(non_loopback_host: dict) -> None:
    """GLOO_SOCKET_IFNAME pins gloo, not the TCPStore: env:// still opens the wildcard."""
    found = non_loopback_host["env_pinned"]
    assert set(found) - {"127.0.0.1"} <= {"::", "0.0.0.0"} and set(found) & {"::", "0.0.0.0"}


def test_launch_listens_only_on_loopback_on_such_a_host(non_loopback_host: dict) -> None:
    for rank, addresses in enumerate(non_loopback_host["launch"]):
        assert addresses and all(is_loopback(a) for a in addresses), f"rank {rank}: {addresses}"
