"""One operator through every layer: the facts notebook 18 reads, from the installed torch.

Used by: notebook 18 (CPU only; Inductor's C++ backend for one compile).

Every function reads the installed packages: the YAML files torchgen ships under
`torchgen/packaged/` (through torchgen's own parsers), the dispatcher's live table, Inductor's
tables and code generator. Machine paths (the CI checkout a wheel was built in, this
site-packages) never reach the results: a registration site is named by its path in the
PyTorch repository, or under `build/` for a file the build generates.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGED_YAMLS",
    "PackagedYamlMissing",
    "packaged_yamls",
    "native_entry",
    "derivative_entry",
    "Registration",
    "dispatch_table",
    "call_path",
    "registration_link",
    "inductor_route",
    "computing_lines",
    "mkl_atan",
    "layers_svg",
]

# what notebook 18 reads, relative to torchgen/packaged/
PACKAGED_YAMLS = (
    "ATen/native/native_functions.yaml",
    "ATen/native/tags.yaml",
    "autograd/derivatives.yaml",
)


class PackagedYamlMissing(FileNotFoundError, AssertionError):
    """A YAML file torchgen should ship under `torchgen/packaged/` is not installed; the message
    names the missing files, the torch version and what the folder holds instead."""


def packaged_yamls(root: str | Path | None = None) -> dict[str, Path]:
    """{relative name: path} of the YAMLs in PACKAGED_YAMLS under `root`
    (default: the installed `torchgen/packaged/`). Raises PackagedYamlMissing naming each
    file that is absent (a nightly has shipped without them before)."""
    import torch

    default = root is None
    if root is None:
        import torchgen

        root = Path(torchgen.__file__).parent / "packaged"
    root = Path(root)
    missing = [rel for rel in PACKAGED_YAMLS if not (root / rel).is_file()]
    if missing:
        present = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.yaml"))
        where = "torchgen/packaged/" if default else f"the folder {root.name}/"
        raise PackagedYamlMissing(
            f"torch {torch.__version__}: expected {list(PACKAGED_YAMLS)} under {where}, "
            f"missing {missing}; the folder holds {present or 'no YAML files'}. The wheel "
            f"normally ships them for torchgen; reinstall torch, or pass root= a folder laid "
            f"out the same way"
        )
    return {rel: root / rel for rel in PACKAGED_YAMLS}


@functools.lru_cache(maxsize=4)
def _parsed_native(root: str | None) -> Any:
    from torchgen.gen import parse_native_yaml

    paths = packaged_yamls(root)
    return parse_native_yaml(
        str(paths["ATen/native/native_functions.yaml"]), str(paths["ATen/native/tags.yaml"])
    )


def _function(parsed: Any, name: str) -> Any:
    found = [f for f in parsed.native_functions if str(f.func.name) == name]
    if not found:
        import difflib

        names = [str(f.func.name) for f in parsed.native_functions]
        close = difflib.get_close_matches(name, names, n=5)
        raise LookupError(
            f"native_functions.yaml: expected an operator named {name!r}, found none "
            f"(closest: {close})"
        )
    return found[0]


def _dispatch(parsed: Any, fn: Any) -> dict[str, dict[str, Any]]:
    entries = {}
    for key, index in parsed.backend_indices.items():
        metadata = index.get_kernel(fn)
        if metadata is not None:
            entries[str(key)] = {"kernel": metadata.kernel, "structured": metadata.structured}
    return entries


def native_entry(name: str, root: str | Path | None = None) -> dict[str, Any]:
    """`name`'s entry in native_functions.yaml, read by torchgen's `parse_native_yaml`.

    Returns {"func": schema, "tags": sorted tags, "structured_delegate": name or None,
    "dispatch": {key: {"kernel", "structured"}}, "delegate": the same four keys for the
    overload it delegates to (with "structured" and "structured_inherits"), or None}.
    """
    parsed = _parsed_native(None if root is None else str(root))
    fn = _function(parsed, name)
    entry: dict[str, Any] = {
        "func": str(fn.func),
        "tags": sorted(fn.tags),
        "structured_delegate": None
        if fn.structured_delegate is None
        else str(fn.structured_delegate),
        "dispatch": _dispatch(parsed, fn),
        "delegate": None,
    }
    if fn.structured_delegate is not None:
        out = _function(parsed, str(fn.structured_delegate))
        entry["delegate"] = {
            "func": str(out.func),
            "structured": out.structured,
            "structured_inherits": out.structured_inherits,
            "dispatch": _dispatch(parsed, out),
        }
    return entry


@functools.lru_cache(maxsize=4)
def _derivatives(root: str | None) -> dict[str, Any]:
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    paths = packaged_yamls(root)
    infos, _ = load_derivatives(
        str(paths["autograd/derivatives.yaml"]),
        str(paths["ATen/native/native_functions.yaml"]),
        str(paths["ATen/native/tags.yaml"]),
    )
    return {str(schema): by_key for schema, by_key in infos.items()}


def derivative_entry(name: str, root: str | Path | None = None) -> dict[str, Any]:
    """`name`'s entry in derivatives.yaml, read by torchgen's `load_derivatives` (what the
    autograd code generator reads). Returns {"schema", "node" (the generated grad_fn class),
    "formulas" {input: formula}, "saved" (inputs the node saves)}."""
    parsed = _parsed_native(None if root is None else str(root))
    schema = str(_function(parsed, name).func)
    infos = _derivatives(None if root is None else str(root))
    if schema not in infos:
        raise LookupError(f"derivatives.yaml: expected an entry for {schema!r}, found none")
    info = infos[schema]["Default"]
    formulas = {}
    for derivative in info.derivatives:
        for var in derivative.var_names:
            formulas[var] = derivative.formula
    return {
        "schema": schema,
        "node": info.op,
        "formulas": formulas,
        "saved": [s.nctype.name for s in info.all_saved_inputs],
    }


# --------------------------------------------------------------------------- the dispatcher


@dataclass(frozen=True)
class Registration:
    """One line of `torch._C._dispatch_dump_table`: what the slot of `key` holds."""

    key: str
    kind: str  # "kernel", "autograd kernel", "backend fallback", "default backend kernel", ...
    fallthrough: bool  # the dispatcher skips the key and goes on to the next one
    file: str  # path in the PyTorch repository, "build/..." for a file the build generates
    line: int

    @property
    def generated(self) -> bool:
        """True for a file the build writes (not in the repository: no permalink)."""
        return self.file.startswith("build/") or "/generated/" in self.file


_TABLE_LINE = re.compile(
    r"^(?P<key>\w+): (?P<fall>fallthrough )?registered at (?P<path>.+?):(?P<line>\d+) "
    r"\[(?P<kind>[^\]]+)\]$"
)
_REPO_TOP = re.compile(r"/(aten|build|c10|torch|functorch|caffe2)/")


def _repo_path(path: str) -> str:
    """The path of a registration site inside the PyTorch repository (or its build folder)."""
    if "/site-packages/" in path:  # Python registrations: the installed file
        return path.split("/site-packages/", 1)[1]
    match = _REPO_TOP.search(path)
    return path[match.start() + 1 :] if match else path


def dispatch_table(op: str) -> dict[str, Registration]:
    """The dispatcher's computed table for `op` ('aten::atan'): {key: Registration}.

    Parses `torch._C._dispatch_dump_table(op)`; a line the parser does not understand raises
    ValueError quoting it (the dump's format is not a stable API)."""
    import torch

    table = {}
    for text in torch._C._dispatch_dump_table(op).splitlines():
        if not text.strip():
            continue
        match = _TABLE_LINE.match(text.strip())
        if match is None:
            raise ValueError(
                f"dispatch table of {op}: expected 'Key: registered at file:line [kind]', "
                f"found {text!r}"
            )
        key = match["key"]
        table[key] = Registration(
            key=key,
            kind=match["kind"],
            fallthrough=match["fall"] is not None,
            file=_repo_path(match["path"]),
            line=int(match["line"]),
        )
    if not table:
        raise ValueError(f"dispatch table of {op}: expected entries, found an empty dump")
    return table


def call_path(op: str, tensor: Any) -> list[tuple[str, Registration | None]]:
    """The keys a call of `op` on `tensor` visits, highest priority first: the tensor's key
    set plus the thread-local include set, minus the thread-local exclude set (the dispatcher's
    `computeDispatchKeySet`), each with its table entry (None: empty slot). Fallthrough
    entries are listed too (the dispatcher skips them)."""
    import torch

    keys = torch._C._dispatch_keys(tensor) | torch._C._dispatch_tls_local_include_set()
    excluded = torch._C._dispatch_tls_local_exclude_set()
    table = dispatch_table(op)
    path = []
    while str(keys) != "DispatchKeySet()":
        key = keys.highestPriorityTypeId()
        keys = keys.remove(key)
        if excluded.has(key):
            continue
        name = str(key).removeprefix("DispatchKey.")
        path.append((name, table.get(name)))
    return path


def registration_link(registration: Registration) -> str | None:
    """A permalink to the line of a registration site in a file of the PyTorch repository,
    pinned to `torch.version.git_version`; None for a generated file."""
    from helpers.source import permalink

    if registration.generated:
        return None
    return permalink(registration.file, "torch", registration.line, registration.line)


# --------------------------------------------------------------------------- Inductor


def inductor_route(op: Any) -> dict[str, Any]:
    """How Inductor compiles the ATen overload `op` (e.g. `torch.ops.aten.atan.default`) on a
    CPU: {"decomposed": in `select_decomp_table()`, "lowered": in `lowerings`,
    "in_decomposition_table": in `torch._decomp.decomposition_table`, "scalar" and "vector":
    the C++ the CPU code generator writes for it, applied to 'tmp0' (None where it has no
    method of that name)}."""
    from torch._decomp import decomposition_table
    from torch._inductor.codegen.cpp import CppOverrides, CppVecOverrides
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import lowerings

    name = op.name().split("::", 1)[1].split(".", 1)[0]
    scalar = getattr(CppOverrides, name, None)
    vector = getattr(CppVecOverrides, name, None)
    return {
        "decomposed": op in select_decomp_table(),
        "lowered": op in lowerings,
        "in_decomposition_table": op in decomposition_table,
        "scalar": scalar("tmp0") if scalar is not None else None,
        "vector": vector("tmp0") if vector is not None else None,
    }


def computing_lines(kernel: str, route: dict[str, Any]) -> list[str]:
    """The lines of a generated C++ kernel that apply the op: its scalar or vector form from
    `inductor_route`, with any temporary (`tmpN`) in place of 'tmp0'."""
    patterns = []
    for form in (route["scalar"], route["vector"]):
        if form:
            patterns.append(re.escape(form).replace("tmp0", r"tmp\d+"))
    if not patterns:
        raise ValueError("inductor_route: expected a scalar or vector C++ form, found neither")
    found = re.compile("|".join(patterns))
    return [line.strip() for line in kernel.splitlines() if found.search(line)]


# --------------------------------------------------------------------------- the math library


def mkl_atan(x: Any) -> Any:
    """atan of a contiguous float32 CPU tensor computed by MKL's VML function `vsAtan`, called
    through ctypes from the `libtorch_cpu.so` of the installed wheel (which links MKL and exports
    the symbol in an MKL-enabled build). Raises ValueError for another dtype, device or layout
    and LookupError when the library does not export `vsAtan` (a build without MKL)."""
    import ctypes

    import torch

    if x.dtype != torch.float32 or x.device.type != "cpu" or not x.is_contiguous():
        raise ValueError(
            f"mkl_atan: expected a contiguous float32 CPU tensor, found {x.dtype} on "
            f"{x.device}, contiguous={x.is_contiguous()}"
        )
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        vs_atan = ctypes.CDLL(str(library)).vsAtan
    except (OSError, AttributeError) as err:
        raise LookupError(
            f"mkl_atan: expected MKL's vsAtan exported by {library.name}, found none ({err})"
        ) from None
    # vsAtan(n, a, r): MKL_INT n (a 32-bit int in the LP64 MKL that ATen/cpu/vml.h assumes)
    vs_atan.argtypes = (ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
    vs_atan.restype = None
    if x.numel() >= 2**31:
        raise ValueError(f"mkl_atan: expected fewer than 2**31 elements, found {x.numel()}")
    out = torch.empty_like(x)
    vs_atan(x.numel(), x.data_ptr(), out.data_ptr())
    return out


# --------------------------------------------------------------------------- the picture


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def layers_svg(layers: Sequence[tuple[str, str]], title: str = "") -> str:
    """The layers an operator crosses, top to bottom: one box per (layer, what is there),
    joined by arrows. Deterministic SVG text (no ids, no random numbers)."""
    if not layers:
        raise ValueError("layers_svg: expected at least one (layer, detail) pair, found none")
    width, box_h, gap, top = 720, 46, 18, 34 if title else 10
    height = top + len(layers) * (box_h + gap) - gap + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    if title:
        parts.append(
            f'<text x="{width // 2}" y="22" text-anchor="middle" font-size="15" '
            f'font-weight="bold">{_e(title)}</text>'
        )
    for i, (layer, detail) in enumerate(layers):
        y = top + i * (box_h + gap)
        parts.append(
            f'<rect x="20" y="{y}" width="{width - 40}" height="{box_h}" rx="6" '
            f'fill="#eef3fb" stroke="#3b6db3"/>'
        )
        parts.append(
            f'<text x="34" y="{y + 19}" font-size="13" font-weight="bold">{_e(layer)}</text>'
        )
        parts.append(
            f'<text x="34" y="{y + 37}" font-size="12" font-family="monospace">{_e(detail)}</text>'
        )
        if i + 1 < len(layers):
            x, y0, y1 = width // 2, y + box_h, y + box_h + gap
            parts.append(
                f'<path d="M{x} {y0} L{x} {y1 - 5}" stroke="#555" fill="none"/>'
                f'<path d="M{x - 4} {y1 - 7} L{x} {y1} L{x + 4} {y1 - 7} Z" fill="#555"/>'
            )
    parts.append("</svg>")
    return "\n".join(parts)
