"""Judges for notebook 14 (DDP under torch.compile, and the profiler's view).

The truths come from the installed torch: DDPOptimizer's own bucketing run on an FX trace of
`ddp_compile.Net` and of chains of Linear layers of other widths (no process group needed:
`compile_fn` cuts the buckets before it splits the graph), against which the reader's
`ddp_optimizer_buckets` runs in-process on the shown case and hidden ones; DDP's bucket
assignment (`dist._compute_bucket_assignment_by_size`); and Dynamo's skip rule for a first frame
(`trace_rules.check` on the frame's code object, as `convert_frame` asks it), against which the
reader's `first_frame_skipped` runs on the prompt's functions and hidden ones built at check time
(twelve of them drawn afresh at each check), with trace_rules' deciding functions refused while
it runs (their code swapped for a recorder, so that a thread that was running before is seen too;
verbatim copies). Both coding judges collect the reader's answers before they compute any truth. No
judge launches processes or compiles.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import textwrap
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import ddp_compile
from helpers.exercises import (
    N_,
    Hint,
    Sealed,
    as_int,
    binds,
    called_names,
    exercise,
    run_answer,
    started_process,
    tr,
    watching,
)

MIB = 2**20
#: 14.1: the prompt's case (section 3's bucket_cap_mb=3), then hidden ones: (widths of a chain
#: of Linear layers, or None for Net; bucket cap, first-bucket cap, in bytes)
SHOWN_SPLIT = (None, 3 * MIB, MIB)
HIDDEN_SPLITS = [
    (None, 2 * MIB, MIB),  # Net at 2 MiB
    (None, 25 * MIB, MIB),  # Net at DDP's default cap
    ((4, 4, 4, 4, 4), 160, 80),  # 80 B layers: buckets that reach the cap exactly
    ((8, 16, 4, 32, 8, 3), 600, 300),  # uneven layers
    ((8, 16, 4, 32, 8, 3), 600, 100),  # uneven layers, a first cap that closes on one layer
    ((4, 4, 64, 4, 4), 200, 100),  # a layer larger than the cap
    ((5, 7), 100, 50),  # one layer
]
SPLIT_CAP_MB = 1.5  # 14.2
PROFILE_CAP_MB, PROFILE_STEPS, PROFILE_ACCUM = 1, 3, 5  # 14.3


class _Chain(nn.Module):
    """Linear layers of the given widths with ReLU between them, like `ddp_compile.Net`."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


def _model(widths: tuple[int, ...] | None) -> nn.Module:
    return ddp_compile.make_model() if widths is None else _Chain(widths)


def layer_bytes(widths: tuple[int, ...] | None) -> list[int]:
    """Each layer's parameter bytes (weight + bias), forward order."""
    return [
        sum(p.numel() * p.element_size() for p in m.parameters()) for m in _model(widths).layers
    ]


@functools.cache  # one FX trace and bucketing per case (milliseconds, after the first import)
def ddp_optimizer_layers(
    widths: tuple[int, ...] | None, cap: int, first_cap: int | None
) -> tuple[tuple[int, ...], ...]:
    """DDPOptimizer's buckets as layer indices (forward order), from its own walk of an FX graph.

    `first_cap=None`: what `DDPOptimizer.__init__` fills in when the caller passes none.
    """
    import torch.fx
    from torch._dynamo.backends.distributed import DDPOptimizer  # slow imports: only here

    model = _model(widths)
    gm = torch.fx.symbolic_trace(model)
    kw = {} if first_cap is None else {"first_bucket_cap": first_cap}
    opt = DDPOptimizer(bucket_bytes_cap=cap, backend_compile_fn=lambda g, i: g, **kw)
    width = model.layers[0].in_features
    try:  # the buckets are cut first; splitting a plain FX graph (no Dynamo metadata) then fails
        opt.compile_fn(gm, [torch.zeros(2, width)])
    except AttributeError:
        pass
    return tuple(
        tuple(sorted({int(re.search(r"layers\D*(\d+)", n).group(1)) for n in b.params}))
        for b in opt.buckets
    )


def _walk(sizes: list[int], cap: int, first_cap: int, strict: bool = False) -> list[list[int]]:
    """A walk from the last layer, for recognising two usual mistakes.

    With strict=False and the two caps it is the right walk; the truth still comes from
    DDPOptimizer.
    """
    buckets: list[list[int]] = [[]]
    size = 0
    for i in reversed(range(len(sizes))):
        limit = first_cap if len(buckets) == 1 else cap
        if buckets[0] and (size > limit if strict else size >= limit):
            buckets.insert(0, [])
            size = 0
        buckets[0].insert(0, i)
        size += sizes[i]
    return buckets


#: Names whose call does the job for the reader.
_LIBRARY = {"DDPOptimizer", "compile_fn", "symbolic_trace", "_compute_bucket_assignment_by_size"}


