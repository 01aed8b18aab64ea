"""notebooks/course.toml is the one source of what each notebook requires and teaches.

Each notebook's **Prerequisites** paragraph, 00's table and reading order, the README tables
(English and Chinese) and the book index's reading order and course paths are generated from it by
tools/course.py; these tests fail, naming the notebook or the file, where one of them differs, and
where a prerequisite's reason names something the prerequisite notebook does not contain (each
reason carries terms that must appear in that notebook's cells). Each rule is proven on a small
synthetic case that breaks it.
"""

from __future__ import annotations

import copy
import re
import shutil
import tomllib

import polib
import pytest

from tools import course as C
from tools import zh

COURSE = C.load()
FILES = C.notebook_files()
DATA = tomllib.loads(C.DATA.read_text())


def _title(number: int) -> str:
    return C._markdown(C._read_nb(FILES[number]))[0]["source"]


def _text(number: int) -> str:
    return C.cell_text(C._read_nb(FILES[number])["cells"])


def _synthetic(**notebooks: dict) -> C.Course:
    """A course of the given notebooks ({"n16": {...}}), each entry as course.toml writes it."""
    base = {
        "title": "T",
        "title_zh": "标题",
        "summary": "s",
        "summary_zh": "摘要",
        "runs_on": "cpu",
    }
    entries = [{"number": int(k[1:]), **base, **v} for k, v in notebooks.items()]
    numbers = [e["number"] for e in entries]
    return C.parse(
        {"runs_on": DATA["runs_on"], "notebook": entries, "path": [{"notebooks": numbers}]}
    )


# --------------------------------------------------------------------------------------------
# the repository
# --------------------------------------------------------------------------------------------


def test_every_notebook_has_an_entry_and_builds_on_earlier_ones() -> None:
    problems = C.structure_problems(COURSE, FILES)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("number", sorted(FILES), ids=lambda n: FILES[n].name)
def test_prerequisites_line_matches_course_toml(number: int) -> None:
    problems = C.prereq_problems(COURSE, number, _title(number), FILES[number].name)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("number", sorted(FILES), ids=lambda n: FILES[n].name)
def test_each_prerequisite_teaches_what_its_reason_says(number: int) -> None:
    required = COURSE.notebooks[number].requires
    texts = {r.number: _text(r.number) for r in required}
    one = C.Course({number: COURSE.notebooks[number]}, [])
    problems = C.reason_problems(one, texts)
    assert not problems, "\n".join(problems)


def test_orientation_table_matches_course_toml() -> None:
    cell = C.orientation_cell(C._read_nb(FILES[0]))
    expected = C.orientation_block(COURSE, "en")
    problems = C.block_problems(cell["source"], "table", expected, f"{FILES[0].name} cell 2")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "target",
    C.doc_targets(COURSE, FILES),
    ids=lambda t: f"{t[0].relative_to(C.ROOT)}:{t[1]}",
)
def test_generated_block_matches_course_toml(target) -> None:
    path, name, expected = target
    problems = C.block_problems(path.read_text(), name, expected, str(path.relative_to(C.ROOT)))
    assert not problems, "\n".join(problems)


def test_generated_chinese_follows_the_style_sheet() -> None:
    texts = {f"{nn:02d} 前置知识": C.prereq_line(nb, "zh") for nn, nb in COURSE.notebooks.items()}
    texts["00 table"] = C.orientation_block(COURSE, "zh")
    texts["README.zh.md"] = C.readme_block(COURSE, "zh", FILES)
    texts["index.zh.md paths"] = C.paths_block(COURSE, "zh", FILES)
    found = {k: zh.style_problems(v) for k, v in texts.items()}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"generated Chinese that breaks the style sheet: {found}"


def test_teaching_guide_lists_the_same_paths() -> None:
    """docs/teaching.md's path table names the notebooks of each course path (and the capstone's
    prerequisites), as course.toml does."""
    rows = _teaching_rows((C.ROOT / "docs" / "teaching.md").read_text())
    expected = []
    for p in COURSE.paths:
        after = sorted({r.number for n in p.notebooks for r in COURSE.notebooks[n].requires})
        expected.append(p.notebooks + p.reading + (after if p.capstone else []))
    assert rows == expected, (
        f"docs/teaching.md's course paths: expected {expected} (course.toml), found {rows}"
    )


