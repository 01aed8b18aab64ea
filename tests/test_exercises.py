"""Every notebook's exercises, both directions: solutions pass, starters and typical mistakes fail.

A notebook's exercises are its `check("NN.k", ...)` cells (helpers.exercises). For each:
- the judge is registered (helpers.exercises.nbNN) and a worked solution exists
  (solutions/nbNN.py `SOLUTIONS`) and passes it;
- the notebook ships with the starter untouched: the check cell's stored output (which strict
  nbval re-creates on every run) says "not yet";
- every typical wrong answer in `WRONG` fails with a hint containing the words listed for it,
  and there is at least one per exercise;
- the hints come in steps: every exercise has a `look` and a `reveal` (the helper or call that
  computes the answer); neither the prompt, the starter nor the first hint for a wrong answer
  names what `reveal` names, and a first hint does not show the second step;
- every notebook has a coding exercise (the answer is a function the student writes) with hidden
  cases: a typical wrong answer that passes the shown case by heart fails with "a hidden case".
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from helpers import exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK = re.compile(r"""^check\(\s*["'](\d\d\.\d+)["']""", re.M)


def _check_cells(path: Path) -> dict[str, str]:
    """key -> the stored stdout of the cell that checks it."""
    found = {}
    for cell in nbformat.read(path, 4).cells:
        if cell.cell_type != "code":
            continue
        for key in CHECK.findall(cell.source):
            found[key] = "".join(o.get("text", "") for o in cell.get("outputs", []))
    return found


def _cases() -> list[tuple[str, str]]:
    return [(p.name, key) for p in NOTEBOOKS for key in _check_cells(p)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_notebook_has_three_checked_exercises(path: Path) -> None:
    keys = sorted(_check_cells(path))
    nn = path.name[:2]
    assert len(keys) >= 3, f"{path.name}: expected at least 3 check cells, found {keys}"
    assert all(k.startswith(nn + ".") for k in keys), f"{path.name}: keys {keys} not {nn}.*"
    registered = sorted(ex.exercises(nn))
    assert registered == keys, f"{path.name}: checked {keys}, registered {registered}"


@pytest.mark.parametrize("name,key", _cases())
def test_exercise_both_directions(name: str, key: str) -> None:
    nn = key.split(".")[0]
    stored = _check_cells(ROOT / "notebooks" / name)[key]
    assert stored.startswith(f"✗ {key} not yet:"), (
        f"{name}: the check cell of {key} must show the untouched starter failing: {stored!r}"
    )
    sol = importlib.import_module(f"solutions.nb{nn}")
    assert key in sol.SOLUTIONS, f"solutions/nb{nn}.py has no solution for {key}"
    ok, message = ex.judge(key, sol.SOLUTIONS[key])
    assert ok, f"the worked solution of {key} fails its own check: {message}"
    assert ex.judge(key, ...) == (False, ex.NOT_STARTED)
    called = _revealed_names(key)
    wrong = sol.WRONG.get(key, [])
    assert wrong, f"solutions/nb{nn}.py lists no typical wrong answer for {key}"
    for answer, words in wrong:
        ok, hint = ex.judge(key, answer)
        assert not ok, f"{key}: the wrong answer {answer!r} passed the check"
        assert words.lower() in hint.lower(), (
            f"{key}: hint for {answer!r} is {hint!r}, lacks {words!r}"
        )
        assert hint != ex.NOT_STARTED, f"{key}: a wrong answer got the generic starter message"
        given = sorted(n for n in called if re.search(rf"\b{re.escape(n)}\b", hint))
        assert not given, (
            f"{key}: the first hint for {answer!r} names {given}, which the third step reveals: "
            f"{hint!r}"
        )
        assert ex.LOOK.split(":")[0] not in hint, f"{key}: a first hint shows the second step"


def _prompts(path: Path) -> dict[str, str]:
    """key -> the text a student reads before checking it: the exercise's markdown cell and its
    starter cells (everything tagged `exercise` since the previous check cell)."""
    found, since = {}, []
    for cell in nbformat.read(path, 4).cells:
        if "exercise" not in cell.get("metadata", {}).get("tags", []):
            continue
        keys = CHECK.findall(cell.source) if cell.cell_type == "code" else []
        if keys:
            for key in keys:
                found[key] = "\n".join(since)
            since = []
        else:
            since.append(cell.source)
    return found


@pytest.mark.parametrize("name,key", _cases())
def test_steps_are_given_and_the_prompt_does_not_reveal(name: str, key: str) -> None:
    exercise = ex._load(key)
    assert exercise.look and exercise.reveal, (
        f"{key}: give the exercise `look=` (where to look) and `reveal=` (what computes the "
        "answer), the hints' second and third steps"
    )
    prompt = _prompts(ROOT / "notebooks" / name)[key]
    named = sorted(n for n in _revealed_names(key) if re.search(rf"\b{re.escape(n)}\b", prompt))
    assert not named, f"{name}: the prompt or starter of {key} names {named}, which `reveal` holds"


def _is_code(key: str) -> bool:
    sol = importlib.import_module(f"solutions.nb{key.split('.')[0]}").SOLUTIONS[key]
    return callable(sol) and getattr(sol, "__module__", "").startswith("solutions.")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_notebook_has_a_coding_exercise_with_hidden_cases(path: Path) -> None:
    nn = path.name[:2]
    coding = [k for k in sorted(_check_cells(path)) if _is_code(k)]
    assert coding, f"{path.name}: no exercise whose answer is code the student writes"
    wrong = importlib.import_module(f"solutions.nb{nn}").WRONG
    hidden = [k for k in coding if any("a hidden case" in w for _, w in wrong.get(k, []))]
    assert hidden, (
        f"{path.name}: coding exercises {coding} list no WRONG answer (one that passes the shown "
        "case by heart) failing with 'a hidden case'"
    )


def _revealed_names(key: str) -> set[str]:
    """The helpers a reveal names: `pp.simulate(...)` -> {"simulate"}; `tp.ring_bytes` ->
    {"ring_bytes"}: the called or dotted names inside its code spans."""
    reveal = ex._load(key).reveal or ""
    names = set()
    for span in re.findall(r"`([^`]+)`", reveal):
        names |= set(re.findall(r"([A-Za-z_]\w{3,})\s*\(", span))
        names |= set(re.findall(r"\.([A-Za-z_]\w{3,})", span))
    return names


def test_hints_step_on_with_each_wrong_try(capsys: pytest.CaptureFixture) -> None:
    @ex.exercise("99.2", "a stepped exercise", look=ex.N_("section 9"), reveal=ex.N_("`f(1)`"))
    def _judge(answer):
        if answer != 42:
            raise ex.Hint("think about the units")
        return "42 it is"

    ex._attempts.pop("99.2", None)
    for answer in (..., 41, 40, ..., 39, 42):
        ex.check("99.2", answer)
    assert capsys.readouterr().out.splitlines() == [
        f"✗ 99.2 not yet: {ex.NOT_STARTED}",
        "✗ 99.2 not yet: think about the units",
        "✗ 99.2 not yet: think about the units",
        "  Where to look: section 9",
        f"✗ 99.2 not yet: {ex.NOT_STARTED}",
        "✗ 99.2 not yet: think about the units",
        "  Where to look: section 9",
        "  What computes it: `f(1)`",
        "✓ 99.2 correct: 42 it is",
        "  Checked against: `f(1)`",
    ]

    @ex.exercise("99.4", "a check that could not run", look=ex.N_("here"), reveal=ex.N_("`g()`"))
    def _not_run(answer):
        if answer == "flaky":
            raise ex.Hint("the check could not run; run this cell again", counts=False)
        raise ex.Hint("not that")

    ex._attempts.pop("99.4", None)
    for answer in ("flaky", 1, "flaky", 2):
        ex.check("99.4", answer)
    assert capsys.readouterr().out.splitlines() == [
        "✗ 99.4 not yet: the check could not run; run this cell again",
        "✗ 99.4 not yet: not that",
        "✗ 99.4 not yet: the check could not run; run this cell again",
        "✗ 99.4 not yet: not that",
        "  Where to look: here",
    ]
    long = ex.verdict("99.3", False, "word " * 40)
    assert all(len(line) <= ex.WIDTH for line in long.splitlines()), long
    words = [w for line in long.splitlines() for w in line.split()]
    assert words == ["✗", "99.3", "not", "yet:"] + ["word"] * 40, long


def test_check_never_raises_and_names_the_exception(capsys: pytest.CaptureFixture) -> None:
    @ex.exercise("99.1", "a test exercise")
    def _judge(answer):
        if answer() != 42:
            raise ex.Hint("the answer is a number between 40 and 45")
        return "42"

    ex.check("99.1", ...)
    ex.check("99.1", lambda: 41)
    ex.check("99.1", lambda: 1 / 0)
    ex.check("99.1", lambda: 42)

    def starter():
        """Return the answer."""
        ...  # TODO

    ex.check("99.1", starter)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"✗ 99.1 not yet: {ex.NOT_STARTED}",
        "✗ 99.1 not yet: the answer is a number between 40 and 45",
        "✗ 99.1 not yet: your code raised ZeroDivisionError: division by zero",
        "✓ 99.1 correct: 42",
        f"✗ 99.1 not yet: {ex.NOT_STARTED}",
    ]


def _student_worker(rank, world_size, value):
    t = torch.tensor([float(value + rank)])  # noqa: F821
    dist.all_reduce(t)  # noqa: F821
    return t.item()


def test_launch_source_runs_a_function_the_workers_cannot_import() -> None:
    # _student_worker uses `torch` and `dist` without importing them here: launch_source's
    # prelude provides them, as it does for a function typed in a notebook.
    result = ex.launch_source(_student_worker, world_size=2, args=(1,))
    assert list(result) == [3.0, 3.0], f"expected the all-reduced sum on both ranks, found {result}"