def _library_code() -> tuple[set, set]:
    """The code objects (and builtins) of DDPOptimizer's and DDP's bucketing, for `_watching`."""
    import torch.fx
    from torch._dynamo.backends.distributed import DDPOptimizer

    fns = [DDPOptimizer.__init__, DDPOptimizer.compile_fn, torch.fx.symbolic_trace,
           torch.fx.Tracer.trace, dist._compute_bucket_assignment_by_size,
           torch._C._distributed_c10d._compute_bucket_assignment_by_size]  # fmt: skip
    codes, builtins = set(), set()
    for fn in fns:
        fn = inspect.unwrap(fn)
        if hasattr(fn, "__code__"):
            codes.add(fn.__code__)
        else:
            builtins.add(id(fn))
    return codes, builtins


_watching = watching


def _params(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


_takes = binds


def _called_names(fn: Any) -> set[str]:
    """The names `fn`'s source calls, and DDPOptimizer wherever it is named (a class can be
    used without being called by name: `cls = DDPOptimizer`)."""
    return called_names(fn, referenced={"DDPOptimizer"})


def _groups(value: Any) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for g in value:
        if not isinstance(g, (list, tuple)) or any(as_int(i) is None for i in g):
            return None
        out.append([as_int(i) for i in g])
    return out


@exercise(
    "14.1",
    "DDPOptimizer's split, written by you",
    look=N_(
        "section 3's excerpt: the loop over reversed(gm.graph.nodes) and its test of "
        "buckets[0].size against the two caps"
    ),
    reveal=N_(
        "`DDPOptimizer.compile_fn` on `torch.fx.symbolic_trace(model)`, its bucket list read "
        "after the walk (torch/_dynamo/backends/distributed.py)"
    ),
)
def split_code(answer: Any) -> str:
    if not callable(answer):
        raise Hint(
            tr(
                (
                    "give a function ddp_optimizer_buckets(layer_bytes, bucket_cap, "
                    "first_bucket_cap), found {answer!r}"
                ),
                answer=answer,
            )
        )
    if not _takes(answer, ([1, 2], 3, 4)):
        raise Hint(
            tr(
                (
                    "the function takes (layer_bytes, bucket_cap, first_bucket_cap); yours "
                    "takes {params}"
                ),
                params=_params(answer),
            )
        )
    refusal = tr(
        "do not run DDPOptimizer or DDP's bucketing: walk the list of sizes yourself, "
        "as section 3's excerpt walks the graph"
    )
    if _called_names(answer) & _LIBRARY:
        raise Hint(refusal)
    cases = [SHOWN_SPLIT, *HIDDEN_SPLITS]
    codes, builtins = _library_code()
    # every answer first, each under the watch; the truths only after (none is in a frame of
    # this judge while the reader's code runs), and a case's error in the cases' order
    answers = []
    for i, (widths, cap, first) in enumerate(cases):
        sizes = layer_bytes(widths)
        where = (
            tr("the prompt's case")
            if i == 0
            else tr(
                "a hidden case, layer_bytes={sizes}, bucket_cap={cap}, first_bucket_cap={first}",
                sizes=sizes,
                cap=cap,
                first=first,
            )
        )
        with _watching(codes, builtins, same_code=True, processes=True) as hits:
            try:
                answers.append((where, sizes, run_answer(where, answer, list(sizes), cap, first)))
            except Hint as raised:
                answers.append((where, sizes, raised))
        started_process(hits)
        if hits:
            raise Hint(refusal)
    for (where, sizes, found), case in zip(answers, cases, strict=True):
        if isinstance(found, Hint):
            raise found
        _, cap, first = case
        truth = [list(g) for g in ddp_optimizer_layers(*case)]
        got = _groups(found)
        if got is None:
            raise Hint(
                tr(
                    "return a list of buckets, each a list of layer indices, e.g. "
                    "[[0, 1], [2]]; found {found!r}",
                    found=found,
                )
            )
        if got == truth:
            continue
        if sorted(j for g in got for j in g) != list(range(len(sizes))):
            raise Hint(
                tr(
                    "{where}: every layer goes into exactly one bucket, layers 0..{last}",
                    where=where,
                    last=len(sizes) - 1,
                )
            )
        if got == truth[::-1] or [g[::-1] for g in got[::-1]] == truth:
            raise Hint(
                tr(
                    (
                        "{where}: list the buckets in forward order, the first layer's bucket "
                        "first and each bucket's layers in increasing order; the walk itself "
                        "goes from the last layer"
                    ),
                    where=where,
                )
            )
        if got == _walk(sizes, cap, first, strict=True):
            raise Hint(
                tr(
                    "{where}: a bucket that holds exactly its cap is full (the test is >=)",
                    where=where,
                )
            )
        if got == _walk(sizes, cap, cap) and first != cap:
            raise Hint(
                tr(
                    (
                        "{where}: the first bucket (the one holding the last layer) closes at "
                        "first_bucket_cap, the others at bucket_cap"
                    ),
                    where=where,
                )
            )
        n = len(sizes)
        from_first = [sorted(n - 1 - j for j in g) for g in _walk(sizes[::-1], cap, first)[::-1]]
        if got == from_first:
            raise Hint(
                tr(
                    (
                        "{where}: the walk starts at the last layer (backward's order), so the "
                        "first bucket holds the last layer"
                    ),
                    where=where,
                )
            )
        raise Hint(
            tr(
                (
                    "{where}: you made {n_got} buckets, DDPOptimizer {same}; before adding a "
                    "layer, is the current bucket already full?"
                ),
                where=where,
                n_got=len(got),
                same=tr("as many") if len(got) == len(truth) else tr("another number"),
            )
        )
    shown = [list(g) for g in ddp_optimizer_layers(*SHOWN_SPLIT)]
    return tr(
        (
            "{shown} for Net at bucket_cap_mb=3 (section 3's 2.0, 3.01 and 1.0 MiB), and the "
            "{hidden} hidden cases too (uneven layers, a bucket that reaches its cap exactly, "
            "a layer larger than the cap, one layer): walking from the last layer, a bucket "
            "closes before the next layer once it holds its cap (the first one's is "
            "first_bucket_cap), and the first layers fill the last bucket."
        ),
        shown=shown,
        hidden=len(HIDDEN_SPLITS),
    )


def ddp_buckets(cap_mb: float) -> int:
    """DDP's buckets for `Net` at an explicit cap (first bucket too), in backward order."""
    params = list(ddp_compile.make_model().parameters())[::-1]
    indices, _ = dist._compute_bucket_assignment_by_size(params, [int(cap_mb * MIB)] * 2)
    return len(indices)


def split_and_buckets(cap_mb: float = SPLIT_CAP_MB) -> tuple[int, int]:
    """(DDPOptimizer's subgraphs, DDP's buckets) for `Net` compiled at `bucket_cap_mb=cap_mb`.

    DDPOptimizer gets DDP's `bucket_bytes_cap` and no first-bucket cap (`CatchErrorsWrapper`).
    """
    return len(ddp_optimizer_layers(None, int(cap_mb * MIB), None)), ddp_buckets(cap_mb)


@exercise(
    "14.2",
    "Subgraphs and DDP's buckets at bucket_cap_mb=1.5",
    look=N_(
        "section 1 (DDP's first bucket under an explicit cap), section 2's excerpt of "
        "`CatchErrorsWrapper.__call__` (what DDPOptimizer is given) and section 3's constructor"
    ),
    reveal=N_(
        "`dist._compute_bucket_assignment_by_size(params[::-1], [cap, cap])` for DDP; "
        "DDPOptimizer's walk on an FX trace of `Net` for the subgraphs"
    ),
)
def split_vs_ddp(answer: Any) -> str:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2) or any(
        as_int(a) is None for a in answer
    ):
        raise Hint(tr("give a pair of whole numbers: (DDPOptimizer's subgraphs, DDP's buckets)"))
    sub, ddp = (as_int(a) for a in answer)
    t_sub, t_ddp = split_and_buckets()
    if (sub, ddp) == (t_sub, t_ddp):
        return tr(
            (
                "({t_sub}, {t_ddp}): DDPOptimizer is handed DDP's {cap} MiB cap but no "
                "first-bucket cap, so its first bucket closes at 1 MiB (one layer), the next ones "
                "at {cap} MiB (two layers), and the first layer is left alone in the last; DDP, "
                "given an explicit cap, uses {cap} MiB for its "
                "first bucket too. The split is DDPOptimizer's estimate of DDP's buckets, and "
                "here it misses."
            ),
            t_sub=t_sub,
            t_ddp=t_ddp,
            cap=SPLIT_CAP_MB,
        )
    if sub == ddp:
        raise Hint(
            tr(
                "the two first buckets differ: one is capped by what DDPOptimizer fills in, "
                "the other by the explicit bucket_cap_mb"
            )
        )
    if sub != t_sub:
        if sub == t_ddp:
            raise Hint(
                tr(
                    "DDPOptimizer is not handed DDP's first-bucket cap: which value does its "
                    "constructor fill in?"
                )
            )
        raise Hint(
            tr(
                "DDPOptimizer: walk the six layers from the last one; a bucket closes once it "
                "holds at least its cap (1 MiB and 2 KiB per layer)"
            )
        )
    raise Hint(
        tr(
            "DDP: an explicit bucket_cap_mb caps its first bucket too (section 1); a bucket "
            "closes once it holds at least the cap"
        )
    )


