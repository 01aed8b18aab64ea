"""A real browser: headless Chromium loads Netron's page for an exported model; the graph renders.

Chromium comes from the Debian package `chromium` (`make system-deps` installs it). Without it
the test is skipped, except under CI (`CI` set), where it fails. Chromium is driven through
the DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON messages separated by NUL
on file descriptors 3 and 4), so no Python package beyond the standard library is needed.

Netron's page first asks for cookie consent unless a `consent` (or `_ga`) cookie is set
(`netron/browser.js`, its `consent` step): the test sets one before loading. The viewer also
refuses to render once its build date is more than 180 days past (`browser.js`, its `age`
step: "Please update to the newest version."): the test then fails saying so.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from static_site import chromium_path

from helpers.netron_view import NetronView
from helpers.onnx_tools import export_onnx, list_ops

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-pipe",
]
TIMEOUT_S = 60.0  # for the page to render, on a loaded 2-core machine


class DevTools:
    """Minimal Chrome DevTools protocol client over --remote-debugging-pipe."""

    def __init__(self, binary: str, user_data_dir: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"]
        # Chromium reads commands on fd 3 and writes replies on fd 4
        shell = f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", shell, "bash", *cmd],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_chrome, 65536):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in messages:
                self._replies.put(json.loads(message))
        self._replies.put({"closed": True})

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply (events are dropped)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                reply = self._replies.get(timeout=1)
            except queue.Empty:
                continue
            if reply.get("closed"):
                raise RuntimeError(f"chromium closed the pipe during {method}: {self._stderr()}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(f"no reply to {method} within 30 s")

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            os.close(self._to_chrome)
            self.proc.stderr.close()


# what the page shows: every SVG text (node labels), and the body text (messages, errors)
PAGE_STATE = """JSON.stringify({
  svg: Array.from(document.querySelectorAll('svg text')).map(t => t.textContent),
  body: document.body ? document.body.innerText : '',
  cookie: document.cookie
})"""


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)  # (B, 4, 4, 4)
        return self.fc(x.flatten(1))  # (B, 10)


TOO_OLD = (
    "Netron refuses to render: its viewer says 'Please update to the newest version.' (the "
    "installed netron build is older than about 180 days); upgrade the netron package "
    "(requirements.txt pins only a lower bound)"
)
# shifts the page's clock, as if the viewer's build were that much older
SHIFT_CLOCK = """(() => { const D = Date, shift = %d * 86400000;
  Date = class extends D {
    constructor(...a) { if (a.length) super(...a); else super(D.now() + shift); }
    static now() { return D.now() + shift; }
  };
})();"""


def load_netron(browser: DevTools, url: str, expected: set[str], age_days: int = 0) -> tuple:
    """Open `url` in a new tab with consent given; return (verdict, page state).

    verdict: "rendered" (every expected label is an SVG text), "too_old" (the viewer asks to be
    updated), "consent" (the cookie question is shown) or "timeout".
    """
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.send("Page.enable", session)
    # consent given beforehand: the page skips its cookie question
    browser.send("Network.setCookie", session, name="consent", value="1", url=url, path="/")
    if age_days:
        browser.send(
            "Page.addScriptToEvaluateOnNewDocument", session, source=SHIFT_CLOCK % age_days
        )
    browser.send("Page.navigate", session, url=url)
    state: dict[str, Any] = {}
    verdict = "timeout"
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        result = browser.send(
            "Runtime.evaluate", session, expression=PAGE_STATE, returnByValue=True
        )
        state = json.loads(result["result"].get("value") or "{}")
        body = state.get("body", "")
        if "Please update" in body:
            verdict = "too_old"
            break
        if "This app uses cookies" in body:
            verdict = "consent"
            break
        if expected <= set(state.get("svg", [])):
            verdict = "rendered"
            break
        time.sleep(0.5)
    browser.send("Target.closeTarget", targetId=target)
    return verdict, state


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    devtools = DevTools(chromium_path("Netron browser"), profile)
    try:
        yield devtools
    finally:
        devtools.close()


@pytest.fixture(scope="module")
def served():
    torch.manual_seed(0)
    model = export_onnx(SmallCNN().eval(), torch.randn(1, 1, 8, 8))
    ops = set(list_ops(model))
    assert {"Conv", "Relu", "MaxPool", "Gemm"} <= ops, ops
    with NetronView(model, name="small_cnn.onnx") as view:
        yield view, ops


def test_netron_renders_exported_model_in_chromium(browser: DevTools, served) -> None:
    view, ops = served
    verdict, state = load_netron(browser, view.url, ops)
    if verdict == "too_old":
        pytest.fail(TOO_OLD)
    assert verdict == "rendered", (
        f"graph did not render ({verdict}) within {TIMEOUT_S:.0f} s: svg texts "
        f"{state.get('svg', [])[:20]}, page text {state.get('body', '')[:500]!r}"
    )
    assert "consent=" in state["cookie"]
    # every op type of the model labels a node box in the rendered SVG
    assert ops <= set(state["svg"])


def test_an_aged_viewer_is_reported_as_too_old(browser: DevTools, served) -> None:
    """The check above can tell 'too old' apart: the same page with its clock 400 days on."""
    view, ops = served
    verdict, state = load_netron(browser, view.url, ops, age_days=400)
    assert verdict == "too_old", (verdict, state.get("body", "")[:300])
    assert not set(state["svg"]) & ops  # nothing rendered behind the message
