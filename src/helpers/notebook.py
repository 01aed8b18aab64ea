"""Notebook setup shared by every notebook (first code cell).

Used by: all notebooks. Assumes nothing about CPU/GPU; it only reports what it finds.
"""

from __future__ import annotations

import platform
import random
import sys
import warnings

__all__ = ["setup_notebook", "versions", "environment_summary"]


def versions() -> dict[str, str]:
    """Versions of Python, torch (with its git commit) and the other pinned packages present."""
    import torch

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
    }
    for name in ("numpy", "onnx", "onnxscript", "onnxruntime", "netron"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        out[name] = getattr(module, "__version__", "?")
    return out


def environment_summary() -> dict[str, object]:
    """What this machine offers a distributed notebook: devices and built-in backends."""
    import torch
    import torch.distributed as dist

    return {
        "platform": sys.platform,
        "cuda_available": torch.cuda.is_available(),
        "cuda_devices": torch.cuda.device_count(),
        "distributed_available": dist.is_available(),
        "gloo": dist.is_available() and dist.is_gloo_available(),
        "nccl": dist.is_available() and dist.is_nccl_available(),
        "mpi": dist.is_available() and dist.is_mpi_available(),
    }


def setup_notebook(seed: int = 0, threads: int = 1) -> dict[str, str]:
    """Make a notebook deterministic and quiet; return the versions it runs with.

    Seeds Python's, NumPy's and torch's random generators with `seed`, sets torch's intra-op
    thread count to `threads` (the same on every machine), sets short print options, resets
    Dynamo's caches (`torch._dynamo.reset()`: a re-run notebook compiles from scratch), ignores
    FutureWarnings from `torch.onnx` modules (a guard for the export notebooks; the pinned torch
    reports none there) and gives each `IPython.display.SVG` its copy (`_register_svg_copies`).
    """
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    torch._dynamo.reset()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.onnx.*")
    _register_svg_copies()
    return versions()


def _register_svg_copies() -> None:
    """In a Jupyter kernel, give every `IPython.display.SVG` a `text/markdown` copy, an `<img>`
    of the same SVG (`helpers.pictures.svg_markdown`): JupyterLab shows no SVG output from an
    untrusted notebook (a fresh clone), but it shows that copy."""
    try:
        from IPython import get_ipython
        from IPython.display import SVG
    except ImportError:  # no IPython: no kernel either
        return
    from helpers.pictures import svg_markdown

    shell = get_ipython()
    if shell is not None:  # a kernel, not a plain script
        markdown = shell.display_formatter.formatters["text/markdown"]
        markdown.for_type(SVG, lambda picture: svg_markdown(picture.data))