# --------------------------------------------------------------------------------------------
# each rule against a case that breaks it
# --------------------------------------------------------------------------------------------

SIXTEEN = {
    "n04": {},
    "n06": {},
    "n16": {
        "requires": [
            {
                "number": 4,
                "reason": "collectives",
                "reason_zh": "集合通信",
                "terms": ["all_gather"],
            },
            {"number": 6, "reason": "DDP internals", "reason_zh": "DDP", "terms": ["Reducer"]},
        ]
    },
}


def test_a_prerequisites_line_that_differs_is_named() -> None:
    course = _synthetic(**SIXTEEN)
    cell = (
        "# 16 · Pipeline\n\n**You will learn**\n- a\n\n"
        "**Prerequisites**: notebooks 04 (collectives and point-to-point), 06 (DDP internals).\n"
    )
    problems = C.prereq_problems(course, 16, cell, "16_pipeline.ipynb")
    assert len(problems) == 1 and problems[0].startswith("16_pipeline.ipynb:"), problems
    assert "notebooks 04 (collectives) and 06 (DDP internals)." in problems[0], problems
    fixed = C.set_prereq(cell, C.prereq_line(course.notebooks[16], "en"), "en")
    assert C.prereq_problems(course, 16, fixed, "16_pipeline.ipynb") == []
    assert fixed.startswith("# 16 · Pipeline\n\n**You will learn**\n- a\n\n") and fixed.endswith(
        ".\n"
    ), f"only the paragraph may change, found {fixed!r}"
    # 17 writes the colon inside the bold: still found, and replaced
    odd = cell.replace("**Prerequisites**:", "**Prerequisites:**")
    assert C.prereq_problems(course, 16, odd, "16_pipeline.ipynb"), "the old spelling passed"
    missing = C.prereq_problems(course, 16, "# 16 · Pipeline\n", "16_pipeline.ipynb")
    assert missing and "(none)" in missing[0], missing


def test_a_reason_its_notebook_does_not_teach_is_named() -> None:
    """The case that started it: 04 named for point-to-point, which 05 teaches, not 04."""
    point_to_point = {
        "number": 4,
        "reason": "collectives and point-to-point",
        "reason_zh": "集合通信与点对点",
        "terms": ["isend", "irecv"],
    }
    course = _synthetic(n04={}, n05={}, n16={"requires": [point_to_point]})
    problems = C.reason_problems(course, {4: _text(4)})
    assert len(problems) == 1 and problems[0].startswith("notebook 16:"), problems
    assert "['isend', 'irecv']" in problems[0] and "notebook 04" in problems[0], problems
    moved = copy.deepcopy(point_to_point) | {"number": 5}
    course = _synthetic(n04={}, n05={}, n16={"requires": [moved]})
    assert C.reason_problems(course, {5: _text(5)}) == [], "05 teaches isend/irecv"


def test_terms_match_across_line_breaks_only() -> None:
    course = _synthetic(
        n02={},
        n03={"requires": [{"number": 2, "reason": "r", "reason_zh": "r", "terms": ["FX graph"]}]},
    )
    assert C.reason_problems(course, {2: C.normalized("a node to an FX\ngraph")}) == []
    assert C.reason_problems(course, {2: C.normalized("a node to an FX tree")}), "FX tree passed"


def test_a_prerequisite_that_is_not_earlier_is_named() -> None:
    later = {"number": 17, "reason": "r", "reason_zh": "r", "terms": ["x"]}
    course = _synthetic(n16={"requires": [later]}, n17={})
    files = {16: C.NOTEBOOKS / "16_a.ipynb", 17: C.NOTEBOOKS / "17_b.ipynb"}
    problems = C.structure_problems(course, files)
    assert problems == [
        "notebook 16: requires 17, which is not an earlier notebook (the numbering is the "
        "reading order)"
    ], problems
    no_terms = {"number": 16, "reason": "r", "reason_zh": "r", "terms": []}
    course = _synthetic(n16={}, n17={"requires": [no_terms]})
    assert C.structure_problems(course, files) == ["notebook 17: the reason for 16 has no terms"]


