"""helpers.context_parallel against scaled_dot_product_attention in one process.

- chunks_of/split_sequence refuse a sequence that does not split evenly (a clear error), and
  merge_sequence inverts split_sequence for both layouts;
- block_attention + merge_partial over any chunking equal SDPA and its log-sum-exp;
- on 2 and 4 gloo ranks: ring attention's output, log-sum-exp and dq, dk, dv equal one process,
  causal and not, contiguous and zig-zag; the causal work per rank is work_formula's;
- the all-gather variants: nn.functional.all_gather's K/V gradients are wrong on gloo (a fact of
  torch 2.13-2.15, asserted so that a fix shows up), the functional collective and the autograd
  Function are right.
"""

from __future__ import annotations

import ast
import json
import linecache
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers import context_parallel as cp
from helpers.launch import LaunchTimeout, launch


@pytest.mark.parametrize(
    ("seq_len", "world_size", "layout"),
    [(15, 2, "contiguous"), (12, 4, "zigzag"), (10, 4, "contiguous")],
)
def test_uneven_sequence_is_refused(seq_len, world_size, layout) -> None:
    x = torch.zeros(1, 1, seq_len, 2)
    with pytest.raises(ValueError, match=f"sequence length {seq_len} does not split"):
        cp.split_sequence(x, world_size, 0, layout)


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        cp.chunks_of(16, 2, 0, "striped")


@pytest.mark.parametrize("layout", cp.LAYOUTS)
@pytest.mark.parametrize("world_size", [2, 4])
def test_split_merge_roundtrip(layout, world_size) -> None:
    x = torch.arange(16.0).view(1, 1, 16, 1)
    parts = [cp.split_sequence(x, world_size, r, layout) for r in range(world_size)]
    assert torch.equal(cp.merge_sequence(parts, layout), x)
    if layout == "zigzag" and world_size == 2:
        assert parts[0].flatten().tolist() == [0, 1, 2, 3, 12, 13, 14, 15]


@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_equals_sdpa(causal) -> None:
    q, k, v = cp.make_qkv()
    rows = []
    for qs in range(0, 16, 4):  # each query chunk against the 4 key chunks, merged online
        out = lse = None
        for ks in range(0, 16, 4):
            res = cp.block_attention(
                q[:, :, qs : qs + 4], k[:, :, ks : ks + 4], v[:, :, ks : ks + 4], qs, ks, causal
            )
            assert (res is None) == (causal and ks > qs), (qs, ks)
            if res is not None:
                out, lse = cp.merge_partial(out, lse, *res)
        rows.append((out, lse))
    out, lse = (torch.cat([r[i] for r in rows], dim=2) for i in (0, 1))
    ref = cp.reference(q, k, v, causal)
    assert (out - ref["out"]).abs().max() < 1e-6
    assert (lse - ref["lse"]).abs().max() < 1e-6
    assert cp.block_attention(q[:, :, :4], k[:, :, 8:], v[:, :, 8:], 0, 8, True) is None


def _errors(per_rank: list, k: int, layout: str, ref: dict) -> dict[str, float]:
    errs = {}
    for key in ("out", "lse", "dq", "dk", "dv"):
        got = cp.merge_sequence([torch.tensor(r[k][key]) for r in per_rank], layout)
        exp = ref["lse"].unsqueeze(-1) if key == "lse" else ref[key]
        errs[key] = (got - exp).abs().max().item()
    return errs


