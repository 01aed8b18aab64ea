"""Live source display: names, paths, permalinks pinned to the installed build, excerpts."""

from __future__ import annotations

import inspect
import re

import onnxscript
import pytest
import torch

from helpers.source import package_root, permalink, resolve, show_source, source_view


def test_whole_function_with_permalink_to_installed_commit() -> None:
    view = source_view(torch.compile)
    assert view.name == "torch.compile"
    assert view.package == "torch" and view.relpath == "torch/__init__.py"
    lines, start = inspect.getsourcelines(torch.compile)
    assert (view.first_line, view.last_line) == (start, start + len(lines) - 1)
    sha = torch.version.git_version
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    assert view.url == (
        f"https://github.com/pytorch/pytorch/blob/{sha}/torch/__init__.py"
        f"#L{view.first_line}-L{view.last_line}"
    )
    assert view.code.startswith("def compile(")


def test_excerpt_around_a_pattern_keeps_true_line_numbers() -> None:
    view = source_view(torch.compile, r"return torch\._dynamo\.optimize\(", before=1, after=2)
    assert view.excerpt and len(view.code.splitlines()) == 4
    file_lines = open(inspect.getsourcefile(torch.compile)).read().splitlines()
    hit = view.first_line + 1  # the matched line, 1-based
    assert "return torch._dynamo.optimize(" in file_lines[hit - 1]
    assert view.url.endswith(f"#L{view.first_line}-L{view.last_line}")


def test_until_pattern_and_occurrence() -> None:
    view = source_view(torch.compile, r"^\s*if mode is not None", until=r"raise", before=0)
    assert view.code.splitlines()[0].lstrip().startswith("if mode is not None")
    assert "raise" in view.code.splitlines()[-1]
    with pytest.raises(ValueError, match="occurs 0 time"):
        source_view(torch.compile, r"this text is not in torch\.compile")
    with pytest.raises(ValueError, match="occurrence 99 was asked for"):
        source_view(torch.compile, r"def", occurrence=99)


def test_dotted_names_methods_classes_and_modules() -> None:
    assert resolve("torch._dynamo.eval_frame.OptimizedModule") is (
        torch._dynamo.eval_frame.OptimizedModule
    )
    view = source_view("torch.nn.Linear.forward")
    assert view.name == "torch.nn.modules.linear.Linear.forward"
    assert view.relpath == "torch/nn/modules/linear.py"
    assert source_view(torch.nn.Linear).code.startswith("class Linear(")
    mod = source_view("torch._dynamo.eval_frame", r"^def optimize\(", before=0, after=0)
    assert mod.name == "torch._dynamo.eval_frame" and mod.code.startswith("def optimize(")


def test_decorated_functions_point_at_their_own_file() -> None:
    import torch.distributed as dist

    view = source_view(dist.init_process_group)  # wrapped by c10d_logger's decorators
    assert view.relpath == "torch/distributed/distributed_c10d.py"
    assert "\ndef init_process_group(" in view.code  # after its decorators
    lines = open(inspect.getsourcefile(inspect.unwrap(dist.init_process_group))).readlines()
    assert "def init_process_group(" in "".join(lines[view.first_line - 1 : view.last_line])


def test_other_packages_link_to_their_release_tag() -> None:
    from onnxscript.function_libs.torch_lib.ops import core

    view = source_view(core.aten_asinh)  # a TracedOnnxFunction wrapping a Python function
    assert view.relpath == "onnxscript/function_libs/torch_lib/ops/core.py"
    assert view.url.startswith(
        f"https://github.com/microsoft/onnxscript/blob/v{onnxscript.__version__}/onnxscript/"
    )


def test_own_helpers_have_repo_paths_and_no_external_link() -> None:
    view = source_view(resolve)
    assert view.relpath == "src/helpers/source.py" and view.url is None
    assert package_root(inspect.getsourcefile(resolve)) == ("helpers", "src/helpers/source.py")
    assert permalink("x.py", "not-a-known-package", 1, 2) is None


def test_code_without_python_source_says_so() -> None:
    with pytest.raises(TypeError, match="has no Python source"):
        source_view(torch.add)


