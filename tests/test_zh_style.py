"""The Chinese edition's style sheet (tools/zh.py `style_problems`, `tidy`), on the catalogs.

What a program can check of the typography that PyTorch 中文文档 and 《动手学深度学习》 follow:
- one space between Chinese and Latin letters, digits, inline code or math (00, 02 and 03 once
  had none, the others one), none next to Chinese punctuation;
- no stray space where emphasis or a Chinese quote meets Chinese text, including the space
  Markdown makes of a line break there (a wrapped catalog line that ends in Chinese and goes on
  with `**` or a quote);
- Chinese punctuation in Chinese sentences (，；：？！ and full-width parentheses around Chinese);
- Chinese forms of the standard labels ("Then vs now" is 新旧对照; the calque 「（下面检查）」 is
  「（下面的单元格会验证）」).
Code spans, math, URLs, link targets and HTML tags are left as the English has them. Each rule is
proven on a sample that breaks it; `tidy` repairs every sample.
"""

from __future__ import annotations

import re

import polib
import pytest

from tools import zh

#: Catalogs exempt while their owners are still editing them: the style sheet is theirs to apply
#: (`tools/zh.py`'s `tidy`) when they finish, so an entry goes once its catalog passes.
EXEMPT: dict[str, str] = {}  # notebook number -> the reason it is exempt (none now)

NOTEBOOKS = zh.notebooks()

BAD = {
    "no space between Chinese and Latin": "用show_source阅读第3节",
    "no space between Latin and Chinese": "`code`的值",
    "space before Chinese punctuation": "见上文 ，然后",
    "space after Chinese punctuation": "然后， 再看",
    "space before emphasis": "这是 **重点**",
    "space after emphasis": "**小标题**正文 **重点** 在后",
    "bold that does not render": "**小标题。**正文",
    "space before a Chinese quote": "所谓 “守卫”",
    "space after a Chinese quote": "“守卫” 一词",
    "ASCII punctuation after Chinese": "它是张量, 不是列表",
    "ASCII punctuation before Chinese": "它是 x, 然后",
    "ASCII parentheses around Chinese": "中文 (说明) 结束",
    "wrapped line at emphasis": "每个进程\n**rank** 不同",
    "English label": "## 6. Then vs now",
    "punctuation inside a bold label": "**新旧对照。** “过去”一栏",
    "citation with 等 (write 等人)": "见 Goyal 等，*Accurate*；Santurkar 等（2018）报告",
}
GOOD = [
    "用 `show_source` 阅读第 3 节的 [摘录](https://example.org/a_b)。",
    "| 列 | `x` |\n|---|---|\n| （默认） | 是 |",
    "调用 f(x) 的值；形状为 (B, 1, 8, 8)。",
    "**答案格式**：二元组 `(a, b)`，先 a 后 b。",
    "**1. 小标题**。正文；**重点**。",
    "```python\nx = 1  # 中文注释,不检查\n```",
    "  （缩进的续行不算多余空格）",
]


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_rule_finds_its_break_and_tidy_repairs_it(rule: str) -> None:
    text = BAD[rule]
    found = zh.style_problems(text)
    assert any(p.startswith(rule) for p in found), f"{rule}: not found in {text!r}: {found}"
    fixed = zh.tidy(text)
    assert zh.style_problems(fixed) == [], f"tidy({text!r}) = {fixed!r} still breaks the sheet"


@pytest.mark.parametrize("text", GOOD)
def test_good_text_passes_and_tidy_leaves_it(text: str) -> None:
    assert zh.style_problems(text) == [], f"{text!r}: {zh.style_problems(text)}"
    assert zh.tidy(text) == text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_catalog_follows_the_style_sheet(path) -> None:
    if path.name[:2] in EXEMPT:
        pytest.skip(f"{path.name}: {EXEMPT[path.name[:2]]}")
    problems = [
        f"cell {e.msgctxt.split(':')[0]}: {p}"
        for e in zh.load_catalog(path)
        for p in zh.style_problems(e.msgstr)
    ]
    assert not problems, (
        f"locale/zh/{path.stem}.po breaks the style sheet in {len(problems)} place(s) "
        "(tools/zh.py `tidy` repairs the mechanical ones):\n" + "\n".join(problems)
    )


