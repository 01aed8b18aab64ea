"""helpers.claims: presence probes import what they probe, and a changed API is named."""

from __future__ import annotations

import inspect
import sys

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