def test_show_source_prints_outside_jupyter(capsys: pytest.CaptureFixture[str]) -> None:
    show_source(torch.compile, r"return torch\._dynamo\.optimize\(", before=0, after=0)
    out = capsys.readouterr().out
    assert out.startswith("excerpt of torch.compile  (torch/__init__.py, lines ")
    assert "return torch._dynamo.optimize(" in out
    md = source_view(torch.compile, r"return torch\._dynamo")._repr_markdown_()
    assert "[permalink](https://github.com/pytorch/pytorch/blob/" in md and "```python" in md


# where the gloo algorithm header sits in the wheel, per release (2.14 moved it into gloo/)
GLOO_DETAIL = {
    "2.13": "torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp",
    "2.14": "torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp",
    "2.15": "torch/csrc/distributed/c10d/gloo/ProcessGroupGlooDetail.hpp",
}


def _gloo_detail() -> str:
    release = ".".join(torch.__version__.split(".")[:2])
    assert release in GLOO_DETAIL, (
        f"expected torch {sorted(GLOO_DETAIL)}, found {torch.__version__}: add where this "
        "release keeps ProcessGroupGlooDetail.hpp"
    )
    return GLOO_DETAIL[release]


def test_header_view_shows_a_shipped_header_with_a_pinned_link() -> None:
    from helpers.source import header_view

    relpath = _gloo_detail()
    view = header_view(relpath, r"gloo::allreduce\(opts\)", before=0, after=0)
    assert view.code.strip() == "gloo::allreduce(opts);"
    assert view.first_line == view.last_line
    assert view.url.endswith(f"#L{view.first_line}-L{view.first_line}")
    assert torch.version.git_version in view.url
    with pytest.raises(ValueError, match="occurs 0 time"):
        header_view(relpath, r"no such line anywhere")


def test_a_header_not_in_the_wheel_names_where_it_went() -> None:
    """A header a newer wheel moved: an AssertionError (and a FileNotFoundError) naming the
    file asked for and where the same name is now, not a bare FileNotFoundError."""
    from helpers.source import SourceFileMissing, header_view

    here = _gloo_detail()
    elsewhere = next(p for p in set(GLOO_DETAIL.values()) if p != here)  # the other layout
    with pytest.raises(SourceFileMissing) as err:
        header_view(elsewhere, r"gloo::allreduce")
    assert isinstance(err.value, AssertionError) and isinstance(err.value, FileNotFoundError)
    message = str(err.value)
    assert f"expected the file {elsewhere!r}" in message, message
    assert f"the same name at [{here!r}]" in message, message
    assert torch.__version__ in message, f"the message should name the wheel: {message}"
    assert "/include/" not in message, f"paths are the repository's, not this machine's: {message}"


def test_file_view_of_a_missing_file_lists_close_names(tmp_path) -> None:
    from helpers.source import SourceFileMissing, file_view

    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "board_ops.cpp").write_text("int main() { return 0; }\n")
    with pytest.raises(SourceFileMissing) as err:
        file_view(tmp_path / "csrc" / "board_op.cpp", "csrc/board_op.cpp", "helpers")
    message = str(err.value)
    assert message.startswith("file_view: expected the file 'csrc/board_op.cpp'"), message
    assert "close names in csrc/: ['csrc/board_ops.cpp']" in message, message
    with pytest.raises(AssertionError, match="nothing with a similar name in csrc/"):
        file_view(tmp_path / "csrc" / "zzz.h", "csrc/zzz.h", "helpers")


def test_a_pattern_that_is_gone_names_function_pattern_and_what_is_there() -> None:
    """The cell of a newer torch that no longer has the line: an AssertionError (and the
    ValueError it always was) naming the function, the pattern and the closest installed lines."""
    from helpers.source import PatternMissing

    with pytest.raises(PatternMissing) as err:
        source_view(torch.compile, r"return torch\._dynamo\.optimise\(")  # a misspelt line
    assert isinstance(err.value, AssertionError) and isinstance(err.value, ValueError)
    message = str(err.value)
    assert "torch.compile (torch/__init__.py)" in message, message
    assert "'return torch\\\\._dynamo\\\\.optimise\\\\('" in message, message
    assert "closest installed lines: ['return torch._dynamo.optimize('" in message, message
    with pytest.raises(PatternMissing, match=r"not found after .* closest later lines: \["):
        source_view(torch.compile, r"^def compile\(", until=r"^\s*return torch\._dynamo\.optimise")