def test_a_notebook_without_an_entry_is_named() -> None:
    course = _synthetic(n16={})
    files = {16: C.NOTEBOOKS / "16_a.ipynb", 19: C.NOTEBOOKS / "19_new_topic.ipynb"}
    problems = C.structure_problems(course, files)
    assert "19_new_topic.ipynb: no entry in notebooks/course.toml" in problems, problems
    assert "notebook 19: on no course path" not in problems  # no entry: said once
    off_path = _synthetic(n16={}, n17={})
    off_path.paths[0].notebooks.remove(17)
    files = {16: C.NOTEBOOKS / "16_a.ipynb", 17: C.NOTEBOOKS / "17_b.ipynb"}
    assert C.structure_problems(off_path, files) == ["notebook 17: on no course path"]


def test_an_edited_or_missing_block_is_named() -> None:
    expected = C.readme_block(COURSE, "en", FILES)
    text = C.write_block("before\n<!-- course:notebooks -->\n<!-- /course:notebooks -->\nafter\n",
                         "notebooks", expected)  # fmt: skip
    assert C.block_problems(text, "notebooks", expected, "README.md") == []
    assert text.startswith("before\n") and text.endswith("\nafter\n"), text[:80]
    edited = text.replace("| 04 |", "| 04 | ", 1).replace("collectives", "collective ops", 1)
    problems = C.block_problems(edited, "notebooks", expected, "README.md")
    assert problems and problems[0].startswith("README.md: the course:notebooks block"), problems
    gone = C.block_problems("no markers here", "notebooks", expected, "README.md")
    assert gone and "no <!-- course:notebooks --> block" in gone[0], gone


def test_mark_table_puts_markers_around_the_table_only() -> None:
    head = C.TABLE_HEAD["readme"]["zh"]
    text = f"## 一览\n\n{head}\n|---|\n| 00 | x |\n\n## 下一节\n正文\n"
    marked = C.mark_table(text, "notebooks", head)
    assert C.read_block(marked, "notebooks") == f"{head}\n|---|\n| 00 | x |"
    assert marked.startswith("## 一览\n\n<!-- course:") and marked.endswith("\n\n## 下一节\n正文\n")
    assert C.mark_table(marked, "notebooks", head) == marked, "marking twice changed the text"


@pytest.mark.parametrize(
    "lang, paragraph",
    [
        ("en", "Read 01-03 in order, 18 on 00, 03 and 10. The plumbing lives in `src/helpers/`."),
        (
            "zh",
            "编译器部分请按顺序读 01-03，18 建立在 00、03 和 10 之上。\n"
            "各 notebook 共用的底层代码在 `src/helpers/` 中。",
        ),
    ],
)
def test_mark_orientation_keeps_the_sentence_it_does_not_generate(lang, paragraph) -> None:
    cell = f"## 1. X\n\nIntro.\n\n| # | notebook |\n|---|---|\n| 00 | y |\n\n{paragraph}"
    marked = C.mark_orientation(cell)
    block = C.read_block(marked, "table")
    assert block.startswith("| # | notebook |") and "01-03" in block, block
    assert "src/helpers/" not in block, f"the kept sentence went into the block: {block!r}"
    tail = marked.split("<!-- /course:table -->")[1]
    assert "src/helpers/" in tail and "01-03" not in tail, tail


def test_set_prereq_keeps_the_cells_wrapping() -> None:
    line = "**Prerequisites**: " + "word " * 40 + "end."
    wrapped = C.set_prereq("# 01 · T\n\n**Prerequisites**: old\ntext\n", line, "en")
    assert max(len(x) for x in wrapped.splitlines()) <= C.WIDTH and wrapped.count("\n") > 4
    long_cell = "# 01 · T\n\n- " + "x" * 120 + "\n\n**Prerequisites**: old\n"
    one = C.set_prereq(long_cell, line, "en")
    assert line in one.splitlines(), "a cell of unwrapped lines got a wrapped paragraph"