#: The Chinese pages outside the catalogs: the README, the book's landing page and the pages staged
#: into the Chinese book (docs/zh/*.md: the teaching guide, the compatibility report).
PAGES = sorted(
    [zh.ROOT / "README.zh.md", zh.ROOT / "book" / "index.zh.md", *zh.ROOT.glob("docs/zh/*.md")]
)


def test_the_chinese_pages_are_found() -> None:
    names = {p.relative_to(zh.ROOT).as_posix() for p in PAGES}
    want = {"README.zh.md", "book/index.zh.md", "docs/zh/teaching.md", "docs/zh/compatibility.md"}
    assert want <= names, f"expected the Chinese pages {sorted(want)}, found {sorted(names)}"


@pytest.mark.parametrize("path", PAGES, ids=[p.relative_to(zh.ROOT).as_posix() for p in PAGES])
def test_chinese_page_follows_the_style_sheet(path) -> None:
    """A Chinese page is held to the catalogs' style sheet and to the glossary's rejected forms
    (outside code spans and verbatim English quotations), like a notebook's twin."""
    text = path.read_text()
    problems = zh.style_problems(text)
    prose = re.sub(r"`[^`\n]+`|\(https?://[^)\s]+\)|\"[\x20-\x7e]+?\"", " ", text)
    problems += [
        f"rejected form {v!r} (the glossary says {chosen!r})"
        for chosen, rejected in zh.glossary_choices()
        for v in rejected
        if v in prose
    ]
    rel = path.relative_to(zh.ROOT).as_posix()
    assert not problems, f"{rel} breaks the style sheet in {len(problems)} place(s):\n" + "\n".join(
        problems
    )


def test_exercise_messages_follow_the_style_sheet() -> None:
    catalog = polib.pofile(str(zh.EXERCISE_CATALOG), wrapwidth=0)
    # plain text the judges print, not Markdown
    problems = [
        f"{e.msgid[:50]!r}: {p}" for e in catalog for p in zh.style_problems(e.msgstr, False)
    ]
    problems += [
        f"{e.msgid[:50]!r}: rejected form {v!r} (the glossary says {chosen!r})"
        for e in catalog
        for chosen, rejected in zh.glossary_choices()
        for v in rejected
        if v in e.msgstr
    ]
    assert not problems, "locale/zh/exercises.po:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("wrapped", "rendered"),
    [
        ("两个\n代码对象", "两个代码对象"),  # Chinese | Chinese: no space
        ("两个代码对象。\n`dis_text` 列出", "两个代码对象。`dis_text` 列出"),  # after 。
        ("见 `a.py`\n（`Details`）", "见 `a.py`（`Details`）"),  # before （
        ("在\nPyTorch 中", "在\nPyTorch 中"),  # Chinese | Latin: the break is the style's space
        ("如下：\n- 第一项", "如下：\n- 第一项"),  # a list item starts a block
        ("```\n代码。\n注释\n```", "```\n代码。\n注释\n```"),  # nothing inside a code fence
    ],
)
def test_wrapped_lines_render_without_a_stray_space(wrapped: str, rendered: str) -> None:
    """`zh.join_cjk_lines` (the twin's markdown) joins the breaks Markdown would turn into a
    space where Chinese text has none: between Chinese characters, after and before Chinese
    punctuation (ZE-A's finding: 85 such breaks in 00 and 04-15 rendered a space after 。，、)."""
    found = zh.join_cjk_lines(wrapped)
    assert found == rendered, f"expected {rendered!r} from {wrapped!r}, found {found!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_each_exercise_states_its_answer_format(path) -> None:
    """An exercise's Chinese text (its English starts with `**N. `) ends with the answer's type
    and order, `**答案格式**`: the English states it only in the starter's `# TODO:` comment."""
    catalog = polib.pofile(str(zh.catalog_path(path)), wrapwidth=0)
    exercises = [e for e in catalog if re.match(r"\*\*\d+\. ", e.msgid)]
    missing = [e.msgctxt.split(":")[0] for e in exercises if "**答案格式**" not in e.msgstr]
    assert exercises, f"{path.name}: no exercise entry (English starting with '**N. ') found"
    assert not missing, f"{path.name}: exercises without a **答案格式** line: {missing}"
