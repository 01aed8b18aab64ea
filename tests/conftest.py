"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest
from compile_fixtures import X, shifted_cos

from helpers.tracing import Recording, record_compile


@pytest.fixture(scope="module")
def eager_recording() -> Recording:
    """A recorded first call of torch.compile(shifted_cos, backend="eager")."""
    return record_compile(shifted_cos, X, backend="eager")