def test_chinese_lists_are_spaced_as_the_style_sheet_says() -> None:
    assert C.join(["04（集合通信）", "05（AllReduce）"], "zh") == "04（集合通信）和 05（AllReduce）"
    assert C.join(["04", "05", "06"], "zh") == "04、05 和 06"
    assert C.numbers([1, 2, 3, 6, 8], "en") == "01-03, 06 and 08"
    assert zh.style_problems("04（集合通信） 和 05"), "the style sheet lets a stray space pass"


def _catalog_copy(tmp_path, monkeypatch, number: int) -> polib.POFile:
    monkeypatch.setattr(zh, "LOCALE", tmp_path)
    shutil.copy(C.ROOT / "locale" / "zh" / (FILES[number].stem + ".po"), tmp_path)
    return polib.pofile(str(tmp_path / (FILES[number].stem + ".po")), wrapwidth=0)


@pytest.mark.parametrize("elsewhere", [False, True], ids=["prereq only", "changed elsewhere"])
def test_apply_zh_writes_the_line_and_clears_fuzzy_only_when_nothing_else_changed(
    tmp_path, monkeypatch, elsewhere: bool
) -> None:
    """A catalog whose title entry was translated for an older Prerequisites paragraph: the
    generated 前置知识 line goes in; `fuzzy` is cleared only if the English changed there alone."""
    po = _catalog_copy(tmp_path, monkeypatch, 8)
    title = C._markdown(C._read_nb(FILES[8]))[0]
    (entry,) = [e for e in po if e.msgctxt.split(":")[0] == title["id"]]
    old = C.set_prereq(title["source"], "**Prerequisites**: an older line.", "en")
    if elsewhere:
        old = old.replace("**You will learn**", "**You will learn (old)**")
    entry.msgid, entry.msgctxt = old, f"{title['id']}:{zh.source_hash(old)}"
    entry.msgstr = C.set_prereq(entry.msgstr, "**前置知识**：旧的一行。", "zh")
    po.save(str(tmp_path / (FILES[8].stem + ".po")))
    report = C.apply_zh(["08"])
    (entry,) = [e for e in polib.pofile(str(tmp_path / (FILES[8].stem + ".po"))) if
                e.msgctxt.split(":")[0] == title["id"]]  # fmt: skip
    assert C.prereq_line(COURSE.notebooks[8], "zh") in entry.msgstr.split("\n"), entry.msgstr
    assert "旧的一行" not in entry.msgstr
    assert entry.msgid == title["source"], "the entry is not keyed to the current English"
    assert entry.fuzzy == elsewhere, f"fuzzy {entry.fuzzy}, report {report}"


def test_apply_prereqs_rewrites_only_a_paragraph_that_differs(tmp_path) -> None:
    import nbformat

    course = _synthetic(**SIXTEEN)
    line = C.prereq_line(course.notebooks[16], "en")
    rewrapped = line.replace(" and ", "\nand ", 1)
    for paragraph, changes in ((rewrapped, False), ("**Prerequisites**: old.", True)):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# 16 · P\n\n{paragraph}")]
        nb.cells[0].id = "title"
        path = tmp_path / "16_p.ipynb"
        nbformat.write(nb, path)
        assert C.apply_prereqs([path], course) == (["16_p.ipynb"] if changes else [])
        cell = nbformat.read(path, 4).cells[0]
        assert cell.id == "title", "the cell id changed"
        expected = f"# 16 · P\n\n{line}" if changes else f"# 16 · P\n\n{rewrapped}"
        assert cell.source == expected, cell.source


