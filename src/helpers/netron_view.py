"""Netron from a notebook: serve one ONNX model on 127.0.0.1, show it in an IFrame, always stop.

Used by: notebook 10 (and tests/test_netron_browser.py). CPU only; no network.

Netron's Python server (`netron.start`) serves the model's whole folder under `/data/`, so the
model is first copied into a fresh, empty temporary folder that is deleted on stop. The server
binds 127.0.0.1 on a free port (never all interfaces) and runs in a thread of this process.
`netron.start` would also call `logging.basicConfig(level=INFO)` when the root logger has no
handler (turning on INFO logs for every library, to stderr); the start here prevents that.

A browser shows the page only while the server runs and only on the machine of the kernel:
use `with NetronView(model) as view: ...` in scripts and tests; in a notebook, `view.start()`,
display `view.iframe()`, and `view.stop()` in a later cell (kernel exit stops it too).
Beside the IFrame, `view.text()` is a static, deterministic view (ops, inputs, outputs) that
nbval can compare.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from helpers.onnx_tools import as_model_proto, model_summary, op_table

__all__ = ["NetronView"]

HOST = "127.0.0.1"


def _stop_server(address: tuple[str, int] | None, folder: str | None) -> None:
    import netron

    if address is not None:
        netron.stop(address)
        deadline = time.monotonic() + 2.0  # the serving thread polls every 0.25 s
        while netron.status(address) and time.monotonic() < deadline:
            time.sleep(0.02)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


class NetronView:
    """One ONNX model served by Netron on 127.0.0.1:<free port> from its own temp folder."""

    def __init__(self, model: Any, name: str = "model.onnx", height: int = 600) -> None:
        if Path(name).name != name or not name:
            raise ValueError(f"name must be a plain file name, got {name!r}")
        self.model = as_model_proto(model)  # ModelProto, ONNXProgram, bytes or path
        self.name = name
        self.height = height
        self.address: tuple[str, int] | None = None
        self.folder: Path | None = None
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> NetronView:
        """Copy the model into a fresh empty folder and serve it; returns self."""
        import netron
        import onnx

        if self.alive:
            return self
        self.folder = Path(tempfile.mkdtemp(prefix="netron_"))
        path = self.folder / self.name
        onnx.save(self.model, str(path))  # one file: initializers inside
        root = logging.getLogger()
        guard = None if root.handlers else logging.NullHandler()
        netron_logger = logging.getLogger("netron.server")
        level = netron_logger.level
        if guard is not None:
            root.addHandler(guard)  # netron.serve skips basicConfig when a handler exists
        netron_logger.setLevel(logging.WARNING)  # no "Serving '<temp path>' at <port>" line
        try:
            # port 0: netron asks the OS for a free port on HOST (no 8080 guessing)
            self.address = tuple(netron.start(str(path), address=(HOST, 0), browse=False))
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            netron_logger.setLevel(level)
            if guard is not None:
                root.removeHandler(guard)
        server_module = importlib.import_module("netron.server")
        for thread in getattr(server_module, "_threads", lambda _: [])(self.address):
            # a browser closing mid-transfer would print a traceback into whichever cell runs
            thread.server.handle_error = lambda request, client_address: None
        # runs once: on stop(), when the view is garbage-collected, or at interpreter exit
        self._finalizer = weakref.finalize(self, _stop_server, self.address, str(self.folder))
        return self

    def stop(self) -> None:
        """Stop the server (connection refused from now on) and delete the temp folder."""
        if self._finalizer is not None:
            self._finalizer()  # runs _stop_server once
            self._finalizer = None

    def __enter__(self) -> NetronView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- views -------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """True while the server thread for this view runs."""
        import netron

        return (
            self.address is not None and self._finalizer is not None and netron.status(self.address)
        )

    @property
    def url(self) -> str:
        """The viewer's page, e.g. http://127.0.0.1:PORT/ (the port changes every run)."""
        if self.address is None:
            raise RuntimeError("not started: call start() or use `with NetronView(...)`")
        return f"http://{self.address[0]}:{self.address[1]}/"

    @property
    def data_url(self) -> str:
        """Where the page fetches the model from."""
        return f"{self.url}data/{self.name}"

    def iframe(self, height: int | None = None) -> Any:
        """An IPython IFrame showing the viewer (output carries the port: NBVAL_IGNORE_OUTPUT)."""
        import netron

        if not self.alive:
            raise RuntimeError("the Netron server is not running: call start() first")
        return netron.widget(self.address, height=height or self.height)

    def text(self) -> str:
        """Static, deterministic view of the same model: inputs, outputs, op counts."""
        summary = model_summary(self.model)
        lines = [f"{self.name}: {summary['nodes']} nodes, opsets {summary['opset_imports']}"]
        lines += [f"  input  {n}: {list(s)}" for n, s in summary["inputs"].items()]
        lines += [f"  output {n}: {list(s)}" for n, s in summary["outputs"].items()]
        lines.append(op_table(self.model))
        return "\n".join(lines)

    def __repr__(self) -> str:  # no port, no temp path: safe in a compared output
        state = "serving" if self.alive else "stopped"
        return f"NetronView({self.name!r}, {state})"
