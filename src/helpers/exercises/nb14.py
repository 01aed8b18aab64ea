"""Judges for notebook 14 (DDP under torch.compile, and the profiler's view).

The truths come from the installed torch: DDPOptimizer's own bucketing run on an FX trace of
`ddp_compile.Net` and of chains of Linear layers of other widths (no process group needed:
`compile_fn` cuts the buckets before it splits the graph), against which the reader's
`ddp_optimizer_buckets` runs in-process on the shown case and hidden ones; DDP's bucket
assignment (`dist._compute_bucket_assignment_by_size`) and Dynamo's skip rule
(`trace_rules.check`; for 14.4's reason, `check_file` on the files of the two decorated candidates'
wrappers and definitions, their `__module__` against `MOD_SKIPLIST` and `MOD_INLINELIST`, and the
rule map). No judge launches processes or compiles.
"""

from __future__ import annotations

import ast
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
from helpers.exercises import N_, Hint, as_int, binds, choice_set, exercise, tr, watching

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
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
        if isinstance(node, ast.Name) and node.id == "DDPOptimizer":
            names.add(node.id)
    return names


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
    truths = [[list(g) for g in ddp_optimizer_layers(*case)] for case in cases]
    codes, builtins = _library_code()
    for i, ((widths, cap, first), truth) in enumerate(zip(cases, truths, strict=True)):
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
        with _watching(codes, builtins) as hits:
            try:
                found = answer(list(sizes), cap, first)
            except Exception as e:  # noqa: BLE001 - the reader's code: its error is the hint
                raise Hint(
                    tr(
                        "{where}: your code raised {error}",
                        where=where,
                        error=f"{type(e).__name__}: {e}",
                    )
                ) from None
        if hits:
            raise Hint(refusal)
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


CANDIDATES = {
    "ReLU.forward": torch.nn.ReLU.forward,
    "DistributedDataParallel._run_ddp_forward": DDP._run_ddp_forward,
    "DistributedDataParallel.no_sync": DDP.no_sync,
    "dist.all_reduce": dist.all_reduce,
    "record_function.__enter__": torch.profiler.record_function.__enter__,
    "SGD.step": torch.optim.SGD.step,
    "SGD.zero_grad": torch.optim.SGD.zero_grad,
    "ddp_compile._train_step": ddp_compile._train_step,
}
#: 14.4: the two candidates whose verdict goes against the list their `__module__` is on
AGAINST = ("SGD.zero_grad", "DistributedDataParallel.no_sync")
#: 14.4: the stated reasons for those two; the judge decides from trace_rules which one holds
SKIP_REASONS = ("module", "inline", "table", "wrapper")


def skipped_frames() -> set[str]:
    """The CANDIDATES whose frames Dynamo skips, asked with its own rule."""
    from torch._dynamo import trace_rules

    return {name for name, fn in CANDIDATES.items() if trace_rules.check(fn)}


def _on(module: str, names: set[str]) -> bool:
    """`module` is one of `names` or inside one of them (trace_rules' lists hold module names)."""
    return any(module == m or module.startswith(m + ".") for m in names)


def skip_reasons() -> dict[str, bool]:
    """Which of SKIP_REASONS decides, for both AGAINST candidates, what trace_rules answers."""
    from torch._dynamo import trace_rules

    decides = {r: True for r in SKIP_REASONS}
    for name in AGAINST:
        fn = CANDIDATES[name]
        skipped = trace_rules.check(fn)
        defined = inspect.unwrap(fn)
        wrapper_file = fn.__code__.co_filename  # the code that runs: the wrapper's, if any
        by_module = _on(fn.__module__, trace_rules.MOD_SKIPLIST)
        by_inline = by_module and not _on(fn.__module__, trace_rules.MOD_INLINELIST)
        decides["module"] &= by_module == skipped
        decides["inline"] &= by_inline == skipped
        decides["table"] &= trace_rules.get_torch_obj_rule_map().get(fn) is not None
        decides["wrapper"] &= (
            defined is not fn
            and trace_rules.check_file(wrapper_file).skipped == skipped
            and trace_rules.check_file(defined.__code__.co_filename).skipped != skipped
        )
    return decides


def _under(fn: Any, package: str) -> bool:
    """The code that runs for `fn` lies in torch's `package` directory (e.g. "nn")."""
    root = os.path.dirname(torch.__file__)
    return os.path.abspath(fn.__code__.co_filename).startswith(os.path.join(root, package) + os.sep)


_SKIP_REASON_HINTS = {
    "module": N_(
        "torch.optim is on neither list and torch.nn is on MOD_SKIPLIST, yet these two go the "
        "other way: Dynamo looks up something other than the module a function belongs to"
    ),
    "inline": N_(
        "MOD_INLINELIST is asked only for a call from a frame Dynamo is tracing; as a first "
        "frame, DistributedDataParallel._run_ddp_forward, from the same module as no_sync, is "
        "skipped"
    ),
    "table": N_(
        "neither has an entry of its own in trace_rules' table of single functions: their "
        "verdict comes from the rules for files"
    ),
}