def profiled_allreduces(
    cap_mb: float = PROFILE_CAP_MB, steps: int = PROFILE_STEPS, accum: int = PROFILE_ACCUM
) -> int:
    """gloo:all_reduce events in one rank's trace: buckets x synced backwards, both phases."""
    synced = steps * accum + steps * 1  # phase "sync": every backward; "no_sync": the last
    return ddp_buckets(cap_mb) * synced


@exercise(
    "14.3",
    "All-reduces in a longer profile",
    look=N_(
        "section 5: what `profile_worker` runs inside the profiler, and why 30 = 3 x (8 + 2); "
        "section 3 for DDP's buckets at 1 MiB"
    ),
    reveal=N_(
        "`len(dist._compute_bucket_assignment_by_size(params[::-1], [cap, cap])[0])` buckets "
        "x (steps x accum + steps) synced backwards"
    ),
)
def profile_count(answer: Any) -> str:
    if as_int(answer) is None:
        raise Hint(tr("give a whole number of gloo:all_reduce events"))
    answer = as_int(answer)
    b, s, k = ddp_buckets(PROFILE_CAP_MB), PROFILE_STEPS, PROFILE_ACCUM
    truth = profiled_allreduces()
    if answer == truth:
        return tr(
            (
                "{truth} = {b} buckets x ({s} x {k} synced backwards + {s} x 1): no_sync "
                "skips the all-reduce of {k_1} of every {k} backwards; the warm-up iterations "
                "run in their own "
                "profile(...) blocks, before the one whose trace is written."
            ),
            truth=truth,
            b=b,
            s=s,
            k=k,
            k_1=k - 1,
        )
    if answer == b * 2 * s * k:
        raise Hint(tr("in the no_sync phase only the last micro-batch of each step all-reduces"))
    if answer == 2 * truth:
        raise Hint(
            tr(
                "c10d::allreduce_ and gloo:all_reduce are the same all-reduce recorded "
                "twice, and each rank writes its own trace: count one name in one file"
            )
        )
    if answer in (truth + 1 + b, truth + 2 * b):
        raise Hint(
            tr(
                "the warm-up iterations run in their own `profile(...)` blocks, before the one "
                "whose trace is written (`profile_worker`)"
            )
        )
    if answer == truth // b:
        raise Hint(tr("one all-reduce per bucket per synced backward: how many buckets at 1 MiB?"))
    if answer * b == truth * ddp_buckets(2):
        raise Hint(
            tr(
                "section 5's 3 buckets are DDP's at bucket_cap_mb=2; at an explicit 1 MiB "
                "cap each 1 MiB layer fills a bucket"
            )
        )
    raise Hint(
        tr(
            "count DDP's buckets at the explicit 1 MiB cap, then the backward passes that "
            "all-reduce in each phase, outside the warm-up"
        )
    )


