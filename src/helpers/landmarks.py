"""Landmarks of the torch.compile path: the stages notebook 01 teaches, checked against a recording.

Used by: notebook 01 (torch.compile entry). CPU or GPU alike; works on any recording made by
`helpers.tracing.record_calls` / `record_compile`, or on a plain list of dotted names (tests).

- `LANDMARKS`: the ordered stages of a first call of `torch.compile(f, backend="inductor")`, each
  a regex over the dotted names of the recorded functions.
- `check_landmarks(recording, stages=None)`: each stage's first matching step, in order; a missing
  or out-of-order stage raises `LandmarkMissing` / `LandmarkOrder` naming it, so a torch upgrade
  that moves or renames a stage fails in CI, not in a reader's head.
- `stages_for_backend("eager" | "aot_eager" | "inductor")`: the stages a backend runs.
- `landmark_tree(recording)`: the recorded call tree cut to the landmarks and their callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from helpers.tracing import Recording

__all__ = [
    "LANDMARKS",
    "Landmark",
    "LandmarkError",
    "LandmarkMissing",
    "LandmarkOrder",
    "check_landmarks",
    "landmark_tree",
    "stages_for_backend",
]


class Landmark(NamedTuple):
    """A stage of the compile path and a regex that the dotted name of its function matches."""

    stage: str
    pattern: str


# The order in which the first call of torch.compile(f, backend="inductor") enters them in the
# pinned torch (recorded and checked in notebook 01 and tests/test_landmarks.py). Guards are built
# last: Dynamo translates the frame and compiles the graph (the backend call, AOTAutograd and
# Inductor all run inside `convert_frame._compile`), then `CheckFunctionManager` builds the guards
# stored with the cache entry. The first match of each pattern is the one that counts.
LANDMARKS: list[Landmark] = [
    Landmark(
        "entry wrapper",
        r"torch\._dynamo\.eval_frame\."
        r"(_TorchDynamoContext\.__call__\.<locals>\.\w+|OptimizedModule\.\w+)",
    ),
    Landmark(
        "frame hook / convert frame",
        r"torch\._dynamo\.convert_frame\.(CatchErrorsWrapper|ConvertFrame|ConvertFrameAssert)"
        r"\.__call__",
    ),
    Landmark(
        "bytecode transformation",
        r"torch\._dynamo\.bytecode_transformation\.transform_code_object",
    ),
    Landmark(
        "InstructionTranslator",
        r"torch\._dynamo\.symbolic_convert\.InstructionTranslator(Base)?\.run",
    ),
    Landmark(
        "OutputGraph compiles the subgraph",
        r"torch\._dynamo\.output_graph\.OutputGraph\.compile_subgraph",
    ),
    Landmark("backend call", r"torch\._dynamo\.output_graph\.OutputGraph\.call_user_compiler"),
    Landmark("AOTAutograd", r"torch\._functorch\.aot_autograd\.aot_module_simplified"),
    Landmark("Inductor lowering", r"torch\._inductor\.graph\.GraphLowering\.run"),
    Landmark("code generation", r"torch\._inductor\.graph\.GraphLowering\.codegen"),
    Landmark("guard construction", r"torch\._dynamo\.guards\.CheckFunctionManager\.__init__"),
]

# backend -> the stages its first call skips
_SKIPPED_STAGES = {
    "eager": ("AOTAutograd", "Inductor lowering", "code generation"),
    "aot_eager": ("Inductor lowering", "code generation"),
    "inductor": (),
}


def stages_for_backend(backend: str) -> list[str]:
    """The landmark stages a first call with `backend` ("eager", "aot_eager", "inductor") runs."""
    if backend not in _SKIPPED_STAGES:
        raise ValueError(f"unknown backend {backend!r}: expected one of {list(_SKIPPED_STAGES)}")
    return [lm.stage for lm in LANDMARKS if lm.stage not in _SKIPPED_STAGES[backend]]


class LandmarkError(AssertionError):
    """A landmark stage is missing from a recording or out of order; `.stage` names it."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


class LandmarkMissing(LandmarkError, LookupError):
    """No recorded function matches the stage's pattern."""


class LandmarkOrder(LandmarkError):
    """The stage was first entered before the stage that should precede it."""


def _dotted_names(recording: Recording | Iterable[Any]) -> list[str]:
    """The dotted names of a recording's steps (or of a plain sequence of names)."""
    return [s if isinstance(s, str) else s.name for s in recording]


def _find_landmarks(
    recording: Recording | Iterable[Any],
    stages: Iterable[str] | None,
    landmarks: Sequence[Landmark],
) -> list[tuple[str, int, str]]:
    """[(stage, step index, dotted name)] of each chosen stage's first match, checked in order."""
    names = _dotted_names(recording)
    if stages is None:
        chosen = list(landmarks)
    else:
        wanted = list(stages)
        known = [lm.stage for lm in landmarks]
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise ValueError(f"unknown landmark stage(s) {unknown}: known stages are {known}")
        chosen = [lm for lm in landmarks if lm.stage in wanted]
    found: list[tuple[str, int, str]] = []
    for lm in chosen:
        rx = re.compile(lm.pattern)
        hits = [i for i, n in enumerate(names) if rx.fullmatch(n)]
        if not hits:
            raise LandmarkMissing(
                lm.stage,
                f"landmark stage {lm.stage!r} is missing: no recorded function matches "
                f"{lm.pattern!r} ({len(names)} steps recorded). A torch upgrade may have "
                "renamed or moved it, or the call took a cached path.",
            )
        i = hits[0]
        if found and i < found[-1][1]:
            before, j, _ = found[-1]
            raise LandmarkOrder(
                lm.stage,
                f"landmark stage {lm.stage!r} is out of order: {names[i]} (step {i}) ran "
                f"before stage {before!r} (step {j})",
            )
        found.append((lm.stage, i, names[i]))
    return found


def check_landmarks(
    recording: Recording | Iterable[Any],
    stages: Iterable[str] | None = None,
    landmarks: Sequence[Landmark] = LANDMARKS,
) -> list[tuple[str, str]]:
    """[(stage, dotted name)] for each landmark stage, in order; LandmarkError names a failure.

    `recording` is a Recording (or any sequence of steps or dotted names, for tests); `stages`
    picks a subset (e.g. `stages_for_backend("eager")`), checked in the order of `landmarks`.
    Each stage counts at its first matching step; each must come after the one before it.
    Missing: LandmarkMissing (also a LookupError); out of order: LandmarkOrder; both are
    AssertionErrors whose `.stage` is the stage's name.
    """
    return [(stage, name) for stage, _, name in _find_landmarks(recording, stages, landmarks)]


def landmark_tree(
    recording: Recording,
    stages: Iterable[str] | None = None,
    locations: bool = True,
    landmarks: Sequence[Landmark] = LANDMARKS,
) -> str:
    """The recorded tree cut to the landmark steps and their callers, each landmark marked."""
    found = _find_landmarks(recording, stages, landmarks)
    marks = {i: stage for stage, i, _ in found}
    return recording.tree(keep=list(marks), locations=locations, marks=marks)
