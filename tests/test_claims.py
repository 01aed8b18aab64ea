"""helpers.claims: presence probes import what they probe, and a changed API is named."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.claims import expect_default, expect_params, lookup, present, signature_params


def test_present_sees_a_submodule_nobody_imported() -> None:
    # hasattr on a package sees only what was imported already: the probe that got it wrong
    sys.modules.pop("torch.onnx.symbolic_opset11", None)
    if hasattr(torch.onnx, "symbolic_opset11"):
        delattr(torch.onnx, "symbolic_opset11")
    assert not hasattr(torch.onnx, "symbolic_opset11"), "setup: the submodule is still bound"
    assert present("torch.onnx.symbolic_opset11"), "exists as a compatibility module in 2.13"
    assert present("torch.distributed.reduce_scatter_tensor")
    assert not present("torch.onnx.dynamo_export"), "removed from torch.onnx in 2.13"
    assert not present("no_such_package.x")


def test_lookup_names_the_missing_part() -> None:
    with pytest.raises(LookupError, match=r"torch\.onnx has no 'no_such_thing'"):
        lookup("torch.onnx.no_such_thing.deeper")


def test_expect_params_passes_on_the_installed_torch() -> None:
    params = expect_params(torch.compile, present=["backend", "fullgraph"], absent=["nopython"])
    assert params == signature_params("torch.compile")
    assert expect_default(torch.compile, "fullgraph", False) is False


def test_a_renamed_parameter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulate a newer torch that renamed `backend`: the message says what changed."""
    real = inspect.signature(torch.compile)
    renamed = real.replace(
        parameters=[
            p.replace(name="compiler") if p.name == "backend" else p
            for p in real.parameters.values()
        ]
    )
    monkeypatch.setattr(torch.compile, "__signature__", renamed, raising=False)
    with pytest.raises(AssertionError) as err:
        expect_params(torch.compile, present=["backend"])
    message = str(err.value)
    assert "torch.compile" in message and "['backend']" in message, message
    assert "compiler" in message, f"the installed signature should be listed: {message}"


def test_a_changed_default_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = inspect.signature(torch.compile)
    changed = real.replace(
        parameters=[
            p.replace(default=True) if p.name == "fullgraph" else p
            for p in real.parameters.values()
        ]
    )
    monkeypatch.setattr(torch.compile, "__signature__", changed, raising=False)
    with pytest.raises(AssertionError, match=r"expected default False, found True"):
        expect_default(torch.compile, "fullgraph", False)


def test_a_removed_function_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.distributed, "reduce_scatter_tensor")
    assert not present("torch.distributed.reduce_scatter_tensor")
    with pytest.raises(LookupError, match="has no 'reduce_scatter_tensor'"):
        signature_params("torch.distributed.reduce_scatter_tensor")


def test_a_lost_default_names_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parameter that lost its default: the message gives the expectation and the signature."""
    real = inspect.signature(torch.compile)
    no_default = real.replace(
        parameters=[
            p.replace(default=inspect.Parameter.empty) if p.name == "fullgraph" else p
            for p in real.parameters.values()
        ]
    )
    monkeypatch.setattr(torch.compile, "__signature__", no_default, raising=False)
    with pytest.raises(AssertionError) as err:
        expect_default(torch.compile, "fullgraph", False)
    message = str(err.value)
    assert message.startswith("torch.compile(fullgraph=...): expected default False"), message
    assert "found no default" in message and "backend" in message, message


# TorchScript's public entry points warn on the releases of the matrix (2.13: DeprecationWarning,
# 2.14 and 2.15: FutureWarning, which notebook 00 asserts). An open upstream pull request
# (pytorch/pytorch#189705, "Make TorchScript deprecation warnings hard errors with an escape
# hatch") would make them raise unless an environment variable is set before `import torch`.
# This test runs in the version matrix (tools/matrix.py UNIT_TESTS), so the first release that
# ships the change fails here with the story to tell, not only as a traceback in each notebook.
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TORCHSCRIPT_PROBE = """
import json, warnings
import torch
calls = {
    "torch.jit.trace": lambda: torch.jit.trace(torch.nn.Identity(), torch.ones(1)),
    "torch.jit.script": lambda: torch.jit.script(torch.nn.Identity()),
}
found = {}
for name, call in calls.items():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            call()
            found[name] = "returns"
        except Exception as err:
            found[name] = f"raises {type(err).__name__}: {str(err)[:300]}"
print(json.dumps(found))
"""


def _notebooks_using_torchscript() -> list[str]:
    pattern = re.compile(r"torch\.jit\.|dynamo=False")
    return [nb.name[:2] for nb in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
            if pattern.search(nb.read_text())]  # fmt: skip


def test_torchscript_entry_points_still_return() -> None:
    env = {k: v for k, v in os.environ.items() if "TORCHSCRIPT" not in k}  # no escape hatch set
    run = subprocess.run(
        [sys.executable, "-c", TORCHSCRIPT_PROBE], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, f"the probe itself should run, it failed: {run.stderr[-2000:]}"
    found = json.loads(run.stdout.strip().splitlines()[-1])
    raising = {name: state for name, state in found.items() if state != "returns"}
    users = _notebooks_using_torchscript()
    assert users, "expected notebooks that use torch.jit or dynamo=False, found none"
    assert not raising, (
        f"torch {torch.__version__}: expected torch.jit.trace and torch.jit.script to warn and "
        f"return, found {raising}. TorchScript's deprecation became an error: notebooks "
        f"{', '.join(users)} use torch.jit or the TorchScript exporter (dynamo=False). Tell the "
        "change in their Then-vs-now tables (notebook 00's row on how torch.jit.script warns "
        "first), and decide per notebook whether to keep the TorchScript path behind the escape "
        "hatch the release documents (an environment variable read once at `import torch`)."
    )