#: 14.4: the functions the prompt names (section 2's four first), by the name it gives them
FIRST_FRAME_SHOWN = {
    "DistributedDataParallel.forward": DDP.forward,
    "Sequential.forward": nn.Sequential.forward,
    "Linear.forward": nn.Linear.forward,
    "Net.forward": ddp_compile.Net.forward,
    "ReLU.forward": nn.ReLU.forward,
    "DistributedDataParallel._run_ddp_forward": DDP._run_ddp_forward,
    "DistributedDataParallel.no_sync": DDP.no_sync,
    "dist.all_reduce": dist.all_reduce,
    "record_function.__enter__": torch.profiler.record_function.__enter__,
    "SGD.step": torch.optim.SGD.step,
    "SGD.zero_grad": torch.optim.SGD.zero_grad,
    "ddp_compile._train_step": ddp_compile._train_step,
}


def _wraps(fn: Any) -> Any:
    """A functools.wraps wrapper of `fn`, defined here (in src/helpers): same name and module."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def _fsdp_forward() -> Any:
    """A function `forward` whose code names torch/testing/_internal/common_fsdp.py as its file:
    for Dynamo a frame of it is one of that file's (the module cannot be imported here)."""
    from torch._dynamo import trace_rules

    path = trace_rules._module_dir(torch) + "testing/_internal/common_fsdp.py"
    namespace: dict = {}
    exec(compile("def forward(self, x):\n    return x\n", path, "exec"), namespace)  # noqa: S102
    return namespace["forward"]


#: 14.4: the fresh cases' description (their function's name and file, as the hint shows them)
_FRESH_CASE = N_("a function {name} compiled at check time in {path}")


def _shown_path(path: str) -> str:
    """A file name as a fresh case's description shows it: under torch/ or the standard
    library's directory."""
    from torch._dynamo import trace_rules

    torch_dir = trace_rules._module_dir(torch)
    std = os.path.dirname(os.__file__) + "/"
    if path.startswith(torch_dir):
        return "torch/" + path[len(torch_dir) :]
    return tr("the standard library's {path}", path=path.removeprefix(std))


def _fresh_places() -> list[tuple[str, str]]:
    """(file name, function name) for 14.4's fresh cases, drawn at each call (os.urandom): in
    pairs that share a directory, or whose names share a start, and that the rules for files
    tell apart, so that a table of answers by directory, by file or by a name's pattern, made
    before the check or learnt from its hints, gets some of them wrong. The lists' entries are
    compared as the start of the file name: an entry of MOD_SKIPLIST also holds a file whose
    name extends the entry's (torch/nnab.py), FORCE_SKIP_FILES and the standard library's
    single files of SKIP_DIRS only themselves. The new names are random words of random length
    (a file name that happens to start like an entry is one more such case), the new
    directories random in number; each truth is asked of trace_rules like every case's, none is
    assumed here."""
    import random
    import string
    import unittest

    from torch._dynamo import trace_rules

    draw = random.SystemRandom()

    def word() -> str:
        return "".join(draw.choice(string.ascii_lowercase) for _ in range(draw.randint(3, 9)))

    def below() -> str:  # a new module, at a depth of 0 to 2 new directories
        return "".join(f"{word()}/" for _ in range(draw.randint(0, 2))) + f"{word()}.py"

    std = os.path.dirname(os.__file__) + "/"
    skip = draw.choice(sorted(trace_rules.get_mod_skiplist()))
    legacy = draw.choice(sorted(trace_rules.get_legacy_mod_inlinelist()))
    force = draw.choice(sorted(trace_rules.FORCE_SKIP_FILES))
    std_skip = draw.choice(sorted(d for d in trace_rules.SKIP_DIRS if d.startswith(std)))
    unit = trace_rules._module_dir(unittest)
    places = [
        skip + f"{word()}.py",  # a name that extends a MOD_SKIPLIST entry's
        os.path.dirname(skip) + f"/{word()}.py",  # the same directory, a new name
        skip + "/" + below(),  # under a MOD_SKIPLIST entry
        legacy + draw.choice([f"{word()}.py", "/" + below(), ".py"]),  # LEGACY_MOD_INLINELIST
        os.path.dirname(legacy) + "/" + below(),  # beside it: the file rules below it decide
        force,  # a force-skipped file, under a new function name
        force.removesuffix(".py") + f"{word()}.py",  # a name that extends it
        std_skip + below() if std_skip.endswith("/") else std_skip,  # SKIP_DIRS (the stdlib's)
        std_skip.rstrip("/").removesuffix(".py") + f"{word()}.py",  # a name that extends it
        unit + below(),  # the standard library's unittest directory
        unit.rstrip("/") + f"{word()}.py",  # a name that extends it
    ]
    fresh = [(path, f"{word()}_{word()}") for path in places]
    return [*fresh, (legacy + "/" + below(), "__getattr__")]  # the name rule, in a traced file


