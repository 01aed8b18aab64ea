"""Tests of helpers.landmarks: the compile-path stages, checked on real and fake recordings.

The one Inductor compile of the tracing tests lives here (module-scoped fixture).
"""

from __future__ import annotations

import pytest
import torch
from compile_fixtures import ADDRESS, X, pointwise

from helpers.landmarks import (
    LANDMARKS,
    LandmarkMissing,
    LandmarkOrder,
    check_landmarks,
    landmark_tree,
    stages_for_backend,
)
from helpers.tracing import Recording, record_compile


@pytest.fixture(scope="module")
def inductor_recording() -> Recording:
    return record_compile(pointwise, X, backend="inductor")


def test_landmarks_pass_on_pinned_torch(inductor_recording: Recording) -> None:
    found = check_landmarks(inductor_recording)
    assert [stage for stage, _ in found] == [lm.stage for lm in LANDMARKS]
    assert dict(found)["InstructionTranslator"].endswith(".run")
    text = landmark_tree(inductor_recording)
    for lm in LANDMARKS:
        assert f"<- {lm.stage}" in text
    assert not ADDRESS.search(text)
    torch.testing.assert_close(inductor_recording.result, pointwise(X))


def test_landmarks_per_backend(eager_recording: Recording) -> None:
    stages = stages_for_backend("eager")
    assert "AOTAutograd" not in stages and "guard construction" in stages
    assert [s for s, _ in check_landmarks(eager_recording, stages)] == stages
    with pytest.raises(LandmarkMissing, match="'AOTAutograd'"):
        check_landmarks(eager_recording, stages_for_backend("aot_eager"))
    with pytest.raises(ValueError, match="unknown backend"):
        stages_for_backend("tvm")
    with pytest.raises(ValueError, match="unknown landmark stage"):
        check_landmarks(eager_recording, ["parsing"])


# The dotted names check_landmarks found in torch 2.13 (a fake recording needs no compile).
FAKE_PATH = [
    "torch._dynamo.eval_frame._TorchDynamoContext.__call__.<locals>.compile_wrapper",
    "torch._dynamo.convert_frame.CatchErrorsWrapper.__call__",
    "torch._dynamo.bytecode_transformation.transform_code_object",
    "torch._dynamo.symbolic_convert.InstructionTranslatorBase.run",
    "torch._dynamo.output_graph.OutputGraph.compile_subgraph",
    "torch._dynamo.output_graph.OutputGraph.call_user_compiler",
    "torch._functorch.aot_autograd.aot_module_simplified",
    "torch._inductor.graph.GraphLowering.run",
    "torch._inductor.graph.GraphLowering.codegen",
    "torch._dynamo.guards.CheckFunctionManager.__init__",
]


def test_ten_distinct_stages() -> None:
    # notebook 01's prose says "the ten landmark stages": the count lives here, not in a cell
    stages = [lm.stage for lm in LANDMARKS]
    assert len(stages) == 10, f"expected ten landmark stages, found {len(stages)}: {stages}"
    assert len(set(stages)) == len(stages), f"expected distinct stage names, found {stages}"


def test_fake_recording_missing_stage_names_it() -> None:
    assert len(check_landmarks(FAKE_PATH)) == len(LANDMARKS)
    renamed = [n.replace("GraphLowering.run", "GraphLowering.lower") for n in FAKE_PATH]
    with pytest.raises(LandmarkMissing, match="'Inductor lowering' is missing") as info:
        check_landmarks(renamed)
    assert info.value.stage == "Inductor lowering"
    assert isinstance(info.value, AssertionError) and isinstance(info.value, LookupError)
    swapped = FAKE_PATH[:]
    swapped[2], swapped[3] = swapped[3], swapped[2]
    with pytest.raises(LandmarkOrder, match="'InstructionTranslator' is out of order") as info2:
        check_landmarks(swapped)
    assert info2.value.stage == "InstructionTranslator"


def test_landmark_tree_marks_only_the_chosen_stages(eager_recording: Recording) -> None:
    stages = stages_for_backend("eager")
    text = landmark_tree(eager_recording, stages, locations=False)
    assert text.count("<- ") == len(stages) and "<- AOTAutograd" not in text
    assert text.splitlines()[0].startswith("torch._dynamo.eval_frame.")
    assert "(torch/" not in text  # locations=False
