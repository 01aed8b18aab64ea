"""Graded assignments (issue 37): built from the judges by tools/assign.py, graded by nbgrader.

The round trip, for real: the torch.compile path's assignment cut to notebook 00 (the cheapest
notebook to execute, 3.5 s of cells, with a coding exercise, 00.1, whose judge runs hidden
cases), in English and in Chinese, in a temporary folder; `nbgrader generate_assignment` writes
the release; three submissions per language go into `submitted/`:

- `solutions`: every starter with its worked solution (solutions/nb00.py, as the source
  notebook's solution region writes it), which must get full marks;
- `starters`: the release as the student receives it, untouched, which must get zero;
- `wrong`: 00.1 answered with the typical wrong answer of `WRONG` that passes the shown case
  and fails "a hidden case" (the other starters untouched), which must get
  `HIDDEN_ONLY` of 00.1's points, with that hint, in the submission's language, in its feedback.

`tools.assign.roundtrip` builds, submits, runs one `nbgrader autograde "torch-compile*"` over the
six and reads the grades back: what `nbgrader export` writes (grades.csv) and the per-student
files (`tools/assign.py grades`).
Also here, without nbgrader: the scoring rule of `helpers.exercises.score`, and every exercise of
every notebook turned into a source notebook (a solution region whose code gives the worked
solution, a hidden test with its points), so that `make assignments` works for every path.
"""

from __future__ import annotations

import csv
import importlib
import re
from pathlib import Path

import nbformat
import pytest

from helpers import exercises as ex
from helpers.exercises.i18n import language
from tools import assign

ROOT = Path(__file__).resolve().parents[1]
PATH = "compile"  # the course path: 00, 01, 02, 03
NB = "00"
KEY = "00.1"  # 00's coding exercise
LANGS = ("en", "zh")
STUDENTS = assign.STUDENTS
# nbgrader 0.9.5's gradebook model, on SQLAlchemy 2, warns when nbgrader.api is imported
pytestmark = pytest.mark.filterwarnings("ignore:User-placed attribute Grade")


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _squeeze(text: str) -> str:
    """Text without whitespace: a verdict is wrapped (`helpers.exercises.verdict`)."""
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("assignments")
    folder, rows, run = assign.roundtrip(PATH, notebooks=[NB], out=out)
    return {"folder": folder, "base": folder.name, "rows": rows, "log": run.stderr}


def test_release_has_no_solution_and_the_gradebook_has_the_hidden_tests(graded: dict) -> None:
    folder, base = graded["folder"], graded["base"]
    release_dir = folder / "release"
    shipped = sorted(p.relative_to(release_dir).as_posix() for p in release_dir.rglob("*"))
    assert shipped == [
        f"{base}",
        f"{base}-zh",
        f"{base}-zh/00_orientation.ipynb",
        f"{base}/00_orientation.ipynb",
    ], shipped
    course = nbformat.read(ROOT / "notebooks" / "00_orientation.ipynb", 4)
    starters = {e.key: course.cells[e.starter].source for e in assign.exercises_of(course)}
    for lang in LANGS:
        name = assign.assignment_name(base, lang)
        release = nbformat.read(folder / "release" / name / "00_orientation.ipynb", 4)
        text = "\n".join(c.source for c in release.cells)
        for marker in ("BEGIN SOLUTION", "HIDDEN TESTS", "grade(", "getsourcefile(inspect.unwrap"):
            assert marker not in text, f"{name}: the release holds {marker!r}"
        exercises = assign.exercises_of(release)
        assert [e.key for e in exercises] == ["00.1", "00.2", "00.3", "00.4"]
        for e in exercises:
            assert release.cells[e.starter].source.rstrip() == starters[e.key], e.key
            meta = release.cells[e.check].metadata["nbgrader"]
            assert meta["grade"] and meta["locked"] and meta["points"] == assign.points(e.key)
        assert assign.points(KEY) == ex.POINTS["code"] and assign.points("00.2") == 1
        has_zh_cell = any(_grade_id(c) == "language" for c in release.cells)
        assert has_zh_cell == (lang == "zh"), f"{name}: the PSR_LANG cell"
        source = nbformat.read(folder / "source" / name / "00_orientation.ipynb", 4)
        hidden = [c.source for c in source.cells if _grade_id(c).startswith("check_")]
        assert all(assign.BEGIN_HIDDEN in s and "grade(" in s for s in hidden), hidden


@pytest.mark.parametrize("lang", LANGS)
def test_solutions_full_starters_zero_wrong_partial_with_its_hint(graded: dict, lang: str) -> None:
    folder, rows = graded["folder"], graded["rows"]
    name = assign.assignment_name(graded["base"], lang)
    mine = {s: [r for r in rows[s] if r["assignment"] == name] for s in STUDENTS}
    maximum = sum(r["max_score"] for r in mine["solutions"] if r["exercise"] != "total")
    assert maximum == 2 + 1 + 1 + 1
    log = graded["log"][-3000:]
    for r in mine["solutions"]:
        assert r["score"] == r["max_score"], f"{name}: solutions lost points: {r}\n{log}"
    for r in mine["starters"]:
        assert r["score"] == 0, f"{name}: an untouched starter scored: {r}\n{log}"
    wrong = {r["exercise"]: r for r in mine["wrong"]}
    partial = wrong[KEY]
    assert partial["score"] == ex.HIDDEN_ONLY * partial["max_score"] == 1.0, partial
    assert wrong["total"]["score"] == 1.0, wrong["total"]
    answer = importlib.import_module(f"solutions.nb{NB}").WRONG[KEY][assign.hidden_case_wrong(KEY)][
        0
    ]
    with language(lang):
        ok, hint = ex.judge(KEY, answer)
    assert not ok
    assert _squeeze(hint) in _squeeze(partial["feedback"]), (
        f"{name}: the wrong answer's feedback lacks its hint {hint!r}: {partial['feedback']!r}"
    )
    mark = "a hidden case" if lang == "en" else "隐藏"
    assert mark in partial["feedback"], partial["feedback"]
    # what `nbgrader export` writes: one row per student and assignment
    with (folder / "grades.csv").open(encoding="utf-8") as fh:
        exported = {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == name}
    assert {s: float(exported[s]["score"]) for s in STUDENTS} == {
        "solutions": 5.0,
        "starters": 0.0,
        "wrong": 1.0,
    }
    with (folder / "grades" / "wrong.csv").open(encoding="utf-8") as fh:
        per_student = {(r["assignment"], r["exercise"]): r for r in csv.DictReader(fh)}
    assert float(per_student[(name, KEY)]["score"]) == 1.0
    assert _squeeze(hint) in _squeeze(per_student[(name, KEY)]["feedback"])