def _fresh_function(path: str, name: str) -> Any:
    """A function `name` compiled afresh, whose code names the file `path`."""
    namespace: dict = {}
    exec(compile(f"def {name}(x):\n    return x\n", path, "exec"), namespace)  # noqa: S102
    return namespace[name]


class _Lazy:
    """A class of src/helpers with a `__getattr__` (14.4's case of a rule by name)."""

    def __getattr__(self, name: str) -> str:
        return name


def first_frame_cases() -> list[tuple[Any, Any, bool]]:
    """14.4's cases, (name, function, shown): the prompt's, then the hidden ones, the last of them
    drawn afresh at each call (`_fresh_places`). A name is a msgid, or (msgid, its fields) for a
    fresh case. The fixed ones come in pairs that share a name and a module (functools.wraps
    copies both) or a file, and differ in what decides."""
    import copy
    import typing

    import torch.distributed.device_mesh as device_mesh
    import torch.nn.attention.flex_attention as flex
    import torch.nn.functional as F
    import torch.nn.utils.parametrize as parametrize

    hidden: list[tuple[Any, Any]] = [
        (N_("a functools.wraps wrapper defined in src/helpers around torch.nn.Module.train"),
         _wraps(nn.Module.train)),
        (N_("torch.nn.Module.train, a method of torch.nn"), nn.Module.train),
        (N_("ddp_compile.make_model, a function of src/helpers"), ddp_compile.make_model),
        (N_("torch._disable_dynamo applied to ddp_compile.make_model"),
         torch._disable_dynamo(ddp_compile.make_model)),
        (N_("torch.nn.functional.relu, a function of torch.nn"), F.relu),
        (N_("torch._disable_dynamo applied to torch.nn.functional.relu"),
         torch._disable_dynamo(F.relu)),
        (N_("torch.nn.utils.parametrize.cached, a contextlib.contextmanager"), parametrize.cached),
        (N_("the generator function that parametrize.cached wraps (its __wrapped__)"),
         parametrize.cached.__wrapped__),
        (N_("flex_attention, a function of torch.nn.attention.flex_attention"),
         flex.flex_attention),
        (N_("DeviceMesh.__init__, a method of torch.distributed.device_mesh"),
         device_mesh.DeviceMesh.__init__),
        (N_("DeviceMesh.size, a method of torch.distributed.device_mesh"),
         device_mesh.DeviceMesh.size),
        (N_("StepLR.get_lr, a method of torch.optim.lr_scheduler"),
         torch.optim.lr_scheduler.StepLR.get_lr),
        (N_("copy.deepcopy, from the standard library"), copy.deepcopy),
        (N_("textwrap.dedent, from the standard library"), textwrap.dedent),
        (N_("typing.cast, from the standard library"), typing.cast),
        (N_("typing.get_origin, from the standard library"), typing.get_origin),
        (N_("a function forward compiled here with the file name torch/testing/_internal/"
            "common_fsdp.py (that module itself needs expecttest)"), _fsdp_forward()),
        (N_("_Lazy.__getattr__, a method of a class defined in src/helpers"), _Lazy.__getattr__),
    ]  # fmt: skip
    for path, name in _fresh_places():
        hidden.append(((_FRESH_CASE, {"name": name, "path": _shown_path(path)}),
                       _fresh_function(path, name)))  # fmt: skip
    return [(n, f, True) for n, f in FIRST_FRAME_SHOWN.items()] + [(d, f, False) for d, f in hidden]


def _case_name(name: Any) -> str:
    """A case's name in the current language (a msgid, or a msgid and its fields)."""
    return tr(name[0], **name[1]) if isinstance(name, tuple) else tr(name)


#: trace_rules' functions that answer 14.4's question (refused while the reader's code runs)
_DECIDERS = ("check", "check_verbose", "check_file", "lookup", "lookup_inner", "_lookup_inner",
             "lookup_callable", "get_skip_reason")  # fmt: skip


