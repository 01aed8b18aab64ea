"""A device dry run: a worker's GPU code path (NCCL, `cuda:<rank>`), checked on a CPU machine.

Used by: tests/test_dryrun.py, on the workers tests/dryrun_audit.py lists (what the
GPU-designed notebooks and the tensor-parallel one hand to `launch`, each entry at one world
size and argument set; tests/test_dryrun_coverage.py names the launches it does not run;
`make test-gpu` runs the same workers on real GPUs). CPU only: on a
machine with CUDA, run the worker on the GPUs instead.

    verdict = dry_run(fn, world_size, args)   # fn(rank, world_size, *args), the same worker code
    verdict.kind      # "device-checked", "no device op", "checked up to" or "fails"
    verdict.text      # the line of the verdict table: "fails: aten.addmm tensors on cpu and ...",
                      # or "fails: AssertionError: ..." for the worker's own error

How it works (each piece measured on torch 2.13.0+cpu):
- The ranks are real processes under `helpers.launch.launch` with gloo, so collectives carry
  real values and every value-dependent step (`.item()`, `.tolist()`, asserts on values) runs:
  no value is faked, no step skipped (a compiled call is a stop: see torch.compile below).
  Inside each rank `helpers.launch._device` is set to `cuda:<rank>`, what the launcher sets
  under NCCL, so the worker takes its GPU branch.
- A tensor "on the GPU" is a wrapper subclass (like DTensor) around a CPU tensor, carrying its
  logical device `cuda:<k>`. Python sees `t.device == cuda:<k>`; C++ (autograd, DDP's Reducer)
  sees PrivateUse1 device 0, registered as the Python backend "dryrun"
  (`torch.utils.backend_registration._setup_privateuseone_for_python_backend`): a fake CUDA
  device would abort the process in autograd ("not linked with support for cuda devices"),
  and that backend's device guard counts one device, so the rank's index lives in the wrapper.
- A TorchDispatchMode sees every ATen op (factories with `device="cuda"` included), every
  c10d op and every functional collective (`_c10d_functional`, `_c10d_functional_autograd`:
  what DTensor, SyncBatchNorm's functional all-reduce and compiled DDP issue; `_dtensor`'s
  `shard_dim_alltoall`, DTensor's Shard(i) -> Shard(j)), from Python or from C++ (DDP's
  Reducer and its broadcasts go through the dispatcher too; not the c10d op a functional
  collective's kernel issues inside the mode's handler). An op on a DTensor goes to DTensor's
  own dispatch, which runs with the mode off the stack: what it issues on plain tensors (the
  collectives of its redistributions) is not seen, and only ops on OnDevice local tensors
  reach the rules (through OnDevice's own dispatch). So a DTensor argument whose local tensor
  is a plain CPU tensor fails on entry, unless every group of its mesh was made with gloo
  (wider than NCCL: a DTensor op that would issue no collective fails too). It enforces:
  - the tensors of one op share one device (CUDA's rule: "cross-GPU operations are not
    allowed by default", CUDA semantics notes), except: copies (`_to_copy`, `copy_`,
    `lift_fresh`) may cross devices; the indices of `index`, `index_put(_)` may be CPU tensors
    of any size (their values may not); and a 0-dim CPU tensor may sit next to CUDA ones
    unless the op's generated CUDA wrapper checks devices: an op with a CUDA kernel (its own or
    its structured delegate's) and no `device_check: NoCheck` in torchgen's packaged
    native_functions.yaml, whose wrapper calls `check_and_update_common_device` (adaption.h:
    no 0-dim exception) on its positional and out tensors (`index_select` with a 0-dim CPU
    index fails; `x * torch.tensor(2.0)`, a NoCheck TensorIterator op, passes). A NoCheck
    op's kernel may still refuse a CPU scalar on CUDA, and an op without a CUDA kernel of
    its own (CompositeExplicitAutograd) is checked here as one op, not as the ops it runs on
    CUDA: both are allowed here;
  - every CUDA tensor is on the rank's own device: the course's one-device rule, not CUDA's
    (CUDA lets a process use any GPU), stricter than CUDA for an op that is not a collective,
    so it can only over-report there; for a collective it is NCCL's (two ranks on one GPU).
    A bare index is a CUDA device, as on a CUDA build (torch.device's "a single device
    ordinal, which is treated as a cuda device"): `.to(0)`, `.to(torch.device(0))`,
    `nn.Module.to(0)`, `.cuda(0)`, `set_device(0)`, and `device=0` in `torch.tensor`,
    `as_tensor` and the factories `_FACTORIES` lists are `cuda:0` on every rank;
  - a collective (a c10d op, or a functional collective: an op of those namespaces with a
    `group_name`) gets only CUDA tensors of the rank, as NCCL does, unless its group was made
    with `dist.new_group(backend="gloo")`: CPU tensors are right there under NCCL too.
  A breach raises `DeviceCheckError` naming the op, the devices and the worker's line, and is
  recorded first: a worker that catches it (an `except RuntimeError` round a collective) still
  gets "fails", with the first breach.
- "device-checked" means the worker ran to its end, no op broke these rules, and on some rank
  at least one op saw or made a tensor on the device, or a collective got device tensors (each
  rank's counts are in the verdict's detail). A worker that ran to its end with none of these on
  any rank gets "no device op: nothing ran on the device" instead: its tensors and modules never
  left the CPU (what an object collective stages on the device for its pickles is not counted,
  nor CPU tensors on a gloo group). The counts prove that the device was used, not that every
  tensor that should be there was: a CPU module whose input is also on the CPU breaks no rule.

What it cannot see (say so where a verdict depends on it):
- CUDA's own kernels and libraries: a kernel missing for a dtype on CUDA, cuBLAS/cuDNN/NCCL
  numerics, streams, events, memory, timing. `torch.cuda`'s runtime queries are answered as on
  a machine with one GPU per rank (`device_count`, `current_device`, `set_device`,
  `is_available`, `synchronize`, `get_device_capability` as sm90; the accelerator is "cuda";
  `torch.cuda.random`'s own `current_device` and `device_count` too, so `manual_seed`,
  `get_rng_state` and kin act on one CPU generator per device, which no op draws from: a
  worker's random values on the "device" come from the CPU's generator);
  streams and events are answered below (not their timing); anything else of `torch.cuda`
  (memory stats, device properties) fails as on a CPU build and stops the run, even where
  the worker catches it.
- A bare index given elsewhere than the calls listed under the one-device rule (a tensor's
  `new_ones(2, device=0)`, a factory outside `_FACTORIES`): C++ reads it as the registered
  "dryrun" backend's device, which the rules take for the rank's own, so rank 1's index 0 is
  not seen there. A `torch.device(0)` the worker builds is `dryrun:0` (it prints so, and is not
  equal to `torch.device("cuda", 0)`) until one of those calls reads it.
- `torch.autocast("cuda")`: CUDA's autocast does not reach the wrapper tensors (C++ sees the
  "dryrun" device), so a worker under it would run in full precision; `is_bf16_supported()`
  (device properties) stops it first.
- Code that asks the backend's name: `dist.get_backend()` says "gloo", so a branch on "nccl"
  takes its gloo path (object collectives are told their group's device as under NCCL: CUDA,
  or the CPU on a group made with `new_group(backend="gloo")`).
- torch.compile: Dynamo skips a frame it meets while the dry run's dispatch mode is on the
  stack (convert_frame.py's `CatchErrorsWrapper`: "non-infra torch dispatch mode present, this
  is not supported today in torch.compile"), so a compiled function would run eagerly,
  unchecked as compiled code. The dry run makes the first frame Dynamo skips for that reason a
  stop, "checked up to <the worker's function that called it> (torch.compile: Dynamo does not
  compile under the dry run's dispatch mode)", kept even if the worker catches it: nothing
  compiled is checked, nor anything after that call (frames Dynamo skips for other reasons,
  such as torch's own files, are not stops). Measured: 14's `compile_worker` stops at its first
  setting's first compiled call (the compiled DDP module's frame), and a compiled-autograd
  backward after an eager forward stops at its graph's `forward` frame. A frame Dynamo meets
  while the mode is off the stack (run from inside DTensor's or OnDevice's own dispatch) is not
  skipped and not a stop: Dynamo compiles it, unchecked (no audited worker gets there: each
  stops at its first compiled call before). CUDA's RNG state is answered (above), so Dynamo
  saving it (`torch.cuda.get_rng_state()`, as `is_available()` says True) stops nothing.
  Other tracers (`torch.export`, which Dynamo does not skip under a mode): not tried.
- Streams and events: `torch.cuda.Stream`, `Event`, `current_stream`, `stream(...)` are one
  in-order queue (every op runs at once, in program order): a missing `wait_stream` or
  `record_stream` (a race on a real GPU) is not seen. `Event.elapsed_time` is a stop (no
  timing), and so is any attribute of CUDA's streams and events the stand-ins lack.
- Pinned memory: `pin_memory()` and `pin_memory=True` give plain CPU memory (`is_pinned()`
  is True for it): no asynchronous copies.
- CUDA-only kernels (SyncBatchNorm's `batch_norm_stats`): no CPU twin, a stop.
A stop ("checked up to <function> (<why>)") is an error from what the dry run cannot answer,
and only that: a kernel with no CPU twin (NotImplementedError "Could not run ... 'CPU'
backend"), a `torch.cuda` function or `torch._C._cuda_*` binding it does not answer, an
attribute its stand-ins for streams and events lack, `Event.elapsed_time`, a
refusal of the CPU-only build raised outside torch/cuda (RuntimeError "... without ATen_cuda
library", "not compiled with CUDA": `torch.Generator(device="cuda:0")`), the torch.compile
stop. The device rules were checked up to that call, and nothing after it; a stop the worker
catches is recorded and kept (the first one), as a breach is, except the stand-ins' missing
attributes and the CPU build's refusals, which are stops only when the worker lets them
through. Anything else the worker raises (a failed assert, a TypeError) is its own error,
which the GPU path would raise too: "fails: <type>: <message>", with the worker's line in the
detail. `.numpy()` of a device tensor is a breach (CUDA refuses it).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import sys
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["dry_run", "Verdict", "DeviceCheckError", "verdict_of_result"]

BACKEND = "dryrun"  # the PrivateUse1 name C++ sees
_MARK = "dry run:"  # every DeviceCheckError message starts with it (it survives C++ re-raises)
_STOP = "DryRunStop"
NO_DEVICE_OP = "no device op"  # the kind of a worker that ran to its end with nothing on the device
# object collectives: their pickles travel as device tensors under NCCL, whatever the worker's
# own tensors are, so what they put on the device is not counted as the worker's
_OBJECT_COLLECTIVES = (
    "all_gather_object",
    "gather_object",
    "broadcast_object_list",
    "scatter_object_list",
    "send_object_list",
    "recv_object_list",
)
_HERE = Path(__file__).resolve()
_LAUNCH = _HERE.with_name("launch.py")
_TORCH = Path(torch.__file__).resolve().parent


class DeviceCheckError(RuntimeError):
    """A device rule of CUDA or NCCL broken: the op, the devices, the rank."""


class DryRunStop(RuntimeError):
    """Raised by a rank to end the launch at once; its message is the rank's verdict as JSON."""


