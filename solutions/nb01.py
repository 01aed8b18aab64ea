"""Worked solutions to notebook 01's exercises (torch.compile from the entry point)."""

# 01.1 Two calls with new shapes.
# compiled_h was compiled for x of shape (8,); its cache entry's guards check that shape.
# compiled_h(torch.ones(3)) fails them, so the frame hook's callback compiles h again (a graph
# with a dynamic size this time: Dynamo marks a dimension that changed as dynamic, as section 6
# shows with `q`) and stores a second entry on h.__code__. torch.ones(5) passes the dynamic
# entry's guards (a 1-d float32 tensor of size >= 2): no third compile.
#     len(_debug_get_cache_entry_list(h.__code__)), len(backend.graphs)   # -> (2, 2)
ANSWER_01_1 = (2, 2)

# 01.2 Does a called helper get a cache entry?
# def k(x): return torch.sin(x) + 1;          def outer(x): return k(x) * 2
# def k2(x): print(...); return torch.sin(x) + 1;  def outer2(x): return k2(x) * 2
# The InstructionTranslator inlines the call to k (traces k's bytecode into outer's graph), so
# k's frame is never evaluated under the hook: 0 entries. k2's print cannot be traced: the
# inlined call breaks, Dynamo runs the call to k2 as a real call, its frame enters the hook and
# is compiled on its own: 1 entry (the print splits it, and sin + 1 is compiled in its resume
# function, a code object of its own: notebook 02, section 6).
ANSWER_01_2 = (0, 1)


# 01.3 A backend that records its graphs.
# A backend is any (gm, example_inputs) -> callable. The GraphModule's graph lists nodes; those
# that call something have op "call_function" (target: the function, torch.sin, operator.mul)
# or "call_method" (target: the method's name, a str: "cos"). Return gm.forward: what the
# backend returns is what runs.
def make_backend(log):
    def backend(gm, example_inputs):
        names = []
        for node in gm.graph.nodes:
            if node.op == "call_function":
                names.append(node.target.__name__)
            elif node.op == "call_method":
                names.append(node.target)
        log.append(names)
        return gm.forward

    return backend


SOLUTIONS = {
    "01.1": ANSWER_01_1,
    "01.2": ANSWER_01_2,
    "01.3": make_backend,
}


def _by_heart(log):  # the shown case typed in
    def backend(gm, example_inputs):
        log.append(["sin", "mul"])
        return gm.forward

    return backend


def _functions_only(log):  # misses method calls
    def backend(gm, example_inputs):
        log.append([n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    return backend


def _returns_nothing(log):
    def backend(gm, example_inputs):
        log.append([n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"])

    return backend


def _all_nodes(log):
    def backend(gm, example_inputs):
        log.append(
            [
                n.name
                if n.op in ("placeholder", "output")
                else (n.target if isinstance(n.target, str) else n.target.__name__)
                for n in gm.graph.nodes
            ]
        )
        return gm.forward

    return backend


def _one_entry(log):  # logs every graph into one list
    def backend(gm, example_inputs):
        if not log:
            log.append([])
        for n in gm.graph.nodes:
            if n.op in ("call_function", "call_method"):
                log[0].append(n.target if isinstance(n.target, str) else n.target.__name__)
        return gm.forward

    return backend


def _at_run_time(log):  # appends when the graph runs, not when Dynamo hands it over
    def backend(gm, example_inputs):
        def run(*args):
            log.append(
                [
                    n.target if isinstance(n.target, str) else n.target.__name__
                    for n in gm.graph.nodes
                    if n.op in ("call_function", "call_method")
                ]
            )
            return gm.forward(*args)

        return run

    return backend


def _node_names(log):  # the node's name, not its target: sum_1 for x.sum()
    def backend(gm, example_inputs):
        log.append([n.name for n in gm.graph.nodes if n.op in ("call_function", "call_method")])
        return gm.forward

    return backend


WRONG = {
    "01.1": [
        ((1, 1), "size"),
        ((2, 1), "move together"),
        ((3, 3), "a third size"),
        (2, "pair"),
        ((2.7, 2.2), "whole numbers"),
        (("2", "2"), "whole numbers"),
    ],
    "01.2": [
        ((1, 1), "inlines"),
        ((0, 0), "k2's frame"),
        ("0", "pair"),
        ((0.4, 1.6), "whole numbers"),
        ((False, True), "whole numbers"),
    ],
    "01.3": [
        (_by_heart, "a hidden case"),
        (_functions_only, "a hidden case"),
        (_returns_nothing, "return a callable"),
        (_all_nodes, "inputs and output"),
        (_one_entry, "one list per call"),
        (_at_run_time, "not when the graph runs"),
        (_node_names, "not the node's name"),
        ("backend", "make_backend(log)"),
    ],
}