def _deciders() -> tuple[list, list[str]]:
    """The functions of `_DECIDERS`, and those of them whose code no longer comes from
    trace_rules' own file (replaced in this kernel: the judge's truth would be the
    replacement's)."""
    from torch._dynamo import trace_rules

    fns, replaced = [], []
    for name in _DECIDERS:
        fn = inspect.unwrap(getattr(trace_rules, name, None))
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        fns.append(fn)
        if os.path.abspath(code.co_filename) != os.path.abspath(trace_rules.__file__):
            replaced.append(name)
    return fns, replaced


def _rules_state() -> tuple:
    """What trace_rules decides a first frame from (its lists, the table's string keys, the
    unittest switch), to tell whether the reader's code changed it while it ran."""
    from torch._dynamo import trace_rules

    table = trace_rules.get_torch_obj_rule_map()
    return (
        tuple(sorted(trace_rules.get_mod_skiplist())),
        tuple(sorted(trace_rules.get_legacy_mod_inlinelist())),
        tuple(sorted(trace_rules.get_mod_inlinelist())),
        tuple(sorted(trace_rules.FORCE_SKIP_FILES)),
        tuple(trace_rules.SKIP_DIRS),
        trace_rules.SKIP_DIRS_RE.pattern,
        trace_rules._force_inline_flag,
        tuple(sorted((k, v.__name__) for k, v in table.items() if isinstance(k, str))),
        len(table),
        torch._dynamo.config.enable_trace_unittest,
        torch._dynamo.config.dont_skip_tracing,
    )


#: 14.4: what to think about, by what decided the case (a phrase of trace_rules' reason)
_FIRST_FRAME_QUESTIONS = (
    ("typing.cast", N_("does the entry point decide anything on the code object itself, before "
                       "it asks the table?")),
    ("get_torch_obj_rule_map", N_("is anything asked before the rules for files?")),
    ("__getattr__", N_("is anything asked about the function's name before the rules for "
                       "files?")),
    ("force-skipped", N_("read check_file from its first test: is any single file decided "
                         "before the lists?")),
    ("LEGACY_MOD_INLINELIST", N_("which of check_file's lists does its file lie under, and "
                                 "which of them is asked first?")),
    ("unittest directory", N_("read check_file between its lists: is a directory of the "
                              "standard library skipped by a test of its own?")),
    ("skip directory", N_("which of check_file's lists name directories outside torch?")),
    ("MOD_SKIPLIST", N_("which of check_file's lists hold the file of the code that runs, and "
                        "which of them are asked for a first frame?")),
    ("inlined by default", N_("which of check_file's lists, if any, holds the file of the code "
                              "that runs when it is called?")),
)  # fmt: skip

#: 14.4: the question for a file that a list's entry holds, or seems to, only by its name's start
_BY_PREFIX = N_(
    "how does check_file compare a file name with a list's entries: as a module name, a "
    "directory, a whole file name, or the start of a string?"
)


def _by_prefix(path: str, reason: str) -> bool:
    """Whether the file's verdict turns on how a list compares names: a list's entry holds it
    as the start of its name only (torch/nnx_1.py under torch/nn), or the file extends the
    name of an entry that holds no such file (lr_scheduler_1.py beside lr_scheduler.py)."""
    from torch._dynamo import trace_rules

    match = re.search(r"(?:MOD_SKIPLIST|LEGACY_MOD_INLINELIST) \((.*)\)$", reason)
    if match:
        rest = path[len(match.group(1)) :]
        return not rest.startswith(("/", ".py"))
    std = os.path.dirname(os.__file__) + "/"
    exact = [*trace_rules.FORCE_SKIP_FILES]
    exact += [d for d in trace_rules.SKIP_DIRS if d.startswith(std)]
    stems = [e.rstrip("/").removesuffix(".py") for e in exact]
    unittest_dir = trace_rules._module_dir(__import__("unittest"))
    stems.append(unittest_dir.rstrip("/"))
    return "inlined by default" in reason and any(path.startswith(stem) for stem in stems)


def _first_frame_question(fn: Any, yours: bool) -> str:
    """The question a wrong verdict on `fn` gets: the decorated case first, then by the rule that
    decided (trace_rules' own reason for it)."""
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    inner = inspect.unwrap(fn)
    code = getattr(inner, "__code__", None)
    if (
        inner is not fn
        and code is not None
        and code.co_filename != fn.__code__.co_filename
        and yours == trace_rules.check(code)
    ):
        return tr("which code runs when it is called, and in which file does that code lie?")
    reason = trace_rules.check_verbose(fn.__code__).reason or ""
    rule = trace_rules.get_torch_obj_rule_map().get(fn)
    if "typing.cast" not in reason and rule is not None and yours == (rule is SkipFunctionVariable):
        return tr(
            "Dynamo decides a frame on its code object, so which key of the table of single "
            "functions could a frame match, and which entries have such keys?"
        )
    if _by_prefix(trace_rules._as_posix_path(fn.__code__.co_filename), reason):
        return tr(_BY_PREFIX)
    for phrase, question in _FIRST_FRAME_QUESTIONS:
        if phrase in reason:
            return tr(question)
    return tr("follow trace_rules' steps for a first frame in order: the table, then check_file")