def _teaching_rows(text: str) -> list[list[int]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and re.match(r"\d\d", cells[2]):
            rows.append([int(n) for n in re.findall(r"\d\d", cells[2])])
    return rows


def test_teaching_rows_are_read_from_the_table_only() -> None:
    table = (
        "| Path | Length | Notebooks | Time |\n|---|---|---|---|\n"
        "| torch.compile | 90 min | 00, 01, 02, 03 | 35 s |\n"
        "| Distributed | 90 min | 04, 05 (13 as reading) | 1 s |\n\nProse with 04 and 05.\n"
    )
    assert _teaching_rows(table) == [[0, 1, 2, 3], [4, 5, 13]]


def test_gpu_label_only_where_the_notebook_would_use_gpus() -> None:
    titles = {n: _title(n) for n in FILES}
    problems = C.runs_on_problems(COURSE, titles)
    assert not problems, "\n".join(problems)
    labelled = _synthetic(n16={"runs_on": "gpu-designed"})
    gloo = "# 16 · P\n\nEvery launch asks for gloo, so on a GPU machine it runs on the CPU\ntoo."
    assert C.runs_on_problems(labelled, {16: gloo}), "a gloo-only notebook passed as GPU-ready"
    assert C.runs_on_problems(labelled, {16: "# 16 · P\n\nWith GPUs it takes NCCL."}) == []


def test_runs_on_labels_come_from_the_dry_run_verdicts() -> None:
    """Each notebook's "runs on" label against the verdict table (src/helpers/dryrun_verdicts.json),
    derived here independently: every audited worker of a GPU-designed notebook device-checked,
    some stopped, or all launched with gloo (a worker with no device op counts neither way)."""
    verdicts = C.load_verdicts()
    labels = DATA["runs_on"]
    wrong = []
    for n, nb in sorted(COURSE.notebooks.items()):
        mine = [v for k, v in verdicts.items() if k.startswith(f"{n:02d} ")]
        gloo = [v for v in mine if v.startswith("CPU only: ")]
        gpu = [v for v in mine if not v.startswith(("CPU only: ", "no device op: "))]
        if nb.design == "cpu" or (mine and len(gloo) == len(mine)):
            key = "cpu"
        elif not gpu:
            key = "not-checked"
        elif any(v.startswith("fails: ") for v in gpu):
            key = "fails"
        elif all(v == "device-checked" for v in gpu):
            key = "device-checked"
        else:
            key = "in-part"
        if nb.runs_on != dict(zip(C.LANGS, labels[key], strict=True)):
            wrong.append(f"notebook {n:02d}: label {nb.runs_on['en']!r}, verdicts say {key!r}")
    assert not wrong, "\n".join(wrong)
    assert not C.design_problems(COURSE, verdicts), C.design_problems(COURSE, verdicts)


@pytest.mark.parametrize(
    "verdicts, key",
    [
        ({"16 a": "device-checked", "16 b": "device-checked"}, "device-checked"),
        ({"16 a": "device-checked", "16 b": "checked up to f (NameError: x)"}, "in-part"),
        ({"16 a": "checked up to f (x)", "16 b": "fails: aten.add cpu and cuda"}, "fails"),
        ({"16 a": "CPU only: the notebook launches it with backend='gloo'"}, "cpu"),
        ({"04 a": "device-checked"}, "not-checked"),
        (
            {"16 a": "device-checked", "16 b": "no device op: nothing ran on the device"},
            "device-checked",
        ),
        ({"16 a": "no device op: nothing ran on the device"}, "not-checked"),
    ],
    ids=[
        "all checked",
        "a stop",
        "a failure",
        "gloo only",
        "no worker",
        "one without device op",
        "none on the device",
    ],
)
def test_a_verdict_table_gives_the_label_it_shows(verdicts, key) -> None:
    course = C.parse(
        {
            "runs_on": DATA["runs_on"],
            "notebook": [{"number": 16, "title": "T", "summary": "s", "runs_on": "gpu-designed"}],
            "path": [{"notebooks": [16]}],
        },
        verdicts,
    )
    assert course.notebooks[16].runs_on["en"] == DATA["runs_on"][key][0], course.notebooks[16]
    gloo = {"16 a": "CPU only: the notebook launches it with backend='gloo'"}
    assert C.design_problems(course, gloo), "a gloo-only notebook passed as GPU-designed"
    gloo_design = {"number": 16, "title": "T", "summary": "s", "runs_on": "cpu"}
    data = {"runs_on": DATA["runs_on"], "notebook": [gloo_design], "path": [{"notebooks": [16]}]}
    label = C.parse(data, verdicts).notebooks[16].runs_on["en"]
    assert label == "CPU", f"a notebook whose launches ask for gloo got {label!r}"
