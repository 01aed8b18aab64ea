"""helpers.board_op: the C++ operator against its NumPy reference, its errors, autograd,
torch.compile/torch.export tracing, both ONNX routes in ONNX Runtime, and the Resize table."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers import board_op
from helpers.processes import child_env


@pytest.fixture(scope="module", autouse=True)
def built() -> board_op.BuildInfo:
    return board_op.build()


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("scale", [1, 2, 3, 5])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1), (1, 2, 1, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_matches_reference(mode: str, scale: int, shape: tuple, dtype) -> None:
    x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(0))
    out = torch.ops.board.upsample(x, scale, mode)
    assert out.shape == (*shape[:2], shape[2] * scale, shape[3] * scale), out.shape
    assert out.dtype == dtype
    expected = board_op.reference_upsample(x.numpy(), scale, mode)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_non_contiguous_input_is_read_correctly() -> None:
    x = torch.randn(1, 2, 6, 4).transpose(2, 3)  # (1, 2, 4, 6), not contiguous
    expected = board_op.reference_upsample(x.contiguous().numpy(), 2, "bilinear")
    np.testing.assert_allclose(torch.ops.board.upsample(x, 2, "bilinear").numpy(), expected)


def test_bilinear_is_pytorch_align_corners_and_nearest_is_not_pytorch() -> None:
    x = board_op.resize_input()
    ours = torch.ops.board.upsample(x, 3, "bilinear")
    torch.testing.assert_close(
        ours,
        torch.nn.functional.interpolate(x, scale_factor=3.0, mode="bilinear", align_corners=True),
    )
    diffs = board_op.board_vs_torch(3)
    assert diffs["board nearest vs nearest"] > 1, diffs
    assert diffs["board bilinear vs bilinear, align_corners=False"] > 1, diffs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.randn(3, 4, 5), 2, "nearest"), r"expected input of shape \(N, C, H, W\), got 3-D"),
        ((torch.ones(1, 1, 2, 2, dtype=torch.int64), 2, "nearest"), "float32 or float64, got Long"),
        ((torch.ones(1, 1, 2, 2, dtype=torch.float16), 2, "nearest"), "got Half"),
        ((torch.ones(1, 1, 2, 2), 0, "nearest"), "scale must be an integer from 1 to 16, got 0"),
        ((torch.ones(1, 1, 2, 2), 2, "bicubic"), "mode must be 'nearest' or 'bilinear'"),
    ],
)
def test_bad_input_is_a_clear_error(args: tuple, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.board.upsample(*args)


def test_backward_checks_its_shapes() -> None:
    with pytest.raises(RuntimeError, match="does not match input size"):
        torch.ops.board.upsample_backward(torch.ones(1, 1, 4, 4), 3, 3, 2, "nearest")


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_gradcheck(mode: str) -> None:
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: torch.ops.board.upsample(t, 3, mode), (x,))


def test_fake_kernel_traces_without_data() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(2, 3, 4, 5)
        out = torch.ops.board.upsample(fake, 3, "nearest")
    assert out.shape == (2, 3, 12, 15), out.shape


def test_export_and_compile_keep_the_op_opaque() -> None:
    model = board_op.BoardUpsampler().eval()
    x = torch.randn(1, 3, 6, 7)
    ep = torch.export.export(model, (x,))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "board.upsample.default" in targets, targets
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("route", ["contrib", "function"])
def test_onnx_routes_run_in_onnx_runtime(route: str) -> None:
    for mode in ("nearest", "bilinear"):
        model = board_op.BoardUpsampler(scale=3, mode=mode).eval()
        x = torch.randn(1, 3, 5, 6)
        model_proto = board_op.export_board_model(model, x, route)
        nodes = board_op.custom_nodes(model_proto)
        assert len(nodes) == 1, nodes
        if route == "contrib":
            assert nodes[0] == ("ai.onnx.contrib", "BoardUpsample", {"mode": mode, "scale": 3})
        else:
            assert nodes[0][:2] == ("com.example.board", f"Upsample{mode.title()}"), nodes
            assert [f.name for f in model_proto.functions] == [nodes[0][1]]
        with torch.no_grad():
            expected = model(x).numpy()
        actual = board_op.run_board_model(model_proto, route, x)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_resize_rows_show_the_old_exporter_disagreeing() -> None:
    case = board_op.RESIZE_CASES[3]  # bilinear x2, align_corners=False
    new = board_op.resize_row(case)
    old = board_op.resize_row(case, dynamo=False, opset=10)
    assert new["coordinate_transformation_mode"] == "half_pixel" and new["max_diff"] < 1e-4, new
    assert old["warned"] and old["max_diff"] > 1, old
    refused = board_op.resize_row(board_op.RESIZE_CASES[4], dynamo=False, opset=10)
    assert refused["node"] == "refused" and "align_corners" in refused["error"], refused


def test_resize_rows_list_the_whole_graph() -> None:
    exact = board_op.resize_row(board_op.RESIZE_CASES[2])  # nearest-exact 5->8, no Resize
    assert exact["ops"] == ["Transpose", "GatherND", "Transpose"], exact
    assert exact["node"] == "GatherND+Transpose" and exact["constant_shapes"] == [[8, 8, 2]], exact
    bilinear = board_op.resize_row(board_op.RESIZE_CASES[3])
    assert bilinear["ops"] == ["Resize"] and bilinear["node"] == "Resize", bilinear


def test_a_second_process_reuses_the_build() -> None:
    code = "from helpers import board_op; print(board_op.build().how)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "reused build", out.stdout
    assert board_op.build().how == "already loaded"
    assert board_op.source_hash() in board_op.build_directory().name


# docs/teaching.md, "Building a C++ extension without a working compiler": the messages it quotes.
NO_COMPILER = "/nonexistent/g++"


def _without_compiler(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter whose C++ compiler does not exist (CXX), with empty
    extension and Inductor caches in tmp_path, so that nothing built earlier is reused."""
    env = child_env()
    env |= {
        "CXX": NO_COMPILER,
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


_SEPARATOR = "----- and now an Inductor compile -----"


@pytest.fixture(scope="module")
def compilerless(tmp_path_factory) -> dict:
    """One fresh interpreter without a C++ compiler (CXX), with empty extension and Inductor
    caches, tries the board build and then an Inductor compile (what docs/teaching.md quotes for
    each), in a build folder that holds a killed builder's lock (`lock`, nobody holding it).
    One interpreter for the three tests below: each start imports torch (~1.5 s of CPU)."""
    tmp_path = tmp_path_factory.mktemp("compilerless")
    name = f"board_upsample_{board_op.source_hash()}"
    folder = tmp_path / "extensions" / f"torch-{torch.__version__}" / name
    folder.mkdir(parents=True)
    from torch.utils.file_baton import FileBaton

    baton = FileBaton(str(folder / "lock"))
    assert baton.try_acquire(), f"expected to create {folder / 'lock'}"
    os.close(baton.fd)  # what a builder SIGKILLed holding the baton leaves: the file, no holder
    code = (
        "import torch\n"
        "from helpers import board_op\n"
        "try:\n"
        "    board_op.build()\n"
        "except RuntimeError as err:\n"
        "    print(type(err).__name__ + ': ' + str(err))\n"
        "else:\n"
        "    print('built')\n"
        f"print({_SEPARATOR!r})\n"
        "f = torch.compile(lambda x: torch.relu(x) + 1, backend='inductor')\n"
        "try:\n"
        "    f(torch.randn(8))\n"
        "except Exception as err:\n"
        "    print(type(err).__module__ + '.' + type(err).__name__ + ': ' + str(err))\n"
        "else:\n"
        "    print('compiled')\n"
    )
    out = _without_compiler(tmp_path, code)  # hung until its timeout before the flock turn
    assert out.returncode == 0, out.stderr
    assert _SEPARATOR in out.stdout, f"expected both parts to run, found {out.stdout[:300]!r}"
    build, inductor = out.stdout.split(_SEPARATOR + "\n", 1)
    return {"name": name, "folder": folder, "build": build, "inductor": inductor}


def test_the_board_build_without_a_compiler_fails_as_the_guide_says(compilerless) -> None:
    name, folder, out = compilerless["name"], compilerless["folder"], compilerless["build"]
    head = f"RuntimeError: Error building extension '{name}': [1/2] {NO_COMPILER} -MMD "
    assert out.startswith(head), f"expected {head!r}..., found {out[:300]!r}"
    complaint = f"/bin/sh: 1: {NO_COMPILER}: not found"
    assert complaint in out, f"expected {complaint!r} in {out!r}"
    assert (folder / "build.ninja").exists(), f"expected the failed build in {folder}"
    assert not (folder / f"{name}.so").exists(), f"a library was built in {folder}"


def test_an_inductor_compile_without_a_compiler_fails_as_the_guide_says(compilerless) -> None:
    out = compilerless["inductor"]
    expected = (
        "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found"
        f" in torch._inductor.config.cpp.cxx: (None, '{NO_COMPILER}')"
    )
    first = out.splitlines()[0] if out else ""
    assert first == expected, f"expected {expected!r}, found {out[:300]!r}"


def test_a_killed_builds_lock_does_not_hang_the_next_build(compilerless) -> None:
    """torch 2.13's FileBaton `lock` names no owner: a builder killed before its `finally` leaves
    it, and load_inline into that folder then waits forever (2.14 and 2.15 use an OS lock).
    build() takes its turn on an flock (the kernel drops it with its holder) and on 2.13 removes
    such a file; the fixture's build folder held such a lock, and the (compiler-less, so quick)
    build still got to the compiler."""
    name, folder = compilerless["name"], compilerless["folder"]
    head = f"RuntimeError: Error building extension '{name}'"
    out = compilerless["build"]
    assert out.startswith(head), f"expected {head!r}..., found {out[:300]!r}"
    import torch.utils.cpp_extension as cpp_extension

    # 2.13: FileBaton removes its file on release; 2.14.1, 2.15.0: FileLock's file stays (an OS
    # lock, so its file blocks nobody) and build() leaves it alone
    baton = "FileBaton" in vars(cpp_extension)
    left = (folder / "lock").exists()
    assert left != baton, f"lock file after the build: expected {not baton} (FileBaton: {baton})"