class CompileUnderDryRun(RuntimeError):
    """Dynamo asked to compile a frame under the dry run: a stop (Dynamo would run it eagerly)."""


@dataclass(frozen=True)
class Verdict:
    """What the dry run proved about one worker."""

    kind: str  # "device-checked" | "no device op" | "checked up to" | "fails"
    what: str = ""  # the op and message (fails) or the function and reason (checked up to)
    detail: str = ""  # rank, file:line and the full message; the device-op counts per rank

    @property
    def text(self) -> str:
        """The line of the verdict table (deterministic: the counts stay in `detail`)."""
        if self.kind == "device-checked":
            return self.kind
        if self.kind == "fails":
            return f"fails: {self.what}"
        if self.kind == NO_DEVICE_OP:
            return f"{NO_DEVICE_OP}: {self.what}"
        return f"checked up to {self.what}"


# --- the device -----------------------------------------------------------------------------

_installed = False
_active: DeviceRules | None = None  # the rules of this rank, while a worker runs


def _install() -> None:
    """Register the PrivateUse1 Python backend and answer torch.cuda's queries (once)."""
    global _installed
    if _installed:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(BACKEND)
    _installed = True


def _answer_cuda_queries(rank: int, world_size: int) -> None:
    """torch.cuda as on a machine with one GPU per rank (the queries the docstring lists)."""
    state = {"device": rank}
    cuda = torch.cuda
    cuda._initialized = True  # factories with device="cuda" skip the lazy CUDA init
    cuda.is_available = lambda: True
    cuda.device_count = lambda: world_size
    cuda.current_device = lambda: state["device"]

    def set_device(device: Any) -> None:
        # an index, "cuda:k", or an index-less "cuda" (the current device: a no-op, as on CUDA)
        device = _cuda_ordinal(device)
        index = device if isinstance(device, int) else torch.device(device).index
        if index is not None:
            state["device"] = index

    cuda.set_device = set_device
    # torch/cuda/random.py imported current_device and device_count by name: answer them there
    # too; CUDA's generators are CPU generators, one per device, which no op draws from (the
    # ops run on the CPU and draw from the CPU's default generator)
    import torch.cuda.random as cuda_random

    cuda_random.current_device = cuda.current_device
    cuda_random.device_count = cuda.device_count
    cuda.default_generators = tuple(torch.Generator() for _ in range(world_size))
    cuda.synchronize = lambda device=None: None
    cuda.get_device_capability = lambda device=None: (9, 0)  # an H100/H200 (FP8 paths: sm90)
    # streams and events: the dry run runs every op at once, in program order, so a stream is
    # one queue and an event is always complete (what streams would reorder is not checked)
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.current_stream = cuda.default_stream = lambda device=None: _Stream()
    cuda.stream = lambda stream=None: contextlib.nullcontext(stream)
    # the machine's accelerator is CUDA (registering the "dryrun" backend would make it that)
    torch._C._get_accelerator = lambda check=False: torch.device("cuda")
    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
    # torch.tensor(data, device=...) builds on the device in C++ with Python modes excluded:
    # build on the CPU and move, which the mode sees (the same tensor a CUDA run gets)
    for name in ("tensor", "as_tensor"):
        setattr(torch, name, _built_then_moved(getattr(torch, name)))
    # a bare index (`device=0`, `torch.device(0)`) is a CUDA device on a CUDA build; here C++
    # would make it the "dryrun" backend's, which the rules read as the rank's own device
    for name in _FACTORIES:
        setattr(torch, name, _ordinal_device(getattr(torch, name)))
    # "cuda" without an index means the current device; C++ would ask CUDA's device guard
    move = torch.Tensor.to

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        args, kwargs = _to_args(args, kwargs)
        return move(self, *args, **kwargs)

    module_to = torch.nn.Module.to

    def to_module(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        args, kwargs = _to_args(args, kwargs)
        return module_to(self, *args, **kwargs)

    def to_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kw: Any):
        # Tensor.cuda(device): None (the current device), an index, a torch.device or a string
        if device is None or isinstance(device, int):
            index = state["device"] if device is None else device
        else:
            parsed = _indexed(torch.device(device))
            if parsed.type != "cuda":
                raise RuntimeError(f"Invalid device, must be cuda device (found {parsed})")
            index = parsed.index
        return move(self, torch.device("cuda", index), non_blocking=non_blocking, **kw)

    torch.Tensor.to = to
    torch.Tensor.cuda = to_cuda
    torch.nn.Module.to = to_module