@exercise(
    "14.4",
    "Which frames Dynamo skips, and what decides it",
    look=N_(
        "section 2 (Dynamo's two rules for torch/nn); in torch/_dynamo/trace_rules.py, "
        "`check_file` and `MOD_SKIPLIST` above it, next to the file of the code each candidate "
        "runs (`fn.__code__.co_filename`, against `inspect.unwrap(fn)`'s)"
    ),
    reveal=N_(
        "`trace_rules.check(fn)` for each candidate (`CANDIDATES` in helpers/exercises/nb14.py), "
        "and `check_file` on the file of each one's wrapper and of its definition"
    ),
)
def skipped(answer: Any) -> str:
    collections = (set, frozenset, list, tuple)
    if not (
        isinstance(answer, (list, tuple))
        and len(answer) == 2
        and isinstance(answer[0], collections)
    ):
        raise Hint(
            tr(
                "give a pair (set of names, reason key), e.g. ({{'A.f', 'B.g'}}, 'module'); "
                "the reason keys are {reasons}",
                reasons=list(SKIP_REASONS),
            )
        )
    names, reason = answer
    given = choice_set(names, list(CANDIDATES), tr("names from CANDIDATES"), "{'A.f', 'B.g'}")
    if reason not in SKIP_REASONS:
        raise Hint(
            tr(
                "{reason!r} is not a reason key; choose one of {reasons}",
                reason=reason,
                reasons=list(SKIP_REASONS),
            )
        )
    truth = skipped_frames()
    decides = skip_reasons()
    holds = [r for r in SKIP_REASONS if decides[r]]
    if holds != ["wrapper"]:  # the world the verdict below explains
        raise Hint(
            tr(
                "this torch's trace rules no longer match the exercise (reasons that decide: "
                "{holds}); the notebook needs updating",
                holds=holds,
            ),
            counts=False,
        )
    ours = {n for n in CANDIDATES if n.startswith("ddp_compile.")}
    if given & ours - truth:
        raise Hint(
            tr(
                "code in src/helpers is not in torch at all: Dynamo compiles those frames "
                "(that is why the notebook's model is a class of its own)"
            )
        )
    if given - truth:
        raise Hint(
            tr(
                (
                    "{extra}: find the file of the code that runs when each is called; not "
                    "every file, of torch or not, lies under a directory on MOD_SKIPLIST"
                ),
                extra=sorted(given - truth),
            )
        )
    missing = truth - given
    if missing:
        in_nn = sum(_under(CANDIDATES[n], "nn") for n in missing)
        if in_nn == 0:
            raise Hint(
                tr(
                    (
                        "{n} more of them live in modules on MOD_SKIPLIST, torch.nn is not the "
                        "only one: look up the file each candidate's code lives in"
                    ),
                    n=len(missing),
                )
            )
        raise Hint(
            tr(
                (
                    "{n} more of them live in modules on MOD_SKIPLIST: {in_nn} in torch.nn, "
                    "{other} elsewhere; look up the file each candidate's code lives in"
                ),
                n=len(missing),
                in_nn=in_nn,
                other=len(missing) - in_nn,
            )
        )
    if reason != holds[0]:
        raise Hint(tr(_SKIP_REASON_HINTS[reason]))
    from torch._dynamo import trace_rules
    from torch.distributed._functional_collectives import traceable_collective_remaps

    # `dist.all_reduce` never reaches the trace rules from a compiled frame: Dynamo's
    # VariableBuilder rewrites it first (`CollectiveFunctionRewriteVariable.can_rewrite`)
    rewritten = sorted(n for n in truth if CANDIDATES[n] in traceable_collective_remaps)
    inlined = sorted(
        n
        for n in truth
        if n not in rewritten and not trace_rules.check(CANDIDATES[n], is_inlined_call=True)
    )
    root = os.path.dirname(torch.__file__)
    runs = {
        n: (
            CANDIDATES[n].__code__.co_qualname,
            os.path.relpath(CANDIDATES[n].__code__.co_filename, os.path.dirname(root)),
        )
        for n in AGAINST
    }
    runs["DistributedDataParallel.no_sync"] = (
        runs["DistributedDataParallel.no_sync"][0],
        os.path.basename(DDP.no_sync.__code__.co_filename),
    )
    dirs = sorted(
        {
            m
            for n in truth - set(AGAINST)
            for m in trace_rules.MOD_SKIPLIST
            if _under(CANDIDATES[n], m.removeprefix("torch.").replace(".", os.sep))
        }
    )
    return tr(
        (
            "{sorted_truth}, because of the file of the code that runs, whatever module a "
            "function belongs to: SGD.zero_grad runs {zero_code} (torch._disable_dynamo's "
            "wrapper) from {zero_file}, under torch._compile on MOD_SKIPLIST, and "
            "DistributedDataParallel.no_sync runs {sync_code} (contextlib.contextmanager's) "
            "from the standard library's {sync_file}, on no list. The other skipped ones' "
            "code lies under {dirs} (MOD_SKIPLIST); SGD.step's is in torch/optim, on no list, "
            "and src/helpers is not in torch. Called from a compiled frame, {inlined} are "
            "inlined rather than skipped (MOD_INLINELIST), and a call of {rewritten} is "
            "rewritten to a functional collective (`traceable_collective_remaps`, all_reduce to "
            "`_functional_collectives.all_reduce_inplace`) before any skip rule is asked."
        ),
        sorted_truth=sorted(truth),
        zero_code=runs["SGD.zero_grad"][0],
        zero_file=runs["SGD.zero_grad"][1],
        sync_code=runs["DistributedDataParallel.no_sync"][0],
        sync_file=runs["DistributedDataParallel.no_sync"][1],
        dirs=dirs,
        inlined=inlined,
        rewritten=rewritten,
    )