def _first_frame_verdict(n_shown: int, n_hidden: int) -> str:
    """The right answer's explanation, from the installed torch; a Hint (not the reader's try)
    where this torch no longer behaves as it says."""
    import contextlib
    import types
    import typing
    import unittest

    import torch.distributed.device_mesh as device_mesh
    import torch.nn.functional as F
    from torch._dynamo import trace_rules
    from torch._dynamo.convert_frame import has_tensor_in_frame
    from torch._dynamo.variables import TorchInGraphFunctionVariable

    site = os.path.dirname(os.path.dirname(torch.__file__))
    zero, sync = torch.optim.SGD.zero_grad, DDP.no_sync
    body = inspect.unwrap(sync)
    table = trace_rules.get_torch_obj_rule_map()
    keys = [k for k in table if isinstance(k, str)]
    init = device_mesh.DeviceMesh.__init__
    # the frame of no_sync's wrapper as convert_frame sees it: its arguments hold the module
    sync_frame = types.SimpleNamespace(
        f_code=sync.__code__, f_globals=vars(contextlib), f_locals={"args": (nn.Linear(1, 1),)}
    )
    holds = {
        "typing.cast's code is skipped before the table": (
            "typing.cast" in (trace_rules.check_verbose(typing.cast.__code__).reason or "")
            and not trace_rules.check(typing.get_origin.__code__)
        ),
        "the table's keys for a frame are <file>#<name> of torch/testing/_internal": (
            bool(keys) and all("#" in k and "/torch/testing/_internal/" in k for k in keys)
        ),
        "relu's entry puts it in the graph, DeviceMesh.__init__'s skips it; frames differ": (
            table.get(F.relu) is TorchInGraphFunctionVariable
            and not trace_rules.check(F.relu)
            and trace_rules.check(F.relu.__code__)
            and trace_rules.check(init)
            and not trace_rules.check(init.__code__)
        ),
        "zero_grad's wrapper is skipped, and runs it under torch._dynamo.disable": (
            trace_rules.check(zero.__code__)
            and not trace_rules.check(inspect.unwrap(zero).__code__)
            and "torch._dynamo.disable(fn" in inspect.getsource(torch._disable_dynamo)
        ),
        "no_sync's helper is traced and its frame holds the module, its body's frame skipped": (
            not trace_rules.check(sync.__code__)
            and has_tensor_in_frame(sync_frame)
            and body is not sync
            and trace_rules.check(body.__code__)
        ),
        "unittest's directory is skipped (enable_trace_unittest off)": (
            not torch._dynamo.config.enable_trace_unittest
            and "unittest directory"
            in (trace_rules.check_verbose(unittest.TestCase.assertEqual.__code__).reason or "")
        ),
        "MOD_INLINELIST is asked only for an inlined call": (
            trace_rules.check(DDP.forward.__code__)
            and not trace_rules.check(DDP.forward.__code__, True)
        ),
    }
    broken = [claim for claim, ok in holds.items() if not ok]
    if broken:
        raise Hint(
            tr(
                "this torch's trace rules no longer match the exercise ({broken}); the notebook "
                "needs updating",
                broken=broken,
            ),
            counts=False,
        )
    return tr(
        (
            "all {n} functions as Dynamo's trace rules answer them ({shown} shown, {hidden} "
            "hidden). A frame is decided on its code object (convert_frame asks "
            "trace_rules.check(frame.f_code)). The entry point first skips typing.cast's code "
            "(a no-op, skipped at the top level); then the table of single functions is looked "
            'up by "<file>#<name>", keys only entries under torch/testing/_internal have; the '
            "table by object decides for an inlined call and for the wrapper torch.compile(fn) "
            "puts around a function (_TorchDynamoContext.__call__ in eval_frame.py), not for a "
            "frame: torch.nn.functional.relu's entry there says in graph (not skipped: a call "
            "of it becomes one node of the graph), yet its frame is skipped like "
            "ReLU.forward's in torch/nn, and DeviceMesh.__init__'s says skipped, yet its frame "
            "is traced. Next a function named __getattr__ is skipped, then check_file decides "
            "on the file of the code object that runs, for a decorated function its wrapper's. "
            "For SGD.zero_grad that is {zero_code} in {zero_file} (torch._compile, on "
            "MOD_SKIPLIST); when called, that wrapper runs zero_grad under "
            "torch._dynamo.disable, which turns Dynamo off for the call whatever the rules say. "
            "For DistributedDataParallel.no_sync it is {sync_code} in the standard library's "
            "{sync_file}, on no list, so traced (the trace rules' answer; its arguments hold "
            "the DDP module, so convert_frame's test for tensors in a frame does not pass it "
            "over either): that frame only builds the context manager, and no_sync's own body, "
            "a generator in {body_file}, runs at __enter__ in a frame of its own, which the "
            "rules for files skip. In check_file the files it skips by their whole name "
            "({force}) come first, LEGACY_MOD_INLINELIST wins over MOD_SKIPLIST, the standard "
            "library's unittest directory is skipped before SKIP_DIRS (enable_trace_unittest "
            "is off by default), an entry of a list holds every file whose name starts with "
            "it (torch/nn also holds torch/nnx.py), and MOD_INLINELIST is asked only for an "
            "inlined call; and the forward of a torch.nn module is traced as a first frame "
            "after all when that module has hooks."
        ),
        n=n_shown + n_hidden,
        shown=n_shown,
        hidden=n_hidden,
        zero_code=zero.__code__.co_qualname,
        zero_file=os.path.relpath(zero.__code__.co_filename, site),
        sync_code=sync.__code__.co_qualname,
        sync_file=os.path.basename(sync.__code__.co_filename),
        body_file=os.path.relpath(body.__code__.co_filename, site),
        force=", ".join(sorted(os.path.relpath(f, site) for f in trace_rules.FORCE_SKIP_FILES)),
    )


