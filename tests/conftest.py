"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from compile_fixtures import X, shifted_cos
from static_site import chromium

from helpers.tracing import Recording, record_compile


@pytest.fixture(scope="module")
def eager_recording() -> Recording:
    """A recorded first call of torch.compile(shifted_cos, backend="eager")."""
    return record_compile(shifted_cos, X, backend="eager")


@pytest.fixture(scope="session")
def browser() -> Iterator:
    """One headless Chromium (and one playwright driver) per pytest process, for the book, the
    slides and the JupyterLab tests: each page opens in a fresh browser context of its own
    (static_site.visit, or a context the test closes), so the tests share no state but the
    browser process."""
    with chromium("browser") as launched:
        yield launched