@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_attention_equals_one_process(world_size) -> None:
    cases = [dict(causal=c, layout=lay) for c in (False, True) for lay in cp.LAYOUTS]
    res = launch(cp.ring_worker, world_size, args=(cases,), backend="gloo", timeout_s=180)
    for k, case in enumerate(cases):
        ref = cp.reference(*cp.make_qkv(), case["causal"])
        errs = _errors(res, k, case["layout"], ref)
        assert max(errs.values()) < 5e-6, f"{case} N={world_size}: {errs}"
        scores = [r[k]["work"]["scores"] for r in res]
        if case["causal"]:
            assert scores == cp.work_formula(world_size, case["layout"], 16), (case, scores)
        else:
            assert scores == [16 * 16 // world_size] * world_size, (case, scores)


def test_allgather_variants() -> None:
    cases = [
        dict(causal=True, how=h) for h in ("nn.functional", "functional_collectives", "function")
    ]
    res = launch(cp.allgather_worker, 2, args=(cases,), backend="gloo", timeout_s=180)
    ref = cp.reference(*cp.make_qkv(), True)
    for k, case in enumerate(cases):
        errs = {
            key: (
                cp.merge_sequence([torch.tensor(r[k][key]) for r in res], "contiguous") - ref[key]
            )
            .abs()
            .max()
            .item()
            for key in ("out", "dq", "dk", "dv")
        }
        assert errs["out"] < 1e-6 and errs["dq"] < 1e-6, (case, errs)
        if case["how"] == "nn.functional":
            assert errs["dk"] > 0.1 and errs["dv"] > 0.1, f"expected wrong dk/dv: {errs}"
        else:
            assert max(errs["dk"], errs["dv"]) < 1e-6, (case, errs)


def test_reference_is_sdpa() -> None:
    q, k, v = cp.make_qkv()
    ref = cp.reference(q, k, v, True)
    assert torch.equal(ref["out"], F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_without_the_tie_causal_backward_deadlocks() -> None:
    # rank 0 of the contiguous split skips every shifted block, so autograd never runs its
    # RingShift.backward, and rank 1 waits for it in its own: the launch times out on rank 1
    case = dict(causal=True, layout="contiguous", tie=False)
    with pytest.raises(LaunchTimeout) as info:
        launch(cp.ring_worker, 2, args=([case],), backend="gloo", timeout_s=40)
    assert info.value.ranks == [1], f"expected rank 1 stuck, found {info.value.ranks}"
    assert "backward" in str(info.value), f"expected rank 1 stuck in backward: {info.value}"


@pytest.mark.parametrize("world_size", [2, 3])
def test_torch_rotaters_follow_the_ring(world_size) -> None:
    # torch's context_parallel rotaters: both hand rank r the block of ring_owner(r, step) (the
    # ring's order); the all-gather one holds every rank's block after its first exchange
    per_rank = launch(cp.rotater_worker, world_size, backend="gloo", timeout_s=120)
    for rank, methods in enumerate(per_rank):
        owners = [cp.ring_owner(rank, s, world_size) for s in range(world_size)]
        assert methods["ALL_TO_ALL"]["held"] == owners
        assert methods["ALL_GATHER"]["held"] == owners
        assert methods["ALL_GATHER"]["kept after the first exchange"] == 4 * world_size
        assert methods["ALL_TO_ALL"]["kept after the first exchange"] == 4


def test_library_worker_backward_case_reaches_the_kernel() -> None:
    # grad-requiring copies made inside the context: the call fails at the CPU flash kernel
    # (no context-parallel handler), not at the buffers' restore on exit
    per_rank = launch(
        cp.library_worker,
        2,
        args=([dict(causal=True, backward=True)],),
        backend="gloo",
        timeout_s=300,
    )
    for r in per_rank:
        assert r[0]["raised"] == "NotImplementedError", r[0]
        assert "_scaled_dot_product_flash_attention_for_cpu" in r[0]["message"], r[0]


# -- the notebook's editable copy of ring_attention ("change this and rerun") -------------------

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks/17_context_and_expert_parallelism.ipynb"
EDIT_CELL = "a17r0002"


def _readers_copy(old: str = "", new: str = "") -> Any:
    """The `ring_attention` of the notebook's edit-and-rerun cell, with `old` replaced by `new`,
    defined as IPython defines it: compiled under a cell's name, its source in linecache, in a
    namespace named __main__ (so launch writes it out for the ranks)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cell = "".join(next(c["source"] for c in nb["cells"] if c.get("id") == EDIT_CELL))
    fn = next(
        node
        for node in ast.parse(cell).body
        if isinstance(node, ast.FunctionDef) and node.name == "ring_attention"
    )
    code = ast.get_source_segment(cell, fn) + "\n"
    if old:
        assert code.count(old) == 1, f"expected {old!r} once in the notebook's copy, found:\n{code}"
        code = code.replace(old, new)
    name = f"<ipython-input-17-{abs(hash(code)):012x}>"
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    namespace = {"__name__": "__main__", "torch": torch, "dist": dist, "cp": cp}
    exec(compile(code, name, "exec"), namespace)
    return namespace["ring_attention"]


CASES = [dict(causal=c, layout=lay) for c in (False, True) for lay in cp.LAYOUTS]


def _run_copy(fn: Any) -> list[dict]:
    """The cell's launches (N = 2 and 4, the four cases) and section 3's comparison."""
    ring = {
        n: launch(cp.ring_worker_with, n, args=(fn, CASES), backend="gloo", timeout_s=120)
        for n in (2, 4)
    }
    return cp.one_process_errors(ring, CASES)


def _failing(rows: list[dict]) -> list[tuple]:
    keys = ("out", "lse", "dq", "dk", "dv")
    return [(r["n"], r["causal"], r["layout"]) for r in rows if not all(r[k] < 2e-6 for k in keys)]


def test_readers_copy_as_shipped_passes_section_3s_check() -> None:
    rows = _run_copy(_readers_copy())
    assert _failing(rows) == [], f"expected the shipped copy to pass, found {_failing(rows)}"
    cp.check_one_process(rows)


@pytest.mark.parametrize(
    ("old", "new", "fails", "where"),
    [
        # the key offset never advances: the zig-zag split's second chunk reads the first one's
        (
            "                k_off += kn\n",
            "",
            [(n, c, "zigzag") for n in (2, 4) for c in (False, True)],
            "N=2 causal=True zigzag: dq",
        ),
        # every held block masked as the rank's own: only the causal cases can tell
        (
            "owner = cp.ring_owner(rank, step, world_size)",
            "owner = rank",
            [(n, True, lay) for n in (2, 4) for lay in cp.LAYOUTS],
            "N=4 causal=True contiguous: lse",
        ),
    ],
    ids=["no-k-offset", "owner-is-rank"],
)
def test_a_broken_copy_fails_section_3s_check(old, new, fails, where) -> None:
    # what the notebook's "change this and rerun" markdown says each change makes the checks say
    rows = _run_copy(_readers_copy(old, new))
    assert _failing(rows) == fails, f"expected the cases {fails} to fail, found {_failing(rows)}"
    with pytest.raises(AssertionError) as info:
        cp.check_one_process(rows)
    message = str(info.value)
    pattern = r"expected ring attention to equal SDPA within 2e-6, found \S+ \(worst at (.+)\)"
    match = re.fullmatch(pattern, message)
    assert match, f"expected section 3's message, found {message!r}"
    assert match.group(1) == where, f"expected the worst at {where}, found {match.group(1)}"


def test_check_one_process_counts_a_nan_as_a_failure() -> None:
    row = {"n": 2, "causal": False, "layout": "contiguous", "out": 0.0, "lse": float("nan")}
    row |= {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    with pytest.raises(
        AssertionError, match=r"found nan \(worst at N=2 causal=False contiguous: lse"
    ):
        cp.check_one_process([row])


def test_a_copy_without_the_tie_leaves_rank_1_waiting_in_backward() -> None:
    # the markdown's third change, on the cell's first launch (N = 2, the four cases): rank 0
    # makes no backward shift in the causal contiguous case, so its next case's shifts pair with
    # rank 1's pending one; rank 0 finishes every case and rank 1 is left waiting in backward
    copy = _readers_copy(
        "    if tie:  # weight 0: every rank runs all N - 1 backward shifts (section 3)\n"
        "        out = out + 0.0 * kv.sum()\n",
        "",
    )
    with pytest.raises(LaunchTimeout) as info:
        launch(cp.ring_worker_with, 2, args=(copy, CASES), backend="gloo", timeout_s=30)
    message = str(info.value)
    assert info.value.ranks == [1], f"expected rank 1 alone stuck, found {info.value.ranks}"
    assert "(ranks [0] did)" in message, f"expected rank 0 to finish every case: {message}"
    assert "in backward" in message, f"expected rank 1 stuck in backward: {message}"
