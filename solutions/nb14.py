"""Worked solutions to notebook 14's exercises (DDP under torch.compile, the profiler)."""


# 14.1 DDPOptimizer's split. `compile_fn` walks the graph from its last node; before each node
# it opens a new bucket if the current one is full: the first (the one backward fills first)
# at first_bucket_cap, the others at bucket_cap, "full" meaning size >= cap. Every layer's
# output feeds the next, so a full bucket always closes (`bucket_has_external_output`).
# Net at bucket_cap_mb=3 (1 MiB + 2 KiB per layer, first cap 1 MiB):
#   layer 5 -> 1.00 MiB: full; layers 4, 3, 2 -> 3.01 MiB: full; layers 1, 0 -> 2.00 MiB.
#   In forward order: [[0, 1], [2, 3, 4], [5]] (section 3's 2.0, 3.01 and 1.0 MiB).
def ddp_optimizer_buckets(layer_bytes, bucket_cap, first_bucket_cap):
    """DDPOptimizer's buckets for a chain of layers: lists of layer indices, forward order."""
    buckets = [[]]  # buckets[0] is the one being filled
    size = 0
    for i in reversed(range(len(layer_bytes))):
        cap = first_bucket_cap if len(buckets) == 1 else bucket_cap
        if size >= cap:
            buckets.insert(0, [])
            size = 0
        buckets[0].insert(0, i)
        size += layer_bytes[i]
    return buckets


# 14.2 Net at bucket_cap_mb=1.5. DDPOptimizer gets DDP's bucket_bytes_cap (1.5 MiB) and no
# first-bucket cap, so its constructor fills in dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB:
#   [5] (1 MiB: full), [4, 3] (2 MiB >= 1.5), [2, 1], [0]: 4 subgraphs.
# DDP with an explicit cap uses 1.5 MiB for its first bucket too (section 1):
#   [5, 4], [3, 2], [1, 0]: 3 buckets.
SPLIT_VS_DDP = (4, 3)

# 14.3 gloo:all_reduce events in one rank's trace if `profile_worker` ran 3 steps per phase,
# 5 micro-batches per step, bucket_cap_mb=1.
# DDP's buckets at an explicit 1 MiB cap: 6 (each 1 MiB weight fills one; section 3 says 6).
# Phase "sync": 3 steps x 5 backwards, all synced = 15. Phase "no_sync": only the last of the 5
# micro-batches syncs: 3 x 1 = 3. 6 buckets x 18 synced backwards = 108. The two warm-up
# iterations run in their own `profile(...)` blocks, before the one whose trace is written, and
# c10d::allreduce_ is the same all-reduce once more.
PROFILE_ALLREDUCES = 108


