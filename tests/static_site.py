"""Shared by tests/test_book.py and tests/test_slides.py: serve a folder on 127.0.0.1, open its
pages in headless Chromium (playwright driving the Debian `chromium`; no browser download), and
record what a reader would not see: console errors, uncaught exceptions, failed loads and any
request that leaves 127.0.0.1 (aborted, so the pages are proven to work offline).

Pages are served over http, not opened from `file://`: the book theme logs a console error
under `file://` (it cannot store the light/dark choice).
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

HOST = "127.0.0.1"
PAGE_TIMEOUT_S = 60.0  # for a page to load, on a loaded 2-core machine


def chromium_path(test: str = "browser") -> str:
    """The system Chromium (playwright never downloads one); without it the `test` (named in
    the message) is skipped, except under CI (`CI` set), where it fails."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    reason = "chromium is not installed (Debian: `apt-get install chromium`, or `make system-deps`)"
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason}; CI is set, so the {test} test must run")
    pytest.skip(reason)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib's name)
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a browser closing a page mid-transfer (BrokenPipeError) is not a finding


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a free port) from a thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = _Server((HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def http_status(url: str) -> int:
    """The HTTP status of a GET of `url` (fragment dropped)."""
    try:
        with urllib.request.urlopen(url.split("#")[0], timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@contextmanager
def chromium(test: str = "browser") -> Iterator:
    """Headless system Chromium through playwright (see `chromium_path`)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium_path(test)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Visit:
    """What happened while one page loaded."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)  # requests that left 127.0.0.1 (aborted)
    failed: list[str] = field(default_factory=list)  # local requests that failed or gave >= 400

    def problems(self) -> list[str]:
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"uncaught exception: {m}" for m in self.page_errors]
            + [f"request leaving 127.0.0.1: {u}" for u in self.external]
            + [f"failed load: {u}" for u in self.failed]
        )


# Requests the driver hands to Python: everything not served by the local test server. A regex
# is matched inside the browser driver, so local requests do not make a round trip to Python.
OUTSIDE = re.compile(r"^(?!(?:data:|blob:|https?://127\.0\.0\.1[:/]))")
QUIET_MS = 150  # a page is loaded once no request has been in flight for this long


@contextmanager
def visit(browser, url: str, ready: str | None = None) -> Iterator[tuple]:
    """Open `url` in a fresh page; yields (page, Visit) once loaded (and `ready` is true, a JS
    expression, when given) and no request has been in flight for QUIET_MS (Playwright's
    "networkidle" waits a fixed 500 ms per page). Requests leaving 127.0.0.1 are aborted and
    recorded."""
    record = Visit(url)
    context = browser.new_context()
    page = context.new_page()
    in_flight: set = set()

    def route(route_, request) -> None:
        record.external.append(request.url)
        route_.abort()

    def on_response(response) -> None:
        if response.status >= 400:
            record.failed.append(f"{response.url} (HTTP {response.status})")

    def on_failed(request) -> None:
        in_flight.discard(request)
        if urlsplit(request.url).netloc.split(":")[0] == HOST:
            record.failed.append(f"{request.url} ({request.failure})")

    page.route(OUTSIDE, route)
    page.on("console", lambda m: m.type == "error" and record.console_errors.append(m.text))
    page.on("pageerror", lambda e: record.page_errors.append(str(e)))
    page.on("response", on_response)
    page.on("request", lambda r: in_flight.add(r))
    page.on("requestfinished", lambda r: in_flight.discard(r))
    page.on("requestfailed", on_failed)
    try:
        page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_S * 1000)
        if ready:
            page.wait_for_function(ready, timeout=PAGE_TIMEOUT_S * 1000)
        deadline, quiet = time.monotonic() + PAGE_TIMEOUT_S, 0
        while quiet < QUIET_MS and time.monotonic() < deadline:
            page.wait_for_timeout(50)  # lets the driver deliver events
            quiet = quiet + 50 if not in_flight else 0
        yield page, record
    finally:
        context.close()