@pytest.mark.parametrize("lang", LANGS)
def test_the_scoring_rule(lang: str) -> None:
    sol = importlib.import_module(f"solutions.nb{NB}")
    hidden = sol.WRONG[KEY][assign.hidden_case_wrong(KEY)][0]
    # a wrong answer that fails a shown case (the helper refused): nothing
    other = next(a for a, _ in sol.WRONG[KEY] if "a hidden case" not in ex.judge(KEY, a)[1])
    with language(lang):
        assert ex.score(KEY, sol.SOLUTIONS[KEY])[0] == 1.0
        assert ex.score(KEY, ...)[0] == 0.0
        fraction, shown = ex.score(KEY, hidden)
        assert fraction == ex.HIDDEN_ONLY and shown.startswith("✗ 00.1"), shown
        assert ex.score(KEY, other)[0] == 0.0
        assert ex.grade(KEY, hidden, 2) == 1.0 and ex.grade("00.2", ..., 1) == 0.0
        assert ex.grade("00.2", sol.SOLUTIONS["00.2"], 1) == 1.0
        # a hint never steps on in grading: no "where to look" however often it is asked
        look = ex.tr(ex._load("00.2").look)
        for _ in range(3):
            assert look not in ex.score("00.2", {"aten::linear"})[1]


def test_every_exercise_becomes_a_solution_region_and_a_hidden_test() -> None:
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = assign.source_notebook(path, "en")
        found = assign.exercises_of(nb)
        assert found, path.name
        for e in found:
            starter, check = nb.cells[e.starter], nb.cells[e.check]
            assert starter.metadata["nbgrader"]["solution"], e.key
            assert assign.BEGIN_SOLUTION in starter.source, e.key
            want = f'grade("{e.key}", {e.target}, {assign.points(e.key)})'
            assert want in check.source, (e.key, check.source)
            assert check.metadata["nbgrader"]["points"] == assign.points(e.key)
            # the written-out solution runs alone and gives the worked solution's value
            code = assign.without_markers(starter.source.split(assign.BEGIN_SOLUTION, 1)[1])
            value = importlib.import_module(f"solutions.nb{e.key[:2]}").SOLUTIONS[e.key]
            if callable(value):
                continue  # a function: the round trip runs one (00.1); judging needs ranks
            namespace: dict = {}
            exec(compile(code, f"<{e.key}>", "exec"), namespace)  # noqa: S102
            got = eval(e.target, namespace)  # noqa: S307
            same = got == value or repr(got) == repr(value)  # torch.export's Dim has no __eq__
            assert same, f"{e.key}: the written-out solution gives {got!r}, not {value!r}"


@pytest.mark.parametrize("key", [KEY, "12.2", "14.4", "18.3"])
def test_the_students_own_text_earns_no_half_points(key: str) -> None:
    """R41S-EX-3: half points come from the judge's msgids, never from the student's words: an
    error (or a Hint of the student's own) that says "a hidden case" on the shown case is 0.
    R43S-1 (game K): nor a `Refusal` of the student's own, the one kind of Hint `run_answer` and
    the judges let through, even given a traceback that ends in src/helpers (`with_traceback`),
    nor a Hint given one: only a Refusal a judge made (`_refusal`) passes for the judge's."""

    def says_hidden(*args):
        raise ValueError("a hidden case")

    def own_hint(*args):
        raise ex.Hint(ex.tr("a hidden case ({case}): {problem}", case="x", problem="y"))

    def helpers_traceback():
        try:
            ex._load("no such key")  # any error raised by code in src/helpers
        except KeyError as e:
            return e.__traceback__
        raise AssertionError("expected _load to raise KeyError")

    def own_refusal(*args):
        raise ex.Refusal(ex.tr("a hidden case"))

    def borrowed_refusal(*args):  # game K
        raise ex.Refusal(ex.tr("a hidden case")).with_traceback(helpers_traceback())

    def borrowed_hint(*args):
        raise ex.Hint(ex.tr("a hidden case")).with_traceback(helpers_traceback())

    def judges_refusal_retold(*args):  # a judge's refusal, its message changed after
        refusal = ex._refusal(ex.tr("your function starts a process ({call})", call="x"))
        refusal.message = ex.tr("a hidden case")
        raise refusal.with_traceback(helpers_traceback())

    assert ex._recorded(ex._refusal("x")) and not ex._recorded(ex.Refusal("x"))
    answers = (says_hidden, own_hint, own_refusal, borrowed_refusal, borrowed_hint,
               judges_refusal_retold)  # fmt: skip
    for answer in answers:
        for lang in LANGS:
            with language(lang):
                fraction, shown = ex.score(key, answer)
            assert fraction == 0.0, (key, answer.__name__, shown)