def _to_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`.to(...)`'s arguments with its device (the first positional or `device=`) indexed: a
    bare index is `cuda:<index>` (the later positionals are dtype and bools, never devices)."""
    if args:
        args = (_indexed(_cuda_ordinal(args[0])), *(_indexed(a) for a in args[1:]))
    if "device" in kwargs:
        kwargs["device"] = _indexed(_cuda_ordinal(kwargs["device"]))
    return args, kwargs


# torch's factories that take `device=` (wrapped by _ordinal_device)
_FACTORIES = (
    "ones", "zeros", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
    "linspace", "logspace", "eye", "empty_strided", "ones_like", "zeros_like", "empty_like",
    "full_like", "rand_like", "randn_like", "randint_like",
)  # fmt: skip


def _cuda_ordinal(device: Any) -> Any:
    """A device as a CUDA build reads it: a bare index (not a bool) is `cuda:<index>`, and a
    `torch.device(k)` the worker built (here "dryrun:k", the registered backend's) too."""
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cuda", device)
    if isinstance(device, torch.device) and device.type == BACKEND:
        return torch.device("cuda", device.index or 0)
    return device


def _ordinal_device(build: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(build)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _cuda_ordinal(kwargs["device"])
        return build(*args, **kwargs)

    return wrapper


def _record_cuda_stops() -> None:
    """Each function of `torch.cuda` the dry run does not answer records the error it raises
    as a stop (a worker that catches it, `except AttributeError` round a memory query, still
    stops there)."""
    import types

    def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as err:
                if _active is not None and not _active.stops:
                    _active.stop(_stop_text(_worker_function(), err))
                raise

        return wrapper

    cuda = torch.cuda
    for name, value in list(vars(cuda).items()):
        if (
            isinstance(value, types.FunctionType)
            and not name.startswith("_")
            and value.__module__.startswith("torch.cuda")
        ):
            setattr(cuda, name, recorded(value))


def _indexed(device: Any) -> Any:
    """torch.device("cuda", current) for "cuda"; anything else as it is."""
    device = _cuda_ordinal(device)
    if isinstance(device, (str, torch.device)):
        try:
            parsed = torch.device(device)
        except RuntimeError:
            return device
        if parsed.type == "cuda" and parsed.index is None:
            return torch.device("cuda", torch.cuda.current_device())
    return device


class _Stream:
    """torch.cuda.Stream in the dry run: one in-order queue (see _answer_cuda_queries)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.priority = priority

    def wait_stream(self, stream: Any) -> None: ...
    def wait_event(self, event: Any) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool:
        return True

    def record_event(self, event: Any = None) -> _Event:
        return event if event is not None else _Event()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Stream)

    def __hash__(self) -> int:
        return 0


class _Event:
    """torch.cuda.Event in the dry run: always complete."""

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def record(self, stream: Any = None) -> None: ...
    def wait(self, stream: Any = None) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Any) -> float:
        # CUDA timing is not answered: a stop, recorded (a worker that catches it stops here)
        what = f"{_worker_function()} (torch.cuda.Event.elapsed_time: CUDA timing not answered)"
        if _active is not None:
            _active.stop(what)
        raise RuntimeError(what)


def _built_then_moved(build: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(build)
    def wrapper(data: Any, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        device = _cuda_ordinal(device)
        if device is None or torch.device(device).type != "cuda":
            return build(data, *args, device=device, **kwargs)
        requires_grad = kwargs.pop("requires_grad", False)
        out = build(data, *args, **kwargs).to(device)
        return out.requires_grad_() if requires_grad else out

    return wrapper


class OnDevice(torch.Tensor):
    """A CPU tensor standing for one on `cuda:<k>` (Python sees the logical device)."""

    _local: torch.Tensor
    _logical: torch.device

    @staticmethod
    def __new__(cls, local: torch.Tensor, logical: torch.device) -> OnDevice:
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            local.size(),
            strides=local.stride(),
            storage_offset=local.storage_offset(),
            dtype=local.dtype,
            layout=local.layout,
            device=torch.device(BACKEND, 0),
            requires_grad=local.requires_grad,
        )
        r._local = local
        r._logical = logical
        return r

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._logical

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    def get_device(self) -> int:  # type: ignore[override]
        return self._logical.index

    def __deepcopy__(self, memo: dict) -> OnDevice:
        if id(self) in memo:
            return memo[id(self)]
        new = OnDevice(self._local.detach().clone(), self._logical)
        new.requires_grad_(self.requires_grad)
        for key, value in self.__dict__.items():  # _is_param and the like
            if key not in ("_local", "_logical"):
                setattr(new, key, copy.deepcopy(value, memo))
        memo[id(self)] = new
        return new

    def untyped_storage(self) -> torch.UntypedStorage:  # type: ignore[override]
        return self._local.untyped_storage()  # the bytes a CUDA tensor of this shape holds

    def data_ptr(self) -> int:  # type: ignore[override]
        return self._local.data_ptr()

    def tolist(self) -> Any:  # type: ignore[override]
        return self._local.tolist()

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        message = (  # CUDA raises TypeError: "can't convert cuda:0 device type tensor to numpy"
            f"a tensor on {self._logical} to numpy (CUDA refuses it: "
            "Tensor.cpu() first, to copy it to host memory)"
        )
        if _active is None:
            raise TypeError(message)
        _active.fail("Tensor.numpy", message)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"OnDevice({self._local!r}, device='{self._logical}')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        # reached when another subclass (DTensor) runs ops on its OnDevice locals inside the mode
        if _active is None:
            raise RuntimeError(f"{_MARK} {func} on a dry-run tensor outside the dry run")
        return _active(func, args, kwargs or {})

    __torch_function__ = torch._C._disabled_torch_function_impl


def _worker_frame() -> str:
    """The worker's frames (outside torch, this module and the launcher), innermost last."""
    chain = []
    for frame in traceback.extract_stack():
        path = Path(frame.filename).resolve()
        if path in (_HERE, _LAUNCH) or _TORCH in path.parents or "<" in frame.filename:
            continue
        try:
            where = path.relative_to(Path.cwd())
        except ValueError:
            where = path.name
        chain.append(f"{where}:{frame.lineno} in {frame.name}")
    return " > ".join(chain[-4:]) or "?"


def _name(device: torch.device) -> str:
    return str(device)


def _op_key(func: Any) -> str:
    """The op as native_functions.yaml names it: "index_select", "mul.Tensor"."""
    schema = func._schema
    base = schema.name.split("::", 1)[-1]
    return f"{base}.{schema.overload_name}" if schema.overload_name else base


@functools.cache
def _exact_same_on_cuda() -> frozenset[str]:
    """The ops whose generated CUDA wrapper checks that every positional tensor is on one
    device, 0-dim CPU ones included (torchgen's `gen_device_check`, adaption.h's
    `check_and_update_common_device`): those with a CUDA kernel (their own, or their structured
    delegate's) and no `device_check: NoCheck`, read from torchgen's packaged yaml."""
    import torchgen
    import yaml

    path = Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)

    def has_cuda(entry: dict) -> bool:
        keys = (k.strip() for key in entry.get("dispatch") or {} for k in str(key).split(","))
        return "CUDA" in set(keys)

    by_name = {e["func"].split("(", 1)[0]: e for e in entries}

    def cuda_kernel(entry: dict) -> bool:  # its own, or its structured delegate's (.out)
        delegate = by_name.get(entry.get("structured_delegate", ""))
        return has_cuda(entry) or (delegate is not None and has_cuda(delegate))

    return frozenset(
        name for name, e in by_name.items() if e.get("device_check") != "NoCheck" and cuda_kernel(e)
    )


# collectives: ProcessGroup methods (c10d), functional collectives (DTensor, torch.compile) and
# DTensor's own all-to-all (`_dtensor.shard_dim_alltoall`, Shard(i) -> Shard(j) on a GPU mesh)
_COLLECTIVES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor"})


class DeviceRules:
    """The TorchDispatchMode body: the rules of CUDA and NCCL, enforced op by op."""

    _MOVES = frozenset({"aten._to_copy.default", "aten.copy_.default", "aten.lift_fresh.default"})
    # ops that take CPU index tensors next to CUDA ones, as CUDA does
    _CPU_INDICES = frozenset(
        {"aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default"}
    )

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.own = torch.device("cuda", rank)
        self._pinned: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
        self.collectives: list[str] = []  # every collective checked, in order (tests read it)
        self.breaches: list[str] = []  # every breach raised, caught by the worker or not
        self.stops: list[str] = []  # "fn (why)" of each stop met (unanswered surfaces)
        self.gloo_groups: set[str] = set()  # names of groups made with new_group(backend="gloo")
        # the evidence of "device-checked": ops that saw (or made) a tensor on the device, and
        # collectives handed device tensors; not counted inside object collectives (_uncounted)
        self.device_ops = 0
        self.device_collectives = 0
        self.uncounted = 0  # > 0 while an object collective runs

    def pinned(self, tensor: torch.Tensor) -> torch.Tensor:
        """Remember `tensor` as pinned (is_pinned() is True for it, as for CUDA's pinned memory)."""
        self._pinned.add(tensor)
        return tensor

    def stop(self, what: str) -> None:
        """Record a stop ("fn (why)"): what the dry run cannot answer, caught or not."""
        self.stops.append(what)

    def fail(self, func: Any, message: str) -> None:
        text = f"{_MARK} {func}: {message} [rank {self.rank}, {_worker_frame()}]"
        self.breaches.append(text)  # recorded first: a worker that catches it still fails
        raise DeviceCheckError(text)

    def on_gloo_group(self, func: Any, args: tuple, kwargs: dict, flat: list) -> bool:
        """A collective on a group made with backend="gloo": CPU tensors are right there under
        NCCL too. c10d ops carry the group itself, functional collectives its name."""
        from torch._C._distributed_c10d import ProcessGroup

        for i, arg in enumerate(func._schema.arguments):
            if arg.name == "group_name":
                value = args[i] if i < len(args) else kwargs.get("group_name")
                return value in self.gloo_groups
        for arg in flat:
            if isinstance(arg, torch.ScriptObject):
                try:
                    group = ProcessGroup.unbox(arg)
                except RuntimeError:
                    continue
                if group.group_name in self.gloo_groups:
                    return True
        return False

    def mixed(self, func: Any, args: tuple, kwargs: dict, cpu: list[torch.Tensor]) -> None:
        """CPU tensors next to CUDA ones in one op: what CUDA allows. A sized one only as an
        index of `index`/`index_put(_)`; a 0-dim one only where the op's CUDA wrapper does not
        check devices (`device_check: NoCheck`: TensorIterator takes CPU scalars) or the op has
        no CUDA kernel of its own (its parts are checked on CUDA, not seen here)."""
        from torch.utils._pytree import tree_flatten

        name = str(func)
        if name in self._CPU_INDICES:  # the indices, and only they, may stay on the CPU
            at = [a.name for a in func._schema.arguments].index("indices")
            indices = args[at] if at < len(args) else kwargs.get("indices", ())
            index_ids = {id(t) for t in indices if t is not None}
            cpu = [t for t in cpu if id(t) not in index_ids]
        sized_cpu = [t for t in cpu if t.dim() > 0]
        if sized_cpu:
            self.fail(
                func,
                f"tensors on cpu {tuple(sized_cpu[0].shape)} and cuda:<rank> "
                "in one op (CUDA allows only 0-dim cpu tensors there)",
            )
        if func.namespace != "aten" or _op_key(func) not in _exact_same_on_cuda():
            return
        # the generated CUDA wrapper checks the out and positional tensors (not keyword-only)
        flat, _ = tree_flatten((args, kwargs.get("out")))
        checked = {id(t) for t in flat if isinstance(t, torch.Tensor)}
        if any(id(t) in checked for t in cpu):
            self.fail(
                func,
                "a 0-dim cpu tensor and cuda:<rank> in one op (its CUDA kernel checks "
                "that every tensor is on one device: no device_check: NoCheck)",
            )

    def dtensor_locals(self, func: Any, tensors: list[torch.Tensor]) -> None:
        """DTensor runs its own dispatch with this mode off the stack, so the collectives of its
        redistributions reach the rules only through OnDevice locals (OnDevice's own dispatch):
        a DTensor argument whose local tensor is a plain CPU tensor is a breach, unless every
        group of its mesh was made with gloo. Wider than NCCL: a DTensor op that would issue no
        collective fails too."""
        dtensor = sys.modules.get("torch.distributed.tensor")
        if dtensor is None:
            return
        for t in tensors:
            if not isinstance(t, dtensor.DTensor) or isinstance(t._local_tensor, OnDevice):
                continue
            mesh = t.device_mesh
            if all(g.group_name in self.gloo_groups for g in mesh.get_all_groups()):
                continue
            self.fail(
                func,
                f"a DTensor whose local tensor is on cpu {tuple(t._local_tensor.shape)} "
                f"(mesh device type {mesh.device_type}; NCCL takes CUDA tensors only, so its "
                "redistributions' collectives would get cpu tensors)",
            )

    def target(self, device: Any) -> torch.device | None:
        if device is None:
            return None
        device = torch.device(device)
        if device.type == BACKEND:  # C++ asked for "the device of this tensor": the rank's GPU
            return self.own
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return device

    def __call__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        from torch.utils._pytree import tree_flatten, tree_map

        name = str(func)
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if any(type(t) not in (OnDevice, torch.Tensor, torch.nn.Parameter) for t in tensors):
            self.dtensor_locals(func, tensors)
            return func(*args, **kwargs)  # DTensor and kin: their own dispatch, on their locals
        devices = {t._logical for t in tensors if isinstance(t, OnDevice)}
        cpu = [t for t in tensors if not isinstance(t, OnDevice)]
        target = self.target(kwargs.get("device"))
        if name == "aten._pin_memory.default":  # pinned memory is plain CPU memory here
            return self.pinned(args[0].clone())
        if name == "aten.record_stream.default":  # one stream: nothing to record
            return None
        if name == "aten.is_pinned.default":
            return any(t is args[0] for t in self._pinned)
        # functional collectives name their group; their helpers (wait_tensor) are not sends
        collective = func.namespace == "c10d" or (
            func.namespace in _COLLECTIVES
            and any(a.name == "group_name" for a in func._schema.arguments)
        )
        if not self.uncounted:
            if collective and devices:
                self.device_collectives += 1
            elif not collective and (devices or target is not None and target.type == "cuda"):
                self.device_ops += 1
        if collective and self.on_gloo_group(func, args, kwargs, flat):
            self.collectives.append(name)  # gloo's rules: CPU tensors (and CUDA ones) allowed
        elif collective:
            self.collectives.append(name)
            if cpu and name != "c10d.barrier.default":  # NCCL's barrier makes its own tensor
                self.fail(
                    func,
                    f"a cpu tensor {tuple(cpu[0].shape)} handed to a collective "
                    f"(NCCL takes CUDA tensors only, on the rank's device cuda:<rank>)",
                )
            for d in devices:
                if d != self.own:
                    self.fail(
                        func,
                        f"a tensor on {_name(d)} handed to a collective on rank "
                        f"{self.rank} (NCCL wants the rank's device cuda:<rank>)",
                    )
        else:
            for d in devices | (
                {target} if target is not None and target.type == "cuda" else set()
            ):
                if d != self.own:
                    self.fail(
                        func,
                        f"a tensor on {_name(d)} on rank {self.rank}, whose device is cuda:<rank>",
                    )
            if devices and cpu and name not in self._MOVES:
                self.mixed(func, args, kwargs, cpu)
        local_args, local_kwargs = tree_map(
            lambda t: t._local if isinstance(t, OnDevice) else t, (args, kwargs)
        )
        if target is not None:
            if target.type == "cuda":
                local_kwargs["device"] = torch.device("cpu")
                out_device: torch.device | None = target
            else:
                out_device = None  # .cpu(), .to("cpu"): a plain CPU tensor
        elif name == "aten.copy_.default":
            out_device = args[0]._logical if isinstance(args[0], OnDevice) else None
        else:
            out_device = next(iter(devices), None)
        pin = bool(local_kwargs.get("pin_memory"))
        if pin:
            local_kwargs["pin_memory"] = False  # pinned memory is plain CPU memory here
        try:
            out = func(*local_args, **local_kwargs)
        except Exception as err:
            err.add_note(f"(the dry run ran {func} on the CPU tensors)")
            if _is_stop(err):  # a CUDA-only kernel: recorded, a worker that catches it stops
                self.stop(_stop_text(_worker_function(), err))
            raise
        if pin:
            return self.pinned(out)
        if out_device is None or collective and not devices:
            return out
        return tree_map(
            lambda t: OnDevice(t, out_device) if isinstance(t, torch.Tensor) else t, out
        )


def _remember_gloo_groups(rules: DeviceRules) -> None:
    """dist.new_group(backend="gloo") in the worker: its name joins `rules.gloo_groups`."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    make = c10d.new_group

    @functools.wraps(make)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        group = make(*args, **kwargs)
        backend = kwargs.get("backend", args[2] if len(args) > 2 else None)
        if group is not None and str(backend).lower() == "gloo":
            rules.gloo_groups.add(group.group_name)
        return group

    c10d.new_group = dist.new_group = new_group

    def object_coll_device(group: Any = None) -> str:
        """Object collectives stage their pickles on the group's device (torch picks it from
        the group's backend): CUDA on an NCCL group, the CPU on a group made with gloo."""
        return "cpu" if group is not None and group.group_name in rules.gloo_groups else "cuda"

    c10d._get_object_coll_device = object_coll_device


def _uncount_object_collectives(rules: DeviceRules) -> None:
    """What an object collective puts on the device (its pickles) is not the worker's device op."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def uncounted(collective: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(collective)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rules.uncounted += 1
            try:
                return collective(*args, **kwargs)
            finally:
                rules.uncounted -= 1

        return wrapper

    for name in _OBJECT_COLLECTIVES:
        wrapped = uncounted(getattr(c10d, name))
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)


# the reason CatchErrorsWrapper._handle_skip gets (torch/_dynamo/convert_frame.py, 2.13-2.15)
# for every frame while a non-infra dispatch mode is on the stack: the frame runs eagerly
_DYNAMO_SKIP = "non-infra torch dispatch mode present"
_COMPILE_STOP = "torch.compile: Dynamo does not compile under the dry run's dispatch mode"


def _worker_function() -> str:
    """The innermost function of the stack outside torch and this module (the worker's)."""
    inner = "?"
    for frame in traceback.extract_stack():
        path = Path(frame.filename).resolve()
        if path == _HERE or _TORCH in path.parents or "<" in frame.filename:
            continue
        inner = frame.name
    return inner


def _stop_compiles(module: Any) -> None:
    """The first frame Dynamo is asked to compile under the mode is a stop, not silent eager."""
    wrapper = module.CatchErrorsWrapper
    if getattr(wrapper, "_dry_run_stops", False):
        return
    handle = wrapper._handle_skip

    @functools.wraps(handle)
    def _handle_skip(self: Any, result: Any, frame: Any) -> Any:
        reason = getattr(result, "skip_reason", None) or ""
        if _active is not None and _DYNAMO_SKIP in reason:
            what = f"{_worker_function()} ({_COMPILE_STOP})"
            _active.stop(what)  # recorded: a worker that catches it still stops here
            raise CompileUnderDryRun(
                f"{what}: Dynamo was asked to compile {frame.f_code.co_name} "
                f"({Path(frame.f_code.co_filename).name}:{frame.f_code.co_firstlineno}) "
                f"and would skip it: {reason}"
            )
        return handle(self, result, frame)

    wrapper._handle_skip = _handle_skip
    wrapper._dry_run_stops = True


class _PatchOnImport:
    """A sys.meta_path finder: runs `patch(module)` once `name` is imported (import costs ~1 s,
    so the dry run does not import Dynamo for workers that never compile)."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            self.patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _catch_compiles() -> None:
    name = "torch._dynamo.convert_frame"
    if name in sys.modules:
        _stop_compiles(sys.modules[name])
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, _stop_compiles))


def _mode(rank: int) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    global _active
    rules = _active = DeviceRules(rank)
    _remember_gloo_groups(rules)
    _uncount_object_collectives(rules)

    class DeviceRulesMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            return rules(func, args, kwargs or {})

    return DeviceRulesMode()


# --- running a worker -------------------------------------------------------------------------


def _message(err: BaseException) -> str:
    """The error's first sentence, without addresses, paths or ports (deterministic)."""
    msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
    msg = re.sub(r"0x[0-9a-f]+", "0x...", msg)
    msg = re.sub(r"\[[^\]]*\](:\d+)?", "[...]", msg)  # paths, addresses, ports
    return msg.split(". ")[0][:160]


def _stop_text(inner: str, err: BaseException) -> str:
    return f"{inner} ({type(err).__name__}: {_message(err)})"


def _worker_frames(err: BaseException) -> list[traceback.FrameSummary]:
    """The traceback's frames outside torch, this module and the launcher (the worker's)."""
    return [
        frame
        for frame in traceback.extract_tb(err.__traceback__)
        if (path := Path(frame.filename).resolve()) not in (_HERE, _LAUNCH)
        and _TORCH not in path.parents
    ]


def _stop_point(err: BaseException) -> str:
    """The innermost worker function of the traceback and why it stopped, for 'checked up to'."""
    frames = _worker_frames(err)
    return _stop_text(frames[-1].name if frames else "?", err)


_CUDA_PACKAGE = _TORCH / "cuda"
# what a CPU-only build of torch raises where CUDA is asked for in C++
_CPU_BUILD_REFUSALS = ("without ATen_cuda library", "not compiled with CUDA")


def _is_stop(err: BaseException) -> bool:
    """An error from what the dry run cannot answer on a CPU: a kernel with no CPU twin
    (NotImplementedError "Could not run ... 'CPU' backend"), a `torch.cuda` function or a
    `torch._C._cuda_*` binding it does not answer (the CPU build's AttributeError, NameError,
    ...), an attribute the stream and event stand-ins lack, a CPU-build refusal raised in C++,
    or the torch.compile stop. Anything else a worker raises is the worker's error."""
    if isinstance(err, CompileUnderDryRun):
        return True
    text = str(err)
    if isinstance(err, NotImplementedError) and "Could not run" in text and "'CPU' backend" in text:
        return True
    if isinstance(err, AttributeError) and "torch._C" in text and "_cuda" in text:
        return True
    # the dry run's stand-ins lack what CUDA's streams and events have (OnDevice is a Tensor:
    # what it lacks, a CUDA tensor lacks too, the worker's own error)
    if isinstance(err, AttributeError) and isinstance(getattr(err, "obj", None), (_Stream, _Event)):
        return True
    # the CPU build refuses CUDA outside torch/cuda (`torch.Generator(device="cuda:0")`)
    if isinstance(err, RuntimeError) and any(s in text for s in _CPU_BUILD_REFUSALS):
        return True
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and _CUDA_PACKAGE in Path(frames[-1].filename).resolve().parents


def dry_worker(rank: int, world_size: int, fn: Callable[..., Any], args: Sequence[Any]) -> dict:
    """Run `fn(rank, world_size, *args)` on this rank as on `cuda:<rank>` under NCCL."""
    import helpers.launch

    _install()
    _answer_cuda_queries(rank, world_size)
    _record_cuda_stops()
    helpers.launch._device = torch.device("cuda", rank)
    mode = _mode(rank)
    _catch_compiles()
    try:
        with mode:
            fn(rank, world_size, *args)
    except BaseException as err:  # noqa: BLE001 - every end is a verdict
        text = f"{type(err).__name__}: {err}"
        if _active.breaches:  # the first breach, even if the worker caught it and went on
            raise DryRunStop(json.dumps(_breach_verdict(_active.breaches[0]))) from None
        if _MARK in text:
            verdict = _breach_verdict(text)
        elif _active.stops:  # the first stop met, even if the worker caught it
            verdict = _stop_verdict(_active.stops[0], err)
        elif _is_stop(err):
            verdict = {"kind": "checked up to", "what": _stop_point(err), "detail": _trace(err)}
        else:  # the worker's own error (an assert, a TypeError...): it fails, as on the GPU
            verdict = {
                "kind": "fails",
                "what": f"{type(err).__name__}: {_message(err)}",
                "detail": f"[rank {rank}, {_raised_at(err)}] the worker raised it\n{_trace(err)}",
            }
        raise DryRunStop(json.dumps(verdict)) from None
    if _active.breaches:  # the worker caught every breach it met: it still fails
        raise DryRunStop(json.dumps(_breach_verdict(_active.breaches[0])))
    if _active.stops:  # the worker caught the stop and went on: unchecked from there
        raise DryRunStop(json.dumps(_stop_verdict(_active.stops[0], None)))
    return {
        "kind": "device-checked",
        "device_ops": _active.device_ops,
        "device_collectives": _active.device_collectives,
    }


def _raised_at(err: BaseException) -> str:
    """file:line in function of the worker's innermost frame in the traceback."""
    frames = _worker_frames(err)
    if not frames:
        return "?"
    path = Path(frames[-1].filename).resolve()
    with contextlib.suppress(ValueError):
        path = path.relative_to(Path.cwd())
    return f"{path}:{frames[-1].lineno} in {frames[-1].name}"


def _trace(err: BaseException) -> str:
    return (
        "".join(traceback.format_tb(err.__traceback__))[-4000:]
        + f"{type(err).__name__}: {str(err)[:400]}"
        + "".join(f"\n{note}" for note in getattr(err, "__notes__", ()))
    )


def _stop_verdict(what: str, err: BaseException | None) -> dict:
    """The "checked up to" verdict of a stop the dry run raised itself."""
    detail = "" if err is None else "".join(traceback.format_tb(err.__traceback__))[-3000:]
    return {"kind": "checked up to", "what": what, "detail": detail + (str(err) if err else what)}


def _breach_verdict(text: str) -> dict:
    """The "fails" verdict of a DeviceCheckError's text (its first line after the mark)."""
    first = text[text.index(_MARK) + len(_MARK) :].strip().splitlines()[0]
    op, _, rest = first.partition(": ")
    what, _, where = rest.rpartition(" [")
    return {"kind": "fails", "what": f"{op} {what}", "detail": f"[{where}"}


def verdict_of_result(values: Sequence[dict]) -> Verdict:
    """The worker's verdict from every rank's (all ranks finished without a stop):
    "device-checked" where some rank ran an op or a collective on the device, else "no device
    op". The counts per rank go to `detail`."""
    counts = "; ".join(
        f"rank {rank}: {v['device_ops']} ops on the device, "
        f"{v['device_collectives']} collectives of device tensors"
        for rank, v in enumerate(values)
    )
    if any(v["device_ops"] or v["device_collectives"] for v in values):
        return Verdict("device-checked", "", counts)
    return Verdict(NO_DEVICE_OP, "nothing ran on the device", counts)


def _name_of(fn: Callable[..., Any]) -> str:
    target = fn.func if isinstance(fn, functools.partial) else fn
    return f"{target.__module__}.{target.__qualname__}"


def dry_run(
    fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), timeout_s: float = 120.0
) -> Verdict:
    """The dry run's verdict on worker `fn` at `world_size` ranks (see the module docstring)."""
    from helpers.launch import WorkerError, launch

    try:
        values = launch(
            dry_worker, world_size, args=(fn, tuple(args)), backend="gloo", timeout_s=timeout_s
        )
    except WorkerError as err:
        found = re.search(rf"rank (\d+) raised {_STOP}: (\{{.*\}})", str(err))
        if not found:  # a rank died (an abort in C++): the Python stack it was in
            frames = re.findall(r'File "([^"]+)", line \d+ in (\w+)', str(err))
            inner = [f for p, f in frames if "site-packages" not in p and "launch.py" not in p]
            where = inner[0] if inner else "?"
            return Verdict(
                "checked up to",
                f"{where} (the process aborted)",
                f"{_name_of(fn)}: {str(err)[-3000:]}",
            )
        verdict = json.loads(found.group(2))
        return Verdict(
            verdict["kind"],
            verdict["what"],
            f"{_name_of(fn)}, rank {found.group(1)}: {verdict['detail']}",
        )
    return verdict_of_result(values)


if __name__ == "__main__":  # pragma: no cover - python -m helpers.dryrun module:function N
    module, _, func = sys.argv[1].partition(":")
    import importlib

    print(dry_run(getattr(importlib.import_module(module), func), int(sys.argv[2])).text)
