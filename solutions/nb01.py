"""Worked solutions to notebook 01's exercises (torch.compile from the entry point)."""

# 01.1 A call with a new shape.
# compiled_h was compiled for x of shape (8,); its cache entry's guards check that shape.
# compiled_h(torch.ones(3)) fails them, so the frame hook's callback compiles h again (a graph
# with a dynamic size this time: Dynamo marks a dimension that changed as dynamic) and stores a
# second entry on h.__code__. In the notebook:
#     compiled_h(torch.ones(3))
#     (len(_debug_get_cache_entry_list(h.__code__)), len(backend.graphs))   # -> (2, 2)
ANSWER_01_1 = (2, 2)

# 01.2 Does an inlined helper get a cache entry?
# def k(x): return torch.sin(x) + 1
# def outer(x): return k(x) * 2
# torch.compile(outer, backend="eager")(x) gives outer.__code__ one entry and k.__code__ none:
# the InstructionTranslator inlines the call to k (it traces k's bytecode into outer's graph),
# so k's frame is never evaluated under the hook on its own.
#     len(_debug_get_cache_entry_list(k.__code__))   # -> 0
ANSWER_01_2 = 0

# 01.3 Who calls the backend?
# In the Inductor recording of section 7:
#     step = rec.first("OutputGraph.call_user_compiler")
#     rec[step.parent].name
# and section 6 shows the line: compile_and_call_fx_graph calls
# `self.call_user_compiler(gm, self.example_inputs())`.
ANSWER_01_3 = "torch._dynamo.output_graph.OutputGraph.compile_and_call_fx_graph"

SOLUTIONS = {
    "01.1": ANSWER_01_1,
    "01.2": ANSWER_01_2,
    "01.3": ANSWER_01_3,
}

# typical wrong answers (the hint must contain the words given)
WRONG = {
    "01.1": [
        ((1, 1), "guards"),
        ((2, 1), "graph"),
    ],
    "01.2": [
        (1, "inlines"),
    ],
    "01.3": [
        ("torch._dynamo.output_graph.OutputGraph.compile_subgraph", "one level further up"),
        ("torch._dynamo.output_graph.OutputGraph.call_user_compiler", "callee"),
    ],
}