# 14.4 Dynamo's first-frame rule. convert_frame decides a frame Dynamo meets while it traces
# nothing with trace_rules.check(frame.f_code, frame=frame): on the frame's CODE OBJECT (for a
# module without hooks the frame changes nothing; the default config). check_verbose first
# skips typing.cast's own code ("typing.cast is a no-op, skip at top level": the code object
# itself, before the table); then lookup_inner -> _lookup_inner has no function object, only
# the code's name and file:
# (1) the table of single functions (`get_torch_obj_rule_map()`) looked up by the string
# "<file>#<name>" (a resumed frame by "<file>#torch_dynamo_resume_in"): only the `forward`s of
# a few files of torch/testing/_internal have such keys, all traced. The table's entries by
# object (F.relu: in graph, not skipped; DeviceMesh.__init__: skipped) decide for an inlined
# call and for the wrapper torch.compile(fn) puts around fn (eval_frame.py), never for a frame:
# F.relu's frame is skipped (torch/nn is on MOD_SKIPLIST), DeviceMesh.__init__'s traced
# (LEGACY_MOD_INLINELIST).
# (2) a name rule: a top-level `__getattr__` is skipped. (3) check_file on the code's file, the
# wrapper's for a decorated function (SGD.zero_grad: _disable_dynamo's `inner` in
# torch/_compile.py, skipped; DDP.no_sync: contextlib's `helper`, on no list, traced), asked as
# a first frame, in its order: FORCE_SKIP_FILES (lr_scheduler.py, the whole name): skipped;
# LEGACY_MOD_INLINELIST's entries: not skipped; the standard library's unittest directory
# (config.enable_trace_unittest is False by default): skipped; SKIP_DIRS (abc.py, copy.py,
# importlib/, random.py, re/, linecache.py of the standard library, the third-party skips, as
# one regex): skipped; then MOD_SKIPLIST's entries: skipped; else traced. The lists' entries
# are compared as the START of the file name ("torch._compile" -> .../torch/_compile, which
# torch/_compile.py starts with, and so does torch/_compilex.py); an entry that names a file
# (copy.py, lr_scheduler.py) holds only that file. MOD_INLINELIST (torch.nn, torch.distributed
# are on it) is asked only for an inlined call, so it plays no part here.
def _frame_rule(code):
    """The table's entry for a frame of `code` (by "<file>#<name>"), or None."""
    from torch._dynamo import trace_rules

    prefix = trace_rules.TORCH_DYNAMO_RESUME_IN_PREFIX
    name = prefix if code.co_name.startswith(prefix) else code.co_name
    return trace_rules.get_torch_obj_rule_map().get(code.co_filename + "#" + name)


def first_frame_skipped(fn):
    """True when Dynamo's trace rules skip a frame of `fn` as the first frame of a compile."""
    import typing
    import unittest

    import torch
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    code = fn.__code__  # the code that runs: for a decorated function, its wrapper's
    if code is typing.cast.__code__:
        return True
    rule = _frame_rule(code)
    if rule is not None:
        return rule is SkipFunctionVariable
    if code.co_name == "__getattr__":
        return True
    path = trace_rules._as_posix_path(code.co_filename)
    if path in trace_rules.FORCE_SKIP_FILES:
        return True
    if any(path.startswith(d) for d in trace_rules.get_legacy_mod_inlinelist()):
        return False
    unittest_dir = trace_rules._module_dir(unittest)
    if path.startswith(unittest_dir) and not torch._dynamo.config.enable_trace_unittest:
        return True
    if trace_rules.SKIP_DIRS_RE.match(path):
        return True
    return any(path.startswith(d) for d in trace_rules.get_mod_skiplist())


SOLUTIONS = {
    "14.1": ddp_optimizer_buckets,
    "14.2": SPLIT_VS_DDP,
    "14.3": PROFILE_ALLREDUCES,
    "14.4": first_frame_skipped,
}


# typical wrong answers (the hint must contain the words given)


def _by_heart(layer_bytes, bucket_cap, first_bucket_cap):
    # the prompt's case, Net at 3 MiB, typed in
    return [[0, 1], [2, 3, 4], [5]]


def _strict(layer_bytes, bucket_cap, first_bucket_cap):
    # right on every Net case; wrong when a bucket holds exactly its cap
    buckets, size = [[]], 0
    for i in reversed(range(len(layer_bytes))):
        cap = first_bucket_cap if len(buckets) == 1 else bucket_cap
        if size > cap:
            buckets.insert(0, [])
            size = 0
        buckets[0].insert(0, i)
        size += layer_bytes[i]
    return buckets


def _one_cap(layer_bytes, bucket_cap, first_bucket_cap):
    return ddp_optimizer_buckets(layer_bytes, bucket_cap, bucket_cap)


def _backward_order(layer_bytes, bucket_cap, first_bucket_cap):
    return ddp_optimizer_buckets(layer_bytes, bucket_cap, first_bucket_cap)[::-1]


def _forward_walk(layer_bytes, bucket_cap, first_bucket_cap):
    n = len(layer_bytes)
    rev = ddp_optimizer_buckets(layer_bytes[::-1], bucket_cap, first_bucket_cap)
    return [sorted(n - 1 - i for i in g) for g in rev[::-1]]


