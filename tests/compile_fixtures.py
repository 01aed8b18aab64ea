"""Inputs and functions shared by tests/test_tracing.py and tests/test_landmarks.py
(their shared `eager_recording` fixture is in tests/conftest.py)."""

from __future__ import annotations

import re

import torch

ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")

X = torch.arange(8.0)


def pointwise(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + 1


def shifted_cos(x: torch.Tensor) -> torch.Tensor:
    return torch.cos(x) + 1
