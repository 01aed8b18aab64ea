"""Expert parallelism: a mixture-of-experts layer, in one process and over `all_to_all_single`.

Used by: notebook 17 (section on expert parallelism), helpers.dimensions (the closing table),
tests/test_expert_parallel.py. Workers run under `helpers.launch.launch` (gloo on CPU, N = 2 and
4 ranks; NCCL as designed, not run here: tensors go to `current_device()`) and return plain
Python data (lists, dicts, ints), never tensors.

The layer (`MoEParams`, `moe_reference`): a router (linear, with a bias) scores E experts per
token; each token goes to its top-k experts, weighted by their softmax probabilities (not
renormalized); an expert is a two-layer MLP h -> f -> h with ReLU. Tokens come in G groups (one
group per rank); within a group each expert takes at most C = ceil(capacity_factor * T * k / E)
assignments (T tokens in the group), kept in priority order: every token's first choice before
any second choice (slot-major, as DeepSpeed's top2gating numbers them), in token order within
a slot. A dropped assignment contributes nothing (a model's residual connection would carry
the token). The reference computes every expert on every token and weights the results (a dense
formulation): nothing is exchanged and nothing is routed, so it checks the routing code too.

Expert parallel (`moe_expert_parallel`): rank r owns experts r*E/N ... (r+1)*E/N - 1 and keeps
its own T tokens. Per forward it (1) routes its tokens and applies the capacity (the same
`route` as the reference, so the same assignments are dropped), (2) exchanges how many rows it
will send to each expert (one `all_to_all_single` of E int64 counts, equal splits), which gives
every rank its uneven receive sizes, (3) sends each kept assignment's token row to the expert's
owner (`all_to_all_single` with uneven, possibly zero, split sizes), (4) runs its experts on the
rows it received, (5) sends the results back the same way reversed, and (6) adds them up
weighted by the gates. The exchange is `AllToAll`, a hand-written autograd Function: forward is
one `all_to_all_single`; backward is the same exchange with input and output splits swapped
(an all-to-all only moves rows, so the gradient of each received row goes back to where the row
came from). A Function rather than the functional collectives: its backward exchange is visible
in its source and passes through EXCHANGE_LOG, where the functional op differentiates itself
inside the dispatcher. `exchange="functional"` runs the same layer on
`torch.distributed._functional_collectives.all_to_all_single`, whose op has an autograd kernel of
its own (tests/test_expert_parallel.py checks that both give the same gradients). The deprecated
`torch.distributed.nn.functional.all_to_all_single` (FutureWarning) is not used.
Every exchange is logged in `EXCHANGE_LOG` with its split sizes and the bytes this rank sent to
other ranks (its own split stays local: a copy, not a message).
"""

from .harness import (
    _RANK_COLOURS,
    _WHAT,
    _local_params,
    balanced_bytes_estimate,
    exchange_step_text,
    exchange_step_viewer,
    exchange_steps,
    exchange_svg,
    expert_parallel_step,
    expert_parallel_worker,
    load_imbalance,
    make_params,
    make_tokens,
    max_errors,
    reference_run,
)
from .lesson import (
    _FLOAT_BYTES,
    _PHASE,
    EXCHANGE_LOG,
    EXCHANGES,
    EXPERTS,
    FFN,
    HIDDEN,
    TOKENS,
    TOP_K,
    AllToAll,
    MoEParams,
    _all_to_all,
    _experts,
    _functional_exchange,
    _log_exchange,
    capacity,
    check_config,
    exchange_bytes_formula,
    moe_expert_parallel,
    moe_reference,
    route,
)

__all__ = [
    "exchange_steps",
    "exchange_svg",
    "exchange_step_text",
    "exchange_step_viewer",
    "HIDDEN",
    "FFN",
    "EXPERTS",
    "TOP_K",
    "TOKENS",
    "MoEParams",
    "make_params",
    "make_tokens",
    "check_config",
    "capacity",
    "route",
    "moe_reference",
    "reference_run",
    "AllToAll",
    "EXCHANGE_LOG",
    "EXCHANGES",
    "moe_expert_parallel",
    "expert_parallel_step",
    "expert_parallel_worker",
    "max_errors",
    "exchange_bytes_formula",
    "balanced_bytes_estimate",
    "load_imbalance",
]