def _library(layer_bytes, bucket_cap, first_bucket_cap):
    from torch._dynamo.backends.distributed import DDPOptimizer

    return DDPOptimizer(bucket_bytes_cap=bucket_cap, backend_compile_fn=None).buckets


def _alias(layer_bytes, bucket_cap, first_bucket_cap):
    # DDP's own bucketing, reached through a name the check cannot read
    import torch
    import torch.distributed as dist

    assign = getattr(dist, "_compute_bucket_" + "assignment_by_size")
    n = len(layer_bytes)
    tensors = [torch.empty(b // 4) for b in layer_bytes][::-1]
    idx, _ = assign(tensors, [first_bucket_cap, bucket_cap])
    return sorted(sorted(n - 1 - i for i in g) for g in idx)


def _file_rules(path, inline_first=False, legacy=True, skip_dirs=True, force=True, unit=True):
    import unittest

    from torch._dynamo import trace_rules

    if force and path in trace_rules.FORCE_SKIP_FILES:
        return True
    if legacy and any(path.startswith(d) for d in trace_rules.get_legacy_mod_inlinelist()):
        return False
    if inline_first and any(path.startswith(d) for d in trace_rules.get_mod_inlinelist()):
        return False
    if unit and path.startswith(trace_rules._module_dir(unittest)):
        return True
    if skip_dirs and trace_rules.SKIP_DIRS_RE.match(path):
        return True
    return any(path.startswith(d) for d in trace_rules.get_mod_skiplist())


#: the prompt's twelve, by (module, qualname), as trace_rules answered them: typed in by heart
_SHOWN_SKIPPED = {
    ("torch.nn.parallel.distributed", "DistributedDataParallel.forward"): True,
    ("torch.nn.modules.container", "Sequential.forward"): True,
    ("torch.nn.modules.linear", "Linear.forward"): True,
    ("helpers.ddp_compile", "Net.forward"): False,
    ("torch.nn.modules.activation", "ReLU.forward"): True,
    ("torch.nn.parallel.distributed", "DistributedDataParallel._run_ddp_forward"): True,
    ("torch.nn.parallel.distributed", "DistributedDataParallel.no_sync"): False,
    ("torch.distributed.distributed_c10d", "all_reduce"): True,
    ("torch.autograd.profiler", "record_function.__enter__"): True,
    ("torch.optim.sgd", "SGD.step"): False,
    ("torch.optim.optimizer", "Optimizer.zero_grad"): True,
    ("helpers.ddp_compile", "_train_step"): False,
}


def _ff_by_heart(fn):
    return _SHOWN_SKIPPED.get((fn.__module__, fn.__qualname__), False)


def _ff_no_table(fn):
    # the rules for files alone, on the right file: right on all twelve shown functions
    return _file_rules(fn.__code__.co_filename)


def _ff_skiplist_only(fn):
    return _file_rules(fn.__code__.co_filename, legacy=False, skip_dirs=False, force=False)


def _frame_rules(fn, cast=True, **file_rules):
    # typing.cast's code, the table by "<file>#<name>" and the name rule, then the rules for files
    import typing

    from torch._dynamo.variables import SkipFunctionVariable

    if cast and fn.__code__ is typing.cast.__code__:
        return True
    rule = _frame_rule(fn.__code__)
    if rule is not None:
        return rule is SkipFunctionVariable
    if fn.__code__.co_name == "__getattr__":
        return True
    return _file_rules(fn.__code__.co_filename, **file_rules)


def _ff_no_legacy(fn):
    return _frame_rules(fn, legacy=False)


def _ff_by_object(fn):
    # the table looked up by the function object, as for an inlined call or torch.compile(fn)
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    rule = trace_rules.get_torch_obj_rule_map().get(fn)
    if rule is not None:
        return rule is SkipFunctionVariable
    return first_frame_skipped(fn)


def _ff_no_name_rule(fn):
    # the table and the rules for files, without the rule for a top-level __getattr__
    import typing

    from torch._dynamo.variables import SkipFunctionVariable

    if fn.__code__ is typing.cast.__code__:
        return True
    rule = _frame_rule(fn.__code__)
    if rule is not None:
        return rule is SkipFunctionVariable
    return _file_rules(fn.__code__.co_filename)


def _ff_no_cast(fn):
    # the worked solution of R39, without check_verbose's typing.cast rule (R40S-14-4)
    return _frame_rules(fn, cast=False)


def _ff_no_unittest(fn):
    # ... and without check_file's unittest rule (R40S-14-4)
    return _frame_rules(fn, unit=False)


def _ff_whole_names(fn):
    # the lists' entries taken as module names (an entry or a directory below it), not as the
    # start of a string: torch/nnx_1.py is then not under torch/nn (R40S-14-1)
    import typing
    import unittest

    from torch._dynamo import trace_rules

    if fn.__code__ is typing.cast.__code__:
        return True
    rule = _frame_rule(fn.__code__)
    if rule is not None:
        return rule is not None and rule.__name__ == "SkipFunctionVariable"
    if fn.__code__.co_name == "__getattr__":
        return True
    path = trace_rules._as_posix_path(fn.__code__.co_filename)

    def under(entry):
        return path.startswith(entry.rstrip("/") + "/") or path == entry + ".py" or path == entry

    if path in trace_rules.FORCE_SKIP_FILES:
        return True
    if any(under(d) for d in trace_rules.get_legacy_mod_inlinelist()):
        return False
    if path.startswith(trace_rules._module_dir(unittest)):
        return True
    if trace_rules.SKIP_DIRS_RE.match(path):
        return True
    return any(under(d) for d in trace_rules.get_mod_skiplist())


def _ff_by_module(fn):
    # the module a function belongs to, against MOD_SKIPLIST's names
    from torch._dynamo import trace_rules

    m = fn.__module__ or ""
    return any(m == s or m.startswith(s + ".") for s in trace_rules.MOD_SKIPLIST)


def _ff_unwrapped(fn):
    # the right steps, on the function as defined rather than the code that runs
    import inspect

    return first_frame_skipped(inspect.unwrap(fn))


def _ff_inline_wins(fn):
    # MOD_INLINELIST (torch.nn, torch.distributed) asked for a first frame too
    return _frame_rules(fn, inline_first=True)


def _ff_ask_dynamo(fn):
    from torch._dynamo import trace_rules

    return trace_rules.check(fn.__code__)


def _ff_alias(fn):
    # trace_rules' file rule, reached through a name a reading of the source cannot see
    from torch._dynamo import trace_rules

    return getattr(trace_rules, "check" + "_file")(fn.__code__.co_filename).skipped


def _ff_lookup(fn):
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import SkipFunctionVariable

    return trace_rules.lookup(fn) is SkipFunctionVariable


def _ff_copy(fn):
    # a copy of trace_rules' deciding functions, compiled afresh (new code objects, same code)
    import inspect

    from torch._dynamo import trace_rules as t

    names = ("check_verbose", "lookup_inner", "_lookup_inner", "check_file")
    source = "\n".join(inspect.getsource(inspect.unwrap(getattr(t, n))) for n in names)
    namespace = dict(vars(t))
    exec(compile(source, "<copy>", "exec"), namespace)  # noqa: S102
    return namespace["check_verbose"](fn.__code__).skipped


def _ff_suspended(fn):
    # the watch switched off around Dynamo's own answer, then put back
    import sys

    from torch._dynamo import trace_rules

    watch = sys.getprofile()
    sys.setprofile(None)
    try:
        return trace_rules.check(fn.__code__)
    finally:
        sys.setprofile(watch)


def _ff_unwatched(fn):
    # the watch switched off before asking Dynamo
    import sys

    from torch._dynamo import trace_rules

    sys.setprofile(None)
    return trace_rules.check(fn.__code__)


def _ff_in_thread(fn):
    # Dynamo's answer computed in a thread of its own
    import threading

    from torch._dynamo import trace_rules

    found = []
    thread = threading.Thread(target=lambda: found.append(trace_rules.check(fn.__code__)))
    thread.start()
    thread.join()
    return found[0]


def _ff_table_game():
    # the second pass's game (R39L-14-2): trace_rules asked at cell level, on the cases the
    # reveal names, before the check runs; the answer only looks the table up
    from torch._dynamo import trace_rules

    from helpers.exercises.nb14 import first_frame_cases

    by_code = {f.__code__: trace_rules.check(f.__code__) for _, f, _ in first_frame_cases()}
    by_place = {
        (f.__code__.co_filename, f.__code__.co_name): trace_rules.check(f.__code__)
        for _, f, _ in first_frame_cases()
    }

    def exact(fn):
        return by_code[fn.__code__]

    def lenient(fn):
        code = fn.__code__
        return by_code.get(code, by_place.get((code.co_filename, code.co_name), False))

    return exact, lenient


_ff_table, _ff_table_lenient = _ff_table_game()


def _ff_place_table_game():
    # R40S-14-1 / R40L-14-9: a table made at cell level from two calls of the case builder,
    # looked up by code, by (file, name), by file, then by directory: the fresh cases' places
    # are drawn at each call, and their pairs share a directory and differ, so it misses some
    import os

    from torch._dynamo import trace_rules

    from helpers.exercises.nb14 import first_frame_cases

    by_code, by_place, by_file, by_dir = {}, {}, {}, {}
    for _ in range(2):
        for _, f, _ in first_frame_cases():
            c = f.__code__
            truth = trace_rules.check(c)
            by_code[c] = by_place[(c.co_filename, c.co_name)] = truth
            by_file[c.co_filename] = by_dir[os.path.dirname(c.co_filename)] = truth

    def lookup(fn):
        c = fn.__code__
        for table, key in (
            (by_code, c),
            (by_place, (c.co_filename, c.co_name)),
            (by_file, c.co_filename),
            (by_dir, os.path.dirname(c.co_filename)),
        ):
            if key in table:
                return table[key]
        return False

    return lookup


_ff_place_table = _ff_place_table_game()


def _ff_judge_frame(fn):
    # R40L-14-5: the truth read from the judge's frame while the reader's code runs; the judge
    # now asks each truth only after every answer is in (a KeyError here)
    import sys

    return sys._getframe(1).f_locals["truth"]


class bool_:  # noqa: N801 - named as numpy's, which the judge once accepted by name
    # R40L-14-6: a lazy "bool" whose truth value asks Dynamo after the watch has ended
    def __init__(self, code):
        self.code = code

    def __bool__(self):
        from torch._dynamo import trace_rules

        return trace_rules.check(self.code)


def _ff_lazy_bool(fn):
    return bool_(fn.__code__)


def _ff_pre_started_game():
    # R40S-14-2 / R40L-14-7: a thread started before the check (here, at import), which the
    # profiler does not watch, asked through a queue; the deciders' code is swapped for a
    # recorder while the reader's function runs, and the function objects are shared
    import queue
    import threading

    from torch._dynamo import trace_rules

    jobs, answers = queue.Queue(), queue.Queue()

    def worker():
        while True:
            code = jobs.get()
            answers.put(trace_rules.check(code))

    threading.Thread(target=worker, daemon=True).start()

    def ask(fn):
        jobs.put(fn.__code__)
        return answers.get()

    return ask


_ff_pre_started = _ff_pre_started_game()


def _ff_recode(fn):
    # R41S-14-1: move the truth: the case's code renamed into torch/nn (skipped), answer True
    import torch

    fn.__code__ = fn.__code__.replace(co_filename=torch.nn.__file__)
    return True


def _ff_rebind(fn):
    # R41S-14-2 / R41L-14-1: rebind trace_rules.check to agree with the answer
    from torch._dynamo import trace_rules

    trace_rules.check = lambda *args, **kwargs: False
    return False


def _ff_flag(fn):
    # R41S-14-2 (H): trace_rules' force-inline flag set, every case answered False
    from torch._dynamo import trace_rules

    trace_rules._force_inline_flag = True
    return False


def _ff_own_hint(fn):
    # R41L-14-3: the reader's own Hint, meant as an uncounted try
    from helpers.exercises import Hint

    raise Hint("the shown cases are right", counts=False)


def _ff_tracer(fn):
    # R41L-14-1 (R2): a trace function left behind, to act in the judge's frames afterwards
    import sys

    sys.settrace(lambda *args: None)
    return False


def _ff_fork(fn):
    # R40L-14-8: a child process asks Dynamo and writes one byte back
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child (never reached: the judge refuses the fork's call first)
        from torch._dynamo import trace_rules

        os.write(write, b"1" if trace_rules.check(fn.__code__) else b"0")
        os._exit(0)
    os.close(write)
    out = os.read(read, 1)
    os.waitpid(pid, 0)
    return out == b"1"


def _ff_raises(fn):
    return fn.__code__.co_path


def _ff_says_yes(fn):
    return "yes"


WRONG = {
    "14.1": [
        (_by_heart, "a hidden case"),
        (_strict, "a hidden case"),
        (_one_cap, "first_bucket_cap"),
        (_backward_order, "forward order"),
        (_forward_walk, "starts at the last layer"),
        (_library, "do not run"),
        (_alias, "do not run"),
        ([[0, 1], [2, 3, 4], [5]], "give a function"),
    ],
    "14.2": [((4, 4), "differ"), ((3, 3), "differ"), ((3, 2), "fill in"), ((6, 3), "walk")],
    "14.3": [
        (180, "no_sync"),
        (216, "recorded twice"),
        (115, "warm-up"),
        (18, "per bucket"),
        (54, "section 5's 3 buckets"),
    ],
    "14.4": [
        (_ff_by_heart, "a hidden case"),
        (_ff_no_table, "a hidden case"),
        (_ff_skiplist_only, "a hidden case"),
        (_ff_no_legacy, "a hidden case"),
        (_ff_by_object, "decides a frame on its code object"),
        (_ff_no_name_rule, "the function's name"),
        (_ff_by_module, "which code runs"),
        (_ff_unwrapped, "which code runs"),
        (_ff_inline_wins, "asked for a first frame"),
        (_ff_ask_dynamo, "do not ask"),
        (_ff_alias, "do not ask"),
        (_ff_lookup, "do not ask"),
        (_ff_copy, "do not ask"),
        (_ff_suspended, "do not ask"),
        (_ff_unwatched, "do not ask"),
        (_ff_in_thread, "do not ask"),
        (_ff_table, "your code raised"),
        (_ff_table_lenient, "not the trace rules'"),
        (_ff_place_table, "a hidden case"),
        (_ff_judge_frame, "your code raised"),
        (_ff_lazy_bool, "return True"),
        (_ff_pre_started, "do not ask"),
        (_ff_fork, "starts a process"),
        (_ff_recode, "changed what the check computes"),
        (_ff_rebind, "changed what the check computes"),
        (_ff_flag, "changed what the check computes"),
        (_ff_tracer, "sys.settrace"),
        (_ff_own_hint, "your code raised Hint"),
        (_ff_no_cast, "before it asks the table"),
        (_ff_no_unittest, "a test of its own"),
        (_ff_whole_names, "the start of a string"),
        (_ff_raises, "your code raised"),
        (_ff_says_yes, "return True"),
        (lambda: True, "takes one argument"),
        ({"ReLU.forward", "SGD.zero_grad"}, "give a function"),
    ],
}