@exercise(
    "14.4",
    "Dynamo's first-frame rule, written by you",
    look=N_(
        "section 2 (the rules asked live) and, in torch/_dynamo/trace_rules.py, the path of a "
        "call that is not inlined: `check_verbose` (its own test before the table), the three "
        "steps of `_lookup_inner`, then `check_file`, every test in it, and the lists above it"
    ),
    reveal=N_(
        "`trace_rules.check_verbose(fn.__code__)` on each case (a frame is decided on its code "
        "object); the hidden ones are built in helpers/exercises/nb14.py, the last of them "
        "drawn afresh at each check"
    ),
)
def first_frame(answer: Any) -> str:
    if not callable(answer):
        raise Hint(tr("give a function first_frame_skipped(fn), found {answer!r}", answer=answer))
    if not _takes(answer, (len,)):
        raise Hint(
            tr(
                "the function takes one argument, fn (a function); yours takes {params}",
                params=_params(answer),
            )
        )
    import numpy as np
    from torch._dynamo import trace_rules

    deciders, replaced = _deciders()
    if replaced:
        raise Hint(
            tr(
                "trace_rules' own functions were replaced in this kernel ({names}): restart the "
                "kernel and run this cell again",
                names=replaced,
            ),
            counts=False,
        )
    codes = {fn.__code__ for fn in deciders}
    cases = first_frame_cases()
    refusal = tr(
        "do not ask Dynamo's own skip rule (trace_rules' functions that decide it, by whatever "
        "name, in whichever thread): apply the table and the rules for files yourself"
    )
    state = _rules_state()
    # what the truths are computed from, frozen before the reader's code runs: every binding of
    # trace_rules (the deciders, its lists, `_force_inline_flag`) and its functions' code, each
    # case's code object, the interpreter's hooks; refused after each answer if one moved, and
    # the truths computed from the saved objects only
    seal = Sealed([(trace_rules, n) for n in vars(trace_rules) if not n.startswith("__")],
                  [fn for _, fn, _ in cases])  # fmt: skip
    # every answer first, each under the watch (the deciders' code swapped for a recorder, so a
    # thread that was running before is seen too), as a plain bool; the truths only after, so
    # that none is in a frame of this judge while the reader's code runs
    answers: list = []
    for name, fn, shown in cases:
        where = name if shown else tr("a hidden case ({case})", case=_case_name(name))
        with watching(codes, same_code=True, swap=deciders, processes=True) as hits:
            try:
                found = run_answer(where, answer, fn)
                if type(found) not in (bool, np.bool_):
                    raise Hint(
                        tr(
                            "return True (the trace rules skip the frame) or False (they trace "
                            "it), found {found!r}",
                            found=found,
                        )
                    )
                answers.append(bool(found))
            except Hint as raised:
                answers.append(raised)
        started_process(hits)
        if hits:
            raise Hint(refusal)
        seal.refuse()
    if _rules_state() != state:
        raise Hint(
            tr(
                "your function changed trace_rules' lists, its table or Dynamo's configuration: "
                "read them, do not write them; restart the kernel and run this cell again"
            )
        )
    for (name, fn, shown), found in zip(cases, answers, strict=True):
        where = name if shown else tr("a hidden case ({case})", case=_case_name(name))
        if isinstance(found, Hint):
            raise found
        # a frame is decided on its code object (convert_frame: trace_rules.check(frame.f_code)),
        # here the saved `check` on the case's saved code
        truth = seal.value(trace_rules, "check")(seal.code(fn))
        if found == truth:
            continue
        question = _first_frame_question(fn, found)
        if not shown:  # a bool: the hint says which case and what decides it, not the answer
            raise Hint(
                tr(
                    "{where}: your function's answer is not the trace rules'; {question}",
                    where=where,
                    question=question,
                )
            )
        if truth:
            raise Hint(
                tr(
                    "{where}: the trace rules skip it as a first frame, your function returns "
                    "False; {question}",
                    where=where,
                    question=question,
                )
            )
        raise Hint(
            tr(
                "{where}: the trace rules do not skip it as a first frame, your function returns "
                "True; {question}",
                where=where,
                question=question,
            )
        )
    n_shown = sum(shown for _, _, shown in cases)
    return _first_frame_verdict(n_shown, len(cases) - n_shown)
